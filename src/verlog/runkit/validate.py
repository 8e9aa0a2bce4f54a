"""Every check of a config, in one place, before a model loads, a process starts or a run folder is made.

:func:`validate` reports *every* problem of a config in one :class:`ConfigProblems` (a ``ConfigError``), each
on its own line that starts with the key and, where one override fixes it, says which: a user who switches the
estimator or the env sees all that must change at once, not one error per try. The checks look at the values against each other
(sizes, ranges, the estimator's needs), then against the world: the env id and the keyword arguments the env
and its memory take (one env is built and reset: GiGPO's anchor observation shows there), the model folder or
hub id, and the run folder to resume. :meth:`verlog.config.Config.derive` only computes sizes.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from verlog.config import ESTIMATOR_NAMES, Config, ConfigError
from verlog.envs import prompt_examples

__all__ = ["ConfigError", "ConfigProblems", "anchor_problem", "problems", "validate"]


class ConfigProblems(ConfigError):
    """Every problem of a config: one line when there is one, else a count and one line per problem."""

    def __init__(self, found: list[str]) -> None:
        self.problems = found
        listed = "\n".join(f"  - {line}" for line in found)
        super().__init__(found[0] if len(found) == 1 else f"{len(found)} problems:\n{listed}")


def validate(config: Config, resume: str | Path | None = None) -> None:
    """Raise :class:`ConfigProblems` listing every value that cannot work (one line each), or return."""
    found = problems(config, resume)
    if found:
        raise ConfigProblems(found)


def problems(config: Config, resume: str | Path | None = None) -> list[str]:
    """Every problem of ``config`` as one line naming its key, in the order of the sections."""
    found = [*_numbers(config), *_sizes(config), *_model(config), *_sampling(config), *_algo(config)]
    found += [*_trackers(config), *_env(config), *_curriculum(config), *_watchdog(config), *_panel(config)]
    model = config.model
    if not (model.build or model.build_tiny) and model.path:
        found += _model_path("model.path", model.path)
    if model.critic_path:
        found += _model_path("model.critic_path", model.critic_path)
    if resume is not None:
        from verlog.runkit.folder import checkpoint_dir
        from verlog.runkit.manifest import CheckpointError, good_checkpoint

        try:
            newest, _ = good_checkpoint(
                checkpoint_dir(resume), hashes=False
            )  # sizes only: the trainer hashes
        except CheckpointError as error:
            found.append(f"--resume {resume}: {error}")
        else:
            found += _finished(resume, int(newest.name), config.run.total_updates)
    return found


def _finished(resume: str | Path, update: int, total: int) -> list[str]:
    """A run resumed at its last update would stop at once: say how to give it more updates."""
    if not 0 < total <= update:
        return []
    from verlog.runkit.launch import resume_command  # this process's own launch: its launcher's flags

    return [
        f"--resume {resume}: the run is finished ({update} of run.total_updates = {total} updates); to "
        f"extend it: {resume_command(resume)} run.total_updates={update + total}"
    ]


# ----------------------------------------------------------------------------------------- the values
def _numbers(config: Config) -> Iterator[str]:
    for section in dataclasses.fields(config):
        values = getattr(config, section.name)
        for field in dataclasses.fields(values):
            value = getattr(values, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                yield f"{section.name}.{field.name} must be a finite number, got {value}"
    ppo, run = config.ppo, config.run
    for key in ("actor_lr", "critic_lr", "entropy_target_rate"):
        value = getattr(ppo, key)
        if math.isfinite(value) and not value > 0:
            yield f"ppo.{key} must be > 0, got {value}"
    if ppo.pad_to_multiple < 1:
        yield f"ppo.pad_to_multiple must be >= 1 (1 pads to the longest prompt), got {ppo.pad_to_multiple}"
    if ppo.value_coef <= 0:
        yield f"ppo.value_coef must be > 0 (the value loss's weight), got {ppo.value_coef}"
    if ppo.answer_entropy_coef < 0:
        yield f"ppo.answer_entropy_coef must be >= 0 (0 = no bonus on the mean answer's entropy), got {ppo.answer_entropy_coef}"
    if ppo.reading_coef < 0:
        yield f"ppo.reading_coef must be >= 0 (0 = no reading loss), got {ppo.reading_coef}"
    if ppo.reading_coef > 0 and not (ppo.reading_after.strip() and config.sampling.constrain == "actions"):
        yield 'ppo.reading_coef > 0 needs ppo.reading_after (the prompt word whose next token is the target; Crafter: "face") and sampling.constrain = "actions" (the target is a word the answer may not use; free answers would learn to say it): set both, or ppo.reading_coef=0'
    if min(ppo.entropy_anneal_updates, ppo.entropy_coef_final, ppo.entropy_target) < 0:
        yield f"ppo.entropy_anneal_updates, ppo.entropy_coef_final and ppo.entropy_target must be >= 0 (0 = off), got {ppo.entropy_anneal_updates}, {ppo.entropy_coef_final} and {ppo.entropy_target}"
    if ppo.entropy_target > 0 and (ppo.entropy_coef <= 0 or ppo.entropy_anneal_updates > 0):
        yield f"ppo.entropy_target adapts the bonus from ppo.entropy_coef: it needs ppo.entropy_coef > 0 (where it starts) and no schedule beside it (ppo.entropy_anneal_updates=0), got {ppo.entropy_coef} and {ppo.entropy_anneal_updates}"
    milestones = ppo.actor_lr_milestones
    if any(m < 1 for m in milestones) or list(milestones) != sorted(set(milestones)):
        yield f"ppo.actor_lr_milestones must be increasing update numbers >= 1, got {list(milestones)}"
    if not 0.0 < ppo.actor_lr_gamma <= 1.0:
        yield f"ppo.actor_lr_gamma must be in (0, 1], got {ppo.actor_lr_gamma}"
    if ppo.max_weight_abs < 0 or ppo.max_skipped_updates < 0:
        yield "ppo.max_weight_abs and ppo.max_skipped_updates must be >= 0 (0 = off)"
    if ppo.weight_decay < 0 or ppo.max_grad_norm <= 0:
        yield f"ppo.weight_decay must be >= 0 and ppo.max_grad_norm > 0, got {ppo.weight_decay} and {ppo.max_grad_norm}"
    for key in ("turn_gamma", "turn_lam", "token_gamma", "token_lam"):
        if not 0.0 <= getattr(ppo, key) <= 1.0:
            yield f"ppo.{key} must be in [0, 1], got {getattr(ppo, key)}"
    if ppo.critic_lam > 1.0:
        yield f"ppo.critic_lam must be in [0, 1] (or negative: ppo.turn_lam's), got {ppo.critic_lam}"
    if ppo.dual_clip and ppo.dual_clip <= 1.0:
        yield f"ppo.dual_clip must be > 1 (or 0 for off), got {ppo.dual_clip}"
    if math.isfinite(run.max_minutes) and run.max_minutes < 0:
        yield f"run.max_minutes must be >= 0 (0 = no limit), got {run.max_minutes}"
    if run.total_turns < 0:
        yield f"run.total_turns must be >= 0 (0 = no limit), got {run.total_turns}"
    if min(run.total_updates, run.checkpoint_every, ppo.kl_coef, ppo.critic_warmup_batches) < 0:
        yield "run.total_updates, run.checkpoint_every, ppo.kl_coef and ppo.critic_warmup_* must be >= 0"
    if min(run.samples_every, run.samples_per_family) < 0:
        yield "run.samples_every and run.samples_per_family must be >= 0"


def _sizes(config: Config) -> Iterator[str]:
    run, env, ppo, prompt = config.run, config.env, config.ppo, config.prompt
    positive = {
        "env.num_envs": env.num_envs,
        "ppo.turns_per_update": ppo.turns_per_update,
        "ppo.num_minibatches": ppo.num_minibatches,
        "ppo.epochs": ppo.epochs,
        "ppo.micro_batch_tokens": ppo.micro_batch_tokens,
        "prompt.max_prompt_tokens": prompt.max_prompt_tokens,
        "prompt.max_response_tokens": prompt.max_response_tokens,
        "run.keep_checkpoints": run.keep_checkpoints,
        "run.collective_timeout": run.collective_timeout,
        "sampling.temperature": config.sampling.temperature,
    }
    bad = [key for key, value in positive.items() if not value > 0]
    yield from (f"{key} must be > 0, got {positive[key]}" for key in bad)
    try:  # its own checks: a count below 0, more than the game offers
        prompt_examples(env.id, prompt.examples)
    except ValueError as error:
        yield str(error)
    if bad or not config.algo.critic:  # the turn batch below is PPO's; a critic-free batch is whole episodes
        return
    batch = ppo.turns_per_update * env.num_envs
    if batch % ppo.num_minibatches:
        fits = [n for n in range(ppo.num_minibatches, 0, -1) if batch % n == 0][0]
        yield (
            f"the batch of ppo.turns_per_update * env.num_envs = {ppo.turns_per_update} * {env.num_envs} = {batch} "
            f"turns does not divide into ppo.num_minibatches = {ppo.num_minibatches} (fix: ppo.num_minibatches={fits})"
        )
    if (ppo.critic_warmup_batches > 0) != (ppo.critic_warmup_iters > 0):
        yield (
            "critic pre-training needs both ppo.critic_warmup_batches and ppo.critic_warmup_iters > 0 "
            f"(got {ppo.critic_warmup_batches} and {ppo.critic_warmup_iters}); set both to 0 to turn it off"
        )
    if ppo.critic_warmup_batches and ppo.critic_warmup_sample <= 0:
        yield f"ppo.critic_warmup_sample must be > 0, got {ppo.critic_warmup_sample}"


def _model(config: Config) -> Iterator[str]:
    from verlog.models.sources import BUILDS

    model = config.model
    if model.build and model.build not in BUILDS:
        yield f"model.build must be one of {['', *BUILDS]}, got {model.build!r}"
    if not model.path and model.build in ("", "tiny") and not model.build_tiny:
        yield (
            "model.path is required (a local folder, a .gguf file or a Hugging Face id), "
            f"or model.build = one of {list(BUILDS)}"
        )
    if model.lora_r < 0 or (model.lora_r and model.lora_alpha <= 0):
        yield "model.lora_r must be >= 0 and model.lora_alpha > 0"
    if model.critic_lora and not model.lora_r:
        yield "model.critic_lora needs model.lora_r > 0"
    for key in ("trainable_layers", "critic_layers"):
        if getattr(model, key) < 0:
            yield f"model.{key} must be >= 0 (0 = all layers), got {getattr(model, key)}"
    if model.trainable_layers and model.lora_r:
        yield "model.trainable_layers and model.lora_r are alternatives: set one of them to 0"
    if config.ppo.trunk_cache and not model.trainable_layers:
        yield (
            "ppo.trunk_cache runs the frozen layers below the trained ones once: it needs model.trainable_layers "
            "> 0 (e.g. model.trainable_layers=8), or set ppo.trunk_cache=false"
        )
    if config.ppo.trunk_critic:
        yield from _trunk_critic(config)
    if model.critic_shares_actor:
        yield from _shared_critic(config)
    if config.ppo.trunk_cache_mib < 0:
        yield f"ppo.trunk_cache_mib must be >= 0 (0 = keep nothing, run the trunk again in the update), got {config.ppo.trunk_cache_mib}"
    if model.build_tiny or model.build == "tiny":
        yield from _tiny_size(model)


def _trunk_critic(config: Config) -> Iterator[str]:
    """ppo.trunk_critic: a critic on the actor's trunk is the checkpoint's layers above it."""
    model = config.model
    if not config.ppo.trunk_cache:
        yield "ppo.trunk_critic reads the states the trunk cache computes: set ppo.trunk_cache=true as well"
    if not config.algo.critic:
        yield f"ppo.trunk_critic needs a critic, and algo.advantage = {config.algo.advantage!r} has none"
    if model.critic_path and model.critic_path != model.path:
        yield (
            "ppo.trunk_critic builds the critic from the layers above the actor's trunk, so from the actor's "
            f"checkpoint: leave model.critic_path empty (got {model.critic_path!r})"
        )
    if model.trainable_layers and model.critic_layers > model.trainable_layers:
        yield (
            f"ppo.trunk_critic takes model.critic_layers={model.critic_layers} layers from above the trunk, which "
            f"has {model.trainable_layers} (model.trainable_layers): set model.critic_layers <= that, or 0 for all"
        )


def _shared_critic(config: Config) -> Iterator[str]:
    """model.critic_shares_actor: a head on the actor's decoder, which nothing else may cut, wrap or replace."""
    model = config.model
    if not config.algo.critic:
        yield f"model.critic_shares_actor needs a critic, and algo.advantage = {config.algo.advantage!r} has none"
    clashes = {
        "model.critic_path": bool(model.critic_path and model.critic_path != model.path),
        "model.critic_layers": model.critic_layers > 0,
        "model.lora_r": model.lora_r > 0,
        "ppo.trunk_cache": config.ppo.trunk_cache,
    }
    for key, clash in clashes.items():
        if clash:
            yield (
                f"model.critic_shares_actor puts the value head on the actor's own decoder, which {key} would "
                f"change: leave {key} at its default, or set model.critic_shares_actor=false"
            )


