"""The PPO update: token-level clipped surrogate with dual clip, entropy bonus, clipped value loss. It reads
the advantages and returns the estimator left in the storage (how those are computed:
:mod:`verlog.ppo.advantages`).

Losses are token means over each minibatch (Verlog's ``token-mean``): every micro-batch adds its token sums
divided by the minibatch's token count, so gradient accumulation over micro-batches gives the same step as one
big batch. With several processes the count is the whole minibatch's, over all of them, so the data-parallel
mean of the gradients is the token mean of the global minibatch. The actor and the critic have their own
optimiser, learning rate and gradient clipping.

Accumulation goes through accelerate: every micro-batch but the last runs under ``no_sync`` with
``sync_gradients`` off, so DDP reduces gradients once and DeepSpeed steps at the last one. Under DeepSpeed
with several processes every forward pass is collective, so each process runs as many micro-batches as the
one with the most (the extra ones repeat a micro-batch with zero weight).

The reading loss (``ppo.reading_coef``, :func:`reading_loss`) is an auxiliary target at the answer's position:
the same logits that answer must also name the prompt token after a marker word (Crafter: the word after "face"),
over the tokens the answer may NOT use, so the constrained answer's distribution is left to the policy loss. Why: a
small model trained from scratch by the policy gradient alone can answer with one fixed mix of actions whatever it
reads (``losses/answer_information`` = 0); the reading target is there every turn, whatever the reward, and is met
only by an answer state that carries the observation, which the policy gradient can then use.

Without a critic (a critic-free estimator, ``critic=None``) the same loop trains the actor alone: no value
loss, no critic step, the advantages as the estimator left them in the storage.

A minibatch whose loss or gradient norm is not finite changes nothing: its gradients are dropped, no optimiser
steps, and ``losses/skipped_steps`` counts it. The decision is shared by every process (a process skipping
alone would leave the others waiting in a collective). DeepSpeed steps inside the last backward, so there a
shared non-finite decision turns that backward's gradients into NaN and DeepSpeed's own check skips the step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from verlog.config import PPOConfig
from verlog.ppo.forward import Trunk, actor_answers, answer_information, values_through
from verlog.ppo.storage import MicroBatch, TurnStorage

if TYPE_CHECKING:  # the bundle's type only: the loss does not depend on how the models are built
    from verlog.ppo.build import Models

__all__ = [
    "EntropyBonus",
    "clip_gradients",
    "explained_variance",
    "marker_ids",
    "policy_loss",
    "ppo_update",
    "reading_loss",
    "reading_targets",
    "value_loss",
]

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
    models: Models,
    *,
    accelerator: Any,
    config: PPOConfig,
    num_minibatches: int,
    temperature: float = 1.0,
    train_actor: bool = True,
    limit: int | None = None,
    critic_accelerator: Any = None,
    entropy_coef: float | None = None,
) -> dict[str, float]:
    """Run ``config.epochs`` passes of minibatch steps over the storage, training ``models``' actor and critic
    with their optimisers; return the metrics.

    ``accelerator`` prepared the actor, ``critic_accelerator`` the critic (the same one unless DeepSpeed,
    which needs one per model). ``train_actor=False`` trains the critic alone (critic pre-training);
    ``limit`` trains on a random subset of that many turns; each epoch cuts the turns into
    ``num_minibatches`` minibatches (one optimiser step each). ``entropy_coef`` replaces the config's for this
    update (:meth:`EntropyBonus.coef_after`).
    """
    if entropy_coef is not None:
        config = dataclasses.replace(config, entropy_coef=entropy_coef)
    accelerators = _Accelerators(accelerator, critic_accelerator or accelerator)
    actor, critic = models.actor, models.critic
    actor_optimizer, critic_optimizer = models.actor_optimizer, models.critic_optimizer
    metrics = {}
    if critic is not None:
        metrics["losses/explained_variance"] = explained_variance(
            storage.token_values, storage.returns, storage.response_mask
        )
    sums: dict[str, float] = {}
    tokens = 0.0
    steps = skipped = 0
    actor.train(train_actor)
    critics = [] if critic is None else [critic]  # what to train besides the actor
    for model in critics:
        model.train()
    stepped = [actor_optimizer] if train_actor or models.shared else []  # a shared decoder: pre-training too
    optimizers = stepped + ([critic_optimizer] if critics else [])
    for _ in range(config.epochs):
        for minibatch in storage.minibatches(num_minibatches, config.micro_batch_tokens, limit=limit):
            count = sum(float(mb.batch.response_mask.sum()) for mb in minibatch)
            step_sums, finite = _accumulate(
                minibatch, count, actor, critic, config, accelerators, temperature, train_actor, models
            )
            norms = {}
            if finite or accelerators.deepspeed:
                norms = clip_gradients(
                    models, config.max_grad_norm, accelerators.actor, accelerators.critic, train_actor
                )
            if accelerators.deepspeed:  # DeepSpeed stepped (or skipped) inside the last backward
                finite = finite and not any(getattr(o, "step_was_skipped", False) for o in optimizers)
            elif finite:
                # Gradients are synced, so the norms (and this decision) are the same on every process.
                finite = all(math.isfinite(v) for v in norms.values())
                if finite:
                    for optimizer in optimizers:
                        optimizer.step()
            if finite:
                steps += 1
                tokens += count
                for key, value in {**step_sums, **norms}.items():
                    sums[key] = sums.get(key, 0.0) + value
            else:
                skipped += 1
            for optimizer in (actor_optimizer, critic_optimizer):
                if optimizer is not None:
                    optimizer.zero_grad(set_to_none=True)
    actor.eval()
    for model in critics:
        model.eval()
    metrics.update(average_parts(sums, steps, tokens))
    if train_actor:
        metrics["charts/entropy_coef"] = config.entropy_coef
    metrics.update({"losses/skipped_steps": float(skipped), "losses/optimizer_steps": float(steps)})
    return metrics


#: Bounds of an adapted entropy coefficient: above 1 the bonus outweighs a whitened advantage on every token, and
#: from under 1e-5 it would take many updates to climb back.
MIN_ENTROPY_COEF, MAX_ENTROPY_COEF = 1e-5, 1.0


class EntropyBonus:
    """The entropy coefficient of each update: ``ppo.entropy_coef``'s schedule, or, with ``ppo.entropy_target``,
    a coefficient adapted to a target entropy as the adaptive KL controller (Ziegler et al., 2019) adapts its KL
    coefficient. Why: a fixed bonus is too weak late (a policy that finds one answer that pays often collapses onto
    it and drops every other skill: SmolLM2 on Crafter, docs/log.md) or too strong early; a target names what is
    wanted, the entropy kept, in the units logged (``losses/entropy``, nats per response token).

    After each update the coefficient is multiplied by ``exp(rate * e)``, ``e = clip((target - entropy) / target,
    -1, 1)``: at most a factor ``exp(rate)`` an update, whatever one batch's entropy is. The coefficient is in
    the trainer's checkpointed state, so a resumed run goes on with the same bonus.
    """

    def __init__(self, ppo: PPOConfig) -> None:
        self.ppo = ppo
        self.coef = ppo.entropy_coef  # the adapted coefficient, with a target

    def coef_after(self, updates: int) -> float:
        """The bonus of the update after ``updates`` are done."""
        return self.coef if self.ppo.entropy_target > 0 else self.ppo.entropy_coef_after(updates)

    def observe(self, metrics: dict[str, float]) -> float:
        """Adapt after an update, from its metrics averaged over the processes (so every process moves alike);
        an update without a finite entropy (every optimiser step skipped) leaves the coefficient as it was."""
        entropy, target = metrics.get("losses/entropy", math.nan), self.ppo.entropy_target
        if target > 0 and math.isfinite(entropy):
            error = max(-1.0, min(1.0, (target - entropy) / target))
            rate = self.ppo.entropy_target_rate
            self.coef = min(MAX_ENTROPY_COEF, max(MIN_ENTROPY_COEF, self.coef * math.exp(rate * error)))
        return self.coef

    def state_dict(self) -> dict[str, float]:
        return {"coef": self.coef}

    def load_state_dict(self, state: dict[str, float] | None) -> None:
        if state:  # a checkpoint from before the adaptive bonus holds none
            self.coef = state["coef"]


#: The reading loss's parts are sums over the turns that have a target, so they are averaged over those turns
#: (a multi-token answer is one reading, not one per token); :data:`READING_TARGETS` counts them.
READING_TARGETS = "losses/reading_targets"
PER_READING_TARGET = ("losses/reading_loss", "losses/reading_accuracy")


def average_parts(sums: dict[str, float], steps: int, tokens: float) -> dict[str, float]:
    """The update's metrics from its optimizer steps' summed parts: gradient norms per step, the reading loss's
    parts per turn with a reading target, every other part per response token."""
    targets = sums.get(READING_TARGETS, 0.0)
    metrics = {}
    for key, value in sums.items():
        if key == READING_TARGETS:
            continue
        if key.endswith("grad_norm"):
            metrics[key] = value / max(steps, 1)
        elif key in PER_READING_TARGET:
            metrics[key] = value / max(targets, 1.0)
        else:
            metrics[key] = value / max(tokens, 1.0)
    return metrics


class _Accelerators:
    """The actor's and the critic's accelerators and the collective facts of the launch."""

    def __init__(self, actor: Any, critic: Any) -> None:
        from accelerate.utils import DistributedType

        self.actor, self.critic = actor, critic
        self.deepspeed = actor.distributed_type == DistributedType.DEEPSPEED
        self.world = actor.num_processes
        self.device = actor.device

    def totals(self, tokens: float, micro_batches: int) -> tuple[float, int]:
        """The minibatch's token count over all processes, and how many micro-batches this one runs."""
        if self.world == 1:
            return tokens, micro_batches
        local = torch.tensor([[tokens, float(micro_batches)]], device=self.device, dtype=torch.float64)
        every = self.actor.gather(local).cpu()
        runs = int(every[:, 1].max()) if self.deepspeed else micro_batches
        return float(every[:, 0].sum()), runs

    def all_finite(self, finite: bool) -> bool:
        if self.world == 1:
            return finite
        flag = torch.tensor([0.0 if finite else 1.0], device=self.device)
        return float(self.actor.reduce(flag, reduction="sum").item()) == 0.0

    def set_sync(self, sync: bool) -> None:
        """Whether the next backward ends the minibatch (DeepSpeed's accumulation boundary)."""
        self.actor.sync_gradients = sync  # accelerate's GradientState is shared by every accelerator


