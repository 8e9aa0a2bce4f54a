"""Sampled turns of a run: what the model saw, what it said, what the game did with it.

Curves say *that* a run goes wrong; the turns say *why*. The trainer appends a few turns per update to
``RUN/samples.jsonl`` with :class:`SampleWriter`, ``verlog report`` shows the last ones, and
:func:`samples_table` hands them to a tracker table. The module imports neither torch nor any tracker,
so every floor may use it.

The file is append-only, one JSON object per line, and each record goes out in a single ``write`` of an
unbuffered ``O_APPEND`` file: a crash can leave at most a truncated last line, which the reader skips and
counts and the next writer closes off with a newline before appending.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from verlog.runkit.folder import SAMPLES_FILE

__all__ = [
    "SampleWriter",
    "SamplesRead",
    "TurnSample",
    "count_lines",
    "family_of",
    "parse_jsonl",
    "pick_turns",
    "read_samples",
    "samples_table",
]

#: File name of the sampled turns inside a run folder.
SOURCES = ("train", "eval")
#: ``info`` keys that name the variant a Mixed env drew for the episode, in order of preference.
VARIANT_KEYS = ("task", "level")

R = TypeVar("R")


@dataclass
class TurnSample:
    """One turn as the model lived it; the schema of a ``samples.jsonl`` line."""

    update: int
    global_step: int
    env_id: str
    family: str
    env_index: int
    episode: int
    turn: int
    #: The prompt exactly as the model saw it (chat-templated text).
    prompt: str
    #: The raw response text.
    response: str
    #: The action the env parsed from the response and executed.
    action: str
    action_valid: bool
    reward: float
    progression: float
    #: ``"train"`` (collected by the learner) or ``"eval"``.
    source: str = "train"

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: numpy / torch scalars become Python ones, non-finite floats become null."""
        out: dict[str, Any] = {}
        for name, kind in _field_types().items():
            value = getattr(self, name)
            if kind is float:
                value = None if value is None else float(value)
                out[name] = value if value is not None and math.isfinite(value) else None
            else:
                out[name] = kind(value)
        return out

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> TurnSample:
        """Rebuild a sample from a line of ``samples.jsonl``; extra keys are ignored (newer writers)."""
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in record and n != "source"]
        if missing:
            raise ValueError(f"sample record lacks {missing}")
        kwargs = {n: record[n] for n in names if n in record}
        for key in ("reward", "progression"):
            if kwargs[key] is None:
                kwargs[key] = math.nan
        return cls(**kwargs)


@functools.cache
def _field_types() -> dict[str, type]:
    """Field name -> int / float / bool / str, resolved once (the annotations are strings here)."""
    hints = typing.get_type_hints(TurnSample)
    return {f.name: hints[f.name] for f in fields(TurnSample)}


def family_of(env_id: str, info: Mapping[str, Any] | None = None) -> str:
    """The family a turn is counted under: the env id, or ``<env id>:<task|level>`` for a Mixed env.

    An explicit ``info["family"]`` wins. Use the same function for the ``env/<family>/...`` metric keys and
    for :attr:`TurnSample.family` so the report can put curves and turns side by side.
    """
    if info:
        family = info.get("family")
        if family not in (None, ""):
            return str(family)
        if "Mixed" in env_id:
            for key in VARIANT_KEYS:
                value = info.get(key)
                if value not in (None, ""):
                    return f"{env_id}:{value}"
    return env_id


def _record_family(record: TurnSample | Mapping[str, Any]) -> str:
    if isinstance(record, TurnSample):
        return record.family or record.env_id
    family = record.get("family")
    if family not in (None, ""):
        return str(family)
    return family_of(str(record.get("env_id", "")), record)


def pick_turns(records: Sequence[R], per_family: int, rng: random.Random | Any | int | None) -> list[R]:
    """Up to ``per_family`` records of each family, drawn without replacement, in their original order.

    Families are what a reader compares, so each gets its share whatever its number of envs. ``rng`` is a
    ``random.Random``, a ``numpy.random.Generator`` or an int seed: the same rng state gives the same picks.
    """
    if per_family < 0:
        raise ValueError(f"per_family must be >= 0, got {per_family}")
    if isinstance(rng, int) or rng is None:
        rng = random.Random(rng)
    groups: dict[str, list[int]] = {}
    for i, record in enumerate(records):
        groups.setdefault(_record_family(record), []).append(i)
    chosen: list[int] = []
    for indices in groups.values():
        k = min(per_family, len(indices))
        if k == 0:
            continue
        if isinstance(rng, random.Random):
            chosen.extend(rng.sample(indices, k))
        else:  # numpy.random.Generator
            chosen.extend(indices[int(j)] for j in rng.choice(len(indices), size=k, replace=False))
    return [records[i] for i in sorted(chosen)]


