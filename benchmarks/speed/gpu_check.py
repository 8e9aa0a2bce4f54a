"""The GPU check (``nox -s gpu_check``): the learner on one GPU in at most 8 minutes, every figure in one json.

Legs, each the learner's own :class:`~verlog.ppo.trainer.Trainer` running ``train_update`` (collect with the
transformers sampler, score, returns, PPO update) a few times:

* ``tests``: the tests that skip on a CPU for want of a GPU (marked ``gpu``), run with pytest;
* ``tiny``: the tiny preset (``envs/tiny.toml``), bf16 where the device computes it natively;
* real architectures built from their configs in code, random weights, nothing downloaded (Qwen2.5-0.5B's and
  Qwen2.5-3B's shapes, the tiny preset's tokenizer), each with and without LoRA, with the critic (PPO + GAE)
  and critic-free (GRPO); answers run to ``prompt.max_response_tokens`` (a random model over a 151,936-token
  vocabulary almost never draws EOS: ``capped_share`` says how often it did not);
* ``fsdp2``: the 0.5B case with the critic under ``accelerate launch --config_file
  agents/accelerate/fsdp2_gpu.yaml`` on the one GPU, the code path of a multi-GPU launch.

Each leg reports turns/s, generated tokens/s (of the sampling time), the time split per update (sampling, env,
prompt building, scoring, update, the rest), peak GPU memory, and the update's model FLOP utilisation
(:mod:`gpu_flops`). A case that would not fit the GPU's memory, or the time left, is skipped and says why. The
json (device, versions, figures) goes to ``--out``/gpu.json after every leg, so a run cut short keeps what it
measured; one table is printed at the end.

``--cpu-smoke`` runs every leg on the CPU with the tiny model and a two-layer Qwen2 of hidden size 64, in well
under a minute (the test suite does, so the script cannot rot between GPU loans). FSDP2 there: accelerate turns
FSDP on only for GPU launches, so the worker, launched the same way, sets accelerate's state to a GPU-style
launch over its one gloo process by hand; everything after that is FSDP2's real code on CPU tensors.

On a machine with torch, transformers, accelerate and peft but none of verlog's light dependencies (the GPU
machine: no registry there), build the carried wheels here first, then install them there::

    python -m benchmarks.speed.gpu_wheels                       # here: .gpu-wheels/ (ignored), about 13 MB
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-wheels/*.whl \\
        && export PYTHONPATH=/tmp/site:$PWD/src           # there: nothing is fetched
    python3 benchmarks/speed/gpu_check.py --out "$OUT"          # there; then copy gpu.json to benchmarks/results/

Run: ``nox -s gpu_check`` (writes benchmarks/results/gpu.json) or ``python -m benchmarks.speed.gpu_check [--cpu-smoke]
[--out DIR] [--budget-s S]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from benchmarks.common import RESULTS, ROOT
from benchmarks.speed.gpu_flops import counting, linear_params, peak_tflops, update_flops
from benchmarks.speed.update import QWEN25_05B, base_overrides, build_real
from verlog.config import Config, load_config
from verlog.evaluation.output import machine
from verlog.models.sources import resolve_model_path
from verlog.pipes import closed_pipe_ok
from verlog.quiet import quiet_console
from verlog.runkit.validate import validate

TINY_PRESET = ROOT / "envs" / "tiny.toml"
TINY_MODEL = ROOT / "runs" / "models" / "tiny-babyai"  # the preset's own path, from the repo root: a cache
FSDP2_CONFIG = ROOT / "agents" / "accelerate" / "fsdp2_gpu.yaml"
GPU_BUDGET_S = 450.0  # the 8 minutes, less room for the json, the table and a slow leg's overrun
GIB = 2**30

#: Qwen2.5-3B's shape (its config.json).
QWEN25_3B = {
    **QWEN25_05B,
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
}
#: A Qwen2 of the same kind, small enough for the CPU smoke run (tied embeddings, grouped KV heads, like 2.5).
QWEN2_TINY = {
    **QWEN25_05B,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 4096,
}
SHAPES = {"qwen2.5-0.5b": QWEN25_05B, "qwen2.5-3b": QWEN25_3B, "qwen2-tiny": QWEN2_TINY}

#: The update's variants: overrides on top of the plan's.
VARIANTS: dict[str, list[str]] = {
    "full+critic": [],
    "full, critic-free": ["algo.advantage=grpo"],
    "lora+critic": ["model.lora_r=16", "model.lora_alpha=32", "model.critic_lora=true"],
    "lora, critic-free": ["model.lora_r=16", "model.lora_alpha=32", "algo.advantage=grpo"],
}


@dataclass
class Plan:
    """What one mode runs: sizes, updates per leg, shapes and the time budget."""

    mode: str  # "gpu" or "cpu-smoke"
    shapes: list[str]
    fsdp2_shape: str
    updates: int
    warmup: int
    budget_s: float
    sizes: list[str] = field(default_factory=list)  # overrides of every leg: batch, answer length, threads
    memory_fraction: float = 0.8  # skip a case whose estimated need is over this share of the GPU's memory


GPU_PLAN = Plan(
    mode="gpu",
    shapes=["qwen2.5-0.5b", "qwen2.5-3b"],
    fsdp2_shape="qwen2.5-0.5b",
    updates=2,
    warmup=1,
    budget_s=GPU_BUDGET_S,
    sizes=[
        "env.num_envs=16",
        "ppo.turns_per_update=4",
        "algo.max_episode_turns=4",  # critic-free batches are whole episodes: as many turns as PPO's
        "prompt.max_response_tokens=64",
        "ppo.num_minibatches=2",
        "ppo.micro_batch_tokens=4096",  # 3B's activations: about 10 GiB a micro-batch with the critic's
        "run.torch_threads=0",
    ],
)
CPU_PLAN = Plan(
    mode="cpu-smoke",
    shapes=["qwen2-tiny"],
    fsdp2_shape="qwen2-tiny",
    updates=1,
    warmup=0,
    budget_s=600.0,
    sizes=[
        "env.num_envs=4",
        "ppo.turns_per_update=2",
        "algo.max_episode_turns=2",
        "prompt.max_response_tokens=8",
        "ppo.num_minibatches=2",
        "ppo.micro_batch_tokens=8192",
        "run.torch_threads=1",
    ],
)


def leg_overrides(scratch: Path) -> list[str]:
    """Every leg's settings: a throwaway run, bf16 where native, the transformers sampler, no KL reference."""
    return [
        *base_overrides(scratch),
        "run.samples_every=0",
        "model.mixed_precision=auto",
        "sampling.backend=transformers",
        "ppo.kl_coef=0",  # no third model: the reference's forward is the actor's, counted in scoring
    ]


