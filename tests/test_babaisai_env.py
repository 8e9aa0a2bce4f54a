"""The BabaIsAI text env: observation text (BALROG's and the fixed one), info, rewards, episode ends."""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import verlog  # noqa: F401  (registers the ids)
from verlog.envs.babaisai import LEVELS, BabaIsAIEnv, solve
from verlog.envs.babaisai.levels import level_from_map
from verlog.envs.babaisai.text import describe

MAP = """
    #########
    #B=Y....#
    #.k...d.#
    #...@...#
    #K=V....#
    #.....o.#
    #########
"""


def test_text_matches_balrog_format_and_its_step_quirk() -> None:
    board, state = level_from_map(MAP)
    assert describe(board, state) == "\n".join(
        [
            "Active rules:",
            "baba is you",
            "key is win",
            "",
            "Objects on the map:",
            "rule `baba` 3 step to the left and 2 step up",
            "rule `is` 2 step to the left and 2 step up",
            "rule `you` 1 step to the left and 2 step up",
            "key 2 step to the left and 1 step up",
            "door 2 steps to the right and 1 step up",
            "rule `key` 3 step to the left and 1 step down",
            "rule `is` 2 step to the left and 1 step down",
            "rule `win` 1 step to the left and 1 step down",
            "ball 2 steps to the right and 2 steps down",
        ]
    )


def test_fixed_text_names_colours_and_counts_steps_right() -> None:
    board, state = level_from_map(MAP)
    text = describe(board, state, colors=True)
    assert "rule `baba` 3 steps to the left and 2 steps up" in text
    assert "blue key 2 steps to the left and 1 step up" in text
    assert "red door 2 steps to the right and 1 step up" in text
    assert "green ball 2 steps to the right and 2 steps down" in text
    assert "baba" not in text.split("Objects on the map:\n")[1].replace("rule `baba`", "")


def test_reference_is_the_you_object_and_baba_is_hidden_in_balrog_format() -> None:
    board, state = level_from_map("""
        #######
        #K=Y..#
        #.k.@.#
        #######
    """)
    objects = describe(board, state).split("Objects on the map:\n")[1].split("\n")
    assert objects == [
        "rule `key` 1 step to the left and 1 step up",
        "rule `is` 1 step up",
        "rule `you` 1 step to the right and 1 step up",
        "",  # the key itself, at offset 0 (the reference wrapper's output)
    ]
    fixed = describe(board, state, colors=True).split("Objects on the map:\n")[1].split("\n")
    assert fixed[-1] == "white baba 2 steps to the right"
    assert "" not in fixed


def test_noun_is_noun_rules_are_listed_only_in_the_fixed_text() -> None:
    board, state = level_from_map("""
        #######
        #B=Y..#
        #K=L@.#
        #######
    """)
    assert describe(board, state).startswith("Active rules:\nbaba is you\n\n")
    assert describe(board, state, colors=True).startswith("Active rules:\nbaba is you\nkey is ball\n\n")


def test_reset_text_and_info() -> None:
    env = BabaIsAIEnv(level="two_room-break_stop-goto_win")
    obs, info = env.reset(seed=3)
    assert obs == describe(env.board, env.state)
    assert obs.startswith("Active rules:\n") and "\n\nObjects on the map:\n" in obs
    assert ("wall", "stop") in info["rules"] and ("baba", "you") in info["rules"]
    assert info["level"] == "two_room-break_stop-goto_win" and info["end_reason"] is None
    assert info["valid_actions"] == ["idle", "up", "right", "down", "left"]
    assert "PLAY!" in info["instruction"] and "goto" not in info["instruction"]


def test_instruction_lists_only_the_offered_actions() -> None:
    env = BabaIsAIEnv(offered_actions=["up", "right", "down", "left"])
    _, info = env.reset(seed=0)
    actions = info["instruction"].split("each turn):\n")[1].split("\n\n")[0]
    assert actions.splitlines() == [
        "up: move one step up,", "right: move one step to the right,", "down: move one step down,",
        "left: move one step to the left.",
    ]  # fmt: skip
    _, full = BabaIsAIEnv().reset(seed=0)
    assert "idle: wait for one step," in full["instruction"]


def test_colors_option_gives_the_fixed_text() -> None:
    env = BabaIsAIEnv(level="goto_win-distr_obj", colors=True)
    obs, _ = env.reset(seed=4)
    assert obs == describe(env.board, env.state, colors=True)
    assert any(c in obs for c in ("red ", "blue ", "green "))


