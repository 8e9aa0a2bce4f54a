"""Sectioned dataclass configurations read from TOML and overridden by ``section.key=value`` arguments.

Generic over the root dataclass (a dataclass whose fields are dataclasses, one per TOML table), so the
learner's :class:`verlog.config.Config` keeps only its fields and its own checks. Types are checked
against the type hints, an unknown key is a one-line error naming the closest valid ones, and the attribute
docstrings (the string right after each field) are the help text.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal, TypeVar

from verlog.hints import did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 ships no TOML reader
    import tomli as tomllib

__all__ = ["ConfigError", "describe", "load", "to_toml", "toml_value"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A bad configuration: an unknown key, a wrong type or inconsistent sizes."""


def load(root: type[T], path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> T:
    """Read a TOML file (or start from the defaults) and apply ``section.key=value`` overrides."""
    data = _read_with_base(Path(path)) if path is not None else {}
    for item in overrides:
        _apply_override(root, data, item)
    return _build(root, root, data, prefix="")


def _read_with_base(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's tables, laid over those of the file its top-level ``base = "other.toml"`` names (a path relative
    to this file, itself free to name a base): a variant of a preset says only what it changes. Tables merge key
    by key, so a variant cannot remove a key its base sets; any other value replaces the base's."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from None
    if "base" not in data:
        return data
    base = data.pop("base")
    if not isinstance(base, str):
        raise ConfigError(
            f'{path}: base must be a file name in quotes, e.g. base = "other.toml"; got {base!r}'
        )
    base_path = path.parent / base
    if not base_path.is_file():
        raise ConfigError(
            f"{path}: base {base!r} is not a file ({base_path}); a base is relative to the file naming it"
        )
    trail = (*seen, path.resolve())
    if base_path.resolve() in trail:
        chain = " -> ".join(p.name for p in (*trail, base_path.resolve()))
        raise ConfigError(f"{path}: the bases form a loop ({chain}); one of them must not name a base")
    return _merged(_read_with_base(base_path, trail), data)


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``: tables merge recursively, other values replace."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def describe(root: type, width: int = 80) -> str:
    """Every key with its default and docstring, within ``width`` columns: ``key = value  # doc`` where that
    fits, else the docstring below its key, wrapped."""
    lines = []
    for section in dataclasses.fields(root):
        cls = _hints(root)[section.name]
        lines.extend(textwrap.wrap(f"[{section.name}]  {_docs(root).get(section.name, '')}", width))
        default = cls()
        for f in dataclasses.fields(cls):
            doc = " ".join(_docs(cls).get(f.name, "").split())
            key = f"  {section.name}.{f.name} = {toml_value(getattr(default, f.name))}"
            if len(key) + 4 + len(doc) <= width:
                lines.append(f"{key}  # {doc}")
            else:
                lines.append(key)
                indent = "      # "
                wrapped = textwrap.wrap(
                    doc, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
                )
                lines.extend(wrapped)
    return "\n".join(lines)


def to_toml(config: Any) -> str:
    """A sectioned configuration as TOML text that :func:`load` reads back."""
    lines: list[str] = []
    for section, values in dataclasses.asdict(config).items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {toml_value(value)}" for key, value in values.items())
        lines.append("")
    return "\n".join(lines)


def _apply_override(root: type, data: dict[str, Any], item: str) -> None:
    key, sep, text = item.partition("=")
    parts = key.strip().split(".")
    if not sep or len(parts) < 2 or not all(parts):
        raise ConfigError(f"override {item!r} is not of the form section.key=value, e.g. ppo.actor_lr=1e-4")
    target = data
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ConfigError(f"override {item!r}: {part!r} is not a table")
    target[parts[-1]] = _parse_value(text.strip())


def _parse_value(text: str) -> Any:
    """A TOML value if the text is one (1e-6, true, [1, 2], {a = 1}, "x"), else the text itself."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _build(root: type, cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.')} must be a table, got {data!r}")
    hints = _hints(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        value = data[unknown[0]]
        name = prefix + unknown[0]
        if not prefix and isinstance(value, dict) and value:  # an unknown section: name one of its keys
            name += "." + next(iter(value))
        raise ConfigError(_unknown_key(root, name))
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _build(root, hint, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _check(f"{prefix}{name}", hint, value)
    return cls(**kwargs)


def _check(key: str, hint: Any, value: Any) -> Any:
    """Return ``value`` converted to ``hint`` (int -> float, a bare word -> str), or raise naming the key."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    ok = False
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    elif origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{key} must be one of {list(args)}, got {value!r}")
    elif origin is list:
        ok = isinstance(value, list) and all(isinstance(v, args[0]) for v in value)
    elif origin is dict:
        ok = isinstance(value, dict)
    if not ok:
        # a generic names its element type (list[int], not list)
        name = str(hint) if origin is not None else getattr(hint, "__name__", str(hint))
        raise ConfigError(f"{key} must be of type {name}, got {value!r} ({type(value).__name__})")
    return value


def _unknown_key(root: type, name: str) -> str:
    """One line: the unknown key and the closest valid ones (the same key in another section first)."""
    keys = [
        f"{section.name}.{f.name}"
        for section in dataclasses.fields(root)
        for f in dataclasses.fields(_hints(root)[section.name])
    ]
    same = [key for key in keys if key.rpartition(".")[2] == name.rpartition(".")[2]]
    close = did_you_mean(name, keys, first=same)
    where = f"({close})" if close else "(python agents/ppo.py --help-config lists every key)"
    return f"unknown key {name!r} {where}"


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass (the string literal right after each field)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, nxt in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = nxt.value.value.strip()
    return docs


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write {value!r} ({type(value).__name__}) to TOML")


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else toml_value(key)
