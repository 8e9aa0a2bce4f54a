"""Env state as data: a sub-env's episode (seed or generator state, actions) restores it by replay."""

from __future__ import annotations

import json

import pytest
from toy_env import TOY_ID

import verlog
from verlog.replay import ReplayError


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_replayed_envs_continue_exactly(mode: str) -> None:
    """Past an autoreset (an episode started from the generator's state) and inside an episode, with memory."""
    kwargs = {"vectorization_mode": mode, "memory": "history", "memory_kwargs": {"turns": 2}, "max_steps": 3}
    moves = ["left", "right", "wait", "right", "left"]
    first = verlog.make_vec(TOY_ID, 2, seed=5, **kwargs)
    second = verlog.make_vec(TOY_ID, 2, seed=99, **kwargs)  # another seed: everything comes from the record
    try:
        first.reset()
        for action in moves:
            first.step((action, "wait"))
        states = json.loads(json.dumps(first.call("replay_state")))  # through JSON, as a checkpoint holds it
        assert states[1]["seed"] is None and len(states[1]["actions"]) == 2  # autoreset after 3 steps
        second.set_attr("replay_state", states)
        for action in moves * 2:
            a, b = first.step((action, action)), second.step((action, action))
            assert a[0] == b[0] and [x.tolist() for x in a[1:4]] == [x.tolist() for x in b[1:4]]
    finally:
        first.close()
        second.close()


def test_a_replay_that_drifts_is_an_error() -> None:
    envs = verlog.make_vec(TOY_ID, 1, seed=3)
    try:
        envs.reset()
        envs.step(("right",))
        state = envs.call("replay_state")[0]
        state["actions"] = ["left"]
        with pytest.raises(ReplayError, match="does not reproduce the recorded observation"):
            envs.set_attr("replay_state", [state])
    finally:
        envs.close()
