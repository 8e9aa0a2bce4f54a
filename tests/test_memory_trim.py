"""The resident memory a run logs is what it holds, not what glibc's heap kept after the tensors were freed; its
high-water mark is logged beside it."""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys

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


_SLIDING = """
import ctypes, ctypes.util, sys
import psutil
from verlog.runkit.memory import map_large_blocks
if sys.argv[1] != "0":
    assert map_large_blocks(int(sys.argv[1]))
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
mb = lambda: psutil.Process().memory_info().rss / 2**20
first = libc.malloc(8 << 20)  # a block the size of a batch's activations, mapped, then freed
libc.free(first)
start, blocks = mb(), []
for _ in range(200):  # 200 MB in 1 MiB blocks
    blocks.append(libc.malloc(1 << 20))
    ctypes.memset(blocks[-1], 1, 1 << 20)
held = mb() - start
for block in blocks[::2]:  # every other one: holes between blocks still in use
    libc.free(block)
print(held, mb() - start)
"""


@pytest.mark.parametrize("threshold_kib", [0, 512])
def test_a_fixed_map_threshold_hands_freed_blocks_back_at_once(threshold_kib: int) -> None:
    """glibc's default raises its map threshold when a mapped block is freed, so the 1 MiB blocks after an
    8 MiB one come from the heap, and freeing every other one leaves holes that stay resident (until a trim);
    with ``run.heap_map_kib`` the threshold stays put, each block has a mapping of its own and freeing it hands
    it back. A fresh process each, since the setting lasts for the process."""
    if trim_heap() is False:
        pytest.skip("no glibc malloc here (not Linux/glibc): nothing to set")
    out = subprocess.run([sys.executable, "-c", _SLIDING, str(threshold_kib)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    held, after_free = (float(x) for x in out.stdout.split())
    assert held > 150
    if threshold_kib:
        assert after_free < held - 80  # half of it handed back
    else:
        assert after_free > held - 20
