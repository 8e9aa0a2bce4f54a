"""Rollout collection speed with the learner's own code: turns/s, tokens/s, and where a turn's time goes.

The learner's :class:`~verlog.ppo.rollout.Rollout` collects ``ppo.turns_per_update`` turns from N envs, exactly
as in training (``envs/tiny.toml``: the tiny model, BabyAI GoTo, history memory). Its own clock splits a
turn into generation (``time/generate``), env stepping (``time/env``) and the rest (``time/prompt``); the two
learner pieces it calls are timed from outside, by subclassing them, to split that rest further:

* prompt building: :meth:`PromptBuilder.build_many` (chat template + tokenizer) for the next prompts;
* storage: :meth:`TurnStorage.insert`;
* bookkeeping: what remains (episode statistics, rewards, info unbatching).

The env + prompt share of a turn is (env + prompt building) / (all four); the target is <= 5%. The sweep over
N shows how it grows with the batch on a CPU, where generating for more envs costs less than N times more.
Writes ``benchmarks/results/rollout.json`` and ``rollout.png``.

``--backends transformers,vllm`` measures each sampler on the same envs, seeds and model, side by side, and
prints the vLLM / transformers ratio of turns/s and tokens/s (the vLLM engine holds the checkpoint's weights and
is built once; ``sampling.vllm_*`` keys set it up).

Run: ``nox -s bench_rollout`` or ``python -m benchmarks.speed.rollout [--num-envs 4,16,32] [--updates 3] [key=value ...]``;
SmolLM2 side by side (docs/vllm.md's figures): ``python -m benchmarks.speed.rollout --config envs/smollm2.toml --backends
transformers,vllm --threads 2 --num-envs 8 --updates 2 --out benchmarks/results/rollout-smollm2``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import verlog
from benchmarks.common import RESULTS, ROOT
from verlog.config import Config, ConfigError, load_config
from verlog.envs import prompt_examples
from verlog.evaluation.output import machine
from verlog.models.loading import load_models
from verlog.models.prompts import PromptBuilder
from verlog.models.sources import resolve_model_path
from verlog.pipes import closed_pipe_ok
from verlog.ppo.rollout import Rollout
from verlog.ppo.storage import TurnStorage
from verlog.quiet import attach_run_log, quiet_console
from verlog.runkit.validate import validate
from verlog.sampling import TransformersSampler

TARGET_SHARE = 0.05
PARTS = ("generate", "env", "prompt", "storage", "bookkeeping")


class TimedPromptBuilder(PromptBuilder):
    """The learner's prompt builder, with the time spent in :meth:`build_many` added up."""

    seconds = 0.0

    def build_many(self, items: Sequence[tuple[str, str, str | None]]) -> list[list[int]]:
        start = time.perf_counter()
        try:
            return super().build_many(items)
        finally:
            self.seconds += time.perf_counter() - start


