"""One-step branches (``algo.branch_actions``): the arithmetic by hand, copies that leave the env alone, and a
group rollout whose branch turns carry every offered action from each played state without changing the play."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from accelerate import Accelerator
from toy_env import TOY_ID

import verlog
from verlog.config import AlgoConfig, Config, ConfigError, PPOConfig, load_config
from verlog.models.loading import load_models
from verlog.models.prompts import PromptBuilder
from verlog.models.tiny import build_tiny
from verlog.ppo.advantages import best_move_balance, branch_advantages, compute_advantages
from verlog.ppo.build import Models, make_batches
from verlog.ppo.forward import actor_logprobs, collate
from verlog.ppo.group_rollout import Brancher, GroupRollout, branch_width, offered_actions, try_actions
from verlog.ppo.scoring import score, score_metrics
from verlog.ppo.storage import GroupStorage
from verlog.ppo.update import ppo_update
from verlog.runkit.validate import validate
from verlog.sampling import TransformersSampler

GOTO_WIN = "verlog/BabaIsAI-goto_win-v0"
LINE = ("left", "right", "wait")  # the toy line game's actions, in the order it offers them


def test_branch_advantages_by_hand() -> None:
    tried = [0.0, 0.25, -0.25, 0.25]  # mean 0.0625
    advantages = branch_advantages(tried, weight=2.0)
    assert advantages == pytest.approx([-0.125, 0.375, -0.625, 0.375])
    assert sum(advantages) == pytest.approx(0.0)  # no move gains in every state
    lifted = branch_advantages(tried, weight=1.0, invalid=-0.3)  # an invalid answer: mean -0.01
    assert lifted == pytest.approx([0.01, 0.26, -0.24, 0.26])  # every offered move gains 0.0725 more


def test_policy_weighted_branches_give_the_gradient_of_the_expected_reward() -> None:
    """algo.branch_weight = "policy": the branches' surrogate has the gradient of the expected one-step reward
    under the policy, which vanishes once the policy plays only best moves; "best" is the cross-entropy toward
    the best moves, which vanishes there too but still pulls a best move the policy has ruled out; "uniform"
    pushes the logits by the advantages whatever the policy already does, so it never stops sharpening."""
    tried = torch.tensor([0.0, 0.25, -0.25, 0.25])
    by_hand = branch_advantages(tried.tolist(), 1.0, mode="policy", probabilities=[0.1, 0.2, 0.3, 0.4])
    assert by_hand == pytest.approx([-0.0075, 0.035, -0.0975, 0.07])  # p * (r - 0.075), the policy's mean
    assert branch_advantages(tried.tolist(), 2.0, mode="best") == pytest.approx([0.0, 1.0, 0.0, 1.0])
    logits = torch.tensor([0.3, -1.2, 0.8, 0.1], requires_grad=True)
    expected = (torch.softmax(logits, -1) * tried).sum()
    (exact,) = torch.autograd.grad(expected, logits)
    p = torch.softmax(logits, -1).detach().tolist()
    weights = torch.tensor(branch_advantages(tried.tolist(), 1.0, mode="policy", probabilities=p))
    (surrogate,) = torch.autograd.grad((weights * torch.log_softmax(logits, -1)).sum(), logits)
    torch.testing.assert_close(surrogate, exact)

    def push(mode: str, logits: list[float]) -> float:
        """The largest logit gradient the branches' surrogate gives a policy with these logits."""
        x = torch.tensor(logits, requires_grad=True)
        p = torch.softmax(x, -1).detach().tolist()
        weights = torch.tensor(branch_advantages(tried.tolist(), 1.0, mode=mode, probabilities=p))
        (grad,) = torch.autograd.grad((weights * torch.log_softmax(x, -1)).sum(), x)
        return float(grad.abs().max())

    on_best, ruled_out = [-30.0, 5.0, -30.0, 5.0], [30.0, -30.0, 0.0, -30.0]  # the best moves are 1 and 3
    assert push("policy", on_best) < 1e-6 and push("best", on_best) < 1e-6 and push("uniform", on_best) > 0.3
    assert push("policy", ruled_out) < 1e-6 < 0.9 < push("best", ruled_out)


