"""What an evaluation plays with, and where it keeps it: the agent and the configuration its prompts come from
(a run's own ``config.toml``), a run's env kwargs as it trained, the one line that says so, the notes on what
differs from training, and the output folder, named after the settings and checked against them on resume, so
two evaluations never share one."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verlog.evaluation.agents import (
    BASELINES,
    Agent,
    ApiAgent,
    EvalError,
    ModelAgent,
    ModelSettings,
    OracleAgent,
    RandomAgent,
    resolve_model,
)
from verlog.evaluation.runner import EnvSettings, EpisodeLog
from verlog.evaluation.suites import game_of, short_name
from verlog.runkit.folder import CHECKPOINTS, CONFIG_FILE

__all__ = [
    "SETTINGS_FILE",
    "as_trained_line",
    "check_resume",
    "default_out",
    "is_run",
    "kwargs_notes",
    "make_agent",
    "say",
    "trained_kwargs",
]

SETTINGS_FILE = "settings.json"


def trained_kwargs(learner: Any, tasks: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The run's env kwargs, for the env it trained on when the suite plays it (another env may not take
    them: a BabaIsAI ``level``, a BabyAI room size on Crafter)."""
    return {learner.env.id: dict(learner.env.kwargs)} if learner.env.id in tasks else {}


def kwargs_notes(run: Path | None, learner: Any, tasks: Sequence[str], env: EnvSettings) -> list[str]:
    """A note when a run is scored on the env it trained on with other env settings than in training (an
    invalid-action penalty only changes the return, so it is not counted): its observations differ."""
    if run is None or learner.env.id not in tasks:
        return []
    used = env.kwargs(learner.env.id)
    trained = {k: v for k, v in learner.env.kwargs.items() if k != "invalid_action_penalty"}
    differ = [k for k, v in trained.items() if used.get(k) != v]
    if not differ:
        return []
    return [f"{short_name(learner.env.id)} not as trained: {', '.join(differ)}"]


def as_trained_line(learner: Any, tasks: Sequence[str], env: EnvSettings, agent: dict[str, Any]) -> str:
    """``as trained: prompts, env kwargs, temperature 1 (or --greedy, --env-defaults)``: what of a run's
    training settings this evaluation uses, what it was asked to use instead, and the flags that would."""
    used, asked, flags = ["prompts"], [], []
    if env.task_kwargs:
        used.append("env kwargs")
        flags.append("--env-defaults")
    elif learner.env.id in tasks:
        asked.append("the env's defaults")
    if agent.get("greedy"):
        asked.append("greedy")
    else:
        used.append(f"temperature {agent.get('temperature', 0):g}")
        flags.insert(0, "--greedy")
    line = f"as trained: {', '.join(used)}" + (f"; as asked: {', '.join(asked)}" if asked else "")
    if learner.env.id not in tasks:
        line += f"; {short_name(learner.env.id)}, its env, is not in the suite"
    return line + (f" (or {', '.join(flags)})" if flags else "")


def say(line: str) -> None:
    """A line on stderr, wrapped at the terminal's width (80 columns in a pipe)."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, highlight=False).print(escape(line))


def default_out(agent: str, suite: str, seed: int, settings: dict[str, Any] | None = None) -> Path:
    """``runs/eval/<agent>-<suite>-s<seed>[-<decoding>-<hash>]``, the agent and suite as file-name-safe slugs.

    ``settings`` (what ``settings.json`` holds) adds the decoding (``greedy``, ``t0.7``) and a short hash of
    them all, so an evaluation with other settings (env kwargs, prompts, memory, checkpoint) gets another
    folder instead of being refused by this one."""
    path = Path(agent.rstrip("/"))
    name = agent if agent in BASELINES else path.name or "model"
    if CHECKPOINTS in path.parts:  # runs/NAME/checkpoints/000100[/actor] -> NAME-000100
        name = "-".join([p for p in path.parts if p not in (CHECKPOINTS, "actor")][-2:])
    parts = [name, suite, f"s{seed}"]
    if settings is not None:
        who = settings.get("agent", {})
        if "greedy" in who:
            parts.append("greedy")
        elif "temperature" in who:
            parts.append(f"t{who['temperature']:g}")
        parts.append(hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:6])
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts))
    return Path("runs") / "eval" / slug


def check_resume(folder: Path, settings: dict[str, Any], log: EpisodeLog) -> list[dict[str, Any]]:
    """The records already in ``folder``, after checking they were played with the same settings."""
    path = folder / SETTINGS_FILE
    if not path.is_file():
        if log.path.is_file() and log.path.stat().st_size:
            raise EvalError(f"{log.path} exists without {SETTINGS_FILE}: use another --out")
        return []
    previous = _flat(json.loads(path.read_text()))
    current = _flat(json.loads(json.dumps(settings)))  # the same JSON types as the file holds
    differ = sorted(key for key in set(previous) | set(current) if previous.get(key) != current.get(key))
    if differ:
        detail = "; ".join(
            f"{k}: {previous.get(k, '-')!r} there, {current.get(k, '-')!r} now" for k in differ
        )
        raise EvalError(
            f"{folder} holds an evaluation with other settings ({detail}); use another --out to keep both"
        )  # only with --out: a default folder is named after its settings
    return log.read()


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as ``a.b`` keys, so a mismatch names the one setting that differs."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):  # an empty table adds no key: {} vs {"a": 1} differs in "a" alone
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def make_agent(
    spec: str,
    tasks: Sequence[str],
    config: str | Path | None,
    overrides: Sequence[str],
    sample: bool,
    device: str,
    seed: int,
    api: Any = None,
) -> tuple[Agent, Any, Path | None]:
    """The agent, the learner's configuration its prompts and memory come from, and the run folder that
    configuration is from (None: a baseline, a model not trained here, or ``--config``)."""
    from verlog.config import ConfigError, load_config

    source, run = None, None
    if spec not in BASELINES and api is None:
        source = resolve_model(spec)
        if config is None and source.run_dir is not None and (source.run_dir / CONFIG_FILE).is_file():
            config, run = source.run_dir / CONFIG_FILE, source.run_dir
    try:
        learner = load_config(config, overrides)
    except (ConfigError, OSError) as error:
        raise EvalError(f"config: {error}") from error
    if spec == "random":
        return RandomAgent(), learner, None
    if spec == "oracle":
        others = sorted({game_of(t) for t in tasks} - {"babaisai"})
        if others:
            raise EvalError(f"the oracle is BabaIsAI's solver; the suite also holds {', '.join(others)}")
        return OracleAgent(), learner, None
    settings = ModelSettings.of(learner, greedy=not sample, device=device, seed=seed)
    if api is not None:
        return ApiAgent(api, settings), learner, None
    assert source is not None
    return ModelAgent(source, settings), learner, run


def is_run(agent: str) -> bool:
    """Whether ``agent`` is a run folder or one of its checkpoints (with the config.toml it trained with)."""
    try:
        source = resolve_model(agent)
    except EvalError:
        return False  # evaluate() says what is wrong with it
    return source.run_dir is not None and (source.run_dir / CONFIG_FILE).is_file()
