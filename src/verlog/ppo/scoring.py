"""Scoring: the models over a collected batch, a step of its own between collection and the update.

The storage holds the turns, a rollout plays them, scoring scores them, :mod:`verlog.ppo.update` learns from
them. :func:`score` runs the one forward path of :mod:`verlog.ppo.forward` over the stored turns: old
log-probs (recomputed by the actor, so the PPO ratio starts at 1), reference log-probs, per-token values, the
bootstrap values of slot T and the values of truncated episodes' final observations. Under a constraint
(``sampling.constrain``) every micro-batch carries the masks the sampler saw (``batch.allowed``, replayed by
:meth:`~verlog.ppo.storage.TurnStorage.allowed_tokens`), so the log-probs are those of the constrained policy.
:func:`score_batch` is the trainer's call: it scores a batch and returns :func:`score_metrics`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from verlog.ppo.forward import (
    Batch,
    Trunk,
    actor_logprobs,
    collate,
    critic_values,
    shared_prompt_logprobs,
    values_through,
)
from verlog.ppo.storage import SharedMicroBatch, TurnStorage, pack_by_tokens

if TYPE_CHECKING:  # the bundle's type only
    from verlog.ppo.build import Models

__all__ = ["score", "score_batch", "score_metrics", "state_values"]


@torch.no_grad()
def state_values(
    critic: nn.Module,
    prompts: Sequence[list[int]],
    *,
    pad_id: int,
    max_tokens: int,
    device: Any,
    common_count: Callable[[int], int] | None = None,
    trunk: Trunk | None = None,
    share_prefix: bool = False,
    pad_multiple: int = 1,
) -> torch.Tensor:
    """V(prompt) for each prompt: the critic's output at its last token (read through ``trunk`` when the critic
    sits on the actor's trunk, ``ppo.trunk_critic``). ``share_prefix`` and ``pad_multiple`` pack the prompts as
    scoring does (:func:`~verlog.ppo.forward.collate`): the prefix they all share run once.

    ``common_count(n)`` is the number of forward passes every process runs when the passes are collective
    (DeepSpeed with several processes); this one pads with passes on a one-token batch.
    """
    values = torch.zeros(len(prompts))
    groups = pack_by_tokens([(len(p), 0) for p in prompts], max_tokens)
    for group in groups:
        batch = collate([prompts[i] for i in group], [[] for _ in group], pad_id, share_prefix, pad_multiple)
        values[group] = values_through(critic, batch.to(device), trunk)[:, 0].cpu()
    for _ in range(_padding(common_count, len(groups))):
        critic_values(critic, _idle_batch(pad_id, device))
    return values


@torch.no_grad()
def score(
    storage: TurnStorage,
    *,
    actor: nn.Module | None,
    critic: nn.Module | None,
    reference: nn.Module | None,
    temperature: float,
    max_tokens: int,
    device: Any,
    common_count: Callable[[int], int] | None = None,
    share_prompts: bool = True,
    trunk: Trunk | None = None,
) -> None:
    """Fill old/ref log-probs (when the models are given), token values, values and truncated values
    (when the critic is given: a critic-free estimator has none).

    ``common_count``: as in :func:`state_values`, for collective forward passes.

    Rows that repeat a prompt (a played turn and its one-step branches) get their log-probs with the prompt run
    once (:meth:`TurnStorage.shared_prompt_batches`; ``share_prompts=False`` runs every row whole, as a benchmark
    compares), except under collective forward passes, where every process must run the same passes.

    ``trunk`` (``ppo.trunk_cache``): the actor's frozen trunk runs once per micro-batch, ``actor`` and
    ``reference`` are then models run from its states (:class:`~verlog.models.trunk.TopLayers`), the critic too
    when it sits on the trunk (``ppo.trunk_critic``), and the states are kept in the storage for the update
    (within its budget). Every row then runs whole: the trunk's states
    are what a repeated prompt would share. Turns whose states the storage holds already (kept by the sampler,
    which ran the trunk while it answered) do not run the trunk again.
    """
    rows = storage.rows()
    scorers = [
        (m, target)
        for m, target in ((actor, storage.old_logprobs), (reference, storage.ref_logprobs))
        if m is not None
    ]
    sharing = share_prompts and scorers and common_count is None and trunk is None
    shared = storage.shared_prompt_batches(rows, max_tokens) if sharing else []
    grouped = {row for micro in shared for row in micro.rows}
    together = not grouped  # no repeated prompt: the critic and the actor read the same micro-batches
    keep = trunk is not None and storage.trunk_budget > 0  # a trunk shares no prompt: together
    reads_trunk = critic is not None and trunk is not None and trunk.critic_on_trunk
    micros = list(storage.micro_batches(rows, max_tokens)) if critic is not None or together or keep else []
    for _ in range(_padding(common_count, len(micros))):
        batch = _idle_batch(storage.pad_id, device)
        if critic is not None:
            critic_values(critic, batch)
        for model, _target in scorers:
            actor_logprobs(model, batch, temperature)
    for micro in micros:
        batch = micro.batch.to(device)
        ts, ns = _indices(micro.rows)
        r_len, mask = batch.response_len, batch.response_mask.cpu()
        if trunk is not None and (scorers or keep or reads_trunk):
            batch = trunk.states(batch)
            if keep:
                storage.keep_trunk_states(micro.rows, batch)
        if critic is not None:
            values = values_through(critic, batch, trunk).cpu()
            storage.token_values[ts, ns] = 0.0
            storage.token_values[ts, ns, :r_len] = values[:, :r_len] * mask
            storage.values[ts, ns] = values[:, 0]
        for model, target in scorers if together else ():
            logprobs, _ = actor_logprobs(model, batch, temperature)
            target[ts, ns] = 0.0
            target[ts, ns, :r_len] = logprobs.cpu() * mask
    if not together:
        lone = [row for row in rows if row not in grouped]
        _score_logprobs(
            storage, scorers, lone, shared, temperature=temperature, max_tokens=max_tokens, device=device
        )
    if critic is not None:
        _bootstrap_values(
            storage, critic, max_tokens=max_tokens, device=device, common_count=common_count, trunk=trunk
        )


def _bootstrap_values(
    storage: TurnStorage,
    critic: nn.Module,
    *,
    max_tokens: int,
    device: Any,
    common_count: Callable[[int], int] | None,
    trunk: Trunk | None = None,
) -> None:
    """The values of slot T (the bootstrap state) and of truncated episodes' final observations."""
    T = storage.num_turns
    keys = sorted(storage.final_prompts)
    prompts = storage.prompts[T] + [storage.final_prompts[k] for k in keys]
    values = state_values(
        critic,
        prompts,
        pad_id=storage.pad_id,
        max_tokens=max_tokens,
        device=device,
        common_count=common_count,
        trunk=trunk,
        share_prefix=storage.share_prefix,  # off under lockstep collectives, as in scoring
        pad_multiple=storage.pad_multiple,
    )
    storage.values[T] = values[: storage.num_envs]
    storage.truncated_values.zero_()
    for (t, n), value in zip(keys, values[storage.num_envs :].tolist(), strict=True):
        storage.truncated_values[t, n] = value


