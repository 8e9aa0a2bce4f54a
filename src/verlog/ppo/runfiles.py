"""A resumed run's files rewound to its checkpoint, so they read as if the run had never stopped.

A run killed after update k+2 but resumed from checkpoint k has logged updates k+1 and k+2 already; the
resumed run logs them again. :func:`rewind` moves every row of ``metrics.jsonl`` and ``samples.jsonl`` past the
checkpoint (and a line cut short by the kill) to ``metrics.dropped.jsonl`` / ``samples.dropped.jsonl``, so
the files equal the uninterrupted run's (apart from times) and nothing written is lost.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["FILES", "rewind"]

FILES = ("metrics.jsonl", "samples.jsonl")


def rewind(run_dir: str | Path, update: int) -> int:
    """Keep the rows of updates ``<= update`` (warm-up rows count as update 0); return how many were moved."""
    moved = 0
    for name in FILES:
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
