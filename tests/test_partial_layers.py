"""model.trainable_layers (only the actor's top layers train) and model.critic_layers (a shallower critic):
what they freeze or cut, that a PPO update leaves the frozen weights exactly as loaded, and that a cut critic
saves and reloads as an ordinary model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.config import ConfigError, load_config
from verlog.models.loading import decoder_layers, load_actor, load_critic
from verlog.models.tiny import build_tiny
from verlog.ppo.trainer import Trainer
from verlog.runkit.validate import validate


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model", TOY_ID, num_layers=3)


def test_trainable_layers_freeze_the_embeddings_and_lower_layers(model_path: Path) -> None:
    actor = load_actor(str(model_path), trainable_layers=1)
    layers = decoder_layers(actor)
    assert len(layers) == 3
    assert not any(p.requires_grad for p in actor.get_input_embeddings().parameters())
    assert not any(p.requires_grad for layer in layers[:2] for p in layer.parameters())
    assert all(p.requires_grad for p in layers[2].parameters())
    ids = torch.tensor([[5, 6, 7, 8]])
    actor(input_ids=ids).logits.sum().backward()
    assert all(p.grad is None for layer in layers[:2] for p in layer.parameters())
    assert all(p.grad is not None for p in layers[2].parameters())


def test_critic_layers_cut_the_stack_and_reload_as_saved(model_path: Path, tmp_path: Path) -> None:
    for head in ("token_classification", "value_head"):
        critic = load_critic(str(model_path), head=head, layers=1)
        assert len(decoder_layers(critic)) == 1
        assert critic.config.num_hidden_layers == 1
    critic = load_critic(str(model_path), layers=2)
    critic.save_pretrained(tmp_path / "critic")
    again = load_critic(str(tmp_path / "critic"), layers=2)  # resume: already cut, nothing more to cut
    ids = torch.tensor([[5, 6, 7, 8]])
    assert torch.equal(critic(input_ids=ids).logits, again(input_ids=ids).logits)


def test_an_update_moves_only_the_trainable_layers(model_path: Path, tmp_path: Path) -> None:
    config = load_config(
        None,
        [
            f"run.output_dir={tmp_path}",
            "run.name=partial",
            "run.console=false",
            "run.torch_threads=1",
            "run.export_actor=false",
            "run.checkpoint_every=0",
            "run.total_updates=1",
            f"model.path={model_path}",
            "model.trainable_layers=1",
            "model.critic_layers=1",
            f"env.id={TOY_ID}",
            "env.num_envs=2",
            "env.memory=none",
            "env.memory_kwargs={}",
            "prompt.max_response_tokens=3",
            "ppo.turns_per_update=2",
            "ppo.actor_lr=1e-2",
            "ppo.critic_lr=1e-2",
        ],
    )
    trainer = Trainer(config)
    try:
        actor = trainer.accelerator.unwrap_model(trainer.learner.models.actor)
        before = {k: v.detach().clone() for k, v in actor.state_dict().items()}
        trainer.train_update()
        after = actor.state_dict()
        moved = {k for k in before if not torch.equal(before[k], after[k])}
        assert moved, "the top layer did not train"
        assert all(".layers.2." in k or k.startswith("model.norm") for k in moved), sorted(moved)
        assert len(decoder_layers(trainer.accelerator.unwrap_model(trainer.learner.models.critic))) == 1
    finally:
        trainer.envs.close()
        trainer.logger.close()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.trainable_layers=-1"], "model.trainable_layers must be >= 0"),
        (["model.critic_layers=-2"], "model.critic_layers must be >= 0"),
        (["model.trainable_layers=2", "model.lora_r=8"], "alternatives"),
    ],
)
def test_bad_layer_counts_are_refused_at_parse_time(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(load_config(None, ["model.path=somewhere", *overrides]))
