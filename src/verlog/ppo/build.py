"""What the learner is built of: its models, ready to train (actor, critic and reference, each with its
optimiser and engine), and the rollout and storage its estimator collects into (:func:`make_batches`).

Under DeepSpeed each model is prepared inside its own plugin (one engine per model); otherwise one accelerator
prepares actor and critic together (DDP), except under FSDP2, whose ``prepare`` shards one model and remaps one
optimiser per call, so each model goes through its own call with its own optimiser. The reference is the actor with its adapters off under LoRA (no
third copy of the weights), a sharded optimiser-less engine under ZeRO-3, or a plain frozen copy; with the frozen
trunk run once (``ppo.trunk_cache``) that copy keeps its top layers alone and runs from the actor's trunk, and so
may the critic (``ppo.trunk_critic``: the checkpoint's layers above the trunk, with its head). With
``model.critic_shares_actor`` the critic is a value head on the actor's own decoder, one network for both losses. A critic-free
estimator (``algo.advantage`` other than "gae") gets no critic at all: none is loaded, prepared or saved.

The batch shape is the estimator's choice too. PPO with a critic collects a fixed T turns from each of N envs
into a :class:`~verlog.ppo.storage.TurnStorage`, episodes running on across updates. The critic-free estimators
play N whole episodes in groups of G into a :class:`~verlog.ppo.storage.GroupStorage`; process ``rank`` plays its
own groups, with seeds disjoint from every other process's.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verlog.config import Config, ModelConfig
from verlog.models.loading import (
    AdapterDisabled,
    LoraSpec,
    decoder_layers,
    load_actor,
    load_critic,
    load_reference,
    load_tokenizer,
)
from verlog.models.prompts import PromptBuilder
from verlog.models.sources import resolve_model_path
from verlog.models.tiny import first_info
from verlog.models.trunk import TopLayers, check_splittable, drop_bottom_layers
from verlog.models.value_head import ValueHeadModel
from verlog.models.weights import full_weights
from verlog.ppo.calibration import BootstrapCalibration
from verlog.ppo.forward import Trunk
from verlog.ppo.group_rollout import Brancher, GroupRollout, branch_width
from verlog.ppo.rollout import Rollout
from verlog.ppo.storage import GroupStorage, TurnStorage
from verlog.ppo.update import marker_ids
from verlog.runkit.distributed import from_main_process
from verlog.sampling import ActionConstraint, Sampler, TransformersSampler, select_backend, valid_actions
from verlog.sampling.constrain import action_constraint

__all__ = ["Learner", "Models", "adamw", "build_models", "load_learner", "lora_spec", "make_batches"]


@dataclass
class Models:
    """What :func:`build_models` returns: prepared models and optimisers, passed whole to scoring
    (:func:`~verlog.ppo.scoring.score_batch`) and the update (:func:`~verlog.ppo.update.ppo_update`)."""

    actor: torch.nn.Module
    critic: torch.nn.Module | None
    actor_optimizer: torch.optim.Optimizer
    critic_optimizer: torch.optim.Optimizer | None
    reference: torch.nn.Module | None = None
    reference_engine: torch.nn.Module | None = None
    #: ``ppo.trunk_cache``: the actor's frozen trunk, run once per turn; the reference then runs from its states.
    trunk: Trunk | None = None
    #: ``model.critic_shares_actor``: the critic is a head on the actor's decoder, whose parameters the actor's
    #: optimiser steps (with both losses' gradients); the critic's optimiser holds the head alone.
    shared: bool = False
    #: ``ppo.reading_coef``: the token ids of ``ppo.reading_after``, the word whose next token the answer's
    #: position is also trained to name (:func:`~verlog.ppo.update.reading_loss`); empty: no reading loss.
    reading_marker: tuple[int, ...] = ()


@dataclass
class Learner:
    """What :func:`load_learner` returns, the trainer's models as one bundle: the tokenizer, the prepared
    models (:class:`Models`), the sampler that generates with the actor and the answer constraint. The trainer
    holds it and passes it, or its :class:`Models`, whole."""

    tokenizer: Any
    models: Models
    sampler: Sampler
    backend: str
    """The sampler's engine ("transformers" or "vllm")."""
    backend_reason: str
    """Why that engine (``sampling.backend`` or what ``auto`` found)."""
    constraint: ActionConstraint | None = None
    """Answers restricted to the valid actions (``sampling.constrain = "actions"``), shared by the sampler and
    the storage's scoring."""