#: The tiny model's default (width, layers): a folder found at model.path is used whatever its size, as before
#: the size was a setting (tests and users build their own); another size asked for is checked against it.
TINY_DEFAULT_SIZE = (64, 2)


def _tiny_size(model: Any) -> Iterator[str]:
    """The tiny model's size is buildable, and a folder built before at another size is not reused for a size
    asked for."""
    if model.tiny_hidden_size < 4 or model.tiny_hidden_size % 4 or model.tiny_layers < 1:
        yield (
            "model.tiny_hidden_size must be a positive multiple of 4 (its attention heads) and model.tiny_layers "
            f">= 1, got {model.tiny_hidden_size} and {model.tiny_layers}"
        )
        return
    built_file = Path(model.path) / "config.json"
    asked = (model.tiny_hidden_size, model.tiny_layers) != TINY_DEFAULT_SIZE  # else any folder there is used
    if asked and model.path and built_file.is_file():
        built = json.loads(built_file.read_text())
        size = (built.get("hidden_size"), built.get("num_hidden_layers"))
        if size != (model.tiny_hidden_size, model.tiny_layers):
            yield (
                f"model.path {model.path} holds a tiny model of width {size[0]} and {size[1]} layers, not the "
                f"{model.tiny_hidden_size} and {model.tiny_layers} asked for (fix: a new model.path, e.g. "
                f"model.path={model.path}-{model.tiny_hidden_size}x{model.tiny_layers})"
            )


