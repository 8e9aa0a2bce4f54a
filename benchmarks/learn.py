"""The learning demonstration: PPO from a tiny random model on BabyAI GoTo, on a CPU, and a check that it learns.

    nox -s learn
    python benchmarks/learn.py [--config envs/learn.toml] [section.key=value ...]

It trains the preset (``envs/learn.toml``: a tiny randomly initialised Qwen3 and a word-level tokenizer trained
on the env's own text, seeded; see :func:`verlog.models.tiny.word_tokenizer`) with the ordinary
:class:`~verlog.ppo.trainer.Trainer`, then reads the run's ``metrics.jsonl``. The success rate of the first and
of the last 10% of updates pools the episodes that ended in those updates (``env/success`` weighted by ``charts/episodes``); its standard error is BALROG's
population std / sqrt(n), here sqrt(p (1 - p) / n). The script prints both, writes the curve to
``benchmarks/results/learn.png`` and the figures to ``benchmarks/results/learn.json``, and exits with status 1
unless the last window beats the first by at least three standard errors of their difference
(sqrt(SE_first^2 + SE_last^2)), with at least 10 episodes in each: a learner that does not learn fails it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verlog.evaluation import output
from verlog.pipes import closed_pipe_ok
from verlog.quiet import quiet_console
from verlog.runkit.folder import CONFIG_FILE, METRICS_FILE

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: The demonstration must finish within this on the 2-core CPU it was tuned on (reported, not enforced).
BUDGET_MIN = 30.0
Z_REQUIRED = 3.0
#: Fewer episodes than this in a window measure nothing (0 of 3 and 3 of 3 have zero standard error).
MIN_EPISODES = 10
#: Written into the run folder after training, so ``--run`` reports the time it took.
WALL_FILE = "learn-wall.json"


def window(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Pooled success rate and its standard error over the episodes that ended in ``records``' updates."""
    successes = episodes = 0.0
    for record in records:
        n = record.get("charts/episodes") or 0.0
        rate = record.get("env/success")
        if n and rate is not None:
            successes += rate * n
            episodes += n
    if not episodes:
        return {"updates": len(records), "episodes": 0, "success": math.nan, "se": math.nan}
    p = successes / episodes
    return {
        "updates": len(records),
        "first_update": int(records[0]["update"]),
        "last_update": int(records[-1]["update"]),
        "episodes": int(round(episodes)),
        "success": p,
        "se": math.sqrt(p * (1.0 - p) / episodes),
    }


def compare(records: Sequence[dict[str, Any]], fraction: float = 0.1) -> dict[str, Any]:
    """First vs last ``fraction`` of the updates: both windows, the gap and how many SEs it is."""
    k = max(1, round(fraction * len(records)))
    first, last = window(records[:k]), window(records[-k:])
    gap = last["success"] - first["success"]
    se = math.sqrt(first["se"] ** 2 + last["se"] ** 2)
    z = gap / se if se > 0 else (math.inf if gap > 0 else -math.inf)
    enough = min(first["episodes"], last["episodes"]) >= MIN_EPISODES
    return {
        "first": first,
        "last": last,
        "gap": gap,
        "gap_se": se,
        "z": z,
        "passed": bool(enough and z >= Z_REQUIRED),
    }


def update_records(run_dir: Path) -> list[dict[str, Any]]:
    """One record per update from ``metrics.jsonl`` (critic warm-up lines dropped)."""
    records = []
    for line in (run_dir / METRICS_FILE).read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "warmup/iteration" not in record and record.get("update"):
            records.append(record)
    return records


