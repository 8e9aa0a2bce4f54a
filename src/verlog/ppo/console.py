"""A quiet training console: third-party chatter goes to ``RUN/console.log``, verlog's own lines stay.

Loading and saving models makes transformers, accelerate and DeepSpeed print a page of notices (load
reports, shared-tensor notes, accelerator detection, tqdm bars) between the per-update rows. None of it is
wrong, and all of it is worth keeping, but not on the console: :func:`quiet_console` sends those loggers,
Python warnings from outside verlog and the libraries' progress bars into a log file, and verlog's own
``verlog`` logger (e.g. "critic head initialised fresh") prints one line to the console. Records that come
before the run folder exists are kept in memory and written once :func:`attach_run_log` names it.
``agents/ppo.py --verbose`` skips all of this and shows everything as the libraries print it.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import warnings
from pathlib import Path

__all__ = ["LOG_FILE", "THIRD_PARTY", "attach_run_log", "quiet_console"]

#: File name of the third-party log inside a run folder (``console.rank<N>.log`` for processes other than 0).
LOG_FILE = "console.log"
#: Loggers whose records go to the log file instead of the console.
THIRD_PARTY = ("transformers", "accelerate", "DeepSpeed", "deepspeed", "torch", "peft", "huggingface_hub")

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _RunLogHandler(logging.Handler):
    """Writes records to the run's log file; until that file is named, keeps them in memory."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter(_FORMAT))
        self.pending: list[str] = []
        self.file = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a record that cannot be formatted must not stop a run
            self.handleError(record)
            return
        if self.file is None:
            self.pending.append(text)
        else:
            self.file.write(text + "\n")
            self.file.flush()

    def open(self, path: Path) -> None:
        if self.file is not None:
            return
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole run)
        for text in self.pending:
            self.file.write(text + "\n")
        self.pending.clear()
        self.file.flush()

    def dump_pending(self) -> None:
        """At exit without a run folder (the run failed early): the kept records go to stderr, not lost."""
        if self.file is None and self.pending:
            print("\n".join(self.pending), file=sys.stderr)
            self.pending.clear()


class _Divert(logging.Filter):
    """A logger-level filter: hands the record to the run log and stops it there. It is set on the logger
    itself, so a handler the library adds later (DeepSpeed adds its own at import) never sees the record."""

    def __init__(self, handler: _RunLogHandler) -> None:
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        self.handler.handle(record)
        if record.levelno >= logging.ERROR:
            _ERRORS.handle(record)
        return False


#: The libraries' errors (not their notices) still reach the console as well as the log.
_ERRORS = logging.StreamHandler(sys.stderr)
_ERRORS.setLevel(logging.ERROR)


class _VerlogLine(logging.Handler):
    """verlog's own notices: one plain line each on the console (above a live rich progress bar), from
    the main process only (every process loads the models; one line says it)."""

    def emit(self, record: logging.LogRecord) -> None:
        if os.environ.get("RANK", "0") != "0":
            return
        print(record.getMessage(), file=sys.stderr, flush=True)


_handler: _RunLogHandler | None = None


def quiet_console() -> None:
    """Route third-party logging, foreign warnings and progress bars to the run log (call once, early)."""
    global _handler
    if _handler is not None:
        return
    _handler = handler = _RunLogHandler()
    divert = _Divert(handler)
    for name in THIRD_PARTY:
        logger = logging.getLogger(name)
        logger.addFilter(divert)  # records made on this very logger (DeepSpeed's)
        logger.addHandler(handler)  # records from its children that propagate up
        logger.addHandler(_ERRORS)
        logger.propagate = False
    try:  # transformers keeps its own stderr handler on its library logger
        from transformers.utils import logging as hf_logging

        hf_logging.disable_default_handler()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    try:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:
        pass
    _route_warnings(handler)
    verlog_logger = logging.getLogger("verlog")
    verlog_logger.setLevel(logging.INFO)
    verlog_logger.addHandler(_VerlogLine())
    verlog_logger.addHandler(handler)
    verlog_logger.propagate = False
    atexit.register(handler.dump_pending)


def _route_warnings(handler: _RunLogHandler) -> None:
    """Warnings raised by verlog's own code still reach the console; the libraries' go to the log."""
    shown = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if "verlog" in Path(filename).parts:
            shown(message, category, filename, lineno, file, line)
            return
        text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
        record = {"name": "py.warnings", "levelno": logging.WARNING, "levelname": "WARNING", "msg": text}
        handler.handle(logging.makeLogRecord(record))

    warnings.showwarning = showwarning


def attach_run_log(run_dir: str | Path, rank: int = 0) -> Path | None:
    """Start writing the run log in ``run_dir`` (what came before included); None when the console is not
    quiet (``--verbose``, or the trainer used from Python)."""
    if _handler is None:
        return None
    path = Path(run_dir) / (LOG_FILE if rank == 0 else f"console.rank{rank}.log")
    _handler.open(path)
    return path
