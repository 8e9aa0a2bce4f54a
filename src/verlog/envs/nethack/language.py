"""NetHack arrays to BALROG's text: the language description of the map, the message, the cursor, inventory.

BALROG translates with the compiled ``nle_language_obsv`` of ``balrog-nle``, which installs its own top-level
``nle`` package (NLE 0.9, gym 0.23) and so cannot sit beside ``nle`` 1.3.0; this module writes the same
translation in Python, numpy-vectorised over the 21x79 map, following the facts recorded in the module
docstring of :mod:`verlog.envs.nethack`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from nle import nethack

__all__ = ["describe_map", "glyph_names", "text_cursor", "text_inventory", "text_message", "tty_text"]

#: Cmap names that differ from NetHack's own explanations (walls get their shape, stone is "dark area").
_CMAP_NAMES = {
    0: "dark area",
    1: "vertical wall",
    2: "horizontal wall",
    3: "top left corner",
    4: "top right corner",
    5: "bottom left corner",
    6: "bottom right corner",
    7: "cross wall",
    8: "tee up wall",
    9: "tee down wall",
    10: "tee left wall",
    11: "tee right wall",
    13: "open door",
    14: "open door",
    15: "closed door",
    16: "closed door",
    23: "stairs up",
    24: "stairs down",
    27: "alter",  # sic, as the reference translator spells it
    29: "throne",
    32: "pool",
    34: "lava",
}
#: Cmap features named wherever they are on the map ("fullscreen"): doors, bars, tree, stairs, ladders,
#: altar, grave, throne, sink, fountain, pool, ice, lava, raised drawbridges.
_FULLSCREEN_CMAP = {15, 16, 17, 18, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 37, 38}
#: Cmap glyphs that stop a ray: walls, dark area, closed doors, raised drawbridges.
_BLOCKING_CMAP = {0, *range(1, 12), 15, 16, 37, 38}
#: Floor-like cmap glyphs never named.
_SILENT_CMAP = {19, 20, 35, 36, 39, 40}

#: Glyph kinds: 0 never named, 1 named anywhere on the map, 2 named on a ray, 3 named on a ray and blocking it.
SILENT, FULLSCREEN, RAY, BLOCKING = 0, 1, 2, 3

_OBJECT_CLASS_WORDS = {
    "!": "potion",
    "?": "scroll",
    "+": "spellbook",
    "/": "wand",
    "=": "ring",
    '"': "amulet",
}


def _object_name(index: int) -> str:
    obj = nethack.objclass(index)
    name = nethack.OBJ_NAME(obj) or ""
    descr = nethack.OBJ_DESCR(obj) or ""
    word = _OBJECT_CLASS_WORDS.get(nethack.class_sym.from_oc_class(obj.oc_class).sym, "")
    if descr and word:  # unidentified appearance, as the game shows it: "ruby potion", "ZELGO MER scroll"
        return f"{descr} {word}"
    return name or descr or "strange object"


@lru_cache(maxsize=1)
def glyph_names() -> tuple[np.ndarray, np.ndarray]:
    """Every glyph's name and kind (SILENT/FULLSCREEN/RAY/BLOCKING), as arrays indexed by glyph."""
    names = np.empty(nethack.MAX_GLYPH + 1, dtype=object)
    kinds = np.zeros(nethack.MAX_GLYPH + 1, dtype=np.int8)
    names[:] = ""
    for glyph in range(nethack.MAX_GLYPH):
        kind, name = FULLSCREEN, ""
        if nethack.glyph_is_cmap(glyph):
            index = nethack.glyph_to_cmap(glyph)
            name = _CMAP_NAMES.get(index) or nethack.symdef.from_idx(index).explanation
            if index in _SILENT_CMAP or not name:
                kind = SILENT
            elif index in _FULLSCREEN_CMAP:
                kind = FULLSCREEN
            else:
                kind = BLOCKING if index in _BLOCKING_CMAP else RAY
        elif nethack.glyph_is_invisible(glyph):
            name = "invisible creature"
        elif nethack.glyph_is_pet(glyph):
            name = "tame " + nethack.permonst(nethack.glyph_to_mon(glyph)).mname
        elif nethack.glyph_is_body(glyph):
            name = nethack.permonst(glyph - nethack.GLYPH_BODY_OFF).mname + " corpse"
        elif nethack.glyph_is_statue(glyph):
            name = "statue of " + nethack.permonst(glyph - nethack.GLYPH_STATUE_OFF).mname
        elif nethack.glyph_is_monster(glyph):
            name = nethack.permonst(nethack.glyph_to_mon(glyph)).mname
        elif nethack.glyph_is_object(glyph):
            name = _object_name(nethack.glyph_to_obj(glyph))
        elif nethack.glyph_is_warning(glyph):
            name = "warning"
        elif nethack.glyph_is_swallow(glyph):
            name, kind = "swallowed", RAY
        else:
            kind = SILENT
        names[glyph], kinds[glyph] = name, kind if name else SILENT
    return names, kinds


#: 16 compass words clockwise from north: the order lines and directions are listed in.
COMPASS = (
    "north",
    "northnortheast",
    "northeast",
    "eastnortheast",
    "east",
    "eastsoutheast",
    "southeast",
    "southsoutheast",
    "south",
    "southsouthwest",
    "southwest",
    "westsouthwest",
    "west",
    "westnorthwest",
    "northwest",
    "northnorthwest",
)
#: Distance words by Chebyshev distance, nearest first.
DISTANCES = ("adjacent", "very near", "near", "far", "very far")
_RAYS = ((0, -1), (1, -1), (1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1))  # (dx, dy), y grows south
_RAY_LENGTH = 9


