"""Piecewise prompt tokenization gives the ids of whole-text tokenization, whatever the tokenizer."""

from __future__ import annotations

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

from verlog.models.piecewise import PiecewiseTokenizer, cuts_at_line_starts

TEXT = ["a wall 1 step forward\nthe door is open.\n'turn left'\n7 steps\n\n  indented\n"] * 20
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def trained(pre_tokenizer: object, decoder: object) -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizer
    bpe.decoder = decoder
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=SPECIALS, show_progress=False)
    bpe.train_from_iterator(TEXT, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe)
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS})
    return tokenizer


def qwen_style() -> PreTrainedTokenizerFast:
    return trained(
        pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        ),
        decoders.ByteLevel(),
    )


def sentencepiece_style() -> PreTrainedTokenizerFast:
    """Metaspace, as Llama 2 and Mistral: no cut at line starts, and a piece alone gets a leading space."""
    return trained(
        pre_tokenizers.Metaspace(prepend_scheme="first"), decoders.Metaspace(prepend_scheme="first")
    )


def prompts() -> list[str]:
    turns = ["a wall 1 step forward\n", "the door is open.\n", "'turn left'\n", "7 ünï\n  x\n", "<a>\n(b\n"]
    return [
        f"<|im_start|>system\nPlay.<|im_end|>\n<|im_start|>user\n{a}{b}\n{c}<|im_end|>\n<|im_start|>assistant\n"
        for a in turns
        for b in turns
        for c in turns
    ]


def test_a_regex_pre_tokenizer_is_cut_at_line_starts_with_the_whole_text_ids() -> None:
    tokenizer = qwen_style()
    assert cuts_at_line_starts(tokenizer)
    pieces = PiecewiseTokenizer(tokenizer)
    texts = prompts()
    for start in range(0, len(texts), 16):
        batch = texts[start : start + 16]
        assert pieces(batch, keys=["Play."] * len(batch)) == pieces.whole(batch)
    assert pieces.piecewise and "a wall 1 step forward\n" in pieces.cache
    assert pieces.whole(texts[:3]) == [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts[:3]]


def test_a_full_cache_starts_over_and_still_gives_the_same_ids() -> None:
    pieces = PiecewiseTokenizer(qwen_style())
    pieces.max_cached_pieces = 8
    texts = prompts()[:40]
    for text in texts:
        assert pieces([text], keys=["Play."]) == pieces.whole([text])
        assert len(pieces.cache) <= 8 + len(pieces.pieces(text))


def test_a_sentencepiece_style_tokenizer_falls_back_to_whole_text() -> None:
    tokenizer = sentencepiece_style()
    assert not cuts_at_line_starts(tokenizer)  # Metaspace keeps "forward\nthe" in one word
    pieces = PiecewiseTokenizer(tokenizer)
    texts = prompts()[:10]
    with pytest.warns(UserWarning, match="tokenized whole from now on"):
        ids = pieces(texts, keys=["Play."] * len(texts))
    assert ids == pieces.whole(texts) and not pieces.piecewise
    assert pieces(texts[:2], keys=["Other."] * 2) == pieces.whole(texts[:2])
