"""PPO update speed: tokens per second through the learner's update, with the tiny model and, on a GPU, with
a real small architecture.

Each case builds the ordinary :class:`~verlog.ppo.trainer.Trainer` and runs ``Trainer.train_update`` (collect,
score, returns, PPO update) a few times; the update's own clock (``time/update``: every epoch's forward and
backward passes of actor and critic, and the optimiser steps) is divided into the tokens it processed:

* tokens/s: epochs x (prompt + response tokens) of the batch per second of ``time/update``;
* response tokens/s: epochs x response tokens per second (the tokens the policy loss is taken on).

Cases:

* ``tiny``: the preset's tiny Qwen2 (``envs/tiny.toml``) on this machine's CPU, 1 torch thread;
* ``qwen2.5-0.5b``: a randomly initialised model of Qwen2.5-0.5B's shape (24 layers, hidden 896, its
  151,936-token vocabulary; no download) with the preset's tokenizer, bf16 autocast, on CUDA. Without a GPU
  it is skipped and the reason is written down.

Writes ``benchmarks/results/update.json``. Run: ``nox -s bench_update`` or ``python -m benchmarks.speed.update``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from benchmarks.common import RESULTS, ROOT
from verlog.config import Config, ConfigError, load_config
from verlog.evaluation.output import machine
from verlog.pipes import closed_pipe_ok
from verlog.quiet import quiet_console
from verlog.runkit.validate import validate

#: Qwen2.5-0.5B's shape (its config.json), built randomly: a real architecture without a download.
QWEN25_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
#: The real-architecture case's batch: Verlog's 32 envs x 8 turns, 64-token responses.
REAL_OVERRIDES = [
    "env.num_envs=32",
    "ppo.turns_per_update=8",
    "prompt.max_response_tokens=64",
    "ppo.micro_batch_tokens=32768",
    "ppo.num_minibatches=2",
]


def base_overrides(out: Path) -> list[str]:
    """A throwaway run: no console, no checkpoints, no critic warm-up (it would be timed as collection)."""
    return [
        f"run.output_dir={out}",
        "run.name=bench-update",
        "run.console=false",
        "run.checkpoint_every=0",
        "run.export_actor=false",
        "run.total_updates=1000000",
        "ppo.critic_warmup_batches=0",
        "ppo.critic_warmup_iters=0",
    ]


def measure(config: Config, updates: int, warmup: int) -> dict[str, Any]:
    """Run ``warmup + updates`` training updates; time the update step of the last ``updates``."""
    from verlog.ppo.trainer import Trainer

    trainer = Trainer(config)
    T, epochs = config.ppo.turns_per_update, config.ppo.epochs
    seconds = tokens = response_tokens = 0.0
    score_s = collect_s = 0.0
    try:
        for i in range(warmup + updates):
            first_prompts = [len(p) for p in trainer.storage.prompts[0]]
            metrics = trainer.train_update()
            if i < warmup:
                continue
            # After the update, turns 1..T-1 keep their prompts; turn 0's were read before it.
            prompts = sum(first_prompts) + sum(len(p) for row in trainer.storage.prompts[1:T] for p in row)
            responses = float(trainer.storage.response_lens.sum())
            seconds += metrics["time/update"]
            score_s += metrics["time/score"]
            collect_s += metrics["time/generate"] + metrics["time/env"] + metrics["time/prompt"]
            tokens += epochs * (prompts + responses)
            response_tokens += epochs * responses
    finally:
        trainer.close()
        shutil.rmtree(trainer.run_dir, ignore_errors=True)
    turns = T * config.env.num_envs * updates
    params = sum(
        p.numel() for p in trainer.accelerator.unwrap_model(trainer.learner.models.actor).parameters()
    )
    return {
        "device": str(trainer.accelerator.device),
        "mixed_precision": str(trainer.accelerator.mixed_precision),
        "actor_parameters": params,
        "turns": turns,
        "epochs": epochs,
        "update_s": seconds,
        "tokens_per_s": tokens / seconds,
        "response_tokens_per_s": response_tokens / seconds,
        "mean_prompt_tokens": (tokens / epochs - response_tokens / epochs) / turns,
        "mean_response_tokens": response_tokens / epochs / turns,
        "update_s_per_batch": seconds / updates,
        # Whole training turns per second: collection, scoring and the update (what charts/turns_per_s shows).
        "turns_per_s": turns / (seconds + score_s + collect_s),
        "score_s_per_batch": score_s / updates,
        "collect_s_per_batch": collect_s / updates,
    }


def build_real(
    tokenizer_from: str,
    folder: Path,
    layers: int,
    shape: dict[str, Any] | None = None,
    *,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Path:
    """A random model of a real Qwen2 shape (Qwen2.5-0.5B's by default) with the tiny preset's tokenizer, saved
    for ``from_pretrained``. ``device`` and ``dtype``: where it is initialised and how it is saved (a 3B model
    initialises in seconds on a GPU, in minutes on a CPU; bf16 halves what is written and read back)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    shape = {**(shape or QWEN25_05B), "num_hidden_layers": layers}
    config = Qwen2Config(
        **shape, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _parser() -> argparse.ArgumentParser:
    """The script's arguments (its docstring is the help)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / "tiny.toml", help="preset")
    parser.add_argument("--updates", type=int, default=3, help="timed updates per case (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed updates first (default 1)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads for the tiny case (default 1)"
    )
    parser.add_argument(
        "--real", choices=("auto", "off", "on"), default="auto",
        help="the Qwen2.5-0.5B-shaped case: auto = on a CUDA GPU only, on = also on a CPU (slow)",
    )  # fmt: skip
    parser.add_argument(
        "--real-layers", type=int, default=24, help="layers of the real case (24 = the real one)"
    )
    parser.add_argument(
        "--name", default="tiny", help="name of the --config case (e.g. smollm2 with envs/smollm2.toml)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for update.json")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="overrides of both cases")
    return parser


def _show(console: Any, cases: dict[str, Any]) -> None:
    """Print one row per case (its device, size and throughput), and why a skipped case was skipped."""
    table = Table(title="PPO update throughput (Trainer.train_update, time/update)")
    for column in (
        "case",
        "device",
        "params",
        "turns/s",
        "tokens/s",
        "response tok/s",
        "update s",
        "score s",
        "collect s",
    ):
        table.add_column(column, justify="left" if column == "case" else "right")
    skipped = {name: r["skipped"] for name, r in cases.items() if "skipped" in r}
    for name, r in cases.items():
        if name in skipped:
            table.add_row(name, "-", "-", "-", "skipped", "-", "-", "-", "-")
            continue
        table.add_row(
            name,
            f"{r['device']} {r['mixed_precision']}",
            f"{r['actor_parameters'] / 1e6:.2f}M",
            f"{r['turns_per_s']:.2f}",
            f"{r['tokens_per_s']:,.0f}",
            f"{r['response_tokens_per_s']:,.0f}",
            f"{r['update_s_per_batch']:.2f}",
            f"{r['score_s_per_batch']:.2f}",
            f"{r['collect_s_per_batch']:.2f}",
        )
    console.print(table)
    for name, reason in skipped.items():
        console.print(f"{name}: skipped, {reason}")
    console.print(
        "tokens = epochs x (prompt + response) tokens of the batch; seconds per batch of T x N turns."
    )


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    quiet_console()  # the libraries' notices go to the run's console.log, as in agents/ppo.py
    console = Console() if sys.stdout.isatty() else Console(width=150)
    scratch = Path(tempfile.mkdtemp(prefix="bench-update-"))
    cases: dict[str, Any] = {}
    try:
        try:
            tiny = load_config(
                args.config, [*base_overrides(scratch), f"run.torch_threads={args.threads}", *args.overrides]
            )
            validate(tiny)
        except (ConfigError, OSError) as error:
            parser.error(f"config: {error}")
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")  # the --config case is a CPU figure
        with console.status(f"{args.name} ..."):
            cases[args.name] = {"model": tiny.model.path, **measure(tiny, args.updates, args.warmup)}
        os.environ.pop("ACCELERATE_USE_CPU", None)

        gpu = torch.cuda.is_available()
        if args.real == "off" or (args.real == "auto" and not gpu):
            reason = (
                "--real off"
                if args.real == "off"
                else "no CUDA GPU on this machine (torch.cuda.is_available() is False)"
            )
            cases["qwen2.5-0.5b"] = {"skipped": reason}
        else:
            folder = build_real(tiny.model.path, scratch / "qwen2.5-0.5b-shape", args.real_layers)
            if gpu:
                os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16"
            real = load_config(
                args.config,
                [
                    *base_overrides(scratch),
                    *REAL_OVERRIDES,
                    f"model.path={folder}",
                    "model.build_tiny=false",
                    *args.overrides,
                ],
            )
            with console.status("Qwen2.5-0.5B-shaped model ..."):
                result = measure(real, args.updates, args.warmup)
            cases["qwen2.5-0.5b"] = {
                "layers": args.real_layers,
                "shape": {**QWEN25_05B, "num_hidden_layers": args.real_layers},
                **result,
            }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    _show(console, cases)
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "config_file": str(args.config),
        "overrides": args.overrides,
        "timed_updates": args.updates,
        "warmup_updates": args.warmup,
        "cases": cases,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "update.json").write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"wrote {args.out / 'update.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
