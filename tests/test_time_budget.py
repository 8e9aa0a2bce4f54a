"""run.max_minutes: training stops before an update would overrun the budget, and the stop is checkpointed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.config import ConfigError, load_config
from verlog.models.tiny import build_tiny
from verlog.ppo.trainer import Trainer
from verlog.runkit.folder import latest_checkpoint
from verlog.runkit.validate import validate


def _config(out: Path, model: Path, *overrides: str):
    return load_config(
        None,
        [
            f"run.output_dir={out}",
            "run.name=budget",
            "run.console=false",
            "run.torch_threads=1",
            "run.export_actor=false",
            "run.checkpoint_every=0",
            "run.total_updates=50",
            f"model.path={model}",
            f"env.id={TOY_ID}",
            "env.num_envs=2",
            "env.memory=none",
            "env.memory_kwargs={}",
            "prompt.max_response_tokens=3",
            "ppo.turns_per_update=2",
            *overrides,
        ],
    )


def test_a_time_budget_stops_early_with_a_checkpoint(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    model = build_tiny(tmp_path / "model", TOY_ID)
    trainer = Trainer(_config(tmp_path / "runs", model, "run.max_minutes=0.0001"))  # 6 ms: one update
    trainer.train()
    assert trainer.update == 1
    rows = (trainer.run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["update"] for r in rows if '"update"' in r] == [1]
    assert latest_checkpoint(trainer.run_dir) is not None  # the stop is saved, resumable


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_time_budget_is_refused(value: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run.max_minutes"):
        validate(_config(tmp_path, tmp_path, f"run.max_minutes={value}"))
