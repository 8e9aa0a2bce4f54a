"""Which decoding temperature should the judge play a trained run at? Chosen on episodes the judge never plays.

The held-out judge (``benchmarks.demos.learn``) samples a model at its training temperature unless
``--judge-temperature`` names another. A policy trained by cross-entropy toward each state's best moves keeps
mass on every tied best move and some off them; sampling at 1 plays that off-plan mass, a lower temperature
plays less of it, and greedy can loop (a memoryless policy on a deterministic game repeats a cycle). Picking the
temperature on the judged episodes would fit the judge; this probe plays each run's trained model on validation
episodes (base seed :data:`VALIDATION_SEED`, disjoint from the judge's 128 a kind from 10,000), per task kind of a mix
(the judge's env kwargs: no shaping), at every temperature asked, and names the one with the highest mean
success over the runs and kinds (ties: the higher temperature, the closer to training). Written to
``benchmarks/results/judge_temperature.json`` (one entry per run, the latest), with the choice.

    python -m benchmarks.probes.judge_temperature [RUN ...] [--stem learn_babaisai_mix_long]
        [--temperatures 1 0.5 0.25 0] [--episodes 64] [--seed 20000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, machine, record_runs, seed_runs
from benchmarks.demos.held_out import TASK_EPISODES
from benchmarks.demos.judge import EVAL_SEED

STEM = "judge_temperature"
#: The validation episodes' base seed: far from the judge's (10,000 onwards, 128 a kind).
VALIDATION_SEED = 20_000


def probe(run: Path, temperatures: Sequence[float], episodes: int, seed: int) -> dict[str, Any]:
    """The run's trained model on ``episodes`` validation episodes from ``seed`` (of each kind of a mix) at each
    temperature (0: greedy): per temperature, each kind's figures and the mean success over the kinds."""
    from benchmarks.demos.held_out import judged_kwargs, kind_kwargs, play_model, task_kinds
    from verlog.config import load_config
    from verlog.runkit.folder import CONFIG_FILE

    config = load_config(run / CONFIG_FILE)
    kinds = task_kinds(config.env.id, config.env.kwargs)
    tasks = {"": config.env.kwargs} if kinds is None else {
        kind: kind_kwargs(config.env.kwargs, kinds[0], kind) for kind in kinds[1]
    }  # fmt: skip
    out: dict[str, Any] = {}
    for temperature in temperatures:
        per_kind = {
            kind or config.env.id: play_model(
                config,
                run,
                "trained",
                episodes,
                judged_kwargs(kwargs),
                kind,
                seed=seed,
                temperature=temperature,
            )
            for kind, kwargs in tasks.items()
        }
        mean = statistics.fmean(f["success"] for f in per_kind.values())
        print(f"{run.name} temperature {temperature:g}: mean success {mean:.3f}  " + "  ".join(
            f"{kind} {f['success']:.3f}" for kind, f in per_kind.items()
        ))  # fmt: skip
        out[f"{temperature:g}"] = {"temperature": temperature, "mean_success": mean, "kinds": per_kind}
    return out


def choose(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The temperature with the highest mean success over every run and kind (ties: the higher temperature)."""
    temperatures = {key: t["temperature"] for e in entries.values() for key, t in e["temperatures"].items()}
    means = {
        key: statistics.fmean(e["temperatures"][key]["mean_success"] for e in entries.values())
        for key in temperatures
    }
    best = max(means, key=lambda key: (means[key], temperatures[key]))
    return {"mean_success": means, "chosen": temperatures[best], "runs": sorted(entries)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="*", type=Path, help="trained run folders")
    parser.add_argument(
        "--stem", default="learn_babaisai_mix_long", help="without RUN: the seeds of this results file"
    )
    parser.add_argument(
        "--temperatures", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.0], help="0: greedy"
    )
    parser.add_argument("--episodes", type=int, default=64, help="validation episodes per task kind")
    parser.add_argument(
        "--seed", type=int, default=VALIDATION_SEED, help="the validation episodes' base seed"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if any(t < 0 for t in args.temperatures):
        parser.error("a temperature is 0 (greedy) or positive")
    judged = range(EVAL_SEED, EVAL_SEED + TASK_EPISODES)
    if args.seed < judged.stop and args.seed + args.episodes > judged.start:
        parser.error(f"--seed {args.seed} overlaps the judge's episodes ({judged.start}-{judged.stop - 1})")
    runs = args.runs or seed_runs(args.out, args.stem)
    entries = {
        run.name: {"run": str(run), "machine": machine(), "seed": args.seed, "episodes": args.episodes,
                   "temperatures": probe(run, args.temperatures, args.episodes, args.seed)}
        for run in runs
    }  # fmt: skip
    choice = choose(entries)
    path = record_runs(args.out, STEM, entries)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "choice": choice}, indent=2) + "\n")
    means = ", ".join(f"{key}: {m:.3f}" for key, m in choice["mean_success"].items())
    print(f"mean success over {len(runs)} runs: {means}; chosen temperature {choice['chosen']:g}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
