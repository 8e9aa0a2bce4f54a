"""How long a resume takes to rebuild a Crafter sub-env by replay (its seed plus every action of the episode).

A checkpoint holds each sub-env as the start of its episode and the actions since (:mod:`verlog.replay`), so
restoring costs one env step per action: the worst case is a sub-env deep in one of Crafter's longest
episodes. A random agent dies within a few hundred steps, so to reach the length the benchmark keeps the
player alive (health, food, drink and energy refilled after every step, a wrapper under the recorder, so
record and replay see the same game); the world goes on as usual: creatures move, spawn and fight. Lengths:
2000 actions (``max_steps``, BALROG's and envs/crafter.toml's limit) and 10000 (Crafter's own default length).
Memory as envs/crafter.toml (history, 2 turns). Prints a table and writes ``benchmarks/results/replay.json``.

Run: ``nox -s bench_replay`` or ``python -m benchmarks.speed.replay [--lengths 2000 10000]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import random
import sys
import time
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.table import Table

import verlog  # noqa: F401 - registers the ids
from benchmarks.common import RESULTS
from verlog.evaluation.output import machine
from verlog.memory import wrap_memory
from verlog.pipes import closed_pipe_ok
from verlog.replay import EpisodeRecorder


class _Immortal(gym.Wrapper):
    """Refill the player's vitals after each step, so an episode of random actions lasts ``max_steps``."""

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        inventory = self.env.unwrapped._env._player.inventory
        for vital in ("health", "food", "drink", "energy"):
            inventory[vital] = 9
        return result


def _env(length: int) -> EpisodeRecorder:
    crafter = gym.make("verlog/Crafter-v0", max_steps=length + 1)
    return EpisodeRecorder(wrap_memory(_Immortal(crafter), "history", turns=2, reasoning=True))


def measure(length: int, seed: int = 0) -> dict[str, float]:
    env = _env(length)
    rng = random.Random(seed)
    _, info = env.reset(seed=seed)
    clock = time.perf_counter()
    for _ in range(length):
        _, _, terminated, truncated, info = env.step(
            f"THINK: go on. ACTION: {rng.choice(info['valid_actions'])}"
        )
        assert not (terminated or truncated), "the episode ended early"
    played = time.perf_counter() - clock
    state = json.loads(json.dumps(env.replay_state))  # as a checkpoint holds it
    fresh = _env(length)
    clock = time.perf_counter()
    fresh.replay_state = state
    replayed = time.perf_counter() - clock
    return {
        "actions": length,
        "replay_s": replayed,
        "play_s": played,
        "replay_ms_per_action": 1000 * replayed / length,
        "state_kib": len(json.dumps(state)) / 1024,
        "gzip_kib": len(gzip.compress(json.dumps(state).encode(), compresslevel=1)) / 1024,  # as saved
    }


@closed_pipe_ok
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[2000, 10000])
    args = parser.parse_args(argv)
    rows = [measure(length) for length in args.lengths]
    table = Table(title="Replaying one Crafter sub-env on resume")
    for column in ("actions", "replay s", "ms / action", "state KiB", "gzip KiB"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["actions"]),
            f"{row['replay_s']:.1f}",
            f"{row['replay_ms_per_action']:.2f}",
            f"{row['state_kib']:.0f}",
            f"{row['gzip_kib']:.0f}",
        )
    Console().print(table)
    RESULTS.mkdir(exist_ok=True)
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "rows": rows,
    }
    (RESULTS / "replay.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
