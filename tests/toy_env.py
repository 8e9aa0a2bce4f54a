"""A tiny test-only text game, so vector, memory and CLI tests do not depend on a real game being fast.

Walk a marker along a line to a target cell drawn from ``np_random``. It follows the TextEnv contract like the
real games (and runs through the same contract test), and can be made to raise: at a given step, or when
the response is ``"explode"``, or hang when it is ``"hang"``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from gymnasium.envs.registration import register, registry

from verlog.envs.base import TextEnv

TOY_ID = "verlog_test/Line-v0"


class LineEnv(TextEnv):
    """Reach the target cell of a line of ``size`` cells; reward 1 on arrival, truncated after ``max_steps``."""

    actions: ClassVar[tuple[str, ...]] = ("left", "right", "wait")
    default_action: ClassVar[str] = "wait"
    synonyms: ClassVar[dict[str, str]] = {"west": "left", "east": "right"}
    max_observation_chars: ClassVar[int] = 256

    def __init__(
        self,
        size: int = 7,
        max_steps: int = 12,
        fail_at_step: int | None = None,
        observation_padding: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size}")
        self.size = size
        self.max_steps = max_steps
        self.fail_at_step = fail_at_step
        self.observation_padding = observation_padding
        self._position = self._target = self._steps = 0
        self._reached = False

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action == "explode":  # a sub-env that raises, for the vector env's error tests
            raise RuntimeError("the line exploded")
        if action == "hang":  # a sub-env that never answers (a bounded sleep: the tests stop it long before)
            time.sleep(120)
        return super().step(action)

    def _text(self) -> str:
        cells = ["."] * self.size
        cells[self._target] = "T"
        cells[self._position] = "@"
        return f"Line: {''.join(cells)}\nYou are at {self._position}, the target is at {self._target}." + (
            "~" * self.observation_padding
        )

    def _new_episode(self) -> tuple[str, dict[str, Any]]:
        self._position = int(self.np_random.integers(self.size))
        self._target = int((self._position + self.np_random.integers(1, self.size)) % self.size)
        self._steps = 0
        self._reached = False
        return self._text(), {"position": self._position}

    def _apply(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._steps += 1
        if self.fail_at_step is not None and self._steps >= self.fail_at_step:
            raise ValueError(f"line env broke at step {self._steps}")
        move = {"left": -1, "right": 1, "wait": 0}[action]
        self._position = min(max(self._position + move, 0), self.size - 1)
        self._reached = self._position == self._target
        truncated = not self._reached and self._steps >= self.max_steps
        return self._text(), float(self._reached), self._reached, truncated, {"position": self._position}

    def _instruction(self) -> str:
        return "Walk to the target T. Actions: left, right, wait."

    def _goal(self) -> str:
        return "Walk to the target T."

    def _progression(self) -> float:
        return 1.0 if self._reached else 0.0


if TOY_ID not in registry:
    register(id=TOY_ID, entry_point=LineEnv, disable_env_checker=False)
    registry[TOY_ID].description = "test-only line walk"
