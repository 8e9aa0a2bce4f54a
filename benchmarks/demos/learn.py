"""The learning demonstration: PPO from a tiny random model on BabyAI GoTo, on a CPU, and a check that it learns.

    nox -s learn
    python -m benchmarks.demos.learn [--config envs/learn.toml] [--seed N] [section.key=value ...]
    nox -s learn_babyai_mix -- --seed N        # BabyAI's five kinds together, judged per kind
    nox -s learn_babaisai_mix -- --seed N      # Verlog's four BabaIsAI families together, judged per family

It trains the preset (``envs/learn.toml``: a tiny randomly initialised Qwen3 and a word-level tokenizer trained
on the env's own text, seeded; see :func:`verlog.models.tiny.word_tokenizer`) with the ordinary
:class:`~verlog.ppo.trainer.Trainer`, then reads the run's ``metrics.jsonl``. The success rate of the first and
of the last 10% of updates pools the episodes that ended in those updates (``env/success`` weighted by ``charts/episodes``); its standard error is BALROG's
population std / sqrt(n), here sqrt(p (1 - p) / n). The script prints both, writes the curve to
``benchmarks/results/learn.png`` and the run's figures, as its seed's entry, into ``benchmarks/results/learn.json``
(:func:`benchmarks.demos.judge.record_seed`: one entry per seed, a rerun's old entry kept under
``earlier_runs``, as for every demonstration), and exits with status 1
unless the last window beats the first by at least three standard errors of their difference
(sqrt(SE_first^2 + SE_last^2)), with at least 10 episodes in each: a learner that does not learn fails it.

Afterwards the initial model, the trained one and the random agent (``verlog eval random``: uniform over the
env's valid actions) play the same 96 held-out seeded episodes (base seed :data:`benchmarks.demos.judge.EVAL_SEED`,
as every demonstration's; ``learn.json`` files from before it was recorded were judged on base seed 0), and the
trained model must also beat both the initial model and random there by at least three standard errors of the
difference (:func:`benchmarks.demos.judge.difference`): a model that learnt only to answer validly, and plays no
better than chance, fails. The held-out gain over the initial model is the one the results tables report, as
for every other demonstration; the training windows' gap is this demonstration's own extra check.
``--rejudge FILE`` plays random on the episodes each seed of a results file was judged on and writes the verdict
under this rule again, keeping the figures it holds (and the old verdict, under ``verdict_before_random``).

A seed's entry holds the judged blocks ``initial``, ``trained`` and ``random`` (success with ``success_se``, the
invalid-answer rate as a fraction), ``z`` (the held-out gain over the initial model, as every demonstration's;
the training windows' when no evaluation was played), the training windows under ``windows``, and the run.

A preset whose env draws a task kind per reset (``verlog/BabyAI-Mixed-v0``, BabaIsAI with several ``levels``) is
judged per kind (:mod:`benchmarks.demos.held_out`): the three agents play 128 seeded episodes of each kind (the
mix's kwarg fixed to it, every other setting kept), and a kind passes when the trained model beats the initial
one and random on it by three SEs of the difference. The entry keeps each kind's blocks and verdict under
``tasks`` and the kinds under ``tasks_passed`` / ``tasks_failed``; its ``initial``, ``trained`` and ``random`` are
the kinds pooled (reported, not judged on), and the seed passes when the training windows and every kind do.
``--stem`` names the results file (``benchmarks/results/<stem>.json``), ``--seed`` the training seed.

The judge samples both models at the run's training temperature. ``--judge-temperature T`` samples them at T
instead (0: greedy), the same for the untrained and the trained model; the header records it, so seeds judged
at another temperature are never counted beside them. Choose T on episodes the judge never plays
(``python -m benchmarks.probes.judge_temperature``), not on the judged ones.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, load_preset, locked, machine, update_records, window
from benchmarks.demos.held_out import (
    TASK_EPISODES,
    decoding_overrides,
    evaluate_agents,
    evaluate_tasks,
    judge_evaluation,
    judge_tasks,
    play_random,
    task_kinds,
)
from benchmarks.demos.judge import EVAL_SEED, Z_REQUIRED, exit_if_stopped, record_seed
from verlog.pipes import closed_pipe_ok
from verlog.quiet import quiet_console
from verlog.runkit.folder import CONFIG_FILE

#: The demonstration must finish within this on the 2-core CPU it was tuned on (reported, not enforced).
BUDGET_MIN = 30.0
#: Fewer episodes than this in a window measure nothing (0 of 3 and 3 of 3 have zero standard error).
MIN_EPISODES = 10
#: Written into the run folder after training, so ``--run`` reports the time it took.
WALL_FILE = "learn-wall.json"
#: The base seed a results file without ``eval_seed`` was judged on (``verlog eval``'s default).
FIRST_EVAL_SEED = 0
#: The results file's name in ``--out`` (and of its plot, ``.png``) unless ``--stem`` names another.
STEM = "learn"
#: Held-out episodes of a single task (a mix plays :data:`benchmarks.demos.held_out.TASK_EPISODES` per kind).
EVAL_EPISODES = 96


def compare(records: Sequence[dict[str, Any]], fraction: float = 0.1) -> dict[str, Any]:
    """First vs last ``fraction`` of the updates: both windows, the gap and how many SEs it is."""
    k = max(1, round(fraction * len(records)))
    first, last = window(records[:k]), window(records[-k:])
    gap = last["success"] - first["success"]
    se = math.sqrt(first["se"] ** 2 + last["se"] ** 2)
    z = gap / se if se > 0 else (math.inf if gap > 0 else -math.inf)
    enough = min(first["episodes"], last["episodes"]) >= MIN_EPISODES
    return {
        "first": first,
        "last": last,
        "gap": gap,
        "gap_se": se,
        "z": z,
        "passed": bool(enough and z >= Z_REQUIRED),
    }


def plot(records: Sequence[dict[str, Any]], result: dict[str, Any], path: Path, title: str) -> None:
    """Success per update (episode-weighted, over a sliding window of 10% of the updates), the two windows
    with their ± 1 SE bands, and the invalid-action rate."""
    from matplotlib.figure import Figure

    updates = [int(r["update"]) for r in records]
    k = max(1, round(0.1 * len(records)))
    smooth = []
    for i in range(len(records)):
        w = window(records[max(0, i - k + 1) : i + 1])
        smooth.append(w["success"] if w["episodes"] >= MIN_EPISODES else math.nan)  # too few: no point
    fig = Figure(figsize=(8, 4.8))
    ax = fig.add_subplot()
    ax.plot(updates, smooth, color="tab:blue", label=f"success (episodes of the last {k} updates)")
    for name, color in (("first", "tab:red"), ("last", "tab:green")):
        w = result[name]
        if not w["episodes"]:  # no episode ended in it (a smoke run's few updates): nothing to draw
            continue
        xs = [w["first_update"], w["last_update"]]
        ax.hlines(
            w["success"], *xs, color=color, lw=3, label=f"{name} 10%: {w['success']:.3f} ± {w['se']:.3f}"
        )
        ax.fill_between(xs, w["success"] - w["se"], w["success"] + w["se"], color=color, alpha=0.25)
    invalid = [r.get("env/invalid_action_rate") for r in records]
    ax.plot(updates, invalid, color="grey", lw=0.8, alpha=0.7, label="invalid-action rate")
    ax.set(xlabel="PPO update", ylabel="rate", ylim=(0, 1), title=title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def with_verdict(
    entry: dict[str, Any], windows: dict[str, Any], evaluation: dict[str, dict[str, float]] | None
) -> dict[str, Any]:
    """A seed's entry with its judged blocks (``initial``, ``trained``, ``random``), the evaluation's verdict and
    the overall one (the training windows' rule, and the evaluation's when it was played); its ``z`` is the
    held-out gain over the initial model, the gain every demonstration reports, else the windows'."""
    judged = judge_evaluation(evaluation) if evaluation else None
    return {
        **entry,
        **(evaluation or {}),
        "passed": bool(windows["passed"] and (judged is None or judged["passed"])),
        "z": judged["vs_initial"]["z"] if judged else windows["z"],
        "window_passed": bool(windows["passed"]),
        "windows": windows,
        "evaluation_verdict": judged,
    }