class TimedStorage(TurnStorage):
    """The learner's storage, with the time spent in :meth:`insert` added up."""

    seconds = 0.0

    def insert(self, *args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        try:
            super().insert(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def make_sampler(backend: str, config: Config, models: Any) -> Any:
    """The learner's sampler of that backend, on the CPU, holding the checkpoint's weights."""
    if backend == "vllm":
        from verlog.sampling.vllm import VLLMSampler

        return VLLMSampler.from_config(config, models.tokenizer, None, "cpu")
    return TransformersSampler(
        models.actor,
        models.tokenizer,
        max_new_tokens=config.prompt.max_response_tokens,
        temperature=config.sampling.temperature,
        top_p=config.sampling.top_p,
        batch_size=config.sampling.batch_size,
    )


def measure(
    config: Config, num_envs: int, updates: int, warmup: int, models: Any, sampler: Any, backend: str
) -> dict[str, Any]:
    """Collect ``warmup + updates`` batches of T turns from ``num_envs`` envs; time the last ``updates``."""
    env = config.env
    torch.manual_seed(config.run.seed)
    prompts = TimedPromptBuilder(
        models.tokenizer,
        config.prompt.format,
        config.prompt.max_prompt_tokens,
        config.prompt.format_request,
        style=config.prompt.style,
        examples=prompt_examples(env.id, config.prompt.examples),
    )
    envs = verlog.make_vec(
        env.id,
        num_envs,
        vectorization_mode=env.vectorization_mode,
        memory=env.memory,
        memory_kwargs=env.memory_kwargs,
        seed=config.run.seed,
        **env.kwargs,
    )
    T = config.ppo.turns_per_update
    storage = TimedStorage(T, num_envs, config.prompt.max_response_tokens, models.tokenizer.pad_token_id)
    rollout = Rollout(envs, sampler, prompts, binary_reward=env.binary_reward)
    try:
        observations, infos = envs.reset()
        storage.reset_first(rollout.first_prompts(observations, infos))
        totals = dict.fromkeys(PARTS, 0.0)
        tokens = prompt_tokens = 0
        for i in range(warmup + updates):
            prompts.seconds = storage.seconds = 0.0
            metrics = rollout.collect(storage)
            if i >= warmup:
                totals["generate"] += metrics["time/generate"]
                totals["env"] += metrics["time/env"]
                totals["prompt"] += prompts.seconds
                totals["storage"] += storage.seconds
                totals["bookkeeping"] += metrics["time/prompt"] - prompts.seconds - storage.seconds
                tokens += int(metrics["charts/generated_tokens"])
                prompt_tokens += sum(len(p) for row in storage.prompts[:T] for p in row)
            storage.after_update()
    finally:
        envs.close()
    turns = T * num_envs * updates
    total = sum(totals.values())
    return {
        "backend": backend,
        "num_envs": num_envs,
        "turns": turns,
        "seconds": total,
        "turns_per_s": turns / total,
        "generated_tokens_per_s": tokens / total,
        "mean_response_tokens": tokens / turns,
        "mean_prompt_tokens": prompt_tokens / turns,
        "ms_per_turn": {part: 1e3 * totals[part] / turns for part in PARTS},
        "share": {part: totals[part] / total for part in PARTS},
        "env_prompt_share": (totals["env"] + totals["prompt"]) / total,
    }


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4))
    ax_ms, ax_share = fig.subplots(1, 2)
    labels = [str(r["num_envs"]) for r in rows]
    bottom = [0.0] * len(rows)
    colors = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:grey")
    for part, color in zip(PARTS, colors, strict=True):
        values = [r["ms_per_turn"][part] for r in rows]
        ax_ms.bar(labels, values, bottom=bottom, color=color, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax_ms.set(xlabel="envs (N)", ylabel="ms per turn", title="time per turn, by part")
    ax_ms.legend(fontsize=8)
    ax_share.plot(labels, [100 * r["env_prompt_share"] for r in rows], "o-", label="env + prompt building")
    ax_share.axhline(100 * TARGET_SHARE, color="grey", ls=":", label=f"target {TARGET_SHARE:.0%}")
    ax_share.set(xlabel="envs (N)", ylabel="% of a turn", title="env + prompt share", ylim=(0, None))
    ax_share.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _parser() -> argparse.ArgumentParser:
    """The script's arguments (its docstring is the help)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "tiny.toml", help="preset")
    parser.add_argument(
        "--num-envs", default="4,16,32", help="comma-separated N to measure (default 4,16,32)"
    )
    parser.add_argument("--updates", type=int, default=3, help="timed batches of T turns per N (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed batches first (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument(
        "--backends", default="transformers", help="samplers to compare: transformers, vllm or both (a,b)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for rollout.json and rollout.png")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    return parser


def _show(console: Any, rows: list[dict[str, Any]], sizes: list[int], title: str) -> list[dict[str, Any]]:
    """Print the table of rows (where a turn's time goes) and, where both samplers ran, vLLM's speed-up over
    transformers per N; returns those ratios."""
    table = Table(title=title)
    for column in ("sampler", "N", "turns/s", "tokens/s", "ms/turn", *PARTS, "env+prompt"):
        table.add_column(column, justify="right")
    for r in rows:
        ms = r["ms_per_turn"]
        share = r["env_prompt_share"]
        table.add_row(
            r["backend"],
            str(r["num_envs"]),
            f"{r['turns_per_s']:.1f}",
            f"{r['generated_tokens_per_s']:.0f}",
            f"{sum(ms.values()):.2f}",
            *[f"{ms[p]:.2f} ({100 * r['share'][p]:.0f}%)" for p in PARTS],
            f"{100 * share:.1f}%" if share <= TARGET_SHARE else f"[red]{100 * share:.1f}%[/red]",
        )
    console.print(table)
    console.print(
        f"ms per turn (share of the turn); prompts {rows[0]['mean_prompt_tokens']:.0f} tokens, responses "
        f"{rows[0]['mean_response_tokens']:.1f} tokens on average; target env + prompt <= {TARGET_SHARE:.0%}."
    )
    ratios = [
        {
            "num_envs": n,
            "turns_per_s": v["turns_per_s"] / t["turns_per_s"],
            "generated_tokens_per_s": v["generated_tokens_per_s"] / t["generated_tokens_per_s"],
        }
        for n in sizes
        for t in rows
        for v in rows
        if t["num_envs"] == v["num_envs"] == n and (t["backend"], v["backend"]) == ("transformers", "vllm")
    ]
    for r in ratios:
        console.print(
            f"N={r['num_envs']}: vLLM / transformers = {r['turns_per_s']:.2f}x turns/s, "
            f"{r['generated_tokens_per_s']:.2f}x tokens/s"
        )
    return ratios


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    quiet_console()  # the libraries' notices go to runs/logs/bench-rollout.log
    attach_run_log(Path("runs") / "logs", file_name="bench-rollout.log")
    try:
        config = load_config(args.config, args.overrides)
        validate(config)
        sizes = [int(n) for n in args.num_envs.split(",")]
        backends = args.backends.split(",")
        if not set(backends) <= {"transformers", "vllm"}:
            raise ValueError(f"--backends takes transformers and/or vllm, got {args.backends}")
    except (ConfigError, OSError, ValueError) as error:
        parser.error(str(error))
    torch.set_num_threads(args.threads)
    torch.manual_seed(config.run.seed)
    console = Console() if sys.stdout.isatty() else Console(width=150)
    config.model.path = resolve_model_path(config.model, config.env)  # built the way the trainer builds it
    models = load_models(config.model.path, dtype=config.model.dtype, with_reference=False)
    models.actor.eval()

    rows = []
    for backend in backends:
        with console.status(f"{backend}: starting ..."):
            sampler = make_sampler(backend, config, models)
        for n in sizes:
            with console.status(f"{backend}, N={n} ..."):
                rows.append(measure(config, n, args.updates, args.warmup, models, sampler, backend))
    title = f"Rollout collection, {args.config.name}: {config.env.id}, T={config.ppo.turns_per_update}"
    ratios = _show(console, rows, sizes, title)
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "config_file": str(args.config),
        "overrides": args.overrides,
        "settings": {
            "env": config.env.id,
            "memory": config.env.memory,
            "memory_kwargs": config.env.memory_kwargs,
            "turns_per_update": config.ppo.turns_per_update,
            "max_response_tokens": config.prompt.max_response_tokens,
            "prompt_format": config.prompt.format,
            "model": config.model.path,
            "dtype": config.model.dtype,
            "threads": args.threads,
            "vectorization_mode": config.env.vectorization_mode,
            "timed_batches": args.updates,
            "warmup_batches": args.warmup,
        },
        "target_env_prompt_share": TARGET_SHARE,
        "results": rows,
        "vllm_over_transformers": ratios,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rollout.json").write_text(json.dumps(report, indent=2) + "\n")
    first = [r for r in rows if r["backend"] == backends[0]]  # the plot splits one sampler's turn
    title = f"{config.env.id}, {Path(config.model.path).name}, {backends[0]}, {args.threads} thread(s)"
    plot(first, args.out / "rollout.png", title)
    console.print(f"wrote {args.out / 'rollout.json'} and {args.out / 'rollout.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
