"""Evaluation: a model, a training run or a baseline on a suite of envs, scored the way BALROG scores.

``suites`` (which env ids, which seed for each episode), ``agents`` (random, BabaIsAI oracle, a model
prompted and decoded by the learner's own pieces), ``runner`` (episodes through vector envs, a resumable
JSONL log), ``scoring`` (BALROG's means and standard errors), ``crafter_score`` (Crafter's own score and its
bootstrap SE), ``output`` (summary.json, results.md,
scores.png) and ``command`` (``verlog eval``, ``agents/evaluate.py`` and :func:`evaluate`); ``panel``, the
held-out validation panel the trainer plays on its own sampler (an evaluation it calls: this floor never
imports the learner).
"""

from verlog.evaluation.command import add_eval_command, evaluate, run_eval
from verlog.evaluation.scoring import mean_se, summarize
from verlog.evaluation.suites import episode_seed, resolve_suite

__all__ = [
    "add_eval_command",
    "episode_seed",
    "evaluate",
    "mean_se",
    "resolve_suite",
    "run_eval",
    "summarize",
]
