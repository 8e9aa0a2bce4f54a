"""Vector text envs: Gymnasium's own Sync/Async vector envs, set up the way a turn-level learner needs them.

:func:`make_vec` builds ``num_envs`` copies of a registered env, each wrapped in a memory, and batches them
with :class:`gymnasium.vector.SyncVectorEnv` or :class:`gymnasium.vector.AsyncVectorEnv` (``shared_memory=False``:
observations are Python strings) with same-step autoreset, so the infos of a step that ends an episode hold
``final_obs`` / ``final_info`` (a truncated episode bootstraps from V(final_obs)) and the returned observation
is already the next episode's first one.

Two things are added to Gymnasium's classes, nothing else changes:

* ``make_vec(..., seed=s)``: a first ``reset()`` without a seed seeds sub-env ``i`` with ``s + i``, so a
  run is reproducible without the caller threading the seed through; an explicit ``reset(seed=...)`` wins.
* each sub-env records its episode (:class:`verlog.replay.EpisodeRecorder`): ``envs.call("replay_state")``
  is every sub-env's state as JSON data, and ``envs.set_attr("replay_state", states)`` restores it; every
  episode, autoreset ones included, starts from an explicit seed.
* a sub-env that raises gives a :class:`SubEnvError` naming the env index and the original exception. The
  sync vector env keeps every sub-env for inspection; the async one closes the other workers cleanly first.
* ``make_vec(..., autoreset=False)``: a sub-env whose episode ended is not reset by the vector env (the
  step still reports ``final_obs`` / ``final_info``); it stays at its end, its steps doing nothing, until the
  caller resets it (a ``reset_mask``). An evaluation plays a known number of episodes, and an autoreset after
  the last one would make a game (a TextWorld game takes seconds to generate) that is never played.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator, registry
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from verlog.hints import did_you_mean
from verlog.memory import MEMORIES, wrap_memory
from verlog.replay import EpisodeRecorder
from verlog.workers import WatchedPipe, stop_workers, watched_worker

__all__ = [
    "EnvFactory",
    "SubEnvError",
    "TextAsyncVectorEnv",
    "TextSyncVectorEnv",
    "check_env_kwargs",
    "make_vec",
    "sub_env_info",
]

#: Keyword arguments :func:`gymnasium.make` itself takes (they are not the env's own).
_MAKE_KWARGS = frozenset({"max_episode_steps", "disable_env_checker"})


class SubEnvError(RuntimeError):
    """A sub-env of a vector env raised: which one, and what it raised.

    Attributes:
        index: the sub-env's index in the vector env.
        error_type: the original exception's class name.
        message: the original exception's message.
        others: ``(index, error_type, message)`` of further sub-envs that failed in the same call.
    """

    def __init__(
        self,
        index: int,
        error_type: str,
        message: str,
        others: tuple[tuple[int, str, str], ...] = (),
    ) -> None:
        super().__init__(index, error_type, message, others)
        self.index = index
        self.error_type = error_type
        self.message = message
        self.others = others

    def __str__(self) -> str:
        failures = [(self.index, self.error_type, self.message), *self.others]
        return "; ".join(f"sub-env {i} raised {kind}: {message}" for i, kind, message in failures)


class _RemoteTraceback(Exception):
    """Carries a worker's formatted traceback, shown as the cause of a :class:`SubEnvError`."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0])


class _NamesIndexOnError(gym.Wrapper):
    """Turn an exception of sub-env ``index`` into a :class:`SubEnvError` (plain fields: it always pickles
    back from a worker process, whatever the original exception was)."""

    def __init__(self, env: gym.Env, index: int) -> None:
        super().__init__(env)
        self.index = index

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        try:
            return self.env.reset(**kwargs)
        except Exception as error:
            raise SubEnvError(self.index, type(error).__name__, str(error)) from error

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        try:
            return self.env.step(action)
        except Exception as error:
            raise SubEnvError(self.index, type(error).__name__, str(error)) from error


#: What a sub-env's ``reset`` gets when the vector env itself calls it (an autoreset passes no argument).
_AUTORESET: Any = object()


