"""Critic-free group estimators: the advantage arithmetic by hand, GiGPO's anchor states on scripted BabyAI
episodes, group members starting in the same state, a GRPO run without any critic, and bad settings."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from toy_env import TOY_ID

import verlog
from verlog.config import AlgoConfig, Config, ConfigError, load_config
from verlog.envs.base import STATE_KEY
from verlog.memory import MEMORIES, RAW_KEY, wrap_memory
from verlog.models.loading import load_models
from verlog.models.prompts import PromptBuilder
from verlog.models.tiny import build_tiny
from verlog.ppo.advantages import (
    EPS,
    ESTIMATORS,
    GroupAdvantages,
    center_by_action,
    compute_advantages,
    discounted_returns,
    episode_advantages,
    group_advantages,
    token_advantages,
)
from verlog.ppo.group_rollout import GroupRollout, anchor_of
from verlog.ppo.storage import GroupStorage
from verlog.ppo.trainer import Trainer
from verlog.runkit.validate import anchor_problem, validate
from verlog.sampling import TransformersSampler

ROOT = Path(__file__).resolve().parents[1]
GOTO = "verlog/BabyAI-GoTo-v0"


# ------------------------------------------------------------------ arithmetic by hand
def _flat(result: GroupAdvantages) -> list[float]:
    """Every turn's advantage, episode after episode."""
    return [float(v) for turns in result.turns for v in turns]


def test_grpo_ties_mean_and_mean_std() -> None:
    # returns 1, 1, 0, 0: mean 0.5, sample std sqrt(4 * 0.25 / 3) = sqrt(1/3)
    rewards = [[0.0, 1.0], [1.0], [0.0, 0.0, 0.0], [0.0]]
    std = group_advantages(rewards, 4, std=True)
    expected = 0.5 / (math.sqrt(1 / 3) + EPS)
    assert _flat(std) == pytest.approx([expected] * 3 + [-expected] * 4)
    mean = group_advantages(rewards, 4, std=False)
    assert _flat(mean) == pytest.approx([0.5] * 3 + [-0.5] * 4)
    assert std.signal == [True] and std.no_signal_groups == 0


def test_grpo_groups_are_separate_and_all_equal_groups_give_nothing() -> None:
    # group 0: returns 2, 0 -> +-1 (mean) ; group 1: 3, 3 -> 0, no signal ; group 2: 1, 0 -> +-0.5
    rewards = [[2.0], [0.0], [1.0, 2.0], [3.0], [0.0, 1.0], [0.0]]
    result = group_advantages(rewards, 2, std=False)
    assert _flat(result) == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0, 0.5, 0.5, -0.5])
    assert result.signal == [True, False, True]
    # with std: a two-episode group with different returns gives +-1/sqrt(2) (sample std |a-b|/sqrt(2))
    scaled = group_advantages(rewards, 2, std=True)
    assert scaled.turns[0][0] == pytest.approx(1.0 / (math.sqrt(2.0) + EPS))
    assert list(scaled.turns[2]) == [0.0, 0.0]


def test_a_group_of_one_episode_keeps_its_return_when_pooled_over_episodes() -> None:
    # one row, no baseline: mean 0, std 1, as verl-agent's per-episode option, so G = 1 is plain REINFORCE
    for std in (False, True):
        assert list(episode_advantages([2.0, -1.0, 0.0], 1, std=std)) == [2.0, -1.0, 0.0]
    assert group_advantages([[1.0], [0.0]], 1, std=True).signal == [True, False]  # a 0 return moves nothing


def test_pooled_over_turns_long_episodes_weigh_more() -> None:
    # returns 1 (two turns) and 0 (one turn): rows 1, 1, 0, mean 2/3 (per episode it would be 1/2)
    rewards = [[0.0, 1.0], [0.0]]
    mean = group_advantages(rewards, 2, std=False, pool="turn")
    assert _flat(mean) == pytest.approx([1 / 3, 1 / 3, -2 / 3])
    scaled = group_advantages(rewards, 2, std=True, pool="turn")
    row_std = math.sqrt((2 * (1 / 3) ** 2 + (2 / 3) ** 2) / 2)  # Bessel over the three rows
    assert _flat(scaled) == pytest.approx([1 / 3 / (row_std + EPS)] * 2 + [-2 / 3 / (row_std + EPS)])
    # a group of one episode of two turns: its rows are its own baseline, nothing to learn (verl-agent's default)
    assert _flat(group_advantages([[0.0, 1.0]], 1, std=False, pool="turn")) == [0.0, 0.0]


