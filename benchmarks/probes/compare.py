"""PPO with a critic (GAE) against the critic-free group baselines GRPO, GiGPO and RLOO, side by side.

    nox -s compare
    python -m benchmarks.probes.compare [--seeds 3] [--turns 8192] [--jobs 2] [section.key=value ...]
    python -m benchmarks.probes.compare --methods grpo,gigpo,rloo --keep gae   # re-run some, keep the others' rows

Every method trains the tiny model of the learning demonstration (``envs/learn.toml``: a random two-layer
Qwen3 with a word-level tokenizer, BabyAI GoTo, binary success reward, one-token answers) from the same
initial weights, with the same run seeds and the same budget of env turns (``--turns``); only the estimator
and the batch shape differ:

* ``gae``: the preset, PPO with a critic (32 envs x 8 turns per update);
* ``grpo`` / ``gigpo`` / ``rloo``: ``algo.advantage`` set, 16 envs in groups of 4 (4 groups of 4 whole
  episodes per update, up to ``MAX_TURNS`` turns each), groups without signal left out of the update (and played
  again first with ``algo.resample_attempts=k`` among the overrides); every turn played counts against the budget.

All share the same episode limit (``env.kwargs.max_episode_steps = MAX_TURNS``), so the task is the same. Each
run is its own process (``--one``) and stops at the first update that reaches the budget; its peak resident
memory (``ru_maxrss``) and the critic's parameter count are recorded. Success at a point of the budget pools
the episodes that ended in the updates of that stretch of turns; the final success pools the last quarter of
the budget per seed, and the table gives its mean over seeds ± the standard error over seeds. Outputs:
``benchmarks/results/compare.{json,md,png}``; the run folders go to ``runs/compare/``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, mean_se
from verlog.quiet import attach_run_log, quiet_console
from verlog.runkit.folder import METRICS_FILE
from verlog.runkit.memory import peak_resident_mb
from verlog.runkit.validate import validate

MAX_TURNS = 24
COMMON = [
    "run.checkpoint_every=0",
    "run.export_actor=false",
    "run.samples_every=0",
    "run.console=false",
    "run.total_updates=100000",  # the turn budget stops the run
    "watchdog.enabled=false",  # the estimators alone (the watchdog came after the PPO rows kept with --keep)
    f"env.kwargs={{invalid_action_penalty = 0.0, invalid_action_feedback = false, max_episode_steps = {MAX_TURNS}}}",
]
GROUPS = ["env.num_envs=16", "algo.group_size=4", f"algo.max_episode_turns={MAX_TURNS}"]
METHODS: dict[str, list[str]] = {
    "gae": ['algo.advantage="gae"'],
    "grpo": ['algo.advantage="grpo"', *GROUPS],
    "gigpo": ['algo.advantage="gigpo"', *GROUPS],
    "rloo": ['algo.advantage="rloo"', *GROUPS],
}
LABELS = {
    "gae": "PPO + GAE (critic)",
    "grpo": "GRPO (no critic)",
    "gigpo": "GiGPO (no critic)",
    "rloo": "RLOO (no critic)",
}


def run_one(method: str, seed: int, turns: int, config: Path, out: Path, overrides: Sequence[str]) -> int:
    """Train one method and seed up to the turn budget in this process; write ``result.json`` in the run."""
    from verlog.config import load_config

    config_ = load_config(
        config,
        [
            *COMMON,
            *METHODS[method],
            f"run.seed={seed}",
            f"run.name={method}-s{seed}",
            f"run.output_dir={out}",
            *overrides,
        ],
    )
    validate(config_)
    from verlog.ppo.trainer import Trainer

    started = time.perf_counter()
    trainer = Trainer(config_)
    try:
        while trainer.global_step < turns:
            trainer.logger.log(trainer.train_update(), step=trainer.global_step)
    finally:
        trainer.close()
    critic = trainer.learner.models.critic
    result = {
        "method": method,
        "seed": seed,
        "turns": trainer.global_step,
        "updates": trainer.update,
        "wall_s": time.perf_counter() - started,
        "max_rss_mb": peak_resident_mb(),
        "critic": critic is not None,
        "critic_params": 0 if critic is None else sum(p.numel() for p in critic.parameters()),
        "actor_params": sum(p.numel() for p in trainer.learner.models.actor.parameters()),
    }
    (trainer.run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


def records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / METRICS_FILE).read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("update")]


def pooled(rows: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """Successes and episodes over the updates ``rows``."""
    wins = episodes = 0.0
    for r in rows:
        n = r.get("charts/episodes") or 0.0
        if n and r.get("env/success") is not None:
            wins += r["env/success"] * n
            episodes += n
    return wins, episodes


def summarise(runs: dict[str, list[Path]], turns: int, bins: int = 16) -> dict[str, Any]:
    """Per method: the success curve (mean over seeds per stretch of turns), final success, turns/s, memory."""
    width = turns / bins
    out: dict[str, Any] = {}
    for method, folders in runs.items():
        curves, finals, rates, rss, no_signal, filtered, results = [], [], [], [], [], [], []
        for folder in folders:
            rows = records(folder)
            result = json.loads((folder / "result.json").read_text())
            results.append(result)
            curve = []
            for b in range(bins):
                part = [r for r in rows if b * width < r["global_step"] <= (b + 1) * width]
                wins, n = pooled(part)
                curve.append(wins / n if n else math.nan)
            curves.append(curve)
            wins, n = pooled([r for r in rows if r["global_step"] > 0.75 * turns])
            finals.append(wins / n if n else math.nan)
            rates.append(result["turns"] / sum(r.get("time/total", 0.0) for r in rows))
            rss.append(result["max_rss_mb"])
            if method != "gae":  # per update: the share of groups without signal in their first draw
                no_signal.append(statistics.fmean(r.get("groups/no_signal_share", 0.0) for r in rows))
                filtered.append(statistics.fmean(r.get("groups/filtered_share", 0.0) for r in rows))
        final, final_se = mean_se(finals)
        out[method] = {
            "label": LABELS[method],
            "seeds": [r["seed"] for r in results],
            "runs": [str(f) for f in folders],
            "turns": [r["turns"] for r in results],
            "updates": [r["updates"] for r in results],
            "final_success": final,
            "final_success_se": final_se,
            "final_success_per_seed": finals,
            "turns_per_s": statistics.fmean(rates),
            "max_rss_mb": statistics.fmean(rss),
            "critic_params": results[0]["critic_params"],
            "actor_params": results[0]["actor_params"],
            "no_signal_group_share": statistics.fmean(no_signal) if no_signal else None,
            "filtered_group_share": statistics.fmean(filtered) if filtered else None,
            "curve_turns": [(b + 0.5) * width for b in range(bins)],
            "curve": [mean_se([c[b] for c in curves]) for b in range(bins)],
        }
    return out


def table(summary: dict[str, Any], turns: int) -> str:
    lines = [
        f"| method | final success (last {turns // 4} of {turns} turns, mean ± SE over seeds) | per seed | "
        "turns/s | peak RSS (MB) | critic parameters | groups with no signal (first draw) | left out after resampling |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def share(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.0f}%"

    for s in summary.values():
        seeds = ", ".join(f"{v:.2f}" for v in s["final_success_per_seed"])
        label = s["label"] + (f" (run {s['reused_from'][:10]})" if "reused_from" in s else "")
        lines.append(
            f"| {label} | {s['final_success']:.3f} ± {s['final_success_se']:.3f} | {seeds} | "
            f"{s['turns_per_s']:.1f} | {s['max_rss_mb']:.0f} | {s['critic_params']:,} | "
            f"{share(s.get('no_signal_group_share'))} | {share(s.get('filtered_group_share'))} |"
        )
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: Path, title: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.8))
    ax = fig.add_subplot()
    for s in summary.values():
        xs = s["curve_turns"]
        ys = [m for m, _ in s["curve"]]
        se = [0.0 if math.isnan(e) else e for _, e in s["curve"]]
        line = ax.plot(xs, ys, marker="o", ms=3, label=s["label"])[0]
        low = [y - e for y, e in zip(ys, se, strict=True)]
        high = [y + e for y, e in zip(ys, se, strict=True)]
        ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2)
    ax.set(xlabel="env turns", ylabel="success rate (mean over seeds ± SE)", ylim=(0, 1), title=title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _parser() -> argparse.ArgumentParser:
    """The script's arguments (its docstring is the help)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "learn.toml", help="preset")
    parser.add_argument("--seeds", type=int, default=3, help="run seeds 1..N for every method")
    parser.add_argument("--turns", type=int, default=8192, help="env turns per run")
    parser.add_argument("--methods", default="gae,grpo,gigpo,rloo", help="comma-separated subset")
    parser.add_argument(
        "--keep", default="", help="methods whose rows are kept from the existing compare.json (not re-run)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "compare", help="run folders")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for compare.{json,md,png}")
    parser.add_argument("--table-only", action="store_true", help="summarise the newest finished runs again")
    parser.add_argument("--one", nargs=2, metavar=("METHOD", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument(
        "overrides", nargs="*", metavar="section.key=value", help="config overrides for every run"
    )
    return parser


def _run_cells(args: argparse.Namespace, jobs: list[tuple[str, int]], started: float) -> None:
    """Every (method, seed) cell in a child process of its own, ``--jobs`` at a time, each logging to
    ``<runs>/<method>-s<seed>.log``; the model is built once first, not by two cells at once."""
    from verlog.config import load_config
    from verlog.models.sources import resolve_model_path

    preset = load_config(args.config, [*COMMON, *args.overrides])
    resolve_model_path(preset.model, preset.env)  # built once here, not by two runs at once

    def launch(job: tuple[str, int]) -> int:
        method, seed = job
        log = args.runs / f"{method}-s{seed}.log"
        command = [sys.executable, "-m", "benchmarks.probes.compare", "--one", method, str(seed)]
        command += ["--turns", str(args.turns)]
        command += ["--config", str(args.config), "--runs", str(args.runs), *args.overrides]
        with log.open("w") as handle:
            code = subprocess.call(command, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
        print(f"{method} seed {seed}: exit {code} ({time.perf_counter() - started:.0f}s)", flush=True)
        return code

    with ThreadPoolExecutor(args.jobs) as pool:
        codes = list(pool.map(launch, jobs))
    if any(codes):
        print("some runs failed; see the logs in", args.runs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    quiet_console()  # the libraries' notices go to the run's console.log, as in agents/ppo.py
    if args.one:
        return run_one(args.one[0], int(args.one[1]), args.turns, args.config, args.runs, args.overrides)
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    jobs = [(m, s) for s in range(1, args.seeds + 1) for m in methods]
    args.runs.mkdir(parents=True, exist_ok=True)
    attach_run_log(args.runs, file_name="compare.log")  # this process's own library notices
    started = time.perf_counter()
    if not args.table_only:
        _run_cells(args, jobs, started)
    runs: dict[str, list[Path]] = {}
    for method, seed in jobs:
        done = sorted(p.parent for p in args.runs.glob(f"{method}-s{seed}-*/result.json"))
        if done:
            runs.setdefault(method, []).append(done[-1])
    if not runs:
        print("no finished run to summarise")
        return 1
    summary = summarise(runs, args.turns)
    kept = [m for m in args.keep.split(",") if m]
    if kept:  # rows of an earlier run of the same code path and budget, marked with its date
        earlier = json.loads((args.out / "compare.json").read_text())
        if earlier["turn_budget"] != args.turns:
            parser.error(
                f"--keep: compare.json has a budget of {earlier['turn_budget']} turns, not {args.turns}"
            )
        reused = {m: {**earlier["methods"][m], "reused_from": earlier["date"]} for m in kept}
        summary = {m: (reused | summary)[m] for m in METHODS if m in reused or m in summary}
    args.out.mkdir(parents=True, exist_ok=True)
    from verlog.evaluation import output

    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": output.machine(),
        "config_file": str(args.config),
        "turn_budget": args.turns,
        "common_overrides": COMMON,
        "method_overrides": METHODS,
        "extra_overrides": args.overrides,
        "wall_s": time.perf_counter() - started,
        "methods": summary,
    }
    (args.out / "compare.json").write_text(json.dumps(report, indent=2) + "\n")
    text = table(summary, args.turns)
    (args.out / "compare.md").write_text(text)
    plot(
        summary,
        args.out / "compare.png",
        f"BabyAI GoTo, tiny random model, {min(map(len, runs.values()))} seeds, same turn budget",
    )
    print(text)
    print(f"wrote {args.out / 'compare.json'}, compare.md and compare.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
