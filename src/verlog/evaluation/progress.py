"""How far an evaluation is: episodes and turns played, the turn rate and an estimate of the time left.

A model's episode can take minutes on a CPU, so counting episodes alone leaves a bar that sits still (``8/10
-:--:--``) and reads as hung; turns move every few seconds. On a terminal it is a live bar; anywhere else (a
pipe, a log file) one line every :data:`EVERY_S` seconds, from a timer thread, so a line comes even while a
slow batch of answers is being generated. Everything goes to stderr: stdout keeps the table and the closing
line a script reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["EVERY_S", "EvalProgress", "clock"]

#: Seconds between two progress lines when the output is not a terminal.
EVERY_S = 10.0


class EvalProgress:
    """Counts what an evaluation plays and shows it; a context manager, a no-op when ``show`` is False.

    ``todo`` episodes are left to play, ``done`` were played before (a resumed evaluation). Call
    :meth:`turn` for every turn an env plays and :meth:`episode` with each finished episode's length.
    """

    def __init__(
        self,
        show: bool,
        todo: int,
        done: int = 0,
        *,
        console: Any = None,
        every_s: float | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.show = show and todo > 0
        self.todo, self.done, self.now = todo, done, now
        self.every_s = EVERY_S if every_s is None else every_s
        self.episodes = 0  # finished now
        self.turns = 0  # played now, in finished and unfinished episodes
        self.finished_turns = 0  # the lengths of the episodes finished now
        self.started = now()
        self.console = console
        self._bar: Any = None
        self._task: Any = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # ------------------------------------------------------------------ counting
    def turn(self, count: int = 1) -> None:
        self.turns += count
        if self._bar is not None:
            self._bar.update(self._task, status=self.status())

    def episode(self, length: int) -> None:
        self.episodes += 1
        self.finished_turns += length
        if self._bar is not None:
            self._bar.update(self._task, advance=1, status=self.status())

    def rate(self) -> float:
        """Turns per second since play began."""
        elapsed = self.now() - self.started
        return self.turns / elapsed if elapsed > 0 else 0.0

    def left_s(self) -> float | None:
        """Seconds left: the episodes not finished, at the mean length of those finished, less the turns
        already played in the unfinished ones, at the turn rate so far. None until an episode has ended."""
        rate = self.rate()
        if not self.episodes or rate <= 0:
            return None
        mean_length = self.finished_turns / self.episodes
        in_flight = self.turns - self.finished_turns
        turns_left = max((self.todo - self.episodes) * mean_length - in_flight, 0.0)
        return turns_left / rate

    def status(self) -> str:
        """``412 turns in 1m 20s, 5.1 turn/s, ~1m 23s left``."""
        left = self.left_s()
        guess = "no estimate yet" if left is None else f"~{clock(left)} left"
        turns = f"{self.turns} turn{'s' if self.turns != 1 else ''} in {clock(self.now() - self.started)}"
        return f"{turns}, {self.rate():.1f} turn/s, {guess}"

    def line(self) -> str:
        """What a pipe or a log file gets: ``eval: 3/10 episodes, 412 turns in 1m 20s, 5.1 turn/s, ~1m 23s
        left``."""
        total = self.todo + self.done
        return f"eval: {self.done + self.episodes}/{total} episodes, {self.status()}"

    # ------------------------------------------------------------------ showing
    def __enter__(self) -> EvalProgress:
        if not self.show:
            return self
        if self.console is None:
            from rich.console import Console

            self.console = Console(stderr=True, highlight=False)
        self.started = self.now()
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._bar = Progress(
                TextColumn("[bold]eval"),
                BarColumn(bar_width=10),
                MofNCompleteColumn(),
                TextColumn("episodes, {task.fields[status]}"),
                console=self.console,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(
                "episodes", total=self.todo + self.done, completed=self.done, status=self.status()
            )
        else:
            self._ticker = threading.Thread(target=self._tick, name="eval-progress", daemon=True)
            self._ticker.start()
        return self

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s):
            self.console.print(self.line(), soft_wrap=False)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.stop()


def clock(seconds: float) -> str:
    """``1h 02m``, ``3m 05s``, ``42s``."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"
