"""An env's state as plain data: how its episode started and the actions taken since, replayed to restore it.

The env contract (:mod:`verlog.envs.base`) makes an episode a function of ``self.np_random`` at its reset: a
seeded reset fixes it by the seed, an autoreset (``reset()`` without a seed) by the generator's state at that
moment. So ``(seed or generator state, actions)`` is the whole state of a sub-env, memory included: it is
written as JSON and restored without unpickling anything. Restoring replays the actions (one env step each;
docs/recovery.md gives the time on Crafter's longest episodes) and checks the replayed
observation against a hash of the recorded one, so a replay that drifted is an error, never a silent change.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["EpisodeRecorder", "ReplayError"]

#: numpy bit generators a recorded state may name (a name from a file is never looked up freely).
_BIT_GENERATORS = {"PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937,
                   "Philox": np.random.Philox, "SFC64": np.random.SFC64}  # fmt: skip


class ReplayError(RuntimeError):
    """A recorded episode did not replay to the observation it was recorded with."""


def _digest(observation: Any) -> str:
    return hashlib.sha256(repr(observation).encode()).hexdigest()


class EpisodeRecorder(gym.Wrapper):
    """Records how the current episode started and its actions; :attr:`replay_state` is JSON data, settable."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._start: dict[str, Any] | None = None
        self._actions: list[Any] = []
        self._last_digest = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        rng = None if seed is not None else copy.deepcopy(self.env.unwrapped.np_random.bit_generator.state)
        observation, info = self.env.reset(seed=seed, options=options)
        self._start = {"seed": seed, "rng": rng, "options": options}
        self._actions, self._last_digest = [], _digest(observation)
        return observation, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        result = self.env.step(action)
        self._actions.append(action)
        self._last_digest = _digest(result[0])
        return result

    @property
    def replay_state(self) -> dict[str, Any] | None:
        """The episode as JSON-ready data (None before the first reset): its start (seed, or the generator's
        state for an autoreset), the actions since, and the last observation's sha256."""
        if self._start is None:
            return None
        return {**self._start, "actions": list(self._actions), "observation_sha256": self._last_digest}

    @replay_state.setter
    def replay_state(self, state: dict[str, Any]) -> None:
        seed, rng = state["seed"], state["rng"]
        if seed is None:
            if rng.get("bit_generator") not in _BIT_GENERATORS:
                raise ReplayError(f"unknown bit generator {rng.get('bit_generator')!r} in the recorded state")
            bits = _BIT_GENERATORS[rng["bit_generator"]]()
            bits.state = rng
            self.env.unwrapped.np_random = np.random.Generator(bits)
        observation, _ = self.env.reset(seed=seed, options=state["options"])
        actions = state["actions"]
        for number, action in enumerate(actions, 1):
            observation, _, terminated, truncated, _ = self.env.step(action)
            if (terminated or truncated) and number < len(actions):
                raise ReplayError(f"the replayed episode ended after {number} of {len(actions)} actions")
        if _digest(observation) != state["observation_sha256"]:
            raise ReplayError(
                f"replaying {len(actions)} actions does not reproduce the recorded observation "
                "(does the env draw only from self.np_random?)"
            )
        self._start = {"seed": seed, "rng": rng, "options": state["options"]}
        self._actions, self._last_digest = list(actions), state["observation_sha256"]
