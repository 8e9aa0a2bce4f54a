"""Whole episodes in groups, for the critic-free estimators (``algo.advantage = "grpo" | "gigpo" | "rloo"``), and
one-step branches of every offered action (``algo.branch_actions``).

:class:`GroupRollout` resets the N envs in groups of G, each group with one seed (``seed + batch * stride + k``
for group k, so groups and batches differ and a run replays exactly), and plays every episode to its end or to
``algo.max_episode_turns`` (then it counts as truncated); with ``algo.late_windows`` an episode's recorded window
starts after a drawn number of unrecorded turns, so the windows reach the states that long episodes reach. Finished
envs wait: each turn generates only for the
episodes still running. Rewards, and the env's own observation before every turn (``info["raw_observation"]``,
GiGPO's anchor), are stored with each episode (:class:`verlog.ppo.storage.Episode`); the estimators of
:mod:`verlog.ppo.advantages` read them after scoring.

**Branches.** A critic-free estimator learns which move was better in a state only from the moves its samples
happened to try there, and a policy that favours one move rarely tries the others: its sampling noise then
settles on the favourite long before the state's comparison moves it (what every BabaIsAI attempt in
docs/log.md showed). With ``algo.branch_actions``, before a played turn's answer goes to its env, the
:class:`Brancher` steps each offered action (``offered_actions``, what ``info["valid_actions"]`` lists) once in
a deep copy of that env, and stores every branch as a turn of its own (the same prompt, the action's text as the
answer) with its one-step reward; its advantage is the branch term of :mod:`verlog.ppo.advantages`. A branch's
answer is the action's tokens without the end-of-text token: a bad move's negative advantage on that token would
teach the model to keep talking after the move, i.e. to answer invalidly. This is the "all-action" policy
gradient (each action weighted by what it earned, not by the luck of being sampled), made of one-step rollouts
like TRPO's vine; it needs envs that can be deep-copied and a reward that tells a single step apart (a shaping
reward). Branch turns sit in the storage's branch columns; their log-probs were never sampled, so the actor
scores them (``ppo.reuse_sampler_logprobs = false``).
"""

from __future__ import annotations

import copy
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from verlog.config import AlgoConfig
from verlog.envs.base import STATE_KEY
from verlog.memory import RAW_KEY
from verlog.ppo.advantages import ESTIMATORS, group_signal
from verlog.ppo.rollout import Rollout
from verlog.ppo.storage import GroupStorage, TurnStorage
from verlog.runkit.samples import family_of
from verlog.sampling import valid_actions

