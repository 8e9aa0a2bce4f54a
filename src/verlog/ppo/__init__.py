"""The learner: turn-level multi-turn PPO for LLM agents, the algorithm and nothing else (imports torch, unlike
``verlog`` itself; at most a dozen modules, ``tests/test_floors.py`` checks).

One job per module, read in this order:

- ``rollout``: fill a storage with fixed-length turn batches (``Rollout``): it plays and collects;
  ``group_rollout``: whole-episode groups for the critic-free estimators (``GroupRollout``), and one-step
  branches of every offered action (``Brancher``, ``algo.branch_actions``);
- ``storage``: ``TurnStorage`` (``[T+1, N]`` in the pytorch-a2c-ppo-acktr-gail layout) and ``GroupStorage``;
  they store, and never compute an advantage;
- ``scoring``: a step of its own between collection and the update -- actor, reference and critic over the
  collected turns (old and reference log-probs, values, bootstrap values) and what scoring found;
- ``advantages``: **how an advantage is computed** -- every ``algo.advantage`` estimator registered by name
  (GAE, GRPO, RLOO, GiGPO, and the branch term as an addition) behind ``compute_advantages``, which the trainer
  calls once per batch; ``gae``: the dual-discount GAE scan and its slow reference;
- ``forward``: the packed forward passes scoring and the update run; ``update``: **the PPO loss** and step;
- ``build``: the actor, critic and reference, with their optimisers and engines, and the rollout and storage
  the estimator collects into;
- ``trainer``: the loop that assembles them (collect, score, advantages, update, log, checkpoint);
  ``checkpoints``: its checkpoints, resume and rollback, through a declared interface.

The configuration is :mod:`verlog.config` (read by the learner, the evaluation and the report alike) and is
checked by :mod:`verlog.runkit.validate`. A run's files and processes (run folder, checkpoints, logger, launch,
fault stops, the collapse watchdog, the curriculum) are :mod:`verlog.runkit`, a floor below; the validation
panel is an evaluation (:mod:`verlog.evaluation.panel`); models and prompts come from :mod:`verlog.models`,
samplers from :mod:`verlog.sampling`. ``agents/ppo.py`` is the entry point.
"""
