"""The game pages' pictures: one seeded state of each game, drawn and as the model is shown it.

For each game this writes, under ``docs/games/``:

- ``img/<game>.png``: the state drawn by ``render_mode="rgb_array"`` (BabyAI, Crafter, BabaIsAI; NetHack,
  MiniHack and TextWorld draw no image: their screen is text, which the model is shown);
- ``text/<game>.txt``: the user message the learner builds for that state with the default prompt
  (``prompt.style = "short"``, ``format = "action"``, memory ``history`` with ``turns = 1``).

Seeds are fixed, so a run gives the same files (``tests/test_docs.py`` checks the committed ones)::

    python docs/gen_pictures.py                  # every game whose packages are installed
    python docs/gen_pictures.py babyai crafter   # some of them
"""

from __future__ import annotations

import argparse
import sys
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
    image: bool = True  # the env has render_mode="rgb_array"


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


def shoot(name: str) -> tuple[Any, str]:
    """``(picture, text)``: the rgb array (``None`` for a game without one) and the model's text."""
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
        picture = env.render() if shot.image else None
        return picture, prompt_text(observation, info)
    finally:
        env.close()


def write(name: str, root: Path = HERE) -> list[Path]:
    """Write one game's files under ``root``; returns their paths."""
    picture, text = shoot(name)
    (root / "text").mkdir(parents=True, exist_ok=True)
    written = [root / "text" / f"{name}.txt"]
    written[0].write_text(text.rstrip("\n") + "\n")
    if SHOTS[name].image:
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
