"""Environment throughput: each raw game, its text env, the text env in a history memory, and 4-env vector
envs (sync and async), all driven by uniformly random valid actions; what one-step branches cost the env
(``algo.branch_actions``: every offered action tried in a deep copy of each state played, with the shaping the
branch presets train on); plus Crafter's median reset time.

    python -m benchmarks.speed.envs            # ~1 min; writes benchmarks/results/envs.json
    python -m benchmarks.speed.envs --quick    # ~20 s, shorter measurements

Single-env figures time the ``step`` calls only (resets excluded), so the text/raw ratio is the cost of the
text layer itself; vector figures are sub-env steps per second including their same-step autoresets.
Targets are printed next to the figures; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from rich.console import Console
from rich.table import Table

import verlog
from benchmarks.common import RESULTS as RESULTS_FOLDER
from verlog.memory import wrap_memory
from verlog.pipes import closed_pipe_ok

RESULTS = RESULTS_FOLDER / "envs.json"
TEXT_OVER_RAW_TARGET = 0.8
CRAFTER_RESET_MS_TARGET = 100.0
NUM_VECTOR_ENVS = 4
BABAISAI_FAMILY = "two_room-maybe_break_stop-goto_win"
#: The env settings the branch presets train with (envs/learn_babyai_mix.toml, envs/learn_babaisai_mix.toml).
BRANCH_KWARGS: dict[str, dict[str, Any]] = {
    "BabyAI": {"shaping": 0.25, "potential": "bot"},
    "BabaIsAI": {"shaping": 0.25, "potential": "plan"},
}


# ---------------------------------------------------------------------------------------------- raw games
class RawGame(Protocol):
    """The game under its text env, stepped with action indices; ``step`` says whether the episode ended."""

    num_actions: int

    def reset(self, seed: int) -> None: ...

    def step(self, action: int) -> bool: ...


class RawBabyAI:
    """The minigrid level the BabyAI text env steps (its ``goto`` task kind)."""

    def __init__(self) -> None:
        from verlog.envs.babyai import MixedTrainLocalLevel

        self.level = MixedTrainLocalLevel("goto")
        self.num_actions = 6

    def reset(self, seed: int) -> None:
        self.level.reset(seed=seed)

    def step(self, action: int) -> bool:
        _, _, terminated, truncated, _ = self.level.step(action)
        return terminated or truncated


class RawCrafter:
    """``crafter.Env`` with BALROG's settings (it renders its image observation on every step)."""

    def __init__(self) -> None:
        self.num_actions = 17
        self.env: Any = None

    def reset(self, seed: int) -> None:
        import crafter

        self.env = crafter.Env(area=(64, 64), view=(9, 9), size=(256, 256), reward=True, seed=seed)
        self.env.reset()

    def step(self, action: int) -> bool:
        _, _, done, _ = self.env.step(action)
        return bool(done)


class RawBabaIsAI:
    """The BabaIsAI engine on one level family: ``engine.step`` on immutable states, 100 steps an episode."""

    def __init__(self, family: str) -> None:
        from verlog.envs.babaisai import engine, levels

        self.engine, self.levels, self.family = engine, levels, family
        self.num_actions = len(engine.ACTIONS)
        self.level: Any = None
        self.state: Any = None
        self.steps = 0

    def reset(self, seed: int) -> None:
        self.level = self.levels.generate(self.family, np.random.default_rng(seed))
        self.state, self.steps = self.level.state, 0

    def step(self, action: int) -> bool:
        outcome = self.engine.step(self.level.board, self.state, action)
        self.state, self.steps = outcome.state, self.steps + 1
        return outcome.won or outcome.lost or self.steps >= 100


class RawNLE:
    """The NLE env under verlog's NetHack or MiniHack env, stepped with the indices of the actions the text env
    offers (no text: the arrays only), seeded the same way."""

    def __init__(self, env_id: str) -> None:
        text_env = gym.make(env_id).unwrapped
        self.env = text_env._game
        self.indices = [text_env._action_index[a] for a in text_env.offered_actions]
        self.num_actions = len(self.indices)
        self.text_env = text_env

    def reset(self, seed: int) -> None:
        self.text_env._seeds = (seed, seed + 1)
        self.text_env._seed_game()
        self.env.reset()

    def step(self, action: int) -> bool:
        _, _, terminated, truncated, _ = self.env.step(self.indices[action])
        return terminated or truncated


