"""When a run stops before ``run.total_updates``: its time budget, or Ctrl-C / SIGTERM, after an update.

Without this, a signal ends the process wherever it is and loses every update since the last checkpoint (up
to ``run.checkpoint_every`` of them, often tens of minutes). :class:`EarlyStop` turns the first SIGINT or
SIGTERM into a request the learner reads after each update, as it reads ``run.max_minutes``: it saves that
update, writes the run's summary and returns, so the run resumes exactly from there. A second signal does
what the first would have done without it (KeyboardInterrupt, or the default end for SIGTERM), for a user
who cannot wait.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from verlog.runkit.distributed import from_main_process

__all__ = ["SIGNALS", "EarlyStop", "exit_status"]

#: The signals that ask for a stop: Ctrl-C in a terminal, and what ``kill``, schedulers and launchers send.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class EarlyStop:
    """A context manager around a run's updates. While it is open, the first SIGINT/SIGTERM sets
    :attr:`requested` (the signal's name) and says once what will happen; the handlers in place before are
    restored on exit. Outside the main thread Python cannot take signals, so there only the budget holds."""

    def __init__(self, max_minutes: float, say: Callable[[str], None], when: Callable[[], str]) -> None:
        """``say`` prints a line; ``when`` names the point the run will stop at, e.g. "when update 12 ends"."""
        self.budget_s = 60.0 * max_minutes
        self.say, self.when = say, when
        self.requested: str | None = None
        self.signal: str | None = None
        self.started = time.perf_counter()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> EarlyStop:
        self.started = time.perf_counter()
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def due(self, last_update_s: float) -> bool:
        """Whether to stop after this update: one more would end past ``run.max_minutes``, or a signal asked.
        The main process decides for all (a collective call); :attr:`signal` names the signal that stopped it."""
        late = bool(self.budget_s) and time.perf_counter() - self.started + last_update_s > self.budget_s
        late, self.signal = from_main_process((late, self.requested))
        return late or self.signal is not None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:  # the second: give it to whatever handled it before
            self._restore()
            os.kill(os.getpid(), signum)
            return
        self.requested = name
        self.say(
            f"{name}: the run stops {self.when()}, with a checkpoint to resume from; "
            f"send it again to stop at once (the updates since the last checkpoint are then lost)"
        )


def exit_status(name: str) -> int:
    """The shell's status for a process ended by signal ``name`` (128 + its number: 130 for SIGINT)."""
    return 128 + int(signal.Signals[name])
