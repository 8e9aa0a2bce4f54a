"""The Crafter ends probe (benchmarks/probes/crafter_ends.py): why an agent's judged episodes ended, counted from
the episodes ``verlog eval`` kept, and refused for episodes that do not say."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import verlog  # noqa: F401  (registers the ids)
from benchmarks.probes import crafter_ends


def _played(folder: Path, episodes: int, max_steps: int) -> None:
    """Random answers on real Crafter episodes, recorded as ``verlog eval`` records them."""
    folder.mkdir()
    env = gym.make("verlog/Crafter-v0", max_steps=max_steps)
    rows = []
    for seed in range(episodes):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        length, ret, done, info = 0, 0.0, False, {}
        while not done:
            _, reward, terminated, truncated, info = env.step(env.action_space.sample())
            length, ret, done = length + 1, ret + float(reward), terminated or truncated
        rows.append({"return": ret, "length": length, "progression": info["progression"], "invalid_actions": 0,
                     "achievements": [], "end_reason": info["end_reason"]})  # fmt: skip
    (folder / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_it_counts_why_each_agents_episodes_ended(tmp_path: Path) -> None:
    _played(tmp_path / "capped", 3, max_steps=5)
    run = tmp_path / "run"
    run.mkdir()
    _played(run / "eval-trained", 2, max_steps=5)
    assert crafter_ends.main(["short=" + str(tmp_path / "capped"), f"run={run}", "--out", str(tmp_path)]) == 0
    agents = json.loads((tmp_path / "crafter_ends.json").read_text())["agents"]
    assert [(a["agent"], a["episodes"], a["ends"]) for a in agents] == [
        ("short", 3, {"max_steps": 3}),
        ("run", 2, {"max_steps": 2}),
    ]
    assert agents[0]["length"] == 5


def test_episodes_that_do_not_say_why_they_ended_are_refused(tmp_path: Path) -> None:
    _played(tmp_path / "old", 1, max_steps=3)
    rows = (tmp_path / "old" / "episodes.jsonl").read_text().replace(', "end_reason": "max_steps"', "")
    (tmp_path / "old" / "episodes.jsonl").write_text(rows)
    with pytest.raises(SystemExit, match="1 of its 1 episodes do not say why they ended"):
        crafter_ends.main([f"old={tmp_path / 'old'}", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="holds no episodes.jsonl"):
        crafter_ends.main([f"none={tmp_path}", "--out", str(tmp_path)])