__all__ = ["Brancher", "GroupRollout", "anchor_of", "branch_width", "offered_actions", "try_actions"]


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
        """Play one batch of whole episodes into the storage (groups without signal played again, then left out
        as configured); return the metrics."""
        assert isinstance(storage, GroupStorage)
        tally: dict[str, Any] = {
            "clock": defaultdict(float),
            "episodes": defaultdict(list),
            "samples": samples,
            **dict.fromkeys(
                ("invalid", "tokens", "prompt_tokens", "capped", "truncated", "reward", "turns"), 0
            ),
            "skipped": 0,
        }
        cuts_before = self.prompts.cuts
        storage.clear()
        G, N = self.algo.group_size, self.num_envs
        play, resampled, first_empty = list(range(N)), 0, 0
        for attempt in range(self.algo.resample_attempts + 1):
            self._play(storage, play, self.group_seeds(), tally)
            self.batches += 1
            signal = group_signal(
                storage, self.algo
            )  # the estimator's judgement: which groups carry a gradient
            empty = [k for k, carries in enumerate(signal) if not carries]
            first_empty = len(empty) if attempt == 0 else first_empty
            more = bool(empty) if self.any_running is None else self.any_running(bool(empty))
            if attempt == self.algo.resample_attempts or not more:
                break
            play = [n for k in empty for n in range(k * G, (k + 1) * G)]
            resampled += len(empty)
        dropped = empty if self.algo.filter_no_signal and len(empty) < len(signal) else []
        for k in dropped:  # no gradient in them: left out of the update, with their branches
            members = list(range(k * G, (k + 1) * G))
            storage.active[:, members + storage.branch_columns(members)] = False
        self.turns_played = tally["turns"]
        metrics = self._metrics(tally, cuts_before)
        groups = len(signal)
        metrics.update(
            {
                "charts/turns": float(tally["turns"]),  # every turn played, resampled groups' included
                "groups/trained_turns": float(storage.num_played),
                "groups/no_signal_share": first_empty / groups,
                "groups/no_signal_episodes": float(len(empty) * G),
                "groups/resampled_groups": float(resampled),
                "groups/filtered_share": len(dropped) / groups,
                "groups/truncated_episodes": float(tally["truncated"]),
                "groups/skipped_turns": float(tally["skipped"]),  # algo.late_windows: before the windows
            }
        )
        return metrics

    def _play(self, storage: GroupStorage, play: list[int], seeds: list[int], tally: dict[str, Any]) -> None:
        """Reset the envs in ``play`` (each from its seed) and play their episodes to the end or the turn cap;
        what those envs held in the storage before is replaced."""
        clock, episodes, samples = tally["clock"], tally["episodes"], tally["samples"]
        anchored, centre = ESTIMATORS[self.algo.advantage].anchors, self.algo.center_actions
        subenvs, K = list(self.envs.envs), storage.num_turns
        self._start(storage, play, seeds, tally)
        active = list(play)
        for t in range(K):
            if not (active if self.any_running is None else self.any_running(bool(active))):
                break
            start = time.perf_counter()
            cells = [(t, n) for n in active] or [(0, 0)]  # an idle pass generates for one prompt
            out = self.sampler.generate(
                [storage.prompts[i][n] for i, n in cells], actions=[storage.actions[i][n] for i, n in cells]
            )
            clock["time/generate"] += time.perf_counter() - start
            if not active:
                continue  # an idle pass that only kept the collective generation in step
            tally["tokens"] += sum(len(ids) for ids in out.token_ids)
            tally["prompt_tokens"] += sum(len(storage.prompts[t][n]) for n in active)
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
                    storage.branch_valid[(t, n)] = bool(info["action_valid"])
                tally["reward"] += float(reward)
                tally["turns"] += 1
                family = family_of(self.env_id, info)
                if samples is not None:
                    samples.append(self._sample(n, family, storage.prompts[t][n], out.texts[j], info, reward))
                stored = 1.0 if self.binary_reward and reward > 0 else float(reward)
                storage.put(t, n, out.token_ids[j], out.logprobs[j], stored)
                episode = storage.episodes[n]
                episode.rewards.append(stored)
                if centre:  # the action each turn chose, for algo.center_actions (None: an invalid answer)
                    episode.actions.append(str(info["executed_action"]) if info["action_valid"] else None)
                self.episode_return[n] += float(reward)
                self.episode_length[n] += 1
                if term or trunc or t == K - 1:
                    tally["truncated"] += not term
                    self._episode_end(n, info, family, episodes)
                else:
                    going.append(n)
                    observations.append(obs)
                    infos.append(info)
                    episode.anchors.append(anchor_of(info, n, anchored))
            start = time.perf_counter()
            for n, ids, info in zip(going, self.prompts.from_infos(observations, infos), infos, strict=True):
                storage.prompts[t + 1][n] = ids
                storage.actions[t + 1][n] = valid_actions(info)
            clock["time/prompt"] += time.perf_counter() - start
            active = going

    def _start(self, storage: GroupStorage, play: list[int], seeds: list[int], tally: dict[str, Any]) -> None:
        """Reset the envs in ``play``, play the turns before their windows (``algo.late_windows``) and store each
        window's first prompt; what those envs held in the storage before is dropped."""
        start = time.perf_counter()
        resets = {n: self.envs.envs[n].reset(seed=seeds[n]) for n in play}
        tally["clock"]["time/env"] += time.perf_counter() - start
        for n in play:
            self.episode_return[n], self.episode_length[n] = 0.0, 0
        if self.algo.late_windows:  # the turns before each window: in the episode's return and length
            resets = self._skip(storage, play, seeds, resets, tally)
        anchored = ESTIMATORS[self.algo.advantage].anchors
        for n, (_, info) in resets.items():
            storage.forget(n, anchor=anchor_of(info, n, anchored))
        if play:
            first = self.prompts.from_infos([resets[n][0] for n in play], [resets[n][1] for n in play])
            for n, ids in zip(play, first, strict=True):
                storage.prompts[0][n] = ids
                storage.actions[0][n] = valid_actions(resets[n][1])

    def window_starts(self, play: list[int]) -> dict[int, int]:
        """algo.late_windows: the unrecorded turns each env in ``play`` plays before its window, k windows' worth
        with k uniform in 0..late_windows, drawn from the run's seed and the batch (a run replays exactly)."""
        rng = np.random.default_rng([self.seed, self.batches])
        draws = rng.integers(0, self.algo.late_windows + 1, size=self.num_envs)
        return {n: int(draws[n]) * self.algo.max_episode_turns for n in play}

    def _skip(
        self,
        storage: GroupStorage,
        play: list[int],
        seeds: list[int],
        resets: dict[int, tuple[Any, dict[str, Any]]],
        tally: dict[str, Any],
    ) -> dict[int, tuple[Any, dict[str, Any]]]:
        """Play each env's turns before its window with the policy, unrecorded (counted in the turns and the
        episode metrics); return the observation and info each window starts from. An episode that ends first
        counts as finished and is reset to its seed: its window starts at that reset."""
        clock, episodes = tally["clock"], tally["episodes"]
        subenvs, left, current = list(self.envs.envs), self.window_starts(play), dict(resets)
        active = [n for n in play if left[n] > 0]
        while active if self.any_running is None else self.any_running(bool(active)):
            start = time.perf_counter()
            if active:
                prompts = self.prompts.from_infos(
                    [current[n][0] for n in active], [current[n][1] for n in active]
                )
                out = self.sampler.generate(prompts, actions=[valid_actions(current[n][1]) for n in active])
            else:  # an idle pass that keeps the collective generation in step
                self.sampler.generate([storage.prompts[0][0]], actions=[storage.actions[0][0]])
            clock["time/generate"] += time.perf_counter() - start
            going: list[int] = []
            start = time.perf_counter()
            for j, n in enumerate(active):
                obs, reward, term, trunc, info = subenvs[n].step(out.texts[j])
                tally["invalid"] += not bool(info["action_valid"])
                tally["reward"] += float(reward)
                tally["turns"] += 1
                tally["skipped"] += 1
                self.episode_return[n] += float(reward)
                self.episode_length[n] += 1
                left[n] -= 1
                if term or trunc:
                    tally["truncated"] += not term
                    self._episode_end(n, info, family_of(self.env_id, info), episodes)
                    current[n] = subenvs[n].reset(seed=seeds[n])
                    self.episode_return[n], self.episode_length[n] = 0.0, 0
                    continue
                current[n] = (obs, info)
                if left[n] > 0:
                    going.append(n)
            clock["time/env"] += time.perf_counter() - start
            active = going
        return current

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