def arch_config(scratch: Path, plan: Plan, folder: Path, variant: str) -> Config:
    """The config of a real-architecture leg: the tiny preset's env and prompt, that model, that variant."""
    overrides = [
        *leg_overrides(scratch),
        *plan.sizes,
        "model.build_tiny=false",
        f"model.path={folder}",
        *VARIANTS[variant],
    ]
    config = load_config(TINY_PRESET, overrides)
    validate(config)
    return config


def tiny_config(scratch: Path, plan: Plan) -> Config:
    """The tiny preset as it ships (its batch and answer length), with every leg's settings."""
    threads = next(s for s in plan.sizes if s.startswith("run.torch_threads="))
    config = load_config(TINY_PRESET, [*leg_overrides(scratch), threads, f"model.path={TINY_MODEL}"])
    validate(config)
    return config


# ------------------------------------------------------------------------------------------ measuring


def _device(gpu: bool) -> dict[str, Any]:
    """What the legs run on: the GPU's name, memory and peak bf16 rate, or the CPU."""
    if not gpu:
        return {"type": "cpu", "name": None, "memory_gib": None, "peak_bf16_tflops": None}
    props = torch.cuda.get_device_properties(0)
    return {
        "type": "cuda",
        "name": props.name,
        "memory_gib": props.total_memory / GIB,
        "peak_bf16_tflops": peak_tflops(props.name),
        "bf16": torch.cuda.is_bf16_supported(),
    }


