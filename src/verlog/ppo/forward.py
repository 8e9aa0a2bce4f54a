"""Forward passes: the one path that scores turns with the actor, the critic and the frozen reference.

A micro-batch of turns is packed as a left-padded prompt followed by a right-padded response, with explicit
position ids, so every row's prompt ends in the same column ``P - 1`` and its response fills the last ``R``
columns. The actor's logits are computed only for those columns (``logits_to_keep``); the critic's values
are read at the same columns. Rollout scoring (old and reference log-probs, values) and the PPO update both
go through :func:`collate`, :func:`actor_logprobs` and :func:`critic_values`.

Rows that repeat one prompt (a played turn and its one-step branches) can be scored with that prompt run once:
:func:`collate_shared` packs the distinct prompts and the answers that continue them, and
:func:`shared_prompt_logprobs` runs the prompts, copies their key/value cache to each answer's row and runs
only the answers on top. Same log-probs, a fraction of the compute when the answers are short.

When only the actor's top layers train and ``ppo.trunk_cache`` is on, :func:`with_trunk_states` runs the frozen
trunk once over a batch (:mod:`verlog.models.trunk`) and the batch carries the states entering the first trained
layer (``Batch.hidden``); a :class:`~verlog.models.trunk.TopLayers` model then runs from them (the actor's top, the
KL reference's and, with ``ppo.trunk_critic``, the critic: :class:`Trunk`).

Where the models come from and how they are loaded is :mod:`verlog.models`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from verlog.models.trunk import TopLayers, trunk_states

__all__ = [
    "Batch",
    "SharedBatch",
    "Trunk",
    "actor_answers",
    "actor_logprobs",
    "answer_information",
    "collate",
    "collate_shared",
    "critic_values",
    "shared_prompt_logits",
    "shared_prompt_logprobs",
    "values_through",
    "with_trunk_states",
]


@dataclass
class Batch:
    """One packed micro-batch: ``[B, P + R]`` model inputs and ``[B, R]`` response ids and mask."""

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    response_ids: Tensor
    response_mask: Tensor  # float, 1 on real response tokens (EOS included)
    prompt_len: int
    #: The leading prompt tokens every row shares, run once for the batch (``ppo.share_prompt_prefix``); the
    #: rows then hold only what follows it. None: every row holds its whole prompt.
    prefix_ids: Tensor | None = None
    #: ``[B, R, V]`` bool: the tokens the answer grammar allowed before each response token
    #: (``sampling.constrain = "actions"``); log-probs and entropy are then over those alone. None: all.
    allowed: Tensor | None = None
    #: ``[B, P + R, H]``: the frozen trunk's states entering the first trained layer, for every column of
    #: ``input_ids`` (``ppo.trunk_cache``); a :class:`~verlog.models.trunk.TopLayers` model runs from them.
    hidden: Tensor | None = None
    #: ``[S, H]``: the trunk's states over ``prefix_ids``, run once like the prefix itself.
    prefix_hidden: Tensor | None = None

    @property
    def response_len(self) -> int:
        return self.response_ids.shape[1]

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.position_ids.to(device),
            self.response_ids.to(device),
            self.response_mask.to(device),
            self.prompt_len,
            None if self.prefix_ids is None else self.prefix_ids.to(device),
            None if self.allowed is None else self.allowed.to(device),
            None if self.hidden is None else self.hidden.to(device),
            None if self.prefix_hidden is None else self.prefix_hidden.to(device),
        )


#: A common prefix shorter than this is not worth a second forward pass.
MIN_SHARED_PREFIX = 16


def collate(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_id: int,
    share_prefix: bool = False,
    pad_multiple: int = 1,
) -> Batch:
    """Pack rows as left-padded prompt + right-padded response; an empty response scores the prompt only.

    ``share_prefix``: the tokens all prompts start with (the instruction, the worked examples) go into
    ``prefix_ids``, run once, and the rows keep the rest (when at least :data:`MIN_SHARED_PREFIX` are shared).
    ``pad_multiple``: the prompt part is padded to a multiple of this many columns, so batches take few shapes."""
    from verlog.sampling.base import shared_prefix_length

    shared = shared_prefix_length(prompts) if share_prefix else 0
    if shared < MIN_SHARED_PREFIX:
        shared = 0
    prefix = torch.as_tensor(list(prompts[0][:shared]), dtype=torch.long) if shared else None
    prompts = [p[shared:] for p in prompts]
    rows = len(prompts)
    p_len = max(len(p) for p in prompts)
    p_len = -(-p_len // pad_multiple) * pad_multiple
    r_len = max((len(r) for r in responses), default=0)
    input_ids = torch.full((rows, p_len + r_len), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, p_len + r_len), dtype=torch.long)
    response_ids = torch.full((rows, r_len), pad_id, dtype=torch.long)
    response_mask = torch.zeros((rows, r_len))
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        input_ids[i, p_len - len(prompt) : p_len] = torch.as_tensor(prompt, dtype=torch.long)
        attention_mask[i, p_len - len(prompt) : p_len + len(response)] = 1
        if response:
            ids = torch.as_tensor(response, dtype=torch.long)
            input_ids[i, p_len : p_len + len(response)] = ids
            response_ids[i, : len(response)] = ids
            response_mask[i, : len(response)] = 1.0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0) + shared
    return Batch(input_ids, attention_mask, position_ids, response_ids, response_mask, p_len, prefix)


def _run(model: nn.Module, batch: Batch, **kwargs: Any) -> Any:
    """The model over the batch; with a shared prefix, the prefix runs once and every row continues its cache
    (a copy per row, through which the gradient of every row flows back into the one prefix pass). A
    :class:`~verlog.models.trunk.TopLayers` model runs from the batch's trunk states instead of its tokens."""
    if isinstance(model, TopLayers):
        return _run_top(model, batch, **kwargs)
    if batch.prefix_ids is None:
        return model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
            **kwargs,
        )
    from transformers import DynamicCache

    rows, shared = batch.input_ids.shape[0], batch.prefix_ids.shape[0]
    cache = DynamicCache(config=model.config)
    prefix = batch.prefix_ids[None]
    model(input_ids=prefix, attention_mask=torch.ones_like(prefix), position_ids=torch.arange(shared, device=prefix.device)[None],
          past_key_values=cache, use_cache=True, **({"logits_to_keep": 1} if "logits_to_keep" in kwargs else {}))  # fmt: skip
    cache.batch_repeat_interleave(rows)
    attention = torch.cat([batch.attention_mask.new_ones(rows, shared), batch.attention_mask], dim=-1)
    return model(
        input_ids=batch.input_ids,
        attention_mask=attention,
        position_ids=batch.position_ids,
        past_key_values=cache,
        use_cache=True,
        **kwargs,
    )


