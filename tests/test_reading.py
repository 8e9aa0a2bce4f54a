"""The reading loss (``ppo.reading_coef``): the answer's position also names the prompt word after a marker
(Crafter: what the player faces) among the tokens the answer may not use. A user relies on it finding the
right word, leaving the constrained answer's own distribution to the policy loss, training, and refusing the
settings where it would teach the answer to say that word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from verlog.config import ConfigError, load_config
from verlog.models.loading import load_tokenizer
from verlog.models.tiny import build_tiny
from verlog.ppo.update import READING_TARGETS, average_parts, marker_ids, reading_loss, reading_targets
from verlog.runkit.validate import validate

ROOT = Path(__file__).resolve().parents[1]
CRAFTER = "verlog/Crafter-v0"


@pytest.fixture(scope="module")
def words(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("words") / "model", CRAFTER, tokenizer="action-words")


def test_the_target_is_the_word_after_the_last_marker_in_the_prompt(words: Path) -> None:
    tokenizer = load_tokenizer(str(words))
    marker = marker_ids(tokenizer, "face")
    text = "You face water . You see tree . You face tree at your front ."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pad = tokenizer.pad_token_id
    rows = torch.tensor([ids + [pad], [pad] * 3 + ids[:-2], [pad] * (len(ids) + 1)])
    targets = reading_targets(rows, len(ids) + 1, marker)
    assert tokenizer.convert_ids_to_tokens(targets[:2].tolist()) == ["tree", "tree"]
    assert targets[2].item() == -1  # no marker: no target
    cut = reading_targets(rows[:1], ids.index(marker[0], 3) + 1, marker)  # the marker is the prompt's end
    assert tokenizer.convert_ids_to_tokens(cut.tolist()) == [
        "water"
    ]  # the earlier one is the last with a word


def test_the_loss_leaves_the_answers_own_tokens_alone() -> None:
    logits = torch.randn(3, 6, requires_grad=True)
    allowed = torch.tensor([[True, True, False, False, False, False]]).expand(3, -1)
    loss, correct, count = reading_loss(logits, torch.tensor([3, 1, -1]), torch.ones(3), allowed)
    assert count.item() == 1.0  # an answer token and no target are no targets
    loss.backward()
    assert torch.equal(logits.grad[:, :2], torch.zeros(3, 2))  # the answer's logits get nothing
    assert logits.grad[0, 3].item() < 0 and torch.equal(logits.grad[1:], torch.zeros(2, 6))
    assert correct.item() == float(logits[0, 2:].argmax().item() == 1)
    everything = torch.randn(2, 4, requires_grad=True)  # a row whose every token may answer (free reasoning)
    loss, _, count = reading_loss(
        everything, torch.tensor([1, 2]), torch.ones(2), torch.ones(2, 4, dtype=torch.bool)
    )
    loss.backward()
    assert count.item() == 0.0 and torch.isfinite(everything.grad).all() and not everything.grad.any()


def test_the_reading_figures_are_per_turn_with_a_target_not_per_answer_token() -> None:
    """A real model's answers are several tokens ("Move West" and its end): the logged accuracy is the share of
    targets named right, as the tiny model's one-token answers always gave, not that share over the tokens."""
    sums = {
        "losses/reading_loss": 3.0, "losses/reading_accuracy": 4.0, READING_TARGETS: 4.0,
        "losses/policy_loss": 1.0, "losses/actor_grad_norm": 2.0,
    }  # fmt: skip
    metrics = average_parts(sums, steps=2, tokens=12.0)  # 4 turns of 3 answer tokens, each one read right
    assert metrics["losses/reading_accuracy"] == 1.0 and metrics["losses/reading_loss"] == 0.75
    assert metrics["losses/policy_loss"] == 1.0 / 12 and metrics["losses/actor_grad_norm"] == 1.0
    assert READING_TARGETS not in metrics
    assert average_parts({"losses/reading_accuracy": 0.0, READING_TARGETS: 0.0}, 1, 5.0) == {
        "losses/reading_accuracy": 0.0
    }  # no targets in the update: 0, not a division by zero


def test_a_reading_run_logs_the_loss_and_learns_to_name_the_word(words: Path, tmp_path: Path) -> None:
    from verlog.ppo.trainer import Trainer

    config = load_config(
        ROOT / "envs" / "learn_crafter.toml",
        [
            f"model.path={words}", "model.build_tiny=false", "run.total_updates=4", f"run.output_dir={tmp_path}",
            "run.console=false", "env.num_envs=4", "ppo.turns_per_update=8", "ppo.num_minibatches=1",
            "ppo.critic_warmup_batches=0", "ppo.critic_warmup_iters=0", "ppo.reading_coef=1.0",
            "ppo.reading_after=face",
        ],
    )  # fmt: skip
    validate(config)
    trainer = Trainer(config)
    trainer.train()
    rows = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["losses/reading_loss"] for r in rows if "losses/reading_loss" in r]
    assert len(losses) == 4 and losses[-1] < losses[0] - 0.5
    assert all(0.0 <= r["losses/reading_accuracy"] <= 1.0 for r in rows if "losses/reading_accuracy" in r)


def test_settings_where_the_reading_cannot_work_are_refused(words: Path) -> None:
    with pytest.raises(ConfigError, match="needs ppo.reading_after"):
        validate(load_config(None, ["model.path=m", "sampling.constrain=actions", "ppo.reading_coef=1.0"]))
    with pytest.raises(ConfigError, match='and sampling.constrain = "actions"'):
        validate(load_config(None, ["model.path=m", "ppo.reading_coef=1.0", "ppo.reading_after=face"]))
    with pytest.raises(ConfigError, match="reading_coef must be >= 0"):
        validate(load_config(None, ["model.path=m", "ppo.reading_coef=-1.0"]))
    with pytest.raises(ValueError, match="'glimmer' is not in the model's vocabulary"):
        marker_ids(load_tokenizer(str(words)), "glimmer")