def _sampling(config: Config) -> Iterator[str]:
    sampling = config.sampling
    if sampling.constrain == "actions":
        from verlog.sampling.constrain import xgrammar_missing

        if missing := xgrammar_missing():
            yield missing
    if not 0.0 < sampling.top_p <= 1.0:
        yield f"sampling.top_p must be in (0, 1], got {sampling.top_p}"
    if not 0.0 < sampling.vllm_gpu_memory_utilization < 1.0:
        yield f"sampling.vllm_gpu_memory_utilization must be in (0, 1), got {sampling.vllm_gpu_memory_utilization}"
    if sampling.vllm_cpu_kvcache_gib < 0:
        yield f"sampling.vllm_cpu_kvcache_gib must be >= 0 (0 = sized to the batch), got {sampling.vllm_cpu_kvcache_gib}"
    if sampling.vllm_sleep_level not in (0, 1, 2):
        yield f"sampling.vllm_sleep_level must be 0, 1 or 2, got {sampling.vllm_sleep_level}"


def _algo(config: Config) -> Iterator[str]:
    """What a critic-free estimator (``algo.advantage`` other than "gae") needs."""
    algo, env, ppo = config.algo, config.env, config.ppo
    if algo.advantage not in ESTIMATOR_NAMES:
        yield f"algo.advantage must be one of {list(ESTIMATOR_NAMES)}, got {algo.advantage!r}"
        return
    if algo.branch_weight != "uniform" and not algo.branch_actions:  # the loader checks the name
        yield f"algo.branch_weight = {algo.branch_weight!r} weighs branches (fix: algo.branch_actions=true)"
    if algo.branch_balance and (algo.branch_balance < 0 or algo.branch_weight != "best"):
        yield f"algo.branch_balance = {algo.branch_balance} weighs best moves (fix: branch_weight=best, power >= 0)"
    if algo.critic:
        if algo.center_actions:
            yield 'algo.center_actions centres group advantages; a critic has none (fix: algo.advantage="gigpo")'
        if algo.branch_actions:
            yield 'algo.branch_actions adds to group advantages; a critic has none (fix: algo.advantage="gigpo")'
        return
    if algo.branch_actions and ppo.reuse_sampler_logprobs:
        yield (
            "algo.branch_actions trains on answers the sampler never gave, so the actor must score their old "
            "log-probs (fix: ppo.reuse_sampler_logprobs=false)"
        )
    name = f"algo.advantage = {algo.advantage!r}"
    if not ppo.whiten_advantages:
        yield f'ppo.whiten_advantages = false is for GAE; {name} scales by algo.norm (fix: algo.norm="mean")'
    if min(algo.group_size, algo.resample_attempts, algo.late_windows) < 0 or algo.max_episode_turns < 1:
        yield (
            "algo.group_size, algo.resample_attempts and algo.late_windows must be >= 0 and algo.max_episode_turns "
            f">= 1, got {algo.group_size}, {algo.resample_attempts}, {algo.late_windows} and {algo.max_episode_turns}"
        )
    elif env.num_envs > 0 and env.num_envs % algo.groups_of(env.num_envs):
        fits = [g for g in range(min(algo.group_size, env.num_envs), 0, -1) if env.num_envs % g == 0][0]
        yield (
            f"env.num_envs = {env.num_envs} does not divide into groups of algo.group_size = {algo.group_size} "
            f"(fix: algo.group_size={fits}, or env.num_envs={algo.group_size * max(1, round(env.num_envs / algo.group_size))})"
        )
    elif algo.advantage == "rloo" and env.num_envs > 0 and algo.groups_of(env.num_envs) < 2:
        yield f"{name} compares each episode with the others of its group: groups of 1 have none (fix: env.num_envs=2)"
    if algo.advantage == "rloo" and algo.pool != "episode":
        yield f'{name} has one baseline per episode (fix: algo.pool="episode")'
    if 0 < env.num_envs < ppo.num_minibatches:
        yield (
            f"{algo.advantage}: env.num_envs = {env.num_envs} episodes cannot fill ppo.num_minibatches = "
            f"{ppo.num_minibatches} minibatches (fix: ppo.num_minibatches={env.num_envs})"
        )
    if env.vectorization_mode != "sync":
        yield f'{name} steps each group\'s envs itself (fix: env.vectorization_mode="sync")'
    if algo.late_windows and not (algo.branch_actions and algo.groups_of(max(env.num_envs, 1)) == 1):
        yield "algo.late_windows starts each episode's window at a different turn, so only per-state branches compare like with like, not a group's episodes (fix: algo.branch_actions=true algo.group_size=1)"
    if algo.step_weight < 0 or not 0.0 <= algo.step_gamma <= 1.0:
        yield (
            f"algo.step_weight must be >= 0 and algo.step_gamma in [0, 1], got {algo.step_weight} and "
            f"{algo.step_gamma}"
        )


