"""Lower bounds on the steps to a win, which turn the solver's breadth-first search into A*.

They hold in a *plain* level: one whose word blocks are nouns, ``is``, ``you``, ``win``, ``stop`` and
``defeat`` only (every BALROG level). There, only YOU things move; word blocks move one cell per step at
most, and only when pushed; other things never move. In any other level the bound is 0 and the search is
plain breadth-first search.

Three facts make the bounds useful:

* A word block in the first or last interior row can never be pushed up or down (the pusher would have to
  stand on the border); likewise for the first and last interior columns. Such a block keeps that
  coordinate forever, which pins where the rules it can take part in may ever be formed.
* A block that can move in no direction (the cell behind it or ahead of it is the border or another such
  block) never moves again, and no rule can ever need another block on its cell.
* A rule that is not in force needs each of its three blocks moved to a target, one cell per step, so it
  cannot form sooner than the largest of those distances (``steps`` below).

:func:`lower_bound` never exceeds the true number of steps (it is admissible, not consistent), so A* with
it, re-opening states reached by a shorter path, returns a shortest solution. :func:`estimate` adds the walks
to the blocks of the rule to rebuild and from it to the new WIN object; it ignores push chains and guesses
detours, so it can overestimate, and only the fast, not-always-shortest mode of the solver uses it.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import permutations
from typing import NamedTuple

from verlog.envs.babaisai.engine import (
    DEFEAT,
    IS,
    KIND_MASK,
    NOUN_OFFSET,
    NOUN_WORDS,
    OBJ_BITS,
    OBJ_MASK,
    P_WIN,
    P_YOU,
    STOP,
    WIN,
    YOU,
    Board,
    State,
)

__all__ = ["INF", "Layout", "estimate", "is_plain", "lower_bound", "scan"]

INF = 10**6
_PLAIN_WORDS = frozenset((*NOUN_WORDS, IS, YOU, WIN, STOP, DEFEAT))


def is_plain(state: State) -> bool:
    """Whether the bounds hold for this level (see the module docstring)."""
    return all(
        (o & KIND_MASK) in _PLAIN_WORDS
        for cell in state.cells
        for o in _stack(cell)
        if (o & KIND_MASK) >= NOUN_WORDS[0]
    )


def _stack(cell: int) -> list[int]:
    out = []
    while cell:
        out.append(cell & OBJ_MASK)
        cell >>= OBJ_BITS
    return out


class Plan(NamedTuple):
    """One way to form a new rule: at least ``steps`` steps, moving each block ``(source, target)``.

    ``pinned``: the blocks' fixed coordinates allow this placement only, so the targets are certain.
    """

    steps: int
    moves: tuple[tuple[tuple[int, int], tuple[int, int]], ...]
    pinned: bool


class Layout(NamedTuple):
    """What the bounds need from the word blocks alone (cached per arrangement of the blocks).

    ``win[kind]``: the plans for a new ``<kind> is win`` rule (every choice of blocks and direction);
    ``you`` / ``transform``: fewest steps before a new ``<a> is you`` / ``<a> is <b>`` rule can be in force;
    ``frozen``: the cells of the blocks that can never move again.
    """

    win: dict[int, tuple[Plan, ...]]
    you: int
    transform: int
    frozen: frozenset[tuple[int, int]]


def scan(state: State, width: int) -> tuple[tuple[tuple[int, int], ...], dict[int, list[tuple[int, int]]]]:
    """The top word blocks as ``((index, kind), ...)`` and every thing's position by kind (buried too)."""
    words = []
    things: dict[int, list[tuple[int, int]]] = {}
    for i in _interior(len(state.cells), width):
        cell = state.cells[i]
        if not cell:
            continue
        top = cell & OBJ_MASK
        if NOUN_WORDS[0] <= top < 32:
            words.append((i, top))
            cell >>= OBJ_BITS
        while cell:
            kind = cell & KIND_MASK
            if kind < NOUN_WORDS[0]:
                things.setdefault(kind, []).append(_xy(i, width))
            cell >>= OBJ_BITS
    return tuple(words), things


@lru_cache(maxsize=64)
def _interior(n: int, width: int) -> tuple[int, ...]:
    height = n // width
    return tuple(y * width + x for y in range(1, height - 1) for x in range(1, width - 1))


