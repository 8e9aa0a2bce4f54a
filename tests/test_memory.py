"""Memory wrappers: layout, budget, notes, spaces, pickling, and every real game family."""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toy_env import TOY_ID, LineEnv

import verlog  # noqa: F401  (registers the ids)
from verlog.memory import (
    DROPPED_KEY,
    RAW_KEY,
    History,
    NoMemory,
    Notes,
    UnicodeText,
    split_notes,
    wrap_memory,
)

NOTE = "Your previous response did not name a valid action, so the default action 'wait' was executed.\n\n"


def _line(**kwargs: object) -> gym.Env:
    return gym.make(TOY_ID, **kwargs)


def _family_ids() -> list[str]:
    """One registered id per game family (the memory must work with every game)."""
    chosen: dict[str, str] = {}
    for env_id in sorted(gym.registry):
        if env_id.startswith("verlog/"):
            chosen.setdefault(env_id.split("/")[1].split("-")[0], env_id)
    return sorted(chosen.values())


# --------------------------------------------------------------------------- NoMemory
def test_no_memory_shows_the_observation_only() -> None:
    plain, wrapped = _line(), NoMemory(_line())
    assert wrapped.reset(seed=3)[0] == plain.reset(seed=3)[0]
    for action in ("left", "junk", "right"):
        obs, *_, info = wrapped.step(action)
        assert obs == plain.step(action)[0]
        assert info[DROPPED_KEY] == 0
    assert wrapped.observation_space == plain.observation_space


# --------------------------------------------------------------------------- History
def test_history_layout_is_balrogs() -> None:
    env = History(_line(), turns=3)
    first, info = env.reset(seed=0)
    assert info[DROPPED_KEY] == 0
    raw = LineEnv()
    raw_first = raw.reset(seed=0)[0]
    assert first == f"Current Observation:\n{raw_first}"
    second = env.step("I go left.\nACTION: left")[0]
    raw_second = raw.step("left")[0]
    assert second == (
        f"Observation:\n{raw_first}\n\nYour response:\nI go left.\nACTION: left\n\n"
        f"Current Observation:\n{raw_second}"
    )
    third = env.step("dance")[0]
    raw_third = raw.step("dance")[0]
    assert raw_third.startswith(NOTE)
    assert third == (
        f"Observation:\n{raw_first}\n\nYour response:\nI go left.\nACTION: left\n\n"
        f"Observation:\n{raw_second}\n\nYour response:\ndance\n(not a valid action: 'wait' was executed instead)"
        f"\n\nCurrent Observation:\n{raw_third}"
    )
    fourth = env.step("right")[0]  # turns=3: the first observation leaves
    assert not fourth.startswith(f"Observation:\n{raw_first}")
    assert fourth.startswith(f"Observation:\n{raw_second}")
    assert fourth.count("Observation:\n") == 3


def test_history_without_reasoning_shows_the_executed_action() -> None:
    env = History(_line(), turns=4, reasoning=False)
    env.reset(seed=1)
    env.step("Let me think at length... ACTION: right")
    text = env.step("no idea")[0]
    assert "Let me think" not in text
    assert "Your action:\nright\n\n" in text
    assert "Your response:\nno idea\n(not a valid action: 'wait' was executed instead)" in text


def test_history_turns_one_is_the_current_observation_and_reset_forgets() -> None:
    env = History(_line(), turns=1)
    env.reset(seed=2)
    assert env.step("left")[0].count("Observation:") == 1
    env = History(_line(), turns=5)
    env.reset(seed=2)
    env.step("left")
    assert env.reset(seed=2)[0].count("Observation:") == 1


def test_history_budget_drops_oldest_turns_and_never_the_current_observation() -> None:
    unlimited, budgeted = (
        History(_line(max_steps=100), turns=8),
        History(_line(max_steps=100), turns=8, max_chars=400),
    )
    unlimited.reset(seed=4)
    budgeted.reset(seed=4)
    for step in range(10):
        full = unlimited.step("wait")[0]
        text, *_, info = budgeted.step("wait")
        assert len(text) <= 400
        assert full.endswith(text)  # the newest turns, oldest dropped first
        blocks = full.count("Your response:")
        assert info[DROPPED_KEY] == blocks - text.count("Your response:")
        assert blocks == min(step + 1, 7)
    assert info[DROPPED_KEY] > 0


def test_history_current_observation_longer_than_the_budget_is_shown_whole() -> None:
    env = History(_line(observation_padding=150), turns=4, max_chars=100)
    obs, info = env.reset(seed=0)
    assert len(obs) > 100 and obs.startswith("Current Observation:\n") and obs.endswith("~" * 150)
    obs, *_, info = env.step("left")
    assert obs.startswith("Current Observation:\n")
    assert info[DROPPED_KEY] == 1
    assert obs in env.observation_space


def test_history_clips_a_runaway_response_keeping_its_end() -> None:
    env = History(_line(), turns=2, max_response_chars=200)
    env.reset(seed=0)
    text = env.step("x" * 100_000 + " ACTION: left")[0]
    assert "characters cut" in text and "ACTION: left" in text
    assert len(text) < 1000
    assert text in env.observation_space


def test_history_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="turns"):
        History(_line(), turns=0)
    with pytest.raises(ValueError, match="max_chars"):
        History(_line(), max_chars=0)
    with pytest.raises(TypeError, match="Text observation space"):
        History(gym.make("CartPole-v1"))


