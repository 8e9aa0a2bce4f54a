"""Critic-free group advantages: GRPO's group-normalised episode return and GiGPO's step term.

A batch is ``groups x G`` whole episodes; episodes ``[k G, (k+1) G)`` form group ``k`` and started from the
same state (one reset seed). Every turn of episode ``i`` gets the *episode* advantage

    A_E(i) = (R_i - mean_k R)                    norm = "mean"
    A_E(i) = (R_i - mean_k R) / (std_k R + eps)  norm = "mean_std"   (std with Bessel's correction, eps 1e-6)

where ``R_i`` is the episode's undiscounted return (a truncated episode: the rewards it got; there is no critic
to bootstrap it). A group of one has no baseline: its advantage is the return itself (mean 0, std 1, as verl and
verl-agent do). GiGPO (arXiv 2505.10978, verl-agent's ``core_gigpo.py``) adds a *step* advantage: within a
group, the turns whose current observation is identical (an "anchor state", matched exactly: ``reset(seed)``
fixes the start, so equal texts are equal observations) form a step group, turns of the same episode included;
each turn's discounted return from that turn, ``sum_k gamma^k r_{t+k}``, is normalised the same way within its
step group (a step group of one gets 0), and

    A(i, t) = A_E(i) + w * A_S(i, t)        (w = algo.step_weight, verl-agent's step_advantage_w = 1.0)

One difference from verl-agent, on purpose: the episode statistics are over the group's episodes, one return
each (its "standard episode-level" option), not over every turn's copy of the return, which would weigh long
episodes more.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["EPS", "GroupAdvantages", "discounted_returns", "episode_advantages", "group_advantages"]

#: Added to the std before dividing (verl-agent's epsilon).
EPS = 1e-6


def _normalise(values: np.ndarray, *, std: bool, alone: float | None) -> np.ndarray:
    """Values minus their mean (over std + EPS when ``std``); ``alone``: the result for a single value
    (None: the value itself, i.e. mean 0 and std 1)."""
    if len(values) == 1:
        return values.copy() if alone is None else np.full(1, alone)
    centred = values - values.mean()
    return centred / (values.std(ddof=1) + EPS) if std else centred


def episode_advantages(returns: Sequence[float], group_size: int, *, std: bool) -> np.ndarray:
    """A_E of each episode; ``returns`` holds consecutive groups of ``group_size`` episodes."""
    values = np.asarray(returns, dtype=np.float64)
    if len(values) % group_size:
        raise ValueError(f"{len(values)} episodes do not divide into groups of {group_size}")
    out = np.empty_like(values)
    for start in range(0, len(values), group_size):
        out[start : start + group_size] = _normalise(values[start : start + group_size], std=std, alone=None)
    return out


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """The return from each turn to the end of the episode: ``G_t = r_t + gamma * G_{t+1}``."""
    out = np.zeros(len(rewards))
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


@dataclass
class GroupAdvantages:
    """Per-turn advantages of each episode and what the batch held."""

    turns: list[np.ndarray]
    """``turns[i][t]``: the advantage of turn t of episode i."""
    no_signal_episodes: int = 0
    """Episodes in a group of two or more whose returns are all equal (their episode advantage is 0)."""
    step_groups: list[int] = field(default_factory=list)
    """GiGPO: the size of every step group (a turn alone in its step group counts as a group of one)."""


def group_advantages(
    rewards: Sequence[Sequence[float]],
    group_size: int,
    *,
    std: bool,
    anchors: Sequence[Sequence[Hashable]] | None = None,
    step_weight: float = 1.0,
    step_gamma: float = 0.95,
) -> GroupAdvantages:
    """GRPO (``anchors=None``) or GiGPO advantages of every turn of ``rewards[i]`` (episode i's turn rewards).

    ``anchors[i][t]`` is the observation episode i saw before its turn t (GiGPO's anchor state).
    """
    returns = [float(np.sum(r)) for r in rewards]
    episode = episode_advantages(returns, group_size, std=std)
    result = GroupAdvantages([np.full(len(r), episode[i]) for i, r in enumerate(rewards)])
    for start in range(0, len(returns), group_size):
        group = returns[start : start + group_size]
        if group_size > 1 and all(r == group[0] for r in group):
            result.no_signal_episodes += group_size
    if anchors is None:
        return result
    for start in range(0, len(rewards), group_size):
        members: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
        step_returns: dict[int, np.ndarray] = {}
        for i in range(start, start + group_size):
            if len(anchors[i]) != len(rewards[i]):
                raise ValueError(f"episode {i}: {len(anchors[i])} anchors for {len(rewards[i])} turns")
            step_returns[i] = discounted_returns(rewards[i], step_gamma)
            for t, anchor in enumerate(anchors[i]):
                members[anchor].append((i, t))
        for turns in members.values():
            values = np.array([step_returns[i][t] for i, t in turns])
            steps = _normalise(values, std=std, alone=0.0)
            for (i, t), value in zip(turns, steps, strict=True):
                result.turns[i][t] += step_weight * value
            result.step_groups.append(len(turns))
    return result