def with_task_verdicts(
    entry: dict[str, Any], windows: dict[str, Any], evaluations: dict[str, dict[str, dict[str, float]]]
) -> dict[str, Any]:
    """A mix's seed entry: each kind's blocks and verdict under ``tasks`` (:func:`judge_tasks`), the kinds that
    passed and failed, and the mix pooled as the judged blocks every table reads (``initial``, ``trained``,
    ``random``; its gain over the initial model is the entry's ``z``). The seed passes when the training windows
    do and every kind does: a mix that learns its easy kinds only does not pass."""
    judged = judge_tasks(evaluations)
    return {
        **entry,
        **judged["mix"],
        "tasks": judged["tasks"],
        "tasks_passed": judged["tasks_passed"],
        "tasks_failed": judged["tasks_failed"],
        "passed": bool(windows["passed"] and not judged["tasks_failed"]),
        "z": judged["mix_verdict"]["vs_initial"]["z"],
        "window_passed": bool(windows["passed"]),
        "windows": windows,
        "evaluation_verdict": judged["mix_verdict"],
    }


def from_one_run(report: dict[str, Any]) -> dict[str, Any]:
    """A results file from before learn.json was kept per seed (one run: the windows' figures at the top, verlog
    eval's under ``evaluation`` with the invalid-answer rate in %) in the per-seed layout, the run its seed's
    entry; every figure kept (the evaluation's in the judge's layout)."""
    windows_keys = ("first", "last", "gap", "gap_se", "z")
    windows = {k: report[k] for k in windows_keys} | {"passed": report.get("window_passed", report["passed"])}
    evaluation = {
        name: {
            "episodes": b["episodes"],
            "success": b["success"],
            "success_se": b["se"],
            "invalid_action_rate": b["invalid_action_rate"] / 100,
            "mean_length": b["mean_length"],
        }
        for name, b in (report.get("evaluation") or {}).items()
    }
    rest = {k: v for k, v in report.items() if k not in (*windows_keys, "evaluation", "z_required")}
    entry = {
        "seed": report["config"]["run"]["seed"],
        **rest,
        "eval_seed": report.get("eval_seed", FIRST_EVAL_SEED),
    }
    record = with_verdict(entry, windows, evaluation or None)
    results = {**header(report["config"], evaluation["trained"]["episodes"] if evaluation else 0,
                        record["eval_seed"]), "seeds": [], "earlier_runs": []}  # fmt: skip
    results["seeds_passed"] = [record["seed"]] if record["passed"] else []
    results["seeds_failed"] = [] if record["passed"] else [record["seed"]]
    results["seeds"] = [record]
    return results


