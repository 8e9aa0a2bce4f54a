"""The reading loss (``ppo.reading_coef``): an auxiliary target at the answer's position that names what the
prompt says after a marker word (Crafter: the word after "face", what the player faces).

Why: a small model trained from scratch by the policy gradient alone can answer with one fixed mix of actions
whatever it reads (``losses/answer_information`` = 0): the answer's position grows one constant vector, which is
the quickest way to move the mix, and the final norm then drowns the little the position read. The reading
target is there every turn, whatever the reward, and is only met by an answer state that carries the
observation, which the policy gradient can then use.

The target goes through the language-model head at the answer's position over the tokens the answer may NOT
use (under ``sampling.constrain = "actions"``): the answer's distribution is renormalised over the allowed
tokens, so the reading leaves it to the policy loss and only shapes the state both read from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["marker_ids", "reading_loss", "reading_targets"]


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
    return (loss * weight).sum(), correct.sum(), weight.sum()
