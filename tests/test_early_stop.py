"""Stopping before run.total_updates: run.max_minutes stops before an update would overrun the budget, and
Ctrl-C or SIGTERM stop when the update in progress ends; either stop is checkpointed and resumes from there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from benchmarks.demos.judge import unjudged_stop
from verlog.config import ConfigError, load_config
from verlog.models.tiny import build_tiny
from verlog.ppo.trainer import Trainer
from verlog.runkit.folder import latest_checkpoint
from verlog.runkit.stop import EarlyStop
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
    assert unjudged_stop(trainer, "judge") is None  # a budget is the run's own end: the demos judge it


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_time_budget_is_refused(value: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="run.max_minutes"):
        validate(_config(tmp_path, tmp_path, f"run.max_minutes={value}"))


def _logged_updates(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    rows = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(r)["update"] for r in rows if '"update"' in r]


def _signal_after_first_update(run_dir: Path, signum: int) -> threading.Thread:
    """Send ``signum`` to this process once the run has logged its first update."""

    def wait_then_send() -> None:
        deadline = time.monotonic() + 300
        while not _logged_updates(run_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signum)

    thread = threading.Thread(target=wait_then_send, daemon=True)
    thread.start()
    return thread


def test_sigterm_stops_after_the_update_in_progress_with_a_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.set_num_threads(1)
    model = build_tiny(tmp_path / "model", TOY_ID)
    before = signal.getsignal(signal.SIGTERM)
    trainer = Trainer(_config(tmp_path / "runs", model))  # 50 updates, no checkpoint on the way
    thread = _signal_after_first_update(trainer.run_dir, signal.SIGTERM)
    trainer.train()
    thread.join()
    assert trainer.early_stop.signal == "SIGTERM"
    assert 1 <= trainer.update < 50
    assert _logged_updates(trainer.run_dir) == list(
        range(1, trainer.update + 1)
    )  # every update it made is kept
    assert latest_checkpoint(trainer.run_dir).name == f"{trainer.update:06d}"  # and the last one is saved
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is put back
    assert "SIGTERM: the run stops when update" in capsys.readouterr().out
    # a demonstration does not judge a stopped run as the preset's: it says how to continue, then judge it
    message, status = unjudged_stop(trainer, "python -m benchmarks.demos.learn --run RUN")
    assert status == 128 + signal.SIGTERM
    assert f"stopped by SIGTERM after update {trainer.update} of 50: not judged" in message
    assert f"agents/ppo.py --resume {trainer.run_dir}" in message
    assert message.endswith("then judge it with: python -m benchmarks.demos.learn --run RUN")


def test_a_second_signal_stops_at_once() -> None:
    # Python's own Ctrl-C handler, as in a terminal: a job started in the background without job control
    # (`cmd &` in a script) inherits SIGINT ignored, and the second signal would go there: nowhere
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        said: list[str] = []
        with EarlyStop(0.0, said.append, lambda: "when update 3 ends") as stop:
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.requested == "SIGINT" and stop.due(1.0)
            assert said == [
                "SIGINT: the run stops when update 3 ends, with a checkpoint to resume from; send it again to stop "
                "at once (the updates since the last checkpoint are then lost)"
            ]
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)  # the handler runs between bytecodes; this leaves it time
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_no_signal_no_budget_means_no_early_stop() -> None:
    with EarlyStop(0.0, print, str) as stop:
        assert not stop.due(1e9) and stop.signal is None


def test_the_script_stopped_by_ctrl_c_says_how_to_resume(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    command = [
        sys.executable, "agents/ppo.py", "--config", "envs/tiny.toml", f"run.output_dir={tmp_path}",
        f"model.path={tmp_path / 'tiny-model'}", "run.total_updates=200", "env.num_envs=2", "ppo.turns_per_update=2",
        "ppo.critic_warmup_batches=1", "ppo.critic_warmup_iters=1", "run.console=false", "run.checkpoint_every=0",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        runs = list(tmp_path.glob("*/metrics.jsonl"))
        if runs and _logged_updates(runs[0].parent):
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    run_dir = next(tmp_path.glob("*/metrics.jsonl")).parent
    updates = _logged_updates(run_dir)
    last = err.strip().splitlines()[-1]
    assert last.startswith("ppo.py: stopped by SIGINT. Newest checkpoint ")
    assert f"checkpoints/{int(updates[-1]):06d}; continue with: " in last and "--resume" in last
