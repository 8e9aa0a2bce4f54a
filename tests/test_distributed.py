"""Several processes on the CPU through ``accelerate launch``, the way a user starts them: DeepSpeed ZeRO-3
(two updates, checkpoints, an exact resume, the HF export) and a loss that is not finite on one process only,
under ZeRO-3 and under DDP.

The first ZeRO-3 launch on a machine compiles DeepSpeed's small shared-memory op (~30-90 s, cached under
~/.cache/torch_extensions); later launches take ~20 s each.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed", reason="the train extra's deepspeed is not installed")

from verlog.models.tiny import build_tiny  # noqa: E402
from verlog.runkit.distributed import STALE_LOCK_S, warn_stale_extension_lock  # noqa: E402
from verlog.runkit.folder import latest_checkpoint  # noqa: E402
from verlog.runkit.logger import reproducible  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "agents" / "accelerate"
TIMEOUT = 600
SMALL = [
    "run.console=false",
    "env.num_envs=2",
    "ppo.turns_per_update=2",
    "ppo.num_minibatches=2",
    "ppo.micro_batch_tokens=1024",
]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(
        tmp_path_factory.mktemp("tiny") / "model",
        "verlog/BabyAI-GoTo-v0",
        {"invalid_action_penalty": -0.1},
        memory="history",
        memory_kwargs={"turns": 2, "reasoning": True},
    )


@pytest.fixture(scope="module", autouse=True)
def extensions_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """DeepSpeed's CPU op compiles into a folder of this run's own: a lock left in the user's cache by a killed
    compile would make every launch wait forever (the launch warns about it: see
    ``test_a_lock_left_by_a_killed_compile_is_named``)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path_factory.mktemp("torch_extensions")))
        yield


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(config_file: str, script: str, *args: str) -> str:
    """``accelerate launch`` two CPU processes; return their output, or fail showing both ranks' output."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / config_file),
        "--main_process_port", str(_free_port()), script, *args,
    ]  # fmt: skip
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",  # CPU processes even on a machine with GPUs
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("ACCELERATE_USE_CPU", None)  # it would make accelerate drop DeepSpeed
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the launcher and both ranks: a hang is a failure
        out, err = process.communicate()
        pytest.fail(f"timed out after {TIMEOUT}s (a collective hang?)\n{_tails(out, err)}")
    if process.returncode != 0:
        pytest.fail(f"exit code {process.returncode}\n{_tails(out, err)}")
    return out + err


def _tails(out: str, err: str) -> str:
    """Both ranks write to the same streams (tracebacks prefixed [rank0]: / [rank1]:)."""
    return f"--- stdout (both ranks) ---\n{out[-6000:]}\n--- stderr (both ranks) ---\n{err[-12000:]}"


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _actor(checkpoint: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(checkpoint / "actor" / "model.safetensors")


def test_zero3_two_processes_train_checkpoint_and_resume_exactly(tmp_path: Path, model_path: Path) -> None:
    out = _launch(
        "zero3_cpu_2proc.yaml", "agents/ppo.py", "--config", "envs/tiny.toml",
        f"run.output_dir={tmp_path}", f"model.path={model_path}", "run.total_updates=2",
        "run.checkpoint_every=1", "run.keep_checkpoints=3", "ppo.critic_warmup_batches=1",
        "ppo.critic_warmup_iters=1", *SMALL,
    )  # fmt: skip
    assert "setup: 2 processes on cpu, DeepSpeed ZeRO-3, fp32, transformers sampler" in out
    run = tmp_path / "tiny-0001"
    assert "transformers sampler (auto: " in (run / "console.log").read_text()  # no vLLM on a CPU: why
    records = _records(run)
    assert [r["update"] for r in records] == [0.0, 1.0, 2.0]  # critic warm-up, then two updates
    assert records[-1]["global_step"] == 3 * 2 * 2 * 2  # 3 batches x 2 turns x 2 envs x 2 processes
    for record in records[1:]:
        assert record["losses/optimizer_steps"] == 2 and record["losses/skipped_steps"] == 0
        assert all(record[k] is not None for k in ("losses/policy_loss", "losses/grad_norm", "charts/value"))
    final = run / "checkpoints" / "000002"
    for part in ("state", "critic_state"):  # one DeepSpeed engine per model, every process's shards
        shards = sorted(
            p.name for p in (final / part / "pytorch_model").glob("zero_pp_rank_*_model_states.pt")
        )
        assert len(shards) == 2, part
    states = [json.loads((final / f"trainer-{r}.json").read_text()) for r in (0, 1)]
    assert states[0]["weights_checksum"] == states[1]["weights_checksum"]  # both ranks hold the same model

    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(final / "actor")  # plain HF weights, for evaluation
    initial = AutoModelForCausalLM.from_pretrained(model_path)
    moved = [k for k, v in exported.state_dict().items() if not torch.equal(v, initial.state_dict()[k])]
    assert moved  # the two updates trained the actor

    # Stop "after update 1": a copy without the last checkpoint, resumed through the script.
    resumed = tmp_path / "resumed"
    shutil.copytree(run, resumed)
    shutil.rmtree(resumed / "checkpoints" / "000002")
    _launch("zero3_cpu_2proc.yaml", "agents/ppo.py", "--resume", str(resumed))
    assert latest_checkpoint(resumed).name == "000002"
    a, b = _actor(final), _actor(resumed / "checkpoints" / "000002")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    again = [
        json.loads((resumed / "checkpoints" / "000002" / f"trainer-{r}.json").read_text()) for r in (0, 1)
    ]
    assert [s["weights_checksum"] for s in again] == [s["weights_checksum"] for s in states]
    last_a, last_b = records[-1], _records(resumed)[-1]
    assert reproducible(last_a) == reproducible(last_b)


@pytest.mark.parametrize("config_file", ["zero3_cpu_2proc.yaml", "cpu_2proc.yaml"])
def test_a_non_finite_loss_on_one_process_skips_on_every_process(
    tmp_path: Path, model_path: Path, config_file: str
) -> None:
    _launch(
        config_file, "tests/distributed_check.py", str(tmp_path / "out"), f"run.output_dir={tmp_path}",
        f"model.path={model_path}", "ppo.critic_warmup_batches=0", "ppo.critic_warmup_iters=0", *SMALL,
        "ppo.micro_batch_tokens=256",  # one turn per micro-batch: every minibatch accumulates several
    )  # fmt: skip
    ranks = [json.loads((tmp_path / "out" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert [r["group_ended"] for r in ranks] == [True, True]  # Trainer.close ended it on every process
    for r in ranks:
        assert r["first_steps"] == 2 and r["last_steps"] == 2
        # Only rank 1 saw NaN advantages, yet both skipped both minibatches and kept their weights.
        assert r["poisoned_steps"] == 0 and r["poisoned_skipped"] == 2
        assert r["before"] == r["after"]
    assert ranks[0]["end"] == ranks[1]["end"]  # still in step after training on
    assert ranks[0]["end"] != ranks[0]["after"]
    if config_file.startswith("zero3"):
        # DeepSpeed stepped once per minibatch (not per micro-batch), and skipped the two poisoned ones.
        assert ranks[0]["engine_steps"] == [[6, 2], [6, 2]]


def test_a_lock_left_by_a_killed_compile_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed first launch leaves torch's compile lock; the next launch would wait on it forever, silently."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert warn_stale_extension_lock() is None  # nothing compiled yet
    lock = tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    assert warn_stale_extension_lock() is None  # a compile in progress: wait for it
    with pytest.warns(UserWarning, match=f"delete it \\(rm {lock}\\)"):
        assert warn_stale_extension_lock(now=time.time() + STALE_LOCK_S + 60) == lock
