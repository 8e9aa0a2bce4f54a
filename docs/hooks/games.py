"""The game pages' reference tables, made from the code when the site is built, so that none can drift.

A game page asks for a table with a marker on a line of its own::

    <!-- game: babyai card -->     its spaces, reward, episode end, BALROG's scoring, install, render modes
    <!-- game: babyai ids -->      every id of the family: what the id sets, its actions, its step cap
    <!-- game: babyai kwargs -->   the keyword arguments the env takes, their defaults and meaning

A family is one of ``verlog list``'s games (:data:`verlog.cli.GAMES`), one page each (``docs/games/<name>.md``);
its ids are the registry's. Two kinds of facts, from two sources:

- read from the source without importing the game (griffe, as the API page reads it): the keyword arguments
  of the env's constructor and their defaults, followed through ``**kwargs`` to the base classes (less what a
  class passes to its base itself), their descriptions from the classes' ``Args:``, and the class docstring's
  ``Observation:``, ``Reward:``, ``Episode end:`` and ``Progression:`` paragraphs. A family whose optional
  packages are missing (nle, minihack, textworld) gets these all the same;
- read from an env made for each id: the actions it offers and its step cap (``max_steps``, or the caps
  ``info["max_steps"]`` shows over resets with seeds 0-15 where the game sets one per episode). Without the
  game's packages those cells say what to install.

``tests/test_docs.py`` checks the tables against the registry and the classes themselves.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
MARKER = re.compile(r"^<!-- game: ([a-z]+) (card|ids|kwargs) -->[ \t]*$", re.MULTILINE)
#: The class docstring paragraphs a family's card shows, by their lead word.
PARAGRAPHS = ("Observation", "Reward", "Episode end", "Progression")
#: The base class whose keyword arguments every env takes.
BASE = "verlog.envs.base.TextEnv"
#: Seeds reset to read the step caps of a game that sets one per episode (BabyAI's Mixed draws a task kind).
CAP_SEEDS = range(16)
#: A list of actions longer than this goes in a collapsed block under the card, not in its cell.
INLINE_ACTIONS = 24


# ---------------------------------------------------------------------------------------------- facts
@dataclass(frozen=True)
class Argument:
    """One keyword argument of a family's env."""

    name: str
    default: str  # as the source writes it, names resolved: "'goto'", "8", "None"
    description: str
    common: bool  # one of TextEnv's, which every env takes
    set_by_ids: int  # how many of the family's ids set their own value


@dataclass(frozen=True)
class IdFacts:
    """One registered id: what it sets, and what an env made for it offers."""

    env_id: str
    description: str
    sets: dict[str, Any]
    actions: tuple[str, ...] | None  # None: the game is not installed
    free_text: bool  # any text runs as a command (TextWorld)
    caps: tuple[int, ...] | None
    missing: str = ""  # the line naming what to install, when the env could not be made


@dataclass
class Family:
    """One game page's facts."""

    name: str
    slug: str
    needs: str
    install: tuple[str, ...]
    entry_point: str
    ids: list[IdFacts]
    arguments: list[Argument]
    paragraphs: dict[str, str]
    render_modes: tuple[str, ...]
    default_action: str
    observation_chars: int
    action_chars: int
    problems: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=1)
def _package() -> Any:
    """verlog's source as griffe reads it (statically: no game is imported)."""
    import griffe

    return griffe.load("verlog", search_paths=[str(SRC)], allow_inspection=False)


def _class(path: str) -> Any:
    """A class by its dotted path (aliases, e.g. a package's re-export, followed)."""
    obj = _package()[path.removeprefix("verlog.")]
    return obj.final_target if obj.is_alias else obj


def _bases(cls: Any) -> list[Any]:
    """The class and its verlog base classes, nearest first (single inheritance, as the envs use)."""
    chain = [cls]
    while True:
        bases = [b for b in chain[-1].resolved_bases if b.path.startswith("verlog.")]
        if not bases:
            return chain
        chain.append(bases[0])


def _value(expr: Any, cls: Any) -> str:
    """A default or attribute as source text, a module-level name replaced by its value (``ROOM_SIZE`` -> 8)."""
    text = str(expr)
    if type(expr).__name__ == "ExprName":
        try:
            target = _package()[expr.canonical_path.removeprefix("verlog.")]
            return _value(target.value, cls)
        except (KeyError, AttributeError, ValueError):
            return text
    try:
        return repr(ast.literal_eval(text))  # 100_000 -> 100000, "x" -> 'x'
    except (ValueError, SyntaxError):
        return text


