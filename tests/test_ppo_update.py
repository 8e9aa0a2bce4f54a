"""The PPO update on a tiny model: direction of the policy gradient, metrics, skipped steps, critic-only steps."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from accelerate import Accelerator
from toy_env import TOY_ID

from verlog.config import PPOConfig
from verlog.models.loading import load_models
from verlog.models.tiny import build_tiny
from verlog.ppo.build import Models
from verlog.ppo.forward import actor_logprobs
from verlog.ppo.gae import gae_advantages
from verlog.ppo.scoring import score
from verlog.ppo.storage import TurnStorage
from verlog.ppo.update import policy_loss, ppo_update, value_loss
from verlog.sampling import TransformersSampler

KEYS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance", "grad_norm")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory):
    torch.set_num_threads(1)
    path = build_tiny(tmp_path_factory.mktemp("tiny") / "model", TOY_ID, {"size": 5})
    return load_models(str(path), with_reference=False)


@pytest.fixture(scope="module")
def accelerator() -> Accelerator:
    return Accelerator(cpu=True)


def _trainables(models, lr: float = 1e-3):
    actor, critic = copy.deepcopy(models.actor), copy.deepcopy(models.critic)
    return {
        "actor": actor,
        "critic": critic,
        "actor_optimizer": torch.optim.AdamW(actor.parameters(), lr=lr),
        "critic_optimizer": torch.optim.AdamW(critic.parameters(), lr=lr),
    }


def _storage(models, parts, turns: int = 2, envs: int = 2) -> TurnStorage:
    """A storage filled by the tiny model's own samples, scored, with made-up rewards and returns computed."""
    storage = TurnStorage(turns, envs, max_response_tokens=6, pad_id=models.tokenizer.pad_token_id)
    sampler = TransformersSampler(parts["actor"], models.tokenizer, max_new_tokens=6)
    torch.manual_seed(1)
    storage.reset_first([[5 + n, 6, 7, 8][: 2 + n] for n in range(envs)])
    for t in range(turns):
        samples = sampler.generate(storage.prompts[t])
        storage.insert(
            [[9, 10 + t, 11][: 2 + n % 2] for n in range(envs)],
            samples.token_ids,
            samples.logprobs,
            [float(t + n) for n in range(envs)],
            [t == 1] * envs,
            [False] * envs,
        )
    score(
        storage,
        actor=parts["actor"],
        critic=parts["critic"],
        reference=None,
        temperature=1.0,
        max_tokens=256,
        device="cpu",
    )
    gae_advantages(storage, turn_gamma=0.99, turn_lam=0.95, token_gamma=1.0, token_lam=1.0)
    return storage


def _update(storage, parts, accelerator, **kwargs):
    config = PPOConfig(**{"entropy_coef": 0.0, **kwargs.pop("config", {})})
    kwargs["num_minibatches"] = len(storage.rows()) // kwargs.pop("minibatch_size")
    return ppo_update(storage, Models(**parts), accelerator=accelerator, config=config, **kwargs)


def _logprobs(actor, storage) -> torch.Tensor:
    with torch.no_grad():
        (micro,) = storage.micro_batches(storage.rows(), 10_000)
        return actor_logprobs(actor, micro.batch)[0] * micro.batch.response_mask


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_advantage_sign_moves_the_logprob_of_its_tokens(models, accelerator, sign: float) -> None:
    parts = _trainables(models)
    storage = _storage(models, parts, turns=1, envs=1)
    storage.advantages = sign * storage.response_mask
    before = _logprobs(parts["actor"], storage)
    _update(storage, parts, accelerator, minibatch_size=1)
    change = (_logprobs(parts["actor"], storage) - before).sum().item()
    assert sign * change > 0


