"""Which advantage estimator the learner uses, and its checks: PPO's critic (GAE) or a critic-free group baseline.

``algo.advantage = "gae"`` is turn-level PPO with a critic (dual-discount GAE over fixed-length batches).
``"grpo"`` and ``"gigpo"`` build no critic: every update resets groups of ``algo.group_size`` envs with one
seed per group, plays each episode whole (up to ``algo.max_episode_turns`` turns) and scores each turn against
its group (:mod:`verlog.ppo.groups`). Everything else (prompts, memory, sampler, PPO clipped loss, KL, LoRA,
ZeRO, checkpoints, logging) is shared. The checks run in :meth:`verlog.ppo.config.Config.derive`, so a bad
setting stops with one line before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from verlog.tomlconfig import ConfigError

if TYPE_CHECKING:
    from verlog.ppo.config import Config

__all__ = ["ESTIMATORS", "AlgoConfig", "check_algo", "check_anchor_observation"]

ESTIMATORS = ("gae", "grpo", "gigpo")


@dataclass
class AlgoConfig:
    advantage: Literal["gae", "grpo", "gigpo"] = "gae"
    """Advantage estimator: "gae" (PPO with a critic), "grpo" (group-normalised episode return, no critic) or "gigpo" (GRPO plus a step term from repeated observations, no critic)."""
    group_size: int = 8
    """grpo/gigpo: envs per group (G); they reset with the same seed each update; must divide env.num_envs."""
    max_episode_turns: int = 32
    """grpo/gigpo: turn cap of an episode; an episode still running there ends truncated (counted)."""
    norm: Literal["mean", "mean_std"] = "mean_std"
    """grpo/gigpo: subtract the group mean ("mean"), or also divide by the group's std + 1e-6 ("mean_std")."""
    step_weight: float = 1.0
    """gigpo: weight w of the step term, A = A_episode + w * A_step (verl-agent's step_advantage_w, 1.0)."""
    step_gamma: float = 0.95
    """gigpo: discount of the return from a turn, compared within a step group (verl-agent's gamma, 0.95)."""

    @property
    def critic(self) -> bool:
        """Whether this estimator needs a critic."""
        return self.advantage == "gae"


def check_algo(config: Config) -> None:
    """Stop with one line on a setting the estimator cannot run with (called by ``Config.derive``)."""
    algo, env = config.algo, config.env
    if algo.advantage not in ESTIMATORS:
        raise ConfigError(f"algo.advantage must be one of {list(ESTIMATORS)}, got {algo.advantage!r}")
    if algo.critic:
        return
    if algo.group_size < 1 or algo.max_episode_turns < 1:
        raise ConfigError(
            f"algo.group_size and algo.max_episode_turns must be >= 1, got {algo.group_size} and "
            f"{algo.max_episode_turns}"
        )
    if env.num_envs % algo.group_size:
        raise ConfigError(
            f"env.num_envs = {env.num_envs} does not divide into groups of algo.group_size = {algo.group_size}"
        )
    if env.num_envs < config.ppo.num_minibatches:
        raise ConfigError(
            f"{algo.advantage}: env.num_envs = {env.num_envs} episodes cannot fill ppo.num_minibatches = "
            f"{config.ppo.num_minibatches} minibatches"
        )
    if config.ppo.critic_warmup_batches or config.ppo.critic_warmup_iters:
        raise ConfigError(f"algo.advantage = {algo.advantage!r} has no critic: set ppo.critic_warmup_* to 0")
    if env.vectorization_mode != "sync":
        raise ConfigError(
            f"algo.advantage = {algo.advantage!r} steps each group's envs itself: set env.vectorization_mode = sync"
        )
    if algo.step_weight < 0 or not 0.0 <= algo.step_gamma <= 1.0:
        raise ConfigError(
            f"algo.step_weight must be >= 0 and algo.step_gamma in [0, 1], got {algo.step_weight} and "
            f"{algo.step_gamma}"
        )
    if algo.advantage == "gigpo":
        check_anchor_observation(config.env.id, env.memory, env.memory_kwargs, env.kwargs)


def check_anchor_observation(env_id: str, memory: object, memory_kwargs: dict, env_kwargs: dict) -> None:
    """GiGPO groups turns by the env's own current observation: one env is made and reset here, and its info
    must carry it (``info["raw_observation"]``, which every built-in memory sets)."""
    import verlog
    from verlog.memory import RAW_KEY

    try:
        envs = verlog.make_vec(env_id, 1, memory=memory, memory_kwargs=memory_kwargs, seed=0, **env_kwargs)
    except Exception as error:  # a bad env id or keyword: say it in one line
        raise ConfigError(f"env: {error}") from None
    try:
        _, infos = envs.reset()
    finally:
        envs.close()
    if RAW_KEY not in infos:
        raise ConfigError(
            f"algo.advantage = 'gigpo' groups turns by the env's current observation, but the memory "
            f"{getattr(memory, '__name__', memory)!r} does not report it in info[{RAW_KEY!r}]"
        )
