"""A preset's training speed as a run sees it: turns per second and where an update's time goes.

    nox -s bench_training                                      # envs/learn_crafter.toml, 10 updates
    python -m benchmarks.speed.training [--config PRESET] [--updates N] [section.key=value ...]

The preset trains ``--updates`` updates (critic pre-training off and no checkpoints, so only updates are timed)
in a throwaway folder, exactly as ``agents/ppo.py`` would, with the preset's own ``run.torch_threads``. Each
update's clock (``metrics.jsonl``) splits it into sampling (``time/generate``), env steps (``time/env``), prompt
building (``time/prompt``), scoring (``time/score``: the actor's log-probs, the reference and the critic's values)
and the PPO update (``time/update``); the first update is left out (it warms the caches up). Turns per second are
the turns of the timed updates over their time. The load average at the start and the end is recorded beside
the figures: publish a figure measured on idle cores only (a load under 0.5 at the start; the bench first waits up
to three minutes for the load to fall there, so back-to-back runs do not inherit each other's load).

Writes ``benchmarks/results/training.json``: one entry per preset and overrides (the latest run of each, keyed
``"<preset> <overrides>"``), with the machine, the largest resident memory logged between updates and the process's high-water mark.
``nox -s bench_training -- ppo.share_prompt_prefix=true`` measures a speed lever beside the preset as it is;
``nox -s bench_trunk_cache`` measures the SmolLM2 Crafter preset without ``ppo.trunk_cache``, with it, and with
``ppo.trunk_critic`` as well, one after the other.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.common import (
    IDLE_LOAD,
    load_preset,
    locked,
    machine,
    preset_parser,
    settled_load,
    update_records,
)
from verlog.pipes import closed_pipe_ok
from verlog.quiet import quiet_console

PHASES = ("generate", "env", "prompt", "score", "update")


def measure(config: Any) -> dict[str, Any]:
    """Train ``config`` in its (throwaway) folder; the timed updates' turns per second and per-phase seconds."""
    from verlog.ppo.trainer import Trainer

    trainer = Trainer(config)
    trainer.train()
    records = update_records(trainer.run_dir)[1:]  # the first update warms up
    if not records:
        raise SystemExit("--updates must be at least 2: the first update is not timed")
    seconds = sum(r["time/total"] for r in records)
    turns = len(records) * config.env.num_envs * config.ppo.turns_per_update
    return {
        "updates_timed": len(records),
        "turns": turns,
        "turns_per_s": turns / seconds,
        "update_s": seconds / len(records),
        "phases_s": {p: sum(r.get(f"time/{p}", 0.0) for r in records) / len(records) for p in PHASES},
        "rss_mb_max": max(r.get("sys/rss_mb", 0.0) for r in records),  # between updates
        "peak_rss_mb": max(r.get("sys/peak_rss_mb", 0.0) for r in records),  # inside one included
        "trunk_cache_mb_max": max(r.get("sys/trunk_cache_mb", 0.0) for r in records),
    }


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = preset_parser(__doc__, "learn_crafter.toml", "training.json")
    parser.add_argument("--updates", type=int, default=10, help="updates trained (the first is not timed)")
    args = parser.parse_intermixed_args(argv)
    quiet_console()
    load_start = settled_load()
    with tempfile.TemporaryDirectory() as folder:
        overrides = [
            f"run.output_dir={folder}", "run.console=false", "run.checkpoint_every=0", "run.eval_every=0",
            f"run.total_updates={args.updates}", "ppo.critic_warmup_batches=0", "ppo.critic_warmup_iters=0",
            *args.overrides,
        ]  # fmt: skip
        config = load_preset(parser, args.config, overrides)
        clock = time.perf_counter()
        figures = measure(config)
        wall = time.perf_counter() - clock
    entry = {
        "preset": args.config.stem,
        "overrides": list(args.overrides),
        "num_envs": config.env.num_envs,
        "turns_per_update": config.ppo.turns_per_update,
        "torch_threads": config.run.torch_threads,
        **figures,
        "wall_s": wall,
        "load_average": [load_start, os.getloadavg()[0]],
        "idle": load_start < IDLE_LOAD,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
    }
    phases = " ".join(f"{p} {s:.1f}" for p, s in figures["phases_s"].items())  # seconds, as the file has them
    print(f"{args.config.stem}: {figures['turns_per_s']:.1f} turns/s over {figures['updates_timed']} updates, "
          f"load {load_start:.2f} at the start")  # fmt: skip
    print(f"an update {figures['update_s']:.1f} s: {phases}")  # two lines, each within 80 columns
    path = args.out / "training.json"
    args.out.mkdir(parents=True, exist_ok=True)
    with locked(args.out):
        results = json.loads(path.read_text()) if path.is_file() else {"benchmark": "training", "presets": {}}
        results["presets"][" ".join([args.config.stem, *args.overrides])] = (
            entry  # a preset with overrides apart
        )
        path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
