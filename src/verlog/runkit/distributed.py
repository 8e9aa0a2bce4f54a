"""Process setup for every launch: one CPU process, N CPU processes (gloo), GPUs, DeepSpeed ZeRO.

``accelerate launch`` decides the topology (its flags, or a config under ``agents/accelerate/``); this module
turns it into accelerators. Without DeepSpeed one ``Accelerator`` prepares both trained models (DDP or a
single process). Under DeepSpeed every trained model needs its own engine, so, as accelerate's "multiple
models with DeepSpeed" guide prescribes, there is one ``DeepSpeedPlugin`` per model in a dict and one
``Accelerator`` per trained model; each model is loaded and prepared while its plugin is selected (so
``from_pretrained`` partitions it at load time under ZeRO-3). Under ZeRO-3 the frozen reference gets a third,
optimiser-less ZeRO-3 engine, unless LoRA makes it the actor with adapters off.

Under DeepSpeed with several processes every forward pass gathers weights from all of them, so all
processes must run the same number of forward passes: :meth:`Distributed.common_count` gives the count
each one pads to.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

T = TypeVar("T")

__all__ = [
    "SUMMED",
    "Distributed",
    "deepspeed_requested",
    "from_main_process",
    "init_processes",
    "mean_over_processes",
    "merge_process_metrics",
    "setup",
    "sum_over_processes",
]

#: Metrics that are totals over processes rather than means.
SUMMED = frozenset({"charts/episodes", "charts/generated_tokens", "charts/tokens_per_s", "env/prompt_cuts"})


def from_main_process(value: T) -> T:
    """The main process's ``value`` on every process (a collective call: each process passes its own, and
    what the main process decided, a run folder or a stop, holds for all)."""
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box)
    return box[0]


def sum_over_processes(accelerator: Any, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over every process (a collective call), back on the CPU; one process: as it is."""
    if accelerator.num_processes == 1:
        return tensor
    return accelerator.reduce(tensor.to(accelerator.device), reduction="sum").cpu()


def mean_over_processes(
    accelerator: Any, metrics: dict[str, float], episode_counts: dict[str, int]
) -> dict[str, float]:
    """This process's metrics merged with every other process's (:func:`merge_process_metrics`); a collective
    call, so every process makes it. One process: the metrics as they are."""
    if accelerator.num_processes == 1:
        return metrics
    from accelerate.utils import gather_object

    return merge_process_metrics(gather_object([(metrics, episode_counts)]))


def merge_process_metrics(parts: Sequence[tuple[dict[str, float], dict[str, int]]]) -> dict[str, float]:
    """One metrics dict from each process's (metrics, episode counts).

    Counts and each process's own rates add up (:data:`SUMMED`). A per-episode mean (success, return, ...)
    is weighted by the episodes each process ended, so a process that ended one episode does not weigh as
    much as one that ended ten. Everything else (per-turn means, times, losses) is averaged over the
    processes that reported it.
    """
    values: dict[str, list[float]] = {}
    weights: dict[str, list[int]] = {}
    for metrics, counts in parts:
        for key, value in metrics.items():
            values.setdefault(key, []).append(value)
            weights.setdefault(key, []).append(counts.get(key, 1))
    merged = {}
    for key, vs in values.items():
        if key in SUMMED:
            merged[key] = sum(vs)
        else:
            ws = weights[key]
            merged[key] = sum(v * w for v, w in zip(vs, ws, strict=True)) / sum(ws)
    return merged


