"""A run's resident memory, measured after the C heap hands its freed pages back.

PyTorch on the CPU allocates tensors of ever-changing shapes (every batch has other prompt lengths) through the C
library's ``malloc``. glibc keeps the pages it freed inside its heap for reuse, and with tensors this varied the
heap fragments: a SmolLM2 run's resident memory grew ~80 MB an update, ~27 with the trim. ``malloc_trim(0)`` after
each update returns every free page of the heap to the system, so the memory logged per update is what the run
holds. (Most of the rest was oneDNN's kernel cache, one per batch shape: ``ppo.pad_to_multiple``.) Elsewhere (macOS, musl)
there is nothing to trim and the figure is the plain resident size.

That figure is taken between updates, when the update's activations and gradients are gone; the most the process
ever held (the kernel's high-water mark, :func:`peak_resident_mb`) is logged beside it, since that is what a
machine must have.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import resource
import sys
from collections.abc import Callable

import psutil  # accelerate's dependency

__all__ = ["map_large_blocks", "memory_metrics", "peak_resident_mb", "resident_mb", "trim_heap"]

#: glibc's ``mallopt`` parameter for the size from which ``malloc`` gives a block a mapping of its own (malloc.h).
_M_MMAP_THRESHOLD = -3


@functools.cache
def _glibc(function: str) -> Callable[..., int] | None:
    """One of glibc's ``malloc`` controls (``malloc_trim``, ``mallopt``), or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), function) if name else None
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the system; False where there is no glibc to ask."""
    trim = _glibc("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


def map_large_blocks(threshold_kib: int) -> bool:
    """Give every allocation of ``threshold_kib`` KiB or more a mapping of its own, handed back when it is freed.

    glibc starts at 128 KiB but raises its threshold each time such a block is freed (up to 32 MiB), so a run's
    activation-sized tensors soon come from the heap, where a block freed between two in use stays resident
    until the next trim. A SmolLM2 run's high-water mark climbed ~1.7 GB over its first 20 updates while the
    figure taken after the trim rose 0.5. A fixed threshold stops the sliding, at a price: every such block is
    mapped afresh, its pages zeroed (at 1 MiB, 8 SmolLM2 updates peaked at 3.2 GB against 4.0, at ~25 % fewer
    turns/s; gradient checkpointing saved more for less). 0 leaves glibc's default; False where there is no glibc.
    """
    mallopt = _glibc("mallopt")
    if threshold_kib <= 0 or mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold_kib) * 1024))


def resident_mb() -> float:
    """This process's resident memory in MiB, after :func:`trim_heap`."""
    trim_heap()
    return psutil.Process().memory_info().rss / 2**20


def peak_resident_mb() -> float:
    """The most resident memory this process has held since it started, in MiB (``getrusage``'s high-water mark)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def memory_metrics() -> dict[str, float]:
    """What an update logs: the resident memory between updates (trimmed) and the high-water mark, inside one."""
    return {"sys/rss_mb": resident_mb(), "sys/peak_rss_mb": peak_resident_mb()}
