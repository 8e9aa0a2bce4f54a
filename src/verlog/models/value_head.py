"""A scalar value head on any causal LM's backbone: the critic for architectures without a token-classification class."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

__all__ = ["ValueHeadModel"]


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