def test_rloo_subtracts_the_mean_of_the_other_episodes() -> None:
    # returns 1, 0, 0, 1: A_i = R_i - (2 - R_i) / 3 = 4/3 (R_i - 1/2), whatever the norm
    rewards = [[1.0], [0.0], [0.0, 0.0], [0.0, 1.0]]
    for std in (False, True):
        result = group_advantages(rewards, 4, std=std, baseline="loo")
        assert _flat(result) == pytest.approx([2 / 3, -2 / 3, -2 / 3, -2 / 3, 2 / 3, 2 / 3])
    assert group_advantages([[1.0], [1.0]], 2, std=False, baseline="loo").signal == [False]
    with pytest.raises(ValueError, match="at least 2"):
        episode_advantages([1.0], 1, std=False, baseline="loo")


def test_truncated_episodes_count_the_rewards_they_got() -> None:
    # episode 0 was cut at the turn cap after three turns without reward: its return is 0, not bootstrapped
    result = group_advantages([[0.0, 0.0, 0.0], [0.0, 1.0]], 2, std=False)
    assert list(result.turns[0]) == [-0.5, -0.5, -0.5] and list(result.turns[1]) == [0.5, 0.5]


def test_gigpo_step_term_by_hand() -> None:
    # Group of two. Episode 0 sees a, b, a and gets reward 1 at its last turn; episode 1 sees a, c and gets 0.
    rewards = [[0.0, 0.0, 1.0], [0.0, 0.0]]
    anchors = [["a", "b", "a"], ["a", "c"]]
    result = group_advantages(rewards, 2, std=False, anchors=anchors, step_weight=0.5, step_gamma=0.5)
    # episode term: returns 1, 0 -> +0.5, -0.5
    # discounted returns: episode 0: 0.25, 0.5, 1 ; episode 1: 0, 0
    assert list(discounted_returns(rewards[0], 0.5)) == [0.25, 0.5, 1.0]
    # step group "a" = (0,0), (0,2), (1,0): returns 0.25, 1, 0, mean 5/12 ; "b" and "c" are alone -> 0
    a = np.array([0.25, 1.0, 0.0]) - 5 / 12
    assert list(result.turns[0]) == pytest.approx([0.5 + 0.5 * a[0], 0.5, 0.5 + 0.5 * a[1]])
    assert list(result.turns[1]) == pytest.approx([-0.5 + 0.5 * a[2], -0.5])
    assert sorted(result.step_groups) == [1, 1, 3]


def test_gigpo_with_all_equal_returns_still_has_a_step_signal() -> None:
    # both episodes succeed (no episode signal), but from state "a" one took longer: the step term tells them apart
    rewards = [[0.0, 1.0], [1.0]]
    result = group_advantages(rewards, 2, std=True, anchors=[["a", "b"], ["a"]], step_gamma=0.9)
    assert result.signal == [True]  # equal returns, yet the step term tells the turns apart
    step = 0.1 / 2 / (np.std([0.9, 1.0], ddof=1) + EPS)  # (0.9 - 0.95) / std, (1 - 0.95) / std
    assert list(result.turns[0]) == pytest.approx([-step, 0.0]) and list(result.turns[1]) == pytest.approx(
        [step]
    )


def test_centring_by_action_cancels_what_an_action_earns_everywhere_and_keeps_the_invalid_penalty() -> None:
    # "right" won on average (a push toward it in every state); "up" did not; one invalid answer was penalised.
    turns = [np.array([1.0, 0.5, -0.3]), np.array([0.0, -1.0])]
    actions = [["right", "right", None], ["up", "up"]]
    means = center_by_action(turns, actions)
    assert means == {"right": 0.75, "up": -0.5}
    assert list(turns[0]) == pytest.approx([0.25, -0.25, -0.3])  # the invalid answer keeps its -0.3
    assert list(turns[1]) == pytest.approx([0.5, -0.5])
    with pytest.raises(ValueError, match="episode 1: 1 actions for 2 turns"):
        center_by_action(turns, [["right", "right", None], ["up"]])