def clip_gradients(
    models: Models,
    max_norm: float,
    accelerator: Any,
    critic_accelerator: Any = None,
    train_actor: bool = True,
) -> dict[str, float]:
    """Clip each trained network's gradients to ``max_norm`` once; return their norms before clipping.

    A critic of its own is clipped apart from the actor. A shared critic (a head on the actor's decoder) is one
    network with the actor, as CleanRL's agent: its decoder carries both losses' gradients, so the actor's
    parameters and the head are clipped together, once (clipping the actor and then the critic would scale the
    decoder twice).
    """
    actor, critic = models.actor, models.critic
    if models.shared and critic is not None:
        own = {id(p) for p in actor.parameters()}
        head = [p for p in critic.parameters() if id(p) not in own]
        return {"losses/grad_norm": _norm(accelerator, [*actor.parameters(), *head], max_norm)}
    norms = {}
    if train_actor:
        norms["losses/grad_norm"] = _norm(accelerator, actor.parameters(), max_norm)
    if critic is not None:
        norms["losses/critic_grad_norm"] = _norm(
            critic_accelerator or accelerator, critic.parameters(), max_norm
        )
    return norms


def _norm(accelerator: Any, parameters: Iterable[nn.Parameter], max_norm: float) -> float:
    """Clip and return the gradient norm (under DeepSpeed: the norm DeepSpeed clipped with)."""
    norm = accelerator.clip_grad_norm_(parameters, max_norm)
    return float("nan") if norm is None else float(norm)


