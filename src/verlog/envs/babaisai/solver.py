"""Search for a winning action sequence: the oracle baseline and the proof that a level is solvable.

The search is breadth-first search ordered by a lower bound on the steps still needed (A*): with the
admissible bound of :func:`verlog.envs.babaisai.heuristic.lower_bound` it returns a *shortest* winning
sequence, as plain breadth-first search would, while storing far fewer states. States are deduplicated by
their packed cells (the rules follow from the cells), and a state reached again by a shorter path is searched
again, so the result stays shortest although the bound is not consistent. ``idle`` is never part of a
solution: it changes nothing but the clock. A step that loses, or leaves no object YOU, is a dead end.

``optimal=False`` orders the search by a stronger estimate instead and stops at the first win. It needs at
most a few hundred states on every BALROG family (the optimal search up to ~10^5, on the two-room
``make_win`` families); its solutions are most often shortest too, and a few steps longer when not. The
optimal search runs it first and then only looks for something shorter.

The states are kept in memory: about 1 kB each on the 13x9 levels, so ``max_states`` also bounds memory.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from verlog.envs.babaisai.engine import ACTIONS, Board, State, step, you_cells
from verlog.envs.babaisai.heuristic import INF, estimate, is_plain, lower_bound

__all__ = ["SolveResult", "solve", "solve_state"]

_MOVES = (1, 2, 3, 4)
_Cells = tuple[int, ...]


class SolveResult(NamedTuple):
    """What a search found: the actions (None when none was found) and how many states it stored."""

    actions: list[str] | None
    states: int


def solve_state(
    board: Board,
    state: State,
    max_depth: int = 100,
    max_states: int = 200_000,
    optimal: bool = True,
    weight: float = 1.0,
) -> SolveResult:
    """Search from ``state`` for a win within ``max_depth`` steps, storing at most ``max_states`` states.

    The optimal search first runs the fast one: its solution bounds the length worth searching, so that
    only states that could lead to something shorter are stored; if none does, it was a shortest one.
    ``weight`` multiplies the estimate of the fast search (weighted A*: larger searches less and finds
    longer solutions). In a level with word blocks the bounds do not cover (``push``, ``pull``, ``move``,
    ``open``, ``shut``) the optimal search is plain breadth-first search.
    """
    if not is_plain(state):  # plain breadth-first search: its first win is a shortest one
        return _search(board, state, max_depth, max_states, _zero, True)
    if not optimal:
        return _search(board, state, max_depth, max_states, partial(_weighted, weight), True)
    quick = _search(board, state, max_depth, max_states, estimate, True)
    if quick.actions is None:
        return _search(board, state, max_depth, max_states, lower_bound, False)
    shorter = _search(board, state, len(quick.actions) - 1, max_states, lower_bound, False)
    states = quick.states + shorter.states
    if shorter.actions is None and shorter.states > max_states:
        return SolveResult(None, states)  # out of budget: a shortest solution is not proven
    return SolveResult(shorter.actions or quick.actions, states)


def _search(
    board: Board,
    state: State,
    max_depth: int,
    max_states: int,
    bound: Callable[[Board, State], int],
    first: bool,
) -> SolveResult:
    """A* from ``state``; ``first``: stop at the first win found (the bound is an estimate), else search
    until no shorter win can exist (the bound is admissible, so states beyond ``max_depth`` are pruned)."""
    root = state.cells
    g: dict[_Cells, int] = {root: 0}
    parent: dict[_Cells, tuple[_Cells, int] | None] = {root: None}
    states: dict[_Cells, State] = {root: state}
    heap = [(bound(board, state), 0, 0, root)]
    best: tuple[int, _Cells, int] | None = None  # (length, state before the last step, last action)
    tick = 0
    while heap:
        f, _, depth, cells = heapq.heappop(heap)
        if best is not None and (first or f >= best[0]):
            break
        if depth != g[cells] or depth >= max_depth:
            continue  # stale (reached again by a shorter path since), or out of steps
        current = states[cells]
        movers = you_cells(current)
        for action in _MOVES:
            out = step(board, current, action, movers)
            if out.won:
                if best is None or depth + 1 < best[0]:
                    best = (depth + 1, cells, action)
                continue
            child = out.state.cells
            if out.lost or not out.alive or g.get(child, INF) <= depth + 1:
                continue
            h = bound(board, out.state)
            if not first and depth + 1 + h > max_depth:
                continue  # the bound is admissible: no win within the limit through this state
            g[child] = depth + 1
            parent[child] = (cells, action)
            states[child] = out.state
            tick += 1
            heapq.heappush(heap, (depth + 1 + h, -tick, depth + 1, child))  # ties: newest first
        if len(g) > max_states:
            return SolveResult(None, len(g))
    if best is None:
        return SolveResult(None, len(g))
    return SolveResult(_path(parent, best[1], best[2]), len(g))


def _zero(board: Board, state: State) -> int:
    return 0


def _weighted(weight: float, board: Board, state: State) -> int:
    return round(weight * estimate(board, state))


def _path(parent: dict[_Cells, Any], cells: _Cells, last: int) -> list[str]:
    actions = [last]
    link = parent[cells]
    while link is not None:
        cells, action = link
        actions.append(action)
        link = parent[cells]
    return [ACTIONS[a] for a in reversed(actions)]


def solve(env: Any, max_states: int = 200_000, optimal: bool = True) -> list[str] | None:
    """A winning action list for the env's current episode from where it stands, or None.

    With ``optimal`` (the default) the list is a shortest one; ``optimal=False`` is much faster on the
    deepest families and may return a few steps more. ``env`` is a
    :class:`~verlog.envs.babaisai.BabaIsAIEnv`, possibly wrapped. None means that no win exists within the
    remaining steps, or that the search stored ``max_states`` states without finding one.
    """
    game = env.unwrapped
    remaining = game.max_steps - game.steps
    return solve_state(game.board, game.state, remaining, max_states, optimal).actions