def test_scored_branches_weigh_by_the_actors_probability_and_report_it(words_model_path: Path) -> None:
    """After scoring, algo.branch_weight = "policy" scales each branch's advantage by the probability the actor
    gave its answer, around the policy's mean; groups/branch_best_probability is the mass on the best moves."""
    rollout, storage, _ = _rollout(words_model_path, branch=True)
    torch.manual_seed(0)
    rollout.collect(storage)
    score(storage, actor=rollout.sampler.model, critic=None, reference=None, temperature=1.0, max_tokens=4096,
          device="cpu")  # fmt: skip
    algo = AlgoConfig(advantage="grpo", group_size=1, max_episode_turns=6, branch_actions=True)
    algo.branch_weight = "policy"
    metrics = compute_advantages(storage, Config(algo=algo))
    on_best = []
    for (t, n), tried in storage.branch_rewards.items():
        columns = [storage.branch_column(n, b) for b in range(len(tried))]
        chances = [
            float(storage.old_logprobs[t, c, : int(storage.response_lens[t, c])].sum().exp()) for c in columns
        ]
        assert 0 < sum(chances) < 1  # free answers: the three words are not all the actor may say
        weights = chances if storage.branch_valid[(t, n)] else [*chances, float(
            storage.old_logprobs[t, n, : int(storage.response_lens[t, n])].sum().exp())]  # fmt: skip
        rewards = tried if storage.branch_valid[(t, n)] else [*tried, float(storage.rewards[t, n])]
        mean = np.dot(weights, rewards) / sum(weights)
        for c, p, r in zip(columns, chances, tried, strict=True):
            assert float(storage.turn_advantages[t, c]) == pytest.approx(p * (r - mean), abs=1e-6)
        on_best.append(sum(p for p, r in zip(chances, tried, strict=True) if r == max(tried)))
    assert metrics["groups/branch_best_probability"] == pytest.approx(np.mean(on_best), abs=1e-6)


def test_balance_gives_a_rarely_best_move_its_share_and_keeps_the_batch_s_total() -> None:
    """algo.branch_balance: toggle best in 1 state of 10 and forward in 9 (one of them tied with left). Power 1
    gives each action the same total weight, power 0 changes nothing, and the batch's total stays 10."""
    best = [["forward"]] * 8 + [["forward", "left"], ["toggle"]]
    mass = {"forward": 8.5, "left": 0.5, "toggle": 1.0}
    for power in (0.0, 0.5, 1.0):
        factors = best_move_balance(best, power)
        assert sum(mass[a] * f for a, f in factors.items()) == pytest.approx(10.0)
        if power == 0.0:
            assert factors == pytest.approx({"forward": 1.0, "left": 1.0, "toggle": 1.0})
    even = best_move_balance(best, 1.0)
    assert [mass[a] * even[a] for a in mass] == pytest.approx([10 / 3] * 3)  # each action's share alike
    half = best_move_balance(best, 0.5)
    assert half["toggle"] / half["forward"] == pytest.approx((8.5 / 1.0) ** 0.5)
    assert best_move_balance([], 1.0) == {}


