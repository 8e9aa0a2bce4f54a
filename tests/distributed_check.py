"""Run by tests/test_distributed.py under ``accelerate launch``: a PPO update, then a batch whose loss is not
finite on the last process only, then another update.

Every process must skip the poisoned minibatches together (a process skipping alone would leave the others
waiting in a collective: the launch would hang), keep its weights through them, and end in step with the
others, and end its process group on closing. Each process writes ``<out>/rank-<r>.json``.

    accelerate launch ... tests/distributed_check.py OUT key=value ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from verlog.config import load_config
from verlog.models.weights import weights_checksum
from verlog.ppo.advantages import compute_advantages
from verlog.ppo.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def main(out: str, overrides: list[str]) -> None:
    trainer = Trainer(load_config(ROOT / "envs" / "tiny.toml", overrides))
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes

    def checksums() -> list[tuple[float, float]]:
        return [
            weights_checksum(trainer._unwrap(m), trainer.dist.gathered)
            for m in (trainer.learner.models.actor, trainer.learner.models.critic)
        ]

    first = trainer.train_update()
    storage = trainer.storage
    trainer.learner.sampler.update_weights()
    trainer.rollout.collect(storage)
    trainer._score(storage, logprobs=True)
    compute_advantages(storage, trainer.config, all_reduce=trainer._all_reduce)
    if rank == world - 1:
        storage.advantages = torch.full_like(storage.advantages, float("nan"))
    before = checksums()
    poisoned = trainer._ppo(storage, train_actor=True)
    after = checksums()
    storage.after_update()
    last = trainer.train_update()
    result = {
        "rank": rank,
        "world": world,
        "first_steps": first["losses/optimizer_steps"],
        "poisoned_steps": poisoned["losses/optimizer_steps"],
        "poisoned_skipped": poisoned["losses/skipped_steps"],
        "last_steps": last["losses/optimizer_steps"],
        "before": before,
        "after": after,
        "end": checksums(),
        # DeepSpeed's own count of optimiser steps (boundaries) and of those it skipped, per engine.
        "engine_steps": [
            [m.global_steps, m.skipped_steps]
            for m in (trainer.learner.models.actor, trainer.learner.models.critic)
            if hasattr(m, "global_steps")
        ],
    }
    trainer.close()
    # A group left to interpreter exit can abort the process after its work is done (Gloo's threads).
    result["group_ended"] = not torch.distributed.is_initialized()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank-{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
