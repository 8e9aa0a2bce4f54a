"""Fill a TurnStorage: step N envs for T turns with a sampler, writing each turn into the storage.

:class:`Rollout` owns the vector env, the prompt builder and the running episode statistics (which a
checkpoint saves, so a resumed run counts an episode's return from its true start). It plays and collects;
scoring the collected turns with the models is :mod:`verlog.ppo.scoring`'s step, and the critic-free
estimators' whole episodes are :mod:`verlog.ppo.group_rollout`'s.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from verlog.models.prompts import PromptBuilder
from verlog.ppo.calibration import BootstrapCalibration
from verlog.ppo.storage import TurnStorage
from verlog.runkit.samples import family_of
from verlog.sampling import Sampler, valid_actions
from verlog.vector import sub_env_info

__all__ = ["Rollout"]


class Rollout:
    """Steps the envs with the sampler's responses and writes each turn into a storage."""

    def __init__(
        self,
        envs: Any,
        sampler: Sampler,
        prompts: PromptBuilder,
        *,
        binary_reward: bool = False,
        env_id: str = "",
        calibration: BootstrapCalibration | None = None,
    ) -> None:
        self.envs = envs
        #: The bootstrap values at each batch end against the returns that followed (opened by the trainer).
        self.calibration = calibration
        self.sampler = sampler
        self.prompts = prompts
        self.binary_reward = binary_reward
        self.env_id = env_id
        self.num_envs = envs.num_envs
        self.episode_return = np.zeros(self.num_envs)
        self.episode_length = np.zeros(self.num_envs, dtype=np.int64)
        #: Episodes each env has finished so far: with the length, the (episode, turn) of a sampled turn.
        self.episode_index = np.zeros(self.num_envs, dtype=np.int64)
        self.episode_counts: dict[str, int] = {}  # of the last collect, per per-episode metric

    def first_prompts(self, observations: Sequence[str], infos: dict[str, Any]) -> list[list[int]]:
        return self.prompts.from_infos(observations, [sub_env_info(infos, n) for n in range(self.num_envs)])

    def actions(self, infos: dict[str, Any]) -> list[tuple[str, ...] | None]:
        """Each env's valid actions in ``infos`` (what a constrained answer chooses from)."""
        return [valid_actions(sub_env_info(infos, n)) for n in range(self.num_envs)]

    def collect(self, storage: TurnStorage, samples: list[dict[str, Any]] | None = None) -> dict[str, float]:
        """Run ``storage.num_turns`` turns from the prompts in slot 0; return the rollout metrics.

        When ``samples`` is a list, every turn is appended to it as a dict of
        :class:`verlog.runkit.samples.TurnSample` fields, with ``prompt_ids`` instead of the prompt text
        (decoding is left to the few that are kept).
        """
        clock: dict[str, float] = defaultdict(float)
        episodes: dict[str, list[float]] = defaultdict(list)
        invalid = tokens = prompt_tokens = 0
        cuts_before = self.prompts.cuts
        rewards_total = 0.0
        capped = 0  # answers that ran to the token cap
        cut_by_limit = 0  # episodes truncated by the env's step limit (bootstrapped with V(final_obs))
        for t in range(storage.num_turns):
            start = time.perf_counter()
            samples_out = self.sampler.generate(storage.prompts[t], actions=storage.actions[t])
            prompt_tokens += sum(len(ids) for ids in storage.prompts[t])
            clock["time/generate"] += time.perf_counter() - start
            tokens += sum(len(ids) for ids in samples_out.token_ids)
            capped += sum(len(ids) >= storage.max_response_tokens for ids in samples_out.token_ids)

            start = time.perf_counter()
            samples_text = samples_out.texts
            observations, rewards, terminated, truncated, infos = self.envs.step(tuple(samples_text))
            clock["time/env"] += time.perf_counter() - start

            start = time.perf_counter()
            rewards = np.asarray(rewards, dtype=np.float64)
            final_prompts = {}
            for n in range(self.num_envs):
                done = bool(terminated[n] or truncated[n])
                # The step's own info: after an autoreset, infos[n] already describes the next episode.
                info = sub_env_info(infos["final_info"], n) if done else sub_env_info(infos, n)
                invalid += not bool(info["action_valid"])
                family = family_of(self.env_id, info)
                if samples is not None:
                    samples.append(
                        self._sample(n, family, storage.prompts[t][n], samples_text[n], info, rewards[n])
                    )
                self.episode_return[n] += rewards[n]
                self.episode_length[n] += 1
                if done:
                    self._episode_end(n, info, family, episodes)
                    self.episode_return[n] = 0.0
                    self.episode_length[n] = 0
                if truncated[n] and not terminated[n]:
                    final_prompts[n] = self.prompts.from_info(infos["final_obs"][n], info)
                    cut_by_limit += 1
            rewards_total += float(rewards.sum())
            self._store(
                storage, samples_out, (observations, rewards, terminated, truncated, infos), final_prompts
            )
            if samples_out.states is not None and storage.trunk_budget:  # the trunk it ran while answering
                storage.keep_sampled_states(t, samples_out.states)
            clock["time/prompt"] += time.perf_counter() - start

        tally = {
            "clock": clock,
            "episodes": episodes,
            "turns": storage.num_turns * self.num_envs,
            "tokens": tokens,
            "prompt_tokens": prompt_tokens,
            "capped": capped,
            "reward": rewards_total,
            "invalid": invalid,
        }
        metrics = self._metrics(tally, cuts_before)
        if self.calibration is not None:
            metrics.update(self.calibration.metrics())
        metrics["charts/episodes_truncated"] = float(cut_by_limit)
        # Episodes still running at the batch end: bootstrapped with the critic, continued next update.
        metrics["charts/episodes_running"] = float(np.count_nonzero(self.episode_length))
        return metrics

    def _store(
        self,
        storage: TurnStorage,
        samples_out: Any,
        step: tuple[Any, ...],
        final_prompts: dict[int, list[int]],
    ) -> None:
        """Insert the turn (``step``: the vector env's five returns) with the next states' prompts and actions;
        the calibration sees the stored rewards."""
        observations, rewards, terminated, truncated, infos = step
        if self.binary_reward:
            rewards = np.where(rewards > 0, 1.0, rewards)
        if self.calibration is not None:
            self.calibration.step(rewards.tolist(), (np.asarray(terminated) | np.asarray(truncated)).tolist())
        storage.insert(
            self.first_prompts(observations, infos),
            samples_out.token_ids,
            samples_out.logprobs,
            rewards,
            terminated,
            truncated,
            final_prompts,
            self.actions(infos),
        )

    def _metrics(self, tally: dict[str, Any], cuts_before: int) -> dict[str, float]:
        """What every rollout reports: time spent, the finished episodes' means (their counts kept for the mean
        over processes), and per-turn rates over ``tally["turns"]`` played turns."""
        episodes = tally["episodes"]
        metrics = dict(tally["clock"])
        metrics.update({key: float(np.mean(values)) for key, values in episodes.items() if values})
        self.episode_counts = {key: len(values) for key, values in episodes.items() if values}
        turns = max(tally["turns"], 1)
        metrics["charts/episodes"] = float(len(episodes["env/success"]))  # resampled groups' included
        metrics["charts/response_tokens"] = tally["tokens"] / turns
        metrics["charts/prompt_tokens"] = tally["prompt_tokens"] / turns  # what sampling and scoring prefill
        metrics["charts/capped_share"] = tally["capped"] / turns
        metrics["charts/generated_tokens"] = float(tally["tokens"])
        metrics["env/reward"] = tally["reward"] / turns
        metrics["env/invalid_action_rate"] = tally["invalid"] / turns
        metrics["env/prompt_cuts"] = float(self.prompts.cuts - cuts_before)
        return metrics

    def _sample(
        self, n: int, family: str, prompt_ids: list[int], response: str, info: dict[str, Any], reward: float
    ) -> dict[str, Any]:
        """A played turn of env n as a sampled-turn record (before this turn counts in the episode's length)."""
        return dict(
            env_id=self.env_id,
            family=family,
            env_index=n,
            episode=int(self.episode_index[n]),
            turn=int(self.episode_length[n]),
            prompt_ids=prompt_ids,
            response=response,
            action=str(info["executed_action"]),
            action_valid=bool(info["action_valid"]),
            reward=float(reward),
            progression=float(info["progression"]),
        )

    def _episode_end(
        self, n: int, info: dict[str, Any], family: str, episodes: dict[str, list[float]]
    ) -> None:
        """Count a finished episode in the per-episode metrics (and per task or level in a Mixed env)."""
        progression = float(info["progression"])
        success = float(info.get("success", progression >= 1.0))
        episodes["charts/episodic_return"].append(float(self.episode_return[n]))
        episodes["charts/episodic_length"].append(float(self.episode_length[n]))
        episodes["env/success"].append(success)
        episodes["env/progression"].append(progression)
        for name, count in dict(info.get("achievements") or {}).items():  # Crafter: each one's unlock rate
            episodes[f"achievements/{name}"].append(float(count > 0))
        if family != self.env_id:  # a Mixed env: also per task / level
            episodes[f"env/{family}/success"].append(success)
            episodes[f"env/{family}/progression"].append(progression)
        self.episode_index[n] += 1

    def state_dict(self) -> dict[str, Any]:
        state = {
            "episode_return": self.episode_return.copy(),
            "episode_length": self.episode_length.copy(),
            "episode_index": self.episode_index.copy(),
        }
        if self.calibration is not None:  # open records: a resumed run closes them as the original would
            state["calibration"] = self.calibration.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episode_return = np.array(state["episode_return"], dtype=np.float64)
        self.episode_length = np.array(state["episode_length"], dtype=np.int64)
        self.episode_index = np.array(state["episode_index"], dtype=np.int64)
        if self.calibration is not None and "calibration" in state:  # absent in a checkpoint from before it
            self.calibration.load_state_dict(state["calibration"])
