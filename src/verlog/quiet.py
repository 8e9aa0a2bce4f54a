"""A quiet console: third-party chatter goes to a log file in the run (or output) folder, verlog's lines stay.

Loading and saving models makes transformers, accelerate, DeepSpeed and vLLM print a page of notices (load
reports, shared-tensor notes, accelerator detection, an engine's whole configuration, thread-binding warnings,
tqdm bars) between verlog's own lines. None of it is wrong, and all of it is worth keeping, but not on the
console: :func:`quiet_console` sends those loggers, Python warnings from outside verlog and the libraries'
progress bars into a log file, and verlog's own ``verlog`` logger (e.g. "critic: new value head") prints
one line to the console. The libraries' *errors* still reach the console too. Records that come before the
folder exists are kept in memory and written once :func:`attach_run_log` names it. What native code writes
straight to the process's stderr (torch's C++ warnings, an engine's load bars) cannot be caught as a record:
:func:`native_output` takes the file descriptor itself for the few noisy calls (starting a vLLM engine).

Every entry point calls it (training, ``verlog eval``, ``verlog models get``, the benchmarks); ``--verbose``
skips all of this and shows everything as the libraries print it. A floor-0 module: no torch, no verlog import.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "LOG_FILE",
    "THIRD_PARTY",
    "attach_run_log",
    "detail",
    "is_quiet",
    "native_output",
    "only_notices",
    "quiet_console",
]

#: File name of the third-party log inside a run folder (``console.rank<N>.log`` for processes other than 0).
LOG_FILE = "console.log"
#: Loggers whose records go to the log file instead of the console.
THIRD_PARTY = (
    "transformers", "accelerate", "DeepSpeed", "deepspeed", "torch", "peft", "huggingface_hub", "vllm", "numba",
)  # fmt: skip

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: A line :data:`_FORMAT` writes (its first line, for a record of several).
_RECORD_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [^\s:]+: ")


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
        path.parent.mkdir(parents=True, exist_ok=True)  # a benchmark's runs/logs on a fresh clone
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
    # vLLM installs its own stdout handler at import unless told not to; its records then reach ours.
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    for name in THIRD_PARTY:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):  # a library imported before this call printed on its own handler
            if isinstance(old, logging.StreamHandler) and not isinstance(old, logging.FileHandler):
                logger.removeHandler(old)
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


def attach_run_log(run_dir: str | Path, rank: int = 0, *, file_name: str = LOG_FILE) -> Path | None:
    """Start writing the run log in ``run_dir`` (what came before included); None when the console is not
    quiet (``--verbose``, or the trainer used from Python)."""
    if _handler is None:
        return None
    path = Path(run_dir) / (file_name if rank == 0 else f"{Path(file_name).stem}.rank{rank}.log")
    _handler.open(path)
    return path


def only_notices(path: Path) -> bool:
    """Whether a run log holds nothing but single-line records (the libraries' notices, e.g. DeepSpeed's
    accelerator line when a tiny model is first built, and verlog's detail lines): no raw output of a step that
    started (an engine's), nothing a run got far enough to write. A missing file holds nothing."""
    if not path.is_file():
        return True
    return all(_RECORD_LINE.match(line) for line in path.read_text(errors="replace").splitlines())


def is_quiet() -> bool:
    """Whether :func:`quiet_console` is in force (a library's own code may ask before it starts something loud)."""
    return _handler is not None


def detail(text: str) -> None:
    """A verlog line that would crowd the console (why a precision or a sampler was chosen): into the run log
    while quiet, on stderr (main process only) with ``--verbose`` or from Python."""
    if _handler is not None:
        record = {"name": "verlog", "levelno": logging.INFO, "levelname": "INFO", "msg": text}
        _handler.handle(logging.makeLogRecord(record))
    elif os.environ.get("RANK", "0") == "0":
        print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def native_output(what: str) -> Iterator[None]:
    """While quiet, what the process writes to its stdout and stderr file descriptors (native code included)
    goes to the run log, headed by ``what``; otherwise nothing changes. The console gets it back on exit."""
    if _handler is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            for fd in saved:
                os.dup2(sink.fileno(), fd)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace").strip()
            if text:
                record = {
                    "name": "native",
                    "levelno": logging.INFO,
                    "levelname": "INFO",
                    "msg": f"{what}:\n{text}",
                }
                _handler.handle(logging.makeLogRecord(record))