def score_batch(
    storage: TurnStorage,
    models: Models,
    *,
    unwrap: Callable[[nn.Module], nn.Module],
    logprobs: bool,
    reuse_sampler_logprobs: bool,
    temperature: float,
    max_tokens: int,
    device: Any,
    common_count: Callable[[int], int] | None = None,
) -> dict[str, float]:
    """:func:`score` a collected batch with ``models`` (``unwrap`` takes a prepared model out of its DDP or
    DeepSpeed wrapper: no-grad scoring calls it directly) and return what scoring found. ``logprobs=False``
    scores the values alone (critic pre-training); with ``reuse_sampler_logprobs`` the sampler's log-probs are
    the old ones (the weights have not moved since sampling), so the actor does not score them again."""
    clock = time.perf_counter()
    sampled = len(storage.trunk_states)  # turns whose trunk the sampler ran
    reuse = logprobs and reuse_sampler_logprobs
    critic = None if models.critic is None else unwrap(models.critic)
    trunk = models.trunk
    score(
        storage,
        actor=(unwrap(models.actor) if trunk is None else trunk.top) if logprobs and not reuse else None,
        critic=critic,
        reference=models.reference if logprobs else None,
        temperature=temperature,
        max_tokens=max_tokens,
        device=device,
        common_count=common_count,
        trunk=trunk,
    )
    if reuse:
        storage.old_logprobs.copy_(storage.sampler_logprobs)
    metrics = {"time/score": time.perf_counter() - clock}
    if trunk is not None:
        metrics["sys/trunk_cache_mb"] = storage.trunk_bytes / 2**20
        metrics["sys/trunk_cached_turns"] = float(len(storage.trunk_states))
        metrics["sys/trunk_sampled_turns"] = float(sampled)
    metrics.update(
        score_metrics(
            storage,
            values=critic is not None,
            old_logprobs=logprobs and not reuse,
            reference=logprobs and models.reference is not None,  # reused: the sampler's log-probs against it
        )
    )
    return metrics


