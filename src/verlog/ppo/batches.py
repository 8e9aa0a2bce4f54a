"""Which rollout and storage a config gets: the batch shape is the estimator's choice.

PPO with a critic (``algo.advantage = "gae"``) collects a fixed T turns from each of N envs into a
:class:`~verlog.ppo.storage.TurnStorage`, episodes running on across updates. The critic-free estimators play N
whole episodes in groups of G into a :class:`~verlog.ppo.storage.GroupStorage`; process ``rank`` plays its own
groups, with seeds disjoint from every other process's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verlog.config import Config
from verlog.models.prompts import PromptBuilder
from verlog.ppo.branching import Brancher, branch_width
from verlog.ppo.group_rollout import GroupRollout
from verlog.ppo.rollout import Rollout
from verlog.ppo.storage import GroupStorage, TurnStorage

__all__ = ["make_batches"]


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
        rollout = Rollout(envs, sampler, prompts, binary_reward=env.binary_reward, env_id=env.id)
        storage = TurnStorage(config.ppo.turns_per_update, env.num_envs, prompt.max_response_tokens, pad_id)
        return rollout, storage
    groups = env.num_envs // algo.group_size
    width = branch_width(envs.envs) if algo.branch_actions else 0  # B: branch columns per env
    brancher = (
        Brancher(prompts.tokenizer, env.num_envs, width, binary_reward=env.binary_reward) if width else None
    )
    group_rollout = GroupRollout(
        envs,
        sampler,
        prompts,
        algo=algo,
        seed=config.run.seed + rank * groups,
        stride=groups * world_size,
        any_running=any_running,
        brancher=brancher,
        binary_reward=env.binary_reward,
        env_id=env.id,
    )
    group_storage = GroupStorage(
        algo.max_episode_turns,
        env.num_envs * (1 + width),  # env n's branch b in column N + n * B + b
        prompt.max_response_tokens,
        pad_id,
        config.ppo.num_minibatches,
    )
    group_storage.sampled_columns = env.num_envs
    return group_rollout, group_storage