def test_centred_gigpo_keeps_only_what_depends_on_the_state() -> None:
    # Two states, each seen by both episodes of the group. In "a" going right was better, in "b" going left:
    # "right" fared better on average (+0.25 against -0.25 for "left"), which centring takes away, while each
    # state's comparison survives: right above left in "a", left above right in "b".
    rewards = [[1.0], [0.0], [0.0], [0.5]]
    anchors = [["a"], ["a"], ["b"], ["b"]]
    actions = [["right"], ["left"], ["right"], ["left"]]
    plain = group_advantages(rewards, 2, std=False, anchors=anchors, step_weight=1.0)
    centred = group_advantages(rewards, 2, std=False, anchors=anchors, step_weight=1.0, actions=actions)
    assert _flat(plain) == pytest.approx([1.0, -1.0, -0.5, 0.5])
    assert centred.action_means == pytest.approx({"right": 0.25, "left": -0.25})
    assert _flat(centred) == pytest.approx([0.75, -0.75, -0.75, 0.75])
    assert plain.action_means == {}


def test_storage_puts_the_turn_advantage_on_every_token_and_the_kl_return() -> None:
    storage = GroupStorage(2, 2, 3, pad_id=0)
    storage.put(0, 0, [5, 6, 7], [0.0] * 3, 0.0)
    storage.put(0, 1, [5], [0.0], 1.0)
    storage.put(1, 0, [5, 6], [0.0] * 2, 1.0)
    storage.turn_advantages[:] = torch.tensor([[2.0, -1.0], [3.0, 0.0]])
    storage.old_logprobs[0, 0] = torch.tensor([-1.0, -1.0, -1.0])  # KL estimate 1 per token against ref -2
    storage.ref_logprobs[0, 0] = torch.tensor([-2.0, -2.0, -2.0])
    token_advantages(storage, kl_coef=0.1, token_gamma=1.0)
    assert storage.advantages[0, 0].tolist() == pytest.approx([2.0 - 0.3, 2.0 - 0.2, 2.0 - 0.1])
    assert storage.advantages[0, 1].tolist() == [-1.0, 0.0, 0.0]
    assert storage.advantages[1, 0].tolist() == [3.0, 3.0, 0.0]
    assert storage.rows() == [(0, 0), (0, 1), (1, 0)] and storage.num_played == 3


# ------------------------------------------------------------------ anchors on scripted BabyAI episodes
def test_anchor_states_match_the_raw_observation_not_the_memory_text() -> None:
    """Two episodes of one group (same seed). Turning left then right comes back to the first view, so the
    views before turns 0 and 2 of both episodes are one step group, although the history text differs."""
    scripts = [["turn left", "turn right", "turn left"], ["turn right", "turn left", "turn right"]]
    anchors, texts = [], []
    for script in scripts:
        env = verlog.make_vec(GOTO, 1, memory="history", memory_kwargs={"turns": 3}, seed=0)
        obs, info = env.envs[0].reset(seed=7)
        seen, shown = [info[RAW_KEY]], [obs]
        for action in script[:-1]:
            obs, _, _, _, info = env.envs[0].step(action)
            seen.append(info[RAW_KEY])
            shown.append(obs)
        anchors.append(seen)
        texts.append(shown)
        env.close()
    assert anchors[0][0] == anchors[1][0] == anchors[0][2] == anchors[1][2]  # same start, back to it
    assert anchors[0][1] != anchors[0][0] and anchors[1][1] != anchors[0][1]  # left and right views differ
    assert texts[0][0] != texts[0][2]  # the memory shows the past turns: matching on it would miss the anchor
    result = group_advantages([[0.0] * 3, [0.0] * 3], 2, std=False, anchors=anchors)
    assert sorted(result.step_groups) == [1, 1, 4]


