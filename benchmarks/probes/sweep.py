"""A grid of training runs over config keys and seeds, and one table of their final metrics.

    python -m benchmarks.probes.sweep ppo.actor_lr=1e-4,1e-3 env.num_envs=4,8 --seeds 3 --config envs/tiny.toml
    nox -s sweep -- ppo.actor_lr=1e-4,1e-3 --seeds 3 --config envs/tiny.toml

``KEY=V1,V2,...`` sweeps a config key over values (TOML values; commas inside ``[...]``, ``{...}`` or quotes do
not split); ``KEY=V`` with one value is fixed for every run. Every setting of the grid runs once per seed
(``run.seed`` = first seed, first seed + 1, ...), each with ``agents/ppo.py`` in its own folder
``OUT/runs/<setting>-s<seed>-NNNN`` and its log in ``OUT/logs/``. A run's final metrics are the means over its
last 10% of updates (``--last``); episode metrics (success, return, length, progression) are weighted by the
episodes that ended in each update. The table gives, per setting, the mean and the spread (sample standard
deviation, min and max) over seeds: ``OUT/sweep.md``, ``OUT/sweep.csv`` and ``OUT/sweep.json``.

Rerunning the same command skips finished runs and resumes unfinished ones from their newest checkpoint, so a
sweep stopped half-way continues where it stopped. ``--jobs J`` runs J trainings at once; ``--dry-run``
prints the runs without starting them; ``--table-only`` rebuilds the table from the run folders.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import itertools
import json
import math
import re
import statistics
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT
from verlog.pipes import closed_pipe_ok
from verlog.runkit.folder import CONFIG_FILE, METRICS_FILE, latest_checkpoint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 ships no TOML reader
    import tomli as tomllib

#: The metrics the table shows, with their labels (the names are metrics.jsonl's).
METRICS = {
    "env/success": "success",
    "charts/episodic_return": "return",
    "env/progression": "progression",
    "charts/episodic_length": "length",
    "env/invalid_action_rate": "invalid",
    "charts/turns_per_s": "turns/s",
}
#: Metrics that are means over the episodes that ended in an update: weighted by ``charts/episodes``.
EPISODE_METRICS = {"env/success", "charts/episodic_return", "env/progression", "charts/episodic_length"}


# ---------------------------------------------------------------------------------------------- the grid
def split_values(text: str) -> list[str]:
    """Split ``V1,V2`` at commas outside brackets, braces and quotes (``[1, 2],[3]`` is two values)."""
    values, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote and text[i - 1] != "\\" else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            values.append(text[start:i].strip())
            start = i + 1
    values.append(text[start:].strip())
    if any(not v for v in values) or depth or quote:
        raise ValueError(f"cannot split {text!r} into values")
    return values


@dataclass(frozen=True)
class Setting:
    """One point of the grid: ``(key, value text)`` pairs, in the order the keys were given."""

    values: tuple[tuple[str, str], ...]

    @property
    def overrides(self) -> list[str]:
        return [f"{key}={value}" for key, value in self.values]

    @property
    def slug(self) -> str:
        """A file-name-safe name (run folders are globbed by it, so no glob characters)."""
        if not self.values:
            return "base"
        text = "_".join(f"{key.split('.')[-1]}={value}" for key, value in self.values)
        return re.sub(r"[^A-Za-z0-9._=+-]+", "-", text).strip("-")[:120]


def expand(specs: Sequence[str]) -> tuple[list[Setting], list[str]]:
    """``KEY=V1,V2`` arguments as the grid (the Cartesian product) and the fixed ``KEY=V`` overrides."""
    swept: list[tuple[str, list[str]]] = []
    fixed: list[str] = []
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip()
        if not sep or "." not in key:
            raise ValueError(f"{spec!r} is not of the form section.key=V1,V2,...")
        values = split_values(text)
        if len(values) == 1:
            fixed.append(f"{key}={values[0]}")
        elif any(key == k for k, _ in swept):
            raise ValueError(f"{key} is swept twice")
        else:
            swept.append((key, values))
    grid = [
        Setting(tuple(zip([k for k, _ in swept], combo, strict=True)))
        for combo in itertools.product(*[values for _, values in swept])
    ]
    return grid, fixed


@dataclass
class Run:
    setting: Setting
    seed: int
    name: str
    folder: Path | None = None
    status: str = "pending"
    final: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- runs
def run_folders(root: Path, name: str) -> list[Path]:
    """The folders the trainer made for run ``name`` (``name-NNNN``), oldest first."""
    found = [
        p for p in root.glob(f"{name}-*") if p.is_dir() and re.fullmatch(r"\d{4,}", p.name[len(name) + 1 :])
    ]
    return sorted(found, key=lambda p: int(p.name[len(name) + 1 :]))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a line that does not parse (a run killed mid-write) is skipped."""
    records = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def updates_of(folder: Path) -> list[dict[str, Any]]:
    """One record per update (warm-up lines dropped; a resumed run's repeated update: the later wins)."""
    by_update: dict[int, dict[str, Any]] = {}
    for record in read_jsonl(folder / METRICS_FILE):
        update = record.get("update")
        if isinstance(update, int | float) and "warmup/iteration" not in record:
            by_update[int(update)] = record
    return [by_update[u] for u in sorted(by_update) if u > 0]


