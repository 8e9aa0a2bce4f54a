"""The models (actor, critic, frozen reference) and the one forward path that scores turns.

A micro-batch of turns is packed as a left-padded prompt followed by a right-padded response, with explicit
position ids, so every row's prompt ends in the same column ``P - 1`` and its response fills the last ``R``
columns. The actor's logits are computed only for those columns (``logits_to_keep``); the critic's values
are read at the same columns. Rollout scoring (old and reference log-probs, values) and the PPO update both
go through :func:`collate`, :func:`actor_logprobs` and :func:`critic_values`.

With LoRA (``LoraSpec``) the actor trains adapters only and the reference is the same model with its adapters
switched off (:class:`AdapterDisabled`), so no third copy of the weights is held. :func:`full_weights` reads
a model back as full Hugging Face tensors, adapters merged, gathering ZeRO-3 shards one module at a time: the
checkpoint's HF export and the vLLM weight push both go through it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "AdapterDisabled",
    "Batch",
    "LoraSpec",
    "Models",
    "ValueHeadModel",
    "actor_logprobs",
    "collate",
    "critic_values",
    "export_pretrained",
    "full_weights",
    "load_actor",
    "load_critic",
    "load_models",
    "load_reference",
    "load_tokenizer",
    "weights_checksum",
]

#: Output heads never get adapters (the critic's head trains fully instead).
HEADS = ("lm_head", "score", "classifier")


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
) -> nn.Module:
    """The causal LM to train (with LoRA adapters when ``lora`` is given)."""
    model = _from_pretrained("causal_lm", path, dtype, attn_implementation)
    return _finish(model, gradient_checkpointing, lora, heads=())


def load_critic(
    path: str,
    *,
    head: str = "token_classification",
    dtype: str = "float32",
    attn_implementation: str = "",
    gradient_checkpointing: bool = False,
    lora: LoraSpec | None = None,
) -> nn.Module:
    """The value model: a token-classification model, or a backbone plus a linear head (``value_head``)."""
    if head == "token_classification":
        model = _from_pretrained("token_classification", path, dtype, attn_implementation)
    elif head == "value_head":
        model = ValueHeadModel(_from_pretrained("backbone", path, dtype, attn_implementation))
    else:
        raise ValueError(f"critic_head must be 'token_classification' or 'value_head', got {head!r}")
    return _finish(model, gradient_checkpointing, lora, heads=("score", "classifier"))


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
    return mapping[type(config)].from_pretrained(path, **kwargs)


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