def test_the_same_state_after_a_valid_and_an_invalid_answer_is_one_anchor() -> None:
    """With invalid_action_feedback on, the note about an invalid answer heads the next observation; GiGPO
    matches on the state (info["state_text"]), so "go forward" and garbage that falls back to it meet."""
    seen, shown = [], []
    for answer in ("go forward", "xyzzy, no idea"):
        env = wrap_memory(gym.make(GOTO, invalid_action_feedback=True), "history", turns=2)
        env.reset(seed=5)
        obs, _, _, _, info = env.step(answer)
        seen.append(anchor_of(info, 0))
        shown.append(info[RAW_KEY])
        env.close()
    assert shown[0] != shown[1] and shown[1].startswith("Your previous response did not name a valid action")
    assert seen[0] == seen[1] == shown[0]
    result = group_advantages([[0.0], [1.0]], 2, std=False, anchors=[[seen[0]], [seen[1]]])
    assert result.step_groups == [2]  # one step group: the step term compares the two answers


def test_gigpo_refuses_a_memory_that_hides_the_observation() -> None:
    class Hidden(gym.Wrapper):
        """A memory that shows its own text and does not report the env's observation."""

        def reset(self, **kwargs):
            _, info = self.env.reset(**kwargs)
            return "remember nothing", {k: v for k, v in info.items() if k not in (RAW_KEY, STATE_KEY)}

        def step(self, action):
            _, reward, term, trunc, info = self.env.step(action)
            hidden = {k: v for k, v in info.items() if k not in (RAW_KEY, STATE_KEY)}
            return "remember nothing", reward, term, trunc, hidden

    assert "does not report it in info" in anchor_problem(Hidden(gym.make(GOTO)), Hidden)
    for memory in MEMORIES:  # every built-in memory reports it
        assert anchor_problem(wrap_memory(gym.make(GOTO), memory), memory) is None


# ------------------------------------------------------------------ group collection with a real model
@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model", TOY_ID, memory="history")


def _rollout(
    model_path: Path, algo: AlgoConfig, seed: int = 3, env_id: str = GOTO
) -> tuple[GroupRollout, GroupStorage]:
    models = load_models(str(model_path), with_reference=False)
    envs = verlog.make_vec(env_id, 4, memory="history", memory_kwargs={"turns": 2}, seed=seed)
    sampler = TransformersSampler(models.actor, models.tokenizer, max_new_tokens=3)
    prompts = PromptBuilder(models.tokenizer, "action", 768)
    rollout = GroupRollout(envs, sampler, prompts, algo=algo, seed=seed, stride=2, env_id=env_id)
    storage = GroupStorage(algo.max_episode_turns, 4, 3, models.tokenizer.pad_token_id)
    return rollout, storage


def test_group_members_start_in_the_same_state_and_runs_replay(model_path: Path) -> None:
    algo = AlgoConfig(
        advantage="gigpo", group_size=2, max_episode_turns=5, resample_attempts=0, filter_no_signal=False
    )
    rollout, storage = _rollout(model_path, algo)
    assert rollout.group_seeds() == [3, 3, 4, 4]
    starts = []
    for _ in range(2):
        samples: list[dict] = []
        torch.manual_seed(0)
        metrics = rollout.collect(storage, samples=samples)
        metrics.update(compute_advantages(storage, Config(algo=algo)))
        first = {s["env_index"]: s for s in samples if s["turn"] == 0}
        starts.append([storage.prompts[0][n] for n in range(4)])
        levels = [env.unwrapped.level for env in rollout.envs.envs]
        assert levels[0].mission == levels[1].mission and levels[2].mission == levels[3].mission
        assert (
            storage.prompts[0][0] == storage.prompts[0][1] and storage.prompts[0][2] == storage.prompts[0][3]
        )
        assert storage.prompts[0][0] != storage.prompts[0][2]  # groups differ
        assert len(first) == 4
        # whole episodes: each env played until its episode ended or the cap of 5 turns
        lengths = storage.active.sum(0)
        assert bool((lengths >= 1).all() and (lengths <= 5).all())
        assert metrics["charts/episodes"] == 4 and metrics["charts/turns"] == float(lengths.sum())
        assert metrics["groups/truncated_episodes"] == float(
            (lengths == 5).sum()
        )  # GoTo ends sooner only on success
        assert storage.turn_advantages[~storage.active].abs().sum() == 0
    assert rollout.group_seeds() == [7, 7, 8, 8]
    assert starts[0][0] != starts[1][0]  # the next batch resets to new states
    replay, replay_storage = _rollout(model_path, algo)
    torch.manual_seed(0)
    replay.collect(replay_storage)
    assert torch.equal(replay_storage.responses, _first_batch_responses(model_path, algo))


