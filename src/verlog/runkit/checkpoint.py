"""Atomic checkpoints: everything a run needs to continue exactly where it stopped.

A checkpoint is the folder ``checkpoints/NNNNNN`` (the update count). It is written as ``.tmp-NNNNNN`` and
renamed in one ``os.replace``, so a crash mid-write leaves a stray temporary folder and the previous
checkpoint intact; :func:`verlog.runkit.folder.latest_checkpoint` only ever sees complete ones. Inside::

    state/            accelerate.save_state: actor, critic, both optimisers, RNG states of every process
                      (under DeepSpeed: the actor's engine, i.e. every process's ZeRO shards of it)
    critic_state/     under DeepSpeed only: the critic's engine (each model has its own accelerator there)
    trainer-<rank>.json counters, storage slot 0, running episode statistics, the samples RNG (one per process)
    envs-<rank>.json.gz each sub-env's episode as data: its seed and the actions since (verlog.replay), replayed
                      on resume, memories included
    manifest.json     every other file's size and sha256, written last (verlog.runkit.manifest): --resume uses the
                      newest checkpoint that matches it, and moves newer ones that do not aside (bad-NNNNNN)
    actor/            the actor and tokenizer in Hugging Face format (when run.export_actor), for evaluation:
                      consolidated from ZeRO-3 shards, LoRA adapters merged

Every process writes into the same folder, so a multi-machine run needs the run folder on a shared filesystem.
Nothing verlog writes is a pickle: a run folder is shared and copied between machines, and loading it must not
run code. accelerate writes the models as safetensors and loads its optimiser and RNG files with
``torch.load(weights_only=True)``; DeepSpeed's engine asks for ``weights_only=False`` for its own shards, and
gets weights-only loading anyway (:func:`_weights_only_everywhere`).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verlog.runkit.folder import best_checkpoint, checkpoint_dir, checkpoint_name, is_checkpoint_name
from verlog.runkit.manifest import CheckpointError, write_manifest

__all__ = ["load_checkpoint", "save_checkpoint"]


def save_checkpoint(
    run_dir: str | Path,
    update: int,
    *,
    accelerator: Any,
    trainer_state: dict[str, Any],
    envs: list[dict[str, Any]] | None,
    export: Callable[[Path], None] | None = None,
    keep: int = 2,
    more_states: Mapping[str, Any] | None = None,
    protect: set[str] | frozenset[str] = frozenset(),
) -> Path:
    """Write checkpoint ``update`` atomically and keep only the newest ``keep`` (and the ``protect`` ones, and
    the run's best); return its folder.

    The manifest is hashed from the files as they lie on disk just before the rename, so the newest
    checkpoint, which rotation always keeps, is a good one: rotation never leaves only bad ones.

    Every process calls this; each writes its own files into the temporary folder, the main process
    renames it once all have finished. ``more_states`` maps a folder name to a further accelerator whose
    state is saved there (DeepSpeed's one accelerator per model). ``export(folder)`` runs on every process
    (gathering ZeRO-3 weights is collective) and writes on the main one.
    """
    root = checkpoint_dir(run_dir)
    final = root / checkpoint_name(update)
    tmp = root / f".tmp-{checkpoint_name(update)}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    rank = accelerator.process_index
    accelerator.save_state(str(tmp / "state"))
    for name, other in (more_states or {}).items():
        other.save_state(str(tmp / name))
    (tmp / f"trainer-{rank}.json").write_text(json.dumps(to_json(trainer_state)))
    if envs is not None:
        with gzip.open(
            tmp / f"envs-{rank}.json.gz", "wt", compresslevel=1
        ) as f:  # long episodes repeat a lot
            json.dump(envs, f)
    if export is not None:
        export(tmp / "actor")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _fsync_tree(tmp)
        write_manifest(tmp)  # last: a folder whose manifest matches is whole
        if final.exists():  # an older run wrote this update before a crash; the new one replaces it
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
        complete = sorted(p for p in root.iterdir() if p.is_dir() and is_checkpoint_name(p.name))
        best = best_checkpoint(run_dir)  # the validation panel's best stays beside the newest
        for old in complete[:-keep]:
            if old != best and old.name not in protect:
                shutil.rmtree(old, ignore_errors=True)
        for stray in root.glob(".tmp-*"):
            shutil.rmtree(stray, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(
    path: str | Path, *, accelerator: Any, more_states: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """Restore models, optimisers and RNGs in place; return this process's trainer state and env states.

    Check ``path`` against its manifest first (:func:`verlog.runkit.manifest.good_checkpoint`): this trusts it.
    A file that still fails to load is a :class:`CheckpointError` naming it.
    """
    path = Path(path)
    try:
        with _weights_only_everywhere():
            return _load(path, accelerator, more_states)
    except Exception as error:  # a torch, accelerate, DeepSpeed or JSON error: one line that names the file
        if isinstance(error, CheckpointError):
            raise
        text = " ".join(str(error).split())[:300]
        raise CheckpointError(f"{path} does not load: {type(error).__name__}: {text}") from error


@contextlib.contextmanager
def _weights_only_everywhere() -> Iterator[None]:
    """Make every ``torch.load`` in the block weights-only, also where a library asks for ``weights_only=False``
    (DeepSpeed's engine reads its ``*.pt`` shards so): PyTorch's own ``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` switch,
    with the few plain DeepSpeed classes its shards hold allowed by name (``add_safe_globals``)."""
    allowed: list[Any] = []
    with contextlib.suppress(ImportError):
        from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
        from deepspeed.runtime.zero.config import ZeroStageEnum

        allowed += [ZeroStageEnum, LossScaler, DynamicLossScaler]
    before = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with torch.serialization.safe_globals(allowed):
            yield
    finally:
        if before is None:
            os.environ.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = before


def _load(
    path: Path, accelerator: Any, more_states: Mapping[str, Any] | None
) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    rank = accelerator.process_index
    writers = len(list(path.glob("trainer-*.json")))
    if writers != accelerator.num_processes:
        raise CheckpointError(
            f"{path} was written by {writers} process(es); resume it with the same number (each one's envs and "
            f"ZeRO shards are its own), not {accelerator.num_processes}"
        )
    for name, other in (more_states or {}).items():
        if not (path / name).is_dir():
            raise CheckpointError(f"{path} has no {name}/ (was it saved by a launch without DeepSpeed?)")
        other.load_state(str(path / name))
    # accelerate swallows an RNG file that fails to load (the resume would go on, inexact): load it first.
    from accelerate.utils import (
        load as weights_only_load,  # torch.load(weights_only=True) with numpy's arrays
    )

    weights_only_load(path / "state" / f"random_states_{rank}.pkl")
    accelerator.load_state(str(path / "state"))  # last: its RNG states are the ones that count
    trainer_state = from_json(json.loads((path / f"trainer-{rank}.json").read_text()))
    envs_file = path / f"envs-{rank}.json.gz"
    envs = None
    if envs_file.exists():
        with gzip.open(envs_file, "rt") as f:
            envs = json.load(f)
    return trainer_state, envs


def to_json(value: Any) -> Any:
    """Plain data for ``json.dumps``: tensors and arrays become ``{"tensor"|"ndarray": values, "dtype": ...}``,
    tuples lists (floats keep every bit: JSON writes the shortest repr that reads back the same double)."""
    if isinstance(value, torch.Tensor):
        return {"tensor": value.tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, np.ndarray):
        return {"ndarray": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def from_json(value: Any) -> Any:
    """The inverse of :func:`to_json` (tuples come back as lists)."""
    if isinstance(value, dict):
        if set(value) == {"tensor", "dtype"}:
            return torch.tensor(value["tensor"], dtype=getattr(torch, value["dtype"]))
        if set(value) == {"ndarray", "dtype"}:
            return np.array(value["ndarray"], dtype=value["dtype"])
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def _fsync_tree(folder: Path) -> None:
    """Flush every file, so the rename cannot land before the data it names."""
    for dirpath, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
