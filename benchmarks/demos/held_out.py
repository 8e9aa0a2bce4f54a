"""The tiny demonstration's held-out judge (``benchmarks/demos/learn.py``): the initial model, the trained one and
random play the same seeded episodes, and the trained model must beat both by :data:`Z_REQUIRED` standard errors
of the difference (:func:`benchmarks.demos.judge.difference`).

A mixed env (``verlog/BabyAI-Mixed-v0``'s five kinds, BabaIsAI's ``levels``) is judged per task kind: each kind
is fixed in turn by the env kwarg that names the mix (:data:`KIND_KWARGS`), the three agents play the same
seeded episodes of it, and each kind gets its own verdict. A mix pooled into one figure could pass on its easy
kinds alone, which is what Verlog's table, one row per task, would not show.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import JUDGE_DIR, cached_random, kept_evaluation, random_key
from benchmarks.demos.judge import EVAL_SEED, Z_REQUIRED, difference
from verlog.runkit.folder import CONFIG_FILE
from verlog.tomlconfig import toml_value

__all__ = [
    "KIND_KWARGS",
    "TASK_EPISODES",
    "TRAINING_ONLY",
    "decoding_label",
    "decoding_overrides",
    "evaluate_agents",
    "evaluate_tasks",
    "eval_figures",
    "judge_evaluation",
    "judge_tasks",
    "judged_kwargs",
    "kind_kwargs",
    "play_model",
    "play_random",
    "pooled",
    "task_kinds",
]

#: The env kwarg that makes an env a mix, and how one kind is written into it to fix that kind: BabyAI's
#: ``task`` (a kind, or a tuple to draw from per reset), BabaIsAI's ``levels`` (the families drawn per reset; a
#: list of one is that family alone, drawn with no extra random number, so its levels are the family's own).
KIND_KWARGS: dict[str, Callable[[str], Any]] = {"task": lambda kind: kind, "levels": lambda kind: [kind]}
#: Env kwargs for training only, set to 0 in the judge: a shaping reward and the starts placed away from the reset.
TRAINING_ONLY = ("shaping", "bot_start", "walk_start")
#: Held-out episodes per task kind when a mix is judged (issue 57: at least 128 each).
TASK_EPISODES = 128


# ------------------------------------------------------------------------------------------------ figures
def eval_figures(summary: dict[str, Any], env_id: str) -> dict[str, float]:
    """A ``verlog eval`` summary's figures in the judge's layout (fractions, ``success_se``), as every
    demonstration's blocks are, so the results tables read them alike."""
    task = summary["tasks"][env_id]
    return {
        "episodes": task["episodes"],
        "success": task["success_rate"] / 100,
        "success_se": task["success_se"] / 100,
        "invalid_action_rate": task["invalid_action_rate"] / 100,
        "mean_length": task["mean_length"],
    }