@pytest.fixture(scope="module")
def words_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose tokens are the toy game's words: some of its answers name a move."""
    return build_tiny(
        tmp_path_factory.mktemp("tiny-words") / "model", TOY_ID, memory="history", tokenizer="words"
    )


def test_centring_takes_each_valid_action_s_batch_mean_off_its_turns_and_leaves_invalid_turns(
    words_model_path: Path,
) -> None:
    runs = {}
    for centre in (False, True):  # the same seeded batch: centring only changes the advantages
        algo = AlgoConfig(
            advantage="gigpo",
            group_size=2,
            max_episode_turns=12,
            filter_no_signal=False,
            center_actions=centre,
        )
        rollout, storage = _rollout(words_model_path, algo, env_id=TOY_ID)
        samples: list[dict] = []
        torch.manual_seed(0)
        metrics = rollout.collect(storage, samples=samples)
        metrics.update(compute_advantages(storage, Config(algo=algo)))
        runs[centre] = (samples, storage.turn_advantages.clone(), metrics)
    (samples, plain, _), (same, centred, metrics) = runs[False], runs[True]
    assert [s["response"] for s in samples] == [s["response"] for s in same]
    valid = [s for s in samples if s["action_valid"]]
    assert valid and any(not s["action_valid"] for s in samples)
    means: dict[str, list[float]] = {}
    for s in valid:
        means.setdefault(s["action"], []).append(float(plain[s["turn"], s["env_index"]]))
    assert any(abs(np.mean(v)) > 0.1 for v in means.values())  # something to take off
    for s in samples:
        t, n = s["turn"], s["env_index"]
        taken = float(np.mean(means[s["action"]])) if s["action_valid"] else 0.0
        assert float(centred[t, n]) == pytest.approx(float(plain[t, n]) - taken, abs=1e-5)
    assert "groups/action_mean_spread" in metrics and "groups/action_mean_spread" not in runs[False][2]


def _first_batch_responses(model_path: Path, algo: AlgoConfig) -> torch.Tensor:
    rollout, storage = _rollout(model_path, algo)
    torch.manual_seed(0)
    rollout.collect(storage)
    return storage.responses


