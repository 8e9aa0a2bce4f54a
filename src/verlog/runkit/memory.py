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

__all__ = ["memory_metrics", "peak_resident_mb", "resident_mb", "trim_heap"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the system; False where there is no glibc to ask."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


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