def _attribute(cls: Any, name: str) -> Any:
    """A class attribute's value as a Python value, from the class or its nearest base that sets it."""
    for klass in _bases(cls):
        if name in klass.members and klass.members[name].value is not None:
            return ast.literal_eval(_value(klass.members[name].value, klass))
    raise KeyError(f"{cls.path} has no {name}")


def _super_keywords(init: Any) -> set[str]:
    """The keyword arguments an ``__init__`` passes to ``super().__init__`` itself (not the user's to give)."""
    tree = ast.parse(textwrap.dedent(init.source))
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "__init__"
            and isinstance(node.func.value, ast.Call)
            and getattr(node.func.value.func, "id", "") == "super"
        ):
            names |= {k.arg for k in node.keywords if k.arg}
    return names


def _signature(cls: Any) -> list[tuple[str, str, Any]]:
    """``(name, default, declaring class)`` of every keyword argument the class takes: its ``__init__``'s,
    then, where it takes ``**kwargs``, its base's, less those it passes to the base itself."""
    out: list[tuple[str, str, Any]] = []
    seen: set[str] = set()
    for klass in _bases(cls):
        init = klass.members.get("__init__")
        if init is None:
            continue
        variadic = False
        for p in init.parameters:
            kind = str(p.kind.value) if p.kind is not None else ""
            if p.name == "self" or kind == "variadic positional":
                continue
            if kind == "variadic keyword":
                variadic = True
                continue
            if p.name not in seen:
                seen.add(p.name)
                out.append((p.name, _value(p.default, klass) if p.default is not None else "", klass))
        if not variadic:
            break
        seen |= _super_keywords(init)
    return out


_ARG = re.compile(r"^(?P<names>\*{0,2}\w+(?:, \*{0,2}\w+)*)(?: \([^)]*\))?: (?P<text>.*)$", re.DOTALL)


def _args_section(cls: Any) -> dict[str, str]:
    """The ``Args:`` descriptions of a class docstring, by argument name (``a, b: text`` gives both)."""
    lines = (cls.docstring.value if cls.docstring else "").splitlines()
    if "Args:" not in lines:
        return {}
    entries: list[str] = []
    for line in lines[lines.index("Args:") + 1 :]:
        if line.strip() and not line.startswith("    "):  # the section ends where its indentation does
            break
        if line.startswith("    ") and not line.startswith("     "):
            entries.append(line.strip())
        elif line.strip() and entries:
            entries[-1] += " " + line.strip()
    out: dict[str, str] = {}
    for entry in entries:
        if m := _ARG.match(entry):
            for name in m.group("names").split(", "):
                out[name.lstrip("*")] = m.group("text")
    return out


def _description(name: str, chain: Sequence[Any]) -> str:
    """An argument's description: the nearest class's that says more than "see <the base class>"."""
    found = [args[name] for args in map(_args_section, chain) if name in args]
    for text in found:
        if not text.lower().startswith("see "):
            return text
    return found[0] if found else ""


def _paragraphs(cls: Any) -> dict[str, str]:
    """The class docstring's ``Observation:``/``Reward:``/``Episode end:``/``Progression:`` entries: each from a
    line that starts with its lead word to a blank line or the next entry."""
    out: dict[str, str] = {}
    lead = ""
    for line in (cls.docstring.value if cls.docstring else "").splitlines():
        starts = [word for word in PARAGRAPHS if line.startswith(word + ": ")]
        if starts:
            lead = starts[0]
            out[lead] = line[len(lead) + 2 :].strip()
        elif lead and line.strip():
            out[lead] += " " + line.strip()
        else:
            lead = ""
    return out


def markdown(text: str) -> str:
    """A docstring's reStructuredText bits as Markdown: ``x`` -> `x`, :class:`~a.B` -> `B`."""
    text = re.sub(r":[a-z]+:`~?(?:[\w.]+\.)?(\w+)`", lambda m: f"`{m.group(1)}`", text)
    text = re.sub(r"``(.+?)``", lambda m: f"`{m.group(1)}`", text)
    return text.replace("|", "\\|")


def _measure(env_id: str) -> IdFacts:
    """Make an env for the id and read its actions and step cap; the install line when that fails."""
    import gymnasium as gym

    from verlog.extras import as_missing

    spec = gym.registry[env_id]
    facts = {"env_id": env_id, "description": getattr(spec, "description", ""), "sets": dict(spec.kwargs)}
    try:
        env = gym.make(env_id, disable_env_checker=True).unwrapped
    except ImportError as error:
        missing = as_missing(error)
        return IdFacts(**facts, actions=None, free_text=False, caps=None, missing=str(missing or error))
    try:
        if isinstance(getattr(env, "max_steps", None), int):
            caps: tuple[int, ...] = (env.max_steps,)
        else:  # the cap is the episode's (BabyAI: minigrid's, by the level drawn)
            caps = tuple(sorted({int(env.reset(seed=seed)[1]["max_steps"]) for seed in CAP_SEEDS}))
        return IdFacts(
            **facts,
            actions=tuple(env.offered_actions),
            free_text=bool(getattr(env, "free_text", False)),
            caps=caps,
        )
    finally:
        env.close()


