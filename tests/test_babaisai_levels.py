"""The 40 BabaIsAI level families: generation (20 seeds each) and solvability within the step limit."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest

import verlog  # noqa: F401  (registers the ids)
from verlog.envs.babaisai import LEVELS, BabaIsAIEnv, solve
from verlog.envs.babaisai.engine import (
    BABA,
    BALL,
    BORDER,
    DOOR,
    KEY,
    KIND_MASK,
    WALL,
    Board,
    State,
    stack_of,
    step,
)
from verlog.envs.babaisai.levels import family, generate, level_from_map
from verlog.envs.babaisai.solver import solve_state

SEEDS = range(20)


def _objects(board: Board, state: State) -> dict[int, list[tuple[int, int]]]:
    found: dict[int, list[tuple[int, int]]] = {}
    for i, cell in enumerate(state.cells):
        for obj in stack_of(cell):
            found.setdefault(obj & KIND_MASK, []).append((i % board.width, i // board.width))
    return found


def test_forty_families_in_balrog_order_each_registered() -> None:
    assert len(LEVELS) == len(set(LEVELS)) == 40
    assert LEVELS[0] == "make_win-distr_obj_rule" and LEVELS[-1] == "two_room-make_wall_win"
    for name in LEVELS:
        assert f"verlog/BabaIsAI-{name}-v0" in gym.registry
    assert "verlog/BabaIsAI-v0" in gym.registry and "verlog/BabaIsAI-Mixed-v0" in gym.registry


def test_family_names_read_as_recipes() -> None:
    spec = family("two_room-break_stop-make_win-distr_obj")
    assert (spec.layout, spec.stop_intact, spec.break_win, spec.area) == ("two_room", True, True, "right")
    assert (spec.distr_obj, spec.distr_rule) == (True, False)
    spec = family("two_room-goto_win-distr_win_rule")
    assert not spec.stop_intact and spec.distr_win_rule and spec.distr_obj and spec.distr_rule
    assert family("make_win-distr_obj-irrelevant_rule").irrelevant_rule


@pytest.mark.parametrize("name", LEVELS)
def test_family_generates_twenty_seeds_within_its_grid(name: str) -> None:
    spec = family(name)
    levels = []
    for seed in SEEDS:
        level = generate(name, np.random.default_rng(seed))
        again = generate(name, np.random.default_rng(seed))
        assert level.state.cells == again.state.cells and level.target_plan == again.target_plan
        board, state = level.board, level.state
        size = (8, 8) if spec.layout == "room" else (13, 9)
        assert (board.width, board.height) == size and len(state.cells) == size[0] * size[1]
        objects = _objects(board, state)
        border = {(x, y) for x in range(size[0]) for y in range(size[1])} - {
            (x, y) for x in range(1, size[0] - 1) for y in range(1, size[1] - 1)
        }
        assert set(objects[BORDER]) == border
        assert all(len(stack_of(c)) == 1 for i, c in enumerate(state.cells) if c)  # nothing stacked
        assert len(objects[BABA]) == 1
        rules = state.rules.named()
        assert ("baba", "you") in rules
        assert (level.win_object, "win") in rules or spec.break_win or spec.layout == "make_wall_win"
        assert not ((level.win_object, "win") in rules and spec.break_win)
        if spec.layout != "room":
            assert len([p for p in objects[WALL] if p[0] == 6]) == 7  # the dividing wall
            assert (("wall", "stop") in rules) == spec.stop_intact
        things = sum(len(objects.get(kind, [])) for kind in (BALL, KEY, DOOR))
        assert things == (2 if spec.distr_obj else 1)
        levels.append(state.cells)
    assert len(set(levels)) >= 15  # seeds give different levels


@pytest.mark.parametrize("name", LEVELS)
def test_solver_wins_every_seed_within_the_step_limit(name: str) -> None:
    env = BabaIsAIEnv(level=name)
    for seed in SEEDS:
        env.reset(seed=seed)
        plan = solve(env, max_states=50_000, optimal=False)
        assert plan is not None and len(plan) <= env.max_steps, (name, seed)
        for action in plan:
            _, reward, terminated, truncated, info = env.step(action)
        assert terminated and not truncated and info["won"], (name, seed)
        assert reward == pytest.approx(1 - 0.9 * len(plan) / env.max_steps)


def _bfs_length(board: Board, state: State, limit: int = 200_000) -> int | None:
    """Plain breadth-first search, written independently of the solver, as the reference for optimality."""
    seen = {state.cells}
    queue = deque([(state, 0)])
    while queue:
        current, depth = queue.popleft()
        for action in (1, 2, 3, 4):
            out = step(board, current, action)
            if out.won:
                return depth + 1
            if out.state.cells in seen or out.lost or not out.alive:
                continue
            seen.add(out.state.cells)
            queue.append((out.state, depth + 1))
        assert len(seen) < limit
    return None


# the two-room families that rebuild a win rule are too deep for plain breadth-first search in a test
_SHALLOW = [n for n in LEVELS if not (n.startswith("two_room") and ("make_win" in n or "wall_win" in n))]


@pytest.mark.parametrize("name", _SHALLOW)
def test_optimal_solver_matches_breadth_first_search(name: str) -> None:
    for seed in (0, 1):
        level = generate(name, np.random.default_rng(seed))
        exact = solve_state(level.board, level.state, optimal=True).actions
        fast = solve_state(level.board, level.state, optimal=False).actions
        assert exact is not None and fast is not None
        assert len(exact) == _bfs_length(level.board, level.state) <= len(fast)


def test_solver_returns_none_when_nothing_can_win() -> None:
    board, state = level_from_map("""
        #######
        #B=Y..#
        #.@...#
        #######
    """)
    assert solve_state(board, state).actions is None
    assert solve_state(board, state, optimal=False).actions is None


def test_solver_is_breadth_first_in_levels_the_bounds_do_not_cover() -> None:
    board, state = level_from_map("""
        ########
        #B=Y...#
        #K=P...#
        #D=V...#
        #.@k.d.#
        ########
    """)
    assert solve_state(board, state).actions == ["right", "right", "right"]  # the key is pushed over the door


def test_solver_gives_up_at_its_state_budget() -> None:
    level = generate("two_room-make_win", np.random.default_rng(0))
    result = solve_state(level.board, level.state, max_states=50)
    assert result.actions is None and result.states > 50
