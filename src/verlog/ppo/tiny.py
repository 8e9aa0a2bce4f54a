"""A tiny model and tokenizer built locally from an env's own text, so the learner runs on a CPU offline.

The tokenizer is a byte-level BPE trained with the ``tokenizers`` library on instructions and observations
from a few seeded episodes (random valid actions, seen through the same memory wrapper as in training),
the action names and the answer-format words. It uses Qwen2's pre-tokenizer, so ``AutoTokenizer`` loads it
back as a ``Qwen2Tokenizer`` that splits text exactly as during training. The model is a randomly
initialised two-layer Qwen2 (fixed seed). Both are saved with ``save_pretrained``; the trainer then loads
them through the ordinary ``from_pretrained(path)`` path. Nothing touches the network.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from verlog.ppo.prompts import FORMAT_REQUESTS

__all__ = ["CHAT_TEMPLATE", "build_tiny", "env_text"]

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
    vocab_size: int = 512,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
) -> Path:
    """Build the tokenizer and model into ``path`` (written in a temporary folder, then moved in place)."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    path = Path(path)
    texts = list(env_text(env_id, env_kwargs, memory=memory, memory_kwargs=memory_kwargs, seed=seed))

    # The same normaliser and pre-tokenizer as Qwen2Tokenizer, which AutoTokenizer will load this as.
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
    vocab = bpe.get_vocab()
    merges = [tuple(m) for m in _merges(bpe)]
    tokenizer = Qwen2Tokenizer(
        vocab=vocab, merges=merges, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = CHAT_TEMPLATE

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    torch.random.set_rng_state(state)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model is an ordinary folder
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, path)  # atomic; fails if another process built it first, which is fine
    except OSError:
        if not (path / "config.json").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _merges(tokenizer: Any) -> list[list[str]]:
    """The trained merges, read from the tokenizer's JSON (the Python API does not expose them)."""
    import json

    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [m.split(" ", 1) if isinstance(m, str) else list(m) for m in merges]
