"""Padding prompts to a multiple (``ppo.pad_to_multiple``): resident memory and time of scoring and the update when
every batch takes a new shape, against when batches share a few.

A Crafter prompt's length follows what the player sees and holds (~140 tokens at the start of a SmolLM2 run, up to
~210 by update 25), so each update's micro-batches take shapes never seen before. On the CPU, oneDNN builds a
primitive for each new matrix shape and keeps it in a cache, so resident memory climbs with every update (a run
of the SmolLM2 Crafter recipe grew ~20 MB an update while its live tensors stayed at the same count and size).
This plays the preset model's (its first ``--layers`` decoder layers: every layer takes the same shapes) scoring pass (no gradients) and update pass (forward and backward) on batches of
random prompt lengths, each setting in a fresh child process so no cache carries over, and reports the distinct
shapes, the resident memory's growth per step and the seconds per step over the second half.

    python -m benchmarks.speed.pad_shapes [--config envs/learn_crafter_real.toml] [--steps 30] [--multiples 1 16] [--layers 2]

Writes ``benchmarks/results/pad_shapes.json``.
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
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from benchmarks.common import RESULTS, ROOT, load_preset, machine


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "learn_crafter_real.toml")
    parser.add_argument("--steps", type=int, default=30, help="batches per setting (default 30)")
    parser.add_argument("--multiples", type=int, nargs="+", default=[1, 16], help="settings (default 1 16)")
    parser.add_argument("--rows", type=int, default=32, help="rows a batch (the preset's 8 envs x 4 turns)")
    parser.add_argument("--lengths", type=int, nargs=2, default=[130, 260], help="prompt lengths drawn from")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--layers", type=int, default=2, help="decoder layers kept (the shapes are every layer's)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    return parser


def child(args: argparse.Namespace) -> dict[str, float]:
    """One setting in this process: ``args.steps`` scoring and update passes; the figures as a dict."""
    import torch

    from verlog.models.loading import load_models
    from verlog.models.sources import resolve_model_path
    from verlog.ppo.forward import actor_logprobs, collate
    from verlog.runkit.memory import resident_mb

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = load_preset(_parser(), args.config, [])
    models = load_models(resolve_model_path(config.model, config.env), with_reference=False)
    actor, pad = models.actor, models.tokenizer.pad_token_id
    actor.model.layers = actor.model.layers[
        : args.layers
    ]  # every layer takes the same shapes: a few show them
    rng = random.Random(0)  # the same lengths for every setting
    shapes, seconds, memory, tokens = set(), [], [], []
    for _ in range(args.steps):
        lengths = [rng.randint(*args.lengths) for _ in range(args.rows)]
        prompts = [[rng.randrange(100, 10_000) for _ in range(n)] for n in lengths]
        answers = [[rng.randrange(100, 10_000) for _ in range(rng.randint(1, 6))] for _ in lengths]
        batch = collate(prompts, answers, pad, pad_multiple=args.child)
        shapes.add(tuple(batch.input_ids.shape))
        tokens.append(batch.input_ids.numel())
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                actor_logprobs(actor, batch, temperature=1.0)
            logprobs, _ = actor_logprobs(actor, batch, temperature=1.0)
            (logprobs * batch.response_mask).sum().backward()
        actor.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - start)
        memory.append(resident_mb())
    half = args.steps // 2
    return {
        "pad_to_multiple": args.child,
        "distinct_shapes": len(shapes),
        "rss_start_mb": memory[0],
        "rss_end_mb": memory[-1],
        "rss_mb_per_step_second_half": (memory[-1] - memory[half]) / max(args.steps - 1 - half, 1),
        "seconds_per_step_second_half": statistics.mean(seconds[half:]),
        "tokens_per_step": statistics.mean(tokens),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args)))
        return 0
    console = Console(soft_wrap=True)
    load_start = os.getloadavg()[0]  # this compares two settings run alike; say the load, do not wait for it
    rows = []
    for multiple in args.multiples:
        command = [sys.executable, "-m", "benchmarks.speed.pad_shapes", "--child", str(multiple),
                   "--config", str(args.config), "--steps", str(args.steps), "--rows", str(args.rows),
                   "--lengths", *map(str, args.lengths), "--threads", str(args.threads),
                   "--layers", str(args.layers)]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        console.print(
            f"pad to a multiple of {multiple:>2}: {row['distinct_shapes']} shapes in {args.steps} batches; resident "
            f"{row['rss_start_mb']:.0f} -> {row['rss_end_mb']:.0f} MB ({row['rss_mb_per_step_second_half']:+.1f} MB "
            f"a batch over the second half); {row['seconds_per_step_second_half']:.2f} s and "
            f"{row['tokens_per_step']:,.0f} tokens a batch"
        )
    record = {
        "benchmark": "pad_shapes",
        "preset": args.config.name,
        "rows": args.rows,
        "prompt_lengths": args.lengths,
        "steps": args.steps,
        "threads": args.threads,
        "layers": args.layers,
        "results": rows,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": [load_start, os.getloadavg()[0]],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pad_shapes.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
