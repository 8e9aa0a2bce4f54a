"""Vector text envs: Gymnasium's classes, first-reset seeding, same-step autoreset, errors that name the env."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError, UnregisteredEnv
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from toy_env import TOY_ID, LineEnv

import verlog
from verlog.memory import DROPPED_KEY, History
from verlog.vector import EnvFactory, SubEnvError, TextAsyncVectorEnv, TextSyncVectorEnv

MODES = ["sync", "async"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


def _single_run(seed: int, actions: list[str], **kwargs: object) -> list[str]:
    """Observations of one plain env, auto-reset like the vector env does."""
    env = LineEnv(**kwargs)
    seen = [env.reset(seed=seed)[0]]
    for action in actions:
        obs, _, terminated, truncated, _ = env.step(action)
        seen.append(env.reset()[0] if terminated or truncated else obs)
    return seen


def test_vector_envs_are_gymnasiums_with_same_step_autoreset(mode: str) -> None:
    envs = verlog.make_vec(TOY_ID, 2, vectorization_mode=mode)
    try:
        assert isinstance(envs, SyncVectorEnv if mode == "sync" else AsyncVectorEnv)
        assert isinstance(envs, TextSyncVectorEnv if mode == "sync" else TextAsyncVectorEnv)
        assert envs.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
        assert envs.num_envs == 2
        obs, infos = envs.reset(seed=0)
        assert isinstance(obs, tuple) and all(isinstance(o, str) for o in obs)
        assert obs in envs.observation_space
        assert set(infos) >= {"instruction", "valid_actions", "action_valid", DROPPED_KEY}
        obs, rewards, terminated, truncated, infos = envs.step(("left", "right"))
        assert rewards.dtype == np.float64 and terminated.shape == truncated.shape == (2,)
    finally:
        envs.close()


def test_make_vec_seed_seeds_the_first_reset_only(mode: str) -> None:
    actions = ["left", "right", "left", "wait", "right"] * 3
    runs = []
    for _ in range(2):
        envs = verlog.make_vec(TOY_ID, 3, vectorization_mode=mode, seed=10, max_steps=4)
        seen = [envs.reset()[0]]
        seen += [envs.step((a, a, a))[0] for a in actions]
        seen.append(envs.reset()[0])  # a second reset continues each sub-env's stream
        envs.close()
        runs.append(seen)
    assert runs[0] == runs[1]
    for i in range(3):
        assert [step[i] for step in runs[0][:-1]] == _single_run(10 + i, actions, max_steps=4)
    explicit = verlog.make_vec(TOY_ID, 3, vectorization_mode=mode, seed=10)
    try:
        assert explicit.reset(seed=40)[0] == tuple(LineEnv().reset(seed=40 + i)[0] for i in range(3))
    finally:
        explicit.close()


def test_seeded_action_space_samples_are_reproducible() -> None:
    first, second = verlog.make_vec(TOY_ID, 2, seed=3), verlog.make_vec(TOY_ID, 2, seed=3)
    assert first.action_space.sample() == second.action_space.sample()


def test_autoreset_gives_final_obs_and_the_next_episode(mode: str) -> None:
    envs = verlog.make_vec(TOY_ID, 2, vectorization_mode=mode, max_steps=3, memory="history")
    try:
        obs, _ = envs.reset(seed=[5, 6])
        for _ in range(3):
            obs, _, terminated, truncated, infos = envs.step(("wait", "wait"))
        assert truncated.all() and not terminated.any()
        assert infos["_final_obs"].all() and infos["_final_info"].all()
        for i in range(2):
            single = History(LineEnv(max_steps=3))
            single.reset(seed=5 + i)
            for _ in range(3):
                final = single.step("wait")[0]
            assert infos["final_obs"][i] == final
            assert obs[i] == single.reset()[0]  # the next episode, from the sub-env's own stream
            assert infos["final_info"]["progression"][i] == 0.0
        assert list(infos["executed_action"]) == ["", ""]  # the infos of the new episodes' resets
    finally:
        envs.close()


def test_without_autoreset_an_ended_env_waits_for_the_callers_reset(mode: str) -> None:
    envs = verlog.make_vec(TOY_ID, 2, vectorization_mode=mode, max_steps=3, autoreset=False)
    try:
        envs.reset(seed=[5, 6])
        for _ in range(3):
            _, _, terminated, truncated, infos = envs.step(("wait", "wait"))
        assert truncated.all() and not terminated.any() and infos["_final_info"].all()
        played = envs.call("replay_state")
        for _ in range(2):  # idle steps: nothing happens, no new episode begins
            _, rewards, terminated, truncated, _ = envs.step(("right", "right"))
            assert not rewards.any() and not terminated.any() and not truncated.any()
        assert envs.call("replay_state") == played  # still episode 5 and 6, three actions each
        obs, _ = envs.reset(seed=[9, None], options={"reset_mask": np.array([True, False])})
        states = envs.call("replay_state")
        assert states[0]["seed"] == 9 and states[0]["actions"] == [] and states[1] == played[1]
        assert obs[0] == LineEnv(max_steps=3).reset(seed=9)[0]
        envs.step(("wait", "wait"))  # the reset one plays on; the other still waits
        states = envs.call("replay_state")
        assert states[0]["actions"] == ["wait"] and states[1] == played[1]
    finally:
        envs.close()


def test_sync_error_names_the_env_and_keeps_everything() -> None:
    envs = verlog.make_vec(TOY_ID, 3, seed=0)
    envs.reset()
    envs.step(("left", "left", "left"))
    with pytest.raises(SubEnvError, match=r"sub-env 1 raised RuntimeError: the line exploded") as caught:
        envs.step(("left", "explode", "left"))
    assert caught.value.index == 1 and caught.value.error_type == "RuntimeError"
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert not envs.closed
    assert envs.envs[1].unwrapped._steps == 1  # inspectable, and untouched by the failed step
    envs.close()


def test_async_error_names_the_env_and_closes_the_other_workers() -> None:
    envs = verlog.make_vec(TOY_ID, 3, vectorization_mode="async", seed=0)
    envs.reset()
    with pytest.raises(SubEnvError, match=r"^sub-env 2 raised RuntimeError: the line exploded$") as caught:
        envs.step(("left", "right", "explode"))
    assert caught.value.index == 2 and caught.value.others == ()
    assert "the line exploded" in str(caught.value.__cause__)  # the worker's traceback
    assert envs.closed
    for process in envs.processes:
        process.join(timeout=5)
        assert not process.is_alive() and process.exitcode == 0
    assert envs.num_envs == 3 and envs.single_observation_space is not None
    with pytest.raises(ClosedEnvironmentError):
        envs.step(("left",) * 3)


def test_async_error_in_several_envs_names_them_all() -> None:
    envs = verlog.make_vec(TOY_ID, 3, vectorization_mode="async", seed=0, fail_at_step=2)
    envs.reset()
    envs.step(("left",) * 3)
    with pytest.raises(SubEnvError) as caught:
        envs.step(("left",) * 3)
    assert caught.value.index == 0
    assert [i for i, *_ in caught.value.others] == [1, 2]
    assert str(caught.value).count("ValueError: line env broke at step 2") == 3


def test_unknown_ids_and_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(
        UnregisteredEnv, match=r"'verlog/BabyAI-Goto-v0'.*did you mean 'verlog/BabyAI-GoTo-v0'"
    ):
        verlog.make_vec("verlog/BabyAI-Goto-v0")
    with pytest.raises(TypeError, match=r"verlog_test/Line-v0 does not take the keyword argument\(s\) sise"):
        verlog.make_vec(TOY_ID, sise=3)
    with pytest.raises(ValueError, match="size must be at least 2"):
        verlog.make_vec(TOY_ID, size=1)
    with pytest.raises(ValueError, match="size must be at least 2"):
        verlog.make_vec(TOY_ID, vectorization_mode="async", size=1)
    with pytest.raises(ValueError, match="unknown memory 'diary'"):
        verlog.make_vec(TOY_ID, memory="diary")
    with pytest.raises(TypeError, match="turnz"):
        verlog.make_vec(TOY_ID, memory="history", memory_kwargs={"turnz": 3})
    with pytest.raises(ValueError, match="vectorization_mode"):
        verlog.make_vec(TOY_ID, vectorization_mode="ray")
    with pytest.raises(ValueError, match="num_envs"):
        verlog.make_vec(TOY_ID, 0)


def test_kwargs_reach_the_env_and_gym_make() -> None:
    envs = verlog.make_vec(TOY_ID, 2, max_episode_steps=2, invalid_action_penalty=-0.5, size=3)
    envs.reset(seed=0)
    _, rewards, _, _, infos = envs.step(("?", "?"))
    assert list(rewards) == [-0.5, -0.5] and list(infos["invalid_actions"]) == [1, 1]
    _, _, _, truncated, _ = envs.step(("wait", "wait"))
    assert truncated.all()  # gymnasium's TimeLimit, from max_episode_steps
    assert envs.get_attr("size") == (3, 3)


def test_memory_callable_and_factory_pickle(mode: str) -> None:
    envs = verlog.make_vec(
        TOY_ID, 2, vectorization_mode=mode, memory="notes", memory_kwargs={"max_chars": 2000}, seed=1
    )
    try:
        obs, _ = envs.reset()
        obs, _, _, _, infos = envs.step(("NOTES: remember me\nACTION: left", "right"))
        assert obs[0].startswith("Your notes:\nremember me") and "remember me" not in obs[1]
        assert list(infos["action_valid"]) == [True, True]
        assert list(infos[DROPPED_KEY]) == [0, 0]
    finally:
        envs.close()
    factory = EnvFactory(TOY_ID, {"size": 4}, "history", {"turns": 2}, index=1)
    env = pickle.loads(pickle.dumps(factory))()
    assert env.unwrapped.size == 4 and env.get_wrapper_attr("turns") == 2
    assert isinstance(gym.make(TOY_ID).unwrapped, LineEnv)