def total_updates(folder: Path) -> int | None:
    try:
        return int(tomllib.loads((folder / CONFIG_FILE).read_text())["run"]["total_updates"])
    except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError):
        return None


def is_finished(folder: Path) -> bool:
    total = total_updates(folder)
    records = updates_of(folder)
    return total is not None and bool(records) and int(records[-1]["update"]) >= total


def final_metrics(records: Sequence[dict[str, Any]], last: float) -> dict[str, float]:
    """Means over the last ``last`` fraction of updates (at least one); episode metrics episode-weighted."""
    if not records:
        return {}
    tail = records[-max(1, math.ceil(last * len(records))) :]
    out: dict[str, float] = {"updates": float(records[-1]["update"])}
    for key in METRICS:
        pairs = []
        for record in tail:
            value = record.get(key)
            if not isinstance(value, int | float) or not math.isfinite(value):
                continue
            weight = record.get("charts/episodes", 0.0) if key in EPISODE_METRICS else 1.0
            if weight:
                pairs.append((float(value), float(weight)))
        if pairs:
            out[key] = math.fsum(v * w for v, w in pairs) / math.fsum(w for _, w in pairs)
    return out


def launch(run: Run, config: Path, fixed: Sequence[str], out: Path) -> Run:
    """Train one run to the end (resuming its unfinished folder if it has a checkpoint)."""
    runs_dir, logs = out / "runs", out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    folders = run_folders(runs_dir, run.name)
    if folders and is_finished(folders[-1]):
        run.folder, run.status = folders[-1], "done before"
        return run
    script = str(ROOT / "agents" / "ppo.py")
    if folders and latest_checkpoint(folders[-1]) is not None:
        command = [sys.executable, script, "--resume", str(folders[-1])]
    else:
        command = [
            sys.executable, script, "--config", str(config), *fixed, *run.setting.overrides,
            f"run.seed={run.seed}", f"run.output_dir={runs_dir}", f"run.name={run.name}", "run.console=false",
        ]  # fmt: skip
    with open(logs / f"{run.name}.log", "a") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    folders = run_folders(runs_dir, run.name)
    run.folder = folders[-1] if folders else None
    run.status = "done" if code == 0 and run.folder and is_finished(run.folder) else f"failed (exit {code})"
    return run


# ---------------------------------------------------------------------------------------------- the table
def aggregate(runs: Sequence[Run], last: float) -> list[dict[str, Any]]:
    """One row per setting: its values, the seeds that finished, and mean / std / min / max per metric."""
    rows = []
    for setting in dict.fromkeys(run.setting for run in runs):
        mine = [run for run in runs if run.setting == setting]
        finals = []
        for run in mine:
            if run.folder is not None and is_finished(run.folder):
                run.final = final_metrics(updates_of(run.folder), last)
                finals.append(run.final)
        row: dict[str, Any] = {key: value for key, value in setting.values}
        row["setting"] = setting.slug
        row["seeds"] = len(finals)
        row["failed"] = len(mine) - len(finals)
        for key in METRICS:
            values = [f[key] for f in finals if key in f]
            row[f"{key}/mean"] = statistics.fmean(values) if values else math.nan
            row[f"{key}/std"] = statistics.stdev(values) if len(values) > 1 else (0.0 if values else math.nan)
            row[f"{key}/min"] = min(values) if values else math.nan
            row[f"{key}/max"] = max(values) if values else math.nan
        rows.append(row)
    return rows