def measure(config: Config, updates: int, warmup: int, gpu: bool) -> dict[str, Any]:
    """Build the learner from ``config``, run ``warmup + updates`` updates and report the last ``updates``."""
    from verlog.ppo.trainer import Trainer

    if gpu:
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    trainer = Trainer(config)
    load_s = time.perf_counter() - started
    unwrap = trainer.accelerator.unwrap_model
    models = {"actor": trainer.learner.models.actor, "critic": trainer.learner.models.critic}
    params = {name: linear_params(unwrap(m)) for name, m in models.items() if m is not None}
    sizes = {
        name: sum(p.numel() for p in unwrap(m).parameters()) for name, m in models.items() if m is not None
    }
    keys = ("generate", "env", "prompt", "score", "update", "total")
    sums = dict.fromkeys(keys, 0.0)
    turns = generated = flops = update_tokens = 0.0
    capped = response = 0.0
    try:
        for i in range(warmup + updates):
            before = trainer.global_step
            with counting(models) as counters:
                metrics = trainer.train_update()
            if i < warmup:
                continue
            turns += trainer.global_step - before
            generated += metrics["charts/generated_tokens"]
            capped += metrics["charts/capped_share"]
            response += metrics["charts/response_tokens"]
            for key in keys:
                sums[key] += metrics[f"time/{key}"]
            flops += sum(update_flops(params[name], c) for name, c in counters.items())
            update_tokens += counters["actor"].tokens  # the critic trains on the same tokens
        precision = str(trainer.accelerator.mixed_precision)
        distributed = trainer.accelerator.distributed_type.value
    finally:
        trainer.logger.close()
        trainer.envs.close()
        if trainer.samples is not None:
            trainer.samples.close()
        shutil.rmtree(trainer.run_dir, ignore_errors=True)
        trainer.accelerator.free_memory()
    peak = torch.cuda.max_memory_allocated() / GIB if gpu else None
    del trainer, models
    _release()
    split = {
        "sampling_s": sums["generate"] / updates,
        "env_s": sums["env"] / updates,
        "prompt_s": sums["prompt"] / updates,
        "scoring_s": sums["score"] / updates,
        "update_s": sums["update"] / updates,
        "total_s": sums["total"] / updates,
    }
    split["other_s"] = split["total_s"] - sum(v for k, v in split.items() if k != "total_s")
    device = _device(gpu)
    tflops = flops / sums["update"] / 1e12 if sums["update"] > 0 else None
    peak_rate = device["peak_bf16_tflops"] if precision == "bf16" else None
    return {
        "distributed": distributed,
        "mixed_precision": precision,
        "actor_params": sizes["actor"],
        "critic_params": sizes.get("critic", 0),
        "actor_linear_params": asdict(params["actor"]),
        "critic_linear_params": asdict(params["critic"]) if "critic" in params else None,
        "load_s": load_s,
        "timed_updates": updates,
        "turns_per_update": turns / updates,
        "turns_per_s": turns / sums["total"],
        "generated_tokens_per_update": generated / updates,
        "generated_tokens_per_s": generated / sums["generate"] if sums["generate"] > 0 else None,
        "mean_response_tokens": response / updates,
        "capped_share": capped / updates,
        "time_per_update": split,
        "update_tokens_per_update": update_tokens / updates,
        "update_flops_per_update": flops / updates,
        "update_tflops_per_s": tflops,
        "mfu": tflops / peak_rate if tflops is not None and peak_rate else None,
        "peak_gpu_memory_gib": peak,
    }


def _release() -> None:
    """Free what a finished leg held: the next one loads its own models."""
    from accelerate.state import AcceleratorState, GradientState

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    AcceleratorState._reset_state()
    GradientState._reset_state()