def score_metrics(
    storage: TurnStorage, *, values: bool, old_logprobs: bool, reference: bool
) -> dict[str, float]:
    """What scoring found, per response token: the mean value, how far the sampler's log-probs are from the
    learner's (the same weights: kernels and precision only), and the KL to the reference; under a constraint,
    the answers its replayed grammar refused so far (not sampled under it: they keep the free distribution)."""
    mask = storage.response_mask
    tokens = mask.sum().clamp(min=1)
    metrics = {}
    if storage.constraint is not None:
        metrics["sampling/constraint_refused"] = float(storage.constraint.refused)
    if values:
        metrics["charts/value"] = float(storage.values[:-1].mean())
    if old_logprobs:
        S = storage.sampled_columns
        gap = (storage.sampler_logprobs[:, :S] - storage.old_logprobs[:, :S]).abs() * mask[:, :S]
        metrics["charts/sampler_logprob_gap"] = float(gap.sum() / mask[:, :S].sum().clamp(min=1))
    if reference:
        kl = (storage.old_logprobs - storage.ref_logprobs) * mask
        metrics["charts/kl_to_reference"] = float(kl.sum() / tokens)
    return metrics


def _score_logprobs(
    storage: TurnStorage,
    scorers: list[tuple[nn.Module, torch.Tensor]],
    lone: list[tuple[int, int]],
    shared: list[SharedMicroBatch],
    *,
    temperature: float,
    max_tokens: int,
    device: Any,
) -> None:
    """Each scorer's log-probs into its target: ``lone`` rows packed as usual, ``shared`` ones a prompt once."""
    for micro in storage.micro_batches(lone, max_tokens) if lone else ():
        batch = micro.batch.to(device)
        ts, ns = _indices(micro.rows)
        for model, target in scorers:
            logprobs, _ = actor_logprobs(model, batch, temperature)
            target[ts, ns] = 0.0
            target[ts, ns, : batch.response_len] = logprobs.cpu() * batch.response_mask.cpu()
    for shared_micro in shared:
        shared_batch = shared_micro.batch.to(device)
        ts, ns = _indices(shared_micro.rows)
        for model, target in scorers:
            logprobs = shared_prompt_logprobs(model, shared_batch, temperature).cpu()
            target[ts, ns] = 0.0
            target[ts, ns, : logprobs.shape[1]] = logprobs


def _indices(rows: Sequence[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([t for t, _ in rows]), torch.tensor([n for _, n in rows])


def _padding(common_count: Callable[[int], int] | None, count: int) -> int:
    return 0 if common_count is None else common_count(count) - count


def _idle_batch(pad_id: int, device: Any) -> Batch:
    """A one-token prompt with a one-token response: a forward pass that only keeps collectives in step."""
    return collate([[pad_id]], [[pad_id]], pad_id).to(device)
