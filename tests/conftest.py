"""Suite-wide settings. Under pytest-xdist (README's ``-n 2 --dist loadfile``: each test file on one worker) the
cores are split between the workers, so two workers' torch threads do not fight over the same cores; the
variable also reaches the processes a test launches.

Suite-wide isolation: an in-process vLLM engine (``external_launcher``) initialises torch.distributed and sets
the launch variables (RANK, MASTER_PORT, ...) in ``os.environ``. Left behind, they make a later module's engine
fail ("not initialized in the world group map") and a later child process bind the same port (EADDRINUSE).
After each test module, both are undone."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))

# TextWorld games are generated on first use (seconds each) and cached: the suite plays a pool of one per kind.
os.environ.setdefault("VERLOG_TEXTWORLD_GAMES", "1")

LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True, scope="module")
def _no_distributed_state_between_modules() -> Iterator[None]:
    before = {key: os.environ.get(key) for key in LAUNCH_VARS}
    yield
    if "vllm" in sys.modules:
        try:
            from vllm.distributed.parallel_state import (
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception:  # an engine that never started leaves nothing to undo
            pass
    if "torch" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