def decoded_samples(
    turns: Iterable[dict[str, Any]], decode: Any, *, update: int, global_step: int
) -> list[TurnSample]:
    """Sampled-turn records of ``turns`` (dicts of :class:`TurnSample` fields with ``prompt_ids`` instead of the
    prompt), their prompts decoded with ``decode``."""
    return [
        TurnSample(update=update, global_step=global_step, prompt=decode(turn.pop("prompt_ids")), **turn)
        for turn in turns
    ]


def samples_table(
    records: Iterable[TurnSample | Mapping[str, Any]], max_chars: int | None = None
) -> tuple[list[str], list[list[Any]]]:
    """``(columns, rows)`` for a tracker table (``wandb.Table(columns=c, data=r)``, accelerate's ``log_table``).

    ``max_chars`` keeps the head of long prompts and responses so a table stays loadable in a browser.
    """
    columns = [f.name for f in fields(TurnSample)]
    rows: list[list[Any]] = []
    for record in records:
        data = record.to_dict() if isinstance(record, TurnSample) else dict(record)
        row = [data.get(c) for c in columns]
        if max_chars is not None:
            row = [v[:max_chars] + "…" if isinstance(v, str) and len(v) > max_chars else v for v in row]
        rows.append(row)
    return columns, rows


class SampleWriter:
    """Appends :class:`TurnSample` records to ``run_dir/samples.jsonl``; never rewrites the file.

    Each call writes its records with one ``write`` on an unbuffered append-mode file, so they reach the OS
    before the call returns (a killed trainer loses nothing it wrote) and writers on several processes do not
    interleave within a line. ``fsync=True`` also survives a power cut, at the cost of a disk sync per call.
    Call it on the main process only unless every process should contribute turns.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(run_dir) / SAMPLES_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._file = open(self.path, "ab", buffering=0)  # closed by close()
        # A previous run may have died mid-line: end that line so our first record starts on its own.
        size = self._file.seek(0, os.SEEK_END)
        if size > 0:
            with open(self.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    self._write_all(b"\n")

    def write(self, sample: TurnSample | Mapping[str, Any]) -> None:
        """Append one turn."""
        self.write_many([sample])

    def write_many(self, samples: Iterable[TurnSample | Mapping[str, Any]]) -> None:
        """Append several turns in one write (one update's picks, say)."""
        lines = []
        for sample in samples:
            if not isinstance(sample, TurnSample):
                sample = TurnSample.from_dict(sample)
            lines.append(json.dumps(sample.to_dict(), ensure_ascii=False, allow_nan=False) + "\n")
        if lines:
            self._write_all("".join(lines).encode("utf-8"))

    def _write_all(self, data: bytes) -> None:
        if self._file.closed:
            raise ValueError(f"SampleWriter for {self.path} is closed")
        view = memoryview(data)
        while view:
            n = self._file.write(view)
            view = view[n:]
        if self.fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file; further writes raise."""
        self._file.close()

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class SamplesRead:
    """What :func:`read_samples` found: the records, and how many lines it had to skip."""

    records: list[dict[str, Any]]
    skipped: int
    #: 1-based line numbers of the skipped lines (counted from the start of the part read).
    skipped_lines: list[int]
    #: True when the file does not end with a newline: a writer was cut mid-line, or is still writing.
    truncated_tail: bool


def parse_jsonl(lines: Iterable[bytes]) -> tuple[list[dict[str, Any]], list[int]]:
    """Decode JSON-object lines; returns the objects and the 1-based numbers of lines that were not one.

    Blank lines are neither records nor errors. Shared with the report's metrics reader.
    """
    records: list[dict[str, Any]] = []
    bad: list[int] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            bad.append(number)
            continue
        if isinstance(obj, dict):
            records.append(obj)
        else:
            bad.append(number)
    return records, bad


def _tail_lines(path: Path, n: int, block: int = 1 << 16) -> list[bytes]:
    """The last ``n`` lines of a file, without reading a large file whole."""
    with open(path, "rb") as f:
        pos = f.seek(0, os.SEEK_END)
        data = b""
        # n lines need n + 1 newlines in view (the first line read may be cut), plus a trailing one.
        while pos > 0 and data.count(b"\n") <= n + 1:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    if pos > 0:
        lines = lines[1:]  # starts mid-line
    return lines[-n:]


def read_samples(path: str | os.PathLike[str], last: int | None = None) -> SamplesRead:
    """Read ``samples.jsonl`` (a file, or the run folder holding it), skipping and counting bad lines.

    ``last`` reads only the last lines of the file, so a report on a long run stays fast.
    """
    path = Path(path)
    if path.is_dir():
        path = path / SAMPLES_FILE
    if last is None:
        lines = path.read_bytes().split(b"\n")
    else:
        lines = _tail_lines(path, last) if last > 0 else []
    records, bad = parse_jsonl(lines)
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        truncated = False
        if end > 0:
            f.seek(end - 1)
            truncated = f.read(1) != b"\n"
    return SamplesRead(records=records, skipped=len(bad), skipped_lines=bad, truncated_tail=truncated)


def count_lines(path: str | os.PathLike[str], block: int = 1 << 20) -> int:
    """Number of lines (a last one without its newline included), counted in blocks: about 1 s per GB."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(block):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")
