"""``verlog eval`` / ``agents/evaluate.py``: a model or a baseline on a suite, scored the way BALROG scores.

    verlog eval random --suite babyai --episodes 10
    verlog eval oracle --suite babaisai
    verlog eval runs/learn-0001 --suite verlog/BabyAI-GoTo-v0 --episodes 50
    verlog eval Qwen/Qwen2.5-3B-Instruct --suite babyai --config envs/babyai.toml --sample
    verlog eval runs/models/smollm2-135m-instruct --backend vllm
    verlog eval MODEL --api-base http://127.0.0.1:8000/v1 --concurrency 8   # an OpenAI-compatible server

The output folder holds ``episodes.jsonl`` (one record per episode, appended as it ends), ``settings.json``,
``summary.json``, ``results.md`` and ``scores.png``. Running the same command again resumes: finished
episodes are read back and not played again. A folder written with other settings (another model, seed,
memory, prompt or decoding) is refused rather than mixed.

How a model is prompted (memory, answer format, token limits) comes from the learner's configuration: a run's
own ``config.toml`` when a run or checkpoint is evaluated, else ``--config`` (a preset such as
``envs/babyai.toml``) or the learner's defaults, with ``--set section.key=value`` overrides. The env's own
keyword arguments come only from ``--env-kwargs`` (training's ``env.kwargs``, such as an invalid-action
penalty, do not change the scores and are not used), so every model is scored on the same envs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verlog.evaluation import output
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
    run_checkpoint,
)
from verlog.evaluation.runner import EnvSettings, EpisodeLog, play
from verlog.evaluation.scoring import summarize
from verlog.evaluation.suites import episode_seed, episodes_label, game_of, resolve_suite, suites_help
from verlog.pipes import closed_pipe_ok
from verlog.quiet import attach_run_log, quiet_console
from verlog.runkit.folder import CHECKPOINTS, CONFIG_FILE
from verlog.runkit.samples import SampleWriter, TurnSample, pick_turns

__all__ = ["EVAL_HELP", "add_eval_arguments", "add_eval_command", "evaluate", "main", "run_eval"]

EVAL_HELP = "Evaluate a model, a training run or a baseline on a suite (BALROG scores with standard errors)."
EPISODES_FILE = "episodes.jsonl"
FAILURES_FILE = "failures.jsonl"
SETTINGS_FILE = "settings.json"


def evaluate(
    agent: str,
    suite: str | Sequence[str] = "babyai",
    *,
    out: str | Path | None = None,
    episodes: int | None = None,
    seed: int = 0,
    num_envs: int = 8,
    vectorization_mode: str = "sync",
    config: str | Path | None = None,
    overrides: Sequence[str] = (),
    env_kwargs: dict[str, Any] | None = None,
    sample: bool = False,
    device: str = "auto",
    progress: bool = False,
    samples_per_family: int = 2,
    api: Any = None,
) -> dict[str, Any]:
    """Play (or finish playing) the evaluation and write its files; return the summary.

    ``samples_per_family`` turns per task (drawn from those played now) are appended to ``samples.jsonl``
    in the output folder, with ``source = "eval"``, for ``verlog report``-style reading.

    ``agent`` is ``"random"``, ``"oracle"`` (BabaIsAI only), or a model: a Hugging Face folder or id, a run
    folder (its newest checkpoint) or a checkpoint folder (``checkpoints/NNNNNN``). With ``api``
    (:class:`verlog.sampling.api.ApiSettings`) it is the model a chat server serves; a request that keeps
    failing is appended to ``failures.jsonl`` and ends the run with an :class:`EvalError` (finished episodes
    are kept: the same command resumes).

    Its length is its signature's: one keyword argument per ``verlog eval`` option, passed on as they are; the
    work is in :func:`_make_agent`, :func:`_play_episodes` and :func:`_scores`.
    """
    the_suite = resolve_suite(suite)
    counts = the_suite.episodes(episodes)
    if min(counts.values()) < 1:
        raise EvalError(f"episodes must be at least 1, got {episodes}")
    n = episodes_label(counts)
    if vectorization_mode not in ("sync", "async"):
        raise EvalError(f"vectorization mode must be 'sync' or 'async', got {vectorization_mode!r}")
    folder = (
        Path(out)
        if out is not None
        else default_out(agent, the_suite.name, seed, sample and agent not in BASELINES)
    )
    started = time.perf_counter()

    player, learner = _make_agent(agent, the_suite.tasks, config, overrides, sample, device, seed, api)
    env = EnvSettings(
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        memory=learner.env.memory,
        memory_kwargs=dict(learner.env.memory_kwargs),
        env_kwargs=dict(env_kwargs or {}),
    )
    if player.needs_env and vectorization_mode != "sync":
        raise EvalError(f"the {player.name} agent reads the game state: use sync vector envs")
    notes = _kwargs_notes(agent, learner, the_suite.tasks, env.env_kwargs)
    settings = {
        "agent": player.identity(),
        "seed": seed,
        "memory": env.memory,
        "memory_kwargs": env.memory_kwargs,
        "env_kwargs": env.env_kwargs,
    }
    log = EpisodeLog(folder / EPISODES_FILE)
    records = _check_resume(folder, settings, log)
    wanted = {(task, episode_seed(seed, task, i)) for task in the_suite.tasks for i in range(counts[task])}
    done = {(r["task"], r["seed"]) for r in records} & wanted
    folder.mkdir(parents=True, exist_ok=True)
    attach_run_log(folder)  # the libraries' notices (model loading, the engine) go there while quiet
    (folder / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")

    played = _play_episodes(
        player,
        the_suite,
        counts,
        seed,
        env,
        done,
        log,
        records,
        total=len(wanted),
        progress=progress,
        samples=samples_per_family,
    )
    summary = {
        "date": output.now(),
        "machine": output.machine(),
        "suite": the_suite.name,
        "episodes_per_task": n,
        "seed": seed,
        **settings,
        "played_now": played,
        "resumed": len(done),
        "elapsed_s": time.perf_counter() - started,
        **_scores(the_suite, records, wanted),
    }
    if not output.can_plot():
        notes.append(f"matplotlib is not installed: {output.PLOT_FILE} not drawn (pip install matplotlib)")
    if notes:
        summary["notes"] = notes
    if isinstance(player, OracleAgent):
        summary["oracle_unsolved_now"] = sorted(player.unsolved)
        summary["oracle_not_shortest_now"] = sorted(player.not_shortest)
    if isinstance(player, ModelAgent) and player.turns:
        summary["mean_response_tokens_now"] = player.generated_tokens / player.turns
    output.write(summary, folder)
    summary["out"] = str(folder)
    return summary


def _play_episodes(
    player: Agent,
    the_suite: Any,
    counts: dict[str, int],
    seed: int,
    env: EnvSettings,
    done: set[tuple[str, int]],
    log: EpisodeLog,
    records: list[dict[str, Any]],
    *,
    total: int,
    progress: bool,
    samples: int,
) -> int:
    """Play the episodes not ``done``, each record appended to ``log`` and ``records`` as it ends, and a few
    turns per task (``samples``) to ``samples.jsonl``; return how many were played. A chat server that keeps
    failing is noted in ``failures.jsonl`` and stops the evaluation (the episodes played are kept)."""
    folder = log.path.parent
    with output.EpisodeProgress(progress, total - len(done), len(done)) as advance:

        def keep(record: dict[str, Any]) -> None:
            log.append(record)
            records.append(record)
            advance()

        turns: list[dict[str, Any]] = []
        try:
            played = play(
                player, the_suite.tasks, counts, seed, env, done=done, on_record=keep, on_turn=turns.append
            )
        except _api_error() as error:
            EpisodeLog(folder / FAILURES_FILE).append(
                {"date": output.now(), "error": str(error), "episodes_kept": len(records)}
            )
            raise EvalError(f"{error} [{len(records)} episodes kept in {folder}]") from error
    if samples and turns:  # a few turns per task, to read what the agent said and did
        picked = pick_turns(turns, samples, seed)
        with SampleWriter(folder) as writer:
            writer.write_many(TurnSample(update=0, global_step=0, source="eval", **t) for t in picked)
    return played


def _scores(the_suite: Any, records: list[dict[str, Any]], wanted: set[tuple[str, int]]) -> dict[str, Any]:
    """BALROG's scores over the wanted episodes, one record each (the first record of an episode wins: a
    duplicate can only repeat it), in the suite's order."""
    kept: dict[tuple[str, int], dict[str, Any]] = {}
    for record in records:
        key = (record["task"], record["seed"])
        if key in wanted and key not in kept:
            kept[key] = record
    ordered = sorted(kept.values(), key=lambda r: (the_suite.tasks.index(r["task"]), r["episode"]))
    return summarize(ordered, the_suite.tasks, {task: game_of(task) for task in the_suite.tasks})


