"""Play the episodes of an evaluation through vector envs, and keep their records in a resumable JSONL file.

Each task gets one vector env (``verlog.make_vec``, sync or async) whose slots play that task's episodes until
its N are done; several tasks run side by side while the slot budget (``num_envs``) allows, so one batched
``act`` serves every waiting env of every open task. The vector envs do not autoreset: a slot that finishes an
episode is reset (Gymnasium's ``reset_mask``) with the seed of the task's next episode, and a slot with
nothing left idles at its end (it is stepped with a filler action that does nothing) until its whole vector
env closes, so no episode is begun that is not played (a TextWorld game is generated on its first reset).

Records are appended to ``episodes.jsonl`` as each episode ends. :class:`EpisodeLog` reads such a file back,
tolerating a last line cut short by a crash, so a rerun skips the episodes already played.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from verlog.evaluation.agents import Agent, EvalError, Turn
from verlog.evaluation.suites import episode_seed, game_of, short_name
from verlog.runkit.samples import family_of
from verlog.vector import sub_env_info

__all__ = ["EnvSettings", "EpisodeLog", "play"]

#: The response a slot with no episode left is stepped with (any text is fine: nobody reads the result).
_FILLER = ""


@dataclass
class EnvSettings:
    """How the envs are built: parallel slots, vector mode, memory, and the env's own keyword arguments:
    ``env_kwargs`` for every task, over ``task_kwargs[task]`` for one task (a run's training kwargs, which
    belong to the env it trained on and may mean nothing to another)."""

    num_envs: int = 8
    vectorization_mode: str = "sync"
    memory: str = "none"
    memory_kwargs: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    task_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def kwargs(self, task: str) -> dict[str, Any]:
        """The keyword arguments ``task``'s envs are made with."""
        return {**self.task_kwargs.get(task, {}), **self.env_kwargs}


class EpisodeLog:
    """``episodes.jsonl``: one JSON record per finished episode, appended and flushed as it ends."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        #: Lines that did not parse when the file was read (the cut last line is repaired, not counted).
        self.bad_lines = 0
        self.repaired = False

    def read(self) -> list[dict[str, Any]]:
        """The records on file. A last line without its newline (a crash mid-write) is cut off the file, so
        the next append starts on a fresh line; other unreadable lines are skipped and counted."""
        if not self.path.is_file():
            return []
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as f:
                f.truncate(keep)
            data = data[:keep]
            self.repaired = True
        records = []
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                self.bad_lines += 1
                continue
            if isinstance(record, dict) and {"task", "seed", "episode"} <= set(record):
                records.append(record)
            else:
                self.bad_lines += 1
        return records

    def append(self, record: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()


@dataclass
class _Slot:
    """One sub-env: the episode it plays (``key`` None when idle) and that episode's running totals."""

    key: str | None = None
    index: int = -1
    seed: int = -1
    episode_return: float = 0.0
    length: int = 0
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class _TaskEnvs:
    """The vector env of one task and the episodes its slots play."""

    def __init__(
        self, task: str, pending: deque[int], base_seed: int, size: int, settings: EnvSettings, agent: Agent
    ) -> None:
        import verlog

        self.task, self.pending, self.base_seed, self.agent = task, pending, base_seed, agent
        try:
            self.envs = verlog.make_vec(
                task,
                size,
                vectorization_mode=settings.vectorization_mode,
                memory=settings.memory,
                memory_kwargs=settings.memory_kwargs,
                autoreset=False,
                **settings.kwargs(task),
            )
        except TypeError as error:  # make_vec names the keyword the env does not take
            raise EvalError(f"{task}: {error}") from error
        self.slots = [_Slot() for _ in range(size)]
        try:
            self._begin(list(range(size)), first=True)
        except BaseException:
            self.envs.close()
            raise

    @property
    def active(self) -> int:
        return sum(slot.key is not None for slot in self.slots)

    def turns(self) -> list[Turn]:
        return [Turn(s.key, s.observation, s.info, self.task) for s in self.slots if s.key is not None]

    def step(
        self, answers: Mapping[str, str], on_turn: Callable[[dict[str, Any]], None] | None = None
    ) -> list[dict[str, Any]]:
        """Step every slot (idle ones with the filler); return the records of the episodes that ended.

        ``on_turn`` gets every played turn as :class:`verlog.runkit.samples.TurnSample` fields (``prompt`` is the
        text the agent was shown), so a caller can keep a few per task in ``samples.jsonl``."""
        actions = tuple(answers[s.key] if s.key is not None else _FILLER for s in self.slots)
        observations, rewards, terminated, truncated, infos = self.envs.step(actions)
        records, ended = [], []
        for n, slot in enumerate(self.slots):
            if slot.key is None:
                continue
            if on_turn is not None:
                done = bool(terminated[n] or truncated[n])
                info = sub_env_info(infos["final_info"] if done else infos, n)
                on_turn(
                    dict(
                        env_id=self.task,
                        family=family_of(self.task, info),
                        env_index=n,
                        episode=slot.index,
                        turn=slot.length,
                        prompt=slot.observation,
                        response=actions[n],
                        action=str(info.get("executed_action", "")),
                        action_valid=bool(info.get("action_valid", True)),
                        reward=float(rewards[n]),
                        progression=float(info.get("progression", 0.0)),
                    )
                )
            slot.episode_return += float(rewards[n])
            slot.length += 1
            if terminated[n] or truncated[n]:
                records.append(self._record(slot, sub_env_info(infos["final_info"], n), terminated[n]))
                self.agent.finish(slot.key)
                slot.key = None
                ended.append(n)
            else:
                slot.observation, slot.info = observations[n], sub_env_info(infos, n)
        if ended and self.pending:
            self._begin(ended)
        return records

    def _begin(self, slots: list[int], first: bool = False) -> None:
        """Give ``slots`` the next pending episodes and reset them with those episodes' seeds."""
        chosen = slots[: len(self.pending)]
        if not chosen:
            return
        seeds: list[int | None] = [None] * len(self.slots)
        for n in chosen:
            slot = self.slots[n] = _Slot(index=self.pending.popleft())
            slot.seed = seeds[n] = episode_seed(self.base_seed, self.task, slot.index)
            slot.key = f"{short_name(self.task)}#{slot.index}"
        if first:  # a new vector env starts with one episode per slot (it has no more slots than episodes)
            observations, infos = self.envs.reset(seed=seeds)
        else:
            mask = np.zeros(len(self.slots), dtype=np.bool_)
            mask[chosen] = True
            observations, infos = self.envs.reset(seed=seeds, options={"reset_mask": mask})
        sub_envs = getattr(self.envs, "envs", None)
        for n in chosen:
            slot = self.slots[n]
            slot.observation, slot.info = observations[n], sub_env_info(infos, n)
            env = sub_envs[n] if self.agent.needs_env and sub_envs is not None else None
            self.agent.start(slot.key, slot.seed, env)

    def _record(self, slot: _Slot, info: dict[str, Any], terminated: bool) -> dict[str, Any]:
        progression = float(info["progression"])
        return {
            "id": slot.key,
            "task": self.task,
            "game": game_of(self.task),
            "episode": slot.index,
            "seed": slot.seed,
            "agent": self.agent.name,
            "return": slot.episode_return,
            "length": slot.length,
            "success": bool(info.get("success", progression >= 1.0)),
            "progression": progression,
            "invalid_actions": int(info["invalid_actions"]),
            "terminated": bool(terminated),
            # why it ended, where the game says (Crafter: what killed, or max_steps; BabaIsAI: win, defeat, ...)
            **({"end_reason": info["end_reason"]} if info.get("end_reason") else {}),
            # Crafter's: the achievements this episode unlocked (per-achievement rates in the summary)
            **(
                {"achievements": sorted(k for k, v in info["achievements"].items() if v)}
                if "achievements" in info
                else {}
            ),
        }

    def close(self) -> None:
        self.envs.close()


