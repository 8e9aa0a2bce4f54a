"""The long-horizon demonstration: PPO from a tiny local model on Crafter, episodes spread over many updates,
judged on held-out full episodes against the untrained model and a random agent.

    nox -s learn_crafter -- --seed 2
    python -m benchmarks.demos.learn_crafter [--config envs/learn_crafter.toml] [--seed N] [section.key=value ...]
    python -m benchmarks.demos.learn_crafter --run runs/learn-crafter-s1-0001     # judge an existing run again
    python -m benchmarks.demos.learn_crafter --variant no-bootstrap --seed 1      # one ablation cell (see ablation_crafter.py)

Steps: the preset (``envs/learn_crafter.toml``: a tiny random model whose vocabulary is Crafter's own words and
action names, Crafter at BALROG's settings, 32 envs x 16 turns an update, so a ~170-turn episode spans ten or
more updates) trains with the ordinary :class:`~verlog.ppo.trainer.Trainer`. Then three agents play the same
``--episodes`` held-out seeded full episodes (seeds from ``--eval-seed``, default 10,000, disjoint from the
training envs' ``run.seed + k`` and the panel's 900,000), sampled at the training temperature, through
``verlog eval``: the untrained model, ``random`` (a uniformly drawn valid action every turn) and the trained
run's last checkpoint. Each gets Crafter's return, achievements per episode, BALROG progression and episode
length, each ± SE over episodes, and the per-achievement rates.

Each also gets Crafter's own score (the Crafter paper's geometric mean of the 22 achievements' success rates)
with its bootstrap SE over episodes. The judge is :mod:`benchmarks.demos.judge`'s: a seed passes when the
trained model's return **and** Crafter score each beat the untrained model's and the random agent's by at least
three standard errors of the difference (progression is reported beside them); otherwise the script exits with
status 1. The untrained and random evaluations depend only on the model, the task and the episodes, so they are
kept (the untrained model's under ``runs/judge/``, random's under ``runs/random/``, as every demonstration's)
and reused across seeds and variants. Results go to
``benchmarks/results/<stem>.json`` (one entry per seed and variant; a re-run's old entry moves to
``earlier_runs``) and ``<stem>.png``.

``--rejudge FILE [FILE ...]`` judges results files again under this rule from the figures they hold (no
training, no play; see :func:`benchmarks.demos.judge.rejudge_crafter`), keeping each seed's first verdict.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import JUDGE_DIR, RESULTS, ROOT, kept_evaluation, load_preset, machine, update_records
from benchmarks.demos.judge import (
    CRAFTER_JUDGED,
    EVAL_SEED,
    Z_REQUIRED,
    crafter_verdict,
    exit_if_stopped,
    figures,
    random_baseline,
    record_seed,
    rejudge_crafter,
)
from verlog.envs.crafter_shaping import CRAFTERS_OWN
from verlog.pipes import closed_pipe_ok
from verlog.quiet import quiet_console
from verlog.runkit.folder import CONFIG_FILE
from verlog.tomlconfig import toml_value

#: The demonstration must train within this on 2 idle cores (reported, not enforced).
BUDGET_MIN = 30.0
#: Written into the run folder before training, so ``--run`` judges it as it was first judged.
STATE_FILE = "learn-crafter.json"
#: What each ablation variant changes in the preset (``verlog`` is the preset itself).
VARIANTS: dict[str, list[str]] = {
    "verlog": [],
    "no-bootstrap": ["ppo.window_bootstrap=false"],
    "no-warmup": ["ppo.critic_warmup_batches=0", "ppo.critic_warmup_iters=0"],
    # critic-free: groups of 8 envs sharing a seed play whole episodes (up to the 2,000-step cap) before updating
    "grpo": ["algo.advantage=grpo", "algo.group_size=8", "algo.max_episode_turns=2000"],
    "gigpo": ["algo.advantage=gigpo", "algo.group_size=8", "algo.max_episode_turns=2000"],
    # the first ablation's row for the free preset's entropy bonus (its cells ran without it)
    "entropy": ["ppo.entropy_coef=0.01"],
}
#: The variants the ablation compares (``verlog``'s row is the preset's own seeds, learn_crafter.json).
ABLATION = ("verlog", "no-bootstrap", "no-warmup", "grpo", "gigpo")
CURVE_KEYS = (
    "update", "global_step", "charts/episodic_return", "charts/episodic_length", "env/progression",
    "charts/episodes", "charts/episodes_running", "charts/episodes_truncated", "env/invalid_action_rate",
    "env/prompt_cuts", "sys/rss_mb", "sys/peak_rss_mb", "time/total", "losses/entropy", "charts/entropy_coef",
)  # fmt: skip


def stopped_early(updates: int, turns: int, run: Any) -> bool:
    """Whether a run stopped (a signal, a time limit) before its budget: ``run.total_updates`` updates, or, when
    set, ``run.total_turns`` turns (the ablation's budget, which ends a run long before its updates' bound)."""
    return updates < run.total_updates and not (run.total_turns and turns >= run.total_turns)


def judged_kwargs(config: Any) -> dict[str, Any]:
    """The env kwargs the judged episodes are played with: the panel's over the training env's, so a training-only
    setting (an invalid-answer penalty) does not count in the judged return; and every training shaping the run
    set, at Crafter's own value whatever the panel says, so the judged return is always Crafter's."""
    kwargs = {**config.env.kwargs, **config.panel.env_kwargs}
    return {**kwargs, **{key: own for key, own in CRAFTERS_OWN.items() if key in kwargs}}


def eval_command(agent: str, config: Any, run_config: Path, out: Path, args: argparse.Namespace) -> list[str]:
    """``verlog eval`` of ``agent`` on the held-out episodes, sampled at the training temperature."""
    return [
        sys.executable, "-m", "verlog", "eval", agent, "--suite", config.env.id, "--episodes", str(args.episodes),
        "--seed", str(args.eval_seed), "--num-envs", str(args.eval_envs), "--config", str(run_config),
        "--env-kwargs", toml_value(judged_kwargs(config)), "--sample", "--out", str(out), "--quiet",
    ]  # fmt: skip


def _played(agent: str, config: Any, run_config: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Plays ``agent`` into ``out`` in a child process (its own model, none left in this one); its figures."""
    from verlog.sampling.vllm import child_env

    subprocess.run(eval_command(agent, config, run_config, out, args), check=True, env=child_env())
    result = figures(out)
    if result["episodes"] != args.episodes:  # never kept: a judge on fewer episodes than declared
        raise RuntimeError(f"{out} holds {result['episodes']} episodes, not the {args.episodes} asked for")
    return result


