"""A trainer's checkpoints: what a checkpoint holds of a run, loading it back, and rolling back to it.

One path loads a checkpoint into a live trainer: ``--resume`` uses it at start, and the collapse watchdog
(:mod:`verlog.runkit.watchdog`) uses it mid-run to go back to the last good point with a lower actor learning
rate. Both restore the same things exactly: weights, optimisers, RNG states, storage slot 0, each env's episode
(replayed), the curriculum stage, the counters; rows logged after the checkpoint move to ``*.dropped.jsonl``.

:class:`TrainerCheckpoints` is a part of the trainer with a declared interface: it is given the run folder, the
process setup, the learner's bundle (models and tokenizer) and the watchdog when it is made, and reads the
rest of the run only through :class:`Checkpointed` (the trainer's own state as a dict, and its envs' replay
states). The files themselves (atomic writes, manifests, rotation) are :mod:`verlog.runkit.checkpoint`'s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from verlog.config import RunConfig
from verlog.models.weights import export_pretrained, weights_checksum
from verlog.runkit.checkpoint import load_checkpoint, save_checkpoint
from verlog.runkit.folder import best_checkpoint, checkpoint_dir, checkpoint_name, rewind
from verlog.runkit.manifest import good_checkpoint
from verlog.runkit.watchdog import Watchdog

if TYPE_CHECKING:  # the bundle's type only
    from verlog.ppo.build import Learner

__all__ = ["Checkpointed", "TrainerCheckpoints"]


class Checkpointed(Protocol):
    """All that :class:`TrainerCheckpoints` reads of the run besides what it is given when made."""

    update: int
    """Updates done (a checkpoint is named after it)."""

    def state_dict(self) -> dict[str, Any]:
        """The run's own state: counters, storage slot 0, rollout, curriculum, watchdog, random streams."""
        ...

    def load_state_dict(self, state: dict[str, Any], env_states: list[Any]) -> None:
        """Put :meth:`state_dict`'s state back, and replay each sub-env's episode from ``env_states``."""
        ...

    def env_states(self) -> list[Any]:
        """Each sub-env's replay state (its seed and the actions of its episode so far)."""
        ...


class TrainerCheckpoints:
    """Save, load, resume and roll back the run of a :class:`Checkpointed` trainer."""

    def __init__(
        self,
        run: Checkpointed,
        *,
        run_dir: Path,
        dist: Any,
        learner: Learner,
        config: RunConfig,
        watchdog: Watchdog | None,
    ) -> None:
        self.run = run
        self.run_dir = run_dir
        self.dist = dist  # verlog.runkit.distributed.Dist: the accelerators and how weights are gathered
        self.accelerator = dist.actor
        self.actor, self.critic = learner.models.actor, learner.models.critic  # the same modules all run long
        self.tokenizer = learner.tokenizer
        self.config = config
        self.watchdog = watchdog

    def save(self) -> Path:
        """A checkpoint of the run as it is now (the watchdog's candidate good point)."""
        if self.watchdog is not None:
            self.watchdog.saved(self.run.update)
        state = self.run.state_dict()
        # This process's view of the weights: every process holds the same unless their sync failed.
        state["weights_checksum"] = [
            weights_checksum(self.accelerator.unwrap_model(m), self.dist.gathered)
            for m in (self.actor, self.critic)
            if m is not None
        ]
        return save_checkpoint(
            self.run_dir,
            self.run.update,
            accelerator=self.accelerator,
            trainer_state=state,
            envs=self.run.env_states(),
            export=self._export if self.config.export_actor else None,
            keep=self.config.keep_checkpoints,
            more_states=self._more_states(),
            protect=self._protected(),
        )

    def resume(self) -> None:
        """Load the newest intact checkpoint of the run folder (damaged newer ones are set aside, and said)."""
        main = self.accelerator.is_main_process
        path, passed_over = good_checkpoint(checkpoint_dir(self.run_dir), set_aside=main)
        for line in passed_over if main else ():
            print(f"warning: {line}; resuming from {path.name}", file=sys.stderr, flush=True)
        self.load(path)
        if main:  # after the model's "critic: new value head" line: the head is the checkpoint's now
            said = f"resumed at update {self.run.update} from checkpoints/{path.name}"
            print(f"{said}: actor, critic and optimisers as saved", flush=True)

    def load(self, path: Path) -> None:
        """Put the run back exactly as it was when ``path`` was saved."""
        state, envs = load_checkpoint(path, accelerator=self.accelerator, more_states=self._more_states())
        if envs is None:
            raise ValueError(f"{path} holds no env states")
        self.run.load_state_dict(state, envs)
        if self.accelerator.is_main_process:  # rows logged after this checkpoint: moved aside, not lost
            rewind(self.run_dir, self.run.update)

    def roll_back(self, reason: str) -> Path:
        """Back to the watchdog's target checkpoint with a lower actor learning rate (or
        :class:`~verlog.runkit.watchdog.Collapsed`); returns the checkpoint loaded."""
        assert self.watchdog is not None
        self.watchdog.roll_back(reason)  # raises Collapsed past watchdog.max_rollbacks
        rollbacks, scale = self.watchdog.rollbacks, self.watchdog.lr_scale
        best = best_checkpoint(self.run_dir)  # kept through rotation; after a panel's fall, the place to go
        path = checkpoint_dir(self.run_dir) / checkpoint_name(
            self.watchdog.target(int(best.name) if best else None)
        )
        self.load(path)
        self.watchdog.rollbacks, self.watchdog.lr_scale = (
            rollbacks,
            scale,
        )  # what the checkpoint does not know
        return path

    def _protected(self) -> set[str]:
        """Checkpoints rotation must keep: the watchdog's good point (and the panel's best, see runkit.folder)."""
        good = self.watchdog.good_update if self.watchdog else None
        return {checkpoint_name(good)} if good is not None else set()

    def _more_states(self) -> dict[str, Any]:
        """The critic's accelerator, when it is not the actor's (DeepSpeed: one engine per model)."""
        separate = self.critic is not None and self.dist.critic is not self.dist.actor
        return {"critic_state": self.dist.critic} if separate else {}

    def _export(self, folder: Path) -> None:
        """The actor as a plain HF model (ZeRO-3 shards gathered, LoRA merged) and the tokenizer."""
        main = self.accelerator.is_main_process
        export_pretrained(
            self.accelerator.unwrap_model(self.actor), folder, gathered=self.dist.gathered, write=main
        )
        if main:
            self.tokenizer.save_pretrained(folder)