def test_metrics_are_finite_and_the_ratio_starts_at_one(models, accelerator) -> None:
    parts = _trainables(models)
    storage = _storage(models, parts)
    metrics = _update(storage, parts, accelerator, minibatch_size=4, config={"entropy_coef": 1e-3})
    for key in KEYS:
        assert math.isfinite(metrics[f"losses/{key}"]), key
    # One minibatch, one step: the old log-probs came through the same forward path, so nothing is clipped.
    assert metrics["losses/clipfrac"] == 0.0 and abs(metrics["losses/approx_kl"]) < 1e-6
    assert metrics["losses/optimizer_steps"] == 1 and metrics["losses/skipped_steps"] == 0
    assert metrics["losses/entropy"] > 0


def test_a_non_finite_loss_skips_the_step_and_loses_nothing(models, accelerator) -> None:
    parts = _trainables(models)
    storage = _storage(models, parts)
    _update(storage, parts, accelerator, minibatch_size=2)  # the optimisers now hold moments
    weights = {k: v.clone() for k, v in parts["actor"].state_dict().items()}
    critic_weights = {k: v.clone() for k, v in parts["critic"].state_dict().items()}
    moments = copy.deepcopy(parts["actor_optimizer"].state_dict())
    good = storage.advantages.clone()
    storage.advantages[:, :, 0] = float("nan")
    metrics = _update(storage, parts, accelerator, minibatch_size=2)
    assert metrics["losses/skipped_steps"] == 2 and metrics["losses/optimizer_steps"] == 0
    assert all(torch.equal(weights[k], v) for k, v in parts["actor"].state_dict().items())
    assert all(torch.equal(critic_weights[k], v) for k, v in parts["critic"].state_dict().items())
    after = parts["actor_optimizer"].state_dict()
    assert all(torch.equal(moments["state"][i]["exp_avg"], s["exp_avg"]) for i, s in after["state"].items())
    assert all(p.grad is None for p in parts["actor"].parameters())
    storage.advantages = good
    assert _update(storage, parts, accelerator, minibatch_size=2)["losses/optimizer_steps"] == 2


def test_critic_only_update_leaves_the_actor(models, accelerator) -> None:
    parts = _trainables(models)
    storage = _storage(models, parts)
    actor = {k: v.clone() for k, v in parts["actor"].state_dict().items()}
    critic = {k: v.clone() for k, v in parts["critic"].state_dict().items()}
    metrics = _update(storage, parts, accelerator, minibatch_size=2, train_actor=False)
    assert all(torch.equal(actor[k], v) for k, v in parts["actor"].state_dict().items())
    assert not all(torch.equal(critic[k], v) for k, v in parts["critic"].state_dict().items())
    assert "losses/policy_loss" not in metrics and math.isfinite(metrics["losses/value_loss"])


def test_policy_loss_clip_and_dual_clip() -> None:
    old = torch.zeros(1, 4)
    new = torch.log(torch.tensor([[2.0, 2.0, 10.0, 1.0]]))
    adv = torch.tensor([[1.0, -1.0, -1.0, 0.5]])
    loss, clipped, kl = policy_loss(
        new, old, adv, torch.ones(1, 4), clip_low=0.2, clip_high=0.2, dual_clip=3.0
    )
    # +A, ratio 2 -> clipped at 1.2; -A, ratio 2 -> unclipped 2; -A, ratio 10 -> dual clip 3; ratio 1 -> -0.5
    assert loss.item() == pytest.approx(-1.2 + 2.0 + 3.0 - 0.5)
    assert clipped.item() == 1.0 and kl.item() > 0
    no_dual, _, _ = policy_loss(new, old, adv, torch.ones(1, 4), clip_low=0.2, clip_high=0.2, dual_clip=0.0)
    assert no_dual.item() == pytest.approx(-1.2 + 2.0 + 10.0 - 0.5)


def test_value_loss_clips_and_weights_the_first_value() -> None:
    values = torch.tensor([[1.0, 2.0, 9.0]])
    old = torch.tensor([[0.0, 2.0, 2.0]])
    returns = torch.tensor([[0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss = value_loss(values, old, returns, mask, clip=0.5, first_weight=3.0)
    # slot 0: max(1, 0.5**2) = 1, weighted 3; slot 1: 4; slot 2 is padding
    assert loss.item() == pytest.approx(0.5 * (3 * 1.0 + 4.0))
