"""Loading the actor, critic and reference through ``from_pretrained``, with LoRA and checks on the tokenizer.

Everything here takes a Hugging Face folder or id; where that folder comes from (a tiny model built locally,
a model shipped in a registry package, a ``.gguf`` file) is :mod:`verlog.models.sources`. Dropout is switched off
everywhere, so a train-mode forward (needed for gradient checkpointing) gives the same numbers as scoring.
With LoRA the reference is the actor with its adapters off (:class:`AdapterDisabled`): no third copy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from verlog.models.value_head import ValueHeadModel

__all__ = [
    "AdapterDisabled",
    "LoraSpec",
    "Models",
    "check_tokenizer_kind",
    "load_actor",
    "load_critic",
    "load_models",
    "load_reference",
    "load_tokenizer",
]

#: Output heads never get adapters (the critic's head trains fully instead).
HEADS = ("lm_head", "score", "classifier")


@dataclass
class LoraSpec:
    """LoRA settings: rank, scaling numerator and the module names to adapt ([] = every linear layer but heads)."""

    r: int
    alpha: float
    target_modules: list[str] = field(default_factory=list)


class AdapterDisabled(nn.Module):
    """The LoRA actor with its adapters switched off: the frozen base model, used as the KL reference.

    The actor is held outside the module tree, so this view owns no parameters of its own.
    """

    def __init__(self, peft_model: nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "peft_model", peft_model)

    def forward(self, **kwargs: Any) -> Any:
        with self.peft_model.disable_adapter():
            return self.peft_model(**kwargs)


@dataclass
class Models:
    tokenizer: Any
    actor: nn.Module
    critic: nn.Module
    reference: nn.Module | None


def load_tokenizer(path: str) -> Any:
    """The actor's tokenizer, with a pad token (EOS when it has none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    check_tokenizer_kind(path, tokenizer)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer at {path} has no EOS token; generation could not stop")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_tokenizer_kind(path: str, tokenizer: Any) -> None:
    """Refuse a tokenizer that is not the one in the folder's ``tokenizer.json``.

    For some model types (``qwen2``, ``phi3``, ...) transformers 5 ignores the saved tokenizer class and
    rebuilds the tokenizer as that model's own class from the vocabulary; a word-level or unigram
    ``tokenizer.json`` then silently becomes a byte-level BPE that drops or splits most of the text.
    """
    file = Path(path) / "tokenizer.json"
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not file.is_file():
        return
    saved = json.loads(file.read_text(encoding="utf-8")).get("model", {}).get("type")
    loaded = type(backend.model).__name__
    if saved is not None and saved != loaded:
        raise ValueError(
            f"AutoTokenizer loaded {path} as a {type(tokenizer).__name__} with a {loaded} model, but its "
            f"tokenizer.json holds a {saved} model: transformers rebuilds the tokenizers of this model type "
            "(see MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS in transformers.models.auto.tokenization_auto); "
            "save the model under another architecture, or the tokenizer in that class's own format"
        )


def load_actor(
    path: str,
    *,
    dtype: str = "float32",
    attn_implementation: str = "",
    gradient_checkpointing: bool = False,
    lora: LoraSpec | None = None,
    trainable_layers: int = 0,
) -> nn.Module:
    """The causal LM to train (with LoRA adapters when ``lora`` is given; only its top
    ``trainable_layers`` decoder layers train when that is > 0)."""
    model = _from_pretrained("causal_lm", path, dtype, attn_implementation)
    if trainable_layers:
        freeze_below(model, trainable_layers)
    return _finish(model, gradient_checkpointing, lora, heads=())


