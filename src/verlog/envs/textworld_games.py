"""TextWorld's three BALROG task kinds as verlog text envs, on games generated here (``pip install -e ".[textworld]"``).

Facts relied on (BALROG af7d1f1, the game sets it plays from intelligent-go-explore, ``textworld`` 1.7.0):

* **Tasks and difficulty.** ``coin_collector``: TextWorld's ``tw-coin_collector`` at level 220 (60 rooms,
  quest of 20 steps); ``treasure_hunter``: ``tw-treasure_hunter`` level 30 (hard: 20 rooms, locked doors and
  containers); ``cooking``: ``tw-cooking`` with recipe 5, take 5, go 12, open, cook, cut, split ``test`` (no
  drop). All with ``grammar.only_last_action = True`` (a one-sentence objective), as BALROG's games were made.
  BALROG plays 25 pregenerated games per kind; nothing may be downloaded here, so the pool is generated with
  TextWorld's own generator from seeds ``0..games-1`` on first use and cached as ``.z8`` files (TextWorld 1.7
  plays no Glulx ``.ulx``) under ``$VERLOG_CACHE/textworld`` (default ``~/.cache/verlog/textworld``).
  ``VERLOG_TEXTWORLD_GAMES`` sets the default pool size (the test suite uses 1). ``reset(seed=s)`` draws the game of the pool from ``self.np_random``; a TextWorld game has no randomness of
  its own, so the seed fixes the episode.
* **Text.** TextWorld's own: the objective and everything before it (the banner) is cut from the first
  observation, as BALROG's ``filter_objective`` does; the objective is the goal and is in the instruction.
* **Actions.** Any text goes to the game's parser, as in BALROG (it answers "That's not a verb I recognise."
  to nonsense): there is no fallback action. ``valid_actions`` are TextWorld's admissible commands at the
  state (BALROG does not show them); an answer naming one counts as valid, anything else runs as typed and is
  counted as invalid (``invalid_action_penalty`` applies). An empty answer runs ``look``.
* **Episode end and progression.** 80 steps (BALROG's ``max_episode_steps``) truncate, a win or a loss
  terminates; progression is ``max(score / max_score, won)``, set when the episode ends (BALROG's), so an
  unfinished game scores its partial score. Max score is 1 for coin and treasure games, and the recipe's
  points for cooking.

What differs from BALROG: the games are generated here rather than IGE's files (same generator and settings,
so the same kind and difficulty, not the same maps; treasure games are not filtered to walkthroughs of exactly
20 steps); the reward is the step's score gain, where BALROG passes TextWorld's running score.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from verlog.extras import require

require("verlog's TextWorld envs", "textworld")

import textworld  # noqa: E402
import textworld.challenges  # noqa: E402
import textworld.generator  # noqa: E402
import textworld.gym  # noqa: E402

from verlog.envs.base import TextEnv  # noqa: E402
from verlog.envs.parsing import ParsedAction, extract_candidate, normalize  # noqa: E402

__all__ = ["TEXTWORLD_TASKS", "TextWorldTextEnv", "game_path"]

#: BALROG's task name -> (TextWorld challenge, its settings at BALROG's difficulty, the command help).
TEXTWORLD_TASKS: dict[str, tuple[str, dict[str, Any], str]] = {
    "coin_collector": (
        "tw-coin_collector",
        {"level": 220},
        "go <north|south|east|west>, take coin, look, inventory",
    ),
    "treasure_hunter": (
        "tw-treasure_hunter",
        {"level": 30},
        "go <dir>, take <x>, drop <x>, open <x>, close <x>, unlock <x> with <key>, lock <x> with <key>, "
        "put <x> on <y>, insert <x> into <y>, examine <x>, look, inventory",
    ),
    "cooking": (
        "tw-cooking",
        {"recipe": 5, "take": 5, "go": 12, "open": True, "cook": True, "cut": True, "drop": False}
        | {"recipe_seed": 0, "split": "test"},
        "go <dir>, take <x>, drop <x>, open <x>, examine <x>, read cookbook, slice/dice/chop <x> with knife, "
        "cook <x> with <stove|oven|BBQ>, prepare meal, eat meal, look, inventory",
    ),
}
_INFOS = textworld.EnvInfos(
    objective=True,
    description=True,
    score=True,
    max_score=True,
    won=True,
    lost=True,
    admissible_commands=True,
)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Without the generator's "not enough name variation" notices and jericho's "not fully supported"
    one (TextWorld keeps score itself), which would otherwise print on every game made or loaded."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", textworld.GenerationWarning)
        warnings.filterwarnings("ignore", message="Game .* is not fully supported")
        yield


def _cache_dir() -> Path:
    root = os.environ.get("VERLOG_CACHE") or Path.home() / ".cache" / "verlog"
    return Path(root) / "textworld"


def game_path(task: str, index: int) -> Path:
    """The ``.z8`` file of game ``index`` of ``task``, generated (once, then cached) with TextWorld's
    generator from seed ``index`` at BALROG's settings. Generating takes seconds to minutes, so it says so on
    the console (a warning-level record of the ``verlog`` logger: shown whether or not the console is quiet)."""
    challenge, settings, _ = TEXTWORLD_TASKS[task]
    path = _cache_dir() / task / f"{task}-{index}.z8"
    if path.exists():
        return path
    logging.getLogger("verlog").warning(
        f"generating TextWorld games (first use, cached after): {task} game {index} ..."
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.parent / f".{os.getpid()}-{index}"
    options = textworld.GameOptions()
    options.seeds = index
    options.path = str(scratch / path.name)
    options.file_ext = ".z8"
    options.grammar.only_last_action = True
    with _quiet():
        game = textworld.challenges.CHALLENGES[challenge][1](settings=dict(settings), options=options)
        compiled = Path(textworld.generator.compile_game(game, options))
    for produced in compiled.parent.iterdir():  # .z8 and its .json metadata, moved into place atomically
        os.replace(produced, path.parent / produced.name)
    scratch.rmdir()
    return path


class TextWorldTextEnv(TextEnv):
    """One of BALROG's TextWorld task kinds; any text is a command for the game's parser.

    Args:
        task: the task kind, one of BALROG's (``coin_collector``, ``treasure_hunter``, ``cooking``).
        games: the size of the pool an episode's game is drawn from, generated on first use and cached
            (default: ``$VERLOG_TEXTWORLD_GAMES``, else BALROG's 25).
        max_steps: commands before the episode is truncated (BALROG's 80).
        **kwargs: :class:`~verlog.envs.base.TextEnv` options (invalid-action policy).

    Observation: TextWorld's own text: the room's description and the game's answer to the last command (the
    banner and the objective are cut from the first one; the objective is the goal). ``info["valid_actions"]``
    are TextWorld's admissible commands.

    Reward: the step's gain in the game's score.

    Episode end: terminated when the game is won or lost; truncated after ``max_steps`` commands.

    Progression: ``max(score / max_score, won)`` when the episode ends (a partial score counts), else 0.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    default_action: ClassVar[str] = "look"
    actions: tuple[str, ...] = ("look",)
    max_observation_chars: ClassVar[int] = 8192
    #: Any text runs: an answer outside ``valid_actions`` is sent to the game as typed (no fallback).
    free_text: ClassVar[bool] = True

    def __init__(
        self, *, task: str = "coin_collector", games: int | None = None, max_steps: int = 80, **kwargs: Any
    ) -> None:
        if games is None:  # BALROG's 25 per kind; the test suite sets a pool of 1 (generation takes seconds)
            games = int(os.environ.get("VERLOG_TEXTWORLD_GAMES", "25"))
        if task not in TEXTWORLD_TASKS:
            raise ValueError(
                f"task={task!r} is not a BALROG TextWorld task; choose one of {list(TEXTWORLD_TASKS)}"
            )
        if games < 1:
            raise ValueError(f"games={games} must be at least 1")
        self.task, self.games, self.max_steps = task, int(games), int(max_steps)
        super().__init__(**kwargs)
        self._game: Any = None
        self._game_index = -1
        self._commands: list[str] = []
        self._infos: dict[str, Any] = {}
        self._done = False

    # ------------------------------------------------------------------ the game
    def _open(self, index: int) -> None:
        if self._game is not None:
            self._game.close()
        env_id = textworld.gym.register_game(
            str(game_path(self.task, index)), _INFOS, max_episode_steps=10**6
        )
        self._game, self._game_index = textworld.gym.make(env_id), index

    def _new_episode(self) -> tuple[str, dict[str, Any]]:
        with _quiet():
            self._open(int(self.np_random.integers(self.games)))
            obs, self._infos = self._game.reset()
        self._commands, self._done = [], False
        self._update_actions()
        return self._strip_objective(obs), self._game_info()

    def _strip_objective(self, text: str) -> str:
        objective = self._infos.get("objective") or ""
        index = text.rfind(objective) if objective else -1
        return (text[index + len(objective) :] if index >= 0 else text).strip("\n") + "\n"

    def _update_actions(self) -> None:
        self.actions = tuple(self._infos.get("admissible_commands") or ("look",))
        self.offered_actions = self.actions

    def parse(self, response: object) -> ParsedAction:
        """An admissible command (leniently matched) is valid; any other text runs as typed, as in BALROG."""
        parsed = super().parse(response)
        if parsed.valid:
            return parsed
        text = response if isinstance(response, str) else str(response or "")
        lines = [line.strip() for line in extract_candidate(text).splitlines() if line.strip()]
        # Printable text only, and no backslash: the game runs in dumb frotz, which reads a backslash as the start
        # of one of its own interface commands, and some of those crash or hang the whole process.
        command = "".join(c for c in (lines[0] if lines else "") if c.isprintable() and c != "\\")
        command = command.strip()[:200]
        return ParsedAction(command or self.default_action, False, normalize(command)[:200])

    def invalid_action_note(self, parsed: ParsedAction) -> str:
        return f"'{parsed.action}' is not one of the listed commands; it was sent to the game as typed.\n\n"

    def walkthrough(self) -> list[str]:
        """The generator's winning command list for the current game (a scripted agent's plan)."""
        import json

        path = game_path(self.task, self._game_index).with_suffix(".json")
        return list(json.loads(path.read_text())["metadata"]["walkthrough"])

    def _apply(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        before = self._infos.get("score", 0)
        self._commands.append(action)
        obs, score, _, self._infos = self._game.step(action)
        terminated = bool(self._infos.get("won") or self._infos.get("lost"))
        truncated = not terminated and len(self._commands) >= self.max_steps
        self._done = terminated or truncated
        self._update_actions()
        text = "".join(c for c in obs if c.isprintable() or c in "\n\t")
        return text.strip("\n") + "\n", float(score - before), terminated, truncated, self._game_info()

    def _game_info(self) -> dict[str, Any]:
        return {
            "score": int(self._infos.get("score") or 0),
            "max_score": int(self._infos.get("max_score") or 1),
            "won": bool(self._infos.get("won")),
            "game": self._game_index,
        }

    def _progression(self) -> float:
        if not self._done:
            return 0.0
        info = self._game_info()
        return max(min(info["score"] / max(info["max_score"], 1), 1.0), 1.0 if info["won"] else 0.0)

    def _goal(self) -> str:
        return self._infos.get("objective") or f"Win the {self.task.replace('_', ' ')} game."

    def _instruction(self) -> str:
        _, _, commands = TEXTWORLD_TASKS[self.task]
        return (
            f"You are playing a TextWorld {self.task.replace('_', ' ')} game: a text adventure. "
            f"{self._goal()}\nType one command per turn; useful commands: {commands}. "
            f"You have {self.max_steps} steps."
        )

    # ------------------------------------------------------------------ pickling by replay
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_game"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._game_index >= 0:
            with _quiet():
                self._open(self._game_index)
                self._game.reset()
            for command in self._commands:
                self._game.step(command)

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game = None