# ----------------------------------------------------------------------------------------- the world
def _trackers(config: Config) -> list[str]:
    """A tracker that is not installed: accelerate would drop it with a warning, and the run log nothing."""
    from verlog.extras import missing

    names = {"comet_ml": "comet_ml", "tensorboard": "tensorboard"}  # tracker name -> the module it imports
    absent = [name for name in config.run.trackers if missing(names.get(name, name))]
    return [f"run.trackers: {name} is not installed (pip install {name})" for name in absent]


def _env(config: Config) -> list[str]:
    """Build one env with its memory, as a sub-env would be: unknown ids, keywords and bad values show here;
    for GiGPO it is reset, to see the anchor observation in its info."""
    import gymnasium as gym

    import verlog  # noqa: F401 - registers the verlog ids
    from verlog.memory import MEMORIES
    from verlog.vector import check_env_kwargs

    env_config, found = config.env, []
    if env_config.step_timeout_s < 0 or (
        env_config.step_timeout_s and env_config.vectorization_mode != "async"
    ):
        found.append(
            f'env.step_timeout_s needs env.vectorization_mode = "async" and a value >= 0, got {env_config.step_timeout_s}'
        )
    try:
        check_env_kwargs(env_config.id, env_config.kwargs)
    except gym.error.UnregisteredEnv as error:
        return [*found, f"env.id: {error}"]
    except (TypeError, ImportError, ValueError) as error:
        return [*found, f"env.kwargs: {error}"]
    memory = MEMORIES[env_config.memory]
    accepted = set(inspect.signature(memory).parameters) - {"env"}
    unknown = sorted(set(env_config.memory_kwargs) - accepted)
    if unknown:
        return [
            *found,
            f"env.memory_kwargs: memory {env_config.memory!r} does not take {', '.join(unknown)}; "
            f"it takes: {', '.join(sorted(accepted)) or 'nothing'}",
        ]
    try:
        env = gym.make(env_config.id, **env_config.kwargs)
    except Exception as error:  # the env's own check of a value
        return [*found, f"env.kwargs: {env_config.id} rejects {env_config.kwargs}: {error}"]
    try:
        wrapped = memory(env, **env_config.memory_kwargs)
    except Exception as error:
        env.close()
        return [*found, f"env.memory_kwargs: {error}"]
    try:
        if config.algo.advantage == "gigpo":
            problem = anchor_problem(wrapped, env_config.memory)
            found += [problem] if problem else []
    finally:
        wrapped.close()
    return found


