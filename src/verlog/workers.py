"""Worker processes of an async vector env that die, hang, or outlive their parent.

Gymnasium's :class:`~gymnasium.vector.AsyncVectorEnv` assumes its workers answer: a worker killed mid-step
(out of memory, a segfault, ``kill``) surfaces as a bare ``EOFError`` naming no sub-env, a sub-env that hangs
blocks ``step`` forever, and workers whose parent was killed live on. :class:`WatchedPipe` wraps each parent end
of a worker pipe so a dead worker or a missed deadline raises :class:`~verlog.vector.SubEnvError` naming the
sub-env; :func:`watched_worker` is gymnasium's own worker plus a thread that ends it when its parent is gone;
:func:`stop_workers` closes workers within a bounded time, terminating those that do not answer.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from gymnasium.vector.async_vector_env import _async_worker

__all__ = ["WatchedPipe", "stop_workers", "watched_worker"]

#: Seconds between a worker's checks that its parent is alive.
PARENT_CHECK_S = 0.5


def watched_worker(*args: Any) -> None:
    """Gymnasium's ``_async_worker``, ended (``os._exit``) once the process that started it is gone."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:  # an orphan is adopted by init (or a subreaper): the id changes
            time.sleep(PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    _async_worker(*args)


class WatchedPipe:
    """The parent end of sub-env ``index``'s pipe: ``recv`` waits until ``deadline()`` at most, and a dead
    worker or a missed deadline calls ``fail(index, kind, message)``, which raises."""

    def __init__(
        self,
        connection: Connection,
        index: int,
        process: Any,
        deadline: Callable[[], float | None],
        fail: Callable[[int, str, str], None],
    ) -> None:
        self.connection, self.index, self.process = connection, index, process
        self._deadline, self._fail = deadline, fail

    @property
    def closed(self) -> bool:
        return self.connection.closed

    def poll(self, timeout: float | None = 0.0) -> bool:
        return self.connection.poll(timeout)

    def close(self) -> None:
        self.connection.close()

    def send(self, message: Any) -> None:
        try:
            self.connection.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._died()

    def recv(self) -> Any:
        deadline = self._deadline()
        if deadline is not None and not self.connection.poll(max(0.0, deadline - time.monotonic())):
            self._fail(self.index, "StepTimeout", "no answer within env.step_timeout_s: the sub-env hangs")
        try:
            return self.connection.recv()
        except (EOFError, ConnectionResetError, OSError):
            self._died()

    def _died(self) -> None:
        self.process.join(1.0)
        code = self.process.exitcode
        how = f"exit code {code}" if code is None or code >= 0 else f"signal {-code}"
        self._fail(
            self.index,
            "WorkerDied",
            f"its worker process (pid {self.process.pid}) ended ({how}): killed, out of memory or crashed",
        )


def stop_workers(pipes: list[Any], processes: list[Any], *, grace: float, terminate: bool) -> None:
    """Ask every live worker to close, wait ``grace`` seconds in all, then terminate and kill what is left.

    Never blocks for longer than about ``grace + 2`` seconds, whatever state the workers are in.
    """
    if not terminate:
        for pipe in pipes:
            if pipe is not None and not pipe.closed:
                try:
                    (pipe.connection if isinstance(pipe, WatchedPipe) else pipe).send(("close", None))
                except OSError:
                    pass  # that worker is gone already
        end = time.monotonic() + grace
        for process in processes:
            process.join(max(0.0, end - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(1.0)
        if process.is_alive():
            process.kill()
            process.join(1.0)
    for pipe in pipes:
        if pipe is not None:
            pipe.close()
