"""Did you mean ...? for a misspelt name: an env id, a suite, a config key. A floor-0 module: no verlog import."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean"]

#: A match this much less similar than the best one is left out (a typo has one answer, not three).
_BEHIND_BEST = 0.1


def did_you_mean(word: str, choices: Iterable[str], *, first: Iterable[str] = (), n: int = 3) -> str:
    """``did you mean 'a' or 'b'?`` naming the ``choices`` closest to ``word`` (difflib's ratio, at least
    0.6 and near the best match's), after the ``first`` ones (certain matches a caller found itself);
    ``""`` when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=n)
    if close:
        best = difflib.SequenceMatcher(None, word, close[0]).ratio()
        close = [c for c in close if difflib.SequenceMatcher(None, word, c).ratio() >= best - _BEHIND_BEST]
    named = list(dict.fromkeys([*first, *close]))[:n]
    return f"did you mean {' or '.join(map(repr, named))}?" if named else ""
