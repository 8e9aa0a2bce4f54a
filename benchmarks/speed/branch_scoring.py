"""Scoring and updating on one-step branches: every row whole against each repeated prompt run once.

A played turn and its one-step branches (``algo.branch_actions``) share a prompt and differ only in a few answer
tokens. Scoring (the old log-probs of the PPO ratio) used to run that prompt once per row; it now runs each
distinct prompt once and the answers on its copied key/value cache (:func:`verlog.ppo.forward.shared_prompt_logprobs`).
The PPO update ran it once per row too; with ``ppo.share_branch_prompts`` it moves a state's rows as one and
runs each prompt once (:func:`verlog.ppo.forward.shared_prompt_logits`, gradients through the copied cache).
This builds the preset's ordinary :class:`~verlog.ppo.trainer.Trainer`, collects one batch, then scores it both
ways in turn (``--repeats`` times each, alternating, so both see the same load) and checks they agree; then it
runs the update both ways from the same weights (one each, the row-by-row one first, as one minibatch so both
take the same optimiser step) and compares the weights each leaves.

    python -m benchmarks.speed.branch_scoring [--config envs/learn_babaisai_branch.toml] [section.key=value ...]

Writes ``benchmarks/results/branch_scoring.json``: rows and distinct prompts, tokens each way runs through the
model, seconds each way (median), the speed-up, the largest log-prob difference; the update's seconds each way
and the largest difference between the weights they leave; the machine and its load.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
from rich.console import Console

from benchmarks.common import load_preset, machine, preset_parser, settled_load


def _parser() -> argparse.ArgumentParser:
    parser = preset_parser(__doc__, "learn_babaisai_branch.toml", "branch_scoring.json")
    parser.add_argument("--repeats", type=int, default=2, help="timed scorings each way (default 2)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from verlog.ppo.scoring import score
    from verlog.ppo.trainer import Trainer

    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    console = Console(soft_wrap=True)
    config = load_preset(
        parser, args.config, ["run.console=false", 'run.name="bench-branch-scoring"', *args.overrides]
    )
    load_start = settled_load()
    trainer = Trainer(config)
    storage = trainer.storage
    trainer.rollout.collect(storage)
    rows = storage.rows()
    shared = storage.shared_prompt_batches(rows, config.ppo.micro_batch_tokens)
    prompts = sum(int(m.batch.prompt_ids.shape[0]) for m in shared)
    grouped = {row for m in shared for row in m.rows}
    lone = [row for row in rows if row not in grouped]
    answer_tokens = sum(int(storage.response_lens[t, n]) for t, n in rows)
    whole_tokens = sum(len(storage.prompts[t][n]) for t, n in rows) + answer_tokens
    shared_tokens = (
        sum(len(storage.prompts[t][n]) for t, n in lone)
        + sum(int(m.batch.prompt_mask.sum()) for m in shared)
        + answer_tokens
    )
    seconds: dict[bool, list[float]] = {False: [], True: []}
    results: dict[bool, torch.Tensor] = {}
    for _ in range(args.repeats):
        for share in (False, True):
            storage.old_logprobs.zero_()
            clock = time.perf_counter()
            score(storage, actor=trainer.learner.models.actor, critic=None, reference=None,
                  temperature=config.sampling.temperature, max_tokens=config.ppo.micro_batch_tokens,
                  device="cpu", share_prompts=share)  # fmt: skip
            seconds[share].append(time.perf_counter() - clock)
            results[share] = storage.old_logprobs.clone()
    gap = float((results[True] - results[False]).abs().max())
    whole, once = statistics.median(seconds[False]), statistics.median(seconds[True])
    update = _updates(trainer, config)
    record = {
        "benchmark": "branch_scoring",
        "preset": args.config.name,
        "overrides": list(args.overrides),
        "rows": len(rows),
        "played_rows": int(storage.active[:, : storage.sampled_columns].sum()),
        "distinct_prompts": prompts + len(lone),
        "tokens_whole": whole_tokens,
        "tokens_shared": shared_tokens,
        "seconds_whole": whole,
        "seconds_shared": once,
        "speedup": whole / once,
        "max_logprob_gap": gap,
        **update,
        "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(),
        "precision": trainer.dist.precision,  # bf16 rounding, not the sharing, sets the gap
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": [load_start, os.getloadavg()[0]],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "branch_scoring.json").write_text(json.dumps(record, indent=2) + "\n")
    console.print(
        f"{len(rows)} rows ({record['played_rows']} played), {record['distinct_prompts']} distinct prompts: "
        f"{whole_tokens:,} tokens whole, {shared_tokens:,} with each prompt once; scoring {whole:.1f} s -> "
        f"{once:.1f} s ({whole / once:.1f}x), largest log-prob difference {gap:.1e}; the update "
        f"{update['update_seconds_whole']:.1f} s -> {update['update_seconds_shared']:.1f} s "
        f"({update['update_speedup']:.1f}x), largest weight difference {update['max_weight_gap']:.1e} (largest "
        f"step {update['max_weight_step']:.1e}); "
        f"load {load_start:.1f}"
    )
    return 0


def _updates(trainer: Any, config: Any) -> dict[str, float]:
    """One PPO update of the scored batch each way, from the same weights and optimiser state, in one minibatch
    (drawn by prompt, minibatches would hold other turns than drawn by turn): the seconds of each and the
    largest difference between the actor weights they leave."""
    from verlog.ppo.advantages import compute_advantages
    from verlog.ppo.update import ppo_update

    models, storage = trainer.learner.models, trainer.storage
    compute_advantages(storage, config)
    start = copy.deepcopy(models.actor.state_dict())
    optimizer = copy.deepcopy(models.actor_optimizer.state_dict())
    seconds, weights = {}, {}
    for share in (False, True):
        models.actor.load_state_dict(start)
        models.actor_optimizer.load_state_dict(optimizer)
        storage.share_branch_prompts = share
        clock = time.perf_counter()
        ppo_update(storage, models, accelerator=trainer.accelerator, config=config.ppo,
                   num_minibatches=1, temperature=config.sampling.temperature)  # fmt: skip
        seconds[share] = time.perf_counter() - clock
        weights[share] = {k: v.detach().float().clone() for k, v in models.actor.state_dict().items()}
    gap = max(float((weights[True][k] - weights[False][k]).abs().max()) for k in weights[True])
    step = max(float((weights[False][k] - start[k].float()).abs().max()) for k in weights[False])
    return {
        "max_weight_step": step,  # the largest move of any weight in the update: the scale of the gap
        "update_seconds_whole": seconds[False],
        "update_seconds_shared": seconds[True],
        "update_speedup": seconds[False] / seconds[True],
        "max_weight_gap": gap,
    }


if __name__ == "__main__":
    sys.exit(main())
