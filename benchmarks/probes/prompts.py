"""How often a model names a valid action zero-shot, for each prompt style, example, format and memory.

States come from seeded episodes of each game (random valid actions, seen through the memory wrapper); every
prompt setting answers the same states greedily, and the env's own lenient parser judges each answer. The
figures go to ``benchmarks/results/prompts.json``; ``nox -s bench_prompts`` runs it (with SmolLM2 by default).

    python -m benchmarks.probes.prompts                       # SmolLM2-135M-Instruct, 24 states per game
    python -m benchmarks.probes.prompts --model runs/models/other --states 40
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS
from verlog.quiet import attach_run_log, quiet_console

GAMES = {
    "babyai": "verlog/BabyAI-GoTo-v0",
    "crafter": "verlog/Crafter-v0",
    "babaisai": "verlog/BabaIsAI-Mixed-v0",
}
#: (style, examples, format, memory): the default, each one changed alone, and the old default.
SETTINGS = [
    ("short", 1, "action", "none"),
    ("short", 1, "action", "history"),
    ("short", 0, "action", "none"),
    ("full", 1, "action", "none"),
    ("full", 0, "action", "none"),
    ("full", 0, "action", "history"),
    ("short", 1, "think", "none"),
    ("short", 1, "tags", "none"),
    ("full", 0, "think", "history"),
]


def states(env_id: str, memory: str, count: int, seed: int = 0) -> list[tuple[str, dict]]:
    """``count`` (observation, info) pairs from seeded episodes played with random valid actions."""
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the ids)
    from verlog.memory import wrap_memory

    kwargs = {"turns": 2, "reasoning": True} if memory == "history" else {}
    env = wrap_memory(gym.make(env_id), memory, **kwargs)
    rng = np.random.default_rng(seed)
    out: list[tuple[str, dict]] = []
    episode = 0
    while len(out) < count:
        obs, info = env.reset(seed=seed + episode)
        episode += 1
        for _ in range(6):
            out.append((obs, info))
            actions = info["valid_actions"]
            obs, _, terminated, truncated, info = env.step(actions[rng.integers(len(actions))])
            if terminated or truncated or len(out) == count:
                break
    env.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="", help="model folder (default: SmolLM2, fetched on first use)")
    parser.add_argument("--states", type=int, default=24, help="states per game and memory")
    parser.add_argument("--games", default=",".join(GAMES), help="comma-separated: babyai, crafter, babaisai")
    parser.add_argument("--out", type=Path, default=RESULTS / "prompts.json")
    args = parser.parse_args(argv)
    quiet_console()  # the libraries' notices go to runs/logs/bench-prompts.log
    attach_run_log(Path("runs") / "logs", file_name="bench-prompts.log")

    import gymnasium as gym
    import torch

    from verlog.envs import prompt_examples
    from verlog.evaluation.output import machine
    from verlog.models.loading import load_actor, load_tokenizer
    from verlog.models.prompts import PromptBuilder
    from verlog.models.sources import get_registry_model
    from verlog.sampling import TransformersSampler

    path = args.model or str(get_registry_model("smollm2-135m-instruct"))
    tokenizer = load_tokenizer(path)
    model = load_actor(path).eval()
    sampler = TransformersSampler(model, tokenizer, max_new_tokens=16, batch_size=12)
    rows = []
    for game in args.games.split(","):
        env_id = GAMES[game]
        parser_env = gym.make(env_id).unwrapped
        cache = {memory: states(env_id, memory, args.states) for memory in ("none", "history")}
        for style, examples, fmt, memory in SETTINGS:
            builder = PromptBuilder(
                tokenizer, fmt, 4096, style=style, examples=prompt_examples(env_id, examples)
            )
            turns = cache[memory]
            prompts = builder.from_infos([obs for obs, _ in turns], [info for _, info in turns])
            clock = time.perf_counter()
            with torch.no_grad():
                answers = sampler.generate(prompts, greedy=True)
            valid = [parser_env.parse(text).valid for text in answers.texts]
            row = {
                "game": game,
                "style": style,
                "examples": examples,
                "format": fmt,
                "memory": memory,
                "states": len(turns),
                "valid": sum(valid) / len(valid),
                "prompt_tokens": float(np.mean([len(p) for p in prompts])),
                "seconds": time.perf_counter() - clock,
                "first_answers": answers.texts[:3],
            }
            rows.append(row)
            print(
                f"{game:9s} {style:5s} ex={examples} {fmt:6s} {memory:7s} valid {row['valid']:.2f} "
                f"({row['prompt_tokens']:.0f} prompt tokens) {answers.texts[0]!r}",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {"model": path, "machine": machine(), "greedy": True, "max_new_tokens": 16, "rows": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