# --------------------------------------------------------------------------- Notes
@pytest.mark.parametrize(
    ("response", "notes", "rest"),
    [
        ("go left", None, "go left"),
        ("NOTES: key north\nACTION: left", "key north", "ACTION: left"),
        ("ACTION: left\nnotes: door is red", "door is red", "ACTION: left\n"),
        ("Notes : a\nb\n<action>left</action>", "a\nb", "<action>left</action>"),
        ("NOTES: old ACTION: left NOTES: new", "new", "NOTES: old ACTION: left "),
        ("NOTES:", "", ""),
        ("keynotes: none", None, "keynotes: none"),  # a word that ends in "notes" is no label
    ],
)
def test_split_notes(response: str, notes: str | None, rest: str) -> None:
    assert split_notes(response) == (notes, rest)


def test_notes_are_kept_replaced_cleared_and_cut_from_the_action() -> None:
    env = Notes(_line(max_steps=50))
    obs, info = env.reset(seed=5)
    assert obs.startswith("Your notes:\n(none yet") and info[DROPPED_KEY] == 0
    obs, *_, info = env.step("NOTES: target is left\nACTION: wait")
    assert info["action_valid"] and info["executed_action"] == "wait"
    assert obs.startswith("Your notes:\ntarget is left\n\nCurrent Observation:\n")
    obs = env.step("wait")[0]
    assert "target is left" in obs  # kept across turns
    obs = env.step("wait NOTES: now I know é ✓")[0]
    assert obs.startswith("Your notes:\nnow I know é ✓\n\n") and obs in env.observation_space
    assert env.step("NOTES:\nACTION: wait")[0].startswith("Your notes:\n(none yet")  # empty notes clear them
    env.step("NOTES: something")
    assert env.reset(seed=5)[0].startswith("Your notes:\n(none yet")  # cleared on reset


def test_notes_that_do_not_fit_the_budget_are_left_out() -> None:
    env = Notes(_line(max_steps=50), max_chars=200)
    env.reset(seed=0)
    obs, *_, info = env.step("NOTES: " + "n" * 150 + "\nACTION: wait")
    assert obs.startswith("Current Observation:\n") and info[DROPPED_KEY] == 1
    obs, *_, info = env.step("NOTES: short\nACTION: wait")
    assert obs.startswith("Your notes:\nshort") and info[DROPPED_KEY] == 0
    assert len(obs) <= 200


# --------------------------------------------------------------------------- every memory: contract
MEMORIES = {
    "none": lambda env: NoMemory(env),
    "history": lambda env: History(env, turns=3),
    "history-budget": lambda env: History(env, turns=5, reasoning=False, max_chars=300),
    "notes": lambda env: Notes(env),
    "notes-budget": lambda env: Notes(env, max_chars=250),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    memory=st.sampled_from(sorted(MEMORIES)),
    seed=st.integers(0, 2**16),
    responses=st.lists(
        st.one_of(
            st.sampled_from(["left", "right", "wait", "ACTION: left", "NOTES: é中\nACTION: right"]),
            st.text(max_size=300),
        ),
        max_size=25,
    ),
)
def test_every_text_is_in_the_space_and_keeps_the_current_observation(
    memory: str, seed: int, responses: list[str]
) -> None:
    env = MEMORIES[memory](_line(max_steps=10))
    raw = LineEnv(max_steps=10)
    obs, info = env.reset(seed=seed)
    raw_obs = raw.reset(seed=seed)[0]
    for response in responses:
        assert obs in env.observation_space
        assert obs.endswith(raw_obs)
        assert isinstance(info[DROPPED_KEY], int) and info[DROPPED_KEY] >= 0
        assert info[RAW_KEY] == raw_obs  # the learner's fallback when the memory text is over budget
        budget = getattr(env, "max_chars", None)
        if budget is not None and len(raw_obs) + 30 <= budget:
            assert len(obs) <= budget
        obs, _, terminated, truncated, info = env.step(response)
        raw_obs, _, raw_terminated, raw_truncated, _ = raw.step(
            split_notes(response)[1] if "notes" in memory else response
        )
        assert (terminated, truncated) == (raw_terminated, raw_truncated)
        if terminated or truncated:
            obs, info = env.reset()
            raw_obs = raw.reset()[0]


@pytest.mark.parametrize("memory", sorted(MEMORIES))
def test_wrapped_toy_env_passes_check_env_and_pickles(memory: str) -> None:
    env = MEMORIES[memory](_line())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        check_env(env, skip_render_check=True)
    env.reset(seed=9)
    for response in ("NOTES: x\nACTION: left", "right", "??"):
        env.step(response)
    copy = pickle.loads(pickle.dumps(env))
    for response in ("left", "NOTES: y ACTION: wait", "right", "left"):
        assert copy.step(response) == env.step(response)


@pytest.mark.parametrize("env_id", _family_ids())
@pytest.mark.parametrize("memory", ["history", "notes"])
def test_memories_work_with_every_game_family(env_id: str, memory: str) -> None:
    env = wrap_memory(gym.make(env_id), memory, max_chars=6000)
    assert isinstance(env.observation_space, UnicodeText)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    for i in range(6):
        actions = info["valid_actions"]  # TextWorld lists the current state's commands
        obs, *_, info = env.step(f"NOTES: step {i}\nACTION: {actions[i % len(actions)]}")
        assert info["action_valid"]
        assert obs in env.observation_space


def test_wrap_memory_names_and_callables() -> None:
    assert isinstance(wrap_memory(_line()), NoMemory)
    assert isinstance(wrap_memory(_line(), "history", turns=2), History)
    assert isinstance(wrap_memory(_line(), lambda env: Notes(env, max_chars=500)), Notes)
    with pytest.raises(ValueError, match="unknown memory 'diary'"):
        wrap_memory(_line(), "diary")


def test_unicode_text_space() -> None:
    space = UnicodeText(10)
    assert "é中✓\x00" in space and "x" * 11 not in space and b"x" not in space
    assert space.sample() in space
    assert space == pickle.loads(pickle.dumps(space)) and space != gym.spaces.Text(10)