def deepspeed_requested() -> bool:
    """True when ``accelerate launch`` was told to use DeepSpeed (flag or config file)."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def _cpu_forced() -> bool:
    return os.environ.get("ACCELERATE_USE_CPU", "false").lower() in ("1", "true", "yes")


def _cpu_run() -> bool:
    return _cpu_forced() or not torch.cuda.is_available()


def native_bf16(cpu: bool) -> bool:
    """Whether bf16 matmuls run in hardware here: a CUDA GPU with bf16, or a CPU with AVX512-BF16 or AMX.

    Without them PyTorch's CPU bf16 matmul falls back to a scalar kernel, tens of times slower than
    float32 (measured on an AVX2-only EPYC: a 2048x576x1536 linear's backward 2.5 s against 0.1 s).
    """
    if not cpu:
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def resolve_mixed_precision(value: str, cpu: bool) -> tuple[str, str]:
    """``model.mixed_precision`` as accelerate takes it, and why: ``auto`` is bf16 only where it pays."""
    if value != "auto":
        return value, f"model.mixed_precision = {value or 'accelerate launch --mixed_precision'}"
    where = "CPU" if cpu else "GPU"
    if native_bf16(cpu):
        return "bf16", f"auto: this {where} computes bf16 natively"
    hardware = "no AVX512-BF16 or AMX" if cpu else "no bf16 support"
    return "no", f"auto: float32, this {where} has {hardware} (bf16 would be slower)"


def init_processes(timeout: float | None = None) -> Any:
    """accelerate's process state (``PartialState``), created with the backend this launch needs.

    ``timeout``: seconds a collective waits for the other processes (``run.collective_timeout``) before it
    fails, so a lost machine stops the run instead of hanging it (torch's default is 30 minutes). A launch
    that started this process alone though it asked for several stops here (:func:`~verlog.runkit.launch.check_launch`).

    The first call fixes the backend for the whole process, so it runs before any ``Accelerator``:
    without DeepSpeed, gloo on CPUs (MULTI_CPU) and the GPU default otherwise; with DeepSpeed on CPUs,
    gloo explicitly (DeepSpeed's CPU default, oneCCL, is usually absent, and accelerate would then count one
    process while DeepSpeed sees them all, so the batch sizes it gives DeepSpeed disagree).
    """
    from accelerate import PartialState

    from verlog.runkit.launch import LaunchError, check_launch

    check_launch()
    kwargs = {} if timeout is None else {"timeout": datetime.timedelta(seconds=timeout)}
    warnings.filterwarnings(
        "ignore", message=r".*all_gather_into_tensor.* is deprecated", category=FutureWarning
    )
    warnings.filterwarnings(
        "ignore", message=r".*reduce_scatter_tensor.* is deprecated", category=FutureWarning
    )
    if not deepspeed_requested():
        return PartialState(cpu=_cpu_run(), **kwargs)
    if _cpu_forced():
        raise LaunchError(
            "DeepSpeed ignores ACCELERATE_USE_CPU / --cpu: to run DeepSpeed on CPUs, launch without them "
            "(on a machine with GPUs, hide them with CUDA_VISIBLE_DEVICES=)"
        )
    _import_before_zero_init()
    if _cpu_run():
        warn_stale_extension_lock()
        return PartialState(backend="gloo", **kwargs)
    return PartialState(**kwargs)


#: A lock this old is not a compile in progress (DeepSpeed's CPU op compiles in ~30-90 s).
STALE_LOCK_S = 600


def warn_stale_extension_lock(now: float | None = None) -> Path | None:
    """Warn when a killed compile left DeepSpeed's CPU communication op locked, and return the lock.

    DeepSpeed on CPUs compiles a small shared-memory op on its first launch (torch's JIT extensions). torch
    marks a compile in progress with a plain ``lock`` file; a compile that is killed leaves it behind, and
    every later launch then waits for it forever, silently. Warning names the file to delete.
    """
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    now = time.time() if now is None else now
    for lock in sorted(root.glob("*/deepspeed_shm_comm/lock")):
        if now - lock.stat().st_mtime > STALE_LOCK_S:
            warnings.warn(
                f"{lock} is {int(now - lock.stat().st_mtime) // 60} minutes old: a compile of DeepSpeed's CPU "
                "op was killed and left it, and this launch will wait for it forever; stop the launch, "
                f"delete it (rm {lock}) and launch again",
                stacklevel=2,
            )
            return lock
    return None


@dataclass
class Distributed:
    """The accelerators of one process and what the learner needs to know about the launch."""

    actor: Any  # Accelerator; also the main one: trackers, barriers, run folder, RNG states in checkpoints
    critic: Any  # the same object as ``actor`` unless DeepSpeed
    reference: Any | None  # an optimiser-less ZeRO-3 engine's accelerator, or None
    deepspeed: bool
    zero_stage: int
    precision_reason: str = ""  # why this compute precision (model.mixed_precision = "auto" decides)

    @property
    def num_processes(self) -> int:
        return self.actor.num_processes

    def describe(self) -> str:
        """The setup in plain words for the console, e.g. ``1 process on cpu, fp32`` or ``2 processes on
        cuda, DeepSpeed ZeRO-3, bf16`` (why this precision: :attr:`precision_reason`)."""
        count = self.num_processes
        engine = self.actor.distributed_type.value  # NO, MULTI_CPU, MULTI_GPU, FSDP, ...
        if self.deepspeed:
            engine = f"DeepSpeed ZeRO-{self.zero_stage}"
        elif engine == "NO":
            engine = ""
        elif engine.startswith("MULTI_"):
            engine = "DDP"
        where = f"{count} process{'es' if count > 1 else ''} on {self.actor.device.type}"
        return ", ".join(part for part in (where, engine, self.precision) if part)

    @property
    def precision(self) -> str:
        """The compute precision: fp32, bf16 or fp16 (accelerate's mixed_precision, whose fp32 is "no")."""
        return {"no": "fp32"}.get(self.actor.mixed_precision, self.actor.mixed_precision)

    @property
    def zero3(self) -> bool:
        return self.deepspeed and self.zero_stage == 3

    @property
    def lockstep(self) -> bool:
        """Whether forward and backward passes are collective (DeepSpeed with several processes)."""
        return self.deepspeed and self.num_processes > 1

    @contextlib.contextmanager
    def loading(self, role: str) -> Iterator[None]:
        """Select ``role``'s DeepSpeed plugin while its model is loaded and prepared (no-op otherwise)."""
        if not self.deepspeed:
            yield
            return
        from accelerate.state import AcceleratorState

        state = AcceleratorState()
        select = getattr(state, "select_deepspeed_plugin", None) or state.enable_deepspeed_plugin  # renamed
        if role in state.deepspeed_plugins:
            select(role)
        try:
            yield
        finally:
            select("actor")

    def common_count(self, count: int) -> int:
        """The largest ``count`` over processes when passes are collective, else ``count`` itself."""
        if not self.lockstep:
            return count
        value = torch.tensor([count], device=self.actor.device)
        return int(self.actor.reduce(value, reduction="max").item())

    def gathered(self, params: Sequence[torch.nn.Parameter]) -> contextlib.AbstractContextManager[Any]:
        """Full ``params`` on every process for the duration (ZeRO-3 gathers them; a no-op otherwise).

        Every process must enter it with the same parameters; changes made inside are discarded.
        """
        if not self.zero3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(params), modifier_rank=None)


def setup(
    *,
    max_grad_norm: float,
    project_dir: str,
    log_with: Sequence[str] | None = None,
    reference_engine: bool = True,
    mixed_precision: str = "",
) -> Distributed:
    """Build this process's accelerators from the launch environment.

    ``max_grad_norm``: the learner's gradient clipping, which DeepSpeed applies itself. ``reference_engine``:
    whether a separate frozen reference model will be loaded (under ZeRO-3 it gets its own optimiser-less
    engine).
    """
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    init_processes()
    common: dict[str, Any] = {"log_with": list(log_with) if log_with else None, "project_dir": project_dir}
    mixed_precision, precision_reason = resolve_mixed_precision(mixed_precision, _cpu_run())
    if mixed_precision == "bf16" and _cpu_run() and not native_bf16(cpu=True):
        warnings.warn(
            "mixed_precision bf16 on a CPU without AVX512-BF16 or AMX: PyTorch's bf16 matmuls fall back to a "
            'scalar kernel, tens of times slower than float32; set model.mixed_precision = "auto" or "no"',
            stacklevel=2,
        )
    if mixed_precision:  # else accelerate reads `accelerate launch --mixed_precision`
        common["mixed_precision"] = mixed_precision
    if not deepspeed_requested():
        # Buffers (rotary tables) are constants: broadcasting them before every DDP forward pass would make
        # each forward collective, and processes run different numbers of them.
        ddp = DistributedDataParallelKwargs(broadcast_buffers=False)
        accelerator = Accelerator(cpu=_cpu_run(), kwargs_handlers=[ddp], **common)
        return Distributed(accelerator, accelerator, None, False, 0, precision_reason)

    handlers = [InitProcessGroupKwargs(backend="gloo")] if _cpu_run() else []
    plugins = {"actor": _plugin(max_grad_norm), "critic": _plugin(max_grad_norm)}
    stage = int(plugins["actor"].zero_stage)
    if reference_engine and stage == 3:
        plugins["reference"] = _plugin(None)
    actor = Accelerator(deepspeed_plugin=plugins, kwargs_handlers=handlers, **common)
    # Later accelerators find the plugins in the shared state; each prepares (and steps) one engine.
    critic = Accelerator(kwargs_handlers=handlers)
    reference = Accelerator(kwargs_handlers=handlers) if "reference" in plugins else None
    return Distributed(actor, critic, reference, True, stage, precision_reason)


def _plugin(max_grad_norm: float | None) -> Any:
    """A DeepSpeed plugin from the launch config (stage, offload, config file) with the learner's settings.

    The learner owns clipping (``max_grad_norm``; None for the frozen reference) and accumulation (it marks the last micro-batch of
    each minibatch itself, so DeepSpeed's own count stays 1); there is no dataloader, so the per-device
    micro-batch size DeepSpeed insists on is set to 1.
    """
    from accelerate.utils import DeepSpeedPlugin

    plugin = DeepSpeedPlugin(gradient_accumulation_steps=1, zero3_save_16bit_model=True)
    config = plugin.deepspeed_config
    config["gradient_accumulation_steps"] = 1
    if config.get("train_micro_batch_size_per_gpu", "auto") == "auto":
        config["train_micro_batch_size_per_gpu"] = 1
    config.pop("train_batch_size", None)  # accelerate derives it from the two above and the world size
    if max_grad_norm is not None:
        config["gradient_clipping"] = max_grad_norm
    return plugin


def _import_before_zero_init() -> None:
    """``deepspeed.zero.Init`` patches module construction; importing ``torch._dynamo`` for the first time
    inside it fails with a signature-mismatch TypeError, so it is imported here, before any model loads."""
    import torch._dynamo  # noqa: F401