def _kwargs_notes(agent: str, learner: Any, tasks: Sequence[str], env_kwargs: dict[str, Any]) -> list[str]:
    """A note when a model is scored on the env it was trained on, with other env settings than in training
    (an invalid-action penalty only changes the return, so it is not counted): its observations differ."""
    if agent in BASELINES or learner.env.id not in tasks:
        return []
    trained = {k: v for k, v in learner.env.kwargs.items() if k != "invalid_action_penalty"}
    differ = {k: v for k, v in trained.items() if env_kwargs.get(k) != v}
    if not differ:
        return []
    table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in differ.items())
    return [
        f"the model was trained on {learner.env.id} with {table}; this evaluation uses the env's defaults "
        f"there (add them to --env-kwargs to score it on what it was trained on)"
    ]


def default_out(agent: str, suite: str, seed: int, sample: bool = False) -> Path:
    """``runs/eval/<agent>-<suite>-s<seed>[-sampled]``, the agent and suite as file-name-safe slugs."""
    path = Path(agent.rstrip("/"))
    name = agent if agent in BASELINES else path.name or "model"
    if CHECKPOINTS in path.parts:  # runs/NAME/checkpoints/000100[/actor] -> NAME-000100
        name = "-".join([p for p in path.parts if p not in (CHECKPOINTS, "actor")][-2:])
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{name}-{suite}-s{seed}" + ("-sampled" if sample else ""))
    return Path("runs") / "eval" / slug


