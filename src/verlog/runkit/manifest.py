"""Checkpoint manifests: every file's size and sha256, written last, checked before anything is loaded.

A checkpoint is only renamed into place once its ``manifest.json`` is written (see
:mod:`verlog.runkit.checkpoint`), so a folder without one, or whose files differ from it, was cut short or
changed afterwards (a full disk, a bad copy between machines, a hand edit). :func:`good_checkpoint` picks the
newest checkpoint that matches its manifest, names what failed in the ones it passes over, and moves those
aside (``bad-NNNNNN``), so neither a resume nor an evaluation uses them and nothing is deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from verlog.runkit.folder import is_checkpoint_name

__all__ = ["MANIFEST", "CheckpointError", "check", "good_checkpoint", "write_manifest"]

MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """No checkpoint of a run can be used; the message is one line naming the file that failed."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[str]:
    names = []
    for dirpath, _, files in os.walk(folder):
        for name in files:
            relative = os.path.relpath(os.path.join(dirpath, name), folder)
            if relative != MANIFEST:
                names.append(Path(relative).as_posix())
    return sorted(names)


def write_manifest(folder: Path) -> None:
    """Record every file of ``folder`` (read back from disk, so the hashes are of what was written)."""
    files = {
        name: {"size": (folder / name).stat().st_size, "sha256": _sha256(folder / name)}
        for name in _files(folder)
    }
    with open(folder / MANIFEST, "w") as f:
        json.dump({"files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def check(folder: Path, *, hashes: bool = True) -> str | None:
    """What is wrong with checkpoint ``folder`` in one phrase naming the file, or None when it is whole.

    ``hashes=False`` checks presence and sizes only (fast: for a first look before any model loads).
    """
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        return f"{folder / MANIFEST} is missing (the checkpoint was not finished, or predates manifests)"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"{folder / MANIFEST} is unreadable ({error})"
    for name in _files(folder):
        if name not in files:
            return f"{folder / name} is not in the manifest"
    for name, entry in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            return f"{path} is missing"
        size = path.stat().st_size
        if size != entry["size"]:
            return f"{path} has {size} bytes, the manifest says {entry['size']}"
        if hashes and _sha256(path) != entry["sha256"]:
            return f"{path} does not match its sha256 in the manifest"
    return None


def good_checkpoint(root: Path, *, hashes: bool = True, set_aside: bool = False) -> tuple[Path, list[str]]:
    """The newest checkpoint under ``root`` (``RUN/checkpoints``) that matches its manifest, and one warning line
    per newer one passed over. ``set_aside`` renames those to ``bad-NNNNNN``. Raises :class:`CheckpointError`
    when none is good (or there is none)."""
    done = (
        sorted((p for p in root.iterdir() if p.is_dir() and is_checkpoint_name(p.name)), reverse=True)
        if root.is_dir()
        else []
    )
    if not done:
        raise CheckpointError(f"{root.parent} has no complete checkpoint to resume from")
    warnings = []
    for path in done:
        problem = check(path, hashes=hashes)
        if problem is None:
            return path, warnings
        if set_aside:
            path.rename(path.with_name(f"bad-{path.name}"))
            problem += f"; moved to {path.with_name('bad-' + path.name).name}"
        warnings.append(f"checkpoint {path.name} is not used: {problem}")
    more = f" (and {len(done) - 1} older one(s) fail too)" if len(done) > 1 else ""
    raise CheckpointError(f"no good checkpoint in {root}: {warnings[0].split(': ', 1)[1]}{more}")
