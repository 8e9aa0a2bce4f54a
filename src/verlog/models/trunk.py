"""The frozen trunk of a causal LM whose top layers alone train (``model.trainable_layers``), run apart from them.

When only the top ``k`` decoder layers train, everything below them (embeddings and the lower layers) gives the
same hidden states for a turn before and after every optimiser step. :func:`trunk_states` runs that trunk once
and returns the hidden states entering the first trained layer; :class:`TopLayers` runs a model from that layer
up, taking those states as ``inputs_embeds``. The learner (:mod:`verlog.ppo.forward`) keeps the states of each
scored turn and feeds them to the actor's top layers in the update and to the KL reference, whose frozen bottom
is the actor's own and is dropped (:func:`drop_bottom_layers`); with ``ppo.trunk_critic`` the critic reads them
too, its own layers being the checkpoint's from the first trained one up.

Both work by showing a model's forward a slice of its own decoder stack for the length of one call
(:func:`decoder_slice`), so transformers' own mask, rotary and layer code runs unchanged and the gradients reach
the very parameters the optimiser holds. The slice is only sound where every layer is built alike: a model whose
layers alternate attention kinds (sliding-window layers) is refused (:func:`check_splittable`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

from verlog.models.loading import decoder_layers
from verlog.models.value_head import ValueHeadModel

__all__ = [
    "TopLayers",
    "check_splittable",
    "decoder_slice",
    "drop_bottom_layers",
    "top_cache",
    "trunk_states",
]


def _stack_owner(model: nn.Module) -> nn.Module:
    """The module whose ``layers`` attribute is the decoder stack (``LlamaModel`` inside ``LlamaForCausalLM``)."""
    base = model.backbone if isinstance(model, ValueHeadModel) else model
    return getattr(base, "base_model", base)


def check_splittable(model: nn.Module, start: int) -> None:
    """Refuse a split the slice cannot run exactly: no layer stack, a split outside it, or mixed layer kinds."""
    layers = decoder_layers(model)
    if not 0 < start < len(layers):
        raise ValueError(
            f"the frozen trunk ends at decoder layer {start} of {len(layers)}: set model.trainable_layers between "
            f"1 and {len(layers) - 1}, or ppo.trunk_cache = false"
        )
    kinds = getattr(model.config.get_text_config(), "layer_types", None)
    if isinstance(kinds, list) and len(set(kinds)) > 1:
        raise ValueError(
            f"{type(model).__name__} mixes decoder layer kinds ({sorted(set(kinds))}): a slice of its stack would "
            "read another layer's mask; set ppo.trunk_cache = false for this model"
        )


@contextmanager
def decoder_slice(model: nn.Module, start: int, stop: int | None = None) -> Iterator[None]:
    """For the length of the block, ``model``'s decoder stack is its layers ``[start:stop]`` (the same modules)."""
    owner = _stack_owner(model)
    full = owner.layers
    owner.layers = nn.ModuleList(list(full)[start:stop])
    try:
        yield
    finally:
        owner.layers = full


def trunk_states(model: nn.Module, start: int, **inputs: Any) -> Tensor:
    """The hidden states entering decoder layer ``start``: the model run through its embeddings and layers
    ``[0:start]`` only (its head on one position, which is cheap and discarded). ``inputs`` are the forward's."""
    captured: list[Tensor] = []
    last = decoder_layers(model)[start - 1]

    def keep(_module: nn.Module, _args: Any, output: Any) -> None:
        captured.append(output[0] if isinstance(output, tuple) else output)

    hook = last.register_forward_hook(keep)
    try:
        with decoder_slice(model, 0, start):
            model(**inputs, logits_to_keep=1)
    finally:
        hook.remove()
    return captured[-1]


class TopLayers(nn.Module):
    """``model`` from decoder layer ``start`` up: called with ``inputs_embeds`` = the states entering that layer.

    The model is held outside the module tree: this view owns no parameters, and the optimiser, checkpoints
    and the sampler's weight sync keep seeing the model itself."""

    def __init__(self, model: nn.Module, start: int) -> None:
        super().__init__()
        object.__setattr__(self, "model", model)
        self.start = start

    def forward(self, **kwargs: Any) -> Any:
        with decoder_slice(self.model, self.start):
            return self.model(**kwargs)

    def cache(self) -> Any:
        """An empty key/value cache for this view (a prefix run once, continued by every row)."""
        first = decoder_layers(self.model)[self.start]
        return top_cache(
            self.model.config, getattr(getattr(first, "self_attn", None), "layer_idx", self.start)
        )


def top_cache(config: Any, first_layer: int) -> Any:
    """A transformers ``DynamicCache`` for a stack that runs from ``first_layer`` up. The mask code asks the
    cache how many tokens came before from its first full-attention slot (layer 0), which a stack that starts
    higher never fills; this one answers from ``first_layer``'s slot instead."""
    from transformers import DynamicCache

    class TopCache(DynamicCache):
        def get_seq_length(self, layer_idx: int = 0) -> int:
            return super().get_seq_length(max(layer_idx, first_layer))

        def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
            return super().get_mask_sizes(query_length, max(layer_idx, first_layer))

        def get_query_offset(self, layer_idx: int = 0) -> int:
            return super().get_query_offset(max(layer_idx, first_layer))

    return TopCache(config=config)


def drop_bottom_layers(model: nn.Module, count: int, keep: int = 0) -> None:
    """Keep only the decoder layers above the first ``count`` (``keep`` of them; 0 = all): a model whose trunk is
    another model's (the KL reference's frozen copy, a critic reading the actor's trunk). The config keeps its
    layer count, so each kept layer's cache slot stays its own; the model can then only be run through
    :class:`TopLayers` at ``start=0`` from states computed by that other model. Its embeddings are never read
    again and are frozen."""
    owner = _stack_owner(model)
    owner.layers = nn.ModuleList(list(owner.layers)[count : count + keep if keep else None])
    embeddings = owner.get_input_embeddings() if hasattr(owner, "get_input_embeddings") else None
    if embeddings is not None:
        embeddings.requires_grad_(False)
