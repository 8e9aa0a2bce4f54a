"""The learner: turn-level multi-turn PPO for LLM agents (floor 2; imports torch, unlike ``verlog`` itself).

One job per module: ``config`` (dataclasses, TOML, overrides), ``prompts`` (chat-template prompts),
``policy`` (actor, critic, reference and the packed forward path), ``sampling`` (the sampler interface and
its transformers implementation), ``storage`` (TurnStorage), ``returns`` (dual-discount GAE), ``rollout``
(env stepping and scoring), ``update`` (the PPO losses and step), ``checkpoint``, ``logger``, ``trainer``
(the loop) and ``tiny`` (a local tiny model for CPU runs). ``agents/ppo.py`` is the entry point.
"""
