"""What reading Crafter's text alone can reach: a hand-written memoryless rule policy, no learning.

The trained tiny agents stay near random on Crafter's score (breadth over the 22 achievements). Is the text
too poor for a policy that sees only the current observation, or is the learning what is missing? This probe
answers the first half: a few rules that read only the observation text (what the player faces, its
inventory and vitals, the nearest thing of each kind with its direction) play the same held-out episodes the
demonstrations are judged on (seeds from 10,000), with a share of random moves so they do not stall.

    python -m benchmarks.probes.crafter_rules                       # 32 episodes, 10 % and 30 % random
    python -m benchmarks.probes.crafter_rules --episodes 64 --explore 0.1

Writes ``benchmarks/results/crafter_rules.json``: per exploration share, the return, Crafter's score (with its
bootstrap SE) and every achievement's rate.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Sequence
from typing import Any

from benchmarks.common import RESULTS, mean_se

MOVES = {"north": "Move North", "south": "Move South", "west": "Move West", "east": "Move East"}
_COUNT = re.compile(r"^- (\w+): (\d+)$", re.M)
_VITAL = re.compile(r"^- (\w+): (\d+)/\d+$", re.M)
_SEEN = re.compile(r"^- (\w+) (\d+) steps? to your ([\w-]+)$", re.M)
_FACE = re.compile(r"You face (\w+) at your front")


def read(text: str) -> tuple[dict[str, int], dict[str, int], dict[str, tuple[int, str]], str]:
    """The observation's inventory, vitals, nearest thing of each kind (distance, direction) and what it faces."""
    head = text.split("You see")[0]
    return (
        {k: int(n) for k, n in _COUNT.findall(head)},
        {k: int(n) for k, n in _VITAL.findall(head)},
        {name: (int(n), where) for name, n, where in _SEEN.findall(text)},  # one line per kind, the nearest
        (_FACE.search(text) or [None, ""])[1],
    )


def rule_action(text: str, rng: random.Random, explore: float) -> str:
    """One action from the rules (see the module docstring); a random move or Do with probability ``explore``."""
    if rng.random() < explore:
        return rng.choice([*MOVES.values(), "Do"])
    inventory, vitals, seen, face = read(text)
    wood = inventory.get("wood", 0)
    if vitals.get("energy", 9) < 3:
        return "Sleep"
    if face in ("cow", "zombie", "skeleton", "plant") or (face == "tree" and wood < 6):
        return "Do"
    if face == "water" and vitals.get("drink", 9) < 9:
        return "Do"
    if face in ("stone", "coal") and inventory.get("wood_pickaxe"):
        return "Do"
    if wood and "table" in seen and seen["table"][0] <= 1:
        for tool, needs in (("wood_pickaxe", 0), ("wood_sword", 0), ("stone_pickaxe", 1)):
            if not inventory.get(tool) and inventory.get("stone", 0) >= needs:
                return "Make " + tool.replace("_", " ").title()
    if wood >= 2 and "table" not in seen and face in ("grass", "sand", "path"):
        return "Place Table"
    if inventory.get("sapling") and face == "grass":
        return "Place Plant"
    if face == "grass" and rng.random() < 0.1:
        return "Do"  # a sapling now and then
    wanted = [
        ("water", vitals.get("drink", 9) <= 5),
        ("cow", vitals.get("food", 9) <= 5),
        ("tree", wood < 6),
        ("stone", bool(inventory.get("wood_pickaxe"))),
        ("water", vitals.get("drink", 9) < 9),
    ]
    for thing, want in wanted:
        if want and thing in seen:
            return MOVES[rng.choice(seen[thing][1].split("-"))]
    return rng.choice(list(MOVES.values()))


def play(episodes: int, explore: float, seed: int, eval_seed: int) -> dict[str, Any]:
    """``episodes`` held-out episodes (seeds from ``eval_seed``) at BALROG's settings; their figures."""
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the ids)
    from verlog.evaluation.crafter_score import bootstrap_se, crafter_score, success_rates

    env = gym.make("verlog/Crafter-v0", max_steps=2000)
    rng = random.Random(seed)
    unlocked, returns, lengths = [], [], []
    for episode in range(episodes):
        text, info = env.reset(seed=eval_seed + episode)
        total, steps, done = 0.0, 0, False
        while not done:
            text, reward, terminated, truncated, info = env.step(rule_action(text, rng, explore))
            total, steps, done = total + reward, steps + 1, terminated or truncated
        unlocked.append([name for name, count in info["achievements"].items() if count > 0])
        returns.append(total)
        lengths.append(steps)
    env.close()
    (ret, ret_se), (length, _) = mean_se(returns), mean_se(lengths)
    return {
        "explore": explore,
        "episodes": episodes,
        "return": ret,
        "return_se": ret_se,
        "crafter_score": crafter_score(unlocked),
        "crafter_score_se": bootstrap_se(unlocked),
        "length": length,
        "achievement_rates": {k: v for k, v in success_rates(unlocked).items() if v > 0},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=32, help="held-out episodes per setting")
    parser.add_argument(
        "--explore", type=float, nargs="+", default=[0.1, 0.3], help="shares of random actions"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the rules' random choices")
    parser.add_argument("--eval-seed", type=int, default=10_000, help="base seed of the episodes")
    args = parser.parse_args(argv)
    if args.episodes < 1 or not all(0.0 <= e <= 1.0 for e in args.explore):
        parser.error("--episodes must be at least 1 and each --explore share between 0 and 1")
    rows = [play(args.episodes, explore, args.seed, args.eval_seed) for explore in args.explore]
    for row in rows:
        rates = ", ".join(f"{k} {v:.0%}" for k, v in sorted(row["achievement_rates"].items()))
        print(
            f"explore {row['explore']:.0%}: score {row['crafter_score']:.2f} ± {row['crafter_score_se']:.2f}, "
            f"return {row['return']:.2f} ± {row['return_se']:.2f}, length {row['length']:.0f}; {rates}"
        )
    out = RESULTS / "crafter_rules.json"
    out.write_text(
        json.dumps({"benchmark": "crafter_rules", "eval_seed": args.eval_seed, "rows": rows}, indent=2)
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
