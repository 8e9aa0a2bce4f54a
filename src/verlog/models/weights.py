"""A model's weights as full Hugging Face tensors: for checkpoints' HF export and the samplers' weight push.

ZeRO-3 shards are gathered one module at a time and LoRA adapters are merged, so what comes out is what a
plain ``from_pretrained`` model of the same architecture holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["export_pretrained", "full_weights", "weights_checksum"]


def full_weights(
    model: nn.Module,
    gathered: Callable[[list[nn.Parameter]], contextlib.AbstractContextManager[Any]] | None = None,
    *,
    buffers: bool = True,
) -> Iterator[tuple[str, Tensor]]:
    """``(name, tensor)`` pairs in Hugging Face naming, LoRA adapters merged into their base weights.

    ``gathered(params)`` makes a module's parameters whole for a moment (ZeRO-3); it runs one module at a
    time, so no process ever holds more than one module in full. Every process must run the iteration to
    the end (the gathers are collective). Tensors are fresh copies on the parameters' device; tied weights
    are yielded once; persistent buffers are included when ``buffers`` (a checkpoint has them, an inference
    engine's weight loader may not know them).
    """
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from peft.utils import ModulesToSaveWrapper

    gather = gathered or (lambda params: contextlib.nullcontext())
    root = model.get_base_model() if isinstance(model, PeftModel) else model
    seen: set[int] = set()

    def walk(prefix: str, module: nn.Module) -> Iterator[tuple[str, Tensor]]:
        if isinstance(module, ModulesToSaveWrapper):
            yield from walk(prefix, module.modules_to_save[module.active_adapters[0]])
            return
        if isinstance(module, LoraLayer):
            base = module.get_base_layer()
            with gather(list(module.parameters())):
                weight = base.weight.detach()
                if not module.merged and not module.disable_adapters:
                    for adapter in module.active_adapters:
                        weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
                yield prefix + "weight", weight.clone()
                if getattr(base, "bias", None) is not None:
                    yield prefix + "bias", base.bias.detach().clone()
            return
        params = [(n, p) for n, p in module.named_parameters(recurse=False) if id(p) not in seen]
        if params:
            with gather([p for _, p in params]):
                for name, param in params:
                    seen.add(id(param))
                    yield prefix + name, param.detach().clone()
        for name, buffer in module.named_buffers(recurse=False) if buffers else ():
            if buffer is not None and name not in module._non_persistent_buffers_set:
                yield prefix + name, buffer.detach().clone()
        for name, child in module.named_children():
            yield from walk(f"{prefix}{name}.", child)

    yield from walk("", root)


def export_pretrained(
    model: nn.Module,
    folder: str | Path,
    *,
    gathered: Callable[[list[nn.Parameter]], contextlib.AbstractContextManager[Any]] | None = None,
    write: bool = True,
) -> None:
    """Save ``model`` as a plain Hugging Face model (adapters merged); every process calls it, ``write`` on one.

    Under ZeRO-3 the weights are gathered one module at a time on every process (``gathered``), and only
    the writing process keeps them, on the CPU.
    """
    from peft import PeftModel

    weights = {name: tensor.cpu() for name, tensor in full_weights(model, gathered) if write}
    if write:
        base = model.get_base_model() if isinstance(model, PeftModel) else model
        base.save_pretrained(folder, state_dict=weights)


def weights_checksum(
    model: nn.Module,
    gathered: Callable[[list[nn.Parameter]], contextlib.AbstractContextManager[Any]] | None = None,
) -> tuple[float, float]:
    """Sum and sum of squares of the full weights as this process sees them.

    Data-parallel replicas that stay in step give every process the same pair; a broken gradient sync shows.
    """
    total = torch.zeros(2, dtype=torch.float64)
    for _, tensor in full_weights(model, gathered):
        values = tensor.detach().double()
        total += torch.stack([values.sum(), (values * values).sum()]).cpu()
    return float(total[0]), float(total[1])
