"""The game pages' pictures: one seeded state of each game, drawn and as the model is shown it.

For each game this writes, under ``docs/games/``:

- ``img/<game>.png``: the state drawn by ``render_mode="rgb_array"`` (BabyAI, Crafter, BabaIsAI); NetHack,
  MiniHack and TextWorld draw no image (their screen is text), so theirs is that screen drawn as a terminal
  shows it (NetHack and MiniHack: the message row, the map and the two status lines; TextWorld: the game's
  text), in Pillow's built-in bitmap font, which draws the same pixels everywhere;
- ``text/<game>.txt``: the user message the learner builds for that state with the default prompt
  (``prompt.style = "short"``, ``format = "action"``, memory ``history`` with ``turns = 1``).

Seeds are fixed, so a run gives the same files (``tests/test_docs.py`` checks the committed ones)::

    python docs/gen_pictures.py                  # every game whose packages are installed
    python docs/gen_pictures.py babyai crafter   # some of them
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "games"


@dataclass(frozen=True)
class Shot:
    """One game's picture: which env, which seed, and the actions played after the reset."""

    env_id: str
    seed: int
    actions: tuple[str, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    image: bool = True  # the env has render_mode="rgb_array"; else the picture is its screen as a terminal


SHOTS: dict[str, Shot] = {
    "babyai": Shot("verlog/BabyAI-GoTo-v0", 0, ("turn left",)),
    "crafter": Shot("verlog/Crafter-v0", 1, ("Move West", "Move West")),
    "babaisai": Shot("verlog/BabaIsAI-goto_win-v0", 3, ("right",)),
    "nethack": Shot("verlog/NetHack-v0", 0, image=False),
    "minihack": Shot("verlog/MiniHack-MazeWalk-9x9-v0", 0, image=False),
    "textworld": Shot("verlog/TextWorld-CoinCollector-v0", 0, kwargs={"games": 1}, image=False),
}


def prompt_text(observation: str, info: dict[str, Any]) -> str:
    """The user message of the learner's default prompt for this observation (no tokenizer needed)."""
    from verlog.models.prompts import PromptBuilder

    builder = PromptBuilder(None, "action", 1024, style="short")
    return builder.messages(info, observation)[-1]["content"]


#: A terminal picture: columns, cell size of Pillow's built-in font, colours, margin, and the scale it is saved
#: at (the page shows it at half that width: sharp on a high-density screen, exact pixels on any other).
COLUMNS, CELL, INK, PAPER, MARGIN, SCALE = 80, (6, 11), (214, 214, 214), (24, 24, 24), 6, 2


def screen(state_text: str) -> list[str]:
    """What a terminal shows for a text game's state: NetHack's and MiniHack's message row, map and status
    lines (the ``message:`` and ``map:`` blocks of BALROG's text), or TextWorld's text wrapped to 80 columns."""
    blocks = dict(re.findall(r"^([a-z ]+):\n(.*?)\n(?=^[a-z ]+:\n|\Z)", state_text, re.DOTALL | re.MULTILINE))
    if "map" in blocks:
        return [blocks.get("message", "").split("\n")[0], *blocks["map"].split("\n")]
    return [part for line in state_text.splitlines() for part in textwrap.wrap(line, COLUMNS) or [""]]


def terminal(lines: Sequence[str]) -> Any:
    """The lines drawn light on dark in Pillow's built-in 6x11 bitmap font, as an rgb array."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default_imagefont()
    (width, height), rows = CELL, [line[:COLUMNS] for line in lines]
    size = (COLUMNS * width + 2 * MARGIN, len(rows) * height + 2 * MARGIN)
    image = Image.new("RGB", size, PAPER)
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(rows):
        draw.text((MARGIN, MARGIN + row * height), line, font=font, fill=INK)
    return np.asarray(image.resize((size[0] * SCALE, size[1] * SCALE), Image.Resampling.NEAREST))


def shoot(name: str) -> tuple[Any, str]:
    """``(picture, text)``: the rgb array (a text game's: its screen, :func:`terminal`) and the model's text."""
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the ids)
    from verlog.memory import wrap_memory

    shot = SHOTS[name]
    env = gym.make(shot.env_id, render_mode="rgb_array" if shot.image else None, **shot.kwargs)
    env = wrap_memory(env, "history", turns=1, reasoning=True)
    try:
        observation, info = env.reset(seed=shot.seed)
        for action in shot.actions:
            observation, _, _, _, info = env.step(action)
        picture = env.render() if shot.image else terminal(screen(info["state_text"]))
        return picture, prompt_text(observation, info)
    finally:
        env.close()


def write(name: str, root: Path = HERE) -> list[Path]:
    """Write one game's files under ``root``; returns their paths."""
    picture, text = shoot(name)
    (root / "text").mkdir(parents=True, exist_ok=True)
    written = [root / "text" / f"{name}.txt"]
    written[0].write_text(text.rstrip("\n") + "\n")
    from PIL import Image

    (root / "img").mkdir(parents=True, exist_ok=True)
    path = root / "img" / f"{name}.png"
    Image.fromarray(picture).save(path, optimize=True)
    written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("games", nargs="*", choices=[*SHOTS, []], help="default: every game")
    args = parser.parse_args(argv)
    for name in args.games or SHOTS:
        try:
            paths = write(name)
        except ImportError as error:  # a BALROG game whose package is not installed
            print(f"{name}: skipped ({error})", file=sys.stderr)
            continue
        print(" ".join(str(p.relative_to(HERE.parent.parent)) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
