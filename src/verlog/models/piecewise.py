"""Tokenize prompts piece by piece, caching each piece's ids, with the ids of tokenizing them whole.

Most of a turn's prompt is text the tokenizer saw a turn ago: the system message, the format request, the
lines of the observations the memory carries. A tokenizer cuts text before it encodes it, and no token
crosses a cut: added tokens (``<|im_start|>``, ...) are matched first, then the pre-tokenizer splits the rest
into words. So the text between two cuts tokenizes alone to the ids it gets inside the whole text, and those
ids can be cached. Two cuts are used:

* added tokens, which every Hugging Face tokenizer matches first (those that strip the whitespace next to
  them are left out);
* line starts (after a newline, before a non-space), only if the pre-tokenizer cuts there, as the regex
  pre-tokenizers of GPT-2, Llama 3 and Qwen do; checked on a probe text when the tokenizer is loaded.

The first text of each key (the instruction) is also tokenized whole and compared. A tokenizer where the two
differ is tokenized whole from then on, with a warning: slower, never different.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from itertools import chain
from typing import Any

__all__ = ["PiecewiseTokenizer", "added_token_splitter", "cuts_at_line_starts"]

#: The place after a newline and before a non-space character.
LINE_START = re.compile(r"(?<=\n)(?=\S)")

#: Line starts after and before each kind of character the pre-tokenizer regexes treat differently.
PROBE = "".join(
    f"{before}\n{after} "
    for before in ("word", "7", ".", "?!", "x ", "é", "'", "\n")
    for after in ("Word", "word", "7", ".", "'s", "-x", "é", "<a>", "(b", "\u0301")
)


class PiecewiseTokenizer:
    """Callable: token ids of a batch of texts, from cached pieces, equal to ``tokenizer(texts)``."""

    #: Cached pieces kept at most; past it the cache starts over (the constant pieces come back in one turn).
    max_cached_pieces = 16384

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.added = added_token_splitter(tokenizer)
        self.line_starts = cuts_at_line_starts(tokenizer)
        self.cache: dict[str, list[int]] = {}
        self.checked: set[str] = set()  # keys whose first text tokenized the same in pieces and whole

    @property
    def piecewise(self) -> bool:
        return self.added is not None or self.line_starts

    def whole(self, texts: Sequence[str]) -> list[list[int]]:
        """One batched call; a fast tokenizer's Rust backend encodes the batch in parallel."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:  # the same ids as ``tokenizer(texts)``, without building a BatchEncoding
            return [encoding.ids for encoding in backend.encode_batch(list(texts), add_special_tokens=False)]
        return list(self.tokenizer(list(texts), add_special_tokens=False)["input_ids"])

    def pieces(self, text: str) -> list[str]:
        parts = self.added.split(text) if self.added is not None else [text]
        if not self.line_starts:
            return [part for part in parts if part]
        # With a capturing splitter, the odd parts are the added tokens themselves: never cut those.
        return [
            piece
            for i, part in enumerate(parts)
            for piece in ([part] if i % 2 else LINE_START.split(part))
            if piece
        ]

    def __call__(self, texts: Sequence[str], keys: Sequence[str]) -> list[list[int]]:
        if not self.piecewise:
            return self.whole(texts)
        rows = [self.pieces(text) for text in texts]
        new = list(dict.fromkeys(piece for row in rows for piece in row if piece not in self.cache))
        if len(self.cache) + len(new) > self.max_cached_pieces:
            self.cache.clear()
            new = list(dict.fromkeys(piece for row in rows for piece in row))
        if new:
            self.cache.update(zip(new, self.whole(new), strict=True))
        ids = [list(chain.from_iterable(self.cache[piece] for piece in row)) for row in rows]
        first = {key: n for n, key in enumerate(keys) if key not in self.checked}
        if first:
            if self.whole([texts[n] for n in first.values()]) != [ids[n] for n in first.values()]:
                warnings.warn(
                    "this tokenizer gives other ids for a text cut into pieces at its added tokens and line "
                    "starts; prompts are tokenized whole from now on (slower, same result)",
                    stacklevel=3,
                )
                self.added, self.line_starts = None, False
                return self.whole(texts)
            self.checked.update(first)
        return ids


def added_token_splitter(tokenizer: Any) -> re.Pattern[str] | None:
    """A regex that splits text at the tokenizer's added tokens, keeping them; None if it has none.

    Tokens that strip the whitespace next to them are left out: their pieces would not tokenize alone.
    """
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    contents = sorted(
        {
            t.content
            for t in added.values()
            if not (getattr(t, "lstrip", False) or getattr(t, "rstrip", False))
        },
        key=len,
        reverse=True,
    )
    if not contents:
        return None
    return re.compile("(" + "|".join(re.escape(c) for c in contents) + ")")


def cuts_at_line_starts(tokenizer: Any) -> bool:
    """Whether the tokenizer's pre-tokenizer cuts at every line start of the probe, and the probe's lines
    tokenize alone to the ids of the whole probe. False for slow tokenizers and those without one."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.pre_tokenizer is None:
        return False
    text = backend.normalizer.normalize_str(PROBE) if backend.normalizer is not None else PROBE
    starts = {start for _, (start, _) in backend.pre_tokenizer.pre_tokenize_str(text)}
    if not all(match.start() in starts for match in LINE_START.finditer(text)):
        return False
    whole = backend.encode(PROBE, add_special_tokens=False).ids
    lines = backend.encode_batch(LINE_START.split(PROBE), add_special_tokens=False)
    return whole == list(chain.from_iterable(line.ids for line in lines))
