"""Forward passes: the one path that scores turns with the actor, the critic and the frozen reference.

A micro-batch of turns is packed as a left-padded prompt followed by a right-padded response, with explicit
position ids, so every row's prompt ends in the same column ``P - 1`` and its response fills the last ``R``
columns. The actor's logits are computed only for those columns (``logits_to_keep``); the critic's values
are read at the same columns. Rollout scoring (old and reference log-probs, values) and the PPO update both
go through :func:`collate`, :func:`actor_logprobs` and :func:`critic_values`.

Where the models come from and how they are loaded is :mod:`verlog.models`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = ["Batch", "actor_logprobs", "collate", "critic_values"]


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
