"""Pictures of a BabaIsAI state: one character per cell (``ansi``) or coloured tiles (``rgb_array``).

Things are drawn as lower-case letters or symbols, word blocks as upper-case letters; a legend under the
grid names every symbol that appears. Only top objects are drawn, as the rules only see those.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from verlog.envs.babaisai.engine import (
    BABA,
    BALL,
    BORDER,
    COLOR_NAMES,
    DOOR,
    IS,
    KEY,
    KIND_MASK,
    KIND_NAMES,
    NOUN_WORDS,
    OBJ_MASK,
    PROPERTY_WORDS,
    WALL,
    Board,
    State,
)

__all__ = ["SYMBOLS", "render_ansi", "render_rgb"]

#: The character of every kind.
SYMBOLS: dict[int, str] = {
    BORDER: "#",
    BABA: "@",
    BALL: "o",
    WALL: "+",
    KEY: "k",
    DOOR: "d",
    **dict(zip(NOUN_WORDS, "BLWKD", strict=True)),
    IS: "=",
    **dict(zip(PROPERTY_WORDS, "YVSPXUMOC", strict=True)),
}
_EMPTY = "."

_RGB = {
    "": (200, 200, 200),
    "red": (220, 50, 50),
    "blue": (60, 90, 230),
    "green": (60, 190, 70),
    "white": (245, 245, 245),
    "grey": (130, 130, 130),
}
_BACKGROUND = (20, 20, 25)
_BORDER_RGB = (70, 70, 80)
_NOUN_RGB = (230, 90, 160)
_IS_RGB = (240, 240, 240)
_PROPERTY_RGB = (240, 170, 50)


def _label(kind: int) -> str:
    name = KIND_NAMES[kind]
    return f"word `{name}`" if kind >= NOUN_WORDS[0] else name


def render_ansi(board: Board, state: State) -> str:
    """The grid, one character per cell, then a legend of the symbols shown."""
    rows, seen = [], set()
    for y in range(board.height):
        row = []
        for x in range(board.width):
            cell = state.cells[y * board.width + x]
            if not cell:
                row.append(_EMPTY)
                continue
            kind = cell & KIND_MASK
            seen.add(kind)
            row.append(SYMBOLS[kind])
        rows.append("".join(row))
    legend = "  ".join(f"{SYMBOLS[k]} {_label(k)}" for k in sorted(seen) if k != BORDER)
    return "\n".join(rows) + "\n" + legend


@lru_cache(maxsize=64)
def _shape(kind: int, tile: int) -> np.ndarray:
    """A boolean tile mask per thing: baba a square, ball a disc, wall a full block, key a bar with a ring,
    door a frame."""
    yy, xx = (np.mgrid[0:tile, 0:tile] + 0.5) / tile
    inner = (abs(xx - 0.5) < 0.38) & (abs(yy - 0.5) < 0.38)
    if kind == BALL:
        return (xx - 0.5) ** 2 + (yy - 0.5) ** 2 < 0.36**2
    if kind == WALL:
        return (abs(xx - 0.5) < 0.47) & (abs(yy - 0.5) < 0.47)
    if kind == KEY:
        ring = abs(np.hypot(xx - 0.5, yy - 0.3) - 0.15) < 0.07
        return ring | ((abs(xx - 0.5) < 0.07) & (yy > 0.4) & (yy < 0.88))
    if kind == DOOR:
        return inner & ~((abs(xx - 0.5) < 0.24) & (abs(yy - 0.5) < 0.24))
    return inner


def render_rgb(board: Board, state: State, tile: int = 16) -> np.ndarray:
    """An ``(height*tile, width*tile, 3)`` uint8 image: the border dark, things as coloured shapes, words as
    tiles coloured by their part of speech (noun pink, ``is`` white, property orange) with a dark bar."""
    img = np.empty((board.height * tile, board.width * tile, 3), dtype=np.uint8)
    img[:] = _BACKGROUND
    inset = max(1, tile // 6)
    for i, cell in enumerate(state.cells):
        if not cell:
            continue
        obj = cell & OBJ_MASK
        kind = obj & KIND_MASK
        y, x = divmod(i, board.width)
        view = img[y * tile : (y + 1) * tile, x * tile : (x + 1) * tile]
        if kind == BORDER:
            view[:] = _BORDER_RGB
        elif kind < NOUN_WORDS[0]:
            view[_shape(kind, tile)] = _RGB[COLOR_NAMES[obj >> 5 & 7]]
        else:
            color = _NOUN_RGB if kind in NOUN_WORDS else _PROPERTY_RGB if kind in PROPERTY_WORDS else _IS_RGB
            view[1:-1, 1:-1] = color
            view[tile // 2 - 1 : tile // 2 + 1, inset:-inset] = _BACKGROUND
    return img
