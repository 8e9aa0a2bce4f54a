"""A tiny model and tokenizer built locally from an env's own text, so the learner runs on a CPU offline.

The tokenizer is trained with the ``tokenizers`` library on instructions and observations from a few seeded
episodes (random valid actions, seen through the same memory wrapper as in training), the action names and
the answer-format words: a byte-level BPE (any text) or a word vocabulary (the learning demonstration's
choice). The model is a randomly initialised two-layer Qwen2 (Qwen3 with the word vocabulary; fixed seed).
Both are saved with ``save_pretrained``; the trainer then loads them through the ordinary
``from_pretrained(path)`` path. Nothing touches the network.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from verlog.models.prompts import FORMAT_REQUESTS, SHORT_SYSTEM

__all__ = [
    "CHAT_TEMPLATE",
    "TINY_TOKENIZERS",
    "bpe_tokenizer",
    "build_tiny",
    "first_info",
    "env_text",
    "word_tokenizer",
]

#: The tokenizers :func:`build_tiny` can train.
TINY_TOKENIZERS = ("bpe", "words", "action-words")

#: A Qwen-style chat template (system, user and assistant turns between <|im_start|> and <|im_end|>).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def env_text(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    memory: str | None = None,
    memory_kwargs: Mapping[str, Any] | None = None,
    episodes: int = 6,
    steps: int = 24,
    seed: int = 0,
) -> Iterator[str]:
    """Texts an agent would see in ``env_id``: instructions, observations, actions and format words."""
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the verlog/... ids)
    from verlog.memory import wrap_memory

    rng = np.random.default_rng(seed)
    env = wrap_memory(gym.make(env_id, **dict(env_kwargs or {})), memory, **dict(memory_kwargs or {}))
    try:
        for episode in range(episodes):
            obs, info = env.reset(seed=seed + episode)
            yield str(info["instruction"])
            yield obs
            actions = list(info["valid_actions"])
            yield from actions
            for _ in range(steps):
                action = str(actions[rng.integers(len(actions))])
                yield f"THINK: I should {action}.\nACTION: {action}"
                obs, _, terminated, truncated, info = env.step(action)
                yield obs
                if terminated or truncated:
                    break
    finally:
        env.close()
    yield from FORMAT_REQUESTS.values()
    yield "<think>I should move.</think><action>wait</action>"


def build_tiny(
    path: str | Path,
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    memory: str | None = None,
    memory_kwargs: Mapping[str, Any] | None = None,
    tokenizer: str = "bpe",
    vocab_size: int = 512,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
) -> Path:
    """Build the tokenizer and model into ``path`` (written in a temporary folder, then moved in place).

    ``tokenizer`` is ``"bpe"`` (byte-level, ``vocab_size`` tokens, any text), ``"words"`` (one token per word
    of the game, unknown words become ``[UNK]``; see :func:`word_tokenizer`) or ``"action-words"`` (the same, and
    each action name of the game is one token too, so a one-token answer can name any action: Crafter's
    ``Place Table`` or ``Make Wood Pickaxe`` as well as ``Do``; the short prompt style's own words are in it).
    """
    import torch

    if tokenizer not in TINY_TOKENIZERS:
        raise ValueError(f"tiny tokenizer must be one of {TINY_TOKENIZERS}, got {tokenizer!r}")
    path = Path(path)
    if tokenizer == "bpe":
        texts = env_text(env_id, env_kwargs, memory=memory, memory_kwargs=memory_kwargs, seed=seed)
        tok, architecture = bpe_tokenizer(list(texts), vocab_size), "qwen2"
    else:
        texts = env_text(
            env_id, env_kwargs, memory=memory, memory_kwargs=memory_kwargs, episodes=64, seed=seed
        )
        texts = list(texts)
        actions: tuple[str, ...] = ()
        if (
            tokenizer == "action-words"
        ):  # also every word the short prompt style writes around the game's text
            info = first_info(env_id, env_kwargs)
            actions = tuple(str(a) for a in info["valid_actions"])
            texts += [*SHORT_SYSTEM.values(), "Goal: Observation: Actions:", str(info.get("goal", ""))]
        tok, architecture = word_tokenizer(texts, actions), "qwen3"
    config = _model_config(architecture, tok, hidden_size, num_layers, num_heads)

    from transformers import AutoModelForCausalLM

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    torch.random.set_rng_state(state)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model is an ordinary folder
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        os.replace(tmp, path)  # atomic; fails if another process built it first, which is fine
    except OSError:
        if not (path / "config.json").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def bpe_tokenizer(texts: list[str], vocab_size: int) -> Any:
    """A byte-level BPE trained on ``texts``, with Qwen2's normaliser and pre-tokenizer: ``AutoTokenizer``
    loads it back as a ``Qwen2Tokenizer`` (rebuilt from vocab and merges) that splits text the same way."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    merges = [tuple(m) for m in _merges(bpe)]
    tokenizer = Qwen2Tokenizer(
        vocab=bpe.get_vocab(),
        merges=merges,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def first_info(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``env_id``'s info after its first reset (its actions, goal and instruction)."""
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the verlog/... ids)

    env = gym.make(env_id, **dict(env_kwargs or {}))
    try:
        return dict(env.reset(seed=0)[1])
    finally:
        env.close()


def word_tokenizer(texts: list[str], actions: Sequence[str] = ()) -> Any:
    """One token per word (and per run of punctuation) of ``texts``, most frequent first; others are [UNK].

    Why: a random model answers with a uniformly drawn token. The byte-level BPE holds 512 tokens, 256 of
    them raw bytes, of which only 3 name a move; a word vocabulary holds every word of the game and little
    else, so with one-token answers a move is several times as likely at the start and prompts are shorter.
    It is saved as a plain ``tokenizer.json`` that ``AutoTokenizer`` loads as it is, which is why its model
    is a Qwen3: transformers rebuilds the tokenizer of every ``qwen2`` model as a byte-level BPE.

    ``actions`` of more than one word become single tokens as well (added tokens, matched before the text is
    split into words), in the prompt as in the answer.
    """
    import collections

    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    split = pre_tokenizers.Whitespace()
    words = [word for text in [*texts, "system user assistant"] for word, _ in split.pre_tokenize_str(text)]
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, "[UNK]"])}
    for word, _ in collections.Counter(words).most_common():  # ties keep first-seen order: a fixed vocabulary
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = split
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="[UNK]",
        additional_special_tokens=["<|im_start|>"],
    )
    multi_word = [a for a in actions if len(split.pre_tokenize_str(a)) > 1]
    if multi_word:
        tokenizer.add_tokens([AddedToken(a, single_word=True, normalized=False) for a in multi_word])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _model_config(
    architecture: str, tokenizer: Any, hidden_size: int, num_layers: int, num_heads: int
) -> Any:
    from transformers import AutoConfig

    return AutoConfig.for_model(
        architecture,
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        head_dim=hidden_size // num_heads,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def _merges(tokenizer: Any) -> list[list[str]]:
    """The trained merges, read from the tokenizer's JSON (the Python API does not expose them)."""
    import json

    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [m.split(" ", 1) if isinstance(m, str) else list(m) for m in merges]
