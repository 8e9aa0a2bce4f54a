"""The held-out validation panel, played during training on the sampler the learner already has loaded.

Every ``run.eval_every`` updates (and after the last) the learner plays the same ``panel.episodes`` seeded
episodes, seeds from ``panel.seed`` on (far from the training seeds: held out), on ``panel.env_id`` with
``panel.env_kwargs`` over ``env.kwargs`` (so BALROG's own setting can be the panel while training runs on an
easier one, or on a curriculum's stage). Episodes are played by the evaluation floor's runner and scored by its
BALROG scoring (:mod:`verlog.evaluation`), the model answering through :class:`LearnerAgent`: the training
sampler (vLLM or transformers), greedy unless ``panel.greedy = false``, with the learner's prompts. Its cost is
one evaluation of ``panel.episodes`` episodes, reported as ``time/eval``.

A sampled panel draws from its own random stream, seeded from ``panel.seed`` at every panel, and gives torch's
stream back as it found it: training samples the same answers whether a panel plays every update or never (so
``run.eval_every`` does not change a seeded run), and every checkpoint meets the same episodes *and* the same
random draws, so two panels differ by the weights, not by luck of the draw.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from verlog.config import Config
from verlog.evaluation.agents import Turn
from verlog.evaluation.runner import EnvSettings, play
from verlog.evaluation.scoring import group_stats
from verlog.models.prompts import PromptBuilder
from verlog.sampling.constrain import valid_actions

__all__ = ["LearnerAgent", "own_random_stream", "panel_line", "play_panel"]


class LearnerAgent:
    """The learner's own sampler and prompts as an evaluation agent (nothing loaded twice)."""

    needs_env = False
    name = "learner"

    def __init__(self, sampler: Any, prompts: PromptBuilder, *, greedy: bool) -> None:
        self.sampler, self.prompts, self.greedy = sampler, prompts, greedy

    def identity(self) -> dict[str, Any]:
        return {"agent": "learner", "greedy": self.greedy}

    def start(self, key: str, seed: int, env: Any | None) -> None:
        del key, seed, env  # the memory wrapper holds an episode's history

    def act(self, turns: Sequence[Turn]) -> list[str]:
        prompts = [self.prompts.from_info(turn.observation, turn.info) for turn in turns]
        actions = [valid_actions(turn.info) for turn in turns]  # used by a constrained sampler
        return list(self.sampler.generate(prompts, greedy=self.greedy, actions=actions).texts)

    def finish(self, key: str) -> None:
        del key


@contextmanager
def own_random_stream(seed: int) -> Iterator[None]:
    """Inside: torch's CPU stream (and this process's GPU's) seeded with ``seed``; after: both as they were."""
    gpu = torch.cuda.is_available() and torch.cuda.is_initialized()
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if gpu else []):
        torch.default_generator.manual_seed(seed)
        if gpu:
            torch.cuda.manual_seed(seed)  # the current device only, the one fork_rng gives back
        yield


def play_panel(config: Config, sampler: Any, prompts: PromptBuilder) -> dict[str, float]:
    """Play the panel once; its BALROG statistics as metrics (success and invalid rate as fractions)."""
    panel, env = config.panel, config.env
    settings = EnvSettings(
        num_envs=panel.num_envs or env.num_envs,
        memory=env.memory,
        memory_kwargs=dict(env.memory_kwargs),
        env_kwargs={**env.kwargs, **panel.env_kwargs},
    )
    records: list[dict[str, Any]] = []
    clock = time.perf_counter()
    agent = LearnerAgent(sampler, prompts, greedy=panel.greedy)
    with own_random_stream(panel.seed):
        play(agent, [panel.env_id or env.id], panel.episodes, panel.seed, settings, on_record=records.append)
    stats = group_stats(records)
    return {
        "eval/success": stats["success_rate"] / 100,
        "eval/success_se": stats["success_se"] / 100,
        "eval/score": stats["score"],
        "eval/score_se": stats["score_se"],
        "eval/invalid_action_rate": stats["invalid_action_rate"] / 100,
        "eval/episodes": float(stats["episodes"]),
        "time/eval": time.perf_counter() - clock,
    }


def panel_line(update: int, metrics: dict[str, float]) -> str:
    """The console's line for a panel played after ``update`` (:func:`play_panel`'s metrics)."""
    m = metrics
    return (
        f"panel @{update}: success {m['eval/success']:.2f} ± {m['eval/success_se']:.2f}, "
        f"score {m['eval/score']:.1f} ± {m['eval/score_se']:.1f}, invalid "
        f"{m['eval/invalid_action_rate']:.2f} ({m['eval/episodes']:.0f} ep, {m['time/eval']:.1f}s)"
    )