def header(
    config: dict[str, Any],
    episodes: int,
    eval_seed: int | None,
    stem: str = STEM,
    kinds: Sequence[str] = (),
    judge_temperature: float | None = None,
) -> dict[str, Any]:
    """The results file's header: how its seeds were judged (:data:`benchmarks.demos.judge.JUDGE_KEYS`), so a
    run judged otherwise moves the earlier entries to ``earlier_runs``. A mix judged per kind names its kinds
    in ``task`` (its ``episodes`` are per kind); ``judge_temperature`` is the judge's decoding (None: each
    model's training temperature, 0: greedy)."""
    task = {"env_id": config["env"]["id"], "env_kwargs": config["env"]["kwargs"]}
    return {
        "benchmark": stem,
        "task": {**task, "kinds": list(kinds)} if kinds else task,
        "episodes": episodes,
        "eval_seed": eval_seed,
        "judge_temperature": judge_temperature,
        "z_required": Z_REQUIRED,
    }


def rejudge(entry: dict[str, Any]) -> dict[str, Any]:
    """A seed's entry judged again under the rule with random: random plays the episodes its initial and trained
    models played (its config's env, kwargs and memory, its ``eval_seed``); the figures already there stay, the
    old verdict is kept under ``verdict_before_random``."""
    if "tasks" in entry:
        raise SystemExit(f"seed {entry.get('seed')} was judged per task kind, against random already")
    if "trained" not in entry:
        raise SystemExit(f"seed {entry.get('seed')} has no evaluation to judge against random")
    env = entry["config"]["env"]
    episodes = entry["trained"]["episodes"]
    if entry["initial"]["episodes"] != episodes:
        raise SystemExit(f"seed {entry['seed']}: the initial and trained models played different episodes")
    seed = entry.get("eval_seed", FIRST_EVAL_SEED)
    random, _, _ = play_random(
        env["id"], env["kwargs"], env["memory"], env["memory_kwargs"], episodes, seed, env["num_envs"]
    )
    entry = {
        **entry,
        "verdict_before_random": entry.get("verdict_before_random", {"passed": entry["passed"]}),
    }
    evaluation = {"initial": entry["initial"], "trained": entry["trained"], "random": random}
    return with_verdict(entry, entry["windows"], evaluation)


