"""Reading a run folder: its ``metrics.jsonl`` as it is now, and the folder a ``RUN`` argument names."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from verlog.runkit.samples import parse_jsonl

#: x-axis candidates, best first; the first one present and finite in every record is used.
X_KEYS = ("update", "global_step")
#: Critic pre-training logs its iterations before update 1, each under this key and ``update`` 0.
WARMUP_KEY = "warmup/iteration"


@dataclass
class MetricsLog:
    """The parsable records of ``metrics.jsonl`` and what had to be skipped."""

    records: list[dict[str, Any]] = field(default_factory=list)
    skipped_lines: list[int] = field(default_factory=list)
    #: The file does not end with a newline: a writer was cut mid-line or is writing right now.
    truncated_tail: bool = False
    exists: bool = False
    #: Updates logged again with other values (a run resumed from a checkpoint): the later values win.
    relogged: list[int] = field(default_factory=list)
    _columns: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    @property
    def skipped(self) -> int:
        return len(self.skipped_lines)

    @property
    def warmup_rows(self) -> int:
        """Records of critic pre-training (logged before update 1, one per iteration)."""
        return sum(number(r.get(WARMUP_KEY)) is not None for r in self.records)

    @property
    def updates(self) -> int:
        """Records of PPO updates (warm-up iterations not counted)."""
        return len(self.records) - self.warmup_rows

    def keys(self) -> list[str]:
        """Every key with at least one numeric value, in first-seen order."""
        seen: dict[str, None] = {}
        for record in self.records:
            for key, value in record.items():
                if key not in seen and number(value) is not None:
                    seen[key] = None
        return list(seen)

    def column(self, key: str) -> np.ndarray:
        """One value per record; NaN where the key is missing or not a number."""
        if key not in self._columns:
            values = [number(r.get(key)) for r in self.records]
            self._columns[key] = np.array([math.nan if v is None else v for v in values], dtype=float)
        return self._columns[key]

    def has_data(self, key: str) -> bool:
        """At least one finite value: a key logged only as NaN gets a note, not an empty plot."""
        return bool(np.isfinite(self.column(key)).any())

    def x(self) -> tuple[str, np.ndarray]:
        """The x-axis (name, values): ``update`` (as the console shows), else ``global_step``, else the
        record number."""
        for key in X_KEYS:
            col = self.column(key)
            if col.size and np.isfinite(col).all():
                return key.replace("_", " "), col
        return "record", np.arange(1, len(self.records) + 1, dtype=float)


def number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def read_metrics(path: str | os.PathLike[str]) -> MetricsLog:
    """Read ``metrics.jsonl``: one JSON object per line, bad or truncated lines skipped and counted."""
    path = Path(path)
    if not path.is_file():
        return MetricsLog()
    data = path.read_bytes()
    records, bad = parse_jsonl(data.split(b"\n"))
    records, relogged = _merge_updates(records)
    return MetricsLog(
        records=records,
        skipped_lines=bad,
        truncated_tail=bool(data) and not data.endswith(b"\n"),
        exists=True,
        relogged=relogged,
    )


def _merge_updates(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """One record per ``update`` (per warm-up iteration before update 1), in order; returns the updates
    whose values were overwritten.

    Two lines for one update are either two parts of it (an eval line beside the train line: merged) or a
    run resumed from an earlier checkpoint that logs the update again (later values win, reported).
    Records without a numeric ``update`` are left as they are.
    """
    found = [number(r.get("update")) for r in records]
    updates = [u for u in found if u is not None and math.isfinite(u)]
    if not records or len(updates) != len(records):
        return records, []
    merged: dict[tuple[float, float], dict[str, Any]] = {}
    relogged: set[int] = set()
    for u, record in zip(updates, records, strict=True):
        key = (u, number(record.get(WARMUP_KEY)) or 0.0)
        if key in merged:
            old = merged[key]
            if any(k in old and old[k] != v and k not in X_KEYS for k, v in record.items()):
                relogged.add(int(u))
            old.update(record)
        else:
            merged[key] = dict(record)
    return [merged[key] for key in sorted(merged)], sorted(relogged)


def split_key(key: str) -> tuple[str, str | None, str]:
    """``prefix/name`` -> (prefix, None, name); ``prefix/<family>/name`` -> (prefix, family, name)."""
    parts = key.split("/")
    if len(parts) == 1:
        return "", None, key
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return parts[0], "/".join(parts[1:-1]), parts[-1]
