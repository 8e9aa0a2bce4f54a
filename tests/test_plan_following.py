"""The plan-following probe (benchmarks/probes/plan_following.py): where a trained BabaIsAI policy leaves the
plan, counted per family from the policy's own episodes on a real run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmarks.probes import plan_following
from verlog.config import load_config
from verlog.models.tiny import build_tiny

ROOT = Path(__file__).resolve().parents[1]


def _turn(hit: bool, alive: bool = True, informative: bool = True) -> dict[str, object]:
    best = [True, True, True, True] if not informative else [hit, not hit, False, False]  # move 0 was played
    return {
        "best_hit": hit,
        "best_probability": 0.9 if hit else 0.1,
        "informative": informative,
        "alive": alive,
        "best": best,
    }


def test_the_summary_splits_turns_by_the_window_and_losses_by_how_they_were_lost() -> None:
    played = [
        {"plan": 2, "won": True, "end": "win", "turns": [_turn(True), _turn(True)]},
        {
            "plan": 6,
            "won": False,
            "end": "steps",  # walked into a dead end on turn 3
            "turns": [
                _turn(True),
                _turn(False),
                _turn(False, informative=False),
                _turn(False, alive=False),
                _turn(False, alive=False),
            ],
        },  # fmt: skip
        {"plan": 9, "won": False, "end": "steps", "turns": [_turn(i % 2 == 0) for i in range(6)]},
    ]
    figures = plan_following.summary(played, window=4)
    assert figures["won"] == 1 / 3
    assert list(figures["accuracy"]) == ["turns 0-3", "turns 4-7", "turns 8+"]
    inside, beyond, late = figures["accuracy"].values()
    # turns 0-3: hits 2+1+2 of 2+3+4 informative turns (the uninformative one is left out); turns 4-5: 0+1 of 3
    assert (inside["states"], inside["best_hit"]) == (9, 5 / 9)
    assert (beyond["states"], beyond["best_hit"]) == (3, 1 / 3)
    # one move always: move 0 (played, best on the hits) does best in the window, move 1 after it
    assert (inside["blind"], beyond["blind"]) == (5 / 9, 2 / 3)
    assert late == {"states": 0, "best_hit": None, "best_probability": None, "blind": None}
    assert figures["by_plan_length"] == {
        "plan 1-4": {"episodes": 1, "won": 1.0},
        "plan 5-8": {"episodes": 1, "won": 0.0},
        "plan 9-16": {"episodes": 1, "won": 0.0},
    }
    assert figures["lost"] == {
        "episodes": 2,
        "reached_a_dead_end": 1,
        "first_dead_turn_median": 3.0,
        "wandered_while_winnable": 1,
        "ends": {"defeat": 0, "steps": 2},
    }


def test_it_plays_a_run_folders_newest_actor_on_each_family(tmp_path: Path) -> None:
    config = load_config(ROOT / "envs" / "learn_babaisai_mix.toml")
    levels = ["goto_win-distr_obj", "two_room-goto_win"]
    config.env.kwargs = {**config.env.kwargs, "levels": levels, "max_episode_steps": 4}
    model = build_tiny(tmp_path / "model", config.env.id, config.env.kwargs, tokenizer="action-words")
    run = tmp_path / "run"
    shutil.copytree(model, run / "checkpoints" / "000007" / "actor")
    config.model.path = str(model)
    (run / "config.toml").write_text(config.to_toml())
    assert plan_following.main([str(run), "--episodes", "2", "--seed", "500", "--out", str(tmp_path)]) == 0
    entry = json.loads((tmp_path / "plan_following.json").read_text())["runs"]["run"]
    assert entry["checkpoint"] == "000007" and entry["window"] == config.algo.max_episode_turns
    assert set(entry["families"]) == set(levels)
    for figures in entry["families"].values():
        lost = figures["lost"]
        assert figures["episodes"] == 2
        assert round(figures["won"] * 2) + lost["episodes"] == 2
        assert lost["reached_a_dead_end"] + lost["wandered_while_winnable"] == lost["episodes"]
        assert sum(lost["ends"].values()) == lost["episodes"]
        # at most 4 steps an episode: every turn falls inside the 8-turn training window
        assert figures["accuracy"]["turns 8-15"]["states"] == 0
