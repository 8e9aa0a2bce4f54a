"""Every config value checked before a model loads, a process starts or a run folder is made.

:meth:`verlog.ppo.config.Config.derive` checks the sizes against each other; this module checks the values
against the world: the model folder or hub id, the env id and the keyword arguments the env and its memory
take (by building one env), learning rates, floats that must be finite, and the run folder to resume. Each
problem is a :class:`~verlog.ppo.config.ConfigError` of one line that starts with the key.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from pathlib import Path

from verlog.ppo.config import Config, ConfigError

__all__ = ["validate"]


def validate(config: Config, resume: str | Path | None = None) -> None:
    """Raise :class:`ConfigError` naming the first key whose value cannot work."""
    _check_numbers(config)
    _check_env(config)
    model = config.model
    if not (model.build or model.build_tiny):
        _check_model_path("model.path", model.path)
    if model.critic_path:
        _check_model_path("model.critic_path", model.critic_path)
    if resume is not None:
        from verlog.runkit.manifest import CheckpointError, good_checkpoint

        try:
            good_checkpoint(Path(resume) / "checkpoints", hashes=False)  # sizes only: the trainer hashes
        except CheckpointError as error:
            raise ConfigError(f"--resume {resume}: {error}") from None


def _check_numbers(config: Config) -> None:
    for section in dataclasses.fields(config):
        values = getattr(config, section.name)
        for field in dataclasses.fields(values):
            value = getattr(values, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{section.name}.{field.name} must be a finite number, got {value}")
    for key in ("actor_lr", "critic_lr"):
        value = getattr(config.ppo, key)
        if not value > 0:
            raise ConfigError(f"ppo.{key} must be > 0, got {value}")
    if config.ppo.max_weight_abs < 0 or config.ppo.max_skipped_updates < 0:
        raise ConfigError("ppo.max_weight_abs and ppo.max_skipped_updates must be >= 0 (0 = off)")
    if config.ppo.weight_decay < 0 or config.ppo.max_grad_norm <= 0:
        raise ConfigError(
            "ppo.weight_decay must be >= 0 and ppo.max_grad_norm > 0, "
            f"got {config.ppo.weight_decay} and {config.ppo.max_grad_norm}"
        )


def _check_env(config: Config) -> None:
    """Build one env with its memory, as a sub-env would be: unknown ids, keywords and bad values show here."""
    import gymnasium as gym

    import verlog  # noqa: F401 - registers the verlog ids
    from verlog.memory import MEMORIES
    from verlog.vector import _check_env_kwargs

    env_config = config.env
    if env_config.step_timeout_s < 0 or (
        env_config.step_timeout_s and env_config.vectorization_mode != "async"
    ):
        raise ConfigError(
            f'env.step_timeout_s needs env.vectorization_mode = "async" and a value >= 0, got {env_config.step_timeout_s}'
        )
    try:
        _check_env_kwargs(env_config.id, env_config.kwargs)
    except gym.error.UnregisteredEnv as error:
        raise ConfigError(f"env.id: {error}") from None
    except (TypeError, ImportError, ValueError) as error:
        raise ConfigError(f"env.kwargs: {error}") from None
    memory = MEMORIES[env_config.memory]
    accepted = set(inspect.signature(memory).parameters) - {"env"}
    unknown = sorted(set(env_config.memory_kwargs) - accepted)
    if unknown:
        raise ConfigError(
            f"env.memory_kwargs: memory {env_config.memory!r} does not take {', '.join(unknown)}; "
            f"it takes: {', '.join(sorted(accepted)) or 'nothing'}"
        )
    try:
        env = gym.make(env_config.id, **env_config.kwargs)
    except Exception as error:  # the env's own check of a value
        raise ConfigError(f"env.kwargs: {env_config.id} rejects {env_config.kwargs}: {error}") from None
    try:
        memory(env, **env_config.memory_kwargs).close()
    except Exception as error:
        env.close()
        raise ConfigError(f"env.memory_kwargs: {error}") from None


def _check_model_path(key: str, path: str) -> None:
    """A local folder with a config.json, a .gguf file, or something that can be a Hugging Face hub id."""
    local = Path(path).expanduser()
    if path.endswith(".gguf"):
        if not local.is_file():
            raise ConfigError(f"{key}: no such .gguf file {path}")
        return
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ConfigError(
                f"{key}: {path} is a folder without config.json (not a Hugging Face model folder)"
            )
        return
    if local.exists():
        raise ConfigError(f"{key}: {path} is a file, not a model folder, a .gguf file or a hub id")
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(path)
    except HFValidationError:
        raise ConfigError(f"{key}: no such folder {path}") from None
    if path.startswith((".", "/", "~")):
        raise ConfigError(f"{key}: no such folder {path}")
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
    if offline and not isinstance(try_to_load_from_cache(path, "config.json"), str):
        raise ConfigError(
            f"{key}: no folder {path}, and the hub id is not in the cache (HF_HUB_OFFLINE is set)"
        )