# ------------------------------------------------------------------ a critic-free run
def test_a_grpo_run_has_no_critic_anywhere(tmp_path: Path, model_path: Path) -> None:
    config = load_config(
        None,
        [
            f"run.output_dir={tmp_path}",
            "run.console=false",
            "run.torch_threads=1",
            "run.export_actor=false",
            "run.total_updates=2",
            "run.checkpoint_every=1",
            f"model.path={model_path}",
            f"env.id={TOY_ID}",
            "env.num_envs=4",
            "env.memory=history",
            "env.memory_kwargs={turns = 2}",
            "env.kwargs={max_steps = 3}",
            "prompt.format=action",
            "prompt.max_response_tokens=3",
            "ppo.micro_batch_tokens=512",
            "ppo.actor_lr=1e-3",
            'algo.advantage="grpo"',
            "algo.group_size=2",
            "algo.max_episode_turns=4",
        ],
    )
    trainer = Trainer(config)
    assert trainer.learner.models.critic is None and trainer.learner.models.critic_optimizer is None
    assert not any("critic" in type(m).__name__.lower() for m in trainer.learner.models.actor.modules())
    before = {k: v.clone() for k, v in trainer.learner.models.actor.state_dict().items()}
    trainer.train()
    assert any(not torch.equal(before[k], v) for k, v in trainer.learner.models.actor.state_dict().items())
    lines = (trainer.run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert all("losses/value_loss" not in r and "charts/value" not in r for r in records)
    assert all(r["charts/episodes"] >= 4 and "groups/no_signal_share" in r for r in records)
    assert records[-1]["global_step"] == sum(r["charts/turns"] for r in records)
    state = trainer.run_dir / "checkpoints" / "000002" / "state"
    models = sorted(p.name for p in state.iterdir() if p.name.startswith(("model", "pytorch_model")))
    assert len(models) == 1, models  # the actor's weights only
    resumed = Trainer(
        load_config(trainer.run_dir / "config.toml", ["run.total_updates=3"]), resume=trainer.run_dir
    )
    assert resumed.learner.models.critic is None and resumed.rollout.batches == trainer.rollout.batches
    resumed.train()
    assert resumed.update == 3


# ------------------------------------------------------------------ bad settings
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (['algo.advantage="a2c"'], "algo.advantage must be one of ['gae', 'grpo', 'gigpo', 'rloo']"),
        (['algo.advantage="grpo"', "env.num_envs=6", "algo.group_size=4"], "does not divide into groups"),
        (['algo.advantage="rloo"', "env.num_envs=1", "ppo.num_minibatches=1"], "groups of 1 have none"),
        (['algo.advantage="rloo"', 'algo.pool="turn"'], 'fix: algo.pool="episode"'),
        (
            ['algo.advantage="grpo"', "algo.resample_attempts=-1"],
            "algo.resample_attempts and algo.late_windows must be >= 0",
        ),
        (['algo.advantage="grpo"', 'env.vectorization_mode="async"'], 'fix: env.vectorization_mode="sync"'),
        (["algo.center_actions=true"], 'a critic has none (fix: algo.advantage="gigpo")'),
    ],
)
def test_bad_settings_stop_with_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        validate(load_config(None, ["model.build_tiny=true", f"env.id={GOTO}", "env.num_envs=8", *overrides]))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_bad_group_size_stops_the_script_before_any_model_loads(tmp_path: Path) -> None:
    model = tmp_path / "never-built"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "agents" / "ppo.py"),
            f"model.path={model}",
            "model.build_tiny=true",
            "env.num_envs=6",
            'algo.advantage="gigpo"',
            "algo.group_size=4",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(verlog.__file__).parents[1])},  # this checkout's verlog
    )
    assert done.returncode == 2
    assert (
        "config: env.num_envs = 6 does not divide into groups of algo.group_size = 4 (fix: algo.group_size=3"
        in done.stderr.strip().splitlines()[-1]
    )
    assert "Traceback" not in done.stderr and not model.exists()


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "rloo"])
def test_the_tiny_preset_passes_validation_for_each_critic_free_estimator_with_no_other_key(
    estimator: str,
) -> None:
    config = load_config(ROOT / "envs" / "tiny.toml", [f'algo.advantage="{estimator}"'])
    validate(config)  # 4 envs: groups of 4; the preset's critic pre-training does not apply (no critic)
    assert config.algo.groups_of(config.env.num_envs) == 4


def test_dynamic_sampling_plays_groups_without_signal_again_and_leaves_the_rest_out(model_path: Path) -> None:
    algo = AlgoConfig(advantage="grpo", group_size=2, max_episode_turns=3, resample_attempts=2)
    rollout, storage = _rollout(model_path, algo)
    torch.manual_seed(0)
    metrics = rollout.collect(storage)
    compute_advantages(storage, Config(algo=algo))
    draws = rollout.batches
    assert 1 <= draws <= 3 and metrics["groups/resampled_groups"] >= draws - 1
    assert (draws > 1) == (metrics["groups/no_signal_share"] > 0)
    kept = [k for k in range(2) if bool(storage.active[:, 2 * k : 2 * k + 2].any())]
    signal = [k for k in range(2) if bool(storage.turn_advantages[:, 2 * k : 2 * k + 2].abs().sum() > 0)]
    assert metrics["groups/filtered_share"] == (2 - len(kept)) / 2
    assert kept == (signal or [0, 1])  # what has a signal is trained on; all of it when nothing has
    assert rollout.group_seeds()[0] == 3 + 2 * draws  # one fresh seed draw per attempt (stride 2)


def test_every_configurable_estimator_is_registered_once() -> None:
    """The config names the estimators; the learner's registry computes each of them, and nothing else."""
    from verlog.config import ESTIMATOR_NAMES

    assert sorted(ESTIMATORS) == sorted(ESTIMATOR_NAMES)
    assert [name for name, e in ESTIMATORS.items() if e.anchors] == ["gigpo"]
    assert [name for name, e in ESTIMATORS.items() if e.baseline == "loo"] == ["rloo"]
