"""Checkpoints that are verified and never run code: manifests, fallback to the newest good one, no pickle."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.config import load_config
from verlog.models.tiny import build_tiny
from verlog.ppo.trainer import Trainer
from verlog.runkit.manifest import MANIFEST, CheckpointError, check, good_checkpoint, write_manifest


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of 3 updates with all three checkpoints kept."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("ckpt")
    model = build_tiny(root / "model", TOY_ID, memory="history", memory_kwargs={"turns": 2})
    config = load_config(
        None,
        [
            f"run.output_dir={root}", "run.name=toy", "run.console=false", "run.torch_threads=1",
            "run.export_actor=false", f"model.path={model}", f"env.id={TOY_ID}", "env.num_envs=2",
            "env.memory=history", "env.memory_kwargs={turns = 2}", "env.kwargs={max_steps = 4}",
            "prompt.max_response_tokens=5", "ppo.turns_per_update=2", "ppo.num_minibatches=1",
            "ppo.micro_batch_tokens=512", "run.total_updates=3", "run.checkpoint_every=1", "run.keep_checkpoints=3",
        ],
    )  # fmt: skip
    trainer = Trainer(config)
    trainer.train()
    return trainer.run_dir


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


CORRUPTIONS = {
    "truncated optimiser state": lambda c: _truncate(c / "state" / "optimizer.bin"),
    "empty RNG state": lambda c: (c / "state" / "random_states_0.pkl").write_bytes(b""),
    "deleted env states": lambda c: (c / "envs-0.json.gz").unlink(),
    "deleted trainer state": lambda c: (c / "trainer-0.json").unlink(),
    "flipped weight byte": lambda c: _flip(c / "state" / "model.safetensors"),
    "no manifest": lambda c: (c / MANIFEST).unlink(),
    "an extra file": lambda c: (c / "state" / "scheduler.bin").write_bytes(b"x"),
}


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-10])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_each_corruption_is_named_and_passed_over(run: Path, tmp_path: Path, kind: str) -> None:
    copy = _copy(run, tmp_path)
    root = copy / "checkpoints"
    assert check(root / "000003") is None
    CORRUPTIONS[kind](root / "000003")
    path, warnings = good_checkpoint(root, set_aside=True)
    assert path.name == "000002" and len(warnings) == 1
    assert warnings[0].startswith("checkpoint 000003 is not used: ") and "\n" not in warnings[0]
    assert (root / "bad-000003").is_dir() and not (root / "000003").exists()  # kept for a look, not used


def test_resume_falls_back_to_the_newest_good_checkpoint(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = _copy(run, tmp_path)
    (copy / "checkpoints" / "000003" / "state" / "random_states_0.pkl").write_bytes(b"")
    resumed = Trainer(load_config(copy / "config.toml"), resume=copy)
    assert resumed.update == 2
    err = capsys.readouterr().err
    assert "warning: checkpoint 000003 is not used: " in err and "random_states_0.pkl" in err
    assert "resuming from 000002" in err
    resumed.train()  # the update after the fallback is made again and saved in place of the bad one
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == [
        "000001",
        "000002",
        "000003",
        "bad-000003",
    ]
    assert check(copy / "checkpoints" / "000003") is None


def test_no_good_checkpoint_is_one_line(run: Path, tmp_path: Path) -> None:
    copy = _copy(run, tmp_path)
    for name in ("000001", "000002", "000003"):
        (copy / "checkpoints" / name / "trainer-0.json").unlink()
    with pytest.raises(CheckpointError, match=r"no good checkpoint .*trainer-0.json is missing"):
        good_checkpoint(copy / "checkpoints")
    shutil.rmtree(copy / "checkpoints")
    with pytest.raises(CheckpointError, match="has no complete checkpoint"):
        good_checkpoint(copy / "checkpoints")


class _Payload:
    """Unpickling this runs code: it writes a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (Path.write_text, (self.marker, "ran"))


@pytest.mark.parametrize("target", ["state/optimizer.bin", "state/random_states_0.pkl", "trainer-0.json"])
def test_a_pickle_payload_in_a_checkpoint_never_runs(run: Path, tmp_path: Path, target: str) -> None:
    """Even with the manifest rewritten to match (someone shares a crafted run folder)."""
    copy = _copy(run, tmp_path)
    marker = tmp_path / "payload-ran"
    last = copy / "checkpoints" / "000003"
    if target.endswith(".json"):
        (last / target).write_bytes(pickle.dumps(_Payload(marker)))
    else:
        torch.save({"state": _Payload(marker)}, last / target)
    (last / MANIFEST).unlink()
    write_manifest(last)
    with pytest.raises(CheckpointError, match=r"000003 does not load: "):
        Trainer(load_config(copy / "config.toml"), resume=copy)
    assert not marker.exists()


def test_a_library_asking_for_weights_only_false_gets_weights_only_while_resuming(tmp_path: Path) -> None:
    """DeepSpeed reads its own shards with torch.load(weights_only=False); inside load_checkpoint every
    torch.load is weights-only (PyTorch's TORCH_FORCE_WEIGHTS_ONLY_LOAD), so a payload there cannot run."""
    from verlog.runkit.checkpoint import _weights_only_everywhere

    marker = tmp_path / "payload-ran"
    torch.save({"x": torch.ones(2), "payload": _Payload(marker)}, tmp_path / "shard.pt")
    torch.save({"x": torch.ones(2), "step": 3}, tmp_path / "plain.pt")
    with _weights_only_everywhere():
        with pytest.raises(pickle.UnpicklingError):
            torch.load(tmp_path / "shard.pt", weights_only=False)
        assert torch.load(tmp_path / "plain.pt", weights_only=False)["step"] == 3
    assert not marker.exists()
    torch.load(tmp_path / "shard.pt", weights_only=False)  # outside, the switch is off again: it runs
    assert marker.exists()
