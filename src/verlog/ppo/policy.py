"""The models (actor, critic, frozen reference) and the one forward path that scores turns.

A micro-batch of turns is packed as a left-padded prompt followed by a right-padded response, with explicit
position ids, so every row's prompt ends in the same column ``P - 1`` and its response fills the last ``R``
columns. The actor's logits are computed only for those columns (``logits_to_keep``); the critic's values
are read at the same columns. Rollout scoring (old and reference log-probs, values) and the PPO update both
go through :func:`collate`, :func:`actor_logprobs` and :func:`critic_values`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "Batch",
    "Models",
    "ValueHeadModel",
    "actor_logprobs",
    "collate",
    "critic_values",
    "load_models",
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
        )


def collate(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int) -> Batch:
    """Pack rows as left-padded prompt + right-padded response; an empty response scores the prompt only."""
    rows = len(prompts)
    p_len = max(len(p) for p in prompts)
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
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return Batch(input_ids, attention_mask, position_ids, response_ids, response_mask, p_len)


def actor_logprobs(
    model: nn.Module, batch: Batch, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[B, R]`` of the response tokens (and the full distribution's entropy) at ``temperature``."""
    r_len = batch.response_len
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=r_len + 1,
        use_cache=False,
    )
    logits = out.logits[:, :r_len].float() / temperature  # column P-1+k predicts response token k
    log_norm = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1) - log_norm
    entropy = None
    if with_entropy:
        entropy = log_norm - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logprobs, entropy


def critic_values(model: nn.Module, batch: Batch) -> Tensor:
    """Values ``[B, R + 1]``: slot k is V before response token k (slot 0 = the prompt's state value)."""
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
    )
    values = out.logits[..., 0] if out.logits.dim() == 3 else out.logits
    return values[:, batch.prompt_len - 1 :].float()


class ValueHeadModel(nn.Module):
    """A causal LM's backbone (``AutoModel``) with a linear scalar head: the critic for any architecture."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        hidden = backbone.config.get_text_config().hidden_size
        self.score = nn.Linear(hidden, 1, dtype=backbone.dtype)
        nn.init.normal_(self.score.weight, std=1.0 / (hidden + 1) ** 0.5)
        nn.init.zeros_(self.score.bias)

    @property
    def config(self) -> Any:
        return self.backbone.config

    def gradient_checkpointing_enable(self, **kwargs: Any) -> None:
        self.backbone.gradient_checkpointing_enable(**kwargs)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor, **kwargs: Any) -> Any:
        from transformers.modeling_outputs import TokenClassifierOutput

        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs
        ).last_hidden_state
        return TokenClassifierOutput(logits=self.score(hidden))


@dataclass
class Models:
    tokenizer: Any
    actor: nn.Module
    critic: nn.Module
    reference: nn.Module | None


def load_models(
    path: str,
    *,
    critic_path: str = "",
    critic_head: str = "token_classification",
    dtype: str = "float32",
    attn_implementation: str = "",
    gradient_checkpointing: bool = False,
    with_reference: bool = True,
) -> Models:
    """Load tokenizer, actor and critic (and a frozen reference) through ``from_pretrained``.

    Dropout is switched off everywhere, so a train-mode forward (needed for gradient checkpointing)
    gives the same numbers as the scoring forward.
    """
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype)}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer at {path} has no EOS token; generation could not stop")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    actor = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    critic_source = critic_path or path
    if critic_head == "token_classification":
        critic = AutoModelForTokenClassification.from_pretrained(critic_source, num_labels=1, **kwargs)
    elif critic_head == "value_head":
        critic = ValueHeadModel(AutoModel.from_pretrained(critic_source, **kwargs))
    else:
        raise ValueError(f"critic_head must be 'token_classification' or 'value_head', got {critic_head!r}")
    reference = None
    if with_reference:
        reference = AutoModelForCausalLM.from_pretrained(path, **kwargs).eval().requires_grad_(False)
    for model in (actor, critic, reference):
        if model is not None:
            _disable_dropout(model)
    if gradient_checkpointing:
        for model in (actor, critic):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return Models(tokenizer, actor, critic, reference)


def _disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
