"""Divergence: exploding weights stop the run before they are saved; all-skipped updates are counted and stop it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.config import load_config
from verlog.models.tiny import build_tiny
from verlog.ppo import trainer as trainer_module
from verlog.ppo.advantages import compute_advantages
from verlog.ppo.trainer import Trainer
from verlog.runkit.faults import Diverged

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(
        tmp_path_factory.mktemp("tiny") / "model", TOY_ID, memory="history", memory_kwargs={"turns": 2}
    )


def _trainer(out: Path, model: Path, *overrides: str) -> Trainer:
    return Trainer(
        load_config(
            None,
            [
                f"run.output_dir={out}", "run.name=toy", "run.console=false", "run.torch_threads=1",
                "run.export_actor=false", f"model.path={model}", f"env.id={TOY_ID}", "env.num_envs=2",
                "env.memory=history", "env.memory_kwargs={turns = 2}", "env.kwargs={max_steps = 4}",
                "prompt.max_response_tokens=5", "ppo.turns_per_update=2", "ppo.num_minibatches=1",
                "ppo.micro_batch_tokens=512", "run.checkpoint_every=1", *overrides,
            ],
        )
    )  # fmt: skip


def test_exploding_weights_stop_the_run_before_they_are_saved(tmp_path: Path, model_path: Path) -> None:
    trainer = _trainer(
        tmp_path, model_path, "ppo.actor_lr=1e30", "run.total_updates=3", "watchdog.enabled=false"
    )
    with pytest.raises(
        Diverged, match=r"^update 1 left the actor's weights as large as .*ppo\.actor_lr = 1e\+30"
    ):
        trainer.train()
    assert not (trainer.run_dir / "checkpoints").exists()  # nothing of the diverged update was written
    assert trainer.envs.closed


def test_updates_that_skip_every_step_are_said_and_stop_the_run(
    tmp_path: Path, model_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = _trainer(
        tmp_path, model_path, "run.total_updates=5", "ppo.max_skipped_updates=2", "watchdog.enabled=false"
    )
    storage = trainer.storage

    def poisoned(*args: object, **kwargs: object) -> dict[str, float]:  # a fault: every advantage is NaN
        metrics = compute_advantages(*args, **kwargs)
        storage.advantages.fill_(float("nan"))  # so every loss is
        return metrics

    monkeypatch.setattr(trainer_module, "compute_advantages", poisoned)
    before = {k: v.clone() for k, v in trainer.learner.models.actor.state_dict().items()}
    with pytest.raises(Diverged, match=r"^2 updates in a row skipped every optimiser step"):
        trainer.train()
    out = capsys.readouterr()
    assert "update 1: every optimiser step was skipped" in out.out + out.err
    assert "update 2: every optimiser step was skipped" in out.out + out.err
    assert all(
        torch.equal(before[k], v) for k, v in trainer.learner.models.actor.state_dict().items()
    )  # nothing moved
    assert trainer.update == 2


def test_the_script_stops_a_diverged_run_with_one_line(tmp_path: Path) -> None:
    command = [
        sys.executable, "agents/ppo.py", "--config", "envs/tiny.toml", f"run.output_dir={tmp_path}",
        f"model.path={tmp_path / 'tiny-model'}", "run.total_updates=2", "env.num_envs=2", "ppo.turns_per_update=2",
        "ppo.critic_warmup_batches=1", "ppo.critic_warmup_iters=1", "ppo.actor_lr=1e30", "run.console=false",
        "watchdog.enabled=false",  # the guard's own stop (with the watchdog: tests/test_watchdog.py)
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "update 1 left the actor's weights" in last and "ppo.actor_lr = 1e+30" in last
    assert "checkpoints/000000; continue (after a fix) with: " in last and "--resume" in last
