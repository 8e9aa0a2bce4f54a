"""Does a trained Crafter policy read the observation, or play a fixed mix of actions whatever it sees?

A run's actor (its newest checkpoint, and its first, untrained one) plays seeded Crafter episodes, drawing each
answer from its own constrained distribution over the 17 actions (the tiny models' action-words tokenizer: one
token per action). At every state the whole distribution is read, and the state is labelled by what the player
faces. Two figures say how much the answer depends on the state:

- the mutual information between state and action under the policy, I(S; A) = H(mean of the distributions) -
  mean of their entropies, in nats (0: the same distribution in every state; a uniform 17-way choice that always
  knew the right action would reach ln 17 = 2.83);
- per situation (what the player faces), the mean distribution's top actions: a reading policy chops (Do) facing
  a tree far more often than facing grass.

Any tiny-model run whose actions are one token each can be probed (BabaIsAI's mix too); the situations, and
P(Do), are Crafter's. Figures go to ``benchmarks/results/state_dependence.json`` (one entry per run folder, the latest probe of each).

    nox -s probe_state_dependence                  # the run folders of learn_crafter.json's seeds
    python -m benchmarks.probes.state_dependence [RUN ...] [--stem learn_crafter] [--episodes 6]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, machine, record_runs, seed_runs

STEM = "state_dependence"
FACING = re.compile(r"You face (\w+)")
#: What the player may face that a reading policy answers differently (the rest is pooled as "other").
SITUATIONS = ("grass", "tree", "water", "stone", "sand", "cow", "table", "zombie")


def _entropy(p: np.ndarray) -> np.ndarray:
    return -(p * np.log(np.clip(p, 1e-12, None))).sum(-1)


def probe(checkpoint: Path, config: Any, *, episodes: int, steps: int, seed: int) -> dict[str, Any]:
    """Play ``episodes`` seeded episodes (up to ``steps`` turns each) with the checkpoint's actor and read its
    action distribution at every state."""
    import gymnasium as gym
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import verlog  # noqa: F401  (registers the ids)
    from verlog.models.prompts import prompt_builder

    tokenizer = AutoTokenizer.from_pretrained(checkpoint / "actor")
    model = AutoModelForCausalLM.from_pretrained(checkpoint / "actor").eval()
    builder = prompt_builder(tokenizer, config.prompt, config.env.id)
    env = gym.make(config.env.id)
    rng = np.random.default_rng(seed)
    rows: list[np.ndarray] = []
    labels: list[str] = []
    actions: list[str] = []
    for episode in range(episodes):
        obs, info = env.reset(seed=seed + episode)
        actions = list(info["valid_actions"])
        ids = [tokenizer(a, add_special_tokens=False)["input_ids"] for a in actions]
        if any(len(i) != 1 for i in ids):
            raise SystemExit(
                f"{checkpoint}: the actor's tokenizer spells some actions in several tokens; this probe reads "
                "one-token actions (model.tiny_tokenizer = 'action-words')"
            )
        first = [i[0] for i in ids]
        for _ in range(steps):
            with torch.no_grad():
                logits = model(torch.tensor([builder.from_info(obs, info)])).logits[0, -1, first]
            p = torch.softmax(logits.double(), -1).numpy()
            rows.append(p)
            faced = FACING.search(obs)
            labels.append(faced.group(1) if faced and faced.group(1) in SITUATIONS else "other")
            obs, _, terminated, truncated, info = env.step(actions[int(rng.choice(len(p), p=p / p.sum()))])
            if terminated or truncated:
                break
    env.close()
    dists = np.stack(rows)
    mean = dists.mean(0)
    situations: dict[str, Any] = {}
    for label in (*SITUATIONS, "other"):
        mask = np.array([x == label for x in labels])
        if not mask.any():
            continue
        p = dists[mask].mean(0)
        top = np.argsort(-p)[:3]
        situations[label] = {
            "states": int(mask.sum()),
            "do": float(p[actions.index("Do")]) if "Do" in actions else None,
            "top": [[actions[i], float(p[i])] for i in top],
        }
    return {
        "checkpoint": checkpoint.name,
        "states": len(rows),
        "mutual_information": float(_entropy(mean) - _entropy(dists).mean()),
        "mean_entropy": float(_entropy(dists).mean()),
        "largest_spread": float((dists.max(0) - dists.min(0)).max()),
        "situations": situations,
    }


def _judged_as(results: Path) -> dict[str, str]:
    """Run folder name -> "stem, seed N" for every seed of a demonstration's results file in ``results``."""
    labels = {}
    for path in sorted(results.glob("learn_*.json")):
        for entry in json.loads(path.read_text()).get("seeds", []):
            if isinstance(entry, dict) and entry.get("run_dir"):
                labels[Path(entry["run_dir"]).name] = f"{path.stem}, seed {entry.get('seed')}"
    return labels


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "runs", nargs="*", type=Path, help="run folders of tiny-model runs with one-token actions"
    )
    parser.add_argument("--stem", default="learn_crafter", help="without RUN: the seeds of this results file")
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--steps", type=int, default=250, help="turns per episode at most")
    parser.add_argument(
        "--seed", type=int, default=50_000, help="first episode's seed (held out of training)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import torch

    from verlog.config import load_config
    from verlog.runkit.folder import CONFIG_FILE, checkpoint_dir, latest_checkpoint

    torch.set_num_threads(1)
    args.runs = args.runs or seed_runs(args.out, args.stem)
    labels = _judged_as(args.out)
    missing = [str(run) for run in args.runs if not (run / CONFIG_FILE).is_file()]
    if missing:
        raise SystemExit(
            f"not run folders (no {CONFIG_FILE}): {', '.join(missing)}; runs/ of the machine that trained them"
        )
    entries = {}
    for run in args.runs:
        newest = latest_checkpoint(run)
        if newest is None:
            raise SystemExit(f"{run}: no checkpoint to probe (checkpoints/NNNNNN)")
        config = load_config(run / CONFIG_FILE)
        found = {}
        for checkpoint in sorted({checkpoint_dir(run) / "000000", newest}):
            if checkpoint.is_dir():
                found["untrained" if checkpoint.name == "000000" else "trained"] = probe(
                    checkpoint, config, episodes=args.episodes, steps=args.steps, seed=args.seed
                )
        label = labels.get(run.name, run.name)  # the results file and seed it was judged as, where one is
        entries[label] = {"run": str(run), "machine": machine(), "seed": args.seed, **found}
        for which, figures in found.items():
            tree, grass = figures["situations"].get("tree", {}), figures["situations"].get("grass", {})
            print(f"{label} {which}: I(S;A) {figures['mutual_information']:.4f} nats over {figures['states']} "
                  f"states; P(Do) facing a tree {tree.get('do', float('nan')):.3f}, grass {grass.get('do', float('nan')):.3f}")  # fmt: skip
    print(f"wrote {record_runs(args.out, STEM, entries)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