def lora_spec(model: ModelConfig) -> LoraSpec | None:
    """``model.lora_*`` as the loader takes them; None (full fine-tuning) when ``model.lora_r`` is 0."""
    if not model.lora_r:
        return None
    return LoraSpec(model.lora_r, model.lora_alpha, list(model.lora_target_modules))


def load_learner(config: Config, dist: Any, lora: LoraSpec | None) -> Learner:
    """The model folder (built or converted by the main process on first use), the tokenizer, the models
    (:func:`build_models`) and the sampler: vLLM is started before the learner's models fill the GPU."""
    from accelerate.utils import set_seed

    model, accelerator = config.model, dist.actor
    model.path = from_main_process(
        resolve_model_path(model, config.env) if accelerator.is_main_process else ""
    )
    set_seed(config.run.seed)  # fresh weights (value head, LoRA) start equal on every process
    tokenizer = load_tokenizer(model.path)
    constraint = run_constraint(config, tokenizer)  # checked before any weights load
    backend, reason = select_backend(config.sampling.backend, accelerator.device, model.path)
    built: list[Models] = []  # the weights vLLM pulls are the actor's, built next
    vllm = (
        _vllm_sampler(config, tokenizer, dist, lambda: built[0].actor, constraint)
        if backend == "vllm"
        else None
    )
    built.append(build_models(dist, config, lora))
    if config.ppo.reading_coef > 0:
        built[0].reading_marker = marker_ids(tokenizer, config.ppo.reading_after)
    set_seed(config.run.seed + accelerator.process_index)
    sampler: Sampler = vllm or TransformersSampler(
        accelerator.unwrap_model(built[0].actor),
        tokenizer,
        max_new_tokens=config.prompt.max_response_tokens,
        temperature=config.sampling.temperature,
        top_p=config.sampling.top_p,
        batch_size=config.sampling.batch_size,
        synced_gpus=dist.zero3 and dist.num_processes > 1,
        constraint=constraint,
        trunk_layer=0 if built[0].trunk is None else built[0].trunk.start,  # the trunk runs once, in sampling
    )
    return Learner(tokenizer, built[0], sampler, backend, reason, constraint)


def run_constraint(config: Config, tokenizer: Any) -> ActionConstraint | None:
    """The run's answer constraint (None for free answers), checked on the env's first valid actions."""
    if config.sampling.constrain != "actions":
        return None
    constraint = action_constraint(
        tokenizer,
        config.model.path,
        answer_format=config.prompt.format,
        max_tokens=config.prompt.max_response_tokens,
    )
    constraint.check(valid_actions(first_info(config.env.id, config.env.kwargs)), config.env.id)
    return constraint


def _vllm_sampler(
    config: Config,
    tokenizer: Any,
    dist: Any,
    actor: Callable[[], torch.nn.Module],
    constraint: ActionConstraint | None,
) -> Sampler:
    from verlog.sampling.vllm import VLLMSampler, own_cores

    device, state = dist.actor.device, dist.actor.state
    if device.type == "cpu":  # one engine per process: each on its own cores
        own_cores(state.local_process_index, state.num_processes if state.num_processes > 1 else 1)
    weights = lambda: full_weights(dist.actor.unwrap_model(actor()), dist.gathered, buffers=False)  # noqa: E731
    return VLLMSampler.from_config(config, tokenizer, weights, device, state.process_index, constraint)


