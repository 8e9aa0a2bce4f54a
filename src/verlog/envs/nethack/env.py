"""NetHack (NLE's challenge) and MiniHack tasks as verlog text envs with BALROG's text, actions and scoring."""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import gymnasium as gym
from nle import nethack

from verlog.envs.base import TextEnv
from verlog.envs.nethack.language import describe_map, text_cursor, text_inventory, text_message, tty_text
from verlog.envs.registration import MINIHACK_TASKS

__all__ = ["MINIHACK_TASKS", "MiniHackTextEnv", "NetHackTextEnv", "PROGRESSION_DLVL", "PROGRESSION_XP"]

_OBS_KEYS = ("glyphs", "blstats", "tty_chars", "tty_cursor", "inv_letters", "inv_strs")
#: Every NLE game verlog makes: the observation it reads, and the moon, Friday the 13th, night and midnight taken
#: from the episode's seeds, not the machine's clock (NLE's ``fix_moon_phase``), so a seed gives one game on any
#: night (on a full moon NetHack raises the hero's luck; on a new moon it warns of cockatrices).
_NLE_DEFAULTS: dict[str, Any] = {"observation_keys": _OBS_KEYS, "fix_moon_phase": True}
_COMPASS = {"N": "north", "E": "east", "S": "south", "W": "west"}
_COMPASS.update({"NE": "northeast", "SE": "southeast", "SW": "southwest", "NW": "northwest"})


def _action_name(action: enum.IntEnum) -> str:
    """BALROG's name of an NLE action: compass words, ``far <dir>``, else the command's name in lower case."""
    kind = type(action).__name__
    if kind == "CompassDirection":
        return _COMPASS[action.name]
    if kind == "CompassDirectionLonger":
        return "far " + _COMPASS[action.name]
    if action.name == "TURN":
        return "turnundead"
    return action.name.lower()


def _names_by_value() -> dict[int, str]:
    """Key value -> BALROG name; commands win over the text keys sharing their value (``+`` is seespells)."""
    names: dict[int, str] = {}
    for action in nethack.ACTIONS:
        if type(action).__name__ != "TextCharacters" or action.name == "SPACE":
            names.setdefault(int(action), _action_name(action))
    for action in nethack.ACTIONS:
        names.setdefault(int(action), _action_name(action))
    return names


#: BALROG's progression tables: the share of human games that ascended after reaching a dungeon depth
#: (index d-1) or an experience level (index l-1).
PROGRESSION_DLVL = (
    0.0, 0.015392269075361172, 0.017539535798967013, 0.021221378364235505, 0.026482449457437766,
    0.035428686118173014, 0.04846098359243788, 0.0695812141543123, 0.09770935198701912, 0.12558597019922987,
    0.1612677822768481, 0.20612854836308672, 0.2566039887664476, 0.29247245425293333, 0.30881240110986263,
    0.3249071349317381, 0.34007883702829594, 0.3526455577544006, 0.3654881095022441, 0.37895667923256743,
    0.39293747679675045, 0.40832255575976223, 0.4258360748858015, 0.445181408701678, 0.46637631565303056,
    0.5067605633802816, 0.5543572044866264, 0.6015648510382184, 0.6465049415992812, 0.6913110342176086,
    0.7101094299371864, 0.7176456494828894, 0.7232124894378948, 0.7284405900470092, 0.7327761924174481,
    0.7368528917489855, 0.7421458943978863, 0.7471321695760599, 0.753731343283582, 0.7610398408061306,
    0.76740810314648, 0.7725338491295938, 0.7771626297577855, 0.7812567949554251, 0.7858986134802957,
    0.7890256738822022, 0.7929718875502008, 0.7967408445768355, 0.8018467495718222, 0.8067964442444019,
)  # fmt: skip
PROGRESSION_XP = (
    0.0, 0.01847840456172601, 0.02081163581974355, 0.024160136550546978, 0.029108986017138745,
    0.036887590648350246, 0.0507583712345433, 0.07453595273884014, 0.11704996473565571, 0.17909953770432294,
    0.25480449090205187, 0.33264942385807844, 0.41442590519821954, 0.49403949403949404, 0.5778823703813513,
    0.6261221999477034, 0.656281764586298, 0.6810218550418937, 0.7015328516442704, 0.7174494081710576,
    0.7286977843944303, 0.7371004909327723, 0.7443446629532795, 0.7513449678519879, 0.7585537128343045,
    0.7642151855635002, 0.7703376822716808, 0.7759810263044415, 0.7783345263660224, 0.7804561949196475,
)  # fmt: skip