def load_critic(
    path: str,
    *,
    head: str = "token_classification",
    dtype: str = "float32",
    attn_implementation: str = "",
    gradient_checkpointing: bool = False,
    lora: LoraSpec | None = None,
    layers: int = 0,
) -> nn.Module:
    """The value model: a token-classification model, or a backbone plus a linear head (``value_head``);
    with ``layers`` > 0, only the backbone's bottom ``layers`` decoder layers (a shallower, cheaper critic)."""
    if head == "token_classification":
        model = _from_pretrained("token_classification", path, dtype, attn_implementation)
    elif head == "value_head":
        model = ValueHeadModel(_from_pretrained("backbone", path, dtype, attn_implementation))
    else:
        raise ValueError(f"critic_head must be 'token_classification' or 'value_head', got {head!r}")
    if layers:
        keep_bottom_layers(model, layers)
    return _finish(model, gradient_checkpointing, lora, heads=("score", "classifier"))


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The stack of decoder layers of a transformers model (causal LM, token classifier or value head)."""
    base = model.backbone if isinstance(model, ValueHeadModel) else model
    layers = getattr(getattr(base, "base_model", base), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(
            f"{type(base).__name__} has no `layers` stack on its base model: model.trainable_layers and "
            "model.critic_layers work with Llama-style architectures (Llama, Qwen2/3, Mistral, SmolLM2)"
        )
    return layers


def freeze_below(model: nn.Module, trainable: int) -> None:
    """Train only the top ``trainable`` decoder layers (and what follows them: final norm, heads).

    The embeddings and every lower layer are frozen, so the backward pass stops at the lowest trainable
    layer: with 6 of SmolLM2's 30 layers it costs about a fifth of a full one. A tied LM head is the frozen
    embedding matrix and stays frozen with it.
    """
    layers = decoder_layers(model)
    if trainable >= len(layers):
        return
    frozen = list(layers)[: len(layers) - trainable]
    for module in (*frozen, model.get_input_embeddings()):
        module.requires_grad_(False)


def keep_bottom_layers(model: nn.Module, count: int) -> None:
    """Cut the decoder to its bottom ``count`` layers (the config follows, so it saves and reloads as is)."""
    layers = decoder_layers(model)
    if count >= len(layers):
        return
    owner = model.backbone if isinstance(model, ValueHeadModel) else model
    base = getattr(owner, "base_model", owner)
    base.layers = nn.ModuleList(list(layers)[:count])
    config = owner.config.get_text_config()
    config.num_hidden_layers = count
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:count]


def load_reference(path: str, *, dtype: str = "float32", attn_implementation: str = "") -> nn.Module:
    """A frozen copy of the initial actor (without LoRA; with LoRA use :class:`AdapterDisabled`)."""
    model = _from_pretrained("causal_lm", path, dtype, attn_implementation)
    _disable_dropout(model)
    return model.eval().requires_grad_(False)


def load_models(
    path: str,
    *,
    critic_path: str = "",
    critic_head: str = "token_classification",
    dtype: str = "float32",
    attn_implementation: str = "",
    gradient_checkpointing: bool = False,
    with_reference: bool = True,
    lora: LoraSpec | None = None,
    critic_lora: bool = False,
) -> Models:
    """Load tokenizer, actor and critic (and a frozen reference) through ``from_pretrained``.

    Dropout is switched off everywhere, so a train-mode forward (needed for gradient checkpointing)
    gives the same numbers as the scoring forward. With ``lora`` the reference is the actor with its
    adapters off; ``critic_lora`` gives the critic adapters too.
    """
    common = {"dtype": dtype, "attn_implementation": attn_implementation}
    tokenizer = load_tokenizer(path)
    actor = load_actor(path, gradient_checkpointing=gradient_checkpointing, lora=lora, **common)
    critic = load_critic(
        critic_path or path,
        head=critic_head,
        gradient_checkpointing=gradient_checkpointing,
        lora=lora if critic_lora else None,
        **common,
    )
    reference = None
    if with_reference:
        reference = AdapterDisabled(actor) if lora is not None else load_reference(path, **common)
    return Models(tokenizer, actor, critic, reference)


def _from_pretrained(kind: str, path: str, dtype: str, attn_implementation: str) -> nn.Module:
    """``from_pretrained`` through the concrete class, resolved (and so imported) before loading starts:
    under ZeRO-3 loading runs inside ``deepspeed.zero.Init``, where importing model code can fail."""
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto

    mapping = {
        "causal_lm": modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING,
        "token_classification": modeling_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING,
        "backbone": modeling_auto.MODEL_MAPPING,
    }[kind]
    config = AutoConfig.from_pretrained(path)
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype)}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if kind == "token_classification":
        kwargs["num_labels"] = 1
    model, info = mapping[type(config)].from_pretrained(path, output_loading_info=True, **kwargs)
    fresh = sorted(info.get("missing_keys", ()))
    if kind == "token_classification" and fresh:  # expected: a chat model has no value head yet
        # a resumed run loads its checkpoint's head next, and says so
        logging.getLogger("verlog").info(
            f"critic: new value head ({', '.join(fresh)} not in {Path(path).name})"
        )
    return model


def _finish(
    model: nn.Module, gradient_checkpointing: bool, lora: LoraSpec | None, heads: Sequence[str]
) -> nn.Module:
    _disable_dropout(model)
    if gradient_checkpointing:
        _enable_checkpointing(model.backbone if isinstance(model, ValueHeadModel) else model)
    if lora is None:
        return model
    from peft import LoraConfig, get_peft_model

    targets = lora.target_modules or sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] not in HEADS
        }
    )
    saved = [h for h in heads if isinstance(getattr(model, h, None), nn.Module)]
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=0.0,
        target_modules=targets,
        modules_to_save=saved or None,
    )
    return get_peft_model(model, config)


def _enable_checkpointing(model: nn.Module) -> None:
    """Recompute activations in the backward pass, non-reentrant (fine with a frozen LoRA base and DDP)."""
    if hasattr(model, "activation_checkpointing_enable"):  # the name since transformers 5
        model.activation_checkpointing_enable({"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