def _print_evaluation(
    console: Any,
    evaluation: dict[str, dict[str, float]],
    judged: dict[str, Any],
    label: str = "",
    temperature: float | None = None,
) -> None:
    """Each agent's figures, the trained model's gains in SEs and the verdict (of task kind ``label``; the models
    decoded at the judge's ``temperature``)."""
    decoding = (
        " (sampled)"
        if temperature is None
        else " (greedy)"
        if temperature == 0
        else f" (sampled at {temperature:g})"
    )
    for name, figures in evaluation.items():
        console.print(
            f"evaluation, {name} {'agent' if name == 'random' else 'model'}, {figures['episodes']} seeded "
            f"episodes{'' if name == 'random' else decoding}: success "
            f"[bold]{figures['success']:.3f} ± {figures['success_se']:.3f}[/bold], invalid actions "
            f"{figures['invalid_action_rate'] * 100:.1f}%"
        )
    for name in ("initial", "random"):
        d = judged[f"vs_{name}"]
        console.print(
            f"trained vs {name}: {d['gain']:+.3f} ± {d['se']:.3f} = {d['z']:.1f} SE (need >= {Z_REQUIRED:g})"
        )
    mark = "[green]PASS[/green]" if judged["passed"] else "[red]FAIL[/red]"
    console.print(f"evaluation{f' of {label}' if label else ''}: {mark}")


