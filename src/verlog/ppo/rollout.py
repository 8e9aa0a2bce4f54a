"""Fill a TurnStorage: step N envs for T turns with a sampler, then score every turn with the models.

:class:`Rollout` owns the vector env, the prompt builder and the running episode statistics (which a
checkpoint saves, so a resumed run counts an episode's return from its true start). :func:`score` runs the
one forward path of :mod:`verlog.ppo.forward` over the stored turns: old log-probs (recomputed by the actor,
so the PPO ratio starts at 1), reference log-probs, per-token values, the bootstrap values of slot T and the
values of truncated episodes' final observations. The critic-free estimators' whole episodes are
:mod:`verlog.ppo.group_rollout`'s.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from verlog.models.prompts import PromptBuilder
from verlog.ppo.calibration import BootstrapCalibration
from verlog.ppo.forward import Batch, actor_logprobs, collate, critic_values, shared_prompt_logprobs
from verlog.ppo.storage import SharedMicroBatch, TurnStorage, pack_by_tokens
from verlog.runkit.samples import family_of
from verlog.sampling import Sampler, valid_actions
from verlog.vector import sub_env_info

__all__ = ["Rollout", "score", "score_batch", "state_values"]


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

        When ``samples`` is a list, every turn is appended to it as a dict of :class:`verlog.runkit.samples.TurnSample`
        fields, with ``prompt_ids`` instead of the prompt text (decoding is left to the few that are kept).
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
        return {
            "episode_return": self.episode_return.copy(),
            "episode_length": self.episode_length.copy(),
            "episode_index": self.episode_index.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episode_return = np.array(state["episode_return"], dtype=np.float64)
        self.episode_length = np.array(state["episode_length"], dtype=np.int64)
        self.episode_index = np.array(state["episode_index"], dtype=np.int64)


@torch.no_grad()
def state_values(
    critic: nn.Module,
    prompts: Sequence[list[int]],
    *,
    pad_id: int,
    max_tokens: int,
    device: Any,
    common_count: Callable[[int], int] | None = None,
) -> torch.Tensor:
    """V(prompt) for each prompt: the critic's output at its last token.

    ``common_count(n)`` is the number of forward passes every process runs when the passes are collective
    (DeepSpeed with several processes); this one pads with passes on a one-token batch.
    """
    values = torch.zeros(len(prompts))
    groups = pack_by_tokens([(len(p), 0) for p in prompts], max_tokens)
    for group in groups:
        batch = collate([prompts[i] for i in group], [[] for _ in group], pad_id).to(device)
        values[group] = critic_values(critic, batch)[:, 0].cpu()
    for _ in range(_padding(common_count, len(groups))):
        critic_values(critic, _idle_batch(pad_id, device))
    return values


@torch.no_grad()
def score(
    storage: TurnStorage,
    *,
    actor: nn.Module | None,
    critic: nn.Module | None,
    reference: nn.Module | None,
    temperature: float,
    max_tokens: int,
    device: Any,
    common_count: Callable[[int], int] | None = None,
    share_prompts: bool = True,
) -> None:
    """Fill old/ref log-probs (when the models are given), token values, values and truncated values
    (when the critic is given: a critic-free estimator has none).

    ``common_count``: as in :func:`state_values`, for collective forward passes.

    Rows that repeat a prompt (a played turn and its one-step branches) get their log-probs with the prompt run
    once (:meth:`TurnStorage.shared_prompt_batches`; ``share_prompts=False`` runs every row whole, as a benchmark
    compares), except under collective forward passes, where every process must run the same passes.
    """
    rows = storage.rows()
    scorers = [
        (m, target)
        for m, target in ((actor, storage.old_logprobs), (reference, storage.ref_logprobs))
        if m is not None
    ]
    sharing = share_prompts and scorers and common_count is None
    shared = storage.shared_prompt_batches(rows, max_tokens) if sharing else []
    grouped = {row for micro in shared for row in micro.rows}
    together = not grouped  # no repeated prompt: the critic and the actor read the same micro-batches
    micros = list(storage.micro_batches(rows, max_tokens)) if critic is not None or together else []
    for _ in range(_padding(common_count, len(micros))):
        batch = _idle_batch(storage.pad_id, device)
        if critic is not None:
            critic_values(critic, batch)
        for model, _target in scorers:
            actor_logprobs(model, batch, temperature)
    for micro in micros:
        batch = micro.batch.to(device)
        ts, ns = _indices(micro.rows)
        r_len, mask = batch.response_len, batch.response_mask.cpu()
        if critic is not None:
            values = critic_values(critic, batch).cpu()
            storage.token_values[ts, ns] = 0.0
            storage.token_values[ts, ns, :r_len] = values[:, :r_len] * mask
            storage.values[ts, ns] = values[:, 0]
        for model, target in scorers if together else ():
            logprobs, _ = actor_logprobs(model, batch, temperature)
            target[ts, ns] = 0.0
            target[ts, ns, :r_len] = logprobs.cpu() * mask
    if not together:
        lone = [row for row in rows if row not in grouped]
        _score_logprobs(
            storage, scorers, lone, shared, temperature=temperature, max_tokens=max_tokens, device=device
        )
    if critic is None:
        return
    T = storage.num_turns
    keys = sorted(storage.final_prompts)
    prompts = storage.prompts[T] + [storage.final_prompts[k] for k in keys]
    values = state_values(
        critic,
        prompts,
        pad_id=storage.pad_id,
        max_tokens=max_tokens,
        device=device,
        common_count=common_count,
    )
    storage.values[T] = values[: storage.num_envs]
    storage.truncated_values.zero_()
    for (t, n), value in zip(keys, values[storage.num_envs :].tolist(), strict=True):
        storage.truncated_values[t, n] = value


def score_batch(
    storage: TurnStorage,
    *,
    actor: nn.Module,
    critic: nn.Module | None,
    reference: nn.Module | None,
    logprobs: bool,
    reuse_sampler_logprobs: bool,
    temperature: float,
    max_tokens: int,
    device: Any,
    common_count: Callable[[int], int] | None = None,
) -> dict[str, float]:
    """:func:`score` a collected batch and return what scoring found. ``logprobs=False`` scores the values
    alone (critic pre-training); with ``reuse_sampler_logprobs`` the sampler's log-probs are the old ones (the
    weights have not moved since sampling), so the actor does not score them again."""
    clock = time.perf_counter()
    reuse = logprobs and reuse_sampler_logprobs
    score(
        storage,
        actor=actor if logprobs and not reuse else None,
        critic=critic,
        reference=reference if logprobs else None,
        temperature=temperature,
        max_tokens=max_tokens,
        device=device,
        common_count=common_count,
    )
    if reuse:
        storage.old_logprobs.copy_(storage.sampler_logprobs)
    metrics = {"time/score": time.perf_counter() - clock}
    metrics.update(
        storage.score_metrics(
            values=critic is not None,
            old_logprobs=logprobs and not reuse,
            reference=logprobs and not reuse and reference is not None,
        )
    )
    return metrics


def _score_logprobs(
    storage: TurnStorage,
    scorers: list[tuple[nn.Module, torch.Tensor]],
    lone: list[tuple[int, int]],
    shared: list[SharedMicroBatch],
    *,
    temperature: float,
    max_tokens: int,
    device: Any,
) -> None:
    """Each scorer's log-probs into its target: ``lone`` rows packed as usual, ``shared`` ones a prompt once."""
    for micro in storage.micro_batches(lone, max_tokens) if lone else ():
        batch = micro.batch.to(device)
        ts, ns = _indices(micro.rows)
        for model, target in scorers:
            logprobs, _ = actor_logprobs(model, batch, temperature)
            target[ts, ns] = 0.0
            target[ts, ns, : batch.response_len] = logprobs.cpu() * batch.response_mask.cpu()
    for shared_micro in shared:
        shared_batch = shared_micro.batch.to(device)
        ts, ns = _indices(shared_micro.rows)
        for model, target in scorers:
            logprobs = shared_prompt_logprobs(model, shared_batch, temperature).cpu()
            target[ts, ns] = 0.0
            target[ts, ns, : logprobs.shape[1]] = logprobs


def _indices(rows: Sequence[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([t for t, _ in rows]), torch.tensor([n for _, n in rows])


def _padding(common_count: Callable[[int], int] | None, count: int) -> int:
    return 0 if common_count is None else common_count(count) - count


def _idle_batch(pad_id: int, device: Any) -> Batch:
    """A one-token prompt with a one-token response: a forward pass that only keeps collectives in step."""
    return collate([[pad_id]], [[pad_id]], pad_id).to(device)
