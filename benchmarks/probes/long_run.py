"""Long-run health: train for an hour on Crafter and check that resident memory stays flat, and that every
episode cut at a window edge, by the step limit or by the prompt budget is counted.

    nox -s long_run                                   # 60 minutes of envs/learn_crafter.toml with 2-turn histories
    python -m benchmarks.probes.long_run [--minutes 60] [--config PRESET] [section.key=value ...]
    python -m benchmarks.probes.long_run --run runs/long-run-0001     # check an existing run again

The run is the ordinary trainer (``run.max_minutes`` stops it), checkpointing every 20 updates, with the history
memory wrapper so that histories, storage, env resets, checkpoints and logging all run for the whole hour.
Afterwards ``metrics.jsonl`` is read: ``sys/rss_mb`` per update (its median over the first and the last fifth of
the updates after the first ten, its least-squares slope in MB per hour), and the episode counters summed
(``charts/episodes`` ended, ``charts/episodes_truncated`` cut by the step limit, ``env/prompt_cuts`` prompts cut
to fit ``prompt.max_prompt_tokens``, ``charts/episodes_running`` the episodes carried over each window edge).
It passes when the last fifth's median is within ``--max-growth`` (default 10 %) of the first fifth's; results go
to ``benchmarks/results/long_run.json`` and ``long_run.png``; the exit status is 1 when memory grew.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, load_preset, machine, update_records
from verlog.pipes import closed_pipe_ok
from verlog.quiet import quiet_console
from verlog.runkit.folder import CONFIG_FILE

#: Updates left out at the start: allocators and caches fill up there, which is not growth.
SETTLE_UPDATES = 10
DEFAULTS = [
    "run.name=long-run", "run.total_updates=1000000", "run.checkpoint_every=20", "run.keep_checkpoints=2",
    "env.memory=history", "env.memory_kwargs={turns = 2}",
]  # fmt: skip


def memory_health(records: Sequence[dict[str, Any]], max_growth: float) -> dict[str, Any]:
    """Resident memory's first and last fifth (after ``SETTLE_UPDATES``), its slope, and whether it is flat."""
    points = [
        (r["update"], r["sys/rss_mb"], r.get("time/total") or 0.0) for r in records if r.get("sys/rss_mb")
    ]
    points = points[SETTLE_UPDATES:] if len(points) > 2 * SETTLE_UPDATES else points
    if len(points) < 5:
        return {"updates": len(points), "flat": False, "reason": "too few updates to judge"}
    fifth = max(1, len(points) // 5)
    first = statistics.median(p[1] for p in points[:fifth])
    last = statistics.median(p[1] for p in points[-fifth:])
    hours, elapsed = [], 0.0
    for p in points:
        elapsed += p[2]
        hours.append(elapsed / 3600)
    mean_h, mean_mb = statistics.fmean(hours), statistics.fmean(p[1] for p in points)
    cov = sum((h - mean_h) * (p[1] - mean_mb) for h, p in zip(hours, points, strict=True))
    var = sum((h - mean_h) ** 2 for h in hours)
    growth = (last - first) / first
    return {
        "updates": len(points),
        "first_fifth_median_mb": first,
        "last_fifth_median_mb": last,
        "growth": growth,
        "slope_mb_per_hour": cov / var if var else 0.0,
        "min_mb": min(p[1] for p in points),
        "max_mb": max(p[1] for p in points),
        "max_growth": max_growth,
        "flat": growth <= max_growth,
    }


def counters(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """What was cut and carried over, summed over the run (nothing cut goes uncounted)."""
    total = lambda key: float(sum(r.get(key) or 0.0 for r in records))  # noqa: E731
    running = [r["charts/episodes_running"] for r in records if r.get("charts/episodes_running") is not None]
    return {
        "episodes_ended": total("charts/episodes"),
        "episodes_truncated": total("charts/episodes_truncated"),
        "prompt_cuts": total("env/prompt_cuts"),
        "mean_episodes_running_at_window_edge": statistics.fmean(running) if running else 0.0,
        "turns": float(records[-1].get("global_step", 0)) if records else 0.0,
    }


def plot(records: Sequence[dict[str, Any]], health: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4))
    ax = fig.add_subplot()
    xs = [r["global_step"] for r in records if r.get("sys/rss_mb")]
    ax.plot(
        xs, [r["sys/rss_mb"] for r in records if r.get("sys/rss_mb")], color="tab:blue", label="resident MB"
    )
    ax.set(xlabel="turns played", ylabel="resident memory (MB)", ylim=(0, None))
    ax.set_title(f"long run: growth {100 * health.get('growth', float('nan')):+.1f} % (first to last fifth)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "learn_crafter.toml", help="preset")
    parser.add_argument("--minutes", type=float, default=60.0, help="training time (run.max_minutes)")
    parser.add_argument("--run", type=Path, default=None, help="check an existing run folder instead")
    parser.add_argument("--max-growth", type=float, default=0.10, help="allowed resident growth (fraction)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for long_run.json and .png")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    args = parser.parse_intermixed_args(argv)
    quiet_console()
    load_start, started = os.getloadavg()[0], time.perf_counter()
    if args.run is None:
        overrides = [*DEFAULTS, f"run.max_minutes={args.minutes}", *args.overrides]
        config = load_preset(parser, args.config, overrides)
        from verlog.ppo.trainer import Trainer

        trainer = Trainer(config)
        run_dir = trainer.run_dir
        print(f"training for {args.minutes:g} minutes into {run_dir}", flush=True)
        trainer.train()
    else:
        run_dir = args.run
    records = update_records(run_dir)
    health = memory_health(records, args.max_growth)
    counts = counters(records)
    print(json.dumps({"memory": health, "counters": counts}, indent=2))
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": [load_start, os.getloadavg()[0]],
        "run_dir": str(run_dir),
        "wall_s": time.perf_counter() - started if args.run is None else None,
        "train_s": sum(r.get("time/total") or 0.0 for r in records),
        "updates": len(records),
        "memory": health,
        "counters": counts,
        "config": json.loads(json.dumps(load_preset(parser, run_dir / CONFIG_FILE, []).to_dict())),
        "curve": [
            {
                k: r.get(k)
                for k in (
                    "update",
                    "global_step",
                    "sys/rss_mb",
                    "charts/episodes_running",
                    "charts/episodes_truncated",
                    "env/prompt_cuts",
                )
            }
            for r in records
        ],  # fmt: skip
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "long_run.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(records, health, args.out / "long_run.png")
    print(f"wrote {args.out / 'long_run.json'} and .png; memory {'flat' if health['flat'] else 'GREW'}")
    return 0 if health["flat"] else 1


if __name__ == "__main__":
    sys.exit(main())