def test_balanced_best_branches_scale_by_their_action_and_report_each_action(words_model_path: Path) -> None:
    """On a scored batch, algo.branch_balance multiplies each best move's w / k by its action's factor (the
    other branches stay 0) and logs, per action, the actor's probability of it where it is best and its share."""
    rollout, storage, _ = _rollout(words_model_path, branch=True)
    torch.manual_seed(0)
    rollout.collect(storage)
    score(storage, actor=rollout.sampler.model, critic=None, reference=None, temperature=1.0, max_tokens=4096,
          device="cpu")  # fmt: skip
    algo = AlgoConfig(
        advantage="grpo", group_size=1, max_episode_turns=6, branch_actions=True, branch_weight="best"
    )
    algo.branch_balance = 1.0
    metrics = compute_advantages(storage, Config(algo=algo))
    telling = {
        key: tried for key, tried in storage.branch_rewards.items() if tried and max(tried) != min(tried)
    }
    best = {
        key: [a for a, r in zip(LINE, tried, strict=True) if r == max(tried)]
        for key, tried in telling.items()
    }
    factors = best_move_balance(list(best.values()), 1.0)
    assert len(factors) >= 2  # more than one action is best somewhere, so the factors differ from 1
    for (t, n), moves in best.items():
        for b, action in enumerate(LINE):
            expected = factors[action] / len(moves) if action in moves else 0.0
            assert float(storage.turn_advantages[t, storage.branch_column(n, b)]) == pytest.approx(expected)
    shares = [metrics[f"branch_best/{a}/share"] for a in factors]
    assert sum(shares) == pytest.approx(1.0)
    for action in factors:
        where = [(t, n) for (t, n), moves in best.items() if action in moves]
        chances = [float(storage.old_logprobs[t, c, : int(storage.response_lens[t, c])].sum().exp())
                   for t, n in where for c in [storage.branch_column(n, LINE.index(action))]]  # fmt: skip
        assert metrics[f"branch_best/{action}/probability"] == pytest.approx(np.mean(chances), abs=1e-6)


def test_tried_actions_report_each_move_s_reward_and_leave_the_env_where_it_was() -> None:
    env = gym.make(GOTO_WIN, shaping=0.25, offered_actions=["up", "right", "down", "left"])
    twin = gym.make(GOTO_WIN, shaping=0.25, offered_actions=["up", "right", "down", "left"])
    env.reset(seed=2)
    twin.reset(seed=2)
    actions = offered_actions(env)
    assert actions == ("up", "right", "down", "left")
    rewards = try_actions(env, actions)
    expected = []
    for action in actions:  # each move from the same state, in a fresh copy of the level
        fresh = gym.make(GOTO_WIN, shaping=0.25, offered_actions=list(actions))
        fresh.reset(seed=2)
        expected.append(float(fresh.step(action)[1]))
    assert rewards == expected
    assert max(rewards) > min(rewards)  # the shaping reward tells the moves apart
    assert env.step("left")[0] == twin.step("left")[0]  # the tried moves did not move the env
    assert branch_width([env, gym.make(TOY_ID)]) == 4


def test_an_env_that_cannot_be_copied_stops_with_its_name() -> None:
    env = gym.make(TOY_ID)
    env.reset(seed=0)
    env.unwrapped.lock = threading.Lock()  # a handle deepcopy refuses, as a live process or socket would be
    with pytest.raises(
        TypeError, match="algo.branch_actions tries each action in a copy of the env; LineEnv cannot"
    ):
        try_actions(env, ["left"])


