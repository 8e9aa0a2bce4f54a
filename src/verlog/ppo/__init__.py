"""The learner: turn-level multi-turn PPO for LLM agents (floor 3; imports torch, unlike ``verlog`` itself).

One job per module: ``config`` (the learner's settings), ``policy`` (the packed forward path that scores
turns), ``storage`` (TurnStorage), ``returns`` (dual-discount GAE), ``rollout`` (env stepping and scoring),
``update`` (the PPO losses and step), ``checkpoint``, ``distributed``, ``logger`` and ``trainer`` (the loop).
Models and prompts come from :mod:`verlog.models`, samplers from the sampling floor beside it.
``agents/ppo.py`` is the entry point.
"""
