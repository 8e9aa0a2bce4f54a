"""Model FLOPs of the PPO update and its model FLOP utilisation (MFU), for ``benchmarks/speed/gpu_check.py``.

The update's FLOPs are counted from the matrix products the models run on the tokens they actually see:

* every ``nn.Linear`` of a model except its output head, on each real (unpadded) token of a training forward:
  2 FLOPs per weight forward, 2 backward for the activations' gradient, 2 more for the weight's gradient when
  the weight trains (so 6 x params x tokens for full fine-tuning, about 4 x under LoRA, where only the small
  adapters get weight gradients);
* the output head (``lm_head``) on the columns the learner asks logits for (``logits_to_keep``: the response).

Attention's own score and value products are left out, as in the usual 6ND count. The tokens are counted by a
forward pre-hook on the prepared model that fires only with gradients on: the update's forwards, not scoring
or generation (both run under ``no_grad``). MFU divides the FLOPs by the update's seconds and the device's peak
dense bf16 rate from :data:`PEAK_BF16_TFLOPS`; a device not in it (every CPU) gets ``None``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["PEAK_BF16_TFLOPS", "TokenCounter", "counting", "peak_tflops", "update_flops"]

#: Peak dense (no sparsity) bf16 tensor-core TFLOP/s from the vendors' data sheets, by a substring of
#: ``torch.cuda.get_device_name``; the first match wins, so the more specific names come first.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM
    ("GH200", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("A10G", 70.0),
    ("L4", 121.0),
    ("RTX 4090", 165.0),
)


def peak_tflops(device_name: str | None) -> float | None:
    """The device's peak dense bf16 TFLOP/s, or None when it is not in the table (a CPU, an unknown GPU)."""
    if not device_name:
        return None
    for key, value in PEAK_BF16_TFLOPS:
        if key in device_name:
            return value
    return None


@dataclass
class LinearParams:
    """A model's matrix-product weights: the body's (all, and those that train) and the output head's."""

    body: int
    body_trainable: int
    head: int
    head_trainable: bool


def linear_params(model: nn.Module) -> LinearParams:
    """Count the weights of every ``nn.Linear`` (LoRA's adapters included), the output head apart."""
    body = body_trainable = head = 0
    head_trainable = False
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        size = module.weight.numel()  # a DTensor (FSDP2) reports its full size
        trains = module.weight.requires_grad
        if name.rsplit(".", 1)[-1] == "lm_head":
            head += size
            head_trainable = head_trainable or trains
        else:
            body += size
            body_trainable += size if trains else 0
    return LinearParams(body, body_trainable, head, head_trainable)


@dataclass
class TokenCounter:
    """Tokens that went through a model's training forwards: real tokens, and rows x logits kept."""

    tokens: int = 0
    head_tokens: int = 0
    handles: list[Any] = field(default_factory=list)

    def hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not torch.is_grad_enabled():  # scoring and generation: not the update
            return
        mask = kwargs.get("attention_mask")
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        real = int(mask.sum()) if mask is not None else ids.numel()
        self.tokens += real
        keep = kwargs.get("logits_to_keep", 0)
        self.head_tokens += ids.shape[0] * int(keep) if keep else real


@contextmanager
def counting(models: dict[str, nn.Module | None]) -> Iterator[dict[str, TokenCounter]]:
    """Count each model's training-forward tokens while the block runs."""
    counters = {name: TokenCounter() for name, model in models.items() if model is not None}
    for name, counter in counters.items():
        model = models[name]
        assert model is not None
        counter.handles.append(model.register_forward_pre_hook(counter.hook, with_kwargs=True))
    try:
        yield counters
    finally:
        for counter in counters.values():
            for handle in counter.handles:
                handle.remove()


def update_flops(params: LinearParams, counter: TokenCounter) -> float:
    """Forward and backward FLOPs of one model's training forwards (see the module docstring)."""
    body = (4 * params.body + 2 * params.body_trainable) * counter.tokens
    head = (4 + (2 if params.head_trainable else 0)) * params.head * counter.head_tokens
    return float(body + head)