def play(agent: str, config: Any, run_config: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``agent``'s evaluation kept in ``out`` (:func:`benchmarks.common.kept_evaluation`): played once."""
    return kept_evaluation(
        out, {"agent": agent}, lambda p: _played(agent, config, run_config, p, args), figures
    )[0]


def baseline_key(agent: str, config: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What the untrained model's judge plays. It names every shaping option at Crafter's own value, whichever
    ones the training config set: the judged game is the same, so attempts that differ only in shaping share it."""
    key = {
        "agent": agent, "env_id": config.env.id, "env_kwargs": {**judged_kwargs(config), **CRAFTERS_OWN},
        "prompt": config.to_dict()["prompt"], "memory": config.env.memory, "temperature": config.sampling.temperature,
        "episodes": args.episodes, "seed": args.eval_seed, "num_envs": args.eval_envs,
    }  # fmt: skip
    if config.sampling.constrain != "off":  # a constrained model is judged against itself constrained
        key["constrain"] = config.sampling.constrain
    return key


def baseline(agent: str, config: Any, run_config: Path, args: argparse.Namespace) -> tuple[dict, Path]:
    """The untrained model's evaluation, kept under ``runs/judge/<digest of its key>`` (:func:`baseline_key`) and
    reused (random's is the judge's, under ``runs/random/``)."""
    key = baseline_key(agent, config, args)
    digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    folder = JUDGE_DIR / f"untrained-{digest}"
    result, _ = kept_evaluation(
        folder, key, lambda partial: _played(agent, config, run_config, partial, args), figures
    )
    return result, folder


def smooth(values: Sequence[float | None], k: int) -> list[float]:
    """The mean of the last ``k`` defined values at each point (NaN until there is one)."""
    out, window = [], []
    for v in values:
        if v is not None and math.isfinite(v):
            window = (window + [v])[-k:]
        out.append(sum(window) / len(window) if window else math.nan)
    return out


def plot(results: dict[str, Any], path: Path) -> None:
    """Left: training return per update (episodes that ended in the last 10 updates) for every seed. Middle and
    right: the judged return and Crafter score of random, the untrained and the trained model per seed, ± 1 SE
    (the score's SE is its bootstrap over episodes)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 4.4))
    left, middle, right = fig.add_subplot(1, 3, 1), fig.add_subplot(1, 3, 2), fig.add_subplot(1, 3, 3)
    labels = []
    for entry in results["seeds"]:
        name = f"{entry['variant']} s{entry['seed']}"
        curve = entry["curve"]
        left.plot(
            [r["global_step"] for r in curve],
            smooth([r.get("charts/episodic_return") for r in curve], 10),
            label=name,
        )
        labels.append(name)
    left.set(xlabel="turns played", ylabel="training return (episodes ended, last 10 updates)")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    width = 0.27
    for axis, key, ylabel in (
        (middle, "return", "return on held-out episodes (± 1 SE)"),
        (right, "crafter_score", "Crafter score on held-out episodes (± 1 SE)"),
    ):
        for i, (agent, color) in enumerate(
            (("random", "grey"), ("untrained", "tab:red"), ("trained", "tab:green"))
        ):
            blocks = [entry[agent] for entry in results["seeds"]]
            xs = [j + (i - 1) * width for j in range(len(labels))]
            axis.bar(
                xs, [b.get(key, math.nan) for b in blocks], width,
                yerr=[b.get(f"{key}_se", math.nan) for b in blocks], color=color, label=agent,
            )  # fmt: skip
        axis.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
        axis.set(ylabel=ylabel)
        axis.grid(True, axis="y", alpha=0.3)
        axis.legend(fontsize=8)
    model = results["seeds"][0]["config"]["model"]
    name = "tiny model" if model.get("build_tiny") else model.get("build") or Path(model["path"]).name
    fig.suptitle(f"PPO, {name}, Crafter ({results['episodes']} held-out episodes per bar)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_outcome(console: Any, judged: dict[str, dict[str, Any]], result: dict[str, Any]) -> None:
    for name, f in judged.items():
        nan = math.nan  # an evaluation played before its episodes listed their achievements has no score
        console.print(
            f"{name:>9}: return {f['return']:.2f} ± {f['return_se']:.2f}, Crafter score "
            f"{f.get('crafter_score', nan):.2f} ± {f.get('crafter_score_se', nan):.2f}, achievements "
            f"{f.get('achievements', nan):.2f} ± {f.get('achievements_se', nan):.2f}, "
            f"progression {100 * f['progression']:.1f} ± {100 * f['progression_se']:.1f} %, "
            f"length {f['length']:.0f} ± {f['length_se']:.0f}, {f['episodes']} episodes"
        )
    for key, g in result["gains"].items():
        console.print(f"{key.replace('_', ' ')}: {g['gain']:+.2f} ± {g['se']:.2f} = {g['z']:.1f} SE")
    mark = "[green]PASS[/green]" if result["passed"] else "[red]FAIL[/red]"
    console.print(f"{' and '.join(result['judged'])} over both must each be >= {Z_REQUIRED:g} SE: {mark}")


def _parser() -> argparse.ArgumentParser:
    """The script's arguments (its docstring is the help)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "learn_crafter.toml", help="preset")
    parser.add_argument(
        "--seed", type=int, default=None, help="training seed (default: the preset's run.seed)"
    )
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="verlog", help="ablation variant")
    parser.add_argument("--run", type=Path, default=None, help="judge an existing run folder instead")
    parser.add_argument("--episodes", type=int, default=64, help="held-out episodes per agent (default 64)")
    parser.add_argument("--eval-envs", type=int, default=32, help="envs played at once in evaluation")
    parser.add_argument("--eval-seed", type=int, default=EVAL_SEED, help="base seed of the held-out episodes")
    parser.add_argument(
        "--rejudge",
        type=Path,
        nargs="+",
        default=None,
        metavar="FILE",
        help="judge results files again under the Crafter rule from the figures they hold; no training",
    )
    parser.add_argument(
        "--budget-min",
        type=float,
        default=BUDGET_MIN,
        help=f"training minutes the preset may take on 2 idle cores (default {BUDGET_MIN:.0f})",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results .json and .png")
    parser.add_argument("--stem", default=None, help="results file name (default: learn_crafter, or "
                        "learn_crafter_ablation for a variant)")  # fmt: skip
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    return parser


def _train_or_read(
    args: argparse.Namespace, parser: argparse.ArgumentParser, console: Any
) -> tuple[Any, Path, float | None]:
    """Train the variant from the preset (its settings kept in the run folder, so ``--run`` judges it as it was
    first judged), or read an existing run; returns (config, run folder, training seconds or None)."""
    from verlog.config import load_config

    train_s: float | None = None
    if args.run is None:
        overrides = [*args.overrides, *VARIANTS[args.variant]]  # a variant is its settings: they come last
        if args.seed is not None:
            overrides.append(f"run.seed={args.seed}")
        config = load_preset(parser, args.config, overrides)
        config.run.name = f"{config.run.name}-{args.variant}-s{config.run.seed}"
        from verlog.ppo.trainer import Trainer

        trainer = Trainer(config)  # builds the tiny model the first time
        run_dir = trainer.run_dir
        state = {"variant": args.variant, "overrides": overrides, "episodes": args.episodes,
                 "eval_seed": args.eval_seed, "eval_envs": args.eval_envs, "budget_min": args.budget_min,
                 "stem": args.stem}  # fmt: skip
        (run_dir / STATE_FILE).write_text(json.dumps(state) + "\n")
        console.print(f"training {args.variant} from seed {config.run.seed} into {run_dir}")
        clock = time.perf_counter()
        trainer.train()
        exit_if_stopped(trainer, console, f"python -m benchmarks.demos.learn_crafter --run {run_dir}")
        train_s = time.perf_counter() - clock
    else:
        run_dir = args.run
        config = load_config(run_dir / CONFIG_FILE)
        state = json.loads((run_dir / STATE_FILE).read_text())
        args.variant, args.episodes = state["variant"], state["episodes"]
        args.eval_seed, args.eval_envs = state["eval_seed"], state["eval_envs"]
        args.budget_min = state.get("budget_min", args.budget_min)
        args.stem = args.stem or state.get("stem")
    return config, run_dir, train_s


def replay_random(
    task: Mapping[str, Any], entry: Mapping[str, Any], episodes: int, eval_seed: int
) -> dict[str, Any]:
    """Random on an entry's judged episodes of ``task`` again (kept under ``runs/random/``), so its score can be
    bootstrapped over episodes: random seeds itself per episode, so the same episodes give the same figures."""
    env = entry.get("config", {}).get("env", {})
    return random_baseline(
        task["env_id"], task["env_kwargs"], env.get("memory", "none"), env.get("memory_kwargs", {}), episodes,
        eval_seed, 16,
    )[0]  # fmt: skip


def _rejudge_files(paths: Sequence[Path], console: Any) -> int:
    """``--rejudge``: each file judged again under the Crafter rule and rewritten (an ablation file's table
    too); 0 when every seed of every file passes."""
    failed = False
    for path in paths:
        before = json.loads(path.read_text())
        results = rejudge_crafter(before, functools.partial(replay_random, before["task"]))
        if "table" in results:  # the ablation's per-variant table follows its seeds' verdicts
            from benchmarks.demos.ablation_crafter import table, variants_in, with_preset

            entries = with_preset({(s["variant"], s["seed"]): s for s in results["seeds"]}, path.parent)
            results["table"] = table(entries, variants_in(entries))
        path.write_text(json.dumps(results, indent=2) + "\n")
        for entry in results["seeds"]:
            was = "pass" if entry["verdict_before_crafter_rule"]["passed"] else "FAIL"
            console.print(f"{path.name} {entry['variant']} seed {entry['seed']} (was {was}):")
            print_outcome(console, {k: entry[k] for k in ("random", "untrained", "trained")}, entry)
        console.print(f"rewrote {path}: passed {results['seeds_passed']}, failed {results['seeds_failed']}")
        failed = failed or bool(results["seeds_failed"]) or not results["seeds"]
    return 1 if failed else 0


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    quiet_console()

    from rich.console import Console

    console = Console(soft_wrap=True)
    if args.rejudge:
        return _rejudge_files(args.rejudge, console)
    started, load_start = time.perf_counter(), os.getloadavg()[0]
    config, run_dir, train_s = _train_or_read(args, parser, console)
    records = update_records(run_dir)
    if not records:
        console.print(f"[red]{run_dir} has no update in metrics.jsonl[/red]")
        return 1

    run_config = run_dir / CONFIG_FILE
    untrained, _ = baseline(str(config.model.path), config, run_config, args)
    random = random_baseline(
        config.env.id, judged_kwargs(config), config.env.memory, dict(config.env.memory_kwargs), args.episodes,
        args.eval_seed, args.eval_envs,
    )[0]  # fmt: skip
    trained = play(str(run_dir), config, run_config, run_dir / "eval-trained", args)
    judged = {"random": random, "untrained": untrained, "trained": trained}
    result = crafter_verdict(trained, untrained, random)
    print_outcome(console, judged, result)
    wall = time.perf_counter() - started if args.run is None else None
    if train_s is not None:
        over = (
            f" [yellow](over the {args.budget_min:.0f}-minute budget)[/yellow]"
            if train_s > 60 * args.budget_min
            else ""
        )
        console.print(
            f"training {train_s / 60:.1f} min{over}, wall {wall / 60:.1f} min, run folder {run_dir}"
        )

    turns = int(records[-1].get("global_step", 0))
    early = stopped_early(len(records), turns, config.run)
    if early:  # stopped by a signal or a time limit: judged, and said so
        console.print(f"[yellow]the run stopped at update {len(records)} of {config.run.total_updates}: "
                      "this is the judgement of that checkpoint, marked stopped_early in the results[/yellow]")  # fmt: skip
    record = {
        "variant": args.variant,
        "seed": config.run.seed,
        "passed": result["passed"],
        **judged,
        **result,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": [load_start, os.getloadavg()[0]],  # at the start and the end: were the cores idle?
        "run_dir": str(run_dir),
        "train_s": train_s,
        "wall_s": wall,
        "updates": len(records),
        "planned_updates": config.run.total_updates,
        "planned_turns": config.run.total_turns,
        "stopped_early": early,
        "turns": turns,
        "updates_s": sum(r.get("time/total") or 0.0 for r in records),
        "episodes_trained": int(sum(r.get("charts/episodes") or 0 for r in records)),
        "config": config.to_dict(),
        "curve": [{k: r[k] for k in CURVE_KEYS if k in r} for r in records],
    }
    stem = args.stem or ("learn_crafter" if args.variant == "verlog" else "learn_crafter_ablation")
    header = {
        "benchmark": stem,
        "task": {"env_id": config.env.id, "env_kwargs": judged_kwargs(config)},
        "train_env_kwargs": dict(config.env.kwargs),
        "budget_min": args.budget_min,
        "episodes": args.episodes,
        "eval_seed": args.eval_seed,
        "z_required": Z_REQUIRED,
        "judged": list(CRAFTER_JUDGED),
    }
    results = record_seed(args.out, stem, record, header, key=("variant", "seed"))
    plot(results, args.out / f"{stem}.png")
    console.print(f"wrote {args.out / (stem + '.json')} and .png")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