def _run_top(model: TopLayers, batch: Batch, **kwargs: Any) -> Any:
    """:func:`_run` for a model run from the batch's trunk states: the prefix's states, when the rows share
    one, run once and every row continues their cache, as tokens do."""
    if batch.hidden is None:
        raise ValueError("a model run from the trunk's states needs a batch from with_trunk_states()")
    dtype = model.model.dtype
    if batch.prefix_hidden is None:
        return model(inputs_embeds=batch.hidden.to(dtype), attention_mask=batch.attention_mask,
                     position_ids=batch.position_ids, use_cache=False, **kwargs)  # fmt: skip
    rows, shared = batch.hidden.shape[0], batch.prefix_hidden.shape[0]
    cache = model.cache()
    prefix = batch.prefix_hidden[None].to(dtype)
    ones = batch.attention_mask.new_ones(1, shared)
    model(inputs_embeds=prefix, attention_mask=ones, position_ids=torch.arange(shared, device=prefix.device)[None],
          past_key_values=cache, use_cache=True, **({"logits_to_keep": 1} if "logits_to_keep" in kwargs else {}))  # fmt: skip
    cache.batch_repeat_interleave(rows)
    attention = torch.cat([ones.expand(rows, -1), batch.attention_mask], dim=-1)
    return model(inputs_embeds=batch.hidden.to(dtype), attention_mask=attention, position_ids=batch.position_ids,
                 past_key_values=cache, use_cache=True, **kwargs)  # fmt: skip


@torch.no_grad()
def with_trunk_states(model: nn.Module, start: int, batch: Batch) -> Batch:
    """``batch`` with its trunk states (``hidden``): ``model``'s embeddings and decoder layers ``[0:start]`` run
    over it once, without gradients. A shared prefix runs once, and its states are the batch's
    ``prefix_hidden``."""
    if batch.hidden is not None:
        return batch
    if batch.prefix_ids is None:
        hidden = trunk_states(
            model,
            start,
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
        )
        return replace(batch, hidden=hidden)
    from transformers import DynamicCache

    rows, shared = batch.input_ids.shape[0], batch.prefix_ids.shape[0]
    cache = DynamicCache(config=model.config)
    prefix = batch.prefix_ids[None]
    positions = torch.arange(shared, device=prefix.device)[None]
    prefix_states = trunk_states(model, start, input_ids=prefix, attention_mask=torch.ones_like(prefix),
                                 position_ids=positions, past_key_values=cache, use_cache=True)  # fmt: skip
    cache.batch_repeat_interleave(rows)
    attention = torch.cat([batch.attention_mask.new_ones(rows, shared), batch.attention_mask], dim=-1)
    states = trunk_states(model, start, input_ids=batch.input_ids, attention_mask=attention,
                          position_ids=batch.position_ids, past_key_values=cache, use_cache=True)  # fmt: skip
    return replace(batch, hidden=states, prefix_hidden=prefix_states[0])


