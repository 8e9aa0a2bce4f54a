"""BALROG's scores from per-episode records, and the other per-task figures an evaluation reports.

BALROG (``balrog/utils.py::collect_and_summarize_results``):

* a task's score is 100 x the mean progression of its episodes, its standard error 100 x the *population*
  standard deviation / sqrt(n) (0 for a single episode);
* a game's ("environment's") score pools all its episodes, whatever task they belong to, the same way;
* the overall score is the mean of the game scores, its standard error sqrt(sum of the game SEs^2) / games.

Success rate, episode length and return get the same mean and standard error; the invalid-action rate is
pooled over steps (invalid actions / steps). A group of Crafter episodes (their records list the achievements
each unlocked) also gets Crafter's own score with its bootstrap SE and the 22 achievements' rates
(:mod:`verlog.evaluation.crafter_score`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from verlog.evaluation.crafter_score import crafter_stats

__all__ = ["group_stats", "mean_se", "overall", "summarize"]


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """(mean, population std / sqrt(n)) as BALROG computes them; (nan, nan) for no values, SE 0 for one."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = math.fsum(values) / n
    if n == 1:
        return mean, 0.0
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / n)
    return mean, std / math.sqrt(n)


def group_stats(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Score, success rate, length, return and invalid-action rate of a group of episodes (BALROG's units:
    score and success in percent), and Crafter's score when every episode lists its achievements."""
    rows = list(records)
    score, score_se = mean_se([100.0 * float(r["progression"]) for r in rows])
    success, success_se = mean_se([100.0 * float(bool(r["success"])) for r in rows])
    length, length_se = mean_se([float(r["length"]) for r in rows])
    ret, ret_se = mean_se([float(r["return"]) for r in rows])
    steps = sum(int(r["length"]) for r in rows)
    invalid = sum(int(r["invalid_actions"]) for r in rows)
    stats: dict[str, Any] = {
        "episodes": len(rows),
        "score": score,
        "score_se": score_se,
        "success_rate": success,
        "success_se": success_se,
        "mean_length": length,
        "length_se": length_se,
        "mean_return": ret,
        "return_se": ret_se,
        "invalid_action_rate": 100.0 * invalid / steps if steps else math.nan,
    }
    if rows and all("achievements" in r for r in rows):  # Crafter's episodes
        stats.update(crafter_stats([r["achievements"] for r in rows]))
    return stats


def overall(games: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """BALROG's overall: the mean of the game scores, SE = sqrt(sum SE^2) / number of games."""
    n = len(games)
    if n == 0:
        return {"games": 0, "score": math.nan, "score_se": math.nan}
    score = math.fsum(g["score"] for g in games.values()) / n
    se = math.sqrt(math.fsum(g["score_se"] ** 2 for g in games.values())) / n
    return {"games": n, "score": score, "score_se": se}


def summarize(
    records: Iterable[Mapping[str, Any]], tasks: Sequence[str], game: Mapping[str, str]
) -> dict[str, Any]:
    """Per-task, per-game and overall figures of ``records`` (``task`` names the env id of each).

    ``tasks`` fixes the order of the tables; ``game[task]`` is the game a task belongs to. Tasks without a
    finished episode are left out of every aggregate.
    """
    by_task: dict[str, list[Mapping[str, Any]]] = {task: [] for task in tasks}
    for record in records:
        if record["task"] in by_task:
            by_task[record["task"]].append(record)
    task_stats = {task: {"game": game[task], **group_stats(rows)} for task, rows in by_task.items() if rows}
    game_stats: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(game[task] for task in tasks):
        members = [task for task in tasks if game[task] == name and by_task[task]]
        if members:
            pooled = [r for task in members for r in by_task[task]]
            game_stats[name] = {"tasks": len(members), **group_stats(pooled)}
    return {"tasks": task_stats, "games": game_stats, "overall": overall(game_stats)}
