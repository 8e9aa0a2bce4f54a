"""``verlog report RUN``: one Markdown page with the plots and the last sampled turns of a run.

A run folder (``runs/<name>-NNNN/``) is read as it is, whether the trainer is still writing it or died
mid-line: what parses is shown, what does not is skipped and counted, and a missing metric drops its plot
with a note instead of the whole report. The curated charts cover the metric names the learner logs
(CleanRL style: ``charts/``, ``env/``, ``losses/``, ``time/``); any other key still shows up, grouped by its
prefix, so a new metric needs no change here. Per-game keys are ``<prefix>/<family>/<name>`` (the family
may itself hold slashes, e.g. ``env/verlog/BabyAI-GoTo-v0/progression``).

Output: ``RUN/report.md`` and PNGs in ``RUN/report/``. Plots use matplotlib's object API with the Agg
canvas (no pyplot, no display); without matplotlib the page is written with its tables only.
"""

from __future__ import annotations

# Every public name of the former single module, ``__all__`` unchanged.
from verlog.report.build import (  # noqa: F401
    DIRECTION,
    ELAPSED_KEYS,
    EPOCH_KEYS,
    NOT_PHASES,
    PLOTS_DIR,
    RECENT,
    REPORT_FILE,
    write_report,
)
from verlog.report.cli import REPORT_HELP, add_report_arguments, add_report_command, main, run_report
from verlog.report.plots import (  # noqa: F401
    CHARTS,
    DPI,
    FAMILY_PREFIXES,
    MARKER_POINTS,
    MAX_LEGEND,
    MAX_PANELS,
    SECTIONS,
    SMOOTH_POINTS,
    Chart,
    Panel,
)
from verlog.report.reading import X_KEYS, MetricsLog, read_metrics, split_key  # noqa: F401
from verlog.runkit.folder import CONFIG_FILE, METRICS_FILE, RunNotFoundError, resolve_run  # noqa: F401

__all__ = [
    "REPORT_HELP",
    "MetricsLog",
    "RunNotFoundError",
    "add_report_arguments",
    "add_report_command",
    "main",
    "read_metrics",
    "resolve_run",
    "run_report",
    "write_report",
]
