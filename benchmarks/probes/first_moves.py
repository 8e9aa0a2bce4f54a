"""Does a model's first answer on BabaIsAI point toward the WIN object, for each number of worked examples?

On seeded ``goto_win`` states (0-3 random moves from a reset), the model's next-token distribution right after
the chat's generation prompt is read at the four move tokens: their total is how often a sampled answer starts
with a move, and, among the moves, the mass on those that bring baba closer to the WIN object (the env's shaping
potential falls) is how well the answer reads the observation. A uniform choice among the four moves scores the
share of good moves. The figures go to ``benchmarks/results/first_moves.json``; ``nox -s bench_first_moves``
runs it (SmolLM2 by default).

    python -m benchmarks.probes.first_moves                          # 100 states, prompt.examples 0, 1 and 4
    python -m benchmarks.probes.first_moves --states 40 --examples 1,2
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS
from verlog.quiet import attach_run_log, quiet_console

MOVES = ("up", "right", "down", "left")
ENV_KWARGS: dict[str, Any] = {"levels": ["goto_win"], "max_episode_steps": 12, "offered_actions": list(MOVES)}


def states(count: int, seed: int = 20_000) -> list[tuple[str, dict, np.ndarray]]:
    """``count`` (observation, info, good) triples: ``good[i]`` is whether ``MOVES[i]`` brings baba closer."""
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the ids)

    rng = np.random.default_rng(seed)
    out = []
    for episode in range(count):
        env = gym.make("verlog/BabaIsAI-v0", shaping=1.0, **ENV_KWARGS)
        obs, info = env.reset(seed=seed + episode)
        for _ in range(int(rng.integers(0, 4))):
            obs, _, terminated, truncated, info = env.step(MOVES[int(rng.integers(len(MOVES)))])
            if terminated or truncated:
                obs, info = env.reset(seed=seed + episode)
        good = np.array([copy.deepcopy(env).step(move)[1] > 0 for move in MOVES])
        out.append((obs, info, good))
        env.close()
    return out


def first_moves(
    model: Any, tokenizer: Any, examples: int, turns: Sequence[tuple[str, dict, np.ndarray]]
) -> dict:
    """The move-token figures of one prompt setting over ``turns``."""
    import torch

    from verlog.envs import prompt_examples
    from verlog.models.prompts import PromptBuilder

    builder = PromptBuilder(
        tokenizer, "action", 4096, style="short", examples=prompt_examples("verlog/BabaIsAI-v0", examples)
    )
    ids = [tokenizer.encode(move, add_special_tokens=False)[0] for move in MOVES]
    valid, toward, argmax = [], [], []
    share = np.zeros(len(MOVES))
    with torch.no_grad():
        for obs, info, good in turns:
            logits = model(torch.tensor([builder.from_info(obs, info)])).logits[0, -1].float()
            p = torch.softmax(logits, -1)[ids].numpy()
            q = p / p.sum()
            valid.append(float(p.sum()))
            toward.append(float(q[good].sum()))
            argmax.append(bool(good[q.argmax()]))
            share += q
    return {
        "examples": examples,
        "states": len(turns),
        "p_move": float(np.mean(valid)),
        "p_toward_given_move": float(np.mean(toward)),
        "uniform_toward": float(np.mean([good.mean() for *_, good in turns])),
        "argmax_toward": float(np.mean(argmax)),
        "move_shares": dict(zip(MOVES, (share / len(turns)).round(3).tolist(), strict=True)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="", help="model folder (default: SmolLM2, fetched on first use)")
    parser.add_argument("--states", type=int, default=100, help="goto_win states, one per seeded episode")
    parser.add_argument("--examples", default="0,1,4", help="comma-separated prompt.examples settings")
    parser.add_argument("--out", type=Path, default=RESULTS / "first_moves.json")
    args = parser.parse_args(argv)
    quiet_console()  # the libraries' notices go to runs/logs/bench-first-moves.log
    attach_run_log(Path("runs") / "logs", file_name="bench-first-moves.log")

    from verlog.evaluation.output import machine
    from verlog.models.loading import load_actor, load_tokenizer
    from verlog.models.sources import get_registry_model

    path = args.model or str(get_registry_model("smollm2-135m-instruct"))
    tokenizer = load_tokenizer(path)
    model = load_actor(path).eval()
    turns = states(args.states)
    rows = []
    print("examples  P(move)  P(toward | move)  uniform  argmax toward  up/right/down/left")
    for examples in (int(k) for k in args.examples.split(",")):
        row = first_moves(model, tokenizer, examples, turns)
        rows.append(row)
        shares = "/".join(f"{v:.2f}" for v in row["move_shares"].values())
        print(
            f"{examples:8d}  {row['p_move']:7.2f}  {row['p_toward_given_move']:16.3f}  "
            f"{row['uniform_toward']:7.3f}  {row['argmax_toward']:13.2f}  {shares}",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {"model": path, "machine": machine(), "env_kwargs": ENV_KWARGS, "rows": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
