"""The judge-temperature probe (benchmarks/probes/judge_temperature.py): a run's trained model on validation
episodes, never the judge's, at each temperature asked, per task kind of a mix, and the temperature chosen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.probes import judge_temperature
from verlog.config import load_config
from verlog.models.tiny import build_tiny

ROOT = Path(__file__).resolve().parents[1]


def _entry(means: dict[float, float]) -> dict[str, object]:
    return {"temperatures": {f"{t:g}": {"temperature": t, "mean_success": m} for t, m in means.items()}}


def test_the_choice_is_the_best_mean_over_runs_and_a_tie_keeps_the_higher_temperature() -> None:
    entries = {"a": _entry({1.0: 0.8, 0.5: 0.9, 0.0: 0.4}), "b": _entry({1.0: 0.8, 0.5: 0.8, 0.0: 0.6})}
    assert judge_temperature.choose(entries)["chosen"] == 0.5
    tied = {"a": _entry({1.0: 0.7, 0.5: 0.7, 0.0: 0.7})}
    assert judge_temperature.choose(tied)["chosen"] == 1.0


def test_it_plays_each_kind_at_each_temperature_on_validation_episodes(tmp_path: Path) -> None:
    config = load_config(ROOT / "envs" / "learn_babaisai_mix.toml")
    levels = ["goto_win-distr_obj", "two_room-goto_win"]
    config.env.kwargs = {**config.env.kwargs, "levels": levels, "max_episode_steps": 4}
    config.env.num_envs = 2
    model = build_tiny(tmp_path / "model", config.env.id, config.env.kwargs, tokenizer="action-words")
    run = tmp_path / "run"
    shutil.copytree(model, run / "checkpoints" / "000003" / "actor")
    config.model.path = str(model)
    (run / "config.toml").write_text(config.to_toml())
    args = [str(run), "--temperatures", "1", "0", "--episodes", "2", "--out", str(tmp_path)]
    assert judge_temperature.main(args) == 0
    data = json.loads((tmp_path / "judge_temperature.json").read_text())
    entry = data["runs"]["run"]
    assert entry["seed"] == judge_temperature.VALIDATION_SEED and set(entry["temperatures"]) == {"1", "0"}
    for figures in entry["temperatures"].values():
        assert set(figures["kinds"]) == set(levels)
        assert all(kind["episodes"] == 2 for kind in figures["kinds"].values())
    assert data["choice"]["chosen"] in (1.0, 0.0) and data["choice"]["runs"] == ["run"]
    greedy = json.loads(
        (run / "eval-trained-two_room-goto_win-seed20000-greedy" / "settings.json").read_text()
    )
    assert greedy["agent"]["greedy"] is True and greedy["env_kwargs"]["shaping"] == 0.0


def test_validation_episodes_must_not_be_the_judges() -> None:
    with pytest.raises(SystemExit):
        judge_temperature.main(["--seed", "10050", "--episodes", "8"])
