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
    State,
)

__all__ = ["describe", "reference_cell", "rule_lines"]


def rule_lines(state: State, colors: bool = False) -> list[str]:
    """The active rules as text lines, in parse order."""
    return [
        f"{KIND_NAMES[a]} is {KIND_NAMES[b]}" for a, b in state.rules.pairs if colors or b in PROPERTY_WORDS
    ]


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
    ref = reference_cell(state)
    if ref is None:
        ref = anchor if anchor is not None else 0
    rx, ry = ref % board.width, ref // board.width
    lines = []
    for i, cell in enumerate(state.cells):
        if not cell:
            continue
        obj = cell & OBJ_MASK
        kind = obj & KIND_MASK
        if kind == BORDER or (kind == BABA and not colors) or (colors and i == ref):
            continue
        name = _name(obj, colors)
        lines.append(_offset(name, i % board.width - rx, i // board.width - ry, colors))
    rules = "\n".join(rule_lines(state, colors))
    return f"Active rules:\n{rules}\n\nObjects on the map:\n" + "\n".join(lines)


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