def memory_need_gib(shape: dict[str, Any], variant: str) -> float:
    """Rough GPU memory of a case: float32 weights of each model, plus for a fully trained one its gradients,
    AdamW's two moments and the foreach step's temporaries (LoRA's adapters are small), plus 12 GiB of
    activations, logits and autocast's bf16 weight copies."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with torch.device("meta"):
        size = sum(p.numel() for p in Qwen2ForCausalLM(Qwen2Config(**shape)).parameters())
    lora = variant.startswith("lora")
    per_model = size * (4 if lora else 20)
    models = 1 if "critic-free" in variant else 2
    return (per_model * models) / GIB + 12.0


# ---------------------------------------------------------------------------------------------- legs


def build_leg(shape: dict[str, Any], folder: Path, gpu: bool) -> dict[str, Any]:
    """A random model of ``shape`` with the tiny preset's tokenizer, saved to ``folder`` (bf16 from a GPU)."""
    dtype = torch.bfloat16 if gpu else torch.float32
    build_real(
        str(TINY_MODEL),
        folder,
        shape["num_hidden_layers"],
        shape,
        device="cuda" if gpu else "cpu",
        dtype=dtype,
    )
    _release()
    return {"checkpoint_gib": sum(f.stat().st_size for f in folder.iterdir()) / GIB, "dtype": str(dtype)}


def tests_leg(out: Path) -> dict[str, Any]:
    """Run the tests marked ``gpu`` (those that skip without one) and count what passed."""
    files = sorted(str(p) for p in (ROOT / "tests").glob("test_*.py") if "mark.gpu" in p.read_text())
    report = out / "gpu-tests.xml"
    started = time.perf_counter()
    pytest = ["-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", f"--junitxml={report}"]
    proc = subprocess.run(
        [sys.executable, *pytest, *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if report.exists():
        suite = ET.parse(report).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        if suite is not None:
            counts = {k: int(suite.get(k, 0)) for k in counts}
        report.unlink()
    result: dict[str, Any] = {
        "files": [Path(f).name for f in files],
        "tests_passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
        "tests_failed": counts["failures"] + counts["errors"],
        "tests_skipped": counts["skipped"],
        "returncode": proc.returncode,
        "seconds": time.perf_counter() - started,
    }
    if proc.returncode not in (0, 5):
        result["output_tail"] = (proc.stdout + proc.stderr)[-3000:]
    return result


def fsdp2_leg(plan: Plan, folder: Path, scratch: Path, timeout: float) -> dict[str, Any]:
    """The ``full+critic`` case under ``accelerate launch`` with the FSDP2 config, in its own process."""
    result_file = scratch / "fsdp2.json"
    with socket.socket() as s:  # a free port: other runs on this machine may hold accelerate's default
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(FSDP2_CONFIG),
        "--num_processes", "1", "--main_process_port", str(port), "--module", "benchmarks.speed.gpu_check",
        "--worker", "fsdp2", "--model-dir", str(folder), "--worker-json", str(result_file),
        *(["--cpu-smoke"] if plan.mode == "cpu-smoke" else []),
    ]  # fmt: skip
    # The repository root too: the worker imports benchmarks.* as the launch itself does (python -m, from ROOT).
    paths = [str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    # ACCELERATE_USE_CPU beside the launcher's MASTER_ADDR reads as a --cpu launch cut short (check_launch).
    env.pop("ACCELERATE_USE_CPU", None)
    try:
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"skipped": f"the FSDP2 worker ran past the {timeout:.0f} s left of the budget"}
    if proc.returncode != 0 or not result_file.exists():
        return {"failed": f"exit {proc.returncode}", "output_tail": (proc.stdout + proc.stderr)[-3000:]}
    return json.loads(result_file.read_text())


def fsdp2_worker(args: argparse.Namespace) -> int:
    """Inside ``accelerate launch``: measure the FSDP2 case and write its json."""
    quiet_console()
    plan = CPU_PLAN if args.cpu_smoke else GPU_PLAN
    gpu = torch.cuda.is_available()  # the smoke run on a GPU machine: real FSDP2 on the GPU, tiny models
    if not gpu:
        _fsdp_state_on_cpu()
    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-fsdp2-"))
    try:
        config = arch_config(scratch, plan, args.model_dir, "full+critic")
        result = measure(config, plan.updates, plan.warmup, gpu)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result["distributed"] != "FSDP":
        raise SystemExit(f"the FSDP2 worker ran as {result['distributed']}, not FSDP")
    args.worker_json.write_text(json.dumps(result))
    return 0


def _fsdp_state_on_cpu() -> None:
    """accelerate makes a CPU launch MULTI_CPU and never FSDP: make this one-process gloo launch GPU-style so
    ``Accelerator`` takes the FSDP2 plugin the launcher's variables describe (CPU smoke run only)."""
    import torch.distributed as dist
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    PartialState(cpu=True)
    PartialState._shared_state["distributed_type"] = DistributedType.MULTI_GPU


# ---------------------------------------------------------------------------------------------- report


def versions() -> dict[str, Any]:
    """Versions of what the figures depend on (the git commit when this is a checkout)."""
    import accelerate
    import transformers

    try:
        import peft

        peft_version = peft.__version__
    except ImportError:
        peft_version = None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "peft": peft_version,
        "verlog_commit": commit,
    }


