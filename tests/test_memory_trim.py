"""The resident memory a run logs is what it holds, not what glibc's heap kept after the tensors were freed; its
high-water mark is logged beside it."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

from verlog.runkit.memory import peak_resident_mb, resident_mb, trim_heap


def test_freed_heap_pages_go_back_before_the_figure_is_taken() -> None:
    """200 MB in 100 kB blocks (under glibc's mmap threshold: on the heap, as PyTorch's CPU tensors of a batch
    are), each followed by a small block that stays: freeing the large ones leaves holes below the heap's top,
    which glibc keeps (resident) for reuse. The figure :func:`resident_mb` logs has them handed back."""
    if not trim_heap():
        pytest.skip("no glibc malloc_trim here (not Linux/glibc): nothing to trim")
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    start = resident_mb()
    large, small = [], []
    for _ in range(2_000):
        block = libc.malloc(100_000)
        ctypes.memset(block, 1, 100_000)  # touched, so resident
        large.append(block)
        small.append(libc.malloc(64))  # stays: the heap cannot shrink from its top past it
    assert resident_mb() - start > 150
    for block in large:
        libc.free(block)
    assert resident_mb() - start < 50
    assert peak_resident_mb() - start > 150  # what the machine had to have is still reported
    for block in small:
        libc.free(block)