def build_models(dist: Any, config: Config, lora: LoraSpec | None) -> Models:
    """Load and prepare actor, critic and reference; under DeepSpeed each inside its own plugin."""
    model, ppo = config.model, config.ppo
    common = {"dtype": model.dtype, "attn_implementation": model.attn_implementation}
    if model.critic_shares_actor and (dist.deepspeed or dist.num_processes > 1):
        raise ValueError(
            "model.critic_shares_actor runs one network for both losses on one process (two engines cannot "
            "share parameters): launch one process without DeepSpeed, or set model.critic_shares_actor=false"
        )
    if ppo.trunk_cache and (dist.deepspeed or dist.num_processes > 1):
        raise ValueError(
            "ppo.trunk_cache runs on one process without DeepSpeed (it runs slices of the actor, which a sharded "
            "or data-parallel engine cannot): launch one process, or set ppo.trunk_cache=false"
        )
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
    if config.algo.critic and model.critic_shares_actor:  # a head on the actor's decoder, the head alone new
        critic = ValueHeadModel(actor.get_decoder())
        critic_optimizer = adamw(critic.score, ppo.critic_lr, ppo.weight_decay)
    else:
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
    models = Models(
        actor,
        critic,
        actor_optimizer,
        critic_optimizer,
        shared=critic is not None and model.critic_shares_actor,
    )
    start = 0
    if ppo.trunk_cache:  # the validation refused every setting where the trunk is not frozen or not local
        start = len(decoder_layers(actor)) - model.trainable_layers
        check_splittable(actor, start)
        models.trunk = Trunk(actor, start, critic_on_trunk=ppo.trunk_critic and critic is not None)
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
    if models.trunk is not None:  # the reference's frozen bottom is the actor's own: keep its top alone
        drop_bottom_layers(models.reference, start)
        models.reference = TopLayers(models.reference, 0)
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
            layers=0 if config.ppo.trunk_critic else model.critic_layers,
            dtype=model.dtype,
            attn_implementation=model.attn_implementation,
        )
        if config.ppo.trunk_critic:  # the layers above the actor's frozen trunk, which feeds them its states
            start = len(decoder_layers(critic)) - model.trainable_layers
            drop_bottom_layers(critic, start, keep=model.critic_layers)
        optimizer = adamw(critic, config.ppo.critic_lr, config.ppo.weight_decay)
        if dist.deepspeed:
            critic, optimizer = dist.critic.prepare(critic, optimizer)
    return critic, optimizer


def adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (LoRA leaves the base frozen). A torch optimiser under DeepSpeed
    too: a DeepSpeed-config optimiser would compile a large extension first."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def make_batches(
    config: Config,
    envs: Any,
    sampler: Any,
    prompts: PromptBuilder,
    pad_id: int,
    *,
    rank: int = 0,
    world_size: int = 1,
    any_running: Callable[[bool], bool] | None = None,
) -> tuple[Rollout, TurnStorage]:
    """The rollout and its storage. ``any_running``: an all-reduce "is anything left to play anywhere", when
    generation is collective (every process generates until all are done; critic-free estimators only)."""
    algo, env, prompt = config.algo, config.env, config.prompt
    if algo.critic:
        calibration = BootstrapCalibration(env.num_envs, config.ppo.turn_gamma)
        rollout = Rollout(
            envs, sampler, prompts, binary_reward=env.binary_reward, env_id=env.id, calibration=calibration
        )
        storage = TurnStorage(config.ppo.turns_per_update, env.num_envs, prompt.max_response_tokens, pad_id)
        storage.pad_multiple = config.ppo.pad_to_multiple
        return rollout, storage
    groups = env.num_envs // algo.group_size
    width = branch_width(envs.envs) if algo.branch_actions else 0  # B: branch columns per env
    group_rollout = GroupRollout(
        envs,
        sampler,
        prompts,
        algo=algo,
        seed=config.run.seed + rank * groups,
        stride=groups * world_size,
        any_running=any_running,
        brancher=Brancher(prompts.tokenizer, binary_reward=env.binary_reward) if width else None,
        binary_reward=env.binary_reward,
        env_id=env.id,
    )
    storage = GroupStorage(
        algo.max_episode_turns, env.num_envs, prompt.max_response_tokens, pad_id, branch_width=width
    )
    storage.pad_multiple = config.ppo.pad_to_multiple
    if config.ppo.share_branch_prompts and (config.ppo.trunk_cache or config.ppo.reading_coef > 0):
        raise ValueError(
            "ppo.share_branch_prompts runs each prompt once from its tokens, but ppo.trunk_cache and "
            "ppo.reading_coef read every row's own prompt: set ppo.share_branch_prompts=false or turn those off"
        )
    if width and config.ppo.trunk_cache:
        warnings.warn(
            f"ppo.trunk_cache with algo.branch_actions runs the trunk over each branch's whole prompt (it shares "
            f"none): about {1 + width}x scoring's work. Faster: ppo.trunk_cache=false "
            "ppo.share_branch_prompts=true",
            stacklevel=2,
        )
    storage.share_branch_prompts = config.ppo.share_branch_prompts
    return group_rollout, storage