class RawTextWorld:
    """TextWorld's own gym env on the game the text env plays, stepped with its admissible commands."""

    def __init__(self, env_id: str) -> None:
        self.text_env = gym.make(env_id).unwrapped
        self.num_actions = 8
        self.commands: list[str] = ["look"]
        self.steps = 0

    def reset(self, seed: int) -> None:
        self.text_env.reset(seed=seed)
        self.env = self.text_env._game
        _, infos = self.env.reset()
        self.commands, self.steps = infos["admissible_commands"], 0

    def step(self, action: int) -> bool:
        _, _, done, infos = self.env.step(self.commands[action % len(self.commands)])
        self.commands, self.steps = infos["admissible_commands"], self.steps + 1
        return done or self.steps >= 80


@dataclass
class Game:
    name: str
    env_id: str
    raw: Callable[[], RawGame]


def games() -> list[Game]:
    """The benchmarked games; BabaIsAI only once its ids are registered."""
    found = [
        Game("BabyAI", "verlog/BabyAI-GoTo-v0", RawBabyAI),
        Game("Crafter", "verlog/Crafter-v0", RawCrafter),
    ]
    baba_ids = sorted(i for i in gym.registry if i.startswith("verlog/BabaIsAI"))
    if baba_ids:
        from verlog.envs.babaisai.levels import LEVELS

        env_id = f"verlog/BabaIsAI-{BABAISAI_FAMILY}-v0"
        env_id = env_id if env_id in baba_ids else baba_ids[0]
        family = max((f for f in LEVELS if f in env_id), key=len, default=BABAISAI_FAMILY)
        found.append(Game("BabaIsAI", env_id, lambda: RawBabaIsAI(family)))
    for name, env_id, raw in (
        ("NetHack", "verlog/NetHack-v0", RawNLE),
        ("MiniHack", "verlog/MiniHack-Quest-Easy-v0", RawNLE),
        ("TextWorld", "verlog/TextWorld-CoinCollector-v0", RawTextWorld),
    ):
        try:  # an optional game: benchmarked where its package is installed
            gym.make(env_id).close()
        except ImportError:
            continue
        found.append(Game(name, env_id, lambda env_id=env_id, raw=raw: raw(env_id)))
    return found


# ---------------------------------------------------------------------------------------------- measures
def raw_steps_per_s(game: RawGame, seconds: float) -> float:
    rng = np.random.default_rng(0)
    actions = rng.integers(game.num_actions, size=100_000).tolist()
    seed, stepped, busy = 0, 0, 0.0
    game.reset(seed)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        done = game.step(actions[stepped % len(actions)])
        busy += time.perf_counter() - start
        stepped += 1
        if done:
            seed += 1
            game.reset(seed)
    return stepped / busy


def text_steps_per_s(env_id: str, seconds: float, memory: str | None = None) -> float:
    env = wrap_memory(gym.make(env_id), memory) if memory else gym.make(env_id)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    names = info["valid_actions"]
    actions = [names[i] for i in rng.integers(len(names), size=100_000)]
    for action in actions[:5]:  # the passive env checker looks at the first step only
        if any(env.step(action)[2:4]):
            env.reset()
    stepped, busy = 0, 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(actions[stepped % len(actions)])
        busy += time.perf_counter() - start
        stepped += 1
        if terminated or truncated:
            env.reset()
    env.close()
    return stepped / busy


def vector_steps_per_s(env_id: str, mode: str, seconds: float) -> float:
    envs = verlog.make_vec(env_id, NUM_VECTOR_ENVS, vectorization_mode=mode, seed=0)
    try:
        _, infos = envs.reset()
        names = list(infos["valid_actions"][0])
        rng = np.random.default_rng(0)
        batches = [
            tuple(names[i] for i in row) for row in rng.integers(len(names), size=(1000, NUM_VECTOR_ENVS))
        ]
        envs.step(batches[0])
        stepped, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            envs.step(batches[stepped % len(batches)])
            stepped += 1
        return stepped * NUM_VECTOR_ENVS / (time.perf_counter() - start)
    finally:
        envs.close()


def branched_states_per_s(env_id: str, seconds: float, kwargs: dict[str, Any]) -> float | None:
    """States played per second when each state's offered actions are first tried one by one in a deep copy
    of the env (what ``algo.branch_actions`` adds to a played turn); None for a game whose env cannot be
    copied (its game holds a live process)."""
    env = gym.make(env_id, **kwargs).unwrapped
    _, info = env.reset(seed=0)
    names = list(info["valid_actions"])
    rng = np.random.default_rng(0)
    try:
        copy.deepcopy(env)
    except (TypeError, copy.Error, NotImplementedError):
        env.close()
        return None
    played, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for name in names:
            copy.deepcopy(env).step(name)
        _, _, terminated, truncated, _ = env.step(names[int(rng.integers(len(names)))])
        played += 1
        if terminated or truncated:
            env.reset(seed=played)
    env.close()
    return played / (time.perf_counter() - start)