def pooled(blocks: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Blocks of the kinds of a mix as one: success over all their episodes with the stratified SE
    sqrt(sum n_k^2 SE_k^2) / N (each kind's episodes are their own sample), the invalid rate over all turns and
    the mean length over all episodes; what the mix as a whole scored, reported beside the per-kind verdicts."""
    n = sum(b["episodes"] for b in blocks)
    turns = [b["episodes"] * b["mean_length"] for b in blocks]
    return {
        "episodes": n,
        "success": sum(b["episodes"] * b["success"] for b in blocks) / n,
        "success_se": math.sqrt(sum((b["episodes"] * b["success_se"]) ** 2 for b in blocks)) / n,
        "invalid_action_rate": sum(t * b["invalid_action_rate"] for t, b in zip(turns, blocks, strict=True))
        / max(sum(turns), 1e-12),
        "mean_length": sum(turns) / n,
    }


# ------------------------------------------------------------------------------------------------ task kinds
def task_kinds(env_id: str, env_kwargs: Mapping[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """``(kwarg, kinds)`` when ``env_id`` with ``env_kwargs`` draws a task kind per reset (the registered kwargs
    under the preset's, as ``gymnasium.make`` merges them), else None: a single task is judged as one."""
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the verlog/... ids)

    merged = {**gym.spec(env_id).kwargs, **env_kwargs}
    for key in KIND_KWARGS:
        value = merged.get(key)
        if isinstance(value, list | tuple) and len(value) > 1:
            return key, tuple(str(kind) for kind in value)
    return None


def kind_kwargs(env_kwargs: Mapping[str, Any], key: str, kind: str) -> dict[str, Any]:
    """The preset's env kwargs with the mix fixed to ``kind`` (every other setting kept, so each kind is played
    as the mix plays it)."""
    return {**env_kwargs, key: KIND_KWARGS[key](kind)}


# ------------------------------------------------------------------------------------------------ agents
def play_random(
    env_id: str,
    env_kwargs: dict[str, Any],
    memory: str,
    memory_kwargs: dict[str, Any],
    episodes: int,
    seed: int,
    num_envs: int,
) -> tuple[dict[str, float], Path, bool]:
    """The random agent's figures on those episodes, from ``runs/random/<key>`` when played before; else played
    (in this process: no model, no sampler engine) and kept there. Returns (figures, folder, cached)."""
    from verlog.evaluation import evaluate

    overrides = [f"env.memory={toml_value(memory)}", f"env.memory_kwargs={toml_value(dict(memory_kwargs))}"]

    def play(partial: Path) -> dict[str, float]:
        summary = evaluate(
            "random", env_id, out=partial, episodes=episodes, seed=seed, num_envs=num_envs,
            overrides=overrides, env_kwargs=dict(env_kwargs),
        )  # fmt: skip
        return eval_figures(summary, env_id)

    return cached_random(
        random_key(env_id, env_kwargs, memory, memory_kwargs, episodes, seed),
        play,
        lambda folder: eval_figures(json.loads((folder / "summary.json").read_text()), env_id),
    )


def judged_kwargs(env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The env kwargs the judge plays: a shaping reward, BabyAI's ``bot_start`` and BabaIsAI's ``walk_start`` are
    training's alone, so the judge plays the game's own reward from its own resets (all 0), as the panel of a
    shaped preset does."""
    kwargs = dict(env_kwargs)
    for training_only in TRAINING_ONLY:
        if kwargs.get(training_only):
            kwargs[training_only] = 0.0
    return kwargs


def decoding_overrides(temperature: float | None) -> tuple[bool, list[str]]:
    """``(sample, overrides)`` for ``verlog eval`` at the judge's decoding: None samples at the run's training
    temperature (as trained), 0 is greedy, anything else samples at that temperature."""
    if temperature is None:
        return True, []
    if temperature < 0:
        raise SystemExit(f"a judge temperature must be 0 (greedy) or positive, not {temperature:g}")
    return (False, []) if temperature == 0 else (True, [f"sampling.temperature={temperature!r}"])


def decoding_label(temperature: float | None) -> str:
    """The evaluation folder's part that names a decoding other than the training one (``-t0.5``, ``-greedy``)."""
    if temperature is None:
        return ""
    return "-greedy" if temperature == 0 else f"-t{temperature:g}"


def play_model(
    config: Any,
    run_dir: Path,
    name: str,
    episodes: int,
    env_kwargs: Mapping[str, Any],
    label: str = "",
    *,
    seed: int = EVAL_SEED,
    temperature: float | None = None,
) -> dict[str, float]:
    """One model of a run on ``episodes`` seeded episodes from ``seed`` through ``verlog eval``, with the run's
    prompts, memory and env settings (``env_kwargs`` as given, already the judge's): ``name`` "initial" is the
    model the run started from, "trained" its last checkpoint. Played into ``eval-<name>[-<label>]-seed<N>``
    (with the decoding's label when ``temperature`` is not the training one), so a finished one is read back.
    The initial model plays the same episodes alike for every seed of a recipe, so it is played once under
    ``runs/judge`` (:func:`shared_initial`) and copied into each run's folder."""
    from verlog.evaluation import evaluate

    sample, overrides = decoding_overrides(temperature)
    agent = {"initial": config.model.path, "trained": str(run_dir)}[name]
    part = f"-{label}" if label else ""
    out = run_dir / f"eval-{name}{part}-seed{seed}{decoding_label(temperature)}"

    def played(folder: Path) -> dict[str, Any]:
        return evaluate(
            agent, out=folder, suite=config.env.id, episodes=episodes, seed=seed, num_envs=config.env.num_envs,
            env_kwargs=dict(env_kwargs), config=run_dir / CONFIG_FILE, sample=sample, overrides=overrides,
        )  # fmt: skip

    if name == "initial" and not (out / "summary.json").is_file():
        shared_initial(config, episodes, env_kwargs, seed, overrides, played, out)
    # evaluate() reads a finished folder back, after checking it was played with this run's settings
    return eval_figures(played(out), config.env.id)


def shared_initial(
    config: Any,
    episodes: int,
    env_kwargs: Mapping[str, Any],
    seed: int,
    overrides: Sequence[str],
    play: Callable[[Path], dict[str, Any]],
    out: Path,
) -> Path:
    """The initial model's evaluation kept under ``runs/judge/initial-<digest>`` (played there once by ``play``,
    :func:`benchmarks.common.kept_evaluation`) and copied to ``out``. The digest is of everything the episodes
    depend on: the model, the env and its kwargs, the prompts, memory and sampling, the episodes and their seed,
    the decoding; not the run's own seed, name or learning settings (``run``, ``ppo``, ``algo``, ``panel``)."""
    import hashlib
    import shutil

    settings = {k: v for k, v in config.to_dict().items() if k not in ("run", "ppo", "algo", "panel")}
    key = {
        "agent": str(config.model.path), "suite": config.env.id, "episodes": episodes, "seed": seed,
        "num_envs": config.env.num_envs, "env_kwargs": dict(env_kwargs), "decoding": list(overrides),
        "config": settings,
    }  # fmt: skip
    digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    folder = JUDGE_DIR / f"initial-{digest}"
    kept_evaluation(folder, key, play, lambda kept: json.loads((kept / "summary.json").read_text()))
    shutil.copytree(folder, out, ignore=shutil.ignore_patterns("key.json"), dirs_exist_ok=True)
    return folder


def evaluate_agents(
    config: Any,
    run_dir: Path,
    episodes: int,
    env_kwargs: Mapping[str, Any] | None = None,
    label: str = "",
    temperature: float | None = None,
) -> dict[str, dict[str, float]]:
    """The same seeded episodes played by the initial model, by the run's last checkpoint (both sampled at the
    training temperature unless ``temperature`` names the judge's, 0 greedy: :func:`play_model`) and by the
    random agent (kept under ``runs/random/``). ``env_kwargs`` replaces the run's (one kind of a mix), and
    ``label`` names its evaluation folders; the judge plays :func:`judged_kwargs` of them."""
    kwargs = judged_kwargs(config.env.kwargs if env_kwargs is None else env_kwargs)
    figures = {
        name: play_model(config, run_dir, name, episodes, kwargs, label, temperature=temperature)
        for name in ("initial", "trained")
    }
    figures["random"] = play_random(
        config.env.id, kwargs, config.env.memory, config.env.memory_kwargs, episodes, EVAL_SEED,
        config.env.num_envs,
    )[0]  # fmt: skip
    return figures


def evaluate_tasks(
    config: Any,
    run_dir: Path,
    episodes: int,
    kinds: tuple[str, tuple[str, ...]],
    temperature: float | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """:func:`evaluate_agents` on each kind of a mix (``kinds`` from :func:`task_kinds`), ``episodes`` each."""
    key, names = kinds
    return {
        kind: evaluate_agents(
            config, run_dir, episodes, kind_kwargs(config.env.kwargs, key, kind), kind, temperature
        )
        for kind in names
    }


# ------------------------------------------------------------------------------------------------ verdicts
def judge_evaluation(evaluation: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The trained model against the initial one and against random on the same seeded episodes: both gains
    must be at least ``Z_REQUIRED`` standard errors of the difference (a run from before random was played is
    judged on the initial model alone, as it was then, until ``--rejudge`` plays random)."""
    trained = evaluation["trained"]
    out: dict[str, Any] = {}
    for name in ("initial", "random"):
        if name in evaluation:
            other = evaluation[name]
            out[f"vs_{name}"] = difference(
                trained["success"], trained["success_se"], other["success"], other["success_se"]
            )
    out["passed"] = bool(all(d["z"] >= Z_REQUIRED for d in out.values()))
    return out


def judge_tasks(evaluations: Mapping[str, dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Each kind's blocks with its own verdict (:func:`judge_evaluation`: beats the initial model and random by
    ``Z_REQUIRED`` SEs on that kind's episodes), which kinds passed and failed, and the mix pooled
    (:func:`pooled`, reported, not judged on)."""
    tasks = {kind: {**blocks, "verdict": judge_evaluation(blocks)} for kind, blocks in evaluations.items()}
    mix = {name: pooled([b[name] for b in evaluations.values()]) for name in ("initial", "trained", "random")}
    return {
        "tasks": tasks,
        "tasks_passed": [kind for kind, t in tasks.items() if t["verdict"]["passed"]],
        "tasks_failed": [kind for kind, t in tasks.items() if not t["verdict"]["passed"]],
        "mix": mix,
        "mix_verdict": judge_evaluation(mix),
    }
