"""The learner: turn-level multi-turn PPO for LLM agents, the algorithm and nothing else (floor 4; imports torch,
unlike ``verlog`` itself).

One job per module, read in this order:

- ``config``: the learner's settings (run, env, model, prompt, sampling, ppo, algo), from TOML and overrides;
- ``validate``: every check of a config, all problems reported at once, before anything loads;
- ``rollout``: fill a storage with fixed-length turn batches (``Rollout``) and score them with the models;
  ``group_rollout``: whole-episode groups for the critic-free estimators (``GroupRollout``), with
  ``branching``'s one-step branches of every offered action (``algo.branch_actions``);
- ``storage``: ``TurnStorage`` (``[T+1, N]`` in the pytorch-a2c-ppo-acktr-gail layout) and ``GroupStorage``;
- ``advantages``: every ``algo.advantage`` estimator (dual-discount GAE, GRPO, GiGPO);
- ``forward``: the packed forward path that scores turns; ``update``: the PPO losses and step;
- ``build``: the actor, critic and reference, with their optimisers and engines;
- ``trainer``: the loop that assembles them (collect, returns, update, log, checkpoint).

A run's files and processes (run folder, checkpoints, logger, launch, fault stops) are :mod:`verlog.runkit`, a
floor below; models and prompts come from :mod:`verlog.models`, samplers from :mod:`verlog.sampling`.
``agents/ppo.py`` is the entry point.
"""
