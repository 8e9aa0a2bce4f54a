"""The tiny models the presets build offline: both tokenizers load back through AutoTokenizer as saved."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from transformers import Qwen2Config

from verlog.models.loading import load_models, load_tokenizer
from verlog.models.prompts import PromptBuilder
from verlog.models.tiny import build_tiny, env_text, word_tokenizer

GOTO = "verlog/BabyAI-GoTo-v0"


@pytest.fixture(scope="module")
def words_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "words", GOTO, tokenizer="words", hidden_size=32)


def test_the_word_tokenizer_loads_back_with_one_token_per_game_word(words_model: Path) -> None:
    models = load_models(str(words_model))
    tok = models.tokenizer
    assert type(tok.backend_tokenizer.model).__name__ == "WordLevel"
    assert models.actor.config.model_type == "qwen3"
    env = gym.make(GOTO)
    _, info = env.reset(seed=12345)  # a seed the vocabulary was not built from
    for action in info["valid_actions"]:
        ids = tok(f" {action}", add_special_tokens=False)["input_ids"]
        assert len(ids) == len(action.split()) and tok.unk_token_id not in ids
    builder = PromptBuilder(tok, "action", 512)
    observation, info = env.reset(seed=7)
    ids = builder.from_info(observation, info)
    assert tok.unk_token_id not in ids
    text = builder.render(info["instruction"], observation)  # every character but spaces is in a token
    assert "".join(tok.convert_ids_to_tokens(ids)) == "".join(text.split())


def test_a_tokenizer_transformers_rebuilds_is_refused(tmp_path: Path) -> None:
    """transformers 5 loads any qwen2 folder's tokenizer as a byte-level Qwen2Tokenizer: a word-level
    tokenizer.json there would silently drop most of the prompt, so loading it is an error."""
    word_tokenizer(list(env_text(GOTO, episodes=1, steps=2))).save_pretrained(tmp_path)
    Qwen2Config(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
        tmp_path
    )
    with pytest.raises(ValueError, match="tokenizer.json holds a WordLevel model"):
        load_tokenizer(str(tmp_path))


def test_an_unknown_tiny_tokenizer_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tiny tokenizer must be one of .*'chars'"):
        build_tiny(tmp_path / "m", GOTO, tokenizer="chars")


def test_action_words_make_every_crafter_action_one_token(tmp_path: Path) -> None:
    """With one-token answers, every Crafter action (``Place Table``, ``Make Wood Pickaxe``) must be one token,
    and decoding that token must give the action the env parses; the short prompt has no unknown word."""
    path = build_tiny(
        tmp_path / "m",
        "verlog/Crafter-v0",
        {"max_steps": 20},
        memory="none",
        tokenizer="action-words",
        hidden_size=16,
    )
    tok = load_tokenizer(str(path))
    env = gym.make("verlog/Crafter-v0", max_steps=20)
    observation, info = env.reset(seed=12345)
    for action in info["valid_actions"]:
        ids = tok(action, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tok.decode(ids) == action, action
        assert env.unwrapped.parse(tok.decode(ids)).valid
    ids = PromptBuilder(tok, "action", 512, style="short").from_info(observation, info)
    assert tok.unk_token_id not in ids
