"""Runs that go wrong in the learner: diverged weights and updates whose every optimiser step was skipped.

A learning rate far too high takes one step with a finite loss and leaves weights of 1e30, which sampling
then turns into "probability tensor contains inf/nan" an update later, after they were saved. :class:`Guard`
looks at the weights right after each update, before anything is saved, and stops the run with one line
naming the model and its learning rate: the last checkpoint stays the newest, so the run resumes from it
(with a lower rate). It also counts updates in which every optimiser step was skipped (non-finite losses or
gradients, see :mod:`verlog.ppo.update`), says so, and stops after ``ppo.max_skipped_updates`` in a row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["Diverged", "Guard", "stopped_run"]


class Diverged(RuntimeError):
    """The run stopped because training diverged; the message is one line."""


class Guard:
    """Checks after each update; raises :class:`Diverged` (the same on every process) to stop the run."""

    def __init__(self, ppo: Any, device: Any, say: Callable[[str], None]) -> None:
        self.max_weight_abs = ppo.max_weight_abs
        self.max_skipped = ppo.max_skipped_updates
        self.rates = {"actor": ("ppo.actor_lr", ppo.actor_lr), "critic": ("ppo.critic_lr", ppo.critic_lr)}
        self.device, self.say = device, say
        self.skipped_in_a_row = 0

    def reduce(self, value: torch.Tensor) -> torch.Tensor:
        """The largest over every process (each holds its own shard, or its own copy to compare)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return value
        value = value.to(self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return value.cpu()

    def after_update(
        self, update: int, metrics: dict[str, float], models: dict[str, torch.nn.Module | None]
    ) -> None:
        """Raise when a model's weights are non-finite or too large, or too many updates were all skipped."""
        for name, model in models.items():
            if model is None:
                continue
            largest = float(self.reduce(_largest_weight(model)))
            if largest > (self.max_weight_abs or float("inf")) or largest == float("inf"):
                key, rate = self.rates[name]
                shown = "non-finite" if largest == float("inf") else f"as large as {largest:.3g}"
                raise Diverged(
                    f"update {update} left the {name}'s weights {shown} (ppo.max_weight_abs = {self.max_weight_abs:g}); "
                    f"{key} = {rate:g} is the likely cause. Nothing of this update was saved"
                )
        if metrics.get("losses/skipped_steps", 0.0) > 0 and metrics.get("losses/optimizer_steps", 1.0) == 0:
            self.skipped_in_a_row += 1
            self.say(
                f"update {update}: every optimiser step was skipped (non-finite loss or gradients), "
                f"{self.skipped_in_a_row} update(s) in a row"
            )
            if self.max_skipped and self.skipped_in_a_row >= self.max_skipped:
                raise Diverged(
                    f"{self.skipped_in_a_row} updates in a row skipped every optimiser step (non-finite losses or "
                    f"gradients; ppo.max_skipped_updates = {self.max_skipped}): check the rewards and learning rates"
                )
        else:
            self.skipped_in_a_row = 0


def _largest_weight(model: torch.nn.Module) -> torch.Tensor:
    """The largest |weight| this process holds (its ZeRO-3 shard under DeepSpeed); inf for any inf or nan."""
    largest = torch.zeros(1, dtype=torch.float64)
    with torch.no_grad():
        for param in model.parameters():
            local = _own_elements(param)
            if local.numel():
                value = local.detach().abs().max().double().cpu().reshape(1)  # nan when there is one
                if not torch.isfinite(value).all():
                    return torch.full((1,), float("inf"), dtype=torch.float64)
                largest = torch.maximum(largest, value)
    return largest


def _own_elements(param: torch.Tensor) -> torch.Tensor:
    """The elements of ``param`` this process holds: all of it, or under ZeRO-3 its shard (``ds_tensor``) less
    the padding past the parameter's end, which is uninitialised memory (it read as 1.5e34 once)."""
    shard = getattr(param, "ds_tensor", None)
    if shard is None:
        return param
    import torch.distributed as dist

    rank = dist.get_rank(group=getattr(param, "ds_process_group", None)) if dist.is_initialized() else 0
    start = shard.numel() * rank
    return shard.reshape(-1)[: max(0, min(shard.numel(), int(param.ds_numel) - start))]


def stopped_run(trainer: Any, resume: str | None, *, fix: bool = True, script: str | None = None) -> str:
    """What a stopped run leaves and the command that continues it (one sentence, for the closing line);
    ``fix``: the run stopped on a fault, so it continues after a fix; ``script``: the script that resumes it,
    when not this process's own (a demonstration's run resumes under agents/ppo.py)."""
    from verlog.runkit.folder import latest_checkpoint
    from verlog.runkit.launch import resume_command

    folder = trainer.run_dir if trainer is not None else resume
    checkpoint = latest_checkpoint(folder) if folder else None
    if checkpoint is None:
        return "No checkpoint was saved: start the run again"
    after = " (after a fix)" if fix else ""
    command = resume_command(folder, None if script is None else [script])
    return f"Newest checkpoint {checkpoint}; continue{after} with: {command}"
