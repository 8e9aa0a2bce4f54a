"""Turn a language model's raw text into one of a game's actions.

Every text env parses through :func:`parse_action`, so the rules below hold for every game:

1. **Extraction.** The candidate is the text inside the last ``<action>…</action>`` pair (also BALROG's
   ``<|ACTION|>…<|END|>``); else the text after the last ``ACTION:``; else the whole response.
2. **Strict mode** reproduces BALROG exactly: drop every character that is not an ASCII letter, whitespace
   or ``:``, strip only what BALROG strips, and accept the result only on an exact, case-sensitive match.
3. **Lenient mode** (the default) ignores case, surrounding whitespace and punctuation, treats ``_`` and
   runs of whitespace as one space, looks the result up in the game's synonym table, and, failing that,
   accepts a first line that *starts* with exactly one action name (``"go forward."``, ``"Move West 3 steps"``).

Parsing never raises: any string, however long or strange, gives a :class:`ParsedAction`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ParsedAction", "extract_candidate", "normalize", "parse_action"]

#: How much of a response is looked at. A 1 MB response is parsed from its last 4096 characters, which is
#: where any of the accepted formats puts the action.
MAX_SCANNED_CHARS = 4096

#: (opening, closing, case-insensitive) of the tag formats, ours first, then BALROG's robust agents'.
_TAGS = (("<action>", "</action>", True), ("<|ACTION|>", "<|END|>", False))
_ACTION_LABEL = re.compile(r"action\s*:", re.IGNORECASE)
_BALROG_FILTER = re.compile(r"[^A-Za-z\s:]")
_NON_WORD = re.compile(r"[^0-9a-z]+")


@dataclass(frozen=True)
class ParsedAction:
    """What the env made of one response.

    Attributes:
        action: the action that runs: the parsed one, or the game's default when ``valid`` is False.
        valid: whether the response named an action.
        candidate: the extracted text the decision was made on (for logs).
    """

    action: str
    valid: bool
    candidate: str


def extract_candidate(text: str) -> str:
    """Return the part of ``text`` that should name the action (rule 1 of the module docstring)."""
    text = text[-MAX_SCANNED_CHARS:]
    for opening, closing, fold in _TAGS:
        haystack = _fold(text) if fold else text
        end = haystack.rfind(closing)
        start = haystack.rfind(opening, 0, end) if end >= 0 else -1
        if start >= 0:
            return text[start + len(opening) : end]
    labels = list(_ACTION_LABEL.finditer(text))
    return text[labels[-1].end() :] if labels else text


def _balrog_candidate(text: str) -> str:
    """BALROG's agents, exactly, on the whole response: the client strips the completion; the robust
    agents take the *first* ``<|ACTION|>…<|END|>`` pair (``re.search``); the CoT agent the text after the
    last ``ACTION:`` (case-sensitive); both strip after extraction; a bare answer is letter-filtered but not
    stripped again. Plain ``str.find`` keeps it linear on a megabyte of junk."""
    text = text.strip()
    for opening, closing, fold in _TAGS:
        haystack = _fold(text) if fold else text
        start = haystack.find(opening)
        end = haystack.find(closing, start + len(opening)) if start >= 0 else -1
        if end >= 0:
            return text[start + len(opening) : end].strip()
    filtered = _BALROG_FILTER.sub("", text)
    index = filtered.rfind("ACTION:")
    return filtered[index + len("ACTION:") :].strip() if index >= 0 else filtered


def _fold(text: str) -> str:
    """``text.lower()`` where that keeps every index in place (a few characters lower-case to two)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text


def normalize(text: str) -> str:
    """Lower-case, turn punctuation, ``_`` and whitespace runs into single spaces, and strip."""
    return _NON_WORD.sub(" ", text.lower()).strip()


def parse_action(
    response: object,
    actions: Sequence[str],
    default: str,
    strict: bool = False,
    synonyms: Mapping[str, str] | None = None,
) -> ParsedAction:
    """Parse ``response`` into one of ``actions``; fall back to ``default`` when it names none.

    Args:
        response: the model's raw output. Anything that is not a ``str`` (bytes, None, a number) is
            decoded or converted first, so a caller's bug cannot crash an env step.
        actions: the game's canonical action names, e.g. ``("turn left", ..., "toggle")``.
        default: the action executed when the response is invalid.
        strict: match BALROG exactly (see the module docstring) instead of leniently.
        synonyms: extra phrases, already :func:`normalize`-d, mapped to canonical action names.
    """
    if type(response) is str and response in actions:
        # The common case of a well-formed answer (and of scripted agents): both modes accept it as is.
        return ParsedAction(response, True, response)
    text = _as_text(response)
    if strict:
        candidate = _balrog_candidate(text)
        if candidate in actions:
            return ParsedAction(candidate, True, candidate)
        return ParsedAction(default, False, candidate[:200])

    raw = extract_candidate(text)
    lookup = _lookup_table(actions, synonyms)
    key = normalize(raw)
    if key in lookup:
        return ParsedAction(lookup[key], True, key)
    first_line = next((line for line in raw.splitlines() if line.strip()), "")
    if first_line != raw:
        key = normalize(first_line)
        if key in lookup:
            return ParsedAction(lookup[key], True, key)
    starts = {lookup[name] for name in lookup if key.startswith(name + " ")}
    if len(starts) == 1:
        return ParsedAction(starts.pop(), True, key)
    return ParsedAction(default, False, normalize(raw)[:200])


#: Lookup tables by (actions, id(synonyms)), with the synonyms object kept to check identity: a game's
#: action list and synonym table are class constants, so each is built once, not on every step.
_LOOKUPS: dict[tuple[tuple[str, ...], int], tuple[object, dict[str, str]]] = {}


def _lookup_table(actions: Sequence[str], synonyms: Mapping[str, str] | None) -> dict[str, str]:
    """Normalized phrase -> canonical action (canonical names win over synonyms)."""
    key = (tuple(actions), id(synonyms))
    entry = _LOOKUPS.get(key)
    if entry is None or entry[0] is not synonyms:
        lookup = {normalize(k): v for k, v in (synonyms or {}).items()}
        lookup.update({normalize(a): a for a in actions})
        if len(_LOOKUPS) > 256:
            _LOOKUPS.clear()
        entry = _LOOKUPS[key] = (synonyms, lookup)
    return entry[1]


def _as_text(response: object) -> str:
    if isinstance(response, str):
        return response
    if isinstance(response, bytes | bytearray):
        return bytes(response).decode("utf-8", errors="replace")
    return "" if response is None else str(response)
