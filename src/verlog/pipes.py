"""``verlog list | head``, ``agents/ppo.py --help-config | head``: a reader that leaves early is not an error.

Every command-line entry point of the project is wrapped in :func:`closed_pipe_ok`: when stdout's reader
has gone, the command stops writing and exits 0 instead of ending on a ``BrokenPipeError`` traceback (or
Python's "Exception ignored ... BrokenPipeError" at exit, when the last write sat in the buffer).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["closed_pipe_ok"]


def closed_pipe_ok(main: Callable[..., Any]) -> Callable[..., int]:
    """Wrap ``main(...) -> exit code`` so a closed stdout ends it quietly with status 0."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> int:
        try:
            try:
                code = main(*args, **kwargs)
            except SystemExit as done:  # argparse's --help and errors: flush their text here too
                code = done.code
                sys.stdout.flush()
                raise
            sys.stdout.flush()  # the last buffered write fails here, not in the interpreter's exit
            return code
        except BrokenPipeError:
            # Python's advice: point stdout at devnull so the flush at exit has nowhere to fail.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0

    return run
