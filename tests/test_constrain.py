"""Answers restricted to the valid actions (``sampling.constrain = "actions"``): every sampled answer is an
action, in each answer format; the learner scores the same restricted distribution, so the PPO ratio starts at
1; what cannot be constrained fails in one line before any weights load."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import verlog  # noqa: F401  (registers the ids)
from verlog.config import ConfigError, load_config
from verlog.envs.parsing import parse_action
from verlog.models.loading import load_tokenizer
from verlog.models.prompts import PromptBuilder
from verlog.models.tiny import build_tiny, first_info
from verlog.ppo.forward import actor_logprobs
from verlog.ppo.storage import TurnStorage
from verlog.runkit.validate import validate
from verlog.sampling import ActionConstraint, ConstraintError, TransformersSampler, eos_token_ids
from verlog.sampling.constrain import action_constraint

BABYAI = "verlog/BabyAI-GoTo-v0"
CRAFTER = "verlog/Crafter-v0"


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model with a byte-level BPE: BabyAI's actions take several tokens each."""
    return build_tiny(tmp_path_factory.mktemp("bpe") / "model", BABYAI, hidden_size=64, num_heads=2)


@pytest.fixture(scope="module")
def words(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model with the action-words vocabulary: every Crafter action is one token."""
    return build_tiny(tmp_path_factory.mktemp("words") / "model", CRAFTER, tokenizer="action-words")


def _setup(path: Path, env_id: str, answer_format: str, max_tokens: int):
    """Model, sampler with the constraint, prompts of real first observations, and each prompt's actions."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    tokenizer = load_tokenizer(str(path))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    constraint = action_constraint(tokenizer, str(path), answer_format=answer_format, max_tokens=max_tokens)
    sampler = TransformersSampler(model, tokenizer, max_new_tokens=max_tokens, constraint=constraint)
    builder = PromptBuilder(tokenizer, answer_format, max_prompt_tokens=1024, style="short")
    env = gym.make(env_id)
    prompts, actions = [], []
    for seed in range(4):
        observation, info = env.reset(seed=seed)
        prompts.append(builder.from_info(observation, info))
        actions.append(tuple(info["valid_actions"]))
    env.close()
    return model, tokenizer, constraint, sampler, prompts * 8, actions * 8


@pytest.mark.parametrize(
    ("fixture", "env_id", "answer_format", "max_tokens"),
    [
        ("bpe", BABYAI, "action", 12),  # several tokens an action, then EOS
        ("bpe", BABYAI, "think", 48),  # free reasoning (cut to fit), then the constrained action
        ("bpe", BABYAI, "tags", 48),
        ("words", CRAFTER, "action", 1),  # one token an action, no room for EOS
    ],
)
def test_every_sampled_answer_names_a_valid_action(
    fixture, env_id, answer_format, max_tokens, request
) -> None:
    path = request.getfixturevalue(fixture)
    _, _, constraint, sampler, prompts, actions = _setup(path, env_id, answer_format, max_tokens)
    free = TransformersSampler(sampler.model, sampler.tokenizer, max_new_tokens=max_tokens)
    out = sampler.generate(prompts, actions=actions)
    for text, allowed in zip(out.texts, actions, strict=True):
        parsed = parse_action(text, allowed, default="", strict=answer_format == "action")
        assert parsed.valid, text
        if answer_format == "action":
            assert text in allowed  # exactly an action, nothing around it
    # The untrained model answering freely almost never names an action: the constraint is what did it.
    free_texts = free.generate(prompts).texts
    free_valid = [parse_action(t, a, default="").valid for t, a in zip(free_texts, actions, strict=True)]
    assert sum(free_valid) < len(prompts) / 2
    assert constraint.refused == 0


@pytest.mark.parametrize(
    ("fixture", "env_id", "answer_format", "max_tokens"),
    [("bpe", BABYAI, "action", 12), ("bpe", BABYAI, "think", 48), ("words", CRAFTER, "action", 1)],
)
def test_the_learner_scores_the_constrained_distribution_exactly(
    fixture, env_id, answer_format, max_tokens, request
) -> None:
    """The sampler's log-probs (recorded while sampling) equal the learner's over the stored turns, with the
    constraint replayed from the stored actions: the first epoch's PPO ratio is 1. Without the masks they are
    not (the free distribution spreads mass over non-actions)."""
    path = request.getfixturevalue(fixture)
    model, tokenizer, constraint, sampler, prompts, actions = _setup(path, env_id, answer_format, max_tokens)
    out = sampler.generate(prompts, actions=actions)
    storage = TurnStorage(1, len(prompts), max_tokens, tokenizer.pad_token_id)
    storage.constraint = constraint
    storage.reset_first(prompts, actions)
    storage.insert(prompts, out.token_ids, out.logprobs, [0.0] * len(prompts), [False] * len(prompts),
                   [False] * len(prompts))  # fmt: skip
    for micro in storage.micro_batches(storage.rows(), 100_000):
        with torch.no_grad():
            logprobs, entropy = actor_logprobs(model, micro.batch, with_entropy=True)
        ts, ns = zip(*micro.rows, strict=True)
        sampled = storage.sampler_logprobs[list(ts), list(ns), : logprobs.shape[1]]
        mask = micro.batch.response_mask
        assert torch.allclose(logprobs * mask, sampled, atol=1e-4)
        assert torch.isfinite(entropy).all()
        micro.batch.allowed = None
        with torch.no_grad():
            free, _ = actor_logprobs(model, micro.batch)
        assert ((free - logprobs) * mask).sum() < -0.1  # renormalising raised the answers' log-probs
    if answer_format == "action" and max_tokens == 1:  # the entropy is over the 17 actions at most
        assert float(entropy.max()) <= torch.log(torch.tensor(17.0)) + 1e-4


def test_the_update_trains_on_constrained_answers(words: Path, tmp_path: Path) -> None:
    """Two updates of the tiny Crafter preset with constrained answers: no invalid answer, and the first
    minibatch's ratio is 1 (nothing clipped, the KL estimate 0), the reference scored under the constraint."""
    from verlog.ppo.trainer import Trainer

    config = load_config(
        Path(__file__).resolve().parents[1] / "envs" / "learn_crafter.toml",
        [
            f"model.path={words}", "model.build_tiny=false", "sampling.constrain=actions", "run.total_updates=2",
            f"run.output_dir={tmp_path}", "run.console=false", "env.num_envs=4", "ppo.turns_per_update=4",
            "ppo.num_minibatches=1", "ppo.critic_warmup_batches=0", "ppo.critic_warmup_iters=0",
            "ppo.kl_coef=0.1",
        ],
    )  # fmt: skip
    trainer = Trainer(config)
    trainer.train()
    lines = (trainer.run_dir / "metrics.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if "losses/clipfrac" in r]
    assert [r["env/invalid_action_rate"] for r in records] == [0.0, 0.0]
    assert [r["sampling/constraint_refused"] for r in records] == [0.0, 0.0]  # logged: every answer replayed
    assert records[0]["losses/clipfrac"] == 0.0 and abs(records[0]["losses/approx_kl"]) < 1e-6
    assert abs(records[0]["charts/kl_to_reference"]) < 1e-6  # the reference is the untrained actor
    assert trainer.learner.constraint is not None and trainer.learner.constraint.refused == 0


def test_what_cannot_be_constrained_is_one_clear_line(bpe: Path, words: Path) -> None:
    tokenizer = load_tokenizer(str(words))
    constraint = action_constraint(tokenizer, str(words), answer_format="action", max_tokens=1)
    with pytest.raises(ConstraintError, match=r'verlog/X gives no info\["valid_actions"\].*constrain=off'):
        constraint.check(None, "verlog/X")
    with pytest.raises(ConstraintError, match=r"empty .*valid_actions"):
        constraint.check([], "verlog/X")
    with pytest.raises(
        ConstraintError, match=r"verlog/X: the tokenizer cannot spell the answer 'fly away'.*unknown"
    ):
        constraint.check(["Do", "fly away"], "verlog/X")
    think = action_constraint(tokenizer, str(words), answer_format="think", max_tokens=16)
    with pytest.raises(ConstraintError, match=r"cannot spell the answer 'THINK: ok\\nACTION: Do'"):
        think.check(["Do"], CRAFTER)
    # The cap is checked against the longest answer, so the one fix named covers every action (9 bytes would not).
    short = action_constraint(load_tokenizer(str(bpe)), str(bpe), answer_format="action", max_tokens=8)
    with pytest.raises(
        ConstraintError, match=r"'(turn right|go forward)' can take up to 10 tokens .* it to 10\)"
    ):
        short.check(first_info(BABYAI)["valid_actions"], BABYAI)
    # A sampler with a constraint refuses a turn that comes without actions (an env that stopped listing them).
    sampler = TransformersSampler(torch.nn.Linear(1, 1), tokenizer, max_new_tokens=1, constraint=constraint)
    with pytest.raises(ConstraintError, match="came without"):
        sampler.generate([[5, 6]], actions=[None])


def test_a_run_that_cannot_be_constrained_stops_before_loading_weights(words: Path, tmp_path: Path) -> None:
    from verlog.ppo.trainer import Trainer

    config = load_config(
        Path(__file__).resolve().parents[1] / "envs" / "learn_crafter.toml",
        [f"model.path={words}", "model.build_tiny=false", "sampling.constrain=actions", "prompt.format=tags",
         f"run.output_dir={tmp_path}", "run.console=false", "prompt.max_response_tokens=16"],
    )  # fmt: skip
    with pytest.raises(
        ConstraintError, match="cannot spell the answer '<think>ok</think><action>Noop</action>'"
    ):
        Trainer(config)
    with pytest.raises(ConfigError, match="sampling.constrain must be one of"):
        validate(load_config(None, ["model.path=m", "sampling.constrain=tokens"]))


def test_the_constraint_reads_the_model_vocabulary_and_its_eos(words: Path) -> None:
    tokenizer = load_tokenizer(str(words))
    constraint = action_constraint(tokenizer, str(words), answer_format="action", max_tokens=1)
    assert isinstance(constraint, ActionConstraint) and constraint.word_level
    assert constraint.eos_ids == eos_token_ids(tokenizer)
    masks = constraint.token_masks([[tokenizer.convert_tokens_to_ids("Do")]], [("Noop", "Do")], 1)
    allowed = {tokenizer.convert_ids_to_tokens(i) for i in masks[0, 0].nonzero().flatten().tolist()}
    assert allowed == {"Noop", "Do"}


def test_verlog_eval_constrains_on_request_and_says_it_is_not_balrogs_protocol(
    bpe: Path, tmp_path: Path, capsys
) -> None:
    from verlog.evaluation.command import main

    out = tmp_path / "eval"
    argv = [str(bpe), "--suite", BABYAI, "--episodes", "2", "--out", str(out), "--sample", "--constrain", "actions",
            "--set", "prompt.max_response_tokens=12", "--set", "prompt.style=short"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["agent"]["constrain"] == "actions"
    assert summary["tasks"][BABYAI]["invalid_action_rate"] == 0.0
    assert "not BALROG's protocol" in (out / "results.md").read_text()
    assert "constrained" in capsys.readouterr().out
    # A cap of 9 tokens cannot hold "turn right" spelt byte by byte: one line, naming the env and the fix.
    capsys.readouterr()
    short = [*argv[:-4], "--set", "prompt.max_response_tokens=9", "--out", str(tmp_path / "short")]
    assert main(short) != 0
    assert "raise it to 10" in capsys.readouterr().err


def test_a_constrained_prompt_can_leave_the_action_list_out(words: Path) -> None:
    """``prompt.list_actions = false``: the short prompt drops its "Actions: ..." line (the constraint already
    holds the answer to them), and keeps the goal and the observation."""
    tokenizer = load_tokenizer(str(words))
    observation, info = gym.make(CRAFTER).reset(seed=0)
    config = load_config(
        Path(__file__).resolve().parents[1] / "envs" / "learn_crafter.toml", ["prompt.list_actions=false"]
    )
    listed = PromptBuilder(tokenizer, "action", 1024, style="short").from_info(observation, info)
    unlisted = PromptBuilder(
        tokenizer, "action", 1024, style="short", list_actions=config.prompt.list_actions
    ).from_info(observation, info)
    assert len(listed) - len(unlisted) >= len(info["valid_actions"])  # one token an action at least
    text = tokenizer.decode(unlisted)
    assert "Actions" not in text and "Goal" in text and "face" in text