@lru_cache(maxsize=4096)
def _xy(i: int, width: int) -> tuple[int, int]:
    return i % width, i // width


def lower_bound(board: Board, state: State) -> int:
    """An admissible lower bound on the steps to win from ``state`` in a plain level.

    Scenarios, each bounded on its own, the bound being the smallest:

    * the YOU and WIN things stay those of now: the distance from a YOU thing to a WIN thing;
    * another thing becomes YOU, or a ``<a> is <b>`` rule forms: that rule's steps, plus one;
    * a new ``<n> is win`` rule forms: its steps plus one, and not before a YOU thing can reach an ``<n>``.
      When the rule's placement is pinned and one thing is YOU, the push that completes it leaves that
      thing on the row or column of a target cell ``a``, so the win takes at least
      ``max(dist(you, a), steps) + dist(a, <n>)`` steps, minimised over those cells.
    """
    words, things = scan(state, board.width)
    lay = layout(board, words, state.rules.pairs)
    rules = state.rules
    if rules.transform:
        return 1  # kinds may keep changing without any block moving: no useful bound
    props = rules.props
    you_kinds = [k for k in things if props[k] & P_YOU]
    yous = [p for k in you_kinds for p in things[k]]
    if not yous:
        return INF  # nothing can act: the level is lost (the solver never expands such a state)
    other = min(lay.transform, lay.you) + 1  # another thing becomes YOU, or kinds change
    best = other
    wins = [p for k in things if props[k] & P_WIN for p in things[k]]
    if wins:
        if any(props[k] & P_WIN for k in you_kinds):
            return 1  # a WIN thing that moves: no useful bound from distances
        best = min(best, min(_dist(y, w) for y in yous for w in wins))
    for kind, plans in lay.win.items():
        targets = things.get(kind, ())
        reach = min((_dist(y, w) for y in yous for w in targets), default=INF)
        for plan in plans:
            if best <= plan.steps + 1:
                continue
            bound = max(plan.steps + 1, min(reach, other))
            if plan.pinned and len(yous) == 1 and targets and not props[kind] & P_YOU and bound < other:
                line = _line_bound(yous[0], plan, tuple(targets), board.width, board.height)
                bound = max(bound, min(line, other))
            best = min(best, bound)
    return max(1, best)


@lru_cache(maxsize=65536)
def _line_bound(
    you: tuple[int, int], plan: Plan, targets: tuple[tuple[int, int], ...], width: int, height: int
) -> int:
    best = INF
    for _, (tx, ty) in plan.moves:
        for a in [(x, ty) for x in range(1, width - 1)] + [(tx, y) for y in range(1, height - 1)]:
            if a != (tx, ty):
                best = min(best, max(_dist(you, a), plan.steps) + max(1, min(_dist(a, w) for w in targets)))
    return best


def estimate(board: Board, state: State) -> int:
    """A stronger estimate for the fast mode: the YOU thing walks behind each block of a new win rule in
    turn, pushes it home (turning at most once, each word block in the way costing a detour), and walks on
    to the new WIN thing. It can overestimate (it ignores push chains, for one)."""
    words, things = scan(state, board.width)
    lay = layout(board, words, state.rules.pairs)
    props = state.rules.props
    yous = [p for k in things if props[k] & P_YOU for p in things[k]]
    wins = [p for k in things if props[k] & P_WIN for p in things[k]]
    if state.rules.transform or not yous:
        return lower_bound(board, state)
    if wins:
        return max(1, min(_dist(y, w) for y in yous for w in wins))
    occupied = {_xy(i, board.width) for i, _ in words}
    best = INF
    for kind, plans in lay.win.items():
        if kind not in things:
            continue
        for plan in plans:
            moving = [m for m in plan.moves if m[0] != m[1]]
            for order in permutations(moving):
                for you in yous:
                    cost, end = 0, you
                    for source, target in order:
                        step_cost, end = _push_cost(end, source, target, occupied, lay.frozen)
                        cost += step_cost
                    best = min(best, cost + max(1, min(_dist(end, w) for w in things[kind])))
    return best if best < INF else _NO_PLAN + lower_bound(board, state)


