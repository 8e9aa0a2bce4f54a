"""The learner's models, ready to train: actor, critic and reference, each with its optimiser and engine.

Under DeepSpeed each model is prepared inside its own plugin (one engine per model); otherwise one accelerator
prepares actor and critic together (DDP), except under FSDP2, whose ``prepare`` shards one model and remaps one
optimiser per call, so each model goes through its own call with its own optimiser. The reference is the actor with its adapters off under LoRA (no
third copy of the weights), a sharded optimiser-less engine under ZeRO-3, or a plain frozen copy. A critic-free
estimator (``algo.advantage`` other than "gae") gets no critic at all: none is loaded, prepared or saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from verlog.config import Config
from verlog.models.loading import AdapterDisabled, LoraSpec, load_actor, load_critic, load_reference

__all__ = ["Models", "adamw", "build_models"]


@dataclass
class Models:
    """What :func:`build_models` returns: prepared models and optimisers."""

    actor: torch.nn.Module
    critic: torch.nn.Module | None
    actor_optimizer: torch.optim.Optimizer
    critic_optimizer: torch.optim.Optimizer | None
    reference: torch.nn.Module | None = None
    reference_engine: torch.nn.Module | None = None


def build_models(dist: Any, config: Config, lora: LoraSpec | None) -> Models:
    """Load and prepare actor, critic and reference; under DeepSpeed each inside its own plugin."""
    model, ppo = config.model, config.ppo
    common = {"dtype": model.dtype, "attn_implementation": model.attn_implementation}
    checkpointing = model.gradient_checkpointing
    with dist.loading("actor"):
        actor = load_actor(
            model.path,
            gradient_checkpointing=checkpointing,
            lora=lora,
            trainable_layers=model.trainable_layers,
            **common,
        )
        actor_optimizer = adamw(actor, ppo.actor_lr, ppo.weight_decay)
        if dist.deepspeed:
            actor, actor_optimizer = dist.actor.prepare(actor, actor_optimizer)
    critic, critic_optimizer = _critic(dist, config, lora) if config.algo.critic else (None, None)
    if not dist.deepspeed:
        if critic is None:
            actor, actor_optimizer = dist.actor.prepare(actor, actor_optimizer)
        elif getattr(dist.actor, "is_fsdp2", False):  # one model per call, else only the last is sharded
            actor, actor_optimizer = dist.actor.prepare(actor, actor_optimizer)
            critic, critic_optimizer = dist.actor.prepare(critic, critic_optimizer)
        else:
            actor, critic, actor_optimizer, critic_optimizer = dist.actor.prepare(
                actor, critic, actor_optimizer, critic_optimizer
            )
    actor.eval()  # DeepSpeed's engine returns None from eval()
    if critic is not None:
        critic.eval()
    models = Models(actor, critic, actor_optimizer, critic_optimizer)
    if ppo.kl_coef <= 0:
        return models
    if lora is not None:  # the base model itself: no third copy of the weights
        models.reference = AdapterDisabled(dist.actor.unwrap_model(actor))
    elif dist.reference is not None:  # ZeRO-3: a sharded, optimiser-less engine
        with dist.loading("reference"):
            models.reference_engine = dist.reference.prepare(load_reference(model.path, **common))
        models.reference = dist.actor.unwrap_model(models.reference_engine)
    else:
        models.reference = load_reference(model.path, **common).to(dist.actor.device)
    return models


def _critic(
    dist: Any, config: Config, lora: LoraSpec | None
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = config.model
    with dist.loading("critic"):
        critic = load_critic(
            model.critic_path or model.path,
            head=model.critic_head,
            gradient_checkpointing=model.gradient_checkpointing,
            lora=lora if model.critic_lora else None,
            layers=model.critic_layers,
            dtype=model.dtype,
            attn_implementation=model.attn_implementation,
        )
        optimizer = adamw(critic, config.ppo.critic_lr, config.ppo.weight_decay)
        if dist.deepspeed:
            critic, optimizer = dist.critic.prepare(critic, optimizer)
    return critic, optimizer


def adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (LoRA leaves the base frozen). A torch optimiser under DeepSpeed
    too: a DeepSpeed-config optimiser would compile a large extension first."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
