"""benchmarks/probes/action_mixes.py: a mix of Crafter actions played blind on the judged episodes. Its figures
explain SmolLM2's Crafter scores, so they must repeat exactly, follow the weights, and refuse a misspelt mix."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def mixes():
    return importlib.import_module("benchmarks.probes.action_mixes")


def test_a_mix_plays_the_same_episodes_the_same_way(mixes) -> None:
    first = mixes.play({"Move West": 1, "Do": 1}, episodes=2, eval_seed=10_000, max_steps=30)
    again = mixes.play({"Move West": 1, "Do": 1}, episodes=2, eval_seed=10_000, max_steps=30)
    assert first == again
    assert first["weights"] == {"Move West": 0.5, "Do": 0.5}


def test_standing_still_visits_one_cell_and_walking_more(mixes) -> None:
    still = mixes.play({"Noop": 1}, episodes=2, eval_seed=10_000, max_steps=30)
    walking = mixes.play(dict.fromkeys(mixes.MOVES, 1.0), episodes=2, eval_seed=10_000, max_steps=30)
    assert still["cells"] == 1 and still["cells_se"] == 0
    assert walking["cells"] > 3


def test_a_misspelt_action_is_refused_with_the_names_to_use(mixes) -> None:
    with pytest.raises(ValueError, match=r"\['Move Wets'\] are not Crafter actions; use names from"):
        mixes.play({"Move Wets": 1}, episodes=1, eval_seed=10_000, max_steps=5)


def test_sampled_answers_count_only_the_updates_asked_for(mixes, tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    records = [{"update": 1, "action": "Do"}, {"update": 5, "action": "Sleep"}, {"update": 6, "action": "Do"}]
    samples.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert mixes.sampled_mix(samples, "5:") == {"Sleep": 0.5, "Do": 0.5}
    assert mixes.sampled_mix(samples, ":5") == {"Do": 1.0}
    with pytest.raises(SystemExit, match="no sampled answers in updates '9:'"):
        mixes.sampled_mix(samples, "9:")
