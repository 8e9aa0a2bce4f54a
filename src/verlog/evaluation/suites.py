"""What an evaluation plays: suites of env ids, the game each id belongs to, and the seed of every episode.

A suite is a name (``babyai``: BALROG's five tasks, ``babaisai``: the 40 level families, ``crafter``,
``textworld``: three task kinds, ``minihack``: six tasks, ``nethack``, and ``balrog``: all six games, each
task played as many times as BALROG plays it; :data:`SUITES` is the list ``--help`` and errors show) or a
list of registered ids. Episode ``i`` of task ``k`` is always reset with :func:`episode_seed` of
``(base seed, k, i)``: the same episodes for every model and every run, whatever the number of parallel envs
or the order episodes finish in, so scores are comparable (BALROG draws a fresh seed from the clock).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from verlog.envs.registration import BABYAI_TASKS, MINIHACK_TASKS, TEXTWORLD_TASKS
from verlog.hints import did_you_mean

__all__ = [
    "DEFAULT_EPISODES",
    "SUITES",
    "Suite",
    "episodes_label",
    "episode_seed",
    "game_of",
    "resolve_suite",
    "short_name",
    "suites_help",
]

#: Episodes per task that BALROG plays (``config.yaml``: babyai 10, babaisai 3, crafter 10, textworld 10,
#: minihack 5, nle 5).
DEFAULT_EPISODES = {"babyai": 10, "babaisai": 3, "crafter": 10, "textworld": 10, "minihack": 5, "nethack": 5}
#: The games BALROG plays, each a suite of its own.
GAMES = ("babyai", "babaisai", "crafter", "textworld", "minihack", "nethack")
#: The suite names :func:`resolve_suite` knows; ``balrog`` is all six games, each with its episode count.
SUITES = (*GAMES, "balrog")


@dataclass(frozen=True)
class Suite:
    """A named list of env ids and the episodes BALROG plays per id."""

    name: str
    tasks: tuple[str, ...]
    default_episodes: int

    def episodes(self, override: int | None = None) -> dict[str, int]:
        """Episodes per task: ``override`` for every task, else BALROG's count for each task's game."""
        if override is not None:
            return dict.fromkeys(self.tasks, int(override))
        return {task: DEFAULT_EPISODES.get(game_of(task), self.default_episodes) for task in self.tasks}


def episodes_label(counts: dict[str, int]) -> int | str:
    """Episodes per task for the summary: one number, or BALROG's count per game when they differ."""
    if len(set(counts.values())) == 1:
        return next(iter(counts.values()))
    per_game = {game_of(task): count for task, count in counts.items()}
    return "BALROG's (" + ", ".join(f"{g} {c}" for g, c in per_game.items()) + ")"


def _babaisai_ids() -> tuple[str, ...]:
    from verlog.envs.babaisai.levels import LEVELS  # plain data; the game module may land later

    return tuple(f"verlog/BabaIsAI-{family}-v0" for family in LEVELS)


def suites_help() -> str:
    """Every suite and its number of tasks, for ``--help``: ``babyai (5 tasks), ..., balrog (all 56)``."""
    sizes = {game: len(_game_ids(game)) for game in GAMES}
    named = [f"{game} ({size} task{'s' if size > 1 else ''})" for game, size in sizes.items()]
    return ", ".join([*named, f"balrog (all {sum(sizes.values())})"])


def _game_ids(game: str) -> tuple[str, ...]:
    """The ids BALROG plays of one game."""
    if game == "babyai":
        return tuple(f"verlog/BabyAI-{suffix}-v0" for suffix in BABYAI_TASKS.values())
    if game == "babaisai":
        return _babaisai_ids()
    if game == "textworld":
        return tuple(f"verlog/TextWorld-{suffix}-v0" for suffix in TEXTWORLD_TASKS.values())
    if game == "minihack":
        return tuple(f"verlog/MiniHack-{task}-v0" for task in MINIHACK_TASKS)
    if game == "nethack":
        return ("verlog/NetHack-v0",)
    return ("verlog/Crafter-v0",)


def resolve_suite(spec: str | Sequence[str]) -> Suite:
    """A suite name, or env ids (a list, or one string of comma-separated ids), as a :class:`Suite`.

    Unknown ids raise ``gymnasium.error.UnregisteredEnv`` naming the closest registered ones.
    """
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the verlog/... ids)

    if isinstance(spec, str) and spec in SUITES:
        games = GAMES if spec == "balrog" else (spec,)
        tasks = tuple(task for game in games for task in _game_ids(game))
        name = spec
    else:
        items = spec.split(",") if isinstance(spec, str) else list(spec)
        tasks = tuple(dict.fromkeys(item.strip() for item in items if item.strip()))
        if not tasks:
            raise ValueError("the suite names no env id")
        name = _custom_name(tasks)
    missing = [task for task in tasks if task not in gym.registry]
    if len(tasks) == 1 and missing:  # a suite's name or one id
        hint = f" ({close})" if (close := did_you_mean(missing[0], [*SUITES, *gym.registry])) else ""
        raise gym.error.UnregisteredEnv(
            f"no suite or env id {missing[0]!r}{hint}; suites: {', '.join(SUITES)}; env ids: `verlog list`"
        )
    if missing:
        hint = f"; {close}" if (close := did_you_mean(missing[0], gym.registry)) else ""
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise gym.error.UnregisteredEnv(
            f"no env registered with id {missing[0]!r}{more}{hint} (`verlog list` lists them)"
        )
    games = {game_of(task) for task in tasks}
    default = DEFAULT_EPISODES[games.pop()] if len(games) == 1 and games <= set(DEFAULT_EPISODES) else 10
    return Suite(name, tasks, default)


def _custom_name(tasks: Sequence[str]) -> str:
    """A list of ids named after them (``BabyAI-GoTo+BabyAI-Pickup``), or, when that is long, their count
    and a hash: two different lists never share an output folder."""
    joined = "+".join(short_name(task) for task in tasks)
    if len(joined) <= 60:
        return joined
    digest = hashlib.sha1("\n".join(tasks).encode()).hexdigest()[:8]
    return f"{len(tasks)}-tasks-{digest}"


def game_of(env_id: str) -> str:
    """The game an env id belongs to (``verlog/BabyAI-GoTo-v0`` -> ``babyai``): BALROG's "environment"."""
    name = env_id.split("/", 1)[-1].split(":")[-1]
    head = name.split("-", 1)[0].lower()
    return head or name.lower()


def short_name(env_id: str) -> str:
    """A table label: the id without its ``verlog/`` namespace and ``-v0`` version."""
    name = env_id.split("/", 1)[-1]
    stem, dash, version = name.rpartition("-")
    return stem if dash and version.startswith("v") and version[1:].isdigit() else name


def episode_seed(base_seed: int, task: str, index: int) -> int:
    """The reset seed of episode ``index`` of ``task``: a 31-bit hash of the three (stable across runs,
    machines and Python versions, unlike ``hash``)."""
    digest = hashlib.sha256(f"verlog-eval/{base_seed}/{task}/{index}".encode()).hexdigest()
    return int(digest[:8], 16) & 0x7FFFFFFF