def _parser() -> argparse.ArgumentParser:
    """The script's arguments (its docstring is the help)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "learn.toml", help="preset")
    parser.add_argument(
        "--run", type=Path, default=None, help="check an existing run folder instead of training"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for STEM.json and STEM.png")
    parser.add_argument(
        "--stem",
        default=STEM,
        help="results file name in --out (default: learn; the mixes' nox sessions name theirs)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="training seed (default: the preset's run.seed); the run is named -sN",
    )
    parser.add_argument(
        "--budget-min", type=float, default=BUDGET_MIN, help="minutes of training the console warns beyond"
    )
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=None,
        metavar="N",
        help=f"afterwards, play N seeded episodes with the initial and the trained model and random, N of each "
        f"task kind when the env is a mix (default: {EVAL_EPISODES}, or {TASK_EPISODES} per kind; 0: skip, and "
        "judge on the training windows alone)",
    )
    parser.add_argument(
        "--judge-temperature",
        type=float,
        default=None,
        metavar="T",
        help="the judge samples both models at T (0: greedy) instead of the run's training temperature; choose "
        "T on episodes the judge never plays (benchmarks.probes.judge_temperature)",
    )
    parser.add_argument(
        "--rejudge",
        type=Path,
        default=None,
        metavar="FILE",
        help="play random on the episodes a results file (learn.json) was judged on and rewrite its verdict "
        "under the rule with random; no training",
    )
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    return parser


def _rejudge_file(path: Path, console: Any) -> int:
    """``--rejudge FILE``: play random on the episodes each seed was judged on and rewrite the verdicts (a file from
    before learn.json was kept per seed is converted first); 0 when every seed passes."""
    with locked(path.parent):
        results = json.loads(path.read_text())
        if "seeds" not in results:
            results = from_one_run(results)
        seeds = [rejudge(entry) for entry in results["seeds"]]
        for entry in seeds:
            evaluation = {name: entry[name] for name in ("initial", "trained", "random")}
            _print_evaluation(console, evaluation, entry["evaluation_verdict"])
            console.print(
                f"seed {entry['seed']}: training windows {'pass' if entry['window_passed'] else 'FAIL'} "
                f"({entry['windows']['z']:.1f} SE); overall {'pass' if entry['passed'] else 'FAIL'} "
                f"(before random: {'pass' if entry['verdict_before_random']['passed'] else 'FAIL'})"
            )
        results = {
            **results,
            "seeds_passed": [e["seed"] for e in seeds if e["passed"]],
            "seeds_failed": [e["seed"] for e in seeds if not e["passed"]],
            "seeds": seeds,
        }
        path.write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"rewrote {path}")
    return 0 if not results["seeds_failed"] else 1


def _train_or_read(
    args: argparse.Namespace, parser: argparse.ArgumentParser, console: Any
) -> tuple[Any, Path, float | None]:
    """Train the preset (or, with ``--run``, read an existing run folder); returns (config, run folder, wall
    seconds of the training, None when it is not known)."""
    from verlog.config import load_config

    started = time.perf_counter()
    if args.run is None:
        seeded = [f"run.seed={args.seed}"] if args.seed is not None else []
        config = load_preset(parser, args.config, [*args.overrides, *seeded])
        if args.seed is not None:  # seeds run side by side each get their own run folders
            config.run.name = f"{config.run.name}-s{config.run.seed}"
        from verlog.ppo.trainer import Trainer

        if not Path(config.model.path).exists():
            console.print(f"building the tiny model and its word-level tokenizer in {config.model.path}")
        trainer = Trainer(config)
        run_dir = trainer.run_dir
        console.print(f"training {config.run.total_updates} updates into {run_dir}")
        trainer.train()
        exit_if_stopped(trainer, console, f"python -m benchmarks.demos.learn --run {run_dir}")
        wall: float | None = time.perf_counter() - started
        (run_dir / WALL_FILE).write_text(json.dumps({"wall_s": wall}) + "\n")
    else:
        run_dir = args.run
        config = load_config(run_dir / CONFIG_FILE)
        wall = (
            json.loads((run_dir / WALL_FILE).read_text())["wall_s"]
            if (run_dir / WALL_FILE).is_file()
            else None
        )
    return config, run_dir, wall


def _print_windows(
    console: Any, result: dict[str, Any], wall: float | None, run_dir: Path, budget_min: float = BUDGET_MIN
) -> None:
    """The first and last windows' success, their gap in standard errors, and the wall time."""
    first, last = result["first"], result["last"]
    console.print(
        f"success, first 10% of updates ({first['updates']} updates, {first['episodes']} episodes): "
        f"[bold]{first['success']:.3f} ± {first['se']:.3f}[/bold]"
    )
    console.print(
        f"success, last 10% of updates  ({last['updates']} updates, {last['episodes']} episodes): "
        f"[bold]{last['success']:.3f} ± {last['se']:.3f}[/bold]"
    )
    verdict = "[green]PASS[/green]" if result["passed"] else "[red]FAIL[/red]"
    console.print(
        f"gap {result['gap']:+.3f} ± {result['gap_se']:.3f} = {result['z']:.1f} standard errors "
        f"(need >= {Z_REQUIRED:g}): {verdict}"
    )
    if wall is not None:
        over = (
            f" [yellow](over the {budget_min:.0f}-minute budget)[/yellow]" if wall > 60 * budget_min else ""
        )
        console.print(f"training wall time {wall / 60:.1f} min{over}, run folder {run_dir}")