def _curriculum(config: Config) -> list[str]:
    """Every stage's keyword arguments, as the env would take them (one env is built per stage)."""
    import gymnasium as gym

    from verlog.vector import check_env_kwargs

    curriculum, env = config.curriculum, config.env
    found = []
    if not 0.0 < curriculum.threshold <= 1.0 or curriculum.window < 1:
        found.append(
            f"curriculum.threshold must be in (0, 1] and curriculum.window >= 1, got {curriculum.threshold} "
            f"and {curriculum.window}"
        )
    for k, stage in enumerate(curriculum.stages):
        kwargs = {**env.kwargs, **stage}
        try:
            check_env_kwargs(env.id, kwargs)
            gym.make(env.id, **kwargs).close()
        except gym.error.UnregisteredEnv:
            return found  # said once, under env.id
        except Exception as error:  # the env's own check of a value
            found.append(f"curriculum.stages[{k}]: {env.id} rejects {stage}: {' '.join(str(error).split())}")
    return found


def _watchdog(config: Config) -> Iterator[str]:
    w = config.watchdog
    if min(w.invalid_rise, w.entropy_nats, w.eval_drop_se) <= 0 or not 0.0 < w.capped_share <= 1.0:
        yield "watchdog.invalid_rise, entropy_nats and eval_drop_se must be > 0 and watchdog.capped_share in (0, 1]"
    if not 0.0 < w.lr_factor < 1.0 or w.max_rollbacks < 0:
        yield f"watchdog.lr_factor must be in (0, 1) and watchdog.max_rollbacks >= 0, got {w.lr_factor} and {w.max_rollbacks}"
    if w.reference_updates < 1:
        yield f"watchdog.reference_updates must be >= 1 (1 = the last healthy update alone), got {w.reference_updates}"