def _make_agent(
    spec: str,
    tasks: Sequence[str],
    config: str | Path | None,
    overrides: Sequence[str],
    sample: bool,
    device: str,
    seed: int,
    api: Any = None,
) -> tuple[Agent, Any]:
    """The agent, and the learner's configuration its prompts and memory come from."""
    from verlog.config import ConfigError, load_config

    source = None
    if spec not in BASELINES and api is None:
        source = resolve_model(spec)
        if config is None and source.run_dir is not None and (source.run_dir / CONFIG_FILE).is_file():
            config = source.run_dir / CONFIG_FILE
    try:
        learner = load_config(config, overrides)
    except (ConfigError, OSError) as error:
        raise EvalError(f"config: {error}") from error
    if spec == "random":
        return RandomAgent(), learner
    if spec == "oracle":
        others = sorted({game_of(t) for t in tasks} - {"babaisai"})
        if others:
            raise EvalError(f"the oracle is BabaIsAI's solver; the suite also holds {', '.join(others)}")
        return OracleAgent(), learner
    settings = ModelSettings.of(learner, greedy=not sample, device=device, seed=seed)
    if api is not None:
        return ApiAgent(api, settings), learner
    assert source is not None
    return ModelAgent(source, settings), learner


def _check_resume(folder: Path, settings: dict[str, Any], log: EpisodeLog) -> list[dict[str, Any]]:
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
        )
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


# ------------------------------------------------------------------------------------------------ the CLI
def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``verlog eval`` (the positional's dest is ``agent``)."""
    parser.add_argument(
        "agent",
        metavar="AGENT",
        help="random, oracle (BabaIsAI), a Hugging Face model folder or id, a run folder (its newest "
        "checkpoint) or a checkpoint folder (runs/NAME-NNNN/checkpoints/NNNNNN)",
    )
    parser.add_argument(
        "--suite",
        default="babyai",
        help=f"{suites_help()}, or comma-separated env ids (`verlog list`); default babyai",
    )
    parser.add_argument(
        "--episodes",
        type=int,
        default=None,
        metavar="N",
        help="seeded episodes per task (default BALROG's: babyai 10, babaisai 3, crafter 10, textworld 10, "
        "minihack 5, nethack 5)",
    )
    parser.add_argument("--seed", type=int, default=0, help="base seed of the episode seeds (default 0)")
    parser.add_argument(
        "--num-envs", type=int, default=8, metavar="N", help="envs played in parallel (default 8)"
    )
    parser.add_argument("--vectorization", choices=("sync", "async"), default="sync", help="vector env kind")
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default runs/eval/AGENT-SUITE-sSEED[-sampled])"
    )
    parser.add_argument("--config", type=Path, default=None, help="learner preset for memory and prompts")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a learner setting, e.g. --set prompt.format=action (repeatable)",
    )
    parser.add_argument(
        "--env-kwargs",
        default="{}",
        metavar="TOML",
        help="the env's keyword arguments as a TOML inline table, e.g. '{ max_episode_steps = 32 }'",
    )
    parser.add_argument(
        "--sample",
        action="store_true",
        help="sample at sampling.temperature / top_p instead of greedy decoding (models only)",
    )
    parser.add_argument("--device", default="auto", help="model device: auto, cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--backend",
        choices=("auto", "transformers", "vllm"),
        default=None,
        help="sampler of a local model (short for --set sampling.backend=...)",
    )
    api = parser.add_argument_group("OpenAI-compatible chat server (AGENT is then the served model's name)")
    api.add_argument("--api-base", metavar="URL", help="the server's base URL, e.g. http://127.0.0.1:8000/v1")
    api.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", metavar="VAR", help="env variable holding the key"
    )
    api.add_argument("--concurrency", type=int, default=8, metavar="N", help="requests in flight (default 8)")
    api.add_argument("--retries", type=int, default=4, metavar="N", help="retries per request, with backoff")
    api.add_argument("--timeout", type=float, default=120.0, metavar="S", help="seconds per request")
    parser.add_argument(
        "--checkpoint",
        default="newest",
        metavar="WHICH",
        help="for a run folder: newest (default), best (the validation panel's best, RUN/best.json) or NNNNNN",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show the libraries' own output (engine and load reports) instead of keeping it in OUT/console.log",
    )


