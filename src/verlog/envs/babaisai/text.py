"""The observation text: the active rules, then every object's offset from the object the agent controls.

The default reproduces the BALROG wrapper's format exactly, quirks included, so that scores compare:

* rules are ``<noun> is <property>``, in parse order; ``<noun> is <noun>`` rules are not listed;
* the reference is the first cell (row-major) whose top object is of the kind named by the last
  ``<noun> is you`` rule; offsets are measured from it;
* listed are the top objects that are balls, walls, keys, doors or word blocks (``rule `<word>```), never
  baba and never the border; the reference itself, when it is of a listed kind, gives an empty line;
* "step" or "steps" is chosen from the *signed* offset, so left and up always read "step".

``colors=True`` is the fixed format: things carry their colour ("red ball"), every top object but the
border and the reference is listed (baba too), noun-is-noun rules are listed, and "steps" is plural
whenever the distance is more than one.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import compress
from operator import itemgetter, ne
from typing import Any

from verlog.envs.babaisai.engine import (
    BABA,
    BORDER,
    COLOR_NAMES,
    KIND_MASK,
    KIND_NAMES,
    NOUN_OFFSET,
    NOUN_WORDS,
    OBJ_MASK,
    PROPERTY_WORDS,
    YOU,
    Board,
    Outcome,
    Rules,
    State,
    step,
)

__all__ = ["Observer", "describe", "reference_cell", "rule_lines"]


def rule_lines(state: State, colors: bool = False) -> list[str]:
    """The active rules as text lines, in parse order."""
    return _rule_lines(state.rules.pairs, colors)


def _rule_lines(pairs: tuple[tuple[int, int], ...], colors: bool) -> list[str]:
    return [f"{KIND_NAMES[a]} is {KIND_NAMES[b]}" for a, b in pairs if colors or b in PROPERTY_WORDS]


def reference_cell(state: State) -> int | None:
    """The cell offsets are measured from: the first top object of the last ``X is you`` rule's kind
    (earlier ``is you`` rules are tried when that kind has no top object); None when nothing is YOU."""
    nouns = [a for a, b in state.rules.pairs if b == YOU]
    for noun in reversed(nouns):
        kind = noun - NOUN_OFFSET
        for i, cell in enumerate(state.cells):
            if cell and cell & KIND_MASK == kind:
                return i
    return None


def describe(board: Board, state: State, colors: bool = False, anchor: int | None = None) -> str:
    """The full observation text. ``anchor`` is the cell to measure from when nothing is YOU."""
    return Observer(board, state, colors).observe(state, anchor)


class Observer:
    """The observation text of one episode's successive states, kept up to date at a small cost per step.

    Why a class: after every step the text env needs the YOU cells (the engine's movers for the next step,
    and the anchor), the reference cell, and one line per listed object. Computed one by one, that took
    three scans of the grid on top of the engine's own and an f-string per object: the text layer cost five
    times the engine step it described. Here:

    * :meth:`step` hands the engine the YOU cells already known, so the engine does not scan for them;
    * after such a step only the lines of the YOU cells along the step's direction can have changed (every
      move of a step runs in that direction); when no listed object is among the changed cells (the usual
      case: the agent walked) the YOU cells are updated from those few cells alone;
    * otherwise one scan of the cells that can change yields the YOU cells and the listed objects;
    * texts are cached by reference cell until the listed objects or the rules change; object lines by
      (object, offset), shared by every episode on boards of one width (at most names x offsets: under
      6,000 lines on the 13x9 boards, ~1,700 after 200k random steps); the rules text by rule list.

    ``state`` is the first state; :meth:`observe` takes it or any state reached from it through
    :func:`~verlog.envs.babaisai.engine.step`. That is what lets the scan skip the border for good: a cell
    holding a lone border object never changes, as the border is STOP and nothing else, never pushed,
    pulled, transformed or destroyed, and STOP keeps every mover out of it.
    """

    __slots__ = (
        "_cells",
        "_dynamic",
        "_get",
        "_lines",
        "_listed",
        "_move",
        "_next",
        "_pad",
        "_prefix",
        "_priority",
        "_rules",
        "_texts",
        "board",
        "colors",
        "state",
        "you",
    )

    def __init__(self, board: Board, state: State, colors: bool = False) -> None:
        self.board = board
        self.colors = bool(colors)
        #: The state observed last (read-only), and its YOU cells, row-major: ``engine.you_cells`` of it.
        self.state: State | None = None
        self.you: list[int] = []
        self._dynamic = [i for i, cell in enumerate(state.cells) if cell != BORDER]
        self._get = _getter(self._dynamic)
        self._lines = _line_table(board.width, self.colors)
        self._pad = _padded(board.width, len(state.cells))
        self._next: State | None = None  # what step() made from it
        self._move = 0  # and the cell offset of that step's direction
        self._cells: tuple[int, ...] = ()
        self._rules: Rules | None = None
        self._listed: list[tuple[int, _Row]] = []  # (padded cell, its object's lines), row-major
        self._texts: dict[int, str] = {}  # padded reference cell -> text, for the listed objects above
        self._prefix = ""
        self._priority: tuple[int, ...] = ()

    def __deepcopy__(self, memo: dict[int, Any]) -> Observer:
        """A copy that observes on from the same state. What it holds is immutable (board, states, rules,
        texts) or the line table every episode shares, so the copy shares it; only the three containers a
        scan replaces or a text fills are copied. Deep-copying the line table was most of the cost of
        copying a BabaIsAI env, which one-step branches do for every state played."""
        clone = Observer.__new__(Observer)
        memo[id(self)] = clone
        for name in self.__slots__:
            setattr(clone, name, getattr(self, name))
        clone.you, clone._listed, clone._texts = list(self.you), list(self._listed), dict(self._texts)
        return clone

    def step(self, action: int) -> Outcome:
        """:func:`~verlog.envs.babaisai.engine.step` from the state last observed, given its YOU cells."""
        if self.state is None:
            raise RuntimeError("observe a state before stepping from it")
        out = step(self.board, self.state, action, self.you)
        # an idle step returns the state itself, which observe() answers before it looks at _next
        self._next = out.state if action else None
        self._move = self.board.offsets()[action - 1] if action else 0  # the engine's own direction
        return out

    def observe(self, state: State, anchor: int | None = None) -> str:
        """The text of ``state``, as :func:`describe` gives it; also sets :attr:`you`."""
        if state is not self.state:
            if not self._follow(state):
                self._scan(state)
            self.state, self._next = state, None
        movers = self.you
        if not movers:
            ref = anchor if anchor is not None else 0
        elif len(self._priority) == 1:
            ref = movers[0]  # all YOU cells hold the one YOU kind: the first is the reference
        else:
            ref = _first_of(self._cells, movers, self._priority)
        width = self.board.width
        origin = ref // width * 2 * width + ref % width  # not _pad[ref]: describe() takes any anchor
        text = self._texts.get(origin)
        if text is None:
            if self.colors:
                body = [row[p - origin] for p, row in self._listed if p != origin]
            else:
                body = [row[p - origin] for p, row in self._listed]
            text = self._texts[origin] = self._prefix + "\n".join(body)
        return text

    def _follow(self, state: State) -> bool:
        """Bring :attr:`you` up to date from the cells that changed; False when a scan is needed instead
        (the rules or a listed object changed, or the state is not known to follow the last one)."""
        cells, old, rules = state.cells, self._cells, state.rules
        if rules is not self._rules:
            return False
        if state is not self._next or rules.transform or self.board.tracks_facing:
            return cells == old  # transforms and MOVE objects reach beyond the lines of the YOU cells
        lines, you = self._lines, rules.you
        movers: list[int] = []
        for i in self._candidates(cells, old):
            before, after = old[i] & OBJ_MASK, cells[i] & OBJ_MASK
            if before != after and (
                (before and lines[before] is not None) or (after and lines[after] is not None)
            ):
                return False
            if after and you[after & KIND_MASK]:
                movers.append(i)
        self.you, self._cells = movers, cells
        return True

    def _candidates(self, cells: tuple[int, ...], old: tuple[int, ...]) -> tuple[int, ...] | list[int]:
        """The last YOU cells and every cell that differs between ``old`` and its successor ``cells``,
        ascending. Every move of a step runs along the step's direction, so only the lines of the YOU cells
        in that direction are compared, at C speed."""
        d, width, size, movers = self._move, self.board.width, len(cells), self.you
        stride = 1 if d in (1, -1) else width
        if len(movers) == 1:  # the usual case: the line but (m, m + d) is unchanged
            m = movers[0]
            a, b = (m, m + d) if d > 0 else (m + d, m)
            first = m - m % width if stride == 1 else m % width
            last = first + width if stride == 1 else size
            if (
                0 <= a
                and b < size
                and cells[first:a:stride] == old[first:a:stride]
                and cells[b + stride : last : stride] == old[b + stride : last : stride]
            ):
                return a, b
        changed = set(movers)
        for m in movers:
            first = m - m % width if stride == 1 else m % width
            line = range(first, first + width) if stride == 1 else range(first, size, width)
            now, before = cells[line.start : line.stop : stride], old[line.start : line.stop : stride]
            changed.update(compress(line, map(ne, now, before)))
        return sorted(changed)

    def _scan(self, state: State) -> None:
        """Find the YOU cells and the listed objects in one pass over the cells that can change."""
        cells, rules = state.cells, state.rules
        if rules is not self._rules:
            self._rules = rules
            self._prefix = _prefix(rules.pairs, self.colors)
            self._priority = _you_priority(rules.pairs)
        you, lines, pad = rules.you, self._lines, self._pad
        movers: list[int] = []
        listed: list[tuple[int, _Row]] = []
        for i in compress(self._dynamic, self._get(cells)):
            top = cells[i] & OBJ_MASK
            if you[top & KIND_MASK]:
                movers.append(i)
            row = lines[top]
            if row is not None:
                listed.append((pad[i], row))
        self.you, self._cells, self._listed = movers, cells, listed
        self._texts = {}


def _getter(indices: list[int]) -> itemgetter[Any]:
    """A C-speed ``lambda cells: tuple(cells[i] for i in indices)`` (for ``compress``; a one-index
    itemgetter gives no tuple, so that index is asked twice, and compress stops at the shorter input)."""
    if len(indices) >= 2:
        return itemgetter(*indices)
    return itemgetter(*indices, *indices) if indices else itemgetter(slice(0))


def _first_of(cells: tuple[int, ...], movers: list[int], priority: tuple[int, ...]) -> int:
    """:func:`reference_cell`, searched among the YOU cells: the only cells whose top is of a YOU kind."""
    for kind in priority:
        for i in movers:
            if cells[i] & KIND_MASK == kind:
                return i
    raise AssertionError("a YOU cell whose kind has no `is you` rule")


@lru_cache(maxsize=1024)
def _prefix(pairs: tuple[tuple[int, int], ...], colors: bool) -> str:
    """Everything before the first object line, for one rule list."""
    rules = "\n".join(_rule_lines(pairs, colors))
    return f"Active rules:\n{rules}\n\nObjects on the map:\n"


@lru_cache(maxsize=1024)
def _you_priority(pairs: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    """The kinds :func:`reference_cell` tries, in its order, each once."""
    return tuple(dict.fromkeys(a - NOUN_OFFSET for a, b in reversed(pairs) if b == YOU))


@lru_cache(maxsize=64)
def _padded(width: int, size: int) -> tuple[int, ...]:
    """Cell index -> ``y * 2 * width + x``, the key of offsets in a :class:`_Row`."""
    return tuple(i // width * 2 * width + i % width for i in range(size))


class _Row(dict[int, str]):
    """The lines of one object name by offset ``dy * 2 * width + dx`` (one key per (dx, dy), since
    ``|dx| < width``) from the reference; each line is made the first time it is asked for."""

    __slots__ = ("colors", "name", "width")

    def __init__(self, name: str, width: int, colors: bool) -> None:
        super().__init__()
        self.name, self.width, self.colors = name, width, colors

    def __missing__(self, offset: int) -> str:
        dy = (offset + self.width) // (2 * self.width)
        line = self[offset] = _offset(self.name, offset - dy * 2 * self.width, dy, self.colors)
        return line


class _Lines(dict[int, "_Row | None"]):
    """Top object -> the :class:`_Row` of its name, or None when the text does not list it."""

    __slots__ = ("colors", "rows", "width")

    def __init__(self, width: int, colors: bool) -> None:
        super().__init__()
        self.width, self.colors = width, colors
        self.rows: dict[str, _Row] = {}

    def __missing__(self, obj: int) -> _Row | None:
        kind = obj & KIND_MASK
        row = None
        if kind != BORDER and (kind != BABA or self.colors):
            name = _name(obj, self.colors)
            row = self.rows.get(name)
            if row is None:
                row = self.rows[name] = _Row(name, self.width, self.colors)
        self[obj] = row
        return row


@lru_cache(maxsize=64)
def _line_table(width: int, colors: bool) -> _Lines:
    """The line cache of one board width and text format, shared by every episode and env."""
    return _Lines(width, colors)


def _name(obj: int, colors: bool) -> str:
    kind = obj & KIND_MASK
    if kind >= NOUN_WORDS[0]:
        return f"rule `{KIND_NAMES[kind]}`"
    if colors:
        return f"{COLOR_NAMES[obj >> 5 & 7]} {KIND_NAMES[kind]}".strip()
    return KIND_NAMES[kind]


def _offset(name: str, dx: int, dy: int, colors: bool) -> str:
    def steps(v: int) -> str:
        return "steps" if (abs(v) if colors else v) > 1 else "step"

    horizontal = (
        f"{dx} {steps(dx)} to the right" if dx > 0 else f"{-dx} {steps(dx)} to the left" if dx else ""
    )
    vertical = f"{dy} {steps(dy)} down" if dy > 0 else f"{-dy} {steps(dy)} up" if dy else ""
    if horizontal and vertical:
        return f"{name} {horizontal} and {vertical}"
    if horizontal or vertical:
        return f"{name} {horizontal or vertical}"
    return ""