def _accumulate(
    minibatch: list[MicroBatch],
    count: float,
    actor: nn.Module,
    critic: nn.Module | None,
    config: PPOConfig,
    accelerators: _Accelerators,
    temperature: float,
    train_actor: bool,
    models: Models,
) -> tuple[dict[str, float], bool]:
    """Backward every micro-batch of one minibatch; return the loss sums and whether every process's losses
    were finite. ``models`` gives the frozen trunk and the reading loss's marker, when there are."""
    total, runs = accelerators.totals(count, len(minibatch))
    scale = accelerators.world / max(total, 1.0)  # the data-parallel mean divides by the world size again
    sums: dict[str, float] = {}
    finite = True
    for i in range(runs):
        real = i < len(minibatch)  # the extra ones repeat the last micro-batch with zero weight
        mb = minibatch[min(i, len(minibatch) - 1)].to(accelerators.device)
        weight = scale if real else 0.0
        last = i == runs - 1
        accelerators.set_sync(last)
        with contextlib.ExitStack() as stack:
            if not last and critic is not None:
                stack.enter_context(accelerators.critic.no_sync(critic))
                if train_actor:
                    stack.enter_context(accelerators.actor.no_sync(actor))
            critic_loss, actor_loss, parts = _losses(
                mb, actor, critic, config, temperature, train_actor, models.trunk, models.reading_marker
            )
            finite = finite and all(bool(torch.isfinite(v)) for v in parts.values())
            if last:
                finite = accelerators.all_finite(finite)
            poison = float("nan") if last and not finite and accelerators.deepspeed else 1.0
            if critic_loss is not None:
                accelerators.critic.backward(critic_loss * (weight * poison * config.value_coef))
            if actor_loss is not None:
                accelerators.actor.backward(actor_loss * (weight * poison))
        if real:
            for key, value in parts.items():
                sums[key] = sums.get(key, 0.0) + float(value.detach())
    accelerators.set_sync(True)
    return sums, finite