def add_eval_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``eval`` to a CLI's subparsers; the parser's default ``func`` is :func:`run_eval`."""
    parser = subparsers.add_parser("eval", help=EVAL_HELP, description=EVAL_HELP)
    add_eval_arguments(parser)
    parser.set_defaults(func=run_eval)
    return parser


def _parse_table(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 ships no TOML reader
        import tomli as tomllib

    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError as error:
        raise EvalError(f"--env-kwargs {text!r} is not a TOML inline table: {error}") from error
    if not isinstance(value, dict):
        raise EvalError("--env-kwargs must be a TOML inline table like '{ max_episode_steps = 32 }'")
    return value


def _api_error() -> type[Exception]:
    from verlog.sampling.api import ApiError  # verlog.sampling imports torch: only when a run needs it

    return ApiError


def _api_settings(args: argparse.Namespace) -> Any:
    """The chat server of ``--api-base`` (None without it); ``--backend`` becomes an override."""
    if args.backend is not None:
        args.overrides = [*args.overrides, f"sampling.backend={args.backend}"]
    if not args.api_base:
        return None
    if args.concurrency < 1 or args.retries < 0 or args.timeout <= 0:
        raise EvalError("--concurrency must be >= 1, --retries >= 0 and --timeout > 0")
    from verlog.sampling.api import ApiSettings

    return ApiSettings(
        base_url=args.api_base.rstrip("/"),
        model=args.agent,
        api_key_env=args.api_key_env,
        concurrency=args.concurrency,
        retries=args.retries,
        timeout=args.timeout,
    )


def run_eval(args: argparse.Namespace) -> int:
    """Run ``verlog eval`` from parsed arguments; exit status 2 for an evaluation that cannot run."""
    from gymnasium.error import UnregisteredEnv

    if not args.verbose:
        quiet_console()
    try:
        if args.checkpoint != "newest":
            args.agent = str(run_checkpoint(args.agent, args.checkpoint))
        api = _api_settings(args)  # first: it turns --backend into an override
        summary = evaluate(
            args.agent,
            args.suite,
            out=args.out,
            episodes=args.episodes,
            seed=args.seed,
            num_envs=args.num_envs,
            vectorization_mode=args.vectorization,
            config=args.config,
            overrides=args.overrides,
            env_kwargs=_parse_table(args.env_kwargs),
            sample=args.sample,
            device=args.device,
            progress=not args.quiet,
            api=api,
        )
    except (EvalError, UnregisteredEnv) as error:
        print(f"verlog eval: error: {error}", file=sys.stderr)
        return 2
    if not args.quiet:
        from rich.console import Console

        Console().print(output.console_table(summary))
    for note in summary.get("notes", []):
        print(f"verlog eval: note: {note}", file=sys.stderr)
    total = summary["overall"]
    print(
        f"overall {total['score']:.1f} ± {total['score_se']:.1f} over {total['games']} game(s); "
        f"{summary['played_now']} episodes played now, {summary['resumed']} resumed; wrote {summary['out']}"
    )
    return 0


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verlog.evaluation`` / ``agents/evaluate.py``."""
    parser = argparse.ArgumentParser(
        prog="verlog eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_eval_arguments(parser)
    return run_eval(parser.parse_args(argv))
