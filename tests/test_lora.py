"""LoRA for the actor (and the critic), the base-with-adapters-off reference, the merged HF export and the
gradient-checkpointing switch, on the CPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.config import ConfigError, load_config
from verlog.models.loading import AdapterDisabled, LoraSpec, load_models
from verlog.models.tiny import build_tiny
from verlog.models.weights import export_pretrained
from verlog.ppo.forward import actor_logprobs, collate, critic_values
from verlog.ppo.trainer import Trainer
from verlog.runkit.validate import validate

pytest.importorskip("peft", reason="the train extra's peft is not installed")

PROMPTS = [[5, 6, 7], [8, 9, 10, 11]]
RESPONSES = [[12, 13], [14, 15, 16]]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(
        tmp_path_factory.mktemp("tiny") / "model", TOY_ID, memory="history", memory_kwargs={"turns": 2}
    )


def _batch(models):
    return collate(PROMPTS, RESPONSES, models.tokenizer.pad_token_id)


def _nudge_adapters(model: torch.nn.Module) -> None:
    """Move the adapters off their zero start (LoRA's B starts at 0, so the adapted model equals the base)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.2)


@pytest.mark.parametrize("critic_head", ["token_classification", "value_head"])
def test_lora_trains_adapters_only_and_the_reference_is_the_base(model_path: Path, critic_head: str) -> None:
    models = load_models(str(model_path), lora=LoraSpec(4, 8.0), critic_lora=True, critic_head=critic_head)
    assert isinstance(models.reference, AdapterDisabled)
    assert list(models.reference.parameters()) == []  # a view of the actor, not a third copy
    trainable = [n for n, p in models.actor.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    critic_trainable = [n for n, p in models.critic.named_parameters() if p.requires_grad]
    assert any("lora_" in n for n in critic_trainable) and any("score" in n for n in critic_trainable)
    assert not any(
        p.requires_grad for n, p in models.critic.named_parameters() if "layers" in n and "lora_" not in n
    )

    batch = _batch(models)
    with torch.no_grad():
        untouched, _ = actor_logprobs(models.actor, batch)
        _nudge_adapters(models.actor)
        adapted, _ = actor_logprobs(models.actor, batch)
        reference, _ = actor_logprobs(models.reference, batch)
    base = load_models(str(model_path), with_reference=False)
    with torch.no_grad():
        base_logprobs, _ = actor_logprobs(base.actor, batch)
    torch.testing.assert_close(untouched, base_logprobs)  # B = 0 at the start: the actor is the base
    torch.testing.assert_close(reference, base_logprobs)  # adapters off: the base, even after they moved
    assert not torch.allclose(adapted, base_logprobs, atol=1e-4)
    values = critic_values(models.critic, batch)
    values.sum().backward()
    assert values.shape == (2, 4)


def test_lora_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="model.critic_lora needs model.lora_r > 0"):
        validate(load_config(None, ["model.path=m", "model.critic_lora=true"]))
    with pytest.raises(ConfigError, match="model.lora_r must be >= 0"):
        validate(load_config(None, ["model.path=m", "model.lora_r=-1"]))


def test_the_export_merges_the_adapters_into_a_plain_model(tmp_path: Path, model_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    models = load_models(str(model_path), lora=LoraSpec(4, 8.0), with_reference=False)
    _nudge_adapters(models.actor)
    export_pretrained(models.actor, tmp_path / "actor")
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "actor")
    assert not any("lora" in name for name in plain.state_dict())
    batch = _batch(models)
    with torch.no_grad():
        expected, _ = actor_logprobs(models.actor, batch)
        got, _ = actor_logprobs(plain, batch)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_gradient_checkpointing_gives_the_same_gradients(model_path: Path) -> None:
    grads = []
    for checkpointing in (False, True):
        models = load_models(str(model_path), with_reference=False, gradient_checkpointing=checkpointing)
        assert (
            any(getattr(m, "gradient_checkpointing", False) for m in models.actor.modules()) is checkpointing
        )
        models.actor.train()
        logprobs, _ = actor_logprobs(models.actor, _batch(models))
        logprobs.sum().backward()
        grads.append({n: p.grad.clone() for n, p in models.actor.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)


def test_a_lora_run_trains_checkpoints_and_resumes(tmp_path: Path, model_path: Path) -> None:
    config = load_config(
        None,
        [
            f"run.output_dir={tmp_path}", "run.name=lora", "run.console=false", "run.torch_threads=1",
            "run.total_updates=2", "run.checkpoint_every=1", "run.keep_checkpoints=3", f"model.path={model_path}",
            "model.lora_r=4", "model.lora_alpha=8", "model.critic_lora=true", "model.gradient_checkpointing=true",
            f"env.id={TOY_ID}", "env.num_envs=2", "env.memory=history", "env.memory_kwargs={turns = 2}",
            "env.kwargs={invalid_action_penalty = -0.1, max_steps = 4}", "prompt.format=action",
            "prompt.max_response_tokens=5", "ppo.turns_per_update=3", "ppo.num_minibatches=2",
            "ppo.micro_batch_tokens=512", "ppo.actor_lr=1e-2", "ppo.critic_lr=1e-3", "ppo.kl_coef=0.1",
        ],
    )  # fmt: skip
    first = Trainer(config)
    assert isinstance(first.learner.models.reference, AdapterDisabled)
    first.train()
    kl = [m["charts/kl_to_reference"] for m in _records(first.run_dir)]
    assert kl[0] == 0.0 and kl[1] != 0.0  # the adapters moved the actor away from its base
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(first.run_dir, resumed_dir)
    shutil.rmtree(resumed_dir / "checkpoints" / "000002")
    second = Trainer(load_config(resumed_dir / "config.toml"), resume=resumed_dir)
    second.train()
    for a, b in (
        (first.learner.models.actor, second.learner.models.actor),
        (first.learner.models.critic, second.learner.models.critic),
    ):
        wa, wb = a.state_dict(), b.state_dict()
        assert all(torch.equal(wa[k], wb[k]) for k in wa)

    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(first.run_dir / "checkpoints" / "000002" / "actor")
    batch = collate(PROMPTS, RESPONSES, first.learner.tokenizer.pad_token_id)
    with torch.no_grad():
        torch.testing.assert_close(
            actor_logprobs(exported, batch)[0],
            actor_logprobs(first.learner.models.actor, batch)[0],
            atol=1e-5,
            rtol=0,
        )


def _records(run_dir: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