def play(
    agent: Agent,
    tasks: Sequence[str],
    episodes: int | Mapping[str, int],
    base_seed: int,
    settings: EnvSettings,
    *,
    done: Iterable[tuple[str, int]] = (),
    on_record: Callable[[dict[str, Any]], None] = lambda record: None,
    on_turn: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Play episodes ``0..episodes-1`` of every task (``episodes[task]`` when a mapping), except the
    ``(task, seed)`` pairs in ``done``.

    ``on_record`` gets each episode's record as it ends, ``on_turn`` every turn (see ``_TaskEnvs.step``).
    Returns the number of episodes played.
    """
    if settings.num_envs < 1:
        raise ValueError(f"num_envs must be at least 1, got {settings.num_envs}")
    finished = set(done)
    queue = deque(
        (task, pending)
        for task in tasks
        if (
            pending := deque(
                i
                for i in range(episodes[task] if isinstance(episodes, Mapping) else episodes)
                if (task, episode_seed(base_seed, task, i)) not in finished
            )
        )
    )
    open_envs: list[_TaskEnvs] = []
    played = 0
    try:
        while queue or open_envs:
            budget = settings.num_envs - sum(e.active for e in open_envs)
            while queue and budget > 0:
                task, pending = queue.popleft()
                size = min(len(pending), budget)
                open_envs.append(_TaskEnvs(task, pending, base_seed, size, settings, agent))
                budget -= size
            turns = [turn for e in open_envs for turn in e.turns()]
            answers = dict(zip((t.key for t in turns), agent.act(turns), strict=True))
            for task_envs in list(open_envs):
                for record in task_envs.step(answers, on_turn):
                    played += 1
                    on_record(record)
                if task_envs.active == 0:
                    task_envs.close()
                    open_envs.remove(task_envs)
    finally:
        for task_envs in open_envs:
            task_envs.close()
    return played