def table(legs: list[dict[str, Any]]) -> Table:
    """One row per leg: speed, time split, memory and MFU (or why it was skipped)."""
    out = Table(title="GPU check: Trainer.train_update per leg (seconds per update)")
    columns = (
        "leg",
        "params",
        "turns/s",
        "gen tok/s",
        "sample",
        "score",
        "update",
        "other",
        "peak GiB",
        "MFU",
    )
    for column in columns:
        out.add_column(column, justify="left" if column == "leg" else "right")
    for leg in legs:
        name = leg["name"]
        if "skipped" in leg or "failed" in leg:
            out.add_row(name, *["-"] * 8, f"{'skipped' if 'skipped' in leg else 'FAILED'}")
            continue
        if name == "tests":
            counts = (f"{leg['tests_' + k]} {k}" for k in ("passed", "failed", "skipped"))
            out.add_row(name, *counts, *[""] * 6)
            continue
        if "time_per_update" not in leg:  # a model build
            out.add_row(name, f"{leg['checkpoint_gib']:.2f} GiB", *[""] * 5, f"{leg['wall_s']:.1f} s", "", "")
            continue
        split = leg["time_per_update"]
        out.add_row(
            name,
            f"{leg['actor_params'] / 1e6:,.1f}M",
            f"{leg['turns_per_s']:.2f}",
            f"{leg['generated_tokens_per_s']:,.0f}",
            f"{split['sampling_s']:.2f}",
            f"{split['scoring_s']:.2f}",
            f"{split['update_s']:.2f}",
            f"{split['other_s'] + split['env_s'] + split['prompt_s']:.2f}",
            "-" if leg["peak_gpu_memory_gib"] is None else f"{leg['peak_gpu_memory_gib']:.1f}",
            "-" if leg["mfu"] is None else f"{100 * leg['mfu']:.1f}%",
        )  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------- main


class Run:
    """The legs of one check, their json written after each, and the time budget."""

    def __init__(self, plan: Plan, out: Path, console: Console) -> None:
        self.plan, self.out, self.console = plan, out, console
        self.started = time.perf_counter()
        self.legs: list[dict[str, Any]] = []
        # shape -> the wall time of its last leg: the estimate of its next one
        self.last_wall: dict[str, float] = {}
        self.report: dict[str, Any] = {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "mode": plan.mode,
            "device": _device(plan.mode == "gpu"),
            "versions": versions(),
            "machine": machine(),
            "plan": asdict(plan),
            "legs": self.legs,
        }

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return self.plan.budget_s - self.elapsed()

    def leg(self, name: str, shape: str | None, run: Any, skip: str | None = None) -> None:
        """Run one leg (unless ``skip`` or the budget says no), record it and write the json."""
        expected = self.last_wall.get(shape or "", 0.0)
        if skip is None and self.left() < expected:
            skip = f"time budget: {self.left():.0f} s of {self.plan.budget_s:.0f} s left, the last {shape} leg took {expected:.0f} s"
        record: dict[str, Any] = {"name": name, "shape": shape}
        if skip is not None:
            record["skipped"] = skip
            self.console.print(f"{name}: skipped, {skip}")
        else:
            with self.console.status(f"{name} ..."):
                started = time.perf_counter()
                try:
                    record.update(run())
                except Exception as error:  # one broken leg must not hide the others' figures
                    record["failed"] = f"{type(error).__name__}: {error}"[:2000]
                    _release()
                record["wall_s"] = time.perf_counter() - started
            if shape:
                self.last_wall[shape] = record["wall_s"]
            state = "FAILED " + record["failed"] if "failed" in record else f"{record['wall_s']:.1f} s"
            self.console.print(f"{name}: {state}")
        self.legs.append(record)
        self.write()

    def write(self) -> None:
        self.report["wall_s"] = self.elapsed()
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu.json").write_text(json.dumps(self.report, indent=2) + "\n")


