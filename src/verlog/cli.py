"""The ``verlog`` console script: ``list``, ``play ID``, ``eval``, ``report RUN``, ``models list|get``.

Each subcommand is one function registered with :func:`subcommand`, which also names the function that adds
its arguments; ``main`` builds the argparse parser from the registry. To add one (``eval``, ``report``)::

    def _eval_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("checkpoint")

    @subcommand("eval", "Evaluate a checkpoint on a suite.", _eval_arguments)
    def eval_command(args: argparse.Namespace) -> int:
        ...
        return 0
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verlog.evaluation.command import EVAL_HELP, add_eval_arguments, run_eval
from verlog.extras import as_missing
from verlog.memory import MEMORIES
from verlog.models.command import MODELS_HELP, add_models_arguments, run_models
from verlog.pipes import closed_pipe_ok
from verlog.report import REPORT_HELP, add_report_arguments, run_report

__all__ = ["COMMANDS", "QUIT_WORDS", "Command", "build_parser", "main", "subcommand"]


@dataclass(frozen=True)
class Command:
    """A registered subcommand: its help line, its argument builder and the function that runs it."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


#: Every subcommand, by name, in the order they were registered.
COMMANDS: dict[str, Command] = {}


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def subcommand(
    name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register ``run(args) -> exit code`` as ``verlog <name>``; ``arguments(parser)`` adds its arguments."""

    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        if name in COMMANDS:
            raise ValueError(f"subcommand {name!r} is already registered")
        COMMANDS[name] = Command(help, arguments, run)
        return run

    return register


def build_parser() -> argparse.ArgumentParser:
    """The ``verlog`` parser, one subparser per registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="verlog", description="Text games for LLM agents, and a PPO learner."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=command.help, description=command.help)
        command.arguments(sub_parser)
        sub_parser.set_defaults(run=command.run)
    return parser


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["launch"] and not {"-h", "--help"} & set(argv[1:2]):
            from verlog.runkit.launch import main as launch_main  # accelerate's flags pass through unparsed

            return launch_main(argv[1:])
        args = build_parser().parse_args(argv)
        return int(args.run(args))
    except ImportError as error:  # an optional package is missing: one line naming its extra
        if (missing := as_missing(error)) is None:
            raise
        print(f"verlog: {missing}", file=sys.stderr)
        return 2


# ---------------------------------------------------------------------------------------------- verlog list
@dataclass(frozen=True)
class Game:
    """A game's group in ``verlog list``: its ids' prefix, what installs it, and the word for its variants."""

    name: str
    prefix: str
    needs: str = ""  # beyond `pip install -e .`, in words
    install: tuple[str, ...] = ()  # the commands that bring what it needs beyond `pip install -e .`
    modules: tuple[str, ...] = ()  # what must import for it to run
    variant: str = "name"  # the placeholder of a collapsed row: verlog/BabaIsAI-<family>-v0


_NLE = "pip install --no-deps nle==1.3.0"
#: The games, in the order ``verlog list`` shows them.
GAMES = (
    Game("BabyAI", "verlog/BabyAI-"),
    Game("Crafter", "verlog/Crafter-"),
    Game("BabaIsAI", "verlog/BabaIsAI-", variant="family"),
    Game(
        "MiniHack",
        "verlog/MiniHack-",
        "the minihack extra, nle and minihack",
        ('pip install -e ".[minihack]"', f"{_NLE} minihack==1.0.2"),
        ("nle", "minihack"),
    ),
    Game(
        "NetHack",
        "verlog/NetHack-",
        "the nethack extra and nle",
        ('pip install -e ".[nethack]"', _NLE),
        ("nle",),
    ),
    Game(
        "TextWorld",
        "verlog/TextWorld-",
        "the textworld extra",
        ('pip install -e ".[textworld]"',),
        ("textworld",),
    ),
)
#: Ids of a game sharing one description, more than this many, show as one row (BabaIsAI's 40 families).
COLLAPSE = 6


def _verlog_ids() -> list[str]:
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the ids)

    return sorted(env_id for env_id in gym.registry if env_id.startswith("verlog/"))


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    names = ", ".join(game.name.lower() for game in GAMES)
    parser.add_argument(
        "game", nargs="?", default="", metavar="GAME", help=f"every id of one game ({names}) or all"
    )


