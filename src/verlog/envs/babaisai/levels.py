"""The 40 BabaIsAI level families of the BALROG benchmark, as data plus four generators.

A family name reads as its recipe: ``<layout-and-goal>[-<distractors>]``. Layouts and goals:

* ``goto_win`` / ``make_win``: one 8x8 room; the win rule is intact, or its noun block lies loose in the room.
* ``two_room-goto_win``: 13x9, a column of walls divides two rooms and ``wall is stop`` is already broken;
  the objects are in the left room. ``two_room-break_stop-goto_win``: ``wall is stop`` holds and the objects
  are in the right room. ``two_room-maybe_break_stop-goto_win``: it holds and the objects are anywhere.
  ``two_room-make_win`` / ``two_room-break_stop-make_win``: as their ``goto_win`` twins, with the win noun
  loose in the right room.
* ``two_room-make_you[-make_win]``: the objects are beyond the wall; the agent must make another object YOU
  (and, with ``-make_win``, rebuild the win rule). ``two_room-make_wall_win``: break ``wall is stop``, make
  ``wall is win`` and touch a wall.

Distractors: ``distr_obj`` adds a second object; ``distr_rule`` adds a noun block for it, placed so that it
cannot make that object win; ``distr_obj_rule`` is both; ``irrelevant_rule`` makes the noun name a third
object that is not on the map; ``distr_win_rule`` adds an intact ``<third object> is win`` rule.

Every draw comes from the ``rng`` passed in (the env's seeded ``np_random``): one seed, one level. Positions
are drawn uniformly among the empty cells of an area.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from verlog.envs.babaisai.engine import (
    BABA,
    BALL,
    BORDER,
    DEFAULT_COLOR,
    DOOR,
    IS,
    KEY,
    MOVE,
    NOUN_OFFSET,
    STOP,
    WALL,
    WIN,
    YOU,
    Board,
    State,
    make_object,
    make_state,
)
from verlog.envs.babaisai.render import SYMBOLS

__all__ = ["LEVELS", "Family", "Level", "family", "generate", "level_from_map"]

#: The 40 families, in the order of BALROG's task list.
LEVELS: tuple[str, ...] = (
    "make_win-distr_obj_rule",
    "goto_win-distr_obj_rule",
    "goto_win",
    "goto_win-distr_obj",
    "goto_win-distr_rule",
    "goto_win-distr_obj-irrelevant_rule",
    "make_win-distr_obj",
    "make_win-distr_rule",
    "make_win",
    "make_win-distr_obj-irrelevant_rule",
    "two_room-goto_win",
    "two_room-goto_win-distr_obj_rule",
    "two_room-goto_win-distr_rule",
    "two_room-goto_win-distr_obj",
    "two_room-goto_win-distr_obj-irrelevant_rule",
    "two_room-goto_win-distr_win_rule",
    "two_room-break_stop-goto_win-distr_obj_rule",
    "two_room-break_stop-goto_win-distr_obj",
    "two_room-break_stop-goto_win-distr_rule",
    "two_room-break_stop-goto_win-distr_obj-irrelevant_rule",
    "two_room-break_stop-goto_win",
    "two_room-maybe_break_stop-goto_win-distr_obj_rule",
    "two_room-maybe_break_stop-goto_win",
    "two_room-maybe_break_stop-goto_win-distr_obj",
    "two_room-maybe_break_stop-goto_win-distr_rule",
    "two_room-maybe_break_stop-goto_win-distr_obj-irrelevant_rule",
    "two_room-make_win-distr_obj_rule",
    "two_room-make_win-distr_rule",
    "two_room-make_win",
    "two_room-make_win-distr_obj-irrelevant_rule",
    "two_room-make_win-distr_obj",
    "two_room-make_win-distr_win_rule",
    "two_room-break_stop-make_win-distr_obj_rule",
    "two_room-break_stop-make_win-distr_rule",
    "two_room-break_stop-make_win",
    "two_room-break_stop-make_win-distr_obj-irrelevant_rule",
    "two_room-break_stop-make_win-distr_obj",
    "two_room-make_you",
    "two_room-make_you-make_win",
    "two_room-make_wall_win",
)

_NAMES = (BALL, KEY, DOOR)
_COLORS = (1, 2, 3)  # red, blue, green
_GREY, _WHITE = 5, 4
_DISTRACTORS = {
    "": (False, False, False, False),
    "distr_obj": (True, False, False, False),
    "distr_rule": (False, True, False, False),
    "distr_obj_rule": (True, True, False, False),
    "distr_obj-irrelevant_rule": (True, True, True, False),
    "distr_win_rule": (True, True, False, True),
}
# Areas as inclusive (x0, y0, x1, y1) rectangles.
_ROOM_FREE = (1, 2, 6, 6)
_ROOM_LOOSE_NOUN = (2, 2, 5, 5)
_ROOM_DISTR_NOUN = ((4, 6), (5, 6), (6, 6), (4, 1), (5, 1), (6, 1), *((6, y) for y in range(1, 7)))
_TWO_AREAS = {"left": (1, 1, 4, 7), "right": (7, 2, 10, 7), "anywhere": (1, 2, 11, 7)}
_TWO_LEFT_PUSHABLE = (2, 3, 5, 5)
_TWO_RIGHT_PUSHABLE = (7, 3, 10, 5)
_NARROW_LEFT_PUSHABLE = (2, 3, 4, 5)
_NARROW_RIGHT_PUSHABLE = (8, 3, 10, 5)
#: Cells of the right room from which a block cannot be pushed back into play (right column, bottom row).
_RIGHT_UNPUSHABLE = (*((11, y) for y in range(2, 8)), (10, 7), (9, 7), (8, 7))


@dataclass(frozen=True)
class Family:
    """The recipe of one family, read from its name."""

    name: str
    layout: str  # "room", "two_room", "make_you" or "make_wall_win"
    break_win: bool = False
    stop_intact: bool = True
    area: str = "left"
    distr_obj: bool = False
    distr_rule: bool = False
    irrelevant_rule: bool = False
    distr_win_rule: bool = False


@dataclass(frozen=True)
class Level:
    """A generated level: the board, the first state, and what it was made of (for logs, not for agents)."""

    family: str
    board: Board
    state: State
    win_object: str
    target_plan: str


def family(name: str) -> Family:
    """The :class:`Family` named ``name`` (one of :data:`LEVELS`)."""
    if name not in LEVELS:
        raise ValueError(f"unknown BabaIsAI level family {name!r}; choose one of verlog's LEVELS")
    if name in ("two_room-make_you", "two_room-make_you-make_win"):
        make_win = name.endswith("make_win")
        return Family(name, "make_you", make_win, area="right", distr_obj=True, distr_rule=True)
    if name == "two_room-make_wall_win":
        return Family(
            name, "make_wall_win", area="right", distr_obj=True, distr_rule=True, irrelevant_rule=True
        )
    parts = name.split("-")
    two_room = parts[0] == "two_room"
    if two_room:
        parts = parts[1:]
    mode = parts.pop(0) if parts[0] in ("break_stop", "maybe_break_stop") else ""
    goal = parts.pop(0)
    obj, rule, irrelevant, win_rule = _DISTRACTORS["-".join(parts)]
    common = dict(distr_obj=obj, distr_rule=rule, irrelevant_rule=irrelevant, distr_win_rule=win_rule)
    if not two_room:
        return Family(name, "room", break_win=goal == "make_win", **common)
    area = {"": "left", "break_stop": "right", "maybe_break_stop": "anywhere"}[mode]
    return Family(name, "two_room", goal == "make_win", stop_intact=bool(mode), area=area, **common)


class _Builder:
    """A level under construction: per-cell stacks, a border, and uniform draws from ``rng``."""

    def __init__(self, width: int, height: int, rng: np.random.Generator) -> None:
        self.width, self.height, self.rng = width, height, rng
        self.stacks: list[list[int]] = [[] for _ in range(width * height)]
        for x in range(width):
            self.put((x, 0), BORDER)
            self.put((x, height - 1), BORDER)
        for y in range(1, height - 1):
            self.put((0, y), BORDER)
            self.put((width - 1, y), BORDER)

    def put(self, pos: tuple[int, int], obj: int) -> None:
        self.stacks[pos[1] * self.width + pos[0]].append(obj)

    def put_rule(self, pos: tuple[int, int], *words: int) -> None:
        for k, word in enumerate(words):
            self.put((pos[0] + k, pos[1]), word)

    def move_top(self, src: tuple[int, int], dst: tuple[int, int]) -> None:
        obj = self.stacks[src[1] * self.width + src[0]].pop()
        self.put(dst, obj)

    def empty(self, pos: tuple[int, int]) -> bool:
        return not self.stacks[pos[1] * self.width + pos[0]]

    def random_empty(self, area: tuple[int, int, int, int]) -> tuple[int, int]:
        x0, y0, x1, y1 = area
        cells = [(x, y) for y in range(y0, y1 + 1) for x in range(x0, x1 + 1) if self.empty((x, y))]
        return self.pick(cells)

    def pick(self, options: Sequence[tuple[int, int]]) -> tuple[int, int]:
        return options[int(self.rng.integers(len(options)))]

    def divider(self) -> None:
        """The column of (rule-bound) walls between the two rooms."""
        for y in range(1, self.height - 1):
            self.put((self.width // 2, y), make_object(WALL, _GREY))

    def finish(self) -> tuple[Board, State]:
        board = Board(self.width, self.height, tracks_facing=any(s == [MOVE] for s in self.stacks))
        return board, make_state(board, self.stacks)


def _noun(thing: int) -> int:
    return thing + NOUN_OFFSET


def _objects(rng: np.random.Generator) -> list[int]:
    """Three objects of distinct kinds (ball/key/door), colours drawn with replacement."""
    kinds = rng.permutation(3)
    colors = rng.integers(3, size=3)
    return [make_object(_NAMES[k], _COLORS[c]) for k, c in zip(kinds, colors, strict=True)]


def generate(name: str, rng: np.random.Generator) -> Level:
    """Generate one level of family ``name``, drawing only from ``rng``."""
    spec = family(name)
    objs = _objects(rng)
    build = {"room": _room, "two_room": _two_room, "make_you": _make_you, "make_wall_win": _make_wall_win}
    b, plan = build[spec.layout](spec, objs, rng)
    board, state = b.finish()
    return Level(name, board, state, _name(objs[0]), plan)


def _place_objects(
    b: _Builder, objs: list[int], baba_area: tuple[int, int, int, int], area: tuple[int, int, int, int]
) -> None:
    """Baba first, then the objects, each on an empty cell of its area."""
    b.put(b.random_empty(baba_area), make_object(BABA, _WHITE))
    for obj in objs:
        b.put(b.random_empty(area), obj)


def _room(spec: Family, objs: list[int], rng: np.random.Generator) -> tuple[_Builder, str]:
    b = _Builder(8, 8, rng)
    win_noun = _noun(objs[0] & 31)
    b.put_rule((1, 6), _noun(BABA), IS, YOU)
    b.put_rule((1, 1), win_noun, IS, WIN)
    if spec.break_win:
        b.move_top((1, 1), b.random_empty(_ROOM_LOOSE_NOUN))
    if spec.distr_rule:
        b.put(b.pick(_ROOM_DISTR_NOUN), _noun(objs[2 if spec.irrelevant_rule else 1] & 31))
    _place_objects(b, objs[: 1 + spec.distr_obj], _ROOM_FREE, _ROOM_FREE)
    name = _name(objs[0])
    return b, (f"make[{name} is win], goto[{name}]" if spec.break_win else f"goto[{name}]")


def _two_room(spec: Family, objs: list[int], rng: np.random.Generator) -> tuple[_Builder, str]:
    b = _Builder(13, 9, rng)
    b.divider()
    b.put_rule((1, 7), _noun(BABA), IS, YOU)
    b.put_rule((1, 2), _noun(WALL), IS, STOP)
    b.put_rule((9, 1), _noun(objs[0] & 31), IS, WIN)
    if spec.distr_win_rule:
        # laid down before the random draws, so that nothing is drawn under it
        b.put_rule((9, 4), _noun(objs[2] & 31), IS, WIN)
    if spec.distr_rule:
        if spec.irrelevant_rule:
            b.put(b.random_empty(_TWO_RIGHT_PUSHABLE), _noun(objs[2] & 31))
        elif spec.distr_obj:
            b.put(b.pick([p for p in _RIGHT_UNPUSHABLE if b.empty(p)]), _noun(objs[1] & 31))
        else:
            b.put(b.random_empty(_TWO_RIGHT_PUSHABLE), _noun(objs[1] & 31))
    if not spec.stop_intact:
        target = b.random_empty(_TWO_LEFT_PUSHABLE)
        b.move_top(b.pick(((2, 2), (3, 2))), target)  # the `is` or the `stop` block
    if spec.break_win:
        b.move_top((9, 1), b.random_empty(_TWO_RIGHT_PUSHABLE))
    _place_objects(b, objs[: 1 + spec.distr_obj], _TWO_LEFT_PUSHABLE, _TWO_AREAS[spec.area])
    name = _name(objs[0])
    steps = []
    obj_x = next(i for i, s in enumerate(b.stacks) if objs[0] in s) % b.width
    if spec.stop_intact and (spec.break_win or obj_x > b.width // 2):
        steps.append("break[wall is stop]")
    if spec.break_win:
        steps.append(f"make[{name} is win]")
    return b, ", ".join([*steps, f"goto[{name}]"])


def _make_you(spec: Family, objs: list[int], rng: np.random.Generator) -> tuple[_Builder, str]:
    b = _Builder(13, 9, rng)
    b.divider()
    b.put_rule((1, 6), _noun(BABA), IS, YOU)  # one row up, so `baba` can be pushed out of the rule
    b.put_rule((1, 1), _noun(WALL), IS, STOP)
    b.put_rule((9, 1), _noun(objs[0] & 31), IS, WIN)
    b.put(b.random_empty(_NARROW_LEFT_PUSHABLE), _noun(objs[1] & 31))
    if spec.break_win:
        b.move_top((9, 1), b.random_empty(_NARROW_RIGHT_PUSHABLE))
    _place_objects(b, objs[:2], _NARROW_LEFT_PUSHABLE, _TWO_AREAS["right"])
    name, you = _name(objs[0]), _name(objs[1])
    make_win = [f"make[{name} is win]"] if spec.break_win else []
    return b, ", ".join([f"make[{you} is you]", *make_win, f"goto[{name}]"])


def _make_wall_win(spec: Family, objs: list[int], rng: np.random.Generator) -> tuple[_Builder, str]:
    b = _Builder(13, 9, rng)
    b.divider()
    b.put_rule((1, 7), _noun(BABA), IS, YOU)
    b.put_rule((2, 2), _noun(WALL), IS, STOP)
    b.put_rule((9, 1), _noun(objs[0] & 31), IS, WIN)
    b.put(b.random_empty(_NARROW_RIGHT_PUSHABLE), _noun(objs[2] & 31))
    b.move_top((9, 1), b.pick(_RIGHT_UNPUSHABLE))  # the win noun, where it cannot be pushed back
    _place_objects(b, objs[:2], _NARROW_LEFT_PUSHABLE, _TWO_AREAS["right"])
    return b, "break[wall is stop], make[wall is win], goto[wall]"


def _name(obj: int) -> str:
    return {BALL: "ball", KEY: "key", DOOR: "door"}[obj & 31]


def level_from_map(text: str) -> tuple[Board, State]:
    """Build a level from a map drawn with :data:`~verlog.envs.babaisai.render.SYMBOLS`, one character per
    cell (``.`` empty), e.g. for tests or hand-made puzzles. Things get their usual colour."""
    rows = [row.strip() for row in text.strip().splitlines()]
    if not rows or len({len(r) for r in rows}) != 1:
        raise ValueError("the map must be a non-empty rectangle")
    kinds = {char: kind for kind, char in SYMBOLS.items()}
    stacks: list[list[int]] = []
    for row in rows:
        for char in row:
            if char == ".":
                stacks.append([])
            elif char in kinds:
                kind = kinds[char]
                stacks.append([make_object(kind, DEFAULT_COLOR.get(kind, 0))])
            else:
                raise ValueError(f"unknown map character {char!r}")
    board = Board(len(rows[0]), len(rows), tracks_facing=any(s == [MOVE] for s in stacks))
    return board, make_state(board, stacks)