def plot(records: Sequence[dict[str, Any]], result: dict[str, Any], path: Path, title: str) -> None:
    """Success per update (episode-weighted, over a sliding window of 10% of the updates), the two windows
    with their ± 1 SE bands, and the invalid-action rate."""
    from matplotlib.figure import Figure

    updates = [int(r["update"]) for r in records]
    k = max(1, round(0.1 * len(records)))
    smooth = []
    for i in range(len(records)):
        w = window(records[max(0, i - k + 1) : i + 1])
        smooth.append(w["success"] if w["episodes"] >= MIN_EPISODES else math.nan)  # too few: no point
    fig = Figure(figsize=(8, 4.8))
    ax = fig.add_subplot()
    ax.plot(updates, smooth, color="tab:blue", label=f"success (episodes of the last {k} updates)")
    for name, color in (("first", "tab:red"), ("last", "tab:green")):
        w = result[name]
        xs = [w["first_update"], w["last_update"]]
        ax.hlines(
            w["success"], *xs, color=color, lw=3, label=f"{name} 10%: {w['success']:.3f} ± {w['se']:.3f}"
        )
        ax.fill_between(xs, w["success"] - w["se"], w["success"] + w["se"], color=color, alpha=0.25)
    invalid = [r.get("env/invalid_action_rate") for r in records]
    ax.plot(updates, invalid, color="grey", lw=0.8, alpha=0.7, label="invalid-action rate")
    ax.set(xlabel="PPO update", ylabel="rate", ylim=(0, 1), title=title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def evaluate_both(config: Any, run_dir: Path, episodes: int) -> dict[str, dict[str, float]]:
    """The same seeded episodes played by the initial model and by the run's last checkpoint (sampled at
    the training temperature, with the run's prompts, memory and env settings), through ``verlog eval``."""
    from verlog.evaluation import evaluate

    common = {
        "suite": config.env.id,
        "episodes": episodes,
        "num_envs": config.env.num_envs,
        "env_kwargs": dict(config.env.kwargs),
        "config": run_dir / CONFIG_FILE,
        "sample": True,
    }
    figures = {}
    for name, agent in (("initial", config.model.path), ("trained", str(run_dir))):
        summary = evaluate(agent, out=run_dir / f"eval-{name}", **common)
        task = summary["tasks"][config.env.id]
        figures[name] = {
            "episodes": task["episodes"],
            "success": task["success_rate"] / 100,
            "se": task["success_se"] / 100,
            "invalid_action_rate": task["invalid_action_rate"],
            "mean_length": task["mean_length"],
        }
    return figures


def load_preset(parser: argparse.ArgumentParser, path: Path, overrides: Sequence[str]) -> Any:
    """The preset with its overrides, derived and checked as ``agents/ppo.py`` checks it; a bad one ends the
    script with the parser's one-line error before any model loads."""
    from verlog.ppo.config import ConfigError, load_config
    from verlog.ppo.validate import validate

    try:
        config = load_config(path, overrides)
        validate(config)
    except (ConfigError, OSError) as error:
        parser.error(f"config: {error}")
    return config


def machine() -> dict[str, Any]:
    """The machine, with torch's version (imported here, so the record names it)."""
    import torch  # noqa: F401  (loaded, so the machine record names its version)

    return output.machine()


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "learn.toml", help="preset")
    parser.add_argument(
        "--run", type=Path, default=None, help="check an existing run folder instead of training"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for learn.json and learn.png")
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=96,
        metavar="N",
        help="afterwards, play N seeded episodes with the initial and the trained model (0: skip)",
    )
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    args = parser.parse_intermixed_args(argv)
    quiet_console()  # the libraries' notices go to the run's console.log, as in agents/ppo.py

    from rich.console import Console

    from verlog.ppo.config import load_config

    console = Console()
    started = time.perf_counter()
    if args.run is None:
        config = load_preset(parser, args.config, args.overrides)
        from verlog.ppo.trainer import Trainer

        if not Path(config.model.path).exists():
            console.print(f"building the tiny model and its word-level tokenizer in {config.model.path}")
        trainer = Trainer(config)
        run_dir = trainer.run_dir
        console.print(f"training {config.run.total_updates} updates into {run_dir}")
        trainer.train()
        wall: float | None = time.perf_counter() - started
        (run_dir / WALL_FILE).write_text(json.dumps({"wall_s": wall}) + "\n")
    else:
        run_dir = args.run
        config = load_config(run_dir / CONFIG_FILE)
        wall = (
            json.loads((run_dir / WALL_FILE).read_text())["wall_s"]
            if (run_dir / WALL_FILE).is_file()
            else None
        )

    records = update_records(run_dir)
    if not records:
        console.print(f"[red]{run_dir} has no update in metrics.jsonl[/red]")
        return 1
    result = compare(records)
    first, last = result["first"], result["last"]
    console.print(
        f"success, first 10% of updates ({first['updates']} updates, {first['episodes']} episodes): "
        f"[bold]{first['success']:.3f} ± {first['se']:.3f}[/bold]"
    )
    console.print(
        f"success, last 10% of updates  ({last['updates']} updates, {last['episodes']} episodes): "
        f"[bold]{last['success']:.3f} ± {last['se']:.3f}[/bold]"
    )
    verdict = "[green]PASS[/green]" if result["passed"] else "[red]FAIL[/red]"
    console.print(
        f"gap {result['gap']:+.3f} ± {result['gap_se']:.3f} = {result['z']:.1f} standard errors "
        f"(need >= {Z_REQUIRED:g}): {verdict}"
    )
    if wall is not None:
        over = (
            f" [yellow](over the {BUDGET_MIN:.0f}-minute budget)[/yellow]" if wall > 60 * BUDGET_MIN else ""
        )
        console.print(f"training wall time {wall / 60:.1f} min{over}, run folder {run_dir}")

    evaluation = None
    if args.eval_episodes:
        evaluation = evaluate_both(config, run_dir, args.eval_episodes)
        for name, figures in evaluation.items():
            console.print(
                f"evaluation, {name} model, {figures['episodes']} seeded episodes (sampled): success "
                f"[bold]{figures['success']:.3f} ± {figures['se']:.3f}[/bold], invalid actions "
                f"{figures['invalid_action_rate']:.1f}%"
            )

    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {**machine(), "torch_threads": config.run.torch_threads or machine().get("torch_threads")},
        "config_file": str(args.config) if args.run is None else str(run_dir / CONFIG_FILE),
        "config": config.to_dict(),
        "run_dir": str(run_dir),
        "wall_s": wall,
        "updates_s": sum(r.get("time/total") or 0.0 for r in records),
        "updates": len(records),
        "turns": int(records[-1].get("global_step", 0)),
        "z_required": Z_REQUIRED,
        **result,
        "evaluation": evaluation,
        "curve": [
            {k: r.get(k) for k in ("update", "env/success", "charts/episodes", "env/invalid_action_rate")}
            for r in records
        ],
    }
    (args.out / "learn.json").write_text(json.dumps(report, indent=2) + "\n")
    title = f"PPO, tiny random model, {config.env.id.split('/')[-1]}: z = {result['z']:.1f}"
    plot(records, result, args.out / "learn.png", title)
    console.print(f"wrote {args.out / 'learn.json'} and {args.out / 'learn.png'}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