def _losses(
    mb: MicroBatch,
    actor: nn.Module,
    critic: nn.Module | None,
    config: PPOConfig,
    temperature: float,
    train_actor: bool,
    trunk: Trunk | None = None,
    marker: tuple[int, ...] = (),
) -> tuple[Tensor | None, Tensor | None, dict[str, Tensor]]:
    """The micro-batch's critic and actor loss token sums (None for a model that is not trained), and the
    parts that become metrics. With a ``trunk`` the actor runs its top layers alone, from the states scoring
    kept (or, past the cache's budget, from the trunk run again here, without gradients), and so does a critic
    that sits on the trunk (``ppo.trunk_critic``). ``marker``: the reading loss's marker word's ids
    (:func:`reading_loss`), when ``ppo.reading_coef`` is on."""
    mask = mb.batch.response_mask
    batch = mb.batch
    if trunk is not None and (train_actor or (critic is not None and trunk.critic_on_trunk)):
        batch = trunk.states(batch)  # kept by scoring, or run here once for the actor's top and the critic
    v_loss, parts = None, {}
    if critic is not None:
        values = values_through(critic, batch, trunk)[:, : batch.response_len]
        v_loss = value_loss(
            values,
            mb.old_values,
            mb.returns,
            mask,
            clip=config.value_clip,
            first_weight=config.first_value_weight,
        )
        parts["losses/value_loss"] = v_loss
    if not train_actor:
        return v_loss, None, parts
    logprobs, entropy, first, first_logits = actor_answers(
        actor if trunk is None else trunk.top, batch, temperature
    )
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
    # Per-turn sums, as every part: the micro-batch's H(mean answer) and I(S; A) weighted by its tokens.
    tokens = mask.sum()
    answer_entropy, information = answer_information(first, mask[:, 0])
    parts.update(
        {
            "losses/policy_loss": pg_loss,
            "losses/entropy": entropy_sum,
            "losses/answer_entropy": answer_entropy * tokens,
            "losses/answer_information": information.detach() * tokens,
            "losses/approx_kl": approx_kl,
            "losses/clipfrac": clip_count,
        }
    )
    bonus = config.entropy_coef * entropy_sum + config.answer_entropy_coef * answer_entropy * tokens
    if not (marker and config.reading_coef > 0):
        return v_loss, pg_loss - bonus, parts
    targets = reading_targets(batch.input_ids, batch.prompt_len, marker)
    allowed = None if batch.allowed is None else batch.allowed[:, 0]
    reading, correct, count = reading_loss(first_logits, targets, mask[:, 0], allowed)
    parts.update({"losses/reading_loss": reading, "losses/reading_accuracy": correct, READING_TARGETS: count})
    return v_loss, pg_loss - bonus + config.reading_coef * reading, parts