def test_invalid_action_runs_idle_and_synonyms_parse() -> None:
    env = BabaIsAIEnv(level="goto_win", invalid_action_penalty=-0.1)
    obs, _ = env.reset(seed=0)
    text, reward, terminated, truncated, info = env.step("dance!")
    assert info["executed_action"] == "idle" and not info["action_valid"] and info["invalid_actions"] == 1
    assert text.endswith(obs) and text != obs and reward == pytest.approx(-0.1)
    assert not terminated and not truncated and info["steps"] == 1
    assert env.parse("Move up.").action == "up" and env.parse("<action>left</action>").action == "left"


def test_win_reward_progression_and_solver_replay() -> None:
    env = gym.make("verlog/BabaIsAI-make_win-v0")
    env.reset(seed=1)
    plan = solve(env)
    assert plan
    for i, action in enumerate(plan, start=1):
        _, reward, terminated, truncated, info = env.step(action)
        assert terminated == (i == len(plan)) and not truncated
    assert reward == pytest.approx(1 - 0.9 * len(plan) / 100)
    assert info["won"] and info["progression"] == 1.0 and info["end_reason"] == "win"


def test_no_you_ends_the_episode_as_a_failure() -> None:
    env = BabaIsAIEnv()
    env.reset(seed=0)
    env.board, env.state = level_from_map("""
        #######
        #.....#
        #B=Y..#
        #.@...#
        #######
    """)
    text, reward, terminated, truncated, info = env.step("up")
    assert terminated and not truncated and reward == 0.0
    assert info["end_reason"] == "no_you" and info["progression"] == 0.0 and info["rules"] == []
    assert "Objects on the map:" in text


def test_defeat_reward() -> None:
    env = BabaIsAIEnv()
    env.reset(seed=0)
    env.board, env.state = level_from_map("""
        #######
        #B=Y..#
        #K=X..#
        #.@k..#
        #######
    """)
    _, reward, terminated, _, info = env.step("right")
    assert terminated and reward == -1.0 and info["end_reason"] == "defeat"


SHAPING_MAP = """
    #########
    #B=Y....#
    #.......#
    #..@.k..#
    #K=V....#
    #########
"""


@pytest.mark.parametrize("shaping", [0.0, 0.5])
def test_shaping_pays_for_steps_toward_win_and_leaves_success_alone(shaping: float) -> None:
    env = BabaIsAIEnv(level="goto_win", shaping=shaping)
    env.reset(seed=0)
    env.board, env.state = level_from_map(SHAPING_MAP)
    rewards = {}
    for action in (
        "right",
        "left",
        "up",
        "down",
        "idle",
        "nonsense",
    ):  # distance 2 -> 1 -> 2 -> 3 -> 2 -> 2 -> 2
        rewards[action] = env.step(action)[1]
    assert rewards == pytest.approx(
        {"right": shaping, "left": -shaping, "up": -shaping, "down": shaping, "idle": 0.0, "nonsense": 0.0}
    )
    env.step("right")
    _, reward, terminated, _, info = env.step("right")  # onto the key: the win pays its own reward only
    assert terminated and info["won"] and info["progression"] == 1.0
    assert reward == pytest.approx(1 - 0.9 * 8 / 100)


def greedy_on_shaping(env: BabaIsAIEnv, seed: int) -> bool:
    """Play one episode taking the move whose one-step shaped reward is highest (the first on ties), as the
    labels of ``algo.branch_weight = "best"`` would; whether it won."""
    env.reset(seed=seed)
    moves = ("up", "right", "down", "left")
    for _ in range(env.max_steps):
        earned = [copy.deepcopy(env).step(move)[1] for move in moves]  # each move tried in a copy
        _, _, terminated, truncated, info = env.step(moves[int(np.argmax(earned))])
        if terminated or truncated:
            return bool(info["won"])
    return False


def test_plan_potential_leads_through_the_stop_wall_where_the_estimate_does_not() -> None:
    """maybe_break_stop's WIN object may lie behind a STOP wall: the estimate walks straight at it, the plan
    potential counts the way round (opening the wall first), so following it wins every level."""
    family = "two_room-maybe_break_stop-goto_win"
    moves = ["up", "right", "down", "left"]
    by_plan = BabaIsAIEnv(level=family, offered_actions=moves, shaping=1.0, potential="plan")
    by_estimate = BabaIsAIEnv(level=family, offered_actions=moves, shaping=1.0)
    assert all(greedy_on_shaping(by_plan, seed) for seed in range(6))
    assert not all(greedy_on_shaping(by_estimate, seed) for seed in range(6))  # seeds 1, 2, 4, 5 lose


def test_plan_potential_pays_each_step_the_change_in_the_plan_length() -> None:
    env = BabaIsAIEnv(level="goto_win", shaping=1.0, potential="plan")
    env.reset(seed=0)
    env.board, env.state = level_from_map(SHAPING_MAP)
    for action in ("right", "left", "up", "idle"):
        before = len(solve(env, optimal=True))
        reward = env.step(action)[1]
        assert reward == pytest.approx(before - len(solve(env, optimal=True))), action


