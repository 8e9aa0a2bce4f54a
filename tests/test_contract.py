"""The contract every registered ``verlog/`` id keeps (plus the test-only toy game, so the checks themselves
are exercised even where no game is registered): Gymnasium's ``check_env``, seeded determinism, pickling,
same-step autoreset through both vector modes, the info keys, and the invalid-action policy.

Episode-ending tests shorten episodes with the env's own ``max_steps`` where it has one, else with
Gymnasium's ``max_episode_steps``, so the whole file stays fast.
"""

from __future__ import annotations

import inspect
import pickle
import random
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import load_env_creator
from gymnasium.utils.env_checker import check_env
from toy_env import TOY_ID

import verlog
from verlog.envs.base import INFO_KEYS

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("verlog/")) + [TOY_ID]
JUNK = "%%% ???"  # names no action in any game, in either parsing mode
SHORT_EPISODE = 6


def _creator(env_id: str) -> Any:
    entry_point = gym.spec(env_id).entry_point
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def _short_episodes(env_id: str) -> dict[str, int]:
    """Keyword arguments that end an episode after a few steps (the env's own limit where it has one)."""
    if "max_steps" in inspect.signature(_creator(env_id)).parameters:
        return {"max_steps": SHORT_EPISODE}
    return {"max_episode_steps": SHORT_EPISODE}


def _responses(info: dict[str, Any], rng: random.Random) -> str:
    """A random valid action, now and then some junk a model might write instead."""
    return JUNK if rng.random() < 0.1 else rng.choice(info["valid_actions"])


def _free_text(env_id: str) -> bool:
    """Whether the game sends any answer to its own parser (TextWorld) instead of a fallback action."""
    return bool(getattr(_creator(env_id), "free_text", False))


def _skip_free_text(env_id: str) -> None:
    if _free_text(env_id):
        pytest.skip("free-text game: no fallback action, any answer runs as typed (see its own tests)")


def _check_info(info: dict[str, Any], *, at_reset: bool, free_text: bool = False) -> None:
    missing = [key for key in INFO_KEYS if key not in info]
    assert not missing, f"info lacks {missing}"
    assert isinstance(info["instruction"], str) and info["instruction"].strip()
    actions = info["valid_actions"]
    assert isinstance(actions, list) and actions and all(isinstance(a, str) and a for a in actions)
    assert isinstance(info["action_valid"], bool)
    if at_reset:
        assert info["executed_action"] == ""
    elif not free_text:
        assert info["executed_action"] in actions
    else:  # a free-text game (TextWorld) runs any answer as typed; its list is the new state's commands
        assert isinstance(info["executed_action"], str) and info["executed_action"]
    assert isinstance(info["progression"], float) and 0.0 <= info["progression"] <= 1.0
    assert isinstance(info["invalid_actions"], int) and info["invalid_actions"] >= 0
    goal = info["goal"]  # one sentence; prompts put it after their own "Goal: " label
    assert isinstance(goal, str) and goal.strip() and not goal.lower().startswith("goal"), goal


