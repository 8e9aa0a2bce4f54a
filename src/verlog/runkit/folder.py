"""A run folder, described once: its file names, the checkpoint-name pattern, and finding runs and checkpoints.

::

    runs/<name>-NNNN/
        config.toml        the whole config, as the run used it (``--resume`` reloads it)
        metrics.jsonl      one JSON row per update (and per critic warm-up iteration)
        samples.jsonl      a few sampled turns, prompts decoded
        console.log        the libraries' notices (verlog.quiet)
        best.json          which checkpoint scored best on the validation panel (kept through rotation)
        checkpoints/NNNNNN/  one folder per saved update, six digits (see verlog.runkit.checkpoint)

The learner writes these files, the evaluation and the report read them; all three name them through this
module. No torch here: the report and ``verlog eval`` of a baseline import it without the ``train`` extra.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from verlog.quiet import only_notices

__all__ = [
    "BEST_FILE",
    "CHECKPOINTS",
    "CONFIG_FILE",
    "METRICS_FILE",
    "SAMPLES_FILE",
    "RunNotFoundError",
    "best_checkpoint",
    "checkpoint_dir",
    "checkpoint_name",
    "discard_if_refused",
    "is_checkpoint_name",
    "is_run_dir",
    "latest_checkpoint",
    "mark_best",
    "new_run_dir",
    "resolve_run",
    "rewind",
]

CONFIG_FILE = "config.toml"
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
CHECKPOINTS = "checkpoints"
BEST_FILE = "best.json"
_CHECKPOINT_NAME = re.compile(r"^\d{6}$")


class RunNotFoundError(FileNotFoundError):
    """The run folder named on the command line does not exist; the message names runs that do."""


def checkpoint_name(update: int) -> str:
    """The folder name of the checkpoint saved after ``update`` updates: six digits."""
    return f"{update:06d}"


def is_checkpoint_name(name: str) -> bool:
    """A complete checkpoint's folder name (not ``.tmp-NNNNNN`` being written, nor ``bad-NNNNNN`` set aside)."""
    return bool(_CHECKPOINT_NAME.match(name))


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def is_run_dir(path: str | Path) -> bool:
    """A folder the learner made: it has checkpoints or its config."""
    path = Path(path)
    return (path / CHECKPOINTS).is_dir() or (path / CONFIG_FILE).is_file()


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return None
    done = sorted(p for p in root.iterdir() if p.is_dir() and is_checkpoint_name(p.name))
    return done[-1] if done else None


def mark_best(run_dir: str | Path, update: int, record: dict[str, float]) -> None:
    """Record checkpoint ``update`` as the run's best (``record``: what made it best), atomically."""
    path = Path(run_dir) / BEST_FILE
    tmp = path.with_name(f".{BEST_FILE}.tmp")
    tmp.write_text(
        json.dumps({"checkpoint": checkpoint_name(update), "update": update, **record}, indent=1) + "\n"
    )
    os.replace(tmp, path)


def best_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint ``best.json`` names, when it is there (None when the run has no best yet)."""
    path = Path(run_dir) / BEST_FILE
    if not path.is_file():
        return None
    name = json.loads(path.read_text()).get("checkpoint", "")
    folder = checkpoint_dir(run_dir) / name
    return folder if is_checkpoint_name(name) and folder.is_dir() else None


def new_run_dir(output_dir: str | Path, name: str) -> Path:
    """Create and return ``<output_dir>/<name>-NNNN`` with the next free number."""
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    taken = [p.name[len(name) + 1 :] for p in root.glob(f"{name}-*")]
    number = max((int(s) for s in taken if s.isdigit()), default=0) + 1
    while True:
        path = root / f"{name}-{number:04d}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            number += 1


@contextlib.contextmanager
def discard_if_refused(run_dir: str | Path, new: bool = True) -> Iterator[None]:
    """Around a run's start: when it raises, a ``new`` run folder with nothing written in it yet is removed,
    so the run started again after the fix takes the same number; a folder with anything in it stays, and the
    error goes on. Its log may hold the libraries' notices from loading (:func:`verlog.quiet.only_notices`):
    that is not the run's, and it goes to stderr as the folder goes, as notices from before any folder do."""
    try:
        yield
    except BaseException:
        path = Path(run_dir)
        if new and path.is_dir() and _nothing_of_the_run(path):
            notices = "".join(p.read_text(errors="replace") for p in sorted(path.iterdir()))
            shutil.rmtree(path)
            if notices:
                print(notices, end="", file=sys.stderr)
        raise


def _nothing_of_the_run(path: Path) -> bool:
    """Only empty files or logs of notices: nothing a run wrote."""
    return not any(
        p.is_dir() or (p.stat().st_size and not (p.suffix == ".log" and only_notices(p)))
        for p in path.iterdir()
    )


def resolve_run(path: str | os.PathLike[str]) -> Path:
    """The run folder: ``path`` itself, or the highest-numbered ``<path>-NNNN`` beside it."""
    path = Path(path)
    if path.is_dir():
        return path
    if path.exists():
        raise RunNotFoundError(f"{path} is a file, not a run folder")
    parent = path.parent if str(path.parent) else Path(".")
    pattern = re.compile(re.escape(path.name) + r"-(\d+)$")
    numbered = []
    if parent.is_dir():
        for child in parent.iterdir():
            match = pattern.match(child.name)
            if match and child.is_dir():
                numbered.append((int(match.group(1)), child))
    if numbered:
        return max(numbered)[1]
    hint = ""
    if parent.is_dir():
        runs = sorted(
            c.name for c in parent.iterdir() if (c / METRICS_FILE).exists() or (c / CONFIG_FILE).exists()
        )
        if runs:
            hint = f"; runs in {parent}: " + ", ".join(runs[-10:])
    raise RunNotFoundError(f"run folder {path} does not exist{hint}")


def rewind(run_dir: str | Path, update: int) -> int:
    """A resumed run's rows rewound to its checkpoint, so the files read as if the run had never stopped.

    A run killed after update k+2 but resumed from checkpoint k has logged updates k+1 and k+2 already; the
    resumed run logs them again. Every row of ``metrics.jsonl`` and ``samples.jsonl`` past ``update`` (warm-up
    rows count as update 0), and a line cut short by the kill, moves to ``metrics.dropped.jsonl`` /
    ``samples.dropped.jsonl``: the files equal the uninterrupted run's (apart from times) and nothing written
    is lost. Returns how many rows moved.
    """
    moved = 0
    for name in (METRICS_FILE, SAMPLES_FILE):
        path = Path(run_dir) / name
        if not path.is_file():
            continue
        kept, dropped = [], []
        for line in path.read_text().splitlines(keepends=True):
            try:
                row = json.loads(line)
                keep = isinstance(row, dict) and row.get("update", 0) <= update
            except ValueError:  # a line the kill cut short
                keep = False
            (kept if keep else dropped).append(line if line.endswith("\n") else line + "\n")
        if not dropped:
            continue
        with open(path.with_name(path.stem + ".dropped.jsonl"), "a") as f:
            f.writelines(dropped)
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text("".join(kept))
        os.replace(tmp, path)
        moved += len(dropped)
    return moved
