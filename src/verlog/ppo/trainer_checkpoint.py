"""The trainer's checkpoints: what a checkpoint holds of a run, loading it back, and rolling back to it.

One path loads a checkpoint into a live trainer: ``--resume`` uses it at start, and the collapse watchdog
(:mod:`verlog.runkit.watchdog`) uses it mid-run to go back to the last good point with a lower actor learning rate.
Both restore the same things exactly: weights, optimisers, RNG states, storage slot 0, each env's episode
(replayed), the curriculum stage, the counters; rows logged after the checkpoint move to ``*.dropped.jsonl``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from verlog.models.weights import export_pretrained, weights_checksum
from verlog.runkit.checkpoint import load_checkpoint, save_checkpoint
from verlog.runkit.folder import best_checkpoint, checkpoint_dir, checkpoint_name, rewind
from verlog.runkit.manifest import good_checkpoint

__all__ = ["TrainerCheckpoints"]


class TrainerCheckpoints:
    """Mixed into :class:`verlog.ppo.trainer.Trainer`: save, load, roll back."""

    def save(self) -> Path:
        clock = time.perf_counter()
        if self.watchdog is not None:
            self.watchdog.saved(self.update)
        state = {
            "update": self.update,
            "global_step": self.global_step,
            "warmed_up": self.warmed_up,
            "storage": self.storage.state_dict(),
            "rollout": self.rollout.state_dict(),
            "prompt_cuts": self.rollout.prompts.cuts,
            "sample_rng": self.sample_rng.getstate(),
            "curriculum": self.curriculum.state_dict() if self.curriculum else None,
            "watchdog": self.watchdog.state_dict() if self.watchdog else None,
            # This process's view of the weights: every process holds the same unless their sync failed.
            "weights_checksum": [
                weights_checksum(self._unwrap(m), self.dist.gathered)
                for m in (self.actor, self.critic)
                if m is not None
            ],
        }
        path = save_checkpoint(
            self.run_dir,
            self.update,
            accelerator=self.accelerator,
            trainer_state=state,
            envs=list(self.envs.call("replay_state")),
            export=self._export if self.config.run.export_actor else None,
            keep=self.config.run.keep_checkpoints,
            more_states=self._more_states(),
            protect=self._protected(),
        )
        self.logger.print(f"checkpoint {path} ({time.perf_counter() - clock:.1f}s)")
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
        export_pretrained(self._unwrap(self.actor), folder, gathered=self.dist.gathered, write=main)
        if main:
            self.tokenizer.save_pretrained(folder)

    def _resume(self) -> None:
        main = self.accelerator.is_main_process
        path, passed_over = good_checkpoint(checkpoint_dir(self.run_dir), set_aside=main)
        for line in passed_over if main else ():
            print(f"warning: {line}; resuming from {path.name}", file=sys.stderr, flush=True)
        self._load(path)

    def _load(self, path: Path) -> None:
        """Put the run back exactly as it was when ``path`` was saved."""
        state, envs = load_checkpoint(path, accelerator=self.accelerator, more_states=self._more_states())
        if self.curriculum is not None and state.get("curriculum"):  # the stage's envs, then their episodes
            self.curriculum.load_state_dict(state["curriculum"])
            self._rebuild_envs()
        if envs is None or len(envs) != self.envs.num_envs:
            raise ValueError(f"{path} holds no env states for {self.envs.num_envs} sub-envs")
        self.envs.set_attr("replay_state", envs)  # replays each sub-env's episode (seed + actions)
        self.storage.load_state_dict(state["storage"])
        self.rollout.load_state_dict(state["rollout"])
        self.update = state["update"]
        self.global_step = state["global_step"]
        self.warmed_up = state["warmed_up"]
        self.rollout.prompts.cuts = state["prompt_cuts"]
        version, internal, gauss = state["sample_rng"]
        self.sample_rng.setstate((version, tuple(internal), gauss))
        if self.watchdog is not None and state.get("watchdog"):
            self.watchdog.load_state_dict(state["watchdog"])
        if self.accelerator.is_main_process:  # rows logged after this checkpoint: moved aside, not lost
            rewind(self.run_dir, self.update)

    def _roll_back(self, reason: str) -> None:
        """Back to the newest good checkpoint with a lower actor learning rate (or :class:`Collapsed`)."""
        at = self.update
        self.watchdog.roll_back(reason)  # raises Collapsed past watchdog.max_rollbacks
        rollbacks, scale = self.watchdog.rollbacks, self.watchdog.lr_scale
        best = best_checkpoint(self.run_dir)  # kept through rotation; after a panel's fall, the place to go
        path = checkpoint_dir(self.run_dir) / checkpoint_name(
            self.watchdog.target(int(best.name) if best else None)
        )
        self._load(path)
        self.watchdog.rollbacks, self.watchdog.lr_scale = (
            rollbacks,
            scale,
        )  # what the checkpoint does not know
        self.logger.print(
            f"watchdog: {reason} at update {at}: rolled back to checkpoint {path.name}, actor lr "
            f"{self.actor_lr_now():g} (x{scale:g}; rollback {rollbacks} of "
            f"{self.config.watchdog.max_rollbacks})"
        )
