"""Async vector-env workers that die, hang or lose their parent, with real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from toy_env import TOY_ID

import verlog
from verlog.vector import SubEnvError

TESTS = Path(__file__).resolve().parent


def _gone(pid: int) -> bool:
    """Exited (a zombie left for a non-reaping init counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _timed_close(envs) -> float:  # noqa: ANN001
    clock = time.monotonic()
    envs.close()
    return time.monotonic() - clock


def test_a_killed_worker_is_named_and_close_returns() -> None:
    envs = verlog.make_vec(TOY_ID, 3, vectorization_mode="async", seed=0)
    envs.reset()
    victim = envs.processes[1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)
    with pytest.raises(SubEnvError, match=r"sub-env 1 raised WorkerDied: .*signal 9") as caught:
        envs.step(("wait", "wait", "wait"))
    assert caught.value.index == 1
    assert _timed_close(envs) < 10
    assert all(_gone(p.pid) for p in envs.processes)


def test_a_hanging_sub_env_times_out_naming_it() -> None:
    envs = verlog.make_vec(TOY_ID, 2, vectorization_mode="async", seed=0, step_timeout_s=1.0)
    envs.reset()
    envs.step(("wait", "wait"))  # a normal step is well within the limit
    clock = time.monotonic()
    with pytest.raises(
        SubEnvError, match=r"sub-env 1 raised StepTimeout: no answer within env.step_timeout_s"
    ):
        envs.step(("wait", "hang"))
    assert time.monotonic() - clock < 10  # the timeout, then the hung worker terminated
    assert envs.closed and all(_gone(p.pid) for p in envs.processes)


def test_close_returns_while_a_step_hangs() -> None:
    envs = verlog.make_vec(TOY_ID, 2, vectorization_mode="async", seed=0)
    envs.reset()
    envs.step_async(("hang", "wait"))
    time.sleep(0.2)
    assert _timed_close(envs) < 10
    assert all(_gone(p.pid) for p in envs.processes)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_exit_when_their_parent_is_killed() -> None:
    script = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
        "import time, toy_env, verlog\n"
        "envs = verlog.make_vec(toy_env.TOY_ID, 2, vectorization_mode='async', seed=0)\n"
        "envs.reset()\n"
        "envs.step_async(('hang', 'wait'))\n"  # one worker busy in a step, one idle
        "print(*[p.pid for p in envs.processes], flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2 and not any(_gone(pid) for pid in workers)
    finally:
        parent.kill()
        parent.wait(10)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not all(_gone(pid) for pid in workers):
        time.sleep(0.1)
    assert all(_gone(pid) for pid in workers)
