"""``verlog launch`` ends a failed learner with verlog's lines and its exit status: no accelerate defaults page,
no torch elastic error lines or tracebacks, and a config error said once per machine, not once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BAD = [  # 4 envs in groups of 8: one problem
    "agents/ppo.py", "--config", "envs/tiny.toml", "algo.advantage=grpo", "algo.group_size=8",
    "ppo.critic_warmup_batches=0", "ppo.critic_warmup_iters=0",
]  # fmt: skip
LAUNCHER_NOISE = ("had defaults used instead", "Traceback", "ChildFailedError", "CalledProcessError", "E1")


@pytest.mark.parametrize(
    "topology",
    [["--num_processes", "1"], ["--config_file", "agents/accelerate/cpu_2proc.yaml"]],
    ids=["one-process", "two-processes"],
)
def test_a_config_error_under_verlog_launch_is_verlog_lines_and_exit_2(topology: list[str]) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT"}
    }
    done = subprocess.run(
        [sys.executable, "-m", "verlog", "launch", *topology, *BAD],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 2, output
    assert lines[0].startswith("ppo.py: config: env.num_envs = 4 does not divide into groups")
    assert lines[1].startswith("verlog launch: ")
    assert "exit code 2" in lines[1] or "exited with code 2" in lines[1]
    for noise in LAUNCHER_NOISE:
        assert noise not in output, noise