def test_a_copy_plays_on_exactly_as_the_env_and_leaves_it_untouched() -> None:
    """One-step branches copy the env at every state played: a copy shares the immutable board and state and
    the observer's caches, yet steps, shapes and resets exactly as the original, and playing it on (rules
    broken, objects pushed) changes nothing the original shows next."""
    levels = ["goto_win-distr_obj", "two_room-maybe_break_stop-goto_win", "two_room-goto_win-distr_obj_rule"]
    moves = ("up", "right", "right", "down", "left", "up", "up", "left", "down", "right")
    for seed in range(6):
        env = BabaIsAIEnv(levels=levels, shaping=0.25, potential="plan")
        env.reset(seed=seed)
        env.step("down")
        twin = copy.deepcopy(env)
        assert twin.board is env.board and twin.state is env.state
        for move in moves:
            assert twin.step(move) == env.step(move)
        assert twin.reset(seed=50 + seed) == env.reset(seed=50 + seed)
        twin = copy.deepcopy(env)
        for move in moves * 3:
            twin.step(move)
        replayed = BabaIsAIEnv(levels=levels, shaping=0.25, potential="plan")  # no copy ever made of it
        replayed.reset(seed=seed)
        for move in ("down", *moves):
            replayed.step(move)
        replayed.reset(seed=50 + seed)
        assert [env.step(move) for move in moves] == [replayed.step(move) for move in moves]


def test_unknown_potential_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"potential='steps'.*estimate.*plan"):
        BabaIsAIEnv(potential="steps")


def test_shaping_must_be_a_non_negative_weight() -> None:
    with pytest.raises(ValueError, match="shaping"):
        BabaIsAIEnv(shaping=-0.1)


FOUR = ("goto_win-distr_obj", "two_room-goto_win", "two_room-goto_win-distr_obj_rule",
        "two_room-maybe_break_stop-goto_win")  # fmt: skip


def test_walk_start_hands_over_a_walked_state_of_the_same_level_with_the_full_step_budget() -> None:
    """walk_start=1: the same level as the plain reset of that seed (family, rules, board), entered after a
    random walk that never ended it nor changed a rule: the object that is YOU has moved on most resets, nothing is won, the step
    count is 0 and the episode then runs its whole cap; the same seed walks the same way."""
    moves = ("up", "right", "down", "left")
    plain = BabaIsAIEnv(levels=FOUR, offered_actions=moves)
    walked = BabaIsAIEnv(levels=FOUR, offered_actions=moves, walk_start=1.0, walk_steps=24, max_steps=5)
    moved = 0
    for seed in range(24):
        text, info = plain.reset(seed=seed)
        walked_text, walked_info = walked.reset(seed=seed)
        assert walked_info["level"] == info["level"] and walked.board == plain.board
        assert walked_info["rules"] == info["rules"]  # no rule made or broken on the way
        assert walked_text == describe(walked.board, walked.state)  # the text is the walked state's
        assert walked_info["steps"] == 0 and not walked_info["won"] and walked_info["end_reason"] is None
        moved += walked.state != plain.state
        assert walked.reset(seed=seed)[0] == walked_text
        for step in range(1, 6):
            *_, terminated, truncated, step_info = walked.step("idle")
            assert not terminated and truncated == (step == 5)
    assert moved >= 20


def test_walk_start_at_zero_leaves_every_reset_as_it_was() -> None:
    """The default draws nothing for the walk: a preset without it plays the very resets it played before."""
    for seed in range(8):
        assert (
            BabaIsAIEnv(levels=FOUR, walk_start=0.0).reset(seed=seed)[0]
            == BabaIsAIEnv(levels=FOUR).reset(seed=seed)[0]
        )


def test_walk_start_is_a_share_of_episodes_and_a_walk_has_a_step() -> None:
    with pytest.raises(ValueError, match=r"walk_start=1.5 is a share of episodes: give a number in \[0, 1\]"):
        BabaIsAIEnv(walk_start=1.5)
    with pytest.raises(ValueError, match="walk_steps=0: a walk takes at least 1 step"):
        BabaIsAIEnv(walk_start=0.5, walk_steps=0)


def test_truncation_after_max_steps() -> None:
    env = BabaIsAIEnv(level="goto_win", max_steps=2)
    env.reset(seed=0)
    assert env.step("idle")[3] is False
    _, _, terminated, truncated, info = env.step("idle")
    assert truncated and not terminated and info["end_reason"] == "max_steps"