def _evaluate(
    console: Any,
    config: Any,
    run_dir: Path,
    episodes: int,
    kinds: tuple[str, tuple[str, ...]] | None,
    temperature: float | None = None,
) -> Any:
    """The held-out evaluation, printed: the three agents on ``episodes`` seeded episodes, of each task kind
    when the env is a mix (a dict of kind -> blocks), else of the task (its blocks); the models decoded at the
    judge's ``temperature`` (None: the training one)."""
    if kinds is None:
        evaluation = evaluate_agents(config, run_dir, episodes, temperature=temperature)
        _print_evaluation(console, evaluation, judge_evaluation(evaluation), temperature=temperature)
        return evaluation
    console.print(f"judging each of {len(kinds[1])} task kinds ({kinds[0]}) on {episodes} episodes")
    evaluations = evaluate_tasks(config, run_dir, episodes, kinds, temperature)
    for kind, blocks in evaluations.items():
        _print_evaluation(console, blocks, judge_evaluation(blocks), kind, temperature)
    return evaluations


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    decoding_overrides(args.judge_temperature)  # a bad temperature stops here, before any training
    quiet_console()  # the libraries' notices go to the run's console.log, as in agents/ppo.py

    from rich.console import Console

    console = Console()
    if args.rejudge is not None:
        return _rejudge_file(args.rejudge, console)
    config, run_dir, wall = _train_or_read(args, parser, console)
    records = update_records(run_dir)
    if not records:
        console.print(f"[red]{run_dir} has no update in metrics.jsonl[/red]")
        return 1
    result = compare(records)
    _print_windows(console, result, wall, run_dir, args.budget_min)

    kinds = task_kinds(config.env.id, config.env.kwargs)
    episodes = args.eval_episodes
    if episodes is None:
        episodes = TASK_EPISODES if kinds else EVAL_EPISODES
    temperature = args.judge_temperature
    evaluation = _evaluate(console, config, run_dir, episodes, kinds, temperature) if episodes else None

    run = {
        "seed": config.run.seed,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {**machine(), "torch_threads": config.run.torch_threads or machine().get("torch_threads")},
        "config_file": str(args.config) if args.run is None else str(run_dir / CONFIG_FILE),
        "config": config.to_dict(),
        "run_dir": str(run_dir),
        "wall_s": wall,
        "updates_s": sum(r.get("time/total") or 0.0 for r in records),
        "updates": len(records),
        "turns": int(records[-1].get("global_step", 0)),
        **({"eval_seed": EVAL_SEED, "judge_temperature": temperature} if evaluation else {}),
        "curve": [
            {k: r.get(k) for k in ("update", "env/success", "charts/episodes", "env/invalid_action_rate")}
            for r in records
        ],
    }
    per_task = bool(kinds and evaluation)
    entry = with_task_verdicts(run, result, evaluation) if per_task else with_verdict(run, result, evaluation)
    judged_on = header(
        run["config"], episodes if evaluation else 0, EVAL_SEED if evaluation else None, args.stem,
        kinds[1] if per_task else (), temperature if evaluation else None,
    )  # fmt: skip
    results = record_seed(args.out, args.stem, entry, judged_on)
    title = f"PPO, tiny random model, {config.env.id.split('/')[-1]}: z = {result['z']:.1f}"
    plot(records, result, args.out / f"{args.stem}.png", title)
    console.print(
        f"merged seed {entry['seed']} into {args.out / f'{args.stem}.json'}; wrote "
        f"{args.out / f'{args.stem}.png'}"
    )
    if per_task:
        console.print(f"task kinds passed {entry['tasks_passed']}, failed {entry['tasks_failed']}")
    console.print(
        f"overall: {'[green]PASS[/green]' if entry['passed'] else '[red]FAIL[/red]'} "
        f"(seeds passed {results['seeds_passed']}, failed {results['seeds_failed']})"
    )
    return 0 if entry["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
