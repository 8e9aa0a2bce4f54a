"""NetHack and MiniHack (BALROG's): the text layer's facts, and scripted episodes with known outcomes."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("nle")
pytest.importorskip("minihack")

import verlog  # noqa: E402,F401
from verlog.envs.nethack import PROGRESSION_DLVL, PROGRESSION_XP  # noqa: E402
from verlog.envs.nethack.language import describe_map, glyph_names  # noqa: E402

_MOVES = {(0, -1): "north", (1, 0): "east", (0, 1): "south", (-1, 0): "west"}
_MOVES.update({(1, -1): "northeast", (1, 1): "southeast", (-1, 1): "southwest", (-1, -1): "northwest"})


def _plan_to_stairs(tty: list[str]) -> list[str]:
    """Shortest walk on the screen from ``@`` to ``>`` over floor, corridor and doorway cells."""
    grid = tty[1:22]
    start = next((x, y) for y, row in enumerate(grid) for x, c in enumerate(row) if c == "@")
    parents = {start: None}
    queue = deque([start])
    while queue:
        x, y = queue.popleft()
        if grid[y][x] == ">":
            plan = []
            while parents[(x, y)] is not None:
                (px, py), move = parents[(x, y)]
                plan.append(move)
                x, y = px, py
            return plan[::-1]
        for (dx, dy), move in _MOVES.items():
            nx, ny = x + dx, y + dy
            if 0 <= ny < len(grid) and 0 <= nx < len(grid[ny]) and (nx, ny) not in parents:
                if grid[ny][nx] in ".#>" and (dx == 0 or dy == 0 or grid[y][x] != "|"):
                    parents[(nx, ny)] = ((x, y), move)
                    queue.append((nx, ny))
    return []


def test_minihack_mazewalk_walk_to_the_stairs_wins() -> None:
    env = gym.make("verlog/MiniHack-MazeWalk-9x9-v0")
    obs, info = env.reset(seed=0)
    assert obs.startswith("inventory:") and "language observation:" in obs and "cursor:" in obs
    tty = obs.split("map:\n", 1)[1].split("\n")
    plan = _plan_to_stairs(["", *tty])
    assert plan, "the stairs are in sight at the start"
    for action in plan:
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated:
            break
    assert terminated and reward >= 1.0 and info["progression"] == 1.0
    env.close()


def test_nethack_stalling_truncates_with_no_progression() -> None:
    """NLE stops an episode where no game time passes (``no_progress_timeout=150``, BALROG's): 'esc' forever
    is such a stall. nle 1.3.0 counts the stall twice per step, so it ends after 75 steps."""
    env = gym.make("verlog/NetHack-v0")
    obs, info = env.reset(seed=4)
    assert "Dlvl:1" in obs and info["progression"] == 0.0 and info["depth"] == 1
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated) and steps < 200:
        obs, reward, terminated, truncated, info = env.step("esc")
        steps += 1
    assert truncated and not terminated and info["aborted"] and steps == 75
    assert info["progression"] == 0.0
    env.close()


def test_the_moon_comes_from_the_seed_not_the_clock() -> None:
    """NetHack takes the moon's phase from the clock (luck on a full moon, a warning on a new one); verlog's envs
    take it from the episode's seeds, so a seed opens the same game on any night: seed 2 opens on a new moon and
    seed 0 on an ordinary night, whatever tonight is."""
    env = gym.make("verlog/NetHack-v0")
    openings = {seed: env.reset(seed=seed)[0] for seed in (0, 2)}
    env.close()
    assert "New moon tonight" in openings[2]
    assert "moon tonight" not in openings[0]


def test_progression_tables_are_balrogs() -> None:
    assert len(PROGRESSION_DLVL) == 50 and len(PROGRESSION_XP) == 30
    assert PROGRESSION_DLVL[0] == PROGRESSION_XP[0] == 0.0
    assert list(PROGRESSION_DLVL) == sorted(PROGRESSION_DLVL) and list(PROGRESSION_XP) == sorted(
        PROGRESSION_XP
    )
    assert PROGRESSION_DLVL[9] == pytest.approx(0.12558597019922987)


def test_language_observation_words_merging_and_plurals() -> None:
    from nle import nethack

    names, _ = glyph_names()
    hwall = nethack.GLYPH_CMAP_OFF + 2
    floor = nethack.GLYPH_CMAP_OFF + 19
    glyphs = np.full((21, 79), floor, dtype=np.int16)
    glyphs[5, 9:12] = hwall  # three wall cells 5 rows north of the player at (10, 10)
    glyphs[10, 11] = nethack.GLYPH_PET_OFF + 1  # something tame just east
    text = describe_map(glyphs, 10, 10).splitlines()
    assert names[hwall] == "horizontal wall"
    assert text[0] == "horizontal wall near north"
    assert text[-1].startswith("tame ") and text[-1].endswith(" adjacent east")