def marker_ids(tokenizer: Any, word: str) -> tuple[int, ...]:
    """The token ids ``word`` takes inside a prompt (after a space); a clear error when the vocabulary lacks it."""
    ids = tuple(tokenizer(" " + word.strip(), add_special_tokens=False)["input_ids"])
    unknown = getattr(tokenizer, "unk_token_id", None)
    if not ids or (unknown is not None and unknown in ids):
        raise ValueError(
            f"ppo.reading_after = {word!r} is not in the model's vocabulary: name a word the observations hold"
        )
    return ids


def reading_targets(input_ids: Tensor, prompt_len: int, marker: Sequence[int]) -> Tensor:
    """``[B]``: the prompt token after the last occurrence of ``marker`` in each row's prompt (the first
    ``prompt_len`` columns), or -1 where the prompt has none."""
    rows, width = input_ids.shape[0], len(marker)
    targets = torch.full((rows,), -1, dtype=torch.long, device=input_ids.device)
    if prompt_len <= width:
        return targets
    windows = input_ids[:, : prompt_len - 1].unfold(1, width, 1)  # windows with a token after them
    hits = (windows == torch.as_tensor(marker, device=input_ids.device)).all(-1)  # [B, starts]
    found = hits.any(-1)
    last = hits.shape[1] - 1 - hits.flip(-1).long().argmax(-1)
    following = input_ids.gather(1, (last + width)[:, None]).squeeze(1)
    return torch.where(found, following, targets)


def reading_loss(
    logits: Tensor, targets: Tensor, rows: Tensor, allowed: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Sums over the rows with a target (``rows``: a 0/1 mask ``[B]``) of the cross-entropy of ``logits``
    ``[B, V]`` naming ``targets`` among the tokens ``allowed`` ``[B, V]`` excludes, of the rows named right,
    and the count of such rows. A target the answer itself may use is no target."""
    vocab = logits.shape[-1]
    if allowed is not None:
        allowed = allowed[:, :vocab]
        logits = logits.masked_fill(allowed, -torch.inf)
    safe = targets.clamp(min=0, max=vocab - 1)
    usable = (targets >= 0) & (targets < vocab) & (rows > 0)
    if allowed is not None:
        usable &= ~allowed.gather(1, safe[:, None]).squeeze(1)
    weight = usable.float()
    logits = torch.where(usable[:, None], logits, 0.0)  # a row without a target: finite, so no NaN gradient
    loss = F.cross_entropy(logits, safe, reduction="none") * weight
    correct = (logits.argmax(-1) == safe).float() * weight
    return loss.sum(), correct.sum(), weight.sum()