def _registered(prefix: str) -> list[str]:
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the ids)
    from verlog.cli import _groups

    ids = [env_id for env_id in gym.registry if env_id.startswith("verlog/")]  # in registration order
    return next((found for game, found in _groups(ids).items() if game.prefix == prefix), [])


@functools.cache
def family(slug: str) -> Family:
    """The facts of one family's page, ``slug`` its game's name in lower case (``babyai``)."""
    import gymnasium as gym

    from verlog.cli import GAMES

    games = {game.name.lower(): game for game in GAMES}
    if slug not in games:
        raise KeyError(f"no game family {slug!r}; known: {', '.join(games)}")
    game = games[slug]
    ids = _registered(game.prefix)
    entry_points = sorted({str(gym.registry[env_id].entry_point) for env_id in ids})
    if len(entry_points) != 1:
        raise ValueError(f"{game.name}'s ids are made by {entry_points}: one class a family")
    entry_point = entry_points[0]
    cls = _class(entry_point.replace(":", "."))
    chain = _bases(cls)
    base_names = {name for name, _, _ in _signature(_class(BASE))}
    setting = [key for env_id in ids for key in gym.registry[env_id].kwargs]
    has_potential = any("_potential" in k.members for k in chain if k.path != BASE)
    arguments = [
        Argument(name, default, markdown(_description(name, chain)), name in base_names, setting.count(name))
        for name, default, _ in _signature(cls)
        if name != "shaping" or has_potential  # shaping > 0 raises where the game has no potential
    ]
    facts = Family(
        name=game.name,
        slug=slug,
        needs=game.needs,
        install=game.install,
        entry_point=entry_point,
        ids=[_measure(env_id) for env_id in ids],
        arguments=arguments,
        paragraphs={k: markdown(v) for k, v in _paragraphs(cls).items()},
        render_modes=tuple(_attribute(cls, "metadata")["render_modes"]),
        default_action=_attribute(cls, "default_action"),
        observation_chars=_attribute(cls, "max_observation_chars"),
        action_chars=_attribute(cls, "max_action_chars"),
    )
    facts.problems = [
        f"{cls.path}'s docstring has no {lead}: paragraph"
        for lead in PARAGRAPHS
        if lead not in facts.paragraphs
    ]
    facts.problems += [
        f"{cls.path}: {a.name} has no description under Args:" for a in arguments if not a.description
    ]
    return facts


# --------------------------------------------------------------------------------------------- markdown
def _cell(values: Iterable[str]) -> str:
    return ", ".join(f"`{v}`" for v in values)


def _caps(caps: Sequence[int]) -> str:
    return " or ".join(f"{c:,}" for c in caps)


def _setting(key: str, value: Any) -> str:
    if isinstance(value, (tuple, list)) and len(value) > 3:
        return f"`{key}` = all {len(value)}" if key == "levels" else f"`{key}` = {len(value)} values"
    if isinstance(value, (tuple, list)):
        return f"`{key}` = {', '.join(repr(v) for v in value)}"
    return f"`{key}={value!r}`"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _install(facts: Family) -> str:
    if not facts.install:
        return "the core install (`pip install -e .`)"
    return f"{facts.needs}: " + ", then ".join(f"`{command}`" for command in facts.install)


def _action_space(facts: Family) -> tuple[str, str]:
    """The action-space cell, and the collapsed list under the card when the list is long."""
    space = f"`Text(max_length={facts.action_chars})`: the model's raw answer, any string. "
    measured = [i for i in facts.ids if i.actions is not None]
    if not measured:
        return (
            space + f"The actions are read from the game, which needs {facts.needs} (not installed here).",
            "",
        )
    if all(i.free_text for i in measured):
        return space + (
            'Any text runs as a command for the game\'s parser; an answer naming one of `info["valid_actions"]` '
            "(the game's admissible commands at the state) counts as valid, anything else as invalid."
        ), ""
    fallback = f"; an invalid answer runs `{facts.default_action}`"
    distinct = {i.actions for i in measured}
    if len(distinct) > 1:
        sizes = sorted(len(a) for a in distinct)
        return (
            space
            + f"Parsed to one of the id's actions ({sizes[0]} to {sizes[-1]}, in the ids table){fallback}.",
            "",
        )
    (actions,) = distinct
    if len(actions) <= INLINE_ACTIONS:
        return space + f"Parsed to one of {len(actions)} actions: {_cell(actions)}{fallback}.", ""
    listed = f'??? note "The {len(actions)} actions"\n\n    ' + _cell(actions) + "\n"
    return space + f"Parsed to one of {len(actions)} actions (listed below){fallback}.", listed