@subcommand("list", "List the verlog env ids, grouped by game, with what each game needs.", _list_arguments)
def list_command(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from verlog.hints import did_you_mean

    width = shutil.get_terminal_size().columns  # $COLUMNS, the terminal's, else 80
    groups = _groups(_verlog_ids())
    wanted = args.game.lower()
    if wanted and wanted != "all" and wanted not in {game.name.lower() for game in groups}:
        names = [game.name.lower() for game in groups]
        hint = f" ({close})" if (close := did_you_mean(wanted, names)) else ""
        print(f"verlog list: no game {args.game!r}{hint}; games: {', '.join(names)}, or all", file=sys.stderr)
        return 2
    for game, ids in groups.items():
        if wanted and wanted not in ("all", game.name.lower()):
            continue
        rows = [(env_id, getattr(gym.registry[env_id], "description", "")) for env_id in ids]
        for line in _group_lines(game, len(ids), rows if wanted else _collapsed(game, rows), width):
            print(line)
    return 0


def _groups(ids: list[str]) -> dict[Game, list[str]]:
    """The ids by game, in :data:`GAMES` order (the plain id first, then the others sorted); ids of no known
    game last, under "Other"."""
    groups: dict[Game, list[str]] = {}
    for env_id in ids:
        game = next((g for g in GAMES if env_id.startswith(g.prefix)), None) or Game("Other", "verlog/")
        groups.setdefault(game, []).append(env_id)
    order = {game: i for i, game in enumerate(GAMES)}
    return {game: groups[game] for game in sorted(groups, key=lambda g: order.get(g, len(GAMES)))}


def _collapsed(game: Game, rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``rows`` with the ids that share one description, more than :data:`COLLAPSE` of them, as one row:
    ``verlog/BabaIsAI-<family>-v0   40 of them: BabaIsAI level family (BALROG); verlog list babaisai``."""
    shared: dict[str, list[str]] = {}
    for env_id, description in rows:
        shared.setdefault(description, []).append(env_id)
    out, done = [], set()
    for env_id, description in rows:
        ids = shared[description]
        if len(ids) <= COLLAPSE:
            out.append((env_id, description))
        elif description not in done:
            done.add(description)
            pattern = f"{game.prefix}<{game.variant}>-v0"
            out.append((pattern, f"{len(ids)} of them: {description}; verlog list {game.name.lower()}"))
    return out


def _group_lines(game: Game, total: int, rows: list[tuple[str, str]], width: int) -> list[str]:
    """A game's header (its number of ids and what it needs), its install commands when it is not installed,
    then its rows, indented."""
    from verlog.extras import missing

    absent = bool(game.install) and bool(missing(*game.modules))
    needs = (
        f"needs {game.needs}" + (", not installed; to install:" if absent else " (installed)")
        if game.needs
        else "in the core install"
    )
    lines = [f"{game.name}: {total} id{'s' if total != 1 else ''}, {needs}"]
    if absent:
        lines.extend(f"    {command}" for command in game.install)
    # rows indented under their game; an id too long for that (BabaIsAI's longest family) from column 0
    lines.extend(line if len(line) + 2 > width else "  " + line for line in _id_table(rows, width - 2))
    return lines


def _id_table(rows: list[tuple[str, str]], width: int) -> list[str]:
    """``id  description`` lines within ``width`` columns, the description column placed where the table is
    shortest: a longer description wraps in its column, and a longer id (BabaIsAI's longest level families)
    takes a line of its own above its description."""

    def table(column: int) -> list[str]:
        lines = []
        for name, description in rows:
            wrapped = textwrap.wrap(description, width - column - 2) or [""]
            if len(name) <= column:
                lines.append(f"{name:<{column}}  {wrapped.pop(0)}".rstrip())
            else:
                lines.append(name)
            lines.extend(" " * (column + 2) + part for part in wrapped)
        return lines

    columns = sorted({len(name) for name, _ in rows if len(name) <= width - 22}) or [max(width - 22, 0)]
    return min((table(column) for column in columns), key=len)


# ---------------------------------------------------------------------------------------------- verlog play
def _play_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env_id", metavar="ID", help="a registered env id, e.g. verlog/BabyAI-GoTo-v0")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the first episode; episode k gets SEED+k-1 (default: a random seed, shown)",
    )
    parser.add_argument(
        "--memory",
        default="none",
        choices=sorted(MEMORIES),
        help="show the observation the way this memory wrapper gives it to an agent",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="send exactly what is typed, even an empty or unparsable line (to try the env's parser)",
    )


@subcommand("play", "Play an env yourself in the terminal.", _play_arguments)
def play_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(highlight=False)
    try:
        env = _make_play_env(args.env_id, args.memory)
    except Exception as error:  # an unknown id or a broken env: say so, no traceback
        console.print(f"[bold red]Cannot make {args.env_id}:[/] {type(error).__name__}: {error}")
        return 2
    try:
        if sys.stdin.isatty():
            import readline  # noqa: F401  (line editing and history for input(); arrow keys stay with it)
        _play(env, console, args.seed, args.raw)
    except (EOFError, KeyboardInterrupt):
        console.print("\n[dim]Bye.[/]")
    finally:
        env.close()
    return 0


def _make_play_env(env_id: str, memory: str) -> Any:
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    import verlog  # noqa: F401  (registers the ids)
    from verlog.memory import wrap_memory

    entry_point = gym.spec(env_id).entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    modes = getattr(creator, "metadata", {}).get("render_modes", [])
    env = gym.make(env_id, render_mode="ansi") if "ansi" in modes else gym.make(env_id)
    return wrap_memory(env, memory)


def _frame(env: Any, shown: str) -> str | None:
    """The env's ``ansi`` frame when it draws something the observation does not already say (BabaIsAI's
    grid); the default ``ansi`` frame of a text env is its observation, shown once."""
    if getattr(env.unwrapped, "render_mode", None) != "ansi":
        return None
    frame = env.render()
    if not isinstance(frame, str) or not frame.strip() or frame in shown:
        return None
    return frame


def _listed(actions: list[str], width: int = 80, lead: int = 0) -> str:
    """``Valid actions: 1 left  2 right ...`` as markup, broken between actions (never inside one) so every
    line fits ``width`` columns; ``lead``: the columns already used on the first line."""
    from rich.markup import escape

    lines: list[list[str]] = [[]]
    used = lead + len("Valid actions:")  # columns of the line being filled
    for number, action in enumerate(actions, 1):
        size = len(f"{number} {action}")
        gap = 1 if len(lines) == 1 and not lines[0] else 2  # after the colon, else between or indenting
        if lines[-1] and used + gap + size > width:
            lines.append([])
            used, gap = 0, 2
        lines[-1].append(f"[bold]{number}[/] {escape(action)}")
        used += gap + size
    first, *rest = ("  ".join(items) for items in lines)
    return "\n".join(["Valid actions: " + first, *("  " + line for line in rest)])


def _read_as(typed: str, executed: str) -> bool:
    """Whether the game read what was typed as another action's name ("chop tree" as "Do"): worth saying."""
    text = typed.strip()
    return not text.isdigit() and text.lower() != executed.lower()


#: What ends ``verlog play`` at the action prompt (as Ctrl-D does), whatever the game: a player types them first.
QUIT_WORDS = frozenset({"q", "quit", "exit"})


def _prompt(console: Any) -> str:
    """The prompt as input() takes it: readline must know its length to redraw a recalled line, so colour
    codes are wrapped in \\001 ... \\002 (zero width), and only on a terminal."""
    text = "Your action (text or number; q quits): "
    if not console.is_terminal or console.no_color:
        return text
    return "\001\x1b[1;32m\002Your action\001\x1b[0m\002" + text.removeprefix("Your action")


def _ask(console: Any, env: Any, actions: list[str], raw: bool) -> str:
    """One line from the player; ``q``, ``quit`` or ``exit`` end the game (EOFError, as Ctrl-D does), even
    with ``raw``. Unless ``raw``, a line that names no action (empty, a number out of range, a typo, a stray
    escape sequence) is answered with the valid actions and asked again, so it never spends a step."""
    from rich.markup import escape
    from rich.text import Text

    parse = getattr(env.unwrapped, "parse", None)
    while True:
        typed = input(_prompt(console))
        text = typed.strip()
        if text.lower() in QUIT_WORDS:
            raise EOFError
        if raw:
            return typed
        if text.isdigit() and actions:
            if 0 < int(text) <= len(actions):
                return text
            problem = f"there is no action {text}: choose 1 to {len(actions)}"
        elif not text:
            problem = "type an action or its number"
        elif "\x1b" in text:
            problem = "arrow and function keys are not actions"
        elif parse is not None and parse(text).valid:
            return text
        elif parse is None and (not actions or text in actions):
            return text
        else:
            problem = f"'{escape(text)}' is not an action of this game"
        listed = f"; {_listed(actions, console.width, len(Text.from_markup(problem)) + 2)}" if actions else ""
        console.print(f"[yellow]{problem}[/]" + listed)


def _play(env: Any, console: Any, seed: int | None, raw: bool = False) -> None:
    """Episodes until the player stops; episode k is reset with ``seed + k - 1`` (a random first seed when
    None), shown in its title so any episode can be played again with ``--seed``."""
    import random

    from rich.markup import escape
    from rich.panel import Panel

    first = random.randrange(2**31) if seed is None else seed
    episode = 0
    while True:
        episode += 1
        obs, info = env.reset(seed=first + episode - 1)
        console.rule(f"[bold]Episode {episode}[/] (seed {first + episode - 1})")
        console.print(
            Panel(escape(str(info.get("instruction", ""))), title="Instruction", border_style="blue")
        )
        total, steps = 0.0, 0
        while True:
            frame = _frame(env, obs)
            if frame is not None:
                console.print(Panel(escape(frame), title="Grid", border_style="magenta", expand=False))
            console.print(Panel(escape(obs), title=f"Observation (step {steps})", border_style="cyan"))
            actions = list(info.get("valid_actions", []))
            if actions:
                console.print(_listed(actions, console.width))
            typed = _ask(console, env, actions, raw)
            action = (
                actions[int(typed) - 1]
                if typed.strip().isdigit() and 0 < int(typed) <= len(actions)
                else typed
            )
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            steps += 1
            executed = str(info.get("executed_action", ""))
            if info.get("action_valid", True) and executed and _read_as(typed, executed):
                console.print(f"[dim]'{escape(typed.strip())}' read as '{escape(executed)}'[/]")
            progression = info.get("progression", 0.0)
            line = f"reward [bold]{reward:+.3f}[/]   return {total:+.3f}   progression {progression:.2f}"
            if not info.get("action_valid", True):
                line += (
                    f"   [yellow]'{escape(typed)}' is not a valid action: "
                    f"'{escape(str(info.get('executed_action', '')))}' was executed[/]"
                )
            console.print(line)
            if terminated or truncated:
                how = "terminated" if terminated else "truncated (step limit)"
                console.print(
                    Panel(
                        escape(obs),
                        title=f"Episode {episode} {how}: return {total:+.3f} in {steps} steps, "
                        f"progression {info.get('progression', 0.0):.2f}",
                        border_style="green" if total > 0 else "red",
                    )
                )
                break
        again = console.input("Play again? [bold]\\[y/N][/] ").strip().lower()
        if again not in ("y", "yes"):
            console.print("[dim]Bye.[/]")
            return


# ------------------------------------------------------------------ verlog eval, verlog report, verlog models
subcommand("eval", EVAL_HELP, add_eval_arguments)(run_eval)
subcommand("report", REPORT_HELP, add_report_arguments)(run_report)
subcommand("models", MODELS_HELP, add_models_arguments)(run_models)


def _launch_arguments(parser: argparse.ArgumentParser) -> None:
    from verlog.runkit.launch import add_launch_arguments

    add_launch_arguments(parser)


@subcommand(
    "launch", "accelerate launch with a bounded, reported wait for the other machines.", _launch_arguments
)
def launch_command(args: argparse.Namespace) -> int:
    del args  # only reached through --help: main() hands `verlog launch ...` to the launcher unparsed
    return 0


if __name__ == "__main__":
    sys.exit(main())
