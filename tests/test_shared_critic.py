"""model.critic_shares_actor: the critic is a value head on the actor's own decoder, so the value loss, which has a
target every turn, trains the network the policy reads the observation with (critic pre-training included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from verlog.config import ConfigError, load_config
from verlog.models.value_head import ValueHeadModel
from verlog.ppo.trainer import Trainer
from verlog.ppo.update import clip_gradients
from verlog.runkit.validate import validate

ROOT = Path(__file__).resolve().parents[1]


def _trainer(tmp_path: Path, name: str, *overrides: str) -> Trainer:
    config = load_config(
        ROOT / "envs" / "tiny.toml",
        [
            f"run.output_dir={tmp_path / 'runs'}", f"run.name={name}", f"model.path={tmp_path / 'model'}",
            "run.console=false", "env.num_envs=2", "ppo.turns_per_update=4", "run.total_updates=1",
            "run.checkpoint_every=1", *overrides,
        ],
    )  # fmt: skip
    validate(config)
    return Trainer(config)


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("shared", [False, True])
def test_critic_pre_training_moves_the_actor_only_when_the_critic_shares_it(
    tmp_path: Path, shared: bool
) -> None:
    trainer = _trainer(
        tmp_path, f"shared-{shared}", f"model.critic_shares_actor={str(shared).lower()}",
        "ppo.critic_warmup_batches=1", "ppo.critic_warmup_iters=2", "ppo.critic_warmup_sample=1",
    )  # fmt: skip
    try:
        models = trainer.learner.models
        actor = trainer.accelerator.unwrap_model(models.actor)
        critic = trainer.accelerator.unwrap_model(models.critic)
        if shared:
            assert isinstance(critic, ValueHeadModel) and critic.backbone is actor.get_decoder()
            held = {id(p) for group in models.critic_optimizer.param_groups for p in group["params"]}
            assert held == {id(p) for p in critic.score.parameters()}  # the decoder is the actor optimiser's
        before = _weights(actor)
        trainer.warmup_critic()
        moved = [k for k, v in _weights(actor).items() if not torch.equal(v, before[k])]
    finally:
        trainer.envs.close()
        trainer.logger.close()
    assert bool(moved) == shared


def test_a_run_with_the_shared_critic_trains_saves_and_resumes(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "shared", "model.critic_shares_actor=true", "ppo.value_coef=0.5")
    trainer.train()
    actor = _weights(trainer.accelerator.unwrap_model(trainer.learner.models.actor))
    head = _weights(trainer.accelerator.unwrap_model(trainer.learner.models.critic).score)
    trainer.envs.close()
    resumed = Trainer(load_config(trainer.run_dir / "config.toml"), resume=trainer.run_dir)
    try:
        models = resumed.learner.models
        critic = resumed.accelerator.unwrap_model(models.critic)
        assert critic.backbone is resumed.accelerator.unwrap_model(models.actor).get_decoder()
        for key, value in _weights(resumed.accelerator.unwrap_model(models.actor)).items():
            torch.testing.assert_close(value, actor[key], atol=0, rtol=0)
        for key, value in _weights(critic.score).items():
            torch.testing.assert_close(value, head[key], atol=0, rtol=0)
    finally:
        resumed.envs.close()
        resumed.logger.close()


@pytest.mark.parametrize("shared", [False, True])
def test_each_network_is_clipped_once(tmp_path: Path, shared: bool) -> None:
    """A shared critic is one network with the actor: its decoder, carrying both losses' gradients, is clipped
    with the actor and the head together, once; a critic of its own is clipped apart."""
    trainer = _trainer(tmp_path, f"clip-{shared}", f"model.critic_shares_actor={str(shared).lower()}")
    try:
        models = trainer.learner.models
        networks = [list(models.actor.parameters()), list(models.critic.parameters())]
        if shared:  # one network: the actor's parameters and the head's
            own = {id(p) for p in networks[0]}
            networks = [networks[0] + [p for p in networks[1] if id(p) not in own]]
        generator = torch.Generator().manual_seed(0)
        for network in networks:
            for p in network:
                p.grad = torch.randn(p.shape, generator=generator, dtype=p.dtype)
        grads = [[p.grad.clone() for p in n] for n in networks]
        before = [torch.linalg.vector_norm(torch.stack([g.norm() for g in n])).item() for n in grads]
        norms = clip_gradients(models, 0.5, trainer.accelerator)
    finally:
        trainer.envs.close()
        trainer.logger.close()
    assert min(before) > 0.5
    for network, old, norm in zip(networks, grads, before, strict=True):
        # one clip: every gradient of a network scaled by the same factor, to the network's norm 0.5 (clipped
        # twice, a shared decoder would come out short of the head)
        for p, g in zip(network, old, strict=True):
            torch.testing.assert_close(p.grad, g * (0.5 / norm), rtol=1e-4, atol=1e-7)
    assert list(norms.values()) == pytest.approx(before, rel=1e-4)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.critic_layers=1"], "which model.critic_layers would change"),
        (["model.trainable_layers=1", "ppo.trunk_cache=true"], "which ppo.trunk_cache would change"),
        (["algo.advantage=grpo"], "needs a critic"),
        (["ppo.value_coef=0"], "ppo.value_coef must be > 0"),
    ],
)
def test_settings_the_shared_critic_cannot_work_with_are_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(load_config(None, ["model.path=somewhere", "model.critic_shares_actor=true", *overrides]))
