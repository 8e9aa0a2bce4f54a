"""The BabaIsAI game engine: a grid of object stacks, rules read from word blocks, and one step of play.

The engine is pure and small on purpose: a :class:`State` is a tuple of ints (one per cell) plus the rules
it implies, so the solver can hash, compare and copy states cheaply, and the env is trivially picklable.

Encoding. Every object is one int: ``kind | colour << 5 | facing << 8`` (10 bits). A cell is a stack of
objects packed into one int, the top object in the lowest 10 bits (``cell & OBJ_MASK``); ``0`` is an empty
cell. All logic (rules, pushing, stopping, winning, listing) reads only the top object of a cell.

Semantics (see the package docstring for the choices made where the issue is silent):

* The border (kind ``BORDER``) is always STOP and never changes. Word blocks are always PUSH.
* Rules are ``NOUN IS PROPERTY`` or ``NOUN IS NOUN``, read left-to-right or top-to-bottom through every
  ``is`` block, in row-major order of the ``is`` blocks, horizontal before vertical.
* A step in a direction moves every YOU object once (the one furthest ahead first, so a line of YOU
  objects moves together), then every MOVE object. A mover pushes a PUSH object in front of it (a chain
  moves only if its last object can move), is blocked by STOP, drags a PULL object behind it, and an OPEN
  object meeting a SHUT one destroys both.
* Win and defeat are decided with the rules in force at the start of the step: a YOU object that enters a
  cell whose top object is WIN wins; one that enters a DEFEAT cell loses. Rules are then re-read, so a rule
  completed by this move counts from the next step; ``NOUN IS NOUN`` transformations apply at once.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

__all__ = [
    "ACTIONS",
    "BORDER",
    "COLOR_NAMES",
    "IS",
    "KIND_NAMES",
    "NOUN_WORDS",
    "PROPERTY_WORDS",
    "THINGS",
    "Board",
    "Outcome",
    "Rules",
    "State",
    "has_you",
    "make_object",
    "make_state",
    "parse_rules",
    "stack_of",
    "step",
    "you_cells",
]

# ---------------------------------------------------------------------------------------------- kinds
BORDER = 1
BABA, BALL, WALL, KEY, DOOR = 2, 3, 4, 5, 6
#: Objects that rules act on (the nouns' referents).
THINGS = (BABA, BALL, WALL, KEY, DOOR)
W_BABA, W_BALL, W_WALL, W_KEY, W_DOOR = 7, 8, 9, 10, 11
#: Noun word blocks; ``word - NOUN_OFFSET`` is the thing kind the noun names.
NOUN_WORDS = (W_BABA, W_BALL, W_WALL, W_KEY, W_DOOR)
NOUN_OFFSET = W_BABA - BABA
IS = 12
YOU, WIN, STOP, PUSH, DEFEAT, PULL, MOVE, OPEN, SHUT = range(13, 22)
#: Property word blocks; the property bit of word ``w`` is ``1 << (w - YOU)``.
PROPERTY_WORDS = (YOU, WIN, STOP, PUSH, DEFEAT, PULL, MOVE, OPEN, SHUT)
WORDS = (*NOUN_WORDS, IS, *PROPERTY_WORDS)
N_KINDS = 32

P_YOU, P_WIN, P_STOP, P_PUSH, P_DEFEAT, P_PULL, P_MOVE, P_OPEN, P_SHUT = (
    1 << (w - YOU) for w in PROPERTY_WORDS
)

#: Name of every kind: things by their noun, words by the word they show.
KIND_NAMES: dict[int, str] = {
    BORDER: "border",
    BABA: "baba",
    BALL: "ball",
    WALL: "wall",
    KEY: "key",
    DOOR: "door",
    **{w: name for w, name in zip(NOUN_WORDS, ("baba", "ball", "wall", "key", "door"), strict=True)},
    IS: "is",
    **{
        w: name
        for w, name in zip(
            PROPERTY_WORDS,
            ("you", "win", "stop", "push", "defeat", "pull", "move", "open", "shut"),
            strict=True,
        )
    },
}
#: Colour names by index (index 0: no colour, used by words and the border).
COLOR_NAMES = ("", "red", "blue", "green", "white", "grey")
#: The colour a thing gets when a ``NOUN IS NOUN`` rule creates it.
DEFAULT_COLOR = {BABA: 4, BALL: 3, WALL: 5, KEY: 2, DOOR: 1}

OBJ_BITS = 10
OBJ_MASK = (1 << OBJ_BITS) - 1
KIND_MASK = 31
_NOT_DIR = OBJ_MASK ^ (3 << 8)

#: Action names in the game's order; index 1..4 is also ``facing + 1``.
ACTIONS = ("idle", "up", "right", "down", "left")


def make_object(kind: int, color: int = 0, facing: int = 0) -> int:
    """Encode one object (``facing``: 0 up, 1 right, 2 down, 3 left)."""
    return kind | color << 5 | facing << 8


# ---------------------------------------------------------------------------------------------- rules
class Rules(NamedTuple):
    """The rules in force: the parsed ``(subject, object)`` word pairs and what they imply.

    ``pairs`` keeps parse order and duplicates (that is what the text shows); ``props[kind]`` is the
    property bitmask of each kind; ``transform`` maps a thing kind to the kind it turns into.
    """

    pairs: tuple[tuple[int, int], ...]
    props: tuple[int, ...]
    transform: tuple[tuple[int, int], ...]
    you: tuple[bool, ...]

    def named(self) -> list[tuple[str, str]]:
        """The rules as ``(noun, property-or-noun)`` name pairs, in parse order."""
        return [(KIND_NAMES[a], KIND_NAMES[b]) for a, b in self.pairs]


@lru_cache(maxsize=4096)
def rules_from_pairs(pairs: tuple[tuple[int, int], ...]) -> Rules:
    """Build (once per distinct rule list) the lookup tables a step needs."""
    props = [0] * N_KINDS
    props[BORDER] = P_STOP
    for w in WORDS:
        props[w] = P_PUSH
    transform: dict[int, int] = {}
    keep: set[int] = set()
    for a, b in pairs:
        thing = a - NOUN_OFFSET
        if b in PROPERTY_WORDS:
            props[thing] |= 1 << (b - YOU)
        elif b == a:
            keep.add(thing)  # NOUN IS NOUN (same noun) protects the kind from transformation
        else:
            transform.setdefault(thing, b - NOUN_OFFSET)  # first rule in parse order wins
    kept = tuple(sorted((a, b) for a, b in transform.items() if a not in keep))
    return Rules(pairs, tuple(props), kept, tuple(bool(p & P_YOU) for p in props))


def parse_rules(cells: tuple[int, ...] | list[int], width: int) -> Rules:
    """Read every rule from the top objects of ``cells`` (row-major ``is`` blocks, horizontal first)."""
    n = len(cells)
    pairs: list[tuple[int, int]] = []
    for i, cell in enumerate(cells):
        if cell & OBJ_MASK != IS:
            continue
        x = i % width
        if 0 < x < width - 1:
            _maybe_rule(cells[i - 1] & OBJ_MASK, cells[i + 1] & OBJ_MASK, pairs)
        if width <= i < n - width:
            _maybe_rule(cells[i - width] & OBJ_MASK, cells[i + width] & OBJ_MASK, pairs)
    return rules_from_pairs(tuple(pairs))


def _maybe_rule(a: int, b: int, pairs: list[tuple[int, int]]) -> None:
    # word blocks carry neither colour nor facing, so the object code is the kind
    if W_BABA <= a <= W_DOOR and (W_BABA <= b <= W_DOOR or YOU <= b <= SHUT):
        pairs.append((a, b))


# ---------------------------------------------------------------------------------------------- state
class Board(NamedTuple):
    """What never changes during an episode: the grid size, and whether facings matter.

    Facings only matter when a ``move`` word block exists (word blocks are never created or destroyed);
    without one the engine keeps every facing at 0, so states that differ only in facing are equal.
    """

    width: int
    height: int
    tracks_facing: bool = False

    def offsets(self) -> tuple[int, int, int, int]:
        """Cell-index offset of a step up, right, down, left."""
        return (-self.width, 1, self.width, -1)


class State(NamedTuple):
    """One game position: the packed cells (all that identifies a state) and the rules they imply."""

    cells: tuple[int, ...]
    rules: Rules


class Outcome(NamedTuple):
    """The result of one step: the new state, whether a YOU object entered a WIN or a DEFEAT cell, and
    whether any top object is still YOU (a buried YOU object cannot act, so it does not count)."""

    state: State
    won: bool = False
    lost: bool = False
    alive: bool = True


def make_state(board: Board, stacks: list[list[int]]) -> State:
    """Pack per-cell stacks (bottom first, row-major) into a :class:`State`; ``<noun> is <noun>`` rules
    already in force apply at once, as they do at the start of a level in Baba Is You."""
    if len(stacks) != board.width * board.height:
        raise ValueError("one stack per cell is needed")
    cells = []
    for stack in stacks:
        packed = 0
        for obj in stack:
            packed = packed << OBJ_BITS | obj
        cells.append(packed)
    rules = parse_rules(cells, board.width)
    if rules.transform:
        _transform(cells, rules.transform, board.tracks_facing)
    return State(tuple(cells), rules)


def stack_of(cell: int) -> list[int]:
    """The objects of one packed cell, bottom first."""
    out = []
    while cell:
        out.append(cell & OBJ_MASK)
        cell >>= OBJ_BITS
    return out[::-1]


def has_you(state: State) -> bool:
    """Whether any top object is YOU."""
    you = state.rules.you
    return any(you[c & KIND_MASK] for c in state.cells if c)


# ---------------------------------------------------------------------------------------------- step
class _Mover:
    """Mutable scratch space for one step (kept out of the recursion's argument lists)."""

    __slots__ = ("cells", "destroyed", "props", "track", "words_moved")

    def __init__(self, cells: list[int], props: tuple[int, ...], track: bool) -> None:
        self.cells = cells
        self.props = props
        self.track = track
        self.words_moved = False
        self.destroyed = False

    def move(self, i: int, d: int, facing: int, pushed: bool = False) -> int:
        """Move the top object of cell ``i`` by ``d``: 0 blocked, 1 moved, 2 destroyed (open meets shut).

        A moving object drags a PULL object behind it, unless it was pushed: then the cell behind it is the
        pusher, which moves anyway.
        """
        cells, props = self.cells, self.props
        obj = cells[i] & OBJ_MASK
        pm = props[obj & KIND_MASK]
        j = i + d
        while True:
            t = cells[j] & OBJ_MASK
            if not t:
                break
            tp = props[t & KIND_MASK]
            if (pm & P_OPEN and tp & P_SHUT) or (pm & P_SHUT and tp & P_OPEN):
                cells[i] >>= OBJ_BITS
                cells[j] >>= OBJ_BITS
                self.destroyed = True
                return 2
            if tp & P_PUSH:
                if not self.move(j, d, facing, True):
                    return 0
                continue  # the cell may hold more PUSH objects under the one just pushed
            if tp & P_STOP:
                return 0
            break
        if W_BABA <= obj <= SHUT:  # a word block (words carry no colour or facing)
            self.words_moved = True
        elif self.track:
            obj = obj & _NOT_DIR | facing << 8
        cells[i] >>= OBJ_BITS
        cells[j] = cells[j] << OBJ_BITS | obj
        if pushed:
            return 1
        k = i - d
        behind = cells[k] & OBJ_MASK
        if behind and props[behind & KIND_MASK] & P_PULL:
            self.move(k, d, facing)
        return 1


def you_cells(state: State) -> list[int]:
    """Indices of the cells whose top object is YOU, row-major."""
    you = state.rules.you
    return [i for i, c in enumerate(state.cells) if c and you[c & KIND_MASK]]


def step(board: Board, state: State, action: int, movers: list[int] | None = None) -> Outcome:
    """Play one action (an index into :data:`ACTIONS`) from ``state``; ``state`` itself is not changed.

    ``movers`` may pass :func:`you_cells` of ``state`` when several actions are tried from one state.
    """
    rules = state.rules
    cells = list(state.cells)
    movers = you_cells(state) if movers is None else list(movers)
    if action == 0 or not movers:
        return Outcome(state, alive=bool(movers))
    facing = action - 1
    width = board.width
    d = (-width, 1, width, -1)[facing]
    if len(movers) > 1:  # the one furthest ahead moves first
        dx, dy = ((0, -1), (1, 0), (0, 1), (-1, 0))[facing]
        movers.sort(key=lambda i: (-(i % width * dx + i // width * dy), i))
    props = rules.props
    m = _Mover(cells, props, board.tracks_facing)
    won = lost = False
    moved_to: set[int] = set()
    for i, obj in [(i, cells[i] & OBJ_MASK) for i in movers]:
        if cells[i] & OBJ_MASK != obj:
            continue  # moved or destroyed by an earlier mover
        result = m.move(i, d, facing)
        if result == 1:
            under = (cells[i + d] >> OBJ_BITS) & OBJ_MASK
            if under:
                up = props[under & KIND_MASK]
                won = won or bool(up & P_WIN)
                lost = lost or bool(up & P_DEFEAT)
            moved_to.add(i + d)
        elif result == 0 and board.tracks_facing:  # a blocked YOU object still turns to face the move
            cells[i] = cells[i] & ~(3 << 8) | facing << 8
    if board.tracks_facing:
        _move_movers(m, board, moved_to)
    if m.words_moved:
        rules = parse_rules(cells, width)
    if rules.transform:
        _transform(cells, rules.transform, board.tracks_facing)
    new = State(tuple(cells), rules)
    changed = m.words_moved or m.destroyed or rules.transform or board.tracks_facing
    return Outcome(new, won, lost and not won, has_you(new) if changed else True)


def _move_movers(m: _Mover, board: Board, skip: set[int]) -> None:
    """MOVE objects step in their facing; a blocked one turns around and tries once more."""
    cells, props = m.cells, m.props
    offsets = board.offsets()
    todo = [(i, c & OBJ_MASK) for i, c in enumerate(cells) if c and props[c & KIND_MASK] & P_MOVE]
    for i, obj in todo:
        if i in skip or cells[i] & OBJ_MASK != obj:
            continue
        facing = obj >> 8 & 3
        if m.move(i, offsets[facing], facing):
            continue
        facing ^= 2
        cells[i] = cells[i] & ~(3 << 8) | facing << 8
        m.move(i, offsets[facing], facing)


def _transform(cells: list[int], transform: tuple[tuple[int, int], ...], track: bool) -> None:
    """Apply ``NOUN IS NOUN``: every object of a kind (buried ones too) becomes the other kind."""
    table = dict(transform)
    for i, cell in enumerate(cells):
        if not cell:
            continue
        stack = stack_of(cell)
        if not any(o & KIND_MASK in table for o in stack):
            continue
        packed = 0
        for o in stack:
            kind = o & KIND_MASK
            if kind in table:
                new = table[kind]
                o = make_object(new, DEFAULT_COLOR[new], (o >> 8 & 3) if track else 0)
            packed = packed << OBJ_BITS | o
        cells[i] = packed