def check(plan: Plan, out: Path, console: Console) -> dict[str, Any]:
    """Every leg of ``plan``; returns the report (also in ``out``/gpu.json)."""
    run = Run(plan, out, console)
    gpu = plan.mode == "gpu"
    device = run.report["device"]
    console.print(f"device: {device['name'] or 'cpu'}; {run.report['versions']}")
    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        tiny = tiny_config(scratch, plan)
        resolve_model_path(tiny.model, tiny.env)  # built on first use: the real shapes take its tokenizer
        run.leg("tests", None, lambda: tests_leg(scratch))
        run.leg("tiny", "tiny", lambda: measure(tiny, plan.updates, plan.warmup, gpu))
        for shape_name in plan.shapes:
            shape = SHAPES[shape_name]
            folder = scratch / shape_name
            run.leg(
                f"{shape_name} build", None, lambda shape=shape, folder=folder: build_leg(shape, folder, gpu)
            )
            built = "failed" not in run.legs[-1]
            for variant in VARIANTS:
                skip = None if built else f"the {shape_name} model could not be built"
                if gpu and built:
                    need = memory_need_gib(shape, variant)
                    if need > plan.memory_fraction * device["memory_gib"]:
                        skip = (
                            f"memory: about {need:.0f} GiB of float32 weights, gradients and AdamW states "
                            f"(> {plan.memory_fraction:.0%} of {device['memory_gib']:.0f} GiB)"
                        )
                run.leg(
                    f"{shape_name} {variant}",
                    shape_name,
                    lambda folder=folder, variant=variant: measure(
                        arch_config(scratch, plan, folder, variant), plan.updates, plan.warmup, gpu
                    ),
                    skip,
                )
            if shape_name == plan.fsdp2_shape:
                run.leg(
                    f"{shape_name} full+critic FSDP2",
                    shape_name,
                    lambda folder=folder: fsdp2_leg(plan, folder, scratch, max(run.left(), 60.0)),
                    None if built else f"the {shape_name} model could not be built",
                )
            shutil.rmtree(folder, ignore_errors=True)  # a 3B checkpoint is 6 GB
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        run.write()
    console.print(table(run.legs))
    console.print(
        "seconds per update; other = env + prompt building + returns; gen tok/s = generated tokens per second "
        "of sampling; MFU = the update's matmul FLOPs (6N per token, 4N under LoRA) / update time / peak bf16"
    )
    console.print(f"wrote {out / 'gpu.json'} ({run.elapsed():.0f} s)")
    return run.report


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="every leg on the CPU with tiny models")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="folder for gpu.json (default benchmarks/results)"
    )
    parser.add_argument(
        "--budget-s", type=float, default=None, help=f"time budget (GPU default {GPU_BUDGET_S:.0f} s)"
    )
    parser.add_argument("--worker", choices=("fsdp2",), help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker-json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "fsdp2":
        return fsdp2_worker(args)
    if not args.cpu_smoke and not torch.cuda.is_available():
        parser.error("no CUDA GPU here (torch.cuda.is_available() is False): use --cpu-smoke")
    plan = CPU_PLAN if args.cpu_smoke else GPU_PLAN
    if args.budget_s is not None:
        plan.budget_s = args.budget_s
    if args.cpu_smoke:
        os.environ["ACCELERATE_USE_CPU"] = "true"
    quiet_console()  # the libraries' notices go to each run's console.log, as in agents/ppo.py
    console = Console() if sys.stdout.isatty() else Console(width=150)
    report = check(plan, args.out, console)
    broken = [leg["name"] for leg in report["legs"] if "failed" in leg or leg.get("tests_failed")]
    if broken:
        console.print(f"failed: {', '.join(broken)}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
