"""The shared prompt prefix in scoring and the update (``ppo.share_prompt_prefix``), off and on, in one run.

Every turn's prompt starts with the same instruction and worked example; generation already prefills it once
(vLLM's prefix cache, the transformers sampler's shared prefix), but scoring and the PPO update ran it once per
row. With the option on, each micro-batch runs that prefix once and its rows continue from the copied cache.
This builds the preset's ordinary :class:`~verlog.ppo.trainer.Trainer` and plays ``--updates`` updates with the
option off, then on, alternating (so both see the same load and the same stage of training), and reports the
time split of each update: generation, scoring, the update, weight sync, with the prompt and answer tokens a turn.

    python -m benchmarks.speed.prefix_update [--config envs/learn_crafter_real.toml] [--updates 2] [section.key=value ...]

Writes ``benchmarks/results/prefix_update.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from collections.abc import Sequence

from rich.console import Console

from benchmarks.common import load_preset, machine, preset_parser, settled_load

#: The per-update figures kept, each the median over the updates of one setting.
KEYS = (
    "time/generate", "time/score", "time/update", "time/weight_sync", "time/total", "charts/turns_per_s",
    "charts/prompt_tokens", "charts/response_tokens",
)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = preset_parser(__doc__, "learn_crafter_real.toml", "prefix_update.json")
    parser.add_argument("--updates", type=int, default=2, help="updates each way (default 2)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from verlog.ppo.trainer import Trainer

    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    console = Console(soft_wrap=True)
    overrides = [
        "run.console=false",
        'run.name="bench-prefix-update"',
        "ppo.critic_warmup_iters=0",
        *args.overrides,
    ]
    config = load_preset(parser, args.config, overrides)
    load_start = settled_load()
    trainer = Trainer(config)
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(args.updates):
        for name in ("off", "on"):
            trainer.storage.share_prefix = name == "on"
            runs[name].append(trainer.train_update())
    record = {
        "benchmark": "prefix_update",
        "preset": args.config.name,
        "overrides": list(args.overrides),
        "updates_each": args.updates,
        "turns_per_update": config.ppo.turns_per_update * config.env.num_envs,
        "precision": trainer.dist.precision,
        **{
            name: {k: statistics.median(m[k] for m in rows if k in m) for k in KEYS}
            for name, rows in runs.items()
        },
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": [load_start, os.getloadavg()[0]],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prefix_update.json").write_text(json.dumps(record, indent=2) + "\n")
    for name in ("off", "on"):
        r = record[name]
        console.print(
            f"prefix {name:>3}: {r['charts/turns_per_s']:.2f} turns/s; generate {r['time/generate']:.1f} s, score "
            f"{r['time/score']:.1f} s, update {r['time/update']:.1f} s, sync {r['time/weight_sync']:.1f} s; prompt "
            f"{r['charts/prompt_tokens']:.0f} and answer {r['charts/response_tokens']:.1f} tokens a turn"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
