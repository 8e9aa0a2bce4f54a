"""vLLM's prefix cache on a preset's own prompts: generation time with ``sampling.vllm_prefix_caching`` off and on.

Every prompt of a preset repeats the same instruction and worked examples (``envs/learn_crafter_real.toml``:
~750 of a Crafter prompt's ~870 tokens); the cache keeps their key/value blocks, so after the first batch of an
update only each prompt's own part is prefilled. This plays the preset's envs with random actions to get the
prompts the learner would build, then generates for them as training does: ``ppo.turns_per_update`` batches of
``env.num_envs`` prompts an update, the cache emptied at each update's start (the sampler empties it after every
weight push). Each setting runs in a child process with its own engine, on the same prompts and seeds.

    python -m benchmarks.speed.prefix_cache [--config envs/learn_crafter_real.toml] [--updates 3] [section.key=value ...]

Writes ``benchmarks/results/prefix_cache.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.common import ROOT, load_preset, machine, preset_parser, settled_load


def _parser() -> argparse.ArgumentParser:
    parser = preset_parser(__doc__, "learn_crafter_real.toml", "prefix_cache.json")
    parser.add_argument("--updates", type=int, default=3, help="updates' worth of batches (default 3)")
    parser.add_argument("--child", choices=("off", "on"), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    return parser


def collect_prompts(config: Any, updates: int) -> list[list[list[int]]]:
    """The learner's prompts for ``updates`` x ``turns_per_update`` turns of the preset's envs (random moves)."""
    import gymnasium as gym
    from transformers import AutoTokenizer

    import verlog  # noqa: F401  (registers the ids)
    from verlog.models.prompts import prompt_builder

    tokenizer = AutoTokenizer.from_pretrained(config.model.path)
    builder = prompt_builder(tokenizer, config.prompt, config.env.id)
    envs = [gym.make(config.env.id, **config.env.kwargs) for _ in range(config.env.num_envs)]
    rng = random.Random(config.run.seed)
    states = [env.reset(seed=config.run.seed + i) for i, env in enumerate(envs)]
    batches = []
    for _ in range(updates * config.ppo.turns_per_update):
        batches.append([builder.from_info(obs, info) for obs, info in states])
        for i, env in enumerate(envs):
            obs, _, terminated, truncated, info = env.step(rng.choice(env.unwrapped.actions))
            states[i] = env.reset() if terminated or truncated else (obs, info)
    return batches


def child(config: Any, setting: str, work: Path) -> None:
    """Generate for the saved prompts with the cache ``setting``; write the seconds of every batch."""
    import torch
    from transformers import AutoTokenizer

    from verlog.sampling.vllm import VLLMSampler

    if config.run.torch_threads:
        torch.set_num_threads(config.run.torch_threads)
    torch.manual_seed(config.run.seed)
    batches = json.loads((work / "prompts.json").read_text())
    sampler = VLLMSampler.from_config(config, AutoTokenizer.from_pretrained(config.model.path), None, "cpu")
    seconds, turns = [], config.ppo.turns_per_update
    for k, prompts in enumerate(batches):
        if k % turns == 0:
            sampler.llm.reset_prefix_cache()  # as after a weight push
        start = time.perf_counter()
        sampler.generate(prompts)
        seconds.append(time.perf_counter() - start)
    (work / f"{setting}.json").write_text(json.dumps(seconds))


def main(argv: Sequence[str] | None = None) -> int:
    from verlog.models.sources import resolve_model_path

    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    overrides = list(args.overrides)
    if args.child:
        overrides.append(f"sampling.vllm_prefix_caching={'true' if args.child == 'on' else 'false'}")
    config = load_preset(parser, args.config, ['sampling.backend="vllm"', *overrides])
    config.model.path = resolve_model_path(config.model, config.env)
    if args.child:
        child(config, args.child, args.work)
        return 0

    console = Console(soft_wrap=True)
    load_start = settled_load()
    batches = collect_prompts(config, args.updates)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "prompts.json").write_text(json.dumps(batches))
        seconds = {}
        for setting in ("off", "on"):
            command = [sys.executable, "-m", "benchmarks.speed.prefix_cache", "--config", str(args.config),
                       "--child", setting, "--work", str(work), *args.overrides]  # fmt: skip
            subprocess.run(command, check=True, cwd=ROOT)
            seconds[setting] = json.loads((work / f"{setting}.json").read_text())
    tokens = [len(p) for batch in batches for p in batch]
    turns = config.ppo.turns_per_update
    per_update = {s: [sum(v[i : i + turns]) for i in range(0, len(v), turns)] for s, v in seconds.items()}
    record = {
        "benchmark": "prefix_cache",
        "preset": args.config.name,
        "overrides": overrides,
        "updates": args.updates,
        "prompts_per_batch": config.env.num_envs,
        "batches_per_update": turns,
        "prompt_tokens": statistics.mean(tokens),
        "max_response_tokens": config.prompt.max_response_tokens,
        **{
            s: {
                "update_generate_s": statistics.median(per_update[s]),
                "first_batch_s": statistics.median(v[::turns]),
                "later_batch_s": statistics.median(x for i, x in enumerate(v) if i % turns),
            }
            for s, v in seconds.items()
        },
        "torch_threads": config.run.torch_threads,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": [load_start, os.getloadavg()[0]],
    }
    record["speedup"] = record["off"]["update_generate_s"] / record["on"]["update_generate_s"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prefix_cache.json").write_text(json.dumps(record, indent=2) + "\n")
    for s in ("off", "on"):
        r = record[s]
        console.print(
            f"prefix cache {s:>3}: {r['update_generate_s']:.1f} s of generation an update "
            f"({turns} batches of {config.env.num_envs}); first batch {r['first_batch_s']:.2f} s, "
            f"later ones {r['later_batch_s']:.2f} s; prompts {record['prompt_tokens']:.0f} tokens"
        )
    console.print(f"{record['speedup']:.2f}x with the cache; wrote {args.out / 'prefix_cache.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