@pytest.fixture(scope="module")
def words_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose tokens are the toy game's words, so each action's answer is a word of its own."""
    torch.set_num_threads(1)
    return build_tiny(
        tmp_path_factory.mktemp("tiny-words") / "model", TOY_ID, memory="history", tokenizer="words"
    )


def _rollout(model_path: Path, branch: bool) -> tuple[GroupRollout, GroupStorage, Brancher | None]:
    models = load_models(str(model_path), with_reference=False)
    envs = verlog.make_vec(
        TOY_ID, 2, memory="history", memory_kwargs={"turns": 1}, seed=5, size=4, max_steps=6
    )
    sampler = TransformersSampler(models.actor, models.tokenizer, max_new_tokens=3)
    prompts = PromptBuilder(models.tokenizer, "action", 768)
    algo = AlgoConfig(advantage="grpo", group_size=1, max_episode_turns=6, branch_actions=branch)
    width = branch_width(envs.envs) if branch else 0
    brancher = Brancher(models.tokenizer) if branch else None
    rollout = GroupRollout(
        envs, sampler, prompts, algo=algo, seed=5, stride=2, env_id=TOY_ID, brancher=brancher
    )
    storage = GroupStorage(6, 2, 3, models.tokenizer.pad_token_id, branch_width=width)
    return rollout, storage, brancher


def test_a_branched_batch_stores_every_offered_action_from_each_played_state(words_model_path: Path) -> None:
    runs = {}
    for branch in (False, True):
        rollout, storage, brancher = _rollout(words_model_path, branch)
        samples: list[dict] = []
        torch.manual_seed(0)
        metrics = rollout.collect(storage, samples=samples)
        metrics.update(compute_advantages(storage, Config(algo=rollout.algo)))
        runs[branch] = (samples, storage, brancher, metrics)
    (plain, _, _, _), (samples, storage, brancher, metrics) = runs[False], runs[True]
    assert brancher is not None
    # branching looks ahead in copies: the played episodes are the very ones played without it
    assert [(s["turn"], s["env_index"], s["response"]) for s in samples] == [
        (s["turn"], s["env_index"], s["response"]) for s in plain
    ]
    tokenizer = rollout.prompts.tokenizer
    played = storage.active[:, :2]
    assert metrics["groups/branch_turns"] == 3 * float(played.sum())  # left, right, wait from every state
    won_by_a_branch = False
    for t, n in played.nonzero().tolist():
        columns = [storage.branch_column(n, b) for b in range(3)]
        assert all(bool(storage.active[t, c]) for c in columns)
        answers = [storage.responses[t, c, : int(storage.response_lens[t, c])].tolist() for c in columns]
        assert answers == [tokenizer.encode(a, add_special_tokens=False) for a in LINE]  # no end token
        assert all(storage.prompts[t][c] == storage.prompts[t][n] for c in columns)
        rewards = [float(storage.rewards[t, c]) for c in columns]
        assert set(rewards) <= {0.0, 1.0}
        won_by_a_branch |= 1.0 in rewards
        # grpo with groups of one: the played turn keeps its episode term, 0; the branches carry the comparison
        assert float(storage.turn_advantages[t, n]) == 0.0
        valid = next(s["action_valid"] for s in samples if (s["turn"], s["env_index"]) == (t, n))
        mean = np.mean(rewards if valid else [*rewards, float(storage.rewards[t, n])])
        for c, reward in zip(columns, rewards, strict=True):
            assert float(storage.turn_advantages[t, c]) == pytest.approx(reward - mean, abs=1e-6)
    assert won_by_a_branch  # some state was one step from the target: its winning move stands out
    assert storage.turn_advantages[~storage.active].abs().sum() == 0
    # the aim metrics count the valid played answers only
    gains, best = [], []
    for s in samples:
        if s["action_valid"]:
            t, n = s["turn"], s["env_index"]
            tried = [float(storage.rewards[t, storage.branch_column(n, b)]) for b in range(3)]
            gains.append(s["reward"] - np.mean(tried))
            best.append(s["reward"] >= max(tried))
    assert gains and len(gains) < len(samples)  # the tiny model also answers garbage
    assert metrics["groups/branch_gain"] == pytest.approx(np.mean(gains), abs=1e-6)
    assert metrics["groups/branch_best_share"] == pytest.approx(np.mean(best))


def test_scoring_runs_a_played_turn_s_prompt_once_for_it_and_its_branches(words_model_path: Path) -> None:
    """The branches repeat their played turn's prompt: scoring groups them by prompt, and each row's old
    log-probs are those it gets scored alone."""
    rollout, storage, _ = _rollout(words_model_path, branch=True)
    torch.manual_seed(0)
    rollout.collect(storage)
    shared = storage.shared_prompt_batches(storage.rows(), max_tokens=4096)
    played = storage.active[:, :2]
    assert sum(int(m.batch.prompt_ids.shape[0]) for m in shared) <= int(played.sum())  # one prompt per state
    assert {row for m in shared for row in m.rows} == set(storage.rows())  # every branch shares its state's
    actor = rollout.sampler.model
    score(storage, actor=actor, critic=None, reference=None, temperature=1.0, max_tokens=4096, device="cpu")
    pad = storage.pad_id
    with torch.no_grad():
        for t, n in storage.rows():
            answer = storage.responses[t, n, : int(storage.response_lens[t, n])].tolist()
            alone, _ = actor_logprobs(actor, collate([storage.prompts[t][n]], [answer], pad))
            torch.testing.assert_close(storage.old_logprobs[t, n, : len(answer)], alone[0], atol=1e-5, rtol=0)


def test_the_update_runs_a_state_s_prompt_once_and_steps_as_row_by_row(words_model_path: Path) -> None:
    """ppo.share_branch_prompts: the update's micro-batches hold each state's prompt once, for its played turn
    and its branches, and one optimiser step over the batch moves the actor as the row-by-row update does."""
    rollout, storage, _ = _rollout(words_model_path, branch=True)
    torch.manual_seed(0)
    rollout.collect(storage)
    actor = rollout.sampler.model
    score(storage, actor=actor, critic=None, reference=None, temperature=1.0, max_tokens=4096, device="cpu")
    compute_advantages(storage, Config(algo=rollout.algo))
    rows, states = storage.rows(), storage.prompt_groups(storage.rows())
    assert len(states) < len(rows)  # the branches repeat their state's prompt
    after = {}
    for share in (False, True):
        storage.share_branch_prompts = share
        if share:
            (minibatch,) = storage.minibatches(1, 4096)
            assert sum(int(mb.batch.prompt_ids.shape[0]) for mb in minibatch) == len(states)
            assert sorted(row for mb in minibatch for row in mb.rows) == sorted(rows)
        model = copy.deepcopy(actor)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)  # the step is the (clipped) gradient
        metrics = ppo_update(
            storage,
            Models(actor=model, critic=None, actor_optimizer=optimizer, critic_optimizer=None),
            accelerator=Accelerator(cpu=True),
            config=PPOConfig(entropy_coef=0.01),
            num_minibatches=1,
        )
        after[share] = ([p.detach().clone() for p in model.parameters()], metrics)
    moved = [a - b.detach() for a, b in zip(after[False][0], actor.parameters(), strict=True)]
    assert max(float(d.abs().max()) for d in moved) > 1e-4  # the update did move the actor
    for a, b in zip(after[False][0], after[True][0], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    for key in ("losses/policy_loss", "losses/entropy", "losses/grad_norm"):
        assert after[True][1][key] == pytest.approx(after[False][1][key], rel=1e-4, abs=1e-6), key


def toy_branch_batches(model_path: Path, *overrides: str) -> tuple[Any, Any]:
    """``make_batches`` for two toy envs in one GiGPO group, with one-step branches and ``overrides``."""
    config = load_config(None, [f"model.path={model_path}", f"env.id={TOY_ID}", "env.num_envs=2",
                                'algo.advantage="gigpo"', "algo.branch_actions=true", *overrides])  # fmt: skip
    models = load_models(str(model_path), with_reference=False)
    envs = verlog.make_vec(TOY_ID, 2, memory="history", seed=0)
    sampler = TransformersSampler(models.actor, models.tokenizer, max_new_tokens=3)
    config.algo.group_size = 2
    prompts = PromptBuilder(models.tokenizer, "action", 768)
    return make_batches(config, envs, sampler, prompts, models.tokenizer.pad_token_id)


def test_sharing_branch_prompts_refuses_what_reads_each_row_s_prompt(words_model_path: Path) -> None:
    with pytest.raises(ValueError, match="ppo.share_branch_prompts=false"):
        toy_branch_batches(words_model_path, "ppo.share_branch_prompts=true", "ppo.reading_coef=0.1")


def test_trunk_cache_with_branches_warns_that_it_shares_no_prompt(words_model_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"about 4x scoring's work.*ppo.share_branch_prompts=true"):
        toy_branch_batches(words_model_path, "ppo.trunk_cache=true")


def test_make_batches_gives_each_env_its_branch_columns(words_model_path: Path) -> None:
    rollout, storage = toy_branch_batches(words_model_path)
    assert isinstance(rollout, GroupRollout) and rollout.brancher is not None
    assert storage.num_envs == 2 * (1 + 3) and storage.branch_columns([1]) == [5, 6, 7]
    # the sampler-vs-learner gap is measured on sampled answers only: a branch was never sampled
    storage.response_mask[0, :, 0] = 1.0
    storage.old_logprobs[0, :, 0] = -1.0
    storage.sampler_logprobs[0, :2, 0] = -1.5  # the branches' stay 0, a gap of 1 nat if they were counted
    gap = score_metrics(storage, values=False, old_logprobs=True, reference=False)[
        "charts/sampler_logprob_gap"
    ]
    assert gap == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.branch_actions=true"], 'a critic has none (fix: algo.advantage="gigpo")'),
        (
            ['algo.advantage="gigpo"', "algo.branch_actions=true", "ppo.reuse_sampler_logprobs=true"],
            "fix: ppo.reuse_sampler_logprobs=false",
        ),
        (['algo.advantage="gigpo"', 'algo.branch_weight="policy"'], "fix: algo.branch_actions=true"),
        (
            [
                'algo.advantage="grpo"',
                "algo.branch_actions=true",
                "ppo.reuse_sampler_logprobs=false",
                "algo.branch_balance=0.5",
            ],
            "weighs best moves (fix: branch_weight=best, power >= 0)",
        ),  # fmt: skip
        (
            ['algo.advantage="grpo"', "algo.branch_balance=-1"],
            "weighs best moves (fix: branch_weight=best, power >= 0)",
        ),
        (
            ['algo.advantage="grpo"', "algo.group_size=1", "algo.late_windows=2"],
            "fix: algo.branch_actions=true algo.group_size=1",
        ),
        (
            ['algo.advantage="grpo"', "algo.group_size=2", "algo.late_windows=2", "algo.branch_actions=true"],
            "fix: algo.branch_actions=true algo.group_size=1",
        ),
    ],
)
def test_bad_branch_settings_stop_with_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        validate(
            load_config(None, ["model.build_tiny=true", f"env.id={TOY_ID}", "env.num_envs=4", *overrides])
        )
    assert message in str(error.value) and "\n" not in str(error.value)


def test_late_windows_record_each_episode_from_its_drawn_turn_and_replay_exactly(
    words_model_path: Path,
) -> None:
    """algo.late_windows: every env plays k * K unrecorded turns before its K-turn window (k drawn per env and
    batch), so the windows reach late states; an episode that ends first is recorded from its reset; the same
    seed replays the same batch."""
    runs = []
    for _ in range(2):
        models = load_models(str(words_model_path), with_reference=False)
        envs = verlog.make_vec(
            TOY_ID, 4, memory="history", memory_kwargs={"turns": 1}, seed=5, size=7, max_steps=12
        )
        sampler = TransformersSampler(models.actor, models.tokenizer, max_new_tokens=3)
        prompts = PromptBuilder(models.tokenizer, "action", 768)
        algo = AlgoConfig(
            advantage="grpo",
            group_size=1,
            max_episode_turns=2,
            branch_actions=True,
            late_windows=3,
            filter_no_signal=False,  # every window stays in the storage, signal or not
        )
        rollout = GroupRollout(
            envs,
            sampler,
            prompts,
            algo=algo,
            seed=5,
            stride=4,
            env_id=TOY_ID,
            brancher=Brancher(models.tokenizer),
        )
        storage = GroupStorage(2, 4, 3, models.tokenizer.pad_token_id, branch_width=branch_width(envs.envs))
        batches = []
        for _ in range(3):
            starts = rollout.window_starts(list(range(4)))
            samples: list[dict] = []
            torch.manual_seed(0)
            metrics = rollout.collect(storage, samples=samples)
            batches.append((starts, samples, metrics, storage.active[:, :4].sum(0).tolist()))
        runs.append(batches)
    assert [[(s["turn"], s["response"]) for s in b[1]] for b in runs[0]] == [
        [(s["turn"], s["response"]) for s in b[1]] for b in runs[1]
    ]
    drawn, late = set(), 0
    for starts, samples, metrics, recorded in runs[0]:
        assert set(starts.values()) <= {0, 2, 4, 6}
        drawn |= set(starts.values())
        for n in range(4):
            first = min(s["turn"] for s in samples if s["env_index"] == n)
            assert first in (starts[n], 0)  # from the drawn turn, or from the reset after an early end
            late += first == starts[n] > 0
            assert 1 <= recorded[n] <= 2
        skipped = sum(starts.values())
        assert metrics["groups/skipped_turns"] <= skipped  # an early end skips less
        assert metrics["charts/turns"] == metrics["groups/skipped_turns"] + sum(recorded)
    assert len(drawn) > 1 and late > 0  # the windows start at different turns, some of them late
