"""Whole-episode group batches for the critic-free estimators (``algo.advantage = "grpo" | "gigpo"``).

:class:`GroupRollout` resets the N envs in groups of G, each group with one seed (``seed + batch * stride + k``
for group k, so groups and batches differ and a run replays exactly), and plays every episode to its end or to
``algo.max_episode_turns`` (then it counts as truncated). Finished envs wait: each turn generates only for the
episodes still running. Rewards, and the env's own observation before every turn (``info["raw_observation"]``,
GiGPO's anchor), go to :func:`verlog.ppo.groups.group_advantages`.

:class:`GroupStorage` is a :class:`~verlog.ppo.storage.TurnStorage` with the turn cap as T and a mask of the
turns that happened: scoring and the PPO update see only those, cut into ``ppo.num_minibatches`` minibatches.
Its ``compute_returns`` puts each turn's group advantage on every token of the response, plus the per-token
KL penalty's return within the response when ``ppo.kl_coef > 0`` (the reward PPO's GAE would see).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from verlog.memory import RAW_KEY
from verlog.ppo.config import AlgoConfig
from verlog.ppo.groups import group_advantages
from verlog.ppo.rollout import Rollout
from verlog.ppo.storage import MicroBatch, TurnStorage
from verlog.runkit.samples import family_of

__all__ = ["GroupRollout", "GroupStorage", "group_batches"]


class GroupStorage(TurnStorage):
    """T = the turn cap, N = envs; ``active[t, n]`` marks the turns that were played."""

    def __init__(
        self, max_turns: int, num_envs: int, max_response_tokens: int, pad_id: int, num_minibatches: int
    ) -> None:
        super().__init__(max_turns, num_envs, max_response_tokens, pad_id)
        self.num_minibatches = num_minibatches
        self.active = torch.zeros(max_turns, num_envs, dtype=torch.bool)
        self.turn_advantages = torch.zeros(max_turns, num_envs)

    def clear(self) -> None:
        self.active.zero_()
        self.turn_advantages.zero_()
        self.response_mask.zero_()
        self.rewards.zero_()
        self.response_lens.zero_()
        self.final_prompts.clear()

    def put(self, t: int, n: int, ids: Sequence[int], logprobs: Sequence[float], reward: float) -> None:
        """Store env n's response of turn t (its prompt is already in ``prompts[t][n]``)."""
        length = len(ids)
        if not 1 <= length <= self.max_response_tokens:
            raise ValueError(f"env {n}: a response has {length} tokens, need 1..{self.max_response_tokens}")
        self.responses[t, n] = self.pad_id
        self.responses[t, n, :length] = torch.as_tensor(ids, dtype=torch.long)
        self.response_mask[t, n] = 0.0
        self.response_mask[t, n, :length] = 1.0
        self.sampler_logprobs[t, n] = 0.0
        self.sampler_logprobs[t, n, :length] = torch.as_tensor(logprobs, dtype=torch.float32)
        self.response_lens[t, n] = length
        self.rewards[t, n] = reward
        self.active[t, n] = True

    @property
    def num_played(self) -> int:
        """Turns played in this batch."""
        return int(self.active.sum())

    def rows(self) -> list[tuple[int, int]]:
        return [(int(t), int(n)) for t, n in self.active.nonzero().tolist()]

    def minibatches(
        self,
        minibatch_size: int,
        max_tokens: int,
        generator: torch.Generator | None = None,
        limit: int | None = None,
    ) -> Iterator[list[MicroBatch]]:
        """The played turns shuffled and cut into ``num_minibatches`` near-equal minibatches (the batch size
        varies with the episodes' lengths; ``minibatch_size`` and ``limit`` do not apply)."""
        rows = self.rows()
        order = torch.randperm(len(rows), generator=generator).tolist()
        for part in np.array_split(np.asarray(order, dtype=np.int64), self.num_minibatches):
            yield list(self.micro_batches([rows[i] for i in part.tolist()], max_tokens))

    def compute_returns(
        self,
        *,
        turn_gamma: float = 1.0,
        turn_lam: float = 1.0,
        token_gamma: float = 1.0,
        token_lam: float = 1.0,
        kl_coef: float = 0.0,
        all_reduce: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        """Advantages: the turn's group advantage on each response token (+ the KL penalty's return to the
        response's end, discounted by ``token_gamma``). No critic, so no returns to fit (left at 0)."""
        advantages = self.turn_advantages[:, :, None] * self.response_mask
        if kl_coef > 0:
            penalty = -kl_coef * (self.old_logprobs - self.ref_logprobs) * self.response_mask
            running = torch.zeros_like(penalty[:, :, 0])
            to_go = torch.zeros_like(penalty)
            for k in range(penalty.shape[-1] - 1, -1, -1):
                running = penalty[:, :, k] + token_gamma * running
                to_go[:, :, k] = running
            advantages = advantages + to_go * self.response_mask
        self.advantages = advantages.float()
        self.returns.zero_()

    def state_dict(self) -> dict[str, object]:
        return {}  # every batch starts from fresh resets

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.step = 0


class GroupRollout(Rollout):
    """Plays ``groups x G`` whole episodes per batch into a :class:`GroupStorage` (sync vector envs only)."""

    def __init__(
        self,
        envs: Any,
        sampler: Any,
        prompts: Any,
        *,
        algo: AlgoConfig,
        seed: int,
        stride: int,
        any_running: Callable[[bool], bool] | None = None,
        **kw: Any,
    ):
        super().__init__(envs, sampler, prompts, **kw)
        #: Whether any process still has an episode running, when generation is collective (ZeRO-3 with
        #: several processes): a process whose episodes ended generates for an idle prompt until all have.
        self.any_running = any_running
        self.algo = algo
        self.seed, self.stride = seed, stride
        self.batches = 0  # batches collected so far: with the seed, the resets of the next one

    def group_seeds(self) -> list[int]:
        """The reset seed of each env in the next batch: one per group."""
        base = self.seed + self.batches * self.stride
        return [base + n // self.algo.group_size for n in range(self.num_envs)]

    def collect(self, storage: TurnStorage, samples: list[dict[str, Any]] | None = None) -> dict[str, float]:
        """Play one batch of whole episodes; fill the storage and its turn advantages; return the metrics."""
        assert isinstance(storage, GroupStorage)
        clock: dict[str, float] = defaultdict(float)
        episodes: dict[str, list[float]] = defaultdict(list)
        cuts_before = self.prompts.cuts
        invalid = tokens = truncated = 0
        reward_total = 0.0
        storage.clear()
        gigpo = self.algo.advantage == "gigpo"
        subenvs = list(self.envs.envs)
        N, K = self.num_envs, storage.num_turns
        start = time.perf_counter()
        resets = [env.reset(seed=s) for env, s in zip(subenvs, self.group_seeds(), strict=True)]
        clock["time/env"] += time.perf_counter() - start
        anchors: list[list[str]] = [[_anchor(info, n, gigpo)] for n, (_, info) in enumerate(resets)]
        rewards: list[list[float]] = [[] for _ in range(N)]
        storage.prompts[0] = self.prompts.from_infos([o for o, _ in resets], [i for _, i in resets])
        self.episode_return[:] = 0.0
        self.episode_length[:] = 0
        active = list(range(N))
        for t in range(K):
            if not (active if self.any_running is None else self.any_running(bool(active))):
                break
            start = time.perf_counter()
            out = self.sampler.generate([storage.prompts[t][n] for n in active] or storage.prompts[0][:1])
            clock["time/generate"] += time.perf_counter() - start
            if not active:
                continue  # an idle pass that only kept the collective generation in step
            tokens += sum(len(ids) for ids in out.token_ids)
            going: list[int] = []
            observations: list[str] = []
            infos: list[dict[str, Any]] = []
            for j, n in enumerate(active):
                start = time.perf_counter()
                obs, reward, term, trunc, info = subenvs[n].step(out.texts[j])
                clock["time/env"] += time.perf_counter() - start
                invalid += not bool(info["action_valid"])
                family = family_of(self.env_id, info)
                reward_total += float(reward)
                if samples is not None:
                    samples.append(
                        dict(
                            env_id=self.env_id,
                            family=family,
                            env_index=n,
                            episode=int(self.episode_index[n]),
                            turn=t,
                            prompt_ids=storage.prompts[t][n],
                            response=out.texts[j],
                            action=str(info["executed_action"]),
                            action_valid=bool(info["action_valid"]),
                            reward=float(reward),
                            progression=float(info["progression"]),
                        )
                    )
                stored = 1.0 if self.binary_reward and reward > 0 else float(reward)
                storage.put(t, n, out.token_ids[j], out.logprobs[j], stored)
                rewards[n].append(stored)
                self.episode_return[n] += float(reward)
                self.episode_length[n] += 1
                if term or trunc or t == K - 1:
                    truncated += not term
                    self._episode_end(n, info, family, episodes)
                else:
                    going.append(n)
                    observations.append(obs)
                    infos.append(info)
                    anchors[n].append(_anchor(info, n, gigpo))
            start = time.perf_counter()
            for n, ids in zip(going, self.prompts.from_infos(observations, infos), strict=True):
                storage.prompts[t + 1][n] = ids
            clock["time/prompt"] += time.perf_counter() - start
            active = going
        self.batches += 1
        result = group_advantages(
            rewards,
            self.algo.group_size,
            std=self.algo.norm == "mean_std",
            anchors=anchors if gigpo else None,
            step_weight=self.algo.step_weight,
            step_gamma=self.algo.step_gamma,
        )
        for n, values in enumerate(result.turns):
            storage.turn_advantages[: len(values), n] = torch.as_tensor(values, dtype=torch.float32)
        turns = storage.num_played
        metrics = dict(clock)
        metrics.update({key: float(np.mean(values)) for key, values in episodes.items() if values})
        self.episode_counts = {key: len(values) for key, values in episodes.items() if values}
        metrics.update(
            {
                "charts/episodes": float(N),
                "charts/turns": float(turns),
                "charts/response_tokens": tokens / turns,
                "charts/generated_tokens": float(tokens),
                "env/reward": reward_total / turns,
                "env/invalid_action_rate": invalid / turns,
                "env/prompt_cuts": float(self.prompts.cuts - cuts_before),
                "groups/no_signal_episodes": float(result.no_signal_episodes),
                "groups/truncated_episodes": float(truncated),
            }
        )
        if gigpo:
            sizes = np.asarray(result.step_groups)
            metrics["groups/step_group_size"] = float(sizes.mean())
            metrics["groups/anchored_turn_fraction"] = float(sizes[sizes > 1].sum() / turns)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.batches = int(state["batches"])


def _anchor(info: dict[str, Any], n: int, needed: bool) -> str:
    """The env's own current observation (GiGPO's anchor state; "" when the estimator does not use it)."""
    if not needed:
        return ""
    if RAW_KEY not in info:
        raise ValueError(
            f"env {n}: the memory wrapper does not report info[{RAW_KEY!r}], the env's observation"
        )
    return str(info[RAW_KEY])


def group_batches(trainer: Any, prompts: Any, rank: int) -> tuple[GroupRollout, GroupStorage]:
    """The trainer's rollout and storage for a critic-free estimator; process ``rank`` plays its own groups."""
    config = trainer.config
    algo, env = config.algo, config.env
    groups = env.num_envs // algo.group_size
    rollout = GroupRollout(
        trainer.envs,
        trainer.sampler,
        prompts,
        algo=algo,
        seed=config.run.seed + rank * groups,
        stride=groups * trainer.derived.world_size,
        any_running=(lambda running: trainer._all_reduce(torch.tensor([float(running)])).item() > 0)
        if trainer.dist.lockstep
        else None,
        binary_reward=env.binary_reward,
        env_id=env.id,
    )
    storage = GroupStorage(
        algo.max_episode_turns,
        env.num_envs,
        config.prompt.max_response_tokens,
        trainer.tokenizer.pad_token_id,
        config.ppo.num_minibatches,
    )
    return rollout, storage