def _cell(row: dict[str, Any], key: str) -> str:
    mean, std = row[f"{key}/mean"], row[f"{key}/std"]
    if not math.isfinite(mean):
        return "-"
    digits = 1 if abs(mean) >= 10 else 3
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown(rows: Sequence[dict[str, Any]], keys: Sequence[str], note: str) -> str:
    head = [*keys, "seeds", *METRICS.values()]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(keys) + "---:|" * (1 + len(METRICS))]
    for row in rows:
        seeds = f"{row['seeds']}" + (f" ({row['failed']} failed)" if row["failed"] else "")
        cells = [str(row[k]) for k in keys] + [seeds] + [_cell(row, key) for key in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n{note}\n"


def to_csv(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> str:
    columns = [*keys, "setting", "seeds", "failed"]
    columns += [f"{key}/{stat}" for key in METRICS for stat in ("mean", "std", "min", "max")]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_tables(
    runs: Sequence[Run], keys: Sequence[str], out: Path, last: float, meta: dict[str, Any]
) -> list[dict]:
    rows = aggregate(runs, last)
    note = (
        f"Final metrics = means over the last {last:.0%} of each run's updates; episode metrics (success, "
        f"return, progression, length) pool the episodes that ended in those updates, so short successful "
        f"episodes count more often than on a fixed set of seeded episodes (`verlog eval` measures that). "
        f"Mean ± sample std over seeds. {meta['config']}, {meta['date']}."
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.md").write_text(markdown(rows, keys, note))
    (out / "sweep.csv").write_text(to_csv(rows, keys))
    per_run = [
        {
            "name": r.name,
            "seed": r.seed,
            "setting": r.setting.slug,
            "folder": str(r.folder),
            "status": r.status,
            **r.final,
        }
        for r in runs
    ]
    clean = json.loads(json.dumps({**meta, "rows": rows, "runs": per_run}).replace("NaN", "null"))
    (out / "sweep.json").write_text(json.dumps(clean, indent=2) + "\n")
    return rows


# ---------------------------------------------------------------------------------------------- main
def _parser() -> argparse.ArgumentParser:
    """The script's arguments (its docstring is the help)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("grid", nargs="*", metavar="KEY=V1,V2", help="config keys and their values")
    parser.add_argument(
        "--config", type=Path, default=ROOT / "envs" / "tiny.toml", help="preset (default envs/tiny.toml)"
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds per setting (default 3)")
    parser.add_argument("--first-seed", type=int, default=1, help="run.seed of the first seed (default 1)")
    parser.add_argument(
        "--out", type=Path, default=None, help="sweep folder (default runs/sweeps/<config>-<keys>)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="trainings at once (default 1)")
    parser.add_argument(
        "--last", type=float, default=0.1, help="fraction of updates the final metrics average"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the runs and exit")
    parser.add_argument(
        "--table-only", action="store_true", help="only rebuild the table from the run folders"
    )
    return parser


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    if args.seeds < 1 or args.jobs < 1 or not 0 < args.last <= 1:
        parser.error("--seeds and --jobs must be >= 1 and --last in (0, 1]")
    try:
        grid, fixed = expand(args.grid)
    except ValueError as error:
        parser.error(str(error))

    from rich.console import Console
    from rich.table import Table

    from verlog.config import ConfigError, load_config
    from verlog.runkit.validate import validate

    for setting in grid:  # every setting must load and derive before anything starts
        try:
            validate(load_config(args.config, [*fixed, *setting.overrides, "model.build_tiny=true"]))
        except (ConfigError, OSError) as error:
            parser.error(f"setting {setting.slug}: {error}")
    keys = [key for key, _ in grid[0].values]
    out = args.out or ROOT / "runs" / "sweeps" / re.sub(
        r"[^A-Za-z0-9._=+-]+", "-", "_".join([args.config.stem, *keys])
    )
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    runs = [Run(setting, seed, f"{setting.slug}-s{seed}") for setting in grid for seed in seeds]
    console = Console() if sys.stdout.isatty() else Console(width=150)
    console.print(f"{len(grid)} setting(s) x {args.seeds} seed(s) = {len(runs)} runs -> {out}")
    if args.dry_run:
        for run in runs:
            console.print(
                f"  {run.name}: {' '.join([*fixed, *run.setting.overrides, f'run.seed={run.seed}'])}"
            )
        return 0

    if args.table_only:
        for run in runs:
            folders = run_folders(out / "runs", run.name)
            run.folder = folders[-1] if folders else None
            run.status = "done" if run.folder and is_finished(run.folder) else "missing"
    else:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for run in pool.map(lambda r: launch(r, args.config, fixed, out), runs):
                console.print(f"  {run.name}: {run.status} ({run.folder})")
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "config": str(args.config),
        "fixed": fixed,
        "grid": [dict(s.values) for s in grid],
        "seeds": list(seeds),
        "last": args.last,
    }
    rows = write_tables(runs, keys, out, args.last, meta)
    table = Table(title=f"sweep {out.name}")
    for column in [*keys, "seeds", *METRICS.values()]:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*[str(row[k]) for k in keys], str(row["seeds"]), *[_cell(row, key) for key in METRICS])
    console.print(table)
    console.print(f"wrote {out / 'sweep.md'}, {out / 'sweep.csv'} and {out / 'sweep.json'}")
    return 0 if all(run.status.startswith("done") for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
