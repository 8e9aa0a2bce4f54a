"""Whole episodes in groups, for the critic-free estimators (``algo.advantage = "grpo" | "gigpo" | "rloo"``).

:class:`GroupRollout` resets the N envs in groups of G, each group with one seed (``seed + batch * stride + k``
for group k, so groups and batches differ and a run replays exactly), and plays every episode to its end or to
``algo.max_episode_turns`` (then it counts as truncated). Finished envs wait: each turn generates only for the
episodes still running. Rewards, and the env's own observation before every turn (``info["raw_observation"]``,
GiGPO's anchor), go to :func:`verlog.ppo.advantages.group_advantages`; with ``algo.branch_actions``, a
:class:`verlog.ppo.branching.Brancher` adds every offered action's one-step branch from each state.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from verlog.config import AlgoConfig
from verlog.envs.base import STATE_KEY
from verlog.memory import RAW_KEY
from verlog.ppo.advantages import GroupAdvantages, group_advantages
from verlog.ppo.branching import Brancher
from verlog.ppo.rollout import Rollout
from verlog.ppo.storage import GroupStorage, TurnStorage
from verlog.runkit.samples import family_of

__all__ = ["GroupRollout", "anchor_of"]


class GroupRollout(Rollout):
    """Plays ``groups x G`` whole episodes per batch into a :class:`GroupStorage` (sync vector envs only).

    Dynamic sampling: a group whose turns all have a zero advantage (every episode got the same return, and for
    GiGPO no step group told its turns apart) carries no gradient. Up to ``algo.resample_attempts`` times, such
    groups are played again from fresh seeds; those still without signal are then left out of the update
    (``algo.filter_no_signal``), unless every group would be. Every episode played counts in the episode metrics,
    so success is not inflated by the groups kept.
    """

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
        brancher: Brancher | None = None,
        **kw: Any,
    ):
        super().__init__(envs, sampler, prompts, **kw)
        #: Whether any process still has an episode running (or a group to play again), when generation is
        #: collective (ZeRO-3 with several processes): a process with nothing to play runs idle passes.
        self.any_running = any_running
        self.algo = algo
        self.seed, self.stride = seed, stride
        self.batches = 0  # seed draws so far (one per batch and per resampling attempt): the next resets
        self.turns_played = 0  # in the last batch, resampled groups' turns included (the turn budget's count)
        self.brancher = brancher  # algo.branch_actions: every offered action tried once from each state

    def group_seeds(self) -> list[int]:
        """The reset seed of each env in the next draw: one per group."""
        base = self.seed + self.batches * self.stride
        return [base + n // self.algo.group_size for n in range(self.num_envs)]

    def collect(self, storage: TurnStorage, samples: list[dict[str, Any]] | None = None) -> dict[str, float]:
        """Play one batch of whole episodes; fill the storage and its turn advantages; return the metrics."""
        assert isinstance(storage, GroupStorage)
        tally: dict[str, Any] = {
            "clock": defaultdict(float),
            "episodes": defaultdict(list),
            "samples": samples,
        }
        cuts_before = self.prompts.cuts
        storage.clear()
        if self.brancher is not None:
            self.brancher.clear()
        G, N = self.algo.group_size, self.num_envs
        rewards: list[list[float]] = [[] for _ in range(N)]
        anchors: list[list[str]] = [[] for _ in range(N)]
        actions: list[list[str | None]] = [[] for _ in range(N)]
        play, resampled, first_empty = list(range(N)), 0, 0
        for attempt in range(self.algo.resample_attempts + 1):
            self._play(storage, play, self.group_seeds(), rewards, anchors, actions, tally)
            self.batches += 1
            result = self._advantages(rewards, anchors, actions)
            empty = [k for k, signal in enumerate(result.signal) if not (signal or self._branch_signal(k))]
            first_empty = len(empty) if attempt == 0 else first_empty
            more = bool(empty) if self.any_running is None else self.any_running(bool(empty))
            if attempt == self.algo.resample_attempts or not more:
                break
            play = [n for k in empty for n in range(k * G, (k + 1) * G)]
            resampled += len(empty)
        for n, values in enumerate(result.turns):
            storage.turn_advantages[: len(values), n] = torch.as_tensor(values, dtype=torch.float32)
        branched = {} if self.brancher is None else self.brancher.apply(storage, self.algo.step_weight)
        dropped = empty if self.algo.filter_no_signal and len(empty) < len(result.signal) else []
        for k in dropped:  # no gradient in them: left out of the update, with their branches
            members = list(range(k * G, (k + 1) * G))
            storage.active[:, members + (self.brancher.columns(members) if self.brancher else [])] = False
        turns = sum(len(r) for r in rewards)
        self.turns_played = tally["turns"]
        episodes = tally["episodes"]
        metrics = dict(tally["clock"])
        metrics.update({key: float(np.mean(values)) for key, values in episodes.items() if values})
        self.episode_counts = {key: len(values) for key, values in episodes.items() if values}
        groups = len(result.signal)
        metrics.update(
            {
                "charts/episodes": float(len(episodes["env/success"])),  # resampled groups' included
                "charts/turns": float(tally["turns"]),  # every turn played, resampled groups' included
                "groups/trained_turns": float(storage.num_played),
                "charts/response_tokens": tally["tokens"] / max(tally["turns"], 1),
                "charts/capped_share": tally["capped"] / max(tally["turns"], 1),
                "charts/generated_tokens": float(tally["tokens"]),
                "env/reward": tally["reward"] / max(tally["turns"], 1),
                "env/invalid_action_rate": tally["invalid"] / max(tally["turns"], 1),
                "env/prompt_cuts": float(self.prompts.cuts - cuts_before),
                "groups/no_signal_share": first_empty / groups,
                "groups/no_signal_episodes": float(len(empty) * G),
                "groups/resampled_groups": float(resampled),
                "groups/filtered_share": len(dropped) / groups,
                "groups/truncated_episodes": float(tally["truncated"]),
            }
        )
        if self.algo.advantage == "gigpo":
            sizes = np.asarray(result.step_groups)
            metrics["groups/step_group_size"] = float(sizes.mean())
            metrics["groups/anchored_turn_fraction"] = float(sizes[sizes > 1].sum() / max(turns, 1))
        metrics.update(branched)
        if result.action_means:  # how far apart the actions' mean advantages were before centring
            means = result.action_means.values()
            metrics["groups/action_mean_spread"] = max(means) - min(means)
        return metrics

    def _branch_signal(self, k: int) -> bool:
        G = self.algo.group_size  # whether group k's branches told any state's actions apart
        return self.brancher is not None and self.brancher.has_signal(range(k * G, (k + 1) * G))

    def _advantages(
        self, rewards: list[list[float]], anchors: list[list[str]], actions: list[list[str | None]]
    ) -> GroupAdvantages:
        algo = self.algo
        return group_advantages(
            rewards,
            algo.group_size,
            std=algo.norm == "mean_std",
            anchors=anchors if algo.advantage == "gigpo" else None,
            step_weight=algo.step_weight,
            step_gamma=algo.step_gamma,
            baseline="loo" if algo.advantage == "rloo" else "mean",
            pool=algo.pool,
            actions=actions if algo.center_actions else None,
        )

    def _play(
        self,
        storage: GroupStorage,
        play: list[int],
        seeds: list[int],
        rewards: list[list[float]],
        anchors: list[list[str]],
        actions: list[list[str | None]],
        tally: dict[str, Any],
    ) -> None:
        """Reset the envs in ``play`` (each from its seed) and play their episodes to the end or the turn cap;
        what those envs held in the storage before is replaced."""
        clock, episodes, samples = tally["clock"], tally["episodes"], tally["samples"]
        for key in ("invalid", "tokens", "capped", "truncated", "reward", "turns"):
            tally.setdefault(key, 0)
        gigpo, centre = self.algo.advantage == "gigpo", self.algo.center_actions
        subenvs, K = list(self.envs.envs), storage.num_turns
        start = time.perf_counter()
        resets = {n: subenvs[n].reset(seed=seeds[n]) for n in play}
        clock["time/env"] += time.perf_counter() - start
        for n, (_, info) in resets.items():
            storage.forget(n)
            if self.brancher is not None:
                self.brancher.forget(storage, n)
            rewards[n], anchors[n], actions[n] = [], [anchor_of(info, n, gigpo)], []
            self.episode_return[n], self.episode_length[n] = 0.0, 0
        if play:
            first = self.prompts.from_infos([resets[n][0] for n in play], [resets[n][1] for n in play])
            for n, ids in zip(play, first, strict=True):
                storage.prompts[0][n] = ids
        active = list(play)
        for t in range(K):
            if not (active if self.any_running is None else self.any_running(bool(active))):
                break
            start = time.perf_counter()
            out = self.sampler.generate([storage.prompts[t][n] for n in active] or [storage.prompts[0][0]])
            clock["time/generate"] += time.perf_counter() - start
            if not active:
                continue  # an idle pass that only kept the collective generation in step
            tally["tokens"] += sum(len(ids) for ids in out.token_ids)
            tally["capped"] += sum(len(ids) >= storage.max_response_tokens for ids in out.token_ids)
            going: list[int] = []
            observations: list[str] = []
            infos: list[dict[str, Any]] = []
            for j, n in enumerate(active):
                start = time.perf_counter()
                if self.brancher is not None:  # before the played answer moves the env on
                    self.brancher.branch(storage, t, n, subenvs[n])
                obs, reward, term, trunc, info = subenvs[n].step(out.texts[j])
                clock["time/env"] += time.perf_counter() - start
                tally["invalid"] += not bool(info["action_valid"])
                if self.brancher is not None:
                    self.brancher.record(t, n, bool(info["action_valid"]))
                tally["reward"] += float(reward)
                tally["turns"] += 1
                family = family_of(self.env_id, info)
                if samples is not None:
                    samples.append(self._sample(n, family, storage.prompts[t][n], out.texts[j], info, reward))
                stored = 1.0 if self.binary_reward and reward > 0 else float(reward)
                storage.put(t, n, out.token_ids[j], out.logprobs[j], stored)
                rewards[n].append(stored)
                if centre:  # the action each turn chose, for algo.center_actions (None: an invalid answer)
                    actions[n].append(str(info["executed_action"]) if info["action_valid"] else None)
                self.episode_return[n] += float(reward)
                self.episode_length[n] += 1
                if term or trunc or t == K - 1:
                    tally["truncated"] += not term
                    self._episode_end(n, info, family, episodes)
                else:
                    going.append(n)
                    observations.append(obs)
                    infos.append(info)
                    anchors[n].append(anchor_of(info, n, gigpo))
            start = time.perf_counter()
            for n, ids in zip(going, self.prompts.from_infos(observations, infos), strict=True):
                storage.prompts[t + 1][n] = ids
            clock["time/prompt"] += time.perf_counter() - start
            active = going

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.batches = int(state["batches"])


def anchor_of(info: dict[str, Any], n: int, needed: bool = True) -> str:
    """GiGPO's anchor: the env's state as text, without an invalid-action note (``info["state_text"]``, or the
    env's own observation for an env that does not report it); "" when the estimator does not use it."""
    if not needed:
        return ""
    for key in (STATE_KEY, RAW_KEY):
        if key in info:
            return str(info[key])
    raise ValueError(f"env {n}: the memory wrapper does not report info[{RAW_KEY!r}], the env's observation")
