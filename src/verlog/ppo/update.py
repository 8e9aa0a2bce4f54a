"""The PPO update: token-level clipped surrogate with dual clip, entropy bonus, clipped value loss.

Losses are token means over each minibatch (Verlog's ``token-mean``): every micro-batch adds its token sums
divided by the minibatch's token count, so gradient accumulation over micro-batches gives the same step as one
big batch. The actor and the critic have their own optimiser, learning rate and gradient clipping. A
minibatch whose loss or gradient norm is not finite changes nothing: its gradients are dropped, no optimiser
steps, and ``losses/skipped_steps`` counts it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from verlog.ppo.config import PPOConfig
from verlog.ppo.policy import actor_logprobs, critic_values
from verlog.ppo.storage import MicroBatch, TurnStorage

__all__ = ["explained_variance", "policy_loss", "ppo_update", "value_loss"]

#: log-ratios are clamped here before exp, so a wild token cannot overflow the ratio (verl does the same).
MAX_LOG_RATIO = 20.0


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    dual_clip: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Token sums of the clipped surrogate loss, of clipped tokens and of the k3 KL estimate."""
    log_ratio = (logprobs - old_logprobs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    if dual_clip:
        # A negative advantage with a huge ratio would push without bound: cap the loss at -c * A.
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    clip_count = ((clipped > unclipped).float() * mask).sum()
    approx_kl = (((ratio - 1.0) - log_ratio) * mask).sum()
    return (loss * mask).sum(), clip_count, approx_kl


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, *, clip: float, first_weight: float
) -> Tensor:
    """Token sum of 0.5 * max(unclipped, clipped) squared error, with slot 0 (the state value) weighted up."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    error = torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    weight = torch.ones_like(error)
    weight[:, 0] = first_weight
    return 0.5 * (error * weight * mask).sum()


def explained_variance(predicted: Tensor, target: Tensor, mask: Tensor) -> float:
    """1 - Var[target - predicted] / Var[target] over the masked entries (NaN when the target is constant)."""
    count = mask.sum()
    if count < 2:
        return float("nan")

    def var(x: Tensor) -> float:
        mean = (x * mask).sum() / count
        return float((((x - mean) ** 2) * mask).sum() / count)

    target_var = var(target)
    return 1.0 - var(target - predicted) / target_var if target_var > 0 else float("nan")


def ppo_update(
    storage: TurnStorage,
    *,
    actor: nn.Module,
    critic: nn.Module,
    actor_optimizer: torch.optim.Optimizer,
    critic_optimizer: torch.optim.Optimizer,
    accelerator: Any,
    config: PPOConfig,
    minibatch_size: int,
    temperature: float = 1.0,
    train_actor: bool = True,
    limit: int | None = None,
) -> dict[str, float]:
    """Run ``config.epochs`` passes of minibatch steps over the storage; return the metrics.

    ``train_actor=False`` trains the critic alone (critic pre-training); ``limit`` trains on a random subset
    of that many turns.
    """
    metrics = {
        "losses/explained_variance": explained_variance(
            storage.token_values, storage.returns, storage.response_mask
        )
    }
    sums: dict[str, float] = {}
    tokens = 0.0
    steps = skipped = 0
    actor.train(train_actor)
    critic.train()
    for _ in range(config.epochs):
        for minibatch in storage.minibatches(minibatch_size, config.micro_batch_tokens, limit=limit):
            count = sum(float(mb.batch.response_mask.sum()) for mb in minibatch)
            step_sums, finite = _accumulate(
                minibatch, count, actor, critic, config, accelerator, temperature, train_actor
            )
            norms = {}
            if finite:
                if train_actor:
                    norms["losses/grad_norm"] = float(
                        accelerator.clip_grad_norm_(actor.parameters(), config.max_grad_norm)
                    )
                norms["losses/critic_grad_norm"] = float(
                    accelerator.clip_grad_norm_(critic.parameters(), config.max_grad_norm)
                )
                finite = all(math.isfinite(v) for v in norms.values())
            if finite:
                if train_actor:
                    actor_optimizer.step()
                critic_optimizer.step()
                steps += 1
                tokens += count
                for key, value in {**step_sums, **norms}.items():
                    sums[key] = sums.get(key, 0.0) + value
            else:
                skipped += 1
            actor_optimizer.zero_grad(set_to_none=True)
            critic_optimizer.zero_grad(set_to_none=True)
    actor.eval()
    critic.eval()
    for key, value in sums.items():
        metrics[key] = value / steps if key.endswith("grad_norm") else value / max(tokens, 1.0)
    metrics["losses/skipped_steps"] = float(skipped)
    metrics["losses/optimizer_steps"] = float(steps)
    return metrics


def _accumulate(
    minibatch: list[MicroBatch],
    count: float,
    actor: nn.Module,
    critic: nn.Module,
    config: PPOConfig,
    accelerator: Any,
    temperature: float,
    train_actor: bool,
) -> tuple[dict[str, float], bool]:
    """Backward every micro-batch of one minibatch; stop at the first non-finite loss (returns False)."""
    device = accelerator.device
    sums: dict[str, float] = {}
    for micro in minibatch:
        mb = micro.to(device)
        mask = mb.batch.response_mask
        values = critic_values(critic, mb.batch)[:, : mb.batch.response_len]
        v_loss = value_loss(
            values,
            mb.old_values,
            mb.returns,
            mask,
            clip=config.value_clip,
            first_weight=config.first_value_weight,
        )
        loss = v_loss / count
        parts = {"losses/value_loss": v_loss}
        if train_actor:
            logprobs, entropy = actor_logprobs(actor, mb.batch, temperature, with_entropy=True)
            assert entropy is not None
            pg_loss, clip_count, approx_kl = policy_loss(
                logprobs,
                mb.old_logprobs,
                mb.advantages,
                mask,
                clip_low=config.clip_ratio_low,
                clip_high=config.clip_ratio_high,
                dual_clip=config.dual_clip,
            )
            entropy_sum = (entropy * mask).sum()
            loss = loss + (pg_loss - config.entropy_coef * entropy_sum) / count
            parts.update(
                {
                    "losses/policy_loss": pg_loss,
                    "losses/entropy": entropy_sum,
                    "losses/approx_kl": approx_kl,
                    "losses/clipfrac": clip_count,
                }
            )
        if not torch.isfinite(loss):
            return sums, False
        accelerator.backward(loss)
        for key, value in parts.items():
            sums[key] = sums.get(key, 0.0) + float(value.detach())
    return sums, True