def _contract_view(info: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(info[key] for key in INFO_KEYS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id: str) -> None:
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning of the checker (e.g. obs not in space) fails the test
        check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeded_runs_are_identical_and_infos_complete(env_id: str) -> None:
    runs = []
    for _ in range(2):
        env, rng = gym.make(env_id), random.Random(7)
        obs, info = env.reset(seed=123)
        _check_info(info, at_reset=True, free_text=_free_text(env_id))
        run: list[Any] = [(obs, _contract_view(info))]
        for _ in range(50):
            obs, reward, terminated, truncated, info = env.step(_responses(info, rng))
            _check_info(info, at_reset=False, free_text=_free_text(env_id))
            assert isinstance(obs, str) and obs in env.observation_space
            run.append((obs, float(reward), terminated, truncated, _contract_view(info)))
            if terminated or truncated:
                obs, info = env.reset()
                _check_info(info, at_reset=True)
                run.append((obs, _contract_view(info)))
        runs.append(run)
        env.close()
    assert runs[0] == runs[1]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickled_env_continues_identically(env_id: str) -> None:
    env, rng = gym.make(env_id), random.Random(3)
    _, info = env.reset(seed=5)
    for _ in range(4):
        _, _, terminated, truncated, info = env.step(_responses(info, rng))
        if terminated or truncated:
            _, info = env.reset()
    copy = pickle.loads(pickle.dumps(env))
    for _ in range(20):
        action = _responses(info, rng)
        step, copied = env.step(action), copy.step(action)
        assert step[:4] == copied[:4] and _contract_view(step[4]) == _contract_view(copied[4])
        info = step[4]
        if step[2] or step[3]:
            assert env.reset()[0] == copy.reset()[0]
    env.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_vector_autoreset_starts_the_next_episode(env_id: str, mode: str) -> None:
    limits = _short_episodes(env_id)
    envs = verlog.make_vec(env_id, 2, vectorization_mode=mode, seed=11, **limits)
    singles = [gym.make(env_id, **limits) for _ in range(2)]
    try:
        obs, infos = envs.reset()
        expected = [single.reset(seed=11 + i) for i, single in enumerate(singles)]
        assert obs == tuple(o for o, _ in expected)
        rng = random.Random(0)
        for _ in range(4 * SHORT_EPISODE):
            actions = tuple(rng.choice(info["valid_actions"]) for _, info in expected)
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            for i, single in enumerate(singles):
                single_obs, reward, single_term, single_trunc, single_info = single.step(actions[i])
                assert (rewards[i], terminated[i], truncated[i]) == (reward, single_term, single_trunc)
                if single_term or single_trunc:
                    assert infos["_final_obs"][i] and infos["final_obs"][i] == single_obs
                    assert infos["final_info"]["_progression"][i]
                    assert infos["final_info"]["progression"][i] == single_info["progression"]
                    expected[i] = single.reset()
                    assert infos["executed_action"][i] == ""  # the new episode's reset info
                else:
                    expected[i] = (single_obs, single_info)
                    assert not infos.get("_final_obs", np.zeros(2, bool))[i]
                assert obs[i] == expected[i][0]
            if (terminated | truncated).any():
                break
        assert (terminated | truncated).any(), (
            f"no episode of {env_id} ended within {4 * SHORT_EPISODE} steps"
        )
    finally:
        envs.close()
        for single in singles:
            single.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_chosen_fallback_runs_after_an_invalid_response(env_id: str) -> None:
    _skip_free_text(env_id)
    game_default = gym.make(env_id).unwrapped.default_action
    fallback = next(a for a in gym.make(env_id).unwrapped.actions if a != game_default)
    chosen = gym.make(env_id, invalid_action_fallback=fallback)
    reference = gym.make(env_id)
    chosen.reset(seed=3)
    reference.reset(seed=3)
    obs, reward, *_, info = chosen.step(JUNK)
    ref_obs, ref_reward, *_ = reference.step(fallback)
    assert (info["action_valid"], info["executed_action"], info["invalid_actions"]) == (False, fallback, 1)
    assert chosen.unwrapped.parse(JUNK).action == fallback
    assert obs.endswith(ref_obs) and f"'{fallback}'" in obs and reward == ref_reward
    with pytest.raises(ValueError, match="invalid_action_fallback='fly' is not an action"):
        gym.make(env_id, invalid_action_fallback="fly")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_offered_actions_are_listed_accepted_and_nothing_else(env_id: str) -> None:
    _skip_free_text(env_id)
    game = gym.make(env_id).unwrapped
    offered = list(reversed(game.actions[:2]))
    refused = game.actions[2]
    env = gym.make(env_id, offered_actions=offered, invalid_action_fallback=refused)
    _, info = env.reset(seed=4)
    assert info["valid_actions"] == list(game.actions[:2])  # in the game's own order
    info = env.step(offered[0])[4]
    assert (info["action_valid"], info["executed_action"]) == (True, offered[0])
    info = env.step(refused)[4]  # a game action, but not offered: invalid, and the fallback runs
    assert (info["action_valid"], info["executed_action"], info["invalid_actions"]) == (False, refused, 1)
    for phrase, target in game.synonyms.items():  # a synonym of a refused action is refused too
        assert env.unwrapped.parse(phrase).valid == (target in offered)
    for bad in ([], ["fly"], offered[0]):
        with pytest.raises(ValueError, match="offered_actions="):
            gym.make(env_id, offered_actions=bad)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_invalid_actions_run_the_default_and_add_the_penalty(env_id: str) -> None:
    _skip_free_text(env_id)
    penalised = gym.make(env_id, invalid_action_penalty=-0.25)
    silent = gym.make(env_id, invalid_action_penalty=-0.25, invalid_action_feedback=False)
    reference = gym.make(env_id)
    game = reference.unwrapped
    for env in (penalised, silent, reference):
        env.reset(seed=2)
    parsed = game.parse(JUNK)
    assert not parsed.valid and parsed.action == game.default_action
    for count in (1, 2):
        obs, reward, terminated, truncated, info = penalised.step(JUNK)
        silent_obs, silent_reward, *_ = silent.step(JUNK)
        ref_obs, ref_reward, ref_terminated, ref_truncated, ref_info = reference.step(game.default_action)
        assert (info["action_valid"], info["executed_action"]) == (False, game.default_action)
        assert info["invalid_actions"] == count and ref_info["invalid_actions"] == 0
        # the penalty is added to the game's reward, not written over it
        assert reward == pytest.approx(ref_reward - 0.25) and silent_reward == reward
        assert obs == game.invalid_action_note(parsed) + ref_obs and obs != ref_obs
        assert silent_obs == ref_obs
        assert (terminated, truncated) == (ref_terminated, ref_truncated)
        if terminated or truncated:
            break
    else:
        valid = penalised.step(game.default_action)[4]
        assert valid["action_valid"] and valid["invalid_actions"] == 2
