"""A curriculum over env difficulty: ordered stages of env keyword arguments, advanced on recent success.

Each stage is a table of the env's keyword arguments merged over ``env.kwargs`` (BabyAI ``room_size`` 5 -> 6 ->
8, ``max_episode_steps``, ``offered_actions`` from three moves to all six; BabaIsAI ``level`` from easy families
to hard ones). The run starts at stage 0 and moves to the next stage once the success rate over the last
``curriculum.window`` finished episodes (all processes together) reaches ``curriculum.threshold``; the default,
0.5, keeps the task where about half the episodes are won, where a group or a critic sees the most contrast.
The decision uses the metrics already reduced over processes, so every process changes stage at the same
update; the trainer then rebuilds its envs with the new keyword arguments (episodes in flight end there,
uncounted). The stage and the window are part of a checkpoint, so a resumed run continues exactly.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["Curriculum", "stage_envs"]


class Curriculum:
    """The current stage and the recent episodes that decide when to leave it."""

    def __init__(self, stages: list[dict[str, Any]], *, threshold: float, window: int) -> None:
        self.stages = [dict(stage) for stage in stages]
        self.threshold, self.window = threshold, window
        self.stage = 0
        self.recent: deque[tuple[float, float]] = deque()  # (wins, episodes) of each recent update
        self.last_window: list[tuple[float, float]] = []  # what the last advance was decided on

    @property
    def last(self) -> bool:
        return self.stage == len(self.stages) - 1

    def env_kwargs(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The env's keyword arguments at the current stage: the stage's over ``base``."""
        return {**base, **self.stages[self.stage]}

    def success_rate(self) -> float | None:
        """Success over the recent episodes, once they fill the window (None before)."""
        episodes = sum(n for _, n in self.recent)
        return sum(w for w, _ in self.recent) / episodes if episodes >= self.window else None

    def observe(self, metrics: Mapping[str, float]) -> bool:
        """Count an update's finished episodes; True when the stage advances (the window starts again)."""
        episodes, success = metrics.get("charts/episodes", 0.0), metrics.get("env/success", math.nan)
        if episodes > 0 and math.isfinite(success):
            self.recent.append((success * episodes, episodes))
        while len(self.recent) > 1 and sum(n for _, n in self.recent) - self.recent[0][1] >= self.window:
            self.recent.popleft()  # keep just enough updates to cover the window
        rate = self.success_rate()
        if self.last or rate is None or rate < self.threshold:
            return False
        self.stage += 1
        self.last_window, self.recent = list(self.recent), deque()
        return True

    def describe(self) -> str:
        """The current stage in a phrase, and after an advance what it was decided on."""
        settings = (
            ", ".join(f"{k} = {v!r}" for k, v in self.stages[self.stage].items()) or "env.kwargs as given"
        )
        text = f"stage {self.stage + 1} of {len(self.stages)} ({settings})"
        if self.last_window:
            episodes = sum(n for _, n in self.last_window)
            rate = sum(w for w, _ in self.last_window) / episodes
            text += f" after success {rate:.2f} over the last {episodes:.0f} episodes"
        return text

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "recent": [list(pair) for pair in self.recent]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.stage = int(state["stage"])
        self.recent = deque((float(w), float(n)) for w, n in state["recent"])


def stage_envs(env: Any, seed: int, curriculum: Curriculum | None) -> Any:
    """``make_vec`` of ``env`` (an :class:`~verlog.config.EnvConfig`) with the curriculum stage's keyword
    arguments; each stage draws its own seeds, so a stage's episodes are not the previous stage's again."""
    import verlog

    stage = curriculum.stage if curriculum else 0
    return verlog.make_vec(
        env.id,
        env.num_envs,
        vectorization_mode=env.vectorization_mode,
        memory=env.memory,
        memory_kwargs=env.memory_kwargs,
        seed=seed + stage * 1_000_003,
        step_timeout_s=env.step_timeout_s or None,
        **(curriculum.env_kwargs(env.kwargs) if curriculum else env.kwargs),
    )