def crafter_reset_ms(resets: int) -> dict[str, float]:
    env = gym.make("verlog/Crafter-v0")
    env.reset(seed=0)
    text = []
    for seed in range(1, resets + 1):
        start = time.perf_counter()
        env.reset(seed=seed)
        text.append((time.perf_counter() - start) * 1000)
    env.close()
    raw, game = [], RawCrafter()
    for seed in range(1, resets + 1):
        start = time.perf_counter()
        game.reset(seed)
        raw.append((time.perf_counter() - start) * 1000)
    return {"text_median": statistics.median(text), "raw_median": statistics.median(raw), "resets": resets}


# ---------------------------------------------------------------------------------------------- report
def _machine() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "verlog": verlog.__version__,
    }


def _mark(text: str, ok: bool) -> str:
    return f"[green]{text} ✓[/]" if ok else f"[red]{text} ✗[/]"


def report(results: dict[str, Any], console: Console) -> None:
    machine = results["machine"]
    table = Table(
        title=f"Env steps/s, {results['date']}, {machine['cpu_count']} CPUs, Python {machine['python']}",
        caption=f"targets: text/raw ≥ {TEXT_OVER_RAW_TARGET}; Crafter reset ≤ {CRAFTER_RESET_MS_TARGET:.0f} ms "
        "(single envs: step time only; vector: sub-env steps/s with autoresets)",
    )
    for column in (
        "game",
        "raw",
        "text",
        "text/raw",
        "+history",
        f"sync×{NUM_VECTOR_ENVS}",
        f"async×{NUM_VECTOR_ENVS}",
    ):
        table.add_column(column, justify="right")
    for name, row in results["games"].items():
        ratio = row["text_over_raw"]
        table.add_row(
            name,
            f"{row['raw_steps_per_s']:,.0f}",
            f"{row['text_steps_per_s']:,.0f}",
            _mark(f"{ratio:.2f}", ratio >= TEXT_OVER_RAW_TARGET),
            f"{row['history_steps_per_s']:,.0f}",
            f"{row['sync_steps_per_s']:,.0f}",
            f"{row['async_steps_per_s']:,.0f}",
        )
    console.print(table)
    branched = {name: row.get("branched_states_per_s") for name, row in results["games"].items()}
    if any(value is not None for value in branched.values()):
        figures = ", ".join(f"{name} {value:,.0f}" for name, value in branched.items() if value is not None)
        uncopyable = ", ".join(name for name, value in branched.items() if value is None)
        console.print(
            f"One-step branches, states/s with each offered action tried in a copy first: {figures}"
            + (f" ({uncopyable}: the env cannot be copied)" if uncopyable else "")
        )
    reset = results.get("crafter_reset_ms")
    if reset is None:
        return
    median = reset["text_median"]
    console.print(
        f"Crafter reset, median of {reset['resets']}: text env "
        f"{_mark(f'{median:.1f} ms', median <= CRAFTER_RESET_MS_TARGET)}, crafter.Env {reset['raw_median']:.1f} ms"
    )


@closed_pipe_ok
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter measurements (~20 s in all)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where the JSON goes")
    parser.add_argument("--games", default="", help="comma-separated game names to run (default: all)")
    args = parser.parse_args(argv)
    seconds, resets = (0.6, 10) if args.quick else (2.5, 30)
    console = Console()
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "quick": args.quick,
        "seconds_per_measure": seconds,
        "num_vector_envs": NUM_VECTOR_ENVS,
        "targets": {"text_over_raw": TEXT_OVER_RAW_TARGET, "crafter_reset_ms": CRAFTER_RESET_MS_TARGET},
        "games": {},
    }
    chosen = {g.strip().lower() for g in args.games.split(",") if g.strip()}
    for game in games():
        if chosen and game.name.lower() not in chosen:
            continue
        console.print(f"[dim]{game.name} ({game.env_id})...[/]")
        raw = raw_steps_per_s(game.raw(), seconds)
        text = text_steps_per_s(game.env_id, seconds)
        results["games"][game.name] = {
            "env_id": game.env_id,
            "raw_steps_per_s": raw,
            "text_steps_per_s": text,
            "text_over_raw": text / raw,
            "history_steps_per_s": text_steps_per_s(game.env_id, seconds, memory="history"),
            "sync_steps_per_s": vector_steps_per_s(game.env_id, "sync", seconds),
            "async_steps_per_s": vector_steps_per_s(game.env_id, "async", seconds),
            "branch_kwargs": BRANCH_KWARGS.get(game.name, {}),
            "branched_states_per_s": branched_states_per_s(
                game.env_id, seconds, BRANCH_KWARGS.get(game.name, {})
            ),
        }
    if not chosen or "crafter" in chosen:
        console.print("[dim]Crafter resets...[/]")
        results["crafter_reset_ms"] = crafter_reset_ms(resets)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    report(results, console)
    console.print(f"[dim]written to {args.output}[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