class _HoldEnded(gym.Wrapper):
    """For ``make_vec(..., autoreset=False)``: the vector env's own reset after an episode ends (``reset()``
    with no argument, in both vector envs) is skipped. The sub-env keeps its last observation and its steps
    do nothing (no reward, not done, the game untouched) until the caller resets it, seed or not."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._ended = self._held = False
        self._last: Any = None

    def reset(self, *, seed: Any = _AUTORESET, options: Any = _AUTORESET) -> tuple[Any, dict[str, Any]]:
        if seed is _AUTORESET and options is _AUTORESET and self._ended:
            self._held = True
            return self._last, {}
        self._ended = self._held = False
        self._last, info = self.env.reset(
            seed=None if seed is _AUTORESET else seed, options=None if options is _AUTORESET else options
        )
        return self._last, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        if self._held:
            return self._last, 0.0, False, False, {}
        self._last, reward, terminated, truncated, info = self.env.step(action)
        self._ended = bool(terminated or truncated)
        return self._last, reward, terminated, truncated, info


class _SeedOnFirstReset:
    """Mixin: the first reset without a seed uses the seed given to :func:`make_vec`."""

    _first_seed: int | None = None

    def _seed_for_reset(self, seed: int | list[int | None] | None) -> int | list[int | None] | None:
        first, self._first_seed = self._first_seed, None
        return first if seed is None else seed


class TextSyncVectorEnv(_SeedOnFirstReset, SyncVectorEnv):
    """:class:`~gymnasium.vector.SyncVectorEnv` whose sub-env errors name the sub-env (see module docstring)."""

    def __init__(self, env_fns: list[Callable[[], gym.Env]], seed: int | None = None) -> None:
        super().__init__(env_fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
        self._first_seed = seed

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return super().reset(seed=self._seed_for_reset(seed), options=options)


class TextAsyncVectorEnv(_SeedOnFirstReset, AsyncVectorEnv):
    """:class:`~gymnasium.vector.AsyncVectorEnv` (one process per sub-env) whose sub-env errors name the
    sub-env and close the other workers cleanly (see module docstring). A worker that dies, or that takes
    longer than ``step_timeout_s`` for a step or reset, is a :class:`SubEnvError` naming it (every worker is
    then stopped); :meth:`close` always returns; workers end themselves when their parent process is gone
    (see :mod:`verlog.workers`)."""

    def __init__(
        self,
        env_fns: list[Callable[[], gym.Env]],
        seed: int | None = None,
        step_timeout_s: float | None = None,
    ) -> None:
        super().__init__(
            env_fns,
            shared_memory=False,
            copy=False,
            autoreset_mode=AutoresetMode.SAME_STEP,
            worker=watched_worker,
        )
        self._first_seed = seed
        self.step_timeout_s = step_timeout_s
        self._deadline: float | None = None
        self.parent_pipes = [
            WatchedPipe(pipe, i, process, lambda: self._deadline, self._worker_failed)
            for i, (pipe, process) in enumerate(zip(self.parent_pipes, self.processes, strict=True))
        ]

    def _worker_failed(self, index: int, kind: str, message: str) -> None:
        self._state = type(self._state).DEFAULT
        self._deadline = None
        self.close(terminate=True)
        raise SubEnvError(index, kind, message)

    def _start_clock(self) -> None:
        self._deadline = time.monotonic() + self.step_timeout_s if self.step_timeout_s else None

    def reset_async(
        self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        self._start_clock()
        super().reset_async(seed=self._seed_for_reset(seed), options=options)

    def step_async(self, actions: Any) -> None:
        self._start_clock()
        super().step_async(actions)

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        try:
            return super().reset_wait(timeout)
        finally:
            self._deadline = None

    def step_wait(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        try:
            return super().step_wait(timeout)
        finally:
            self._deadline = None

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Stop every worker within ``timeout`` (5 s by default) plus a moment, whatever state they are in."""
        stop_workers(
            self.parent_pipes, self.processes, grace=5.0 if timeout is None else timeout, terminate=terminate
        )

    def _raise_if_errors(self, successes: Any) -> None:
        successes = list(successes)
        if all(successes):
            return
        failures = [self.error_queue.get() for _ in range(successes.count(False))]
        failures.sort(key=lambda failure: failure[0])
        for index, *_ in failures:
            self.parent_pipes[index].close()
            self.parent_pipes[index] = None  # the worker has exited
        self._state = type(self._state).DEFAULT
        self.close()  # the other workers exit cleanly; the object stays inspectable
        if any(issubclass(error_type, KeyboardInterrupt) for _, error_type, _, _ in failures):
            raise KeyboardInterrupt
        named = [
            (value.index, value.error_type, value.message)
            if isinstance(value, SubEnvError)
            else (index, error_type.__name__, str(value))
            for index, error_type, value, _ in failures
        ]
        raise SubEnvError(*named[0], others=tuple(named[1:])) from _RemoteTraceback(failures[0][3])


@dataclass(frozen=True)
class EnvFactory:
    """Builds sub-env ``index``: ``gym.make(env_id, **env_kwargs)`` wrapped in its memory (picklable)."""

    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    memory: str | Callable[[gym.Env], gym.Env] | None = None
    memory_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: The sub-env's index, named by the :class:`SubEnvError` of a failing step or reset.
    index: int = 0
    #: False: an ended episode waits for the caller's reset (see :func:`make_vec`).
    autoreset: bool = True

    def __call__(self) -> gym.Env:
        env = gym.make(self.env_id, **self.env_kwargs)
        memory = wrap_memory(env, self.memory, **self.memory_kwargs)
        named = _NamesIndexOnError(EpisodeRecorder(memory), self.index)
        return named if self.autoreset else _HoldEnded(named)