@dataclass
class Trunk:
    """The actor's frozen trunk (``ppo.trunk_cache``): ``actor`` below decoder layer ``start``, run once per batch;
    ``top`` is the actor from that layer up, the model the update and old log-probs run. ``critic_on_trunk``
    (``ppo.trunk_critic``): the critic's layers sit on the same trunk (:func:`~verlog.models.trunk.
    drop_bottom_layers`) and it runs from the same states; false: the critic reads the tokens itself."""

    actor: nn.Module
    start: int
    critic_on_trunk: bool = False

    def __post_init__(self) -> None:
        self.top = TopLayers(self.actor, self.start)

    def states(self, batch: Batch) -> Batch:
        return with_trunk_states(self.actor, self.start, batch)

    def critic_values(self, critic: nn.Module, batch: Batch) -> Tensor:
        """:func:`critic_values` of ``critic`` over ``batch``, from the trunk's states when the critic sits on the
        trunk."""
        if not self.critic_on_trunk:
            return critic_values(critic, batch)
        return critic_values(TopLayers(critic, 0), self.states(batch))


def values_through(critic: nn.Module, batch: Batch, trunk: Trunk | None) -> Tensor:
    """:func:`critic_values`, read through ``trunk`` when there is one (it knows whether the critic sits on it)."""
    return critic_values(critic, batch) if trunk is None else trunk.critic_values(critic, batch)


