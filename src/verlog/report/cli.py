"""The ``verlog report`` command line: its arguments, :func:`run_report` and ``python -m verlog.report``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from verlog.pipes import closed_pipe_ok
from verlog.report import plots
from verlog.report.build import PlotsWouldBeLost, write_report_and_metrics
from verlog.report.markdown import lines_word
from verlog.runkit.folder import METRICS_FILE, RunNotFoundError

REPORT_HELP = "Write RUN/report.md (plots, summary, last sampled turns) from a run folder, running or not."


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``verlog report`` (the positional's dest is ``run_dir``: ``args.run`` stays free)."""
    parser.add_argument(
        "run_dir",
        metavar="RUN",
        help="run folder (runs/<name>-NNNN), or runs/<name> for its highest-numbered folder",
    )
    parser.add_argument(
        "--samples", type=int, default=8, metavar="N", help="last N sampled turns to show (default 8)"
    )
    parser.add_argument(
        "--max-chars",
        type=int,
        default=2400,
        metavar="N",
        help="longest prompt or response shown; longer ones keep their head and tail (default 2400)",
    )
    parser.add_argument("--no-plots", action="store_true", help="tables and turns only (fast, no matplotlib)")


def add_report_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``report`` to a CLI's subparsers; the parser's default ``func`` is :func:`run_report`."""
    parser = subparsers.add_parser("report", help=REPORT_HELP, description=REPORT_HELP)
    add_report_arguments(parser)
    parser.set_defaults(func=run_report)
    return parser


def run_report(args: argparse.Namespace) -> int:
    """Run ``verlog report`` from parsed arguments; returns the exit status (2 when there is no such run)."""
    try:
        out, metrics = write_report_and_metrics(
            args.run_dir, samples=args.samples, max_chars=args.max_chars, plots=not args.no_plots
        )
    except RunNotFoundError as err:
        print(f"verlog report: error: {err}", file=sys.stderr)
        return 2
    except PlotsWouldBeLost as err:
        print(f"verlog report: error: {err}", file=sys.stderr)
        return 1
    if metrics.records and not args.no_plots and not plots.have_matplotlib():
        print(
            "verlog report: note: matplotlib is not installed: plots omitted (pip install matplotlib)",
            file=sys.stderr,
        )
    parts = [f"{metrics.updates} updates"]
    if not metrics.exists:
        parts = [f"no {METRICS_FILE} yet"]
    if metrics.skipped:
        parts.append(f"skipped {lines_word(metrics.skipped)} in {METRICS_FILE}")
    print(f"wrote {out} ({'; '.join(parts)})")
    return 0


@closed_pipe_ok
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verlog.report RUN``."""
    parser = argparse.ArgumentParser(prog="python -m verlog.report", description=REPORT_HELP)
    add_report_arguments(parser)
    return run_report(parser.parse_args(argv))
