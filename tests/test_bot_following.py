"""The bot-following probe (benchmarks/probes/bot_following.py): where a trained BabyAI policy leaves minigrid's
bot, counted per kind from the policy's own episodes on a real run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
from minigrid.utils.baby_ai_bot import BabyAIBot

from benchmarks.probes import bot_following
from verlog.config import load_config
from verlog.models.tiny import build_tiny

ROOT = Path(__file__).resolve().parents[1]


def _turn(advised: str | None, chosen: str) -> dict[str, object]:
    return {"advised": advised, "chosen": chosen, "advised_probability": None if advised is None else 0.5}


def test_the_summary_splits_agreement_by_advice_and_losses_by_where_they_stopped() -> None:
    played = [  # open: its key interaction is toggle
        {"bot_length": 5, "won": True, "end": "win",
         "turns": [_turn("go forward", "go forward"), _turn("toggle", "toggle")]},
        {"bot_length": 12, "won": False, "end": "steps",  # faced the door twice, toggled once, still lost
         "turns": [_turn("turn left", "go forward"), _turn("toggle", "turn left"), _turn("toggle", "toggle"),
                   _turn(None, "toggle")]},
        {"bot_length": 20, "won": False, "end": "steps", "turns": [_turn("go forward", "toggle")]},
        {"bot_length": None, "won": False, "end": "failed", "turns": [_turn("go forward", "toggle")]},
    ]  # fmt: skip
    figures = bot_following.summary(played, "open")
    assert figures["won"] == 0.25 and figures["advised_turns"] == 7  # the bot's silent turn is left out
    assert figures["agreement"]["move"] == {"states": 4, "followed": 0.25, "advised_probability": 0.5}
    assert (
        figures["agreement"]["toggle"]["states"] == 3 and figures["agreement"]["toggle"]["followed"] == 2 / 3
    )
    assert figures["agreement"]["drop"] == {"states": 0, "followed": None, "advised_probability": None}
    # toggle where advised 2 of 3; elsewhere 2 of the 4 states the bot advised a move
    assert figures["interaction_answered"]["toggle"] == {"where_advised": 2 / 3, "elsewhere": 0.5}
    assert figures["by_bot_length"] == {
        "bot 1-8": {"episodes": 1, "won": 1.0},
        "bot 9-16": {"episodes": 1, "won": 0.0},
        "bot 17+": {"episodes": 1, "won": 0.0},
    }
    lost = figures["lost"]
    assert (lost["episodes"], lost["mission_failed"], lost["key_interaction"]) == (3, 1, "toggle")
    # the second episode reached the door and toggled there once (lost after it), the third never reached it
    assert (lost["never_reached_it"], lost["reached_it_never_took_it"], lost["took_it_and_lost"]) == (1, 0, 1)
    assert lost["advised"]["toggle"] == 1 and lost["taken_where_advised"]["toggle"] == 1
    played[1]["turns"][2]["chosen"] = "go forward"  # now it faced the door twice and never toggled
    lost = bot_following.summary(played, "open")["lost"]
    assert (lost["never_reached_it"], lost["reached_it_never_took_it"], lost["took_it_and_lost"]) == (1, 1, 0)


def test_the_bot_solves_each_kind_from_the_reset_in_a_copy_that_leaves_the_level_alone() -> None:
    for kind in ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to"):
        env = gym.make("verlog/BabyAI-Mixed-v0", task=kind)
        env.reset(seed=3)
        level = env.unwrapped.level
        before = (tuple(level.agent_pos), level.agent_dir, level.step_count)
        length = bot_following.bot_solution_length(level, level.max_steps)
        assert length is not None and 1 <= length <= level.max_steps
        assert (tuple(level.agent_pos), level.agent_dir, level.step_count) == before
        assert bot_following.bot_action(BabyAIBot(level), None) in env.unwrapped.actions


def test_it_plays_a_run_folders_newest_actor_on_each_kind(tmp_path: Path) -> None:
    config = load_config(ROOT / "envs" / "learn_babyai_mix.toml")
    config.env.kwargs = {**config.env.kwargs, "max_episode_steps": 6}
    model = build_tiny(tmp_path / "model", config.env.id, config.env.kwargs, tokenizer="action-words")
    run = tmp_path / "run"
    shutil.copytree(model, run / "checkpoints" / "000003" / "actor")
    config.model.path = str(model)
    (run / "config.toml").write_text(config.to_toml())
    assert bot_following.main([str(run), "--episodes", "2", "--seed", "500", "--out", str(tmp_path)]) == 0
    entry = json.loads((tmp_path / "bot_following.json").read_text())["runs"]["run"]
    assert entry["checkpoint"] == "000003"
    assert list(entry["kinds"]) == ["goto", "pickup", "open", "putnext", "pick_up_seq_go_to"]
    for figures in entry["kinds"].values():
        lost = figures["lost"]
        assert figures["episodes"] == 2 and figures["advised_turns"] <= 12
        assert round(figures["won"] * 2) + lost["episodes"] == 2
        if lost["key_interaction"]:
            ways = ("mission_failed", "never_reached_it", "reached_it_never_took_it", "took_it_and_lost")
            assert sum(lost[way] for way in ways) == lost["episodes"]