def _panel(config: Config) -> list[str]:
    """The panel's size, and its env as the panel builds it (another id or other keyword arguments)."""
    import gymnasium as gym

    from verlog.vector import check_env_kwargs

    run, panel = config.run, config.panel
    found = []
    if run.eval_every < 0 or panel.episodes < 1 or panel.num_envs < 0:
        found.append(
            f"run.eval_every must be >= 0, panel.episodes >= 1 and panel.num_envs >= 0, got {run.eval_every}, "
            f"{panel.episodes} and {panel.num_envs}"
        )
    if run.eval_every and (panel.env_id or panel.env_kwargs):
        env_id, kwargs = panel.env_id or config.env.id, {**config.env.kwargs, **panel.env_kwargs}
        try:
            check_env_kwargs(env_id, kwargs)
            gym.make(env_id, **kwargs).close()
        except Exception as error:
            found.append(f"panel: {env_id} with {kwargs} cannot be made: {' '.join(str(error).split())}")
    return found


def anchor_problem(env: object, memory: object) -> str | None:
    """GiGPO groups turns by the env's state: a reset ``env`` (in its memory) must report it in its info, as
    ``info["state_text"]`` (every verlog env) or the memory's ``info["raw_observation"]`` (every built-in one)."""
    from verlog.envs.base import STATE_KEY
    from verlog.memory import RAW_KEY

    _, info = env.reset(seed=0)  # type: ignore[attr-defined]
    if STATE_KEY in info or RAW_KEY in info:
        return None
    return (
        f"algo.advantage = 'gigpo' groups turns by the env's state, but the memory "
        f"{getattr(memory, '__name__', memory)!r} does not report it in info[{STATE_KEY!r}] or info[{RAW_KEY!r}]"
    )


def _model_path(key: str, path: str) -> list[str]:
    """A local folder with a config.json, a .gguf file, or something that can be a Hugging Face hub id."""
    local = Path(path).expanduser()
    if path.endswith(".gguf"):
        return [] if local.is_file() else [f"{key}: no such .gguf file {path}"]
    if local.is_dir():
        if not (local / "config.json").is_file():
            return [f"{key}: {path} is a folder without config.json (not a Hugging Face model folder)"]
        return []
    if local.exists():
        return [f"{key}: {path} is a file, not a model folder, a .gguf file or a hub id"]
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(path)
    except HFValidationError:
        return [f"{key}: no such folder {path}"]
    if path.startswith((".", "/", "~")):
        return [f"{key}: no such folder {path}"]
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
    if offline and not isinstance(try_to_load_from_cache(path, "config.json"), str):
        return [f"{key}: no folder {path}, and the hub id is not in the cache (HF_HUB_OFFLINE is set)"]
    return []
