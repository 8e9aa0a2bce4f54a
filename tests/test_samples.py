"""verlog.runkit.samples: the append-only turn log the trainer writes and the report reads."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from verlog.runkit.samples import (
    SAMPLES_FILE,
    SampleWriter,
    TurnSample,
    _tail_lines,
    count_lines,
    family_of,
    pick_turns,
    read_samples,
    samples_table,
)


def sample(i: int = 0, family: str = "verlog/BabyAI-GoTo-v0", **kw: object) -> TurnSample:
    fields = dict(
        update=i // 4,
        global_step=i * 8,
        env_id=family.split(":")[0],
        family=family,
        env_index=i % 4,
        episode=i // 10,
        turn=i % 10,
        prompt=f"<|system|>Reach the goal.\n<|user|>obs {i}",
        response=f"go forward {i}",
        action="go forward",
        action_valid=True,
        reward=0.5,
        progression=0.25,
        source="train",
    )
    fields.update(kw)
    return TurnSample(**fields)  # type: ignore[arg-type]


def test_writer_appends_flushed_lines_and_never_rewrites(tmp_path: Path) -> None:
    writer = SampleWriter(tmp_path)
    writer.write(sample(0))
    writer.write_many([sample(1), sample(2)])
    # Flushed: readable before close, one JSON object per line.
    lines = (tmp_path / SAMPLES_FILE).read_text().splitlines()
    assert [json.loads(x)["response"] for x in lines] == ["go forward 0", "go forward 1", "go forward 2"]
    before = (tmp_path / SAMPLES_FILE).read_bytes()
    writer.close()
    with SampleWriter(tmp_path) as again:  # a resumed run appends to the same file
        again.write(sample(3))
    after = (tmp_path / SAMPLES_FILE).read_bytes()
    assert after.startswith(before) and after.count(b"\n") == 4
    with pytest.raises(ValueError, match="closed"):
        writer.write(sample(4))


def test_writer_closes_off_a_line_cut_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / SAMPLES_FILE
    good = json.dumps(sample(0).to_dict())
    path.write_text(good + "\n" + good[:40])  # the previous trainer died mid-line
    read = read_samples(tmp_path)
    assert len(read.records) == 1 and read.skipped == 1 and read.truncated_tail
    with SampleWriter(tmp_path) as writer:
        writer.write(sample(1))
    read = read_samples(tmp_path)
    assert [r["response"] for r in read.records] == ["go forward 0", "go forward 1"]
    assert read.skipped == 1 and read.skipped_lines == [2] and not read.truncated_tail


def test_records_are_plain_json_whatever_the_trainer_passes(tmp_path: Path) -> None:
    with SampleWriter(tmp_path / "new" / "run") as writer:  # creates the folder
        writer.write(sample(0, reward=np.float32(1.5), turn=np.int64(3), action_valid=np.bool_(False)))
        writer.write(sample(1, reward=float("nan"), progression=float("inf")).to_dict())  # a mapping
    raw = (tmp_path / "new" / "run" / SAMPLES_FILE).read_text().splitlines()
    first, second = (json.loads(x) for x in raw)
    assert first["reward"] == 1.5 and first["turn"] == 3 and first["action_valid"] is False
    assert second["reward"] is None and second["progression"] is None  # strict JSON, no NaN token
    back = TurnSample.from_dict(second)
    assert math.isnan(back.reward) and back.response == "go forward 1"
    assert TurnSample.from_dict({**first, "new_field": 1}).turn == 3
    with pytest.raises(ValueError, match="lacks"):
        TurnSample.from_dict({"update": 1})
    with pytest.raises(ValueError, match="source"):
        sample(0, source="test")


def test_tail_read_matches_full_read(tmp_path: Path) -> None:
    with SampleWriter(tmp_path) as writer:
        writer.write_many(sample(i) for i in range(50))
    path = tmp_path / SAMPLES_FILE
    full = read_samples(path).records
    assert len(full) == 50 and count_lines(path) == 50
    assert read_samples(path, last=7).records == full[-7:]
    assert read_samples(path, last=500).records == full
    assert read_samples(path, last=0).records == []
    assert [json.loads(x) for x in _tail_lines(path, 5, block=64)] == full[-5:]  # many small blocks
    with open(path, "ab") as f:
        f.write(b'{"update": 9, "trunc')
    tail = read_samples(path, last=3)
    assert tail.records == full[-2:] and tail.skipped == 1 and tail.truncated_tail
    assert count_lines(path) == 51


def test_family_of() -> None:
    assert family_of("verlog/BabyAI-GoTo-v0", {"task": "goto"}) == "verlog/BabyAI-GoTo-v0"
    assert family_of("verlog/BabyAI-Mixed-v0", {"task": "pickup"}) == "verlog/BabyAI-Mixed-v0:pickup"
    assert family_of("verlog/BabaIsAI-Mixed-v0", {"level": "two_room"}) == "verlog/BabaIsAI-Mixed-v0:two_room"
    assert family_of("verlog/BabyAI-Mixed-v0", {"family": "goto", "task": "x"}) == "goto"
    assert family_of("verlog/Crafter-v0") == "verlog/Crafter-v0"


def test_pick_turns_per_family_is_deterministic() -> None:
    families = ["verlog/BabyAI-Mixed-v0:goto", "verlog/BabyAI-Mixed-v0:pickup", "verlog/Crafter-v0"]
    records = [sample(i, family=families[i % 3] if i < 30 else families[0]) for i in range(40)]
    picks = pick_turns(records, 2, random.Random(7))
    assert picks == pick_turns(records, 2, random.Random(7))
    assert [p.global_step for p in picks] == sorted(p.global_step for p in picks)  # original order
    by_family = {f: sum(p.family == f for p in picks) for f in families}
    assert by_family == dict.fromkeys(families, 2)  # the big family gets no more than the others
    # numpy Generators and int seeds work the same way; seeds change the draw.
    np_picks = pick_turns(records, 2, np.random.default_rng(0))
    assert np_picks == pick_turns(records, 2, np.random.default_rng(0)) and len(np_picks) == 6
    assert pick_turns(records, 2, 1) == pick_turns(records, 2, 1)
    draws = {tuple(p.global_step for p in pick_turns(records, 2, seed)) for seed in range(10)}
    assert len(draws) > 1
    assert len(pick_turns(records, 100, 0)) == 40
    assert pick_turns(records, 0, 0) == []
    with pytest.raises(ValueError):
        pick_turns(records, -1, 0)


def test_pick_turns_on_read_records_derives_family() -> None:
    records = [
        {"env_id": "verlog/BabyAI-Mixed-v0", "task": "goto", "response": "a"},
        {"env_id": "verlog/BabyAI-Mixed-v0", "task": "open", "response": "b"},
        {"env_id": "verlog/BabyAI-Mixed-v0", "task": "goto", "response": "c"},
        {"env_id": "verlog/Crafter-v0", "family": "", "response": "d"},
    ]
    assert [r["response"] for r in pick_turns(records, 5, 0)] == ["a", "b", "c", "d"]
    assert len(pick_turns(records, 1, 0)) == 3


def test_samples_table() -> None:
    records = [sample(0), sample(1, prompt="x" * 50).to_dict()]
    columns, rows = samples_table(records, max_chars=10)
    assert columns[:3] == ["update", "global_step", "env_id"] and columns[-1] == "source"
    assert len(rows) == 2 and all(len(r) == len(columns) for r in rows)
    assert rows[1][columns.index("prompt")] == "x" * 10 + "…"
    assert rows[0][columns.index("action_valid")] is True
