"""One-step branches (``algo.branch_actions``): every offered action tried once from each visited state.

A critic-free estimator learns which move was better in a state only from the moves its samples happened to
try there, and a policy that favours one move rarely tries the others: its sampling noise then settles on the
favourite long before the state's comparison moves it (what every BabaIsAI attempt in docs/log.md showed). Here,
before a played turn's answer goes to its env, each offered action (``offered_actions``, what
``info["valid_actions"]`` lists) is stepped once in a deep copy of that env. Every branch is stored as a turn of
its own (the same prompt, the action's text as the answer) with the advantage ``w * (r - mean)``, where r is
its one-step reward and the mean is taken over the state's branches, and over the played answer too when that
was invalid. The played turn keeps its group advantage alone: a valid answer is already one of the branches, and
an invalid one (often the longest text in the batch) would spend the optimiser's steps on garbage tokens; its
penalty, through the mean, lifts every offered move of its state together instead. Otherwise a state's branch
advantages sum to zero, so no move gains everywhere: only what the observation says can tell the moves apart.
A branch's answer is the action's tokens without the end-of-text token: a bad move's negative advantage on
that token would teach the model to keep talking after the move, i.e. to answer invalidly. This is the
"all-action" policy gradient (each action weighted by what it earned, not by the luck of being sampled), made of
one-step rollouts like TRPO's vine; it needs envs that can be deep-copied and a reward that tells a single step apart (a shaping reward).

Branch turns sit in the storage's columns ``N + n * B + b`` (env n, action b, B = the most actions any env
offers); their log-probs were never sampled, so the actor scores them (``ppo.reuse_sampler_logprobs = false``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from verlog.ppo.storage import GroupStorage

__all__ = ["Brancher", "branch_advantages", "branch_width", "offered_actions", "try_actions"]


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


def branch_advantages(tried: Sequence[float], weight: float, invalid: float | None = None) -> list[float]:
    """Each branch's advantage: ``weight * (reward - mean)``, the mean over the branches' rewards and, when the
    played answer was invalid, its reward ``invalid`` too (its penalty lowers the mean: every offered move gains)."""
    rewards = [*tried] if invalid is None else [*tried, invalid]
    mean = sum(rewards) / len(rewards)
    return [weight * (r - mean) for r in tried]


class Brancher:
    """Tries the offered actions from each played state and stores them as branch turns of a GroupStorage."""

    def __init__(self, tokenizer: Any, num_envs: int, width: int, *, binary_reward: bool = False) -> None:
        if tokenizer is None:
            raise ValueError(
                "algo.branch_actions needs the actor's tokenizer, to write each action as an answer"
            )
        self.tokenizer = tokenizer
        self.num_envs, self.width = num_envs, width
        self.binary_reward = binary_reward
        self._ids: dict[str, list[int]] = {}
        #: (turn, env) of each played turn -> the rewards of its branches, in action order.
        self.tried: dict[tuple[int, int], list[float]] = {}
        #: (turn, env) of each played turn -> whether its answer named an offered action.
        self.valid: dict[tuple[int, int], bool] = {}

    def column(self, n: int, b: int) -> int:
        """The storage column of env n's branch b."""
        return self.num_envs + n * self.width + b

    def answer_ids(self, action: str) -> list[int]:
        """The action's text as the model would answer it, without the end-of-text token (not trained)."""
        if action not in self._ids:
            self._ids[action] = list(self.tokenizer.encode(action, add_special_tokens=False))
        return self._ids[action]

    def branch(self, storage: GroupStorage, t: int, n: int, env: Any) -> None:
        """Try every action env n offers from its current state (turn t) and store each as a branch turn."""
        actions = offered_actions(env)
        if len(actions) > self.width:
            raise ValueError(
                f"env {n} offers {len(actions)} actions, more than the {self.width} branch columns built for it "
                "(the envs changed after the storage was made)"
            )
        rewards = try_actions(env, actions)
        if self.binary_reward:
            rewards = [1.0 if r > 0 else r for r in rewards]
        for b, (action, reward) in enumerate(zip(actions, rewards, strict=True)):
            column = self.column(n, b)
            ids = self.answer_ids(action)
            storage.prompts[t][column] = storage.prompts[t][n]
            storage.put(t, column, ids, [0.0] * len(ids), reward)
        self.tried[(t, n)] = rewards

    def columns(self, envs: Iterable[int]) -> list[int]:
        """The branch columns of ``envs``."""
        return [self.column(n, b) for n in envs for b in range(self.width)]

    def forget(self, storage: GroupStorage, n: int) -> None:
        """Drop env n's branches (its group is played again)."""
        for column in self.columns([n]):
            storage.forget(column)
        self.tried = {key: value for key, value in self.tried.items() if key[1] != n}
        self.valid = {key: value for key, value in self.valid.items() if key[1] != n}

    def clear(self) -> None:
        self.tried.clear()
        self.valid.clear()

    def record(self, t: int, n: int, valid: bool) -> None:
        """Whether env n's played answer at turn t was valid (``info["action_valid"]``), for the metrics."""
        self.valid[(t, n)] = valid

    def has_signal(self, envs: Iterable[int]) -> bool:
        """Whether any state of ``envs`` told its actions apart."""
        chosen = set(envs)
        return any(max(r) != min(r) for (_, n), r in self.tried.items() if n in chosen and r)

    def apply(self, storage: GroupStorage, weight: float) -> dict[str, float]:
        """Set the branch turns' advantages in the storage; return the branch metrics.

        Over the played turns with a valid answer: ``groups/branch_gain``, the played move's reward minus the mean
        of its state's branches (above 0: better than a uniform choice among the offered moves), and
        ``groups/branch_best_share``, how often it earned as much as the state's best branch.
        """
        gains: list[float] = []
        best: list[bool] = []
        for (t, n), tried in self.tried.items():
            if not bool(storage.active[t, n]) or not tried:
                continue
            played, valid = float(storage.rewards[t, n]), self.valid.get((t, n), False)
            for b, advantage in enumerate(branch_advantages(tried, weight, None if valid else played)):
                storage.turn_advantages[t, self.column(n, b)] = advantage
            if valid:
                gains.append(played - float(np.mean(tried)))
                best.append(played >= max(tried) - 1e-6)
        return {
            "groups/branch_turns": float(sum(len(r) for r in self.tried.values())),
            "groups/branch_gain": float(np.mean(gains)) if gains else 0.0,
            "groups/branch_best_share": float(np.mean(best)) if best else 0.0,
        }