#: The MiniHack action names BALROG's prompt offers (its ``ACTIONS`` keys); a task exposes the ones it has.
_MINIHACK_OFFERED = (
    *_COMPASS.values(),
    *("far " + word for word in _COMPASS.values()),
    "up", "down", "wait", "more", "apply", "close", "open", "eat", "force", "kick", "loot", "pickup",
    "pray", "puton", "quaff", "search", "zap",
)  # fmt: skip


class _NLETextEnv(TextEnv):
    """What NetHack and MiniHack share: the NLE env, seeding, AutoMore, BALROG's hybrid text, pickling by
    replay (NLE's C state cannot be pickled; the episode is replayed from its seeds and raw actions)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    max_observation_chars: ClassVar[int] = 24000
    nle_id: str = ""

    def __init__(self, *, max_steps: int, nle_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._nle_kwargs = {**_NLE_DEFAULTS, **(nle_kwargs or {})}
        self.max_steps = int(max_steps)
        self._game = self._make_game()
        self._index = {action: i for i, action in enumerate(self._game.unwrapped.actions)}
        super().__init__(**kwargs)
        self._seeds = (0, 0)
        self._trace: list[int] = []
        self._steps = 0
        self._last: dict[str, Any] = {}

    def _make_game(self) -> gym.Env:
        return gym.make(self.nle_id, **self._nle_kwargs).unwrapped

    # ------------------------------------------------------------------ the game
    def _seed_game(self) -> None:
        nle_env = self._game
        type(nle_env.nethack).set_initial_seeds(nle_env.nethack, *self._seeds, False, None)

    def _raw_step(self, index: int) -> tuple[dict[str, Any], float, bool, bool]:
        """One NLE step; an abort (NLE's step cap or stall stop) comes back as truncated, as BALROG's
        ``NLETimeLimit`` makes it (NLE 1.3 reports it as done, from ``info["end_status"]``)."""
        self._trace.append(index)
        obs, reward, terminated, truncated, info = self._game.step(index)
        aborted = bool(truncated) or info.get("end_status") == self._game.StepStatus.ABORTED
        return obs, float(reward), bool(terminated) and not aborted, aborted

    def _new_episode(self) -> tuple[str, dict[str, Any]]:
        self._seeds = tuple(int(s) for s in self.np_random.integers(0, 2**31 - 1, size=2))
        self._trace, self._steps = [], 0
        self._seed_game()
        obs, _ = self._game.reset()
        self._on_reset()
        obs, _, _, _, message = self._auto_more(obs, 0.0, False, False)
        return self._text(obs, message), self._game_info(obs, False)

    def _auto_more(
        self, obs: dict[str, Any], reward: float, terminated: bool, truncated: bool
    ) -> tuple[dict[str, Any], float, bool, bool, str]:
        """BALROG's AutoMore: answer every ``--More--`` inside the step, joining the message pieces."""
        pieces = []
        more = self._index.get(nethack.MiscAction.MORE)
        while True:
            lines = tty_text(obs["tty_chars"])
            pieces.append(text_message(lines))
            if terminated or truncated or more is None or not any("--More--" in line for line in lines):
                break
            obs, extra, terminated, truncated = self._raw_step(more)
            reward += extra
        return obs, reward, terminated, truncated, "\n".join(p for p in pieces if p)

    def _apply(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated = self._raw_step(self._action_index[action])
        obs, reward, terminated, truncated, message = self._auto_more(obs, reward, terminated, truncated)
        self._steps += 1
        aborted = truncated  # NLE's own stop: its step cap, or no game time passing for a while
        truncated = bool(truncated or self._steps >= self.max_steps) and not terminated
        self._after_step(obs, reward)
        return self._text(obs, message), reward, bool(terminated), truncated, self._game_info(obs, aborted)

    def _text(self, obs: dict[str, Any], message: str) -> str:
        """BALROG's hybrid text, the current turn's layout: inventory, then message, language observation,
        cursor and the tty screen without its message row."""
        self._last = obs
        x, y = int(obs["blstats"][0]), int(obs["blstats"][1])
        lines = tty_text(obs["tty_chars"])
        blocks = (
            ("inventory", text_inventory(obs["inv_strs"], obs["inv_letters"])),
            ("message", message),
            ("language observation", describe_map(obs["glyphs"], x, y)),
            ("cursor", text_cursor(obs["glyphs"], x, y, obs["tty_cursor"])),
            ("map", "\n".join(lines[1:])),
        )
        return "\n".join(f"{name}:\n{value}\n" for name, value in blocks)[: self.max_observation_chars]

    def _game_info(self, obs: dict[str, Any], aborted: bool) -> dict[str, Any]:
        blstats = obs["blstats"]
        return {"depth": int(blstats[12]), "experience_level": int(blstats[18]), "aborted": bool(aborted)}

    def _on_reset(self) -> None:
        """Reset the game's progression bookkeeping."""

    def _after_step(self, obs: dict[str, Any], reward: float) -> None:
        """Update the progression after an agent step."""

    # ------------------------------------------------------------------ pickling by replay
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_game"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._game = self._make_game()
        if self._trace or self._last:
            trace, self._trace = self._trace, []
            self._seed_game()
            self._game.reset()
            for index in trace:
                self._raw_step(index)

    def close(self) -> None:
        self._game.close()


class NetHackTextEnv(_NLETextEnv):
    """``NetHackChallenge-v0`` with BALROG's text, its 86 action names plus the raw letter keys, ``esc`` for an
    invalid answer, and progression = the best of the depth and experience-level tables reached.

    Args:
        max_steps: agent actions before the episode is truncated (NetHack's own stall stop usually ends it
            first).
        **kwargs: :class:`~verlog.envs.base.TextEnv` options (invalid-action policy).

    Observation: BALROG's text for text models, blocks in its order: ``inventory`` (``a: <item>``),
    ``message`` (every ``--More--`` answered inside the step), ``language observation`` (monsters, objects and
    features with distance and compass words), ``cursor`` and ``map`` (the terminal screen with its two
    status lines).

    Reward: NLE's NetHack challenge reward: the change in the in-game score.

    Episode end: terminated when the character dies or the game ends; truncated by NLE's stall stop (150 NLE
    steps without game time passing) or after ``max_steps`` actions.

    Progression: the highest value reached in the episode of BALROG's tables for the dungeon depth (``Dlvl``)
    and the experience level (``Xp``): the share of human games that ascended after reaching it.
    """

    nle_id = "NetHackChallenge-v0"
    default_action: ClassVar[str] = "esc"

    def __init__(self, *, max_steps: int = 100_000, **kwargs: Any) -> None:
        names = _names_by_value()
        useful = [names[int(a)] for a in nethack.USEFUL_ACTIONS]
        letters = [chr(c) for c in (*range(ord("a"), ord("z") + 1), *range(ord("A"), ord("Z") + 1))]
        game_actions = gym.make(self.nle_id, observation_keys=_OBS_KEYS).unwrapped
        by_value = {int(a): i for i, a in enumerate(game_actions.actions)}
        game_actions.close()
        table = {name: by_value[int(a)] for name, a in zip(useful, nethack.USEFUL_ACTIONS, strict=True)}
        table.update({c: by_value[ord(c)] for c in letters if ord(c) in by_value and c not in table})
        self.actions = tuple(table)
        self._action_index = table
        self._best = 0.0
        nle_kwargs = {"max_episode_steps": 10**9, "no_progress_timeout": 150}  # BALROG config.yaml
        super().__init__(max_steps=max_steps, nle_kwargs=nle_kwargs, **kwargs)

    def _on_reset(self) -> None:
        self._best = 0.0

    def _after_step(self, obs: dict[str, Any], reward: float) -> None:
        depth, level = int(obs["blstats"][12]), int(obs["blstats"][18])
        if 1 <= depth <= len(PROGRESSION_DLVL):
            self._best = max(self._best, PROGRESSION_DLVL[depth - 1])
        if 1 <= level <= len(PROGRESSION_XP):
            self._best = max(self._best, PROGRESSION_XP[level - 1])

    def _progression(self) -> float:
        return self._best

    def _goal(self) -> str:
        return "Descend as deep as possible and gain experience levels; the amulet is far below."

    def _instruction(self) -> str:
        return (
            "You are playing NetHack, a roguelike: explore the dungeon, fight monsters, find items and descend "
            "the stairs (> then 'down'). Your progress is scored by the deepest dungeon level and the highest "
            "experience level you reach.\nAnswer with exactly one action. The main actions: the eight "
            "directions (north, northeast, ...), 'far <direction>', up, down, wait, search, pickup, eat, "
            "open, kick, apply, wield, wear, quaff, read, zap, pray, esc, and single letters for inventory "
            "items or menu answers.\nTip: there is no point in outputting the same action over and over if "
            f"nothing changes.\n\nValid actions: {', '.join(self.offered_actions)}"
        )


class MiniHackTextEnv(_NLETextEnv):
    """A MiniHack task with BALROG's settings and text; success = the last step's reward reaches 1.

    Args:
        task: the task, one of BALROG's (:data:`MINIHACK_TASKS`).
        max_steps: agent actions before the episode is truncated.
        **kwargs: :class:`~verlog.envs.base.TextEnv` options (invalid-action policy).

    Observation: BALROG's text, as NetHack's: ``inventory``, ``message``, ``language observation``,
    ``cursor`` and ``map`` (the terminal screen with its two status lines).

    Reward: MiniHack's: 1 on reaching the goal, -0.01 for each step in which no game time passes (BALROG's
    ``penalty_step``), else 0.

    Episode end: terminated when the goal is reached or the character dies; truncated after ``max_steps``
    actions.

    Progression: 1 when the last step's reward reaches 1 (a win), else 0.
    """

    default_action: ClassVar[str] = "north"
    actions: tuple[str, ...] = ()

    def __init__(self, *, task: str = "Corridor-R3", max_steps: int = 100, **kwargs: Any) -> None:
        if task not in MINIHACK_TASKS:
            raise ValueError(
                f"task={task!r} is not a BALROG MiniHack task; choose one of {list(MINIHACK_TASKS)}"
            )
        from verlog.extras import NLE_INSTALL, MissingPackage, missing

        if missing("minihack"):
            raise MissingPackage(
                f"verlog's MiniHack envs need minihack, which is not installed: {NLE_INSTALL}"
            )
        import minihack  # noqa: F401  (registers the MiniHack-* ids)

        self.task = task
        self.nle_id = f"MiniHack-{task}-v0"
        nle_kwargs = {"penalty_step": -0.01, "penalty_time": 0.0, "penalty_mode": "constant"}
        nle_kwargs.update(autopickup=False, max_episode_steps=10**9)
        self._nle_kwargs = {**_NLE_DEFAULTS, **nle_kwargs}
        names = _names_by_value()
        game = self._make_game()
        table = {}
        for i, action in enumerate(game.actions):
            name = names[int(action)]
            if name in _MINIHACK_OFFERED and name not in table:
                table[name] = i
        game.close()
        self.actions = tuple(table)
        self._action_index = table
        self._won = False
        super().__init__(max_steps=max_steps, nle_kwargs=nle_kwargs, **kwargs)

    def _seed_game(self) -> None:
        self._game.seed(*self._seeds, reseed=False)

    def _on_reset(self) -> None:
        self._won = False

    def _after_step(self, obs: dict[str, Any], reward: float) -> None:
        self._won = reward >= 1.0

    def _progression(self) -> float:
        return 1.0 if self._won else 0.0

    def _goal(self) -> str:
        task = MINIHACK_TASKS[self.task]
        return task[:1].upper() + task[1:] + "."

    def _instruction(self) -> str:
        return (
            f"You are playing MiniHack {self.task}, a small NetHack level. Your goal: "
            f"{MINIHACK_TASKS[self.task]}. The stairs down are shown as '>'.\nAnswer with exactly one action. "
            "Tip: there is no point in outputting the same action over and over if nothing changes.\n\n"
            f"Valid actions: {', '.join(self.offered_actions)}"
        )