def test_mixed_draws_families_from_the_seed() -> None:
    env = gym.make("verlog/BabaIsAI-Mixed-v0")
    seen = {env.reset(seed=s)[1]["level"] for s in range(40)}
    assert len(seen) > 10 and seen <= set(LEVELS)
    first = [env.reset(seed=7)[0] for _ in range(2)]
    assert first[0] == first[1]


def test_a_mix_of_chosen_families_draws_each_and_the_seed_decides_the_order() -> None:
    """``levels=`` makes a mix of any families (Verlog's four, as envs/learn_babaisai_mix.toml trains on): a
    family drawn per reset from those only, every one of them in a few dozen resets, and the same seeds give
    the same families in the same order in another env."""
    four = [
        "goto_win-distr_obj",
        "two_room-goto_win",
        "two_room-goto_win-distr_obj_rule",
        "two_room-maybe_break_stop-goto_win",
    ]

    def families(env_id: str) -> list[str]:
        env = gym.make(env_id, levels=four)
        return [env.reset(seed=s)[1]["level"] for s in range(40)]

    drawn = families("verlog/BabaIsAI-v0")
    assert set(drawn) == set(four)
    assert drawn == families("verlog/BabaIsAI-v0") == families("verlog/BabaIsAI-Mixed-v0")
    env = gym.make("verlog/BabaIsAI-v0", levels=four)
    env.reset(seed=3)
    unseeded = [env.reset()[1]["level"] for _ in range(40)]  # the env's own generator goes on drawing
    assert set(unseeded) == set(four)


def test_level_argument_and_unknown_level() -> None:
    env = gym.make("verlog/BabaIsAI-v0", level="two_room-make_you")
    assert env.reset(seed=0)[1]["level"] == "two_room-make_you"
    with pytest.raises(ValueError):
        BabaIsAIEnv(level="no_such_level")


def test_render_modes() -> None:
    env = BabaIsAIEnv(level="two_room-make_wall_win", render_mode="ansi")
    env.reset(seed=0)
    grid = env.render().split("\n")
    assert grid[0] == "#" * 13 and len(grid[:9]) == 9 and all(len(row) == 13 for row in grid[:9])
    assert "@" in env.render()
    env = BabaIsAIEnv(level="goto_win", render_mode="rgb_array")
    env.reset(seed=0)
    image = env.render()
    assert image.shape == (8 * 16, 8 * 16, 3) and image.dtype == np.uint8


def test_pickled_env_continues_identically() -> None:
    env = BabaIsAIEnv(level="two_room-make_you")
    env.reset(seed=5)
    env.step("left")
    clone = pickle.loads(pickle.dumps(env))
    for action in ("up", "up", "right", "down"):
        assert env.step(action)[0] == clone.step(action)[0]


@pytest.mark.parametrize(
    "env_id",
    [
        "verlog/BabaIsAI-goto_win-v0",
        "verlog/BabaIsAI-two_room-make_you-make_win-v0",
        "verlog/BabaIsAI-Mixed-v0",
    ],
)
def test_gymnasium_env_checker(env_id: str) -> None:
    check_env(gym.make(env_id).unwrapped)


def test_the_worked_turns_walk_toward_the_win_object_once_per_direction() -> None:
    """A prompt may show one worked turn per move (``prompt.examples = 4``); each must be right, or it teaches a
    wrong move: its answer names a direction of the line of the object its "is win" rule names."""
    from verlog.envs import prompt_examples
    from verlog.models.prompts import PromptBuilder

    examples = prompt_examples("verlog/BabaIsAI-goto_win-v0", 4)
    assert sorted(action for *_, action in examples) == ["down", "left", "right", "up"]
    for shown, _, action in examples:
        lines = shown.splitlines()
        win = next(line.split(" is win")[0] for line in lines if line.endswith(" is win"))
        (where,) = [line for line in lines if line.startswith(f"{win} ") and " is " not in line]
        assert action in where.split(), (where, action)
    env = gym.make("verlog/BabaIsAI-goto_win-v0")
    obs, info = env.reset(seed=0)
    chat = PromptBuilder(
        None, "action", 1024, style="short", examples=prompt_examples(env.spec.id, 2)
    ).messages(info, obs)
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user", "assistant", "user"]
    # the first two, in order
    assert [m["content"] for m in chat if m["role"] == "assistant"] == ["right", "up"]
    assert obs in chat[-1]["content"]
    # the single example is unchanged
    assert prompt_examples("verlog/BabaIsAI-goto_win-v0", 1) == examples[:1]
    with pytest.raises(ValueError, match=r"prompt.examples = 5, but verlog/BabaIsAI-goto_win-v0 offers 4"):
        prompt_examples("verlog/BabaIsAI-goto_win-v0", 5)
    with pytest.raises(ValueError, match=r"offers 1 worked example"):
        prompt_examples("verlog/BabyAI-GoTo-v0", 2)
