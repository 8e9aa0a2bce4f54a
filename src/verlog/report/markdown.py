"""Markdown formatting: numbers, durations, tables, code fences, clipped texts and skipped-line notes."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence


def fmt(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    if value == int(value) and abs(value) < 1e12:
        return str(int(value))
    return f"{value:.4g}"


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h {m:02d}m {s:02d}s"
    if m:
        return f"{m}m {s:02d}s"
    return f"{s}s"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def fence(text: str, lang: str = "text") -> list[str]:
    """A fenced block that cannot be closed early by backticks inside the text (CommonMark rule)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [ticks + lang, text.rstrip("\n"), ticks]


def clip(text: str, budget: int, head_share: float) -> str:
    """Keep the head and the tail of a long text (a prompt's instruction and its latest observation).

    The cuts snap to line ends when one is near, so no line is shown half.
    """
    if len(text) <= budget:
        return text
    head_n = int(budget * head_share)
    tail_n = budget - head_n
    head = text[:head_n]
    nl = head.rfind("\n")
    if nl >= head_n // 2:
        head = head[: nl + 1]
    tail = text[len(text) - tail_n :] if tail_n else ""
    nl = tail.find("\n")
    if 0 <= nl < tail_n // 2:
        tail = tail[nl + 1 :]
    cut = len(text) - len(head) - len(tail)
    return head.rstrip("\n") + f"\n[… {cut} characters cut …]\n" + tail


def lines_word(n: int) -> str:
    return f"{n} malformed line{'s' if n != 1 else ''}"


def skipped_note(n: int, file: str, lines: list[int], truncated: bool, last_line: int | None) -> str:
    where = ", ".join(str(i) for i in lines[:10]) + (", …" if len(lines) > 10 else "")
    note = f"skipped {lines_word(n)} in {file} (line{'s' if n != 1 else ''} {where})"
    if truncated and last_line is not None and lines and lines[-1] == last_line:
        note += "; the last line is incomplete: the run may still be writing it, or it crashed mid-write"
    return note