#: What the estimate adds when no win rule can be rebuilt by pushing one block home: such states are
#: usually dead ends, and a large value keeps the fast search away from them.
_NO_PLAN = 50
#: Extra steps counted for each word block in the way of a push (walking round it and moving it aside).
_DETOUR = 3


def _push_cost(
    you: tuple[int, int],
    source: tuple[int, int],
    target: tuple[int, int],
    occupied: set[tuple[int, int]],
    frozen: frozenset[tuple[int, int]],
) -> tuple[int, tuple[int, int]]:
    """Steps to walk behind a block and push it from ``source`` to ``target``, and where the pusher ends.

    A route with a block that can never move on it (or where the pusher must stand) is no route."""
    dx, dy = target[0] - source[0], target[1] - source[1]
    if not dx and not dy:
        return 0, you
    ex = (1 if dx > 0 else -1, 0)
    ey = (0, 1 if dy > 0 else -1)
    orders = [(ex, abs(dx), ey, abs(dy)), (ey, abs(dy), ex, abs(dx))] if dx and dy else []
    if not orders:
        orders = [(ex, abs(dx), ey, 0)] if dx else [(ey, abs(dy), ex, 0)]
    best = (INF, you)
    for first, n1, second, n2 in orders:
        corner = (source[0] + n1 * first[0], source[1] + n1 * first[1])
        cells = [(source[0] - first[0], source[1] - first[1])]
        cells += [(source[0] + k * first[0], source[1] + k * first[1]) for k in range(1, n1 + 1)]
        if n2:
            cells.append((corner[0] - second[0], corner[1] - second[1]))
            cells += [(corner[0] + k * second[0], corner[1] + k * second[1]) for k in range(1, n2 + 1)]
        if any(c in frozen for c in cells):
            continue
        blocked = sum(c in occupied for c in cells)
        cost = _dist(you, cells[0]) + n1 + n2 + (2 if n2 else 0) + _DETOUR * blocked
        if cost < best[0]:
            last = second if n2 else first
            best = (cost, (target[0] - last[0], target[1] - last[1]))
    return best


def _dist(a: tuple[int, int], b: tuple[int, int]) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def layout(board: Board, words: tuple[tuple[int, int], ...], pairs: tuple[tuple[int, int], ...]) -> Layout:
    """The :class:`Layout` of an arrangement of word blocks (cached)."""
    return _layout(board.width, board.height, words, pairs)


@lru_cache(maxsize=65536)
def _layout(
    width: int, height: int, words: tuple[tuple[int, int], ...], pairs: tuple[tuple[int, int], ...]
) -> Layout:
    blocks = [_Block(i % width, i // width, kind, width, height) for i, kind in words]
    frozen = _freeze(blocks)
    spots = {id(b): (b.x, b.y, b.x_fixed, b.y_fixed) for b in blocks}
    nouns = [b for b in blocks if b.kind in NOUN_WORDS]
    iss = [b for b in blocks if b.kind == IS]
    active = set(pairs)
    win: dict[int, list[Plan]] = {}
    you = transform = INF
    for noun in nouns:
        thing = noun.kind - NOUN_OFFSET
        for is_ in iss:
            for block in blocks:
                if block.kind == noun.kind or (noun.kind, block.kind) in active:
                    continue
                if block.kind not in (WIN, YOU) and block.kind not in NOUN_WORDS:
                    continue
                plans = [
                    p
                    for p in _align(spots[id(noun)], spots[id(is_)], spots[id(block)], width, height)
                    if not (p.pinned and any(dst != src and dst in frozen for src, dst in p.moves))
                ]
                if block.kind == WIN:
                    win.setdefault(thing, []).extend(plans)
                elif block.kind == YOU:
                    you = min([you, *(p.steps for p in plans)])
                else:
                    transform = min([transform, *(p.steps for p in plans)])
    return Layout({k: tuple(v) for k, v in win.items() if v}, you, transform, frozenset(frozen))


class _Block:
    """A word block and which of its coordinates can never change (see the module docstring)."""

    __slots__ = ("kind", "x", "x_fixed", "y", "y_fixed")

    def __init__(self, x: int, y: int, kind: int, width: int, height: int) -> None:
        self.x, self.y, self.kind = x, y, kind
        self.x_fixed = not 2 <= x <= width - 3
        self.y_fixed = not 2 <= y <= height - 3


def _freeze(blocks: list[_Block]) -> set[tuple[int, int]]:
    """Mark the blocks that can never move again, and return their cells.

    A block can move in a direction when neither the cell behind it (where the pusher stands) nor the cell
    ahead holds a block that can never move, and the move is along an axis the border allows. Found as a
    fixed point: freezing one block can freeze its neighbours.
    """
    frozen: set[tuple[int, int]] = set()
    changed = True
    while changed:
        changed = False
        for b in blocks:
            if (b.x, b.y) in frozen:
                continue
            if not any(
                (b.x - dx, b.y - dy) not in frozen and (b.x + dx, b.y + dy) not in frozen
                for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1))
                if not ((dx and b.x_fixed) or (dy and b.y_fixed))
            ):
                frozen.add((b.x, b.y))
                b.x_fixed = b.y_fixed = True
                changed = True
    return frozen


