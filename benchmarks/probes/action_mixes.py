"""What does a fixed mix of actions, played blind, score on Crafter's judged episodes?

A mix is a weight per Crafter action; each turn draws an action from it without reading the observation. Played
on the episodes ``benchmarks.demos.learn_crafter`` judges by (the evaluation's seeds from ``--eval-seed``,
capped at ``--max-steps``), each mix gives the return, achievements, progression and cells visited, each ± SE.
It answers two questions about SmolLM2 on Crafter: how much of a score is the *mix* of answers rather than
reading the game (a model that answers Sleep 40 % of the time loses those turns wherever it stands), and what a
learner gains by only re-weighting its answers. ``--samples`` adds the mix of a run's sampled answers
(``samples.jsonl`` or the run folder, optionally named ``NAME=PATH`` and only ``--updates LO:HI``). Figures go to ``benchmarks/results/action_mixes.json``;
``nox -s bench_action_mixes`` runs it.

    python -m benchmarks.probes.action_mixes
    python -m benchmarks.probes.action_mixes --samples "attempt 5=runs/RUN/samples.jsonl" --updates 60:90
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, machine, mean_se

ENV_ID = "verlog/Crafter-v0"
MOVES = ("Move West", "Move East", "Move North", "Move South")
#: The mixes every run plays: weights (normalised when played) over Crafter's action names.
MIXES: dict[str, dict[str, float]] = {
    "uniform over the 17 actions (random, other draws)": {},  # every action at weight 1
    "Sleep, Do, Move North (thirds)": {"Sleep": 1, "Do": 1, "Move North": 1},
    "moves only": dict.fromkeys(MOVES, 1.0),
    "moves 60 %, Do 30 %, Sleep 5 %, Place Plant 5 %": {
        **dict.fromkeys(MOVES, 0.15),
        "Do": 0.3,
        "Sleep": 0.05,
        "Place Plant": 0.05,
    },
    "moves 50 %, Do 25 %, crafting 12 %, Sleep 5 %, Place Plant 5 %": {
        **dict.fromkeys(MOVES, 0.125),
        "Do": 0.25,
        "Sleep": 0.05,
        "Place Plant": 0.05,
        "Place Table": 0.06,
        "Make Wood Pickaxe": 0.03,
        "Make Wood Sword": 0.03,
    },
}


def play(weights: Mapping[str, float], episodes: int, eval_seed: int, max_steps: int) -> dict[str, Any]:
    """Return, achievements, progression and cells visited (each ± SE) of ``weights`` played blind."""
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the ids)
    from verlog.evaluation.suites import episode_seed

    env = gym.make(ENV_ID, max_steps=max_steps)
    actions = list(env.unwrapped.actions)
    unknown = sorted(set(weights) - set(actions))
    if unknown:
        raise ValueError(f"{unknown} are not Crafter actions; use names from {actions}")
    p = np.array([weights.get(a, 0.0) for a in actions] if weights else [1.0] * len(actions))
    p = p / p.sum()
    rows: dict[str, list[float]] = {"return": [], "achievements": [], "progression": [], "cells": []}
    for index in range(episodes):
        seed = episode_seed(eval_seed, ENV_ID, index)
        rng = np.random.default_rng(seed)
        _, info = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(actions[rng.choice(len(actions), p=p)])
            total, done = total + float(reward), terminated or truncated
        rows["return"].append(total)
        rows["achievements"].append(float(info["score"]))
        rows["progression"].append(float(info["progression"]))
        rows["cells"].append(float(info["cells_visited"]))
    env.close()
    result: dict[str, Any] = {
        "weights": {a: round(float(w), 4) for a, w in zip(actions, p, strict=True) if w}
    }
    for name, values in rows.items():
        result[name], result[f"{name}_se"] = mean_se(values)
    return result


def sampled_mix(path: Path, updates: str) -> dict[str, float]:
    """The executed actions' shares among a run's sampled answers (``samples.jsonl`` or its run folder, read as
    ``verlog report`` reads it: a live run's cut last line is skipped), in ``LO:HI`` updates."""
    from verlog.runkit.samples import read_samples

    lo, _, hi = updates.partition(":")
    low, high = int(lo or 0), int(hi) if hi else math.inf
    counts = Counter(
        record["action"]
        for record in read_samples(path).records
        if low <= record.get("update", 0) < high and record.get("action")
    )
    if not counts:
        raise SystemExit(
            f"{path} has no sampled answers in updates {updates!r}; check the file and --updates"
        )
    return {action: count / sum(counts.values()) for action, count in counts.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=16, help="judged episodes (learn_crafter's default)")
    parser.add_argument("--eval-seed", type=int, default=10_000, help="the evaluation's base seed")
    parser.add_argument("--max-steps", type=int, default=200, help="episode cap (learn_crafter_real's)")
    parser.add_argument("--samples", action="append", default=[], help="[NAME=]a run's samples.jsonl")
    parser.add_argument("--updates", default=":", help="LO:HI, the updates of --samples to count")
    parser.add_argument("--out", type=Path, default=RESULTS / "action_mixes.json")
    args = parser.parse_args(argv)
    mixes = dict(MIXES)
    for spec in args.samples:
        name, _, path = spec.rpartition("=")
        label = f"{name or path}: sampled answers, updates {args.updates}"
        mixes[label] = sampled_mix(Path(path), args.updates)
    rows = []
    print(f"{'mix':66s} {'return':>13s} {'achievements':>13s} {'progression':>13s} {'cells':>11s}")
    for name, weights in mixes.items():
        row = {"mix": name, **play(weights, args.episodes, args.eval_seed, args.max_steps)}
        rows.append(row)
        print(
            f"{name[:66]:66s} {row['return']:6.2f} ± {row['return_se']:4.2f} "
            f"{row['achievements']:6.2f} ± {row['achievements_se']:4.2f} "
            f"{100 * row['progression']:5.1f} ± {100 * row['progression_se']:3.1f} %"
            f" {row['cells']:5.1f} ± {row['cells_se']:3.1f}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    task = {
        "env_id": ENV_ID,
        "max_steps": args.max_steps,
        "episodes": args.episodes,
        "eval_seed": args.eval_seed,
    }
    args.out.write_text(json.dumps({"task": task, "machine": machine(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
