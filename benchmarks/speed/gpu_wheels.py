"""Build ``.gpu-wheels/``: verlog's light dependencies that the lent GPU machine lacks, as wheels it can install
with no package registry (it reaches none).

That machine has torch 2.11 (CUDA 13), transformers 5.17, accelerate 1.15, peft, numpy, numba, rich, pillow,
imageio, cloudpickle and pytest on Python 3.12; verlog's games need :data:`MISSING` besides. Each is taken at
the version installed here (what the suite runs with), as a CPython 3.12 manylinux x86-64 wheel, or built
into a wheel from its source release where the registry has no wheel (crafter). The folder must stay under the
device tool's 64 MiB carry limit; it is about 13 MB, most of it pygame-ce (minigrid imports it).

Here::

    python -m benchmarks.speed.gpu_wheels            # writes .gpu-wheels/ (ignored by git) and lists it

There (carry ``.gpu-wheels``)::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-wheels/*.whl \\
        && export PYTHONPATH=/tmp/site:$PWD/src
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import ROOT

FOLDER = ROOT / ".gpu-wheels"
LIMIT = 64 * 2**20  # the device tool's carry limit, the working tree included
#: verlog's dependencies (and theirs) that the GPU machine's image does not hold.
MISSING = (
    "gymnasium",
    "farama-notifications",
    "minigrid",
    "pygame-ce",
    "crafter",
    "opensimplex",
    "ruamel.yaml",
)
#: The GPU machine's interpreter and platform, as pip names them.
TARGET = [
    "--python-version", "3.12", "--implementation", "cp",
    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_27_x86_64",
    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
    "--platform", "manylinux1_x86_64",
]  # fmt: skip


def pins(names: Sequence[str]) -> list[str]:
    """``name==version`` of each, at the version installed here."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in names]


def fetch(requirement: str, folder: Path) -> None:
    """A binary wheel for the target, or else a wheel built here from the source release (pure Python)."""
    pip = [sys.executable, "-m", "pip", "-q"]
    binary = [*pip, "download", "--no-deps", "--only-binary=:all:", *TARGET, "-d", str(folder), requirement]
    if subprocess.run(binary, capture_output=True, text=True).returncode == 0:
        return
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(folder), requirement], check=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=FOLDER, help="folder for the wheels (default .gpu-wheels)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.whl"):  # one version of each: two would stop the install
        old.unlink()
    for requirement in pins(MISSING):
        fetch(requirement, args.out)
    wheels = sorted(args.out.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:8.2f} MiB  {wheel.name}")
    print(f"{total / 2**20:8.2f} MiB  in {args.out} (limit {LIMIT / 2**20:.0f} MiB with the working tree)")
    if total > LIMIT:
        print("too large to carry", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