def _directions(dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Compass index (0 = north, clockwise) of each offset."""
    angle = np.degrees(np.arctan2(dx, -dy))  # 0 at north, 90 at east
    return np.round(angle / 22.5).astype(int) % 16


def _distances(dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Distance word index of each offset (Chebyshev: 1, 2, 3-5, 6-19, 20+)."""
    cheb = np.maximum(np.abs(dx), np.abs(dy))
    return np.searchsorted(np.array([1, 2, 5, 19]), cheb, side="left")


def _plural(name: str) -> str:
    if name.endswith(("s", "x", "ch", "sh")):
        return name + "es"
    return name + "s"


def _join(words: list[str]) -> str:
    if len(words) == 1:
        return words[0]
    if len(words) == 2:
        return f"{words[0]} and {words[1]}"
    return ", ".join(words[:-1]) + ", and " + words[-1]


def describe_map(glyphs: np.ndarray, x: int, y: int) -> str:
    """The language observation: ``<name> <distance> <directions>`` lines, far to near, in compass order.

    Named: everything of kind FULLSCREEN anywhere on the map, and, along 8 rays of up to 9 cells from the
    player at column ``x``, row ``y``, the other named map features up to and including the first blocking one.
    """
    names, kinds = glyph_names()
    kind_map = kinds[glyphs]
    ys, xs = np.nonzero(kind_map == FULLSCREEN)
    keep = (xs != x) | (ys != y)
    ys, xs = ys[keep], xs[keep]
    ray_y, ray_x = [], []
    height, width = glyphs.shape
    for dx, dy in _RAYS:
        for step in range(1, _RAY_LENGTH + 1):
            cx, cy = x + dx * step, y + dy * step
            if not (0 <= cx < width and 0 <= cy < height):
                break
            kind = kind_map[cy, cx]
            if kind >= RAY:
                ray_y.append(cy)
                ray_x.append(cx)
            if kind == BLOCKING:
                break
    ys = np.concatenate([ys, np.array(ray_y, dtype=ys.dtype)])
    xs = np.concatenate([xs, np.array(ray_x, dtype=xs.dtype)])
    if ys.size == 0:
        return ""
    dx, dy = xs - x, ys - y
    directions, distances = _directions(dx, dy), _distances(dx, dy)
    cell_names = names[glyphs[ys, xs]]
    groups: dict[tuple[str, int], dict[int, int]] = {}
    for name, dist, direction in zip(
        cell_names.tolist(), distances.tolist(), directions.tolist(), strict=True
    ):
        counts = groups.setdefault((name, dist), {})
        counts[direction] = counts.get(direction, 0) + 1
    lines = []
    for (name, dist), counts in groups.items():
        ordered = sorted(counts)
        shown = _plural(name) if any(count > 1 for count in counts.values()) else name
        words = _join([COMPASS[d] for d in ordered])
        lines.append((-dist, ordered[0], f"{shown} {DISTANCES[dist]} {words}"))
    lines.sort()
    return "\n".join(line for *_, line in lines)


_PRINTABLE = bytes(c if 32 <= c < 127 else (32 if c == 0 else 63) for c in range(256))


def tty_text(rows: np.ndarray) -> list[str]:
    """The tty rows as ASCII strings (anything else becomes ``?``), right-stripped."""
    return [bytes(row).translate(_PRINTABLE).decode("ascii").rstrip() for row in rows]


_MESSAGE_ENDS = ("--More--", "(end)")


def text_message(tty_lines: list[str]) -> str:
    """The message at the top of the screen: rows up to a ``--More--``/``(end)``/``(n of m)`` marker when a
    multi-row message shows one, else the first row."""
    for index, line in enumerate(tty_lines[:-2]):
        for marker in _MESSAGE_ENDS:
            if marker in line:
                rows = [*tty_lines[:index], line[: line.index(marker)]]
                return "\n".join(r.strip() for r in rows if r.strip())
        if " of " in line and line.rstrip().endswith(")") and "(" in line and index > 0:
            head = line[: line.rindex("(")]
            return "\n".join(r.strip() for r in [*tty_lines[:index], head] if r.strip())
    return tty_lines[0].strip() if tty_lines else ""


def text_cursor(glyphs: np.ndarray, x: int, y: int, cursor: np.ndarray) -> str:
    """``Yourself a <role>`` when the cursor is on the player, else ``<distance> <direction> <name>``;
    then the cursor's screen position."""
    names, _ = glyph_names()
    row, col = int(cursor[0]), int(cursor[1])
    if row - 1 == y and col == x:
        described = f"Yourself a {names[glyphs[y, x]]}"
    elif 0 <= row - 1 < glyphs.shape[0] and 0 <= col < glyphs.shape[1]:
        dx, dy = np.array([col - x]), np.array([row - 1 - y])
        name = names[glyphs[row - 1, col]] or "nothing"
        described = f"{DISTANCES[_distances(dx, dy)[0]]} {COMPASS[_directions(dx, dy)[0]]} {name}"
    else:
        described = "cursor outside the map"
    return f"{described}\n(x={col}, y={row})"


def text_inventory(inv_strs: np.ndarray, inv_letters: np.ndarray) -> str:
    """``a: a +1 orcish dagger (weapon in hand)`` lines, one per item."""
    lines = []
    for letter, item in zip(inv_letters.tolist(), tty_text(inv_strs), strict=True):
        if letter == 0:
            break
        lines.append(f"{chr(letter)}: {item}")
    return "\n".join(lines)
