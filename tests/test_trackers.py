"""Trackers work offline: a tiny run logs to TensorBoard and to SwanLab's local mode, and what they hold is
read back and compared with metrics.jsonl; sampled turns land in samples.jsonl and in the trackers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.config import load_config
from verlog.models.tiny import build_tiny
from verlog.ppo.trainer import Trainer
from verlog.runkit.samples import read_samples

MEMORY = {"turns": 1}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(
        tmp_path_factory.mktemp("tiny") / "model", TOY_ID, memory="history", memory_kwargs=MEMORY
    )


def _train(out: Path, model: Path, trackers: str, *overrides: str) -> tuple[Path, list[dict]]:
    config = load_config(
        None,
        [
            f"run.output_dir={out}",
            "run.name=track",
            "run.console=false",
            "run.torch_threads=1",
            "run.export_actor=false",
            "run.total_updates=2",
            f"run.trackers={trackers}",
            "run.samples_every=1",
            "run.samples_per_family=2",
            f"model.path={model}",
            f"env.id={TOY_ID}",
            "env.num_envs=2",
            "env.memory=history",
            "env.memory_kwargs={turns = 1}",
            "env.kwargs={max_steps = 3}",
            "prompt.format=action",
            "prompt.max_response_tokens=4",
            "ppo.turns_per_update=2",
            "ppo.num_minibatches=1",
            "ppo.critic_warmup_batches=0",
            "ppo.critic_warmup_iters=0",
            *overrides,
        ],
    )
    trainer = Trainer(config)
    trainer.train()
    lines = (trainer.run_dir / "metrics.jsonl").read_text().splitlines()
    return trainer.run_dir, [json.loads(line) for line in lines]


def test_tensorboard_holds_the_metrics_and_the_sampled_turns(tmp_path: Path, model_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, records = _train(tmp_path, model_path, '["tensorboard"]', "run.project=proj")
    events = list((run_dir / "proj").rglob("events.out.tfevents.*"))
    assert events, f"no tensorboard event file under {run_dir / 'proj'}"
    accumulator = EventAccumulator(str(events[0].parent), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    for key in ("charts/turns_per_s", "losses/value_loss", "env/invalid_action_rate", "time/generate"):
        logged = accumulator.Scalars(key)
        assert [e.step for e in logged] == [int(r["global_step"]) for r in records], key
        assert [e.value for e in logged] == pytest.approx([r[key] for r in records], rel=1e-5), key
    texts = accumulator.Tags()["tensors"]
    assert any(tag.startswith("samples") for tag in texts), texts

    samples = read_samples(run_dir / "samples.jsonl").records
    # two turns per update from the one family, numbered as metrics.jsonl numbers them: the last one too
    assert [s["update"] for s in samples] == [1, 1, 2, 2]
    steps = {r["update"]: r["global_step"] for r in records}
    assert all(s["global_step"] == steps[s["update"]] for s in samples)
    assert all(s["source"] == "train" and s["prompt"].startswith("<|im_start|>system") for s in samples)
    assert all(s["env_id"] == TOY_ID and s["action"] in ("left", "right", "wait") for s in samples)


def test_swanlab_local_mode_logs_offline(tmp_path: Path, model_path: Path) -> None:
    pytest.importorskip("swanlab", reason="SwanLab is in the dev extra; without it there is nothing to test")
    run_dir, records = _train(
        tmp_path, model_path, '["swanlab"]', 'run.tracker_kwargs={swanlab = {mode = "local"}}'
    )
    runs = list((run_dir / "swanlog").glob("run-*"))
    assert len(runs) == 1, list((run_dir / "swanlog").iterdir())
    record_file = next(runs[0].glob("*.swanlab")).read_bytes()
    for key in ("charts/turns_per_s", "losses/value_loss", "env/invalid_action_rate"):
        assert key.encode() in record_file, key
    # Each metric's values sit in logs/<metric index>/*.log, one JSON object per step: global_step is there.
    series = []
    for folder in (runs[0] / "logs").iterdir():
        points = [
            json.loads(line) for f in sorted(folder.glob("*.log")) for line in f.read_text().splitlines()
        ]
        series.append([p["data"] for p in points])
    assert [r["global_step"] for r in records] in series
    assert [pytest.approx(r["losses/value_loss"], rel=1e-5) for r in records] in series