def card(slug: str) -> str:
    """The family's spaces, reward, episode end, BALROG's scoring, install and render modes, as a table."""
    facts = family(slug)
    if facts.problems:
        raise ValueError("; ".join(facts.problems))
    action, listed = _action_space(facts)
    caps = sorted({c for i in facts.ids for c in (i.caps or ())})
    cap = f" Step cap: {_caps(caps)} (per id in the ids table)." if caps else ""
    p = {k: v[:1].upper() + v[1:] for k, v in facts.paragraphs.items()}  # each opens its cell
    rows = [
        ("Ids", f"{len(facts.ids)}, in the [ids table](#ids)"),
        ("Env class", f"`{facts.entry_point}`"),
        ("Install", _install(facts)),
        ("Action space", action),
        ("Observation space", f"`Text(max_length={facts.observation_chars})` of printable characters, "
                              f"plus the invalid-action note. {p['Observation']}"),
        ("Reward", p["Reward"] + " An invalid answer adds `invalid_action_penalty` (0 by default)."),
        ("Episode end", p["Episode end"] + cap),
        ("BALROG's scoring", "Progression (`info[\"progression\"]`): " + facts.paragraphs["Progression"]
         + " A task's BALROG score is 100 × its episodes' mean progression (`verlog eval`)."),
        ("Render modes", _cell(facts.render_modes)),
        ("Keyword arguments", f"{len(facts.arguments)}, in the [arguments table](#keyword-arguments)"),
    ]  # fmt: skip
    text = _table(["", f"`{facts.entry_point.split(':')[1]}`"], ([f"**{k}**", v] for k, v in rows))
    return text + ("\n\n" + listed if listed else "")


def ids(slug: str) -> str:
    """Every id of the family: what it sets, its description, its actions and its step cap."""
    facts = family(slug)
    varied = len({i.actions for i in facts.ids if i.actions is not None}) > 1
    rows = []
    for i in facts.ids:
        if i.actions is None:
            actions, cap = f"needs {facts.needs}", ""
        else:
            actions = "any text" if i.free_text else str(len(i.actions))
            if varied:
                actions += ": " + _cell(i.actions)
            cap = _caps(i.caps or ())
        sets = "<br>".join(_setting(k, v) for k, v in i.sets.items())
        rows.append([f"`{i.env_id}`", sets, markdown(i.description), actions, cap])
    return _table(["id", "the id sets", "what it is", "actions", "step cap"], rows)


def kwargs(slug: str) -> str:
    """The keyword arguments of the family's env, with defaults and what each does."""
    facts = family(slug)
    rows = []
    for a in facts.arguments:
        default = f"`{a.default}`"
        if a.set_by_ids:
            every = a.set_by_ids == len(facts.ids)
            default += (
                " (each id sets its own)"
                if every
                else f" ({a.set_by_ids} of the {len(facts.ids)} ids set{'s' if a.set_by_ids == 1 else ''} it)"
            )
        rows.append([f"`{a.name}`", default, a.description + (" *(every env)*" if a.common else "")])
    return _table(["argument", "default", "what it does"], rows)


RENDERERS = {"card": card, "ids": ids, "kwargs": kwargs}


def render(slug: str, part: str) -> str:
    return RENDERERS[part](slug)


def expand(markdown_text: str) -> str:
    """Replace every ``<!-- game: NAME PART -->`` line with its table."""
    expanded = MARKER.sub(lambda m: render(m.group(1), m.group(2)), markdown_text)
    left = [line for line in expanded.splitlines() if line.startswith("<!-- game:")]
    if left:
        raise ValueError(f"a game marker that is misspelt: {left[0]!r}")
    return expanded


# ------------------------------------------------------------------------------------------ mkdocs hooks
def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Print a game family's tables.")
    parser.add_argument("family", help="babyai, crafter, babaisai, minihack, nethack or textworld")
    parser.add_argument("part", nargs="?", choices=sorted(RENDERERS), help="default: all three")
    args = parser.parse_args()
    for part in [args.part] if args.part else RENDERERS:
        print(render(args.family, part) + "\n")
