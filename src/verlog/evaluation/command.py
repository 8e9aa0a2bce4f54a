"""``verlog eval`` / ``agents/evaluate.py``: a model or a baseline on a suite, scored the way BALROG scores.

    verlog eval random --suite babyai --episodes 10
    verlog eval oracle --suite babaisai
    verlog eval runs/learn-0001 --suite verlog/BabyAI-GoTo-v0 --episodes 50    # as the run trained
    verlog eval runs/learn-0001 --suite verlog/BabyAI-GoTo-v0 --greedy --env-defaults
    verlog eval Qwen/Qwen2.5-3B-Instruct --suite babyai --config envs/babyai.toml --sample
    verlog eval runs/models/smollm2-135m-instruct --backend vllm
    verlog eval MODEL --api-base http://127.0.0.1:8000/v1 --concurrency 8   # an OpenAI-compatible server

The output folder holds ``episodes.jsonl`` (one record per episode, appended as it ends), ``settings.json``,
``summary.json``, ``results.md`` and ``scores.png``. The default folder is named after the agent, the suite,
the seed, the decoding and a hash of every other setting, so two evaluations with different settings never
share one; running the same command again resumes: finished episodes are read back and not played again. A
folder given with ``--out`` that holds other settings is refused rather than mixed.

How a model is prompted (memory, answer format, token limits) comes from the learner's configuration: a run's
own ``config.toml`` when a run or checkpoint is evaluated, else ``--config`` (a preset such as
``envs/babyai.toml``) or the learner's defaults, with ``--set section.key=value`` overrides. A run is scored
by default as it trained: sampled at its ``sampling.temperature`` and ``top_p``, and on the env it trained on
with its ``env.kwargs`` (a smaller room, a shorter episode); ``--greedy`` and ``--env-defaults`` ask for
greedy answers and the env's defaults, to compare models on the same envs. ``--env-kwargs`` applies to every
task, over the run's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verlog.evaluation import output
from verlog.evaluation.agents import (
    Agent,
    EvalError,
    ModelAgent,
    OracleAgent,
    run_checkpoint,
)
from verlog.evaluation.progress import EvalProgress
from verlog.evaluation.runner import EnvSettings, EpisodeLog, play
from verlog.evaluation.scoring import summarize
from verlog.evaluation.settings import (
    SETTINGS_FILE,
    as_trained_line,
    check_resume,
    default_out,
    is_run,
    kwargs_notes,
    make_agent,
    say,
    trained_kwargs,
)
from verlog.evaluation.suites import (
    episode_seed,
    episodes_label,
    game_of,
    resolve_suite,
    suites_help,
)
from verlog.pipes import closed_pipe_ok
from verlog.quiet import attach_run_log, quiet_console
from verlog.runkit.samples import SampleWriter, TurnSample, pick_turns

__all__ = ["EVAL_HELP", "add_eval_arguments", "add_eval_command", "evaluate", "main", "run_eval"]

EVAL_HELP = "Evaluate a model, a training run or a baseline on a suite (BALROG scores with standard errors)."
EPISODES_FILE = "episodes.jsonl"
FAILURES_FILE = "failures.jsonl"


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
    env_as_trained: bool = False,
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

    ``env_as_trained``: a run's (or its checkpoint's) env kwargs for the env it trained on, under
    ``env_kwargs``; ``sample``: answers sampled at the configuration's temperature, not greedy.
    ``verlog eval`` sets both for a run unless asked not to (:func:`run_eval`); here they are off, so a
    caller gets what it names. With ``progress``, one line says where the settings came from, then progress goes to stderr.

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
    started = time.perf_counter()

    player, learner, run = make_agent(agent, the_suite.tasks, config, overrides, sample, device, seed, api)
    trained = trained_kwargs(learner, the_suite.tasks) if env_as_trained and run is not None else {}
    env = EnvSettings(
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        memory=learner.env.memory,
        memory_kwargs=dict(learner.env.memory_kwargs),
        env_kwargs=dict(env_kwargs or {}),
        task_kwargs=trained,
    )
    if player.needs_env and vectorization_mode != "sync":
        raise EvalError(f"the {player.name} agent reads the game state: use sync vector envs")
    notes = kwargs_notes(run, learner, the_suite.tasks, env)
    settings = {
        "agent": player.identity(),
        "seed": seed,
        "memory": env.memory,
        "memory_kwargs": env.memory_kwargs,
        "env_kwargs": env.env_kwargs,
        **({"trained_env_kwargs": trained} if trained else {}),  # absent: an older folder still resumes
    }
    folder = Path(out) if out is not None else default_out(agent, the_suite.name, seed, settings)
    if progress and run is not None:
        say(as_trained_line(learner, the_suite.tasks, env, settings["agent"]))
    if progress and settings["agent"].get("constrain"):
        say("answers restricted to the valid actions: not BALROG's protocol (--constrain off)")
    log = EpisodeLog(folder / EPISODES_FILE)
    records = check_resume(folder, settings, log)
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
    with EvalProgress(progress, total - len(done), len(done)) as shown:

        def keep(record: dict[str, Any]) -> None:
            log.append(record)
            records.append(record)
            shown.episode(int(record["length"]))

        turns: list[dict[str, Any]] = []

        def count(turn: dict[str, Any]) -> None:
            turns.append(turn)
            shown.turn()

        try:
            played = play(
                player, the_suite.tasks, counts, seed, env, done=done, on_record=keep, on_turn=count
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


# ------------------------------------------------------------------------------------------------ the CLI
def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``verlog eval`` (the positional's dest is ``agent``); its length is one
    ``add_argument`` per option."""
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
        "--out",
        type=Path,
        default=None,
        help="output folder (default runs/eval/AGENT-SUITE-sSEED-DECODING-HASH, named after the settings)",
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
        help="the env's keyword arguments as a TOML inline table, e.g. '{ max_episode_steps = 32 }' "
        "(every task; for a run, over the kwargs it trained with)",
    )
    parser.add_argument(
        "--env-defaults",
        action="store_true",
        help="a run: play its env with the env's defaults, not the env.kwargs it trained with",
    )
    decoding = parser.add_mutually_exclusive_group()
    decoding.add_argument(
        "--greedy",
        action="store_true",
        help="greedy answers (the default, except for a run: it samples as it trained)",
    )
    decoding.add_argument(
        "--sample",
        action="store_true",
        help="sample at sampling.temperature / top_p (the default for a run)",
    )
    parser.add_argument("--device", default="auto", help="model device: auto, cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--backend",
        choices=("auto", "transformers", "vllm"),
        default=None,
        help="sampler of a local model (short for --set sampling.backend=...)",
    )
    parser.add_argument(
        "--constrain",
        choices=("off", "actions"),
        default=None,
        help="actions: every answer one of the turn's valid actions (not BALROG's protocol; "
        "short for --set sampling.constrain=...; a run: as it trained)",
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
    if args.constrain is not None:
        args.overrides = [*args.overrides, f"sampling.constrain={args.constrain}"]
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
        trained = api is None and args.config is None and is_run(args.agent)
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
            sample=args.sample or (trained and not args.greedy),
            env_as_trained=trained and not args.env_defaults,
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
        say(f"note: {note}")
    total = summary["overall"]
    print(
        f"overall {total['score']:.1f} ± {total['score_se']:.1f} ({total['games']} game"
        f"{'s' if total['games'] != 1 else ''}); {summary['played_now']} episodes played now, "
        f"{summary['resumed']} resumed\nwrote {summary['out']}"
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