_Spot = tuple[int, int, bool, bool]  # x, y, x fixed, y fixed


@lru_cache(maxsize=262144)
def _align(noun: _Spot, is_: _Spot, prop: _Spot, width: int, height: int) -> tuple[Plan, ...]:
    """The cheapest way to line the three blocks up as a rule, for each direction where one exists.

    The caller drops a pinned plan that puts a block on the cell of another block that can never move."""
    plans = []
    blocks = (noun, is_, prop)
    for ex, ey in ((1, 0), (0, 1)):
        # where the noun block must be so that each block sits in its slot (slot k is k cells further on)
        anchors = [(x - k * ex, y - k * ey, fx, fy) for k, (x, y, fx, fy) in enumerate(blocks)]
        d, (px, py), pinned = _center(anchors, (1, width - 2 - 2 * ex), (1, height - 2 - 2 * ey))
        if d < INF:
            moves = tuple(((b[0], b[1]), (px + k * ex, py + k * ey)) for k, b in enumerate(blocks))
            plans.append(Plan(d, moves, pinned))
    return tuple(plans)


def _center(
    anchors: list[tuple[int, int, bool, bool]], xs: tuple[int, int], ys: tuple[int, int]
) -> tuple[int, tuple[int, int], bool]:
    """Min over noun positions ``p`` (inside ``xs`` x ``ys``) of the largest anchor distance to ``p``.

    A fixed coordinate forces ``p``'s; with both coordinates free the value is the L1 radius of the anchors,
    ignoring the box (a lower bound). Returns INF when the fixed coordinates disagree or leave the box, and
    whether ``p`` was forced (pinned).
    """
    fx = {a[0] for a in anchors if a[2]}
    fy = {a[1] for a in anchors if a[3]}
    if len(fx) > 1 or len(fy) > 1:
        return INF, (0, 0), False
    px = fx.pop() if fx else None
    py = fy.pop() if fy else None
    if (px is not None and not xs[0] <= px <= xs[1]) or (py is not None and not ys[0] <= py <= ys[1]):
        return INF, (0, 0), False
    if px is not None and py is not None:
        return max(abs(a[0] - px) + abs(a[1] - py) for a in anchors), (px, py), True
    if px is not None:
        d, y = _center_1d([(abs(a[0] - px), a[1]) for a in anchors], ys)
        return d, (px, y), False
    if py is not None:
        d, x = _center_1d([(abs(a[1] - py), a[0]) for a in anchors], xs)
        return d, (x, py), False
    us = [a[0] + a[1] for a in anchors]
    vs = [a[0] - a[1] for a in anchors]
    radius = (max(max(us) - min(us), max(vs) - min(vs)) + 1) // 2
    return radius, (anchors[0][0], anchors[0][1]), False


def _center_1d(items: list[tuple[int, int]], bounds: tuple[int, int]) -> tuple[int, int]:
    """Min over integer ``t`` in ``bounds`` of max ``c + |a - t|`` for ``(c, a)`` in ``items``."""
    lo, hi = bounds
    best, arg = INF, lo
    for t in range(lo, hi + 1):
        value = max(c + abs(a - t) for c, a in items)
        if value < best:
            best, arg = value, t
    return best, arg