def offered_actions(env: Any) -> tuple[str, ...]:
    """The actions a text env offers (through any wrappers)."""
    return tuple(env.get_wrapper_attr("offered_actions"))


def branch_width(envs: Iterable[Any]) -> int:
    """B: the most actions any of ``envs`` offers (the branch columns each env needs)."""
    return max(len(offered_actions(env)) for env in envs)


def try_actions(env: Any, actions: Sequence[str]) -> list[float]:
    """The one-step reward of each action, each stepped in its own deep copy of ``env`` (left untouched)."""
    rewards = []
    for action in actions:
        try:
            twin = copy.deepcopy(env)
        except Exception as error:  # an env holding a handle that cannot be copied
            name = type(env.unwrapped).__name__
            raise TypeError(
                f"algo.branch_actions tries each action in a copy of the env; {name} cannot be copied: {error}"
            ) from error
        rewards.append(float(twin.step(action)[1]))
    return rewards


class Brancher:
    """Tries the offered actions from each played state and stores them as branch turns of a GroupStorage."""

    def __init__(self, tokenizer: Any, *, binary_reward: bool = False) -> None:
        if tokenizer is None:
            raise ValueError(
                "algo.branch_actions needs the actor's tokenizer, to write each action as an answer"
            )
        self.tokenizer = tokenizer
        self.binary_reward = binary_reward
        self._ids: dict[str, list[int]] = {}

    def answer_ids(self, action: str) -> list[int]:
        """The action's text as the model would answer it, without the end-of-text token (not trained)."""
        if action not in self._ids:
            self._ids[action] = list(self.tokenizer.encode(action, add_special_tokens=False))
        return self._ids[action]

    def branch(self, storage: GroupStorage, t: int, n: int, env: Any) -> None:
        """Try every action env n offers from its current state (turn t) and store each as a branch turn."""
        actions = offered_actions(env)
        if len(actions) > storage.branch_width:
            raise ValueError(
                f"env {n} offers {len(actions)} actions, more than the {storage.branch_width} branch columns "
                "built for it (the envs changed after the storage was made)"
            )
        rewards = try_actions(env, actions)
        if self.binary_reward:
            rewards = [1.0 if r > 0 else r for r in rewards]
        for b, (action, reward) in enumerate(zip(actions, rewards, strict=True)):
            column = storage.branch_column(n, b)
            ids = self.answer_ids(action)
            storage.prompts[t][column] = storage.prompts[t][n]
            storage.actions[t][column] = storage.actions[t][n]  # a branch is scored as the played answer is
            storage.put(t, column, ids, [0.0] * len(ids), reward)
        storage.branch_rewards[(t, n)] = rewards
        storage.branch_names[(t, n)] = actions