def make_vec(
    env_id: str,
    num_envs: int = 1,
    *,
    vectorization_mode: str = "sync",
    memory: str | Callable[[gym.Env], gym.Env] | None = None,
    memory_kwargs: Mapping[str, Any] | None = None,
    seed: int | None = None,
    step_timeout_s: float | None = None,
    autoreset: bool = True,
    **env_kwargs: Any,
) -> TextSyncVectorEnv | TextAsyncVectorEnv:
    """Make ``num_envs`` copies of a registered text env, each in a memory, as one vector env.

    Args:
        env_id: a registered id, e.g. ``"verlog/BabyAI-GoTo-v0"``.
        num_envs: number of sub-envs.
        vectorization_mode: ``"sync"`` (one process, a loop) or ``"async"`` (one worker process per sub-env).
        memory: ``None``/``"none"``, ``"history"``, ``"notes"`` (see :mod:`verlog.memory`), or a callable
            ``env -> gymnasium.Wrapper``; it wraps each sub-env.
        memory_kwargs: keyword arguments of the memory, e.g. ``{"turns": 4, "max_chars": 8000}``.
        seed: the first ``reset()`` without a seed seeds sub-env ``i`` with ``seed + i``.
        step_timeout_s: async only: a sub-env that takes longer for a step or reset is a :class:`SubEnvError`
            naming it (None: no limit).
        autoreset: False: a sub-env whose episode ended is not reset until the caller resets it (with a
            ``reset_mask``); until then its steps do nothing (its last observation, no reward, not done).
        **env_kwargs: the env's own keyword arguments (e.g. ``invalid_action_penalty=-0.1``), and
            :func:`gymnasium.make`'s ``max_episode_steps``.

    Example:
        >>> import verlog
        >>> envs = verlog.make_vec("verlog/BabyAI-GoTo-v0", 2, memory="history", seed=0)  # doctest: +SKIP
        >>> obs, infos = envs.reset()  # doctest: +SKIP
        >>> obs, rewards, terminated, truncated, infos = envs.step(("go forward", "turn left"))  # doctest: +SKIP
    """
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if vectorization_mode not in ("sync", "async"):
        raise ValueError(f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}")
    if memory is not None and not callable(memory) and memory not in MEMORIES:
        raise ValueError(f"unknown memory {memory!r}; choose one of {sorted(MEMORIES)} or pass a callable")
    if step_timeout_s is not None and (vectorization_mode != "async" or not step_timeout_s > 0):
        raise ValueError(
            f"step_timeout_s needs vectorization_mode='async' and a positive value, got {step_timeout_s}"
        )
    check_env_kwargs(env_id, env_kwargs)
    factory = EnvFactory(env_id, dict(env_kwargs), memory, dict(memory_kwargs or {}), autoreset=autoreset)
    env_fns = [dataclasses.replace(factory, index=i) for i in range(num_envs)]
    if vectorization_mode == "sync":
        envs: TextSyncVectorEnv | TextAsyncVectorEnv = TextSyncVectorEnv(env_fns, seed=seed)
    else:
        envs = TextAsyncVectorEnv(env_fns, seed=seed, step_timeout_s=step_timeout_s)
    if seed is not None:
        envs.action_space.seed(seed)
    return envs


def check_env_kwargs(env_id: str, env_kwargs: Mapping[str, Any]) -> None:
    """Fail before any process starts: an unknown id or a keyword the env does not take."""
    if ":" in env_id:  # gymnasium's "module:Env-v0": importing the module registers the id
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    if env_id not in registry:
        hint = f"; {close}" if (close := did_you_mean(env_id, registry)) else ""
        raise gym.error.UnregisteredEnv(
            f"no env registered with id {env_id!r}{hint} (`verlog list` lists them)"
        )
    entry_point = registry[env_id].entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    accepted = _keyword_names(creator)
    if accepted is None:
        return
    unknown = sorted(set(env_kwargs) - accepted - _MAKE_KWARGS)
    if unknown:
        raise TypeError(
            f"{env_id} does not take the keyword argument(s) {', '.join(unknown)}; "
            f"it takes: {', '.join(sorted(accepted | _MAKE_KWARGS))}"
        )


def _keyword_names(creator: Any) -> set[str] | None:
    """The keywords ``creator`` takes, following ``**kwargs`` handed up a class's ``__init__`` chain; None
    when that cannot be known (a ``**kwargs`` that goes nowhere known, no signature)."""
    chain = (
        [vars(c)["__init__"] for c in creator.__mro__ if "__init__" in vars(c)]
        if isinstance(creator, type)
        else [creator]
    )
    names: set[str] = set()
    for function in chain:
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            return None
        names |= {
            p.name
            for p in parameters
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return names - {"self"}
    return None


def sub_env_info(infos: Mapping[str, Any], n: int) -> dict[str, Any]:
    """Sub-env ``n``'s info dict out of a vector env's batched infos (keys it did not set are left out).

    Gymnasium batches a dict-valued info (Crafter's ``inventory``, ``achievements``) as a dict of arrays, so
    it is unbatched the same way, recursively. ``final_obs`` / ``final_info`` are left to the caller.
    """
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not mask[n]:
            continue
        out[key] = sub_env_info(value, n) if isinstance(value, Mapping) else value[n]
    return out
