"""verlog: long-horizon agentic games as Gymnasium text envs, and a turn-level PPO learner for LLM agents.

``import verlog`` registers every ``verlog/...`` env id; it imports neither torch nor any model code.

The floors, lowest first (a module imports only from its own floor or below; ``tests/test_floors.py`` checks):

- ``envs/``, ``memory.py``, ``vector.py``: the games as text envs, memory wrappers, vector envs (no torch);
- ``models/`` and ``sampling/``: where models come from and how they load; samplers (transformers, vLLM, API);
- ``runkit/``: a run's files and processes -- the run folder, checkpoints, sampled turns, the logger, launch,
  fault stops, process setup;
- ``config.py``: the configuration dataclasses, beside ``tomlconfig.py``: the learner, the evaluation and the
  report read them without importing each other;
- ``evaluation/`` (``verlog eval`` and the validation panel the trainer plays): models and samplers, not the
  learner;
- ``ppo/``: the learner, the algorithm and nothing else -- rollout, storage, advantages, forward passes,
  update, the models it builds, trainer;
- ``report/`` (``verlog report``), ``cli.py``: the commands.
"""

from __future__ import annotations

from typing import Any

from verlog.envs.registration import register_envs

__version__ = "0.1.0"
__all__ = ["make_vec", "register_envs"]

register_envs()


def __getattr__(name: str) -> Any:
    # Keep `import verlog` light: the vector module is only imported when it is used.
    if name == "make_vec":
        from verlog.vector import make_vec

        return make_vec
    raise AttributeError(f"module 'verlog' has no attribute {name!r}")