def actor_logprobs(
    model: nn.Module, batch: Batch, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[B, R]`` of the response tokens (and the distribution's entropy) at ``temperature``; under a
    constraint (``batch.allowed``) both are of the distribution renormalised over the allowed tokens, which is
    the one the constrained sampler drew from."""
    return _logprobs(
        _response_logits(model, batch, temperature), batch.response_ids, batch.allowed, with_entropy
    )


def actor_answers(
    model: nn.Module, batch: Batch | SharedBatch, temperature: float = 1.0
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`actor_logprobs` with the entropy, the whole distribution ``[B, V]`` of each row's first answer
    token (over the allowed tokens under a constraint): what the policy would answer in each state, for the
    answer's mutual information with the state (:func:`answer_information`), and that position's logits over
    the whole vocabulary (for the reading loss, :func:`~verlog.ppo.update.reading_loss`). A
    :class:`SharedBatch` runs each of its prompts once (``ppo.share_branch_prompts``)."""
    if isinstance(batch, SharedBatch):
        logits = shared_prompt_logits(model, batch, temperature)
    else:
        logits = _response_logits(model, batch, temperature)
    logprobs, entropy = _logprobs(logits, batch.response_ids, batch.allowed, with_entropy=True)
    first = logits[:, 0]
    if batch.allowed is not None:
        first = first.masked_fill(~batch.allowed[:, 0, : first.shape[-1]], -torch.inf)
    assert entropy is not None
    return logprobs, entropy, torch.softmax(first, dim=-1), logits[:, 0]


def answer_information(first: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """The entropy of the mean first-answer distribution over ``rows`` (a 0/1 mask ``[B]``), H(mean), and the
    answer's mutual information with the state, I(S; A) = H(mean) - mean H, in nats. A policy that plays one
    fixed mix of answers whatever it reads has I = 0 however sharp the mix; one that reads the state has I > 0.
    Both carry gradients: a bonus on H(mean) keeps the mix broad without keeping each state's answer random."""
    weights = rows / rows.sum().clamp(min=1.0)
    mean = (first * weights[:, None]).sum(0)
    mean_entropy = -(mean * torch.log(mean.clamp(min=1e-12))).sum()
    each = -(first * torch.log(first.clamp(min=1e-12))).sum(-1)
    return mean_entropy, mean_entropy - (each * weights).sum()


def _response_logits(model: nn.Module, batch: Batch, temperature: float) -> Tensor:
    """Logits ``[B, R, V]`` predicting each response token, at ``temperature``."""
    out = _run(model, batch, logits_to_keep=batch.response_len + 1)
    return out.logits[:, : batch.response_len].float() / temperature  # column P-1+k predicts response token k


def _logprobs(
    logits: Tensor, response_ids: Tensor, allowed: Tensor | None, with_entropy: bool
) -> tuple[Tensor, Tensor | None]:
    """Log-probs of ``response_ids`` under ``logits`` ``[B, R, V]`` restricted to ``allowed`` (None: all)."""
    if allowed is not None:
        allowed = allowed[:, : logits.shape[1], : logits.shape[2]]
        logits = logits.masked_fill(~allowed, -torch.inf)
    log_norm = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1) - log_norm
    entropy = None
    if with_entropy:
        # Disallowed tokens have probability 0; their -inf logit is read as 0 (0 * -inf, and its gradient, NaN).
        finite = logits if allowed is None else logits.masked_fill(~allowed, 0.0)
        entropy = log_norm - (torch.softmax(logits, dim=-1) * finite).sum(-1)
    return logprobs, entropy


def critic_values(model: nn.Module, batch: Batch) -> Tensor:
    """Values ``[B, R + 1]``: slot k is V before response token k (slot 0 = the prompt's state value)."""
    out = _run(model, batch)
    values = out.logits[..., 0] if out.logits.dim() == 3 else out.logits
    return values[:, batch.prompt_len - 1 :].float()


@dataclass
class SharedBatch:
    """Distinct prompts ``[G, P]`` (left-padded) and the answers ``[K, R]`` (right-padded) that continue them:
    answer k continues prompt ``owner[k]``."""

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor  # float, 1 on real response tokens
    owner: Tensor
    allowed: Tensor | None = None  # as :attr:`Batch.allowed`, per answer

    def to(self, device: torch.device | str) -> SharedBatch:
        return SharedBatch(
            *(
                None if getattr(self, n) is None else getattr(self, n).to(device)
                for n in self.__dataclass_fields__
            )
        )


def collate_shared(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], owner: Sequence[int], pad_id: int
) -> SharedBatch:
    """Pack distinct ``prompts`` and the ``responses`` continuing them (``owner[k]`` indexes ``prompts``)."""
    rows, p_len = len(prompts), max(len(p) for p in prompts)
    r_len = max(1, max((len(r) for r in responses), default=1))
    prompt_ids = torch.full((rows, p_len), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((rows, p_len), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        prompt_ids[i, p_len - len(prompt) :] = torch.as_tensor(prompt, dtype=torch.long)
        prompt_mask[i, p_len - len(prompt) :] = 1
    response_ids = torch.full((len(responses), r_len), pad_id, dtype=torch.long)
    response_mask = torch.zeros((len(responses), r_len))
    for k, response in enumerate(responses):
        response_ids[k, : len(response)] = torch.as_tensor(response, dtype=torch.long)
        response_mask[k, : len(response)] = 1.0
    return SharedBatch(
        prompt_ids, prompt_mask, response_ids, response_mask, torch.as_tensor(owner, dtype=torch.long)
    )


def shared_prompt_logits(model: nn.Module, batch: SharedBatch, temperature: float = 1.0) -> Tensor:
    """Logits ``[K, R, V]`` predicting each answer's tokens, equal to those of its own row of a plain batch (up
    to float rounding): the prompts run once, their cache is copied to each answer's row (the copy carries the
    gradient of every answer back into its prompt's one pass), the answers run on top. Two forward passes
    whatever the answers' lengths (a one-token answer feeds one ignored token)."""
    owner, r_len = batch.owner, batch.response_ids.shape[1]
    out = model(
        input_ids=batch.prompt_ids,
        attention_mask=batch.prompt_mask,
        position_ids=(batch.prompt_mask.cumsum(-1) - 1).clamp(min=0),
        logits_to_keep=1,
        use_cache=True,
    )
    cache = out.past_key_values
    cache.batch_select_indices(owner)  # every answer's row gets its prompt's keys and values
    fed = batch.response_ids[:, : max(1, r_len - 1)]  # the last answer token predicts nothing needed
    lengths = batch.prompt_mask.sum(-1)[owner]
    attention = torch.cat([batch.prompt_mask[owner], torch.ones_like(fed)], dim=-1)
    rest = model(
        input_ids=fed,
        attention_mask=attention,
        position_ids=lengths[:, None] + torch.arange(fed.shape[1], device=fed.device)[None],
        past_key_values=cache,
        use_cache=True,
    )
    return torch.cat([out.logits[owner, -1:], rest.logits[:, : r_len - 1]], dim=1).float() / temperature


def shared_prompt_logprobs(model: nn.Module, batch: SharedBatch, temperature: float = 1.0) -> Tensor:
    """Log-probs ``[K, R]`` of each answer, equal to :func:`actor_logprobs` on its own row (up to float
    rounding), from :func:`shared_prompt_logits`."""
    logits = shared_prompt_logits(model, batch, temperature)
    logprobs, _ = _logprobs(logits, batch.response_ids, batch.allowed, with_entropy=False)
    return logprobs * batch.response_mask
