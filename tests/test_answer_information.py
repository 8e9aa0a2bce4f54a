"""The answer's mutual information with the state, I(S; A), and the bonus on the mean answer's entropy
(``ppo.answer_entropy_coef``): a policy that plays one fixed mix of answers whatever it reads scores 0 however
sharp the mix, and the bonus can widen the mix while each state's answer sharpens."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from verlog.config import ConfigError, load_config
from verlog.ppo.forward import answer_information
from verlog.ppo.trainer import Trainer
from verlog.runkit.validate import validate

ROOT = Path(__file__).resolve().parents[1]


def test_a_blind_policy_has_no_information_however_sharp_and_a_reading_one_has_ln_k() -> None:
    mix = torch.tensor([0.7, 0.2, 0.1, 0.0])
    entropy, information = answer_information(mix.expand(5, -1).clone(), torch.ones(5))
    assert information.item() == pytest.approx(0.0, abs=1e-6)
    assert entropy.item() == pytest.approx(-(mix[:3] * mix[:3].log()).sum().item(), rel=1e-6)
    reading = torch.eye(4)[[0, 1, 2, 3, 0, 1]]  # each state its own answer, four kinds of state
    _, information = answer_information(
        reading, torch.tensor([1.0, 1, 1, 1, 0, 0])
    )  # the last two: no answer
    assert information.item() == pytest.approx(math.log(4), rel=1e-6)


def test_the_mean_answers_entropy_rises_while_each_states_answer_sharpens() -> None:
    """Gradient ascent on H(mean) + I from two states that both favour answer 0: the mix widens by the states
    answering apart, not by either answer growing random."""
    logits = torch.tensor([[2.0, 0.0, 0.0], [2.0, 0.1, 0.0]], requires_grad=True)
    optimizer = torch.optim.SGD([logits], lr=0.5)
    start = answer_information(torch.softmax(logits, -1), torch.ones(2))
    for _ in range(200):
        entropy, information = answer_information(torch.softmax(logits, -1), torch.ones(2))
        optimizer.zero_grad()
        (-(entropy + information)).backward()  # the mean answer's entropy, plus I: less entropy per state
        optimizer.step()
    probs = torch.softmax(logits, -1).detach()
    assert entropy.item() > start[0].item() and information.item() > start[1].item() + 0.3
    assert probs.argmax(-1).tolist()[0] != probs.argmax(-1).tolist()[1]


def _trainer(tmp_path: Path, name: str, *overrides: str) -> Trainer:
    config = load_config(
        ROOT / "envs" / "tiny.toml",
        [
            f"run.output_dir={tmp_path / 'runs'}", f"run.name={name}", f"model.path={tmp_path / 'model'}",
            "run.console=false", "env.num_envs=2", "ppo.turns_per_update=4", "ppo.critic_warmup_batches=0",
            "ppo.critic_warmup_iters=0", "run.total_updates=1", *overrides,
        ],
    )  # fmt: skip
    validate(config)
    return Trainer(config)


def test_every_update_logs_the_answers_information_and_the_bonus_moves_the_policy(tmp_path: Path) -> None:
    weights = []
    for name, coef in (("plain", "0.0"), ("bonus", "1.0")):
        trainer = _trainer(tmp_path, name, f"ppo.answer_entropy_coef={coef}")
        trainer.train()
        row = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()][-1]
        assert 0.0 <= row["losses/answer_information"] <= row["losses/answer_entropy"] + 1e-6
        actor = trainer.accelerator.unwrap_model(trainer.learner.models.actor)
        weights.append({k: v.detach().clone() for k, v in actor.state_dict().items()})
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_negative_bonus_is_refused() -> None:
    with pytest.raises(ConfigError, match="answer_entropy_coef must be >= 0"):
        validate(load_config(None, ["model.path=somewhere", "ppo.answer_entropy_coef=-0.1"]))
