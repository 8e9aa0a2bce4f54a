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

import argparse
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from verlog.samples import SAMPLES_FILE, count_lines, parse_jsonl, read_samples

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

REPORT_HELP = "Write RUN/report.md (plots, summary, last sampled turns) from a run folder, running or not."
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.toml"
REPORT_FILE = "report.md"
PLOTS_DIR = "report"
#: x-axis candidates, best first; the first one present and finite in every record is used.
X_KEYS = ("global_step", "update")
#: Cumulative wall-clock seconds, if the learner logs one (first found wins).
ELAPSED_KEYS = ("time/elapsed", "time/wall", "time/wall_time", "charts/elapsed", "wall_time", "elapsed")
#: Epoch timestamps: wall time is last minus first.
EPOCH_KEYS = ("timestamp", "_timestamp", "time")
#: ``time/<name>`` keys that are not a phase of the update (not stacked in the time split).
NOT_PHASES = {"elapsed", "wall", "wall_time", "total"}
#: Which way is better, by metric name (per-family keys share their overall key's name).
DIRECTION = {
    "episodic_return": "max",
    "return": "max",
    "success": "max",
    "progression": "max",
    "invalid_action_rate": "min",
    "explained_variance": "max",
    "turns_per_s": "max",
    "tokens_per_s": "max",
}
#: Prefixes whose ``<prefix>/<family>/<name>`` keys join a curated per-game chart.
FAMILY_PREFIXES = ("env", "charts")
DPI = 90
MAX_PANELS = 9
MAX_LEGEND = 12
MARKER_POINTS = 40
SMOOTH_POINTS = 50
#: The summary's "mean of the last N" window: one update's value is noisy.
RECENT = 10


class RunNotFoundError(FileNotFoundError):
    """The run folder does not exist (or is not a folder)."""


# ---------------------------------------------------------------------------------------------- reading
@dataclass
class MetricsLog:
    """The parsable records of ``metrics.jsonl`` and what had to be skipped."""

    records: list[dict[str, Any]] = field(default_factory=list)
    skipped_lines: list[int] = field(default_factory=list)
    #: The file does not end with a newline: a writer was cut mid-line or is writing right now.
    truncated_tail: bool = False
    exists: bool = False
    #: Updates logged again with other values (a run resumed from a checkpoint): the later values win.
    relogged: list[int] = field(default_factory=list)
    _columns: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    @property
    def skipped(self) -> int:
        return len(self.skipped_lines)

    def keys(self) -> list[str]:
        """Every key with at least one numeric value, in first-seen order."""
        seen: dict[str, None] = {}
        for record in self.records:
            for key, value in record.items():
                if key not in seen and _number(value) is not None:
                    seen[key] = None
        return list(seen)

    def column(self, key: str) -> np.ndarray:
        """One value per record; NaN where the key is missing or not a number."""
        if key not in self._columns:
            values = [_number(r.get(key)) for r in self.records]
            self._columns[key] = np.array([math.nan if v is None else v for v in values], dtype=float)
        return self._columns[key]

    def has_data(self, key: str) -> bool:
        """At least one finite value: a key logged only as NaN gets a note, not an empty plot."""
        return bool(np.isfinite(self.column(key)).any())

    def x(self) -> tuple[str, np.ndarray]:
        """The x-axis (name, values): ``global_step``, else ``update``, else the record number."""
        for key in X_KEYS:
            col = self.column(key)
            if col.size and np.isfinite(col).all():
                return key.replace("_", " "), col
        return "record", np.arange(1, len(self.records) + 1, dtype=float)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def read_metrics(path: str | os.PathLike[str]) -> MetricsLog:
    """Read ``metrics.jsonl``: one JSON object per line, bad or truncated lines skipped and counted."""
    path = Path(path)
    if not path.is_file():
        return MetricsLog()
    data = path.read_bytes()
    records, bad = parse_jsonl(data.split(b"\n"))
    records, relogged = _merge_updates(records)
    return MetricsLog(
        records=records,
        skipped_lines=bad,
        truncated_tail=bool(data) and not data.endswith(b"\n"),
        exists=True,
        relogged=relogged,
    )


def _merge_updates(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """One record per ``update``, in update order; returns the updates whose values were overwritten.

    Two lines for one update are either two parts of it (an eval line beside the train line: merged) or a
    run resumed from an earlier checkpoint that logs the update again (later values win, reported).
    Records without a numeric ``update`` are left as they are.
    """
    found = [_number(r.get("update")) for r in records]
    updates = [u for u in found if u is not None and math.isfinite(u)]
    if not records or len(updates) != len(records):
        return records, []
    merged: dict[float, dict[str, Any]] = {}
    relogged: set[int] = set()
    for u, record in zip(updates, records, strict=True):
        if u in merged:
            old = merged[u]
            if any(k in old and old[k] != v and k not in X_KEYS for k, v in record.items()):
                relogged.add(int(u))
            old.update(record)
        else:
            merged[u] = dict(record)
    return [merged[u] for u in sorted(merged)], sorted(relogged)


def resolve_run(path: str | os.PathLike[str]) -> Path:
    """The run folder: ``path`` itself, or the highest-numbered ``<path>-NNNN`` beside it."""
    path = Path(path)
    if path.is_dir():
        return path
    if path.exists():
        raise RunNotFoundError(f"{path} is a file, not a run folder")
    parent = path.parent if str(path.parent) else Path(".")
    pattern = re.compile(re.escape(path.name) + r"-(\d+)$")
    numbered = []
    if parent.is_dir():
        for child in parent.iterdir():
            match = pattern.match(child.name)
            if match and child.is_dir():
                numbered.append((int(match.group(1)), child))
    if numbered:
        return max(numbered)[1]
    hint = ""
    if parent.is_dir():
        runs = sorted(
            c.name for c in parent.iterdir() if (c / METRICS_FILE).exists() or (c / CONFIG_FILE).exists()
        )
        if runs:
            hint = f"; runs in {parent}: " + ", ".join(runs[-10:])
    raise RunNotFoundError(f"run folder {path} does not exist{hint}")


def split_key(key: str) -> tuple[str, str | None, str]:
    """``prefix/name`` -> (prefix, None, name); ``prefix/<family>/name`` -> (prefix, family, name)."""
    parts = key.split("/")
    if len(parts) == 1:
        return "", None, key
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return parts[0], "/".join(parts[1:-1]), parts[-1]


# ---------------------------------------------------------------------------------------------- charts
@dataclass(frozen=True)
class Panel:
    """One axes: an overall key and/or the per-family keys with one of ``family_names``."""

    title: str
    key: str
    family_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chart:
    file: str
    section: str
    title: str
    panels: tuple[Panel, ...]


CHARTS = (
    Chart(
        "return.png",
        "Games",
        "Episodic return",
        (Panel("episodic return", "charts/episodic_return", ("episodic_return", "return")),),
    ),
    Chart(
        "progression.png",
        "Games",
        "Progression",
        (Panel("progression", "env/progression", ("progression",)),),
    ),
    Chart("success.png", "Games", "Success rate", (Panel("success", "env/success", ("success",)),)),
    Chart(
        "invalid_actions.png",
        "Games",
        "Invalid-action rate",
        (Panel("invalid-action rate", "env/invalid_action_rate", ("invalid_action_rate",)),),
    ),
    Chart(
        "episode_length.png",
        "Games",
        "Episode length",
        (Panel("turns per episode", "charts/episodic_length", ("episodic_length", "length")),),
    ),
    Chart(
        "losses.png",
        "Learning",
        "Policy and value losses",
        (Panel("policy loss", "losses/policy_loss"), Panel("value loss", "losses/value_loss")),
    ),
    Chart(
        "kl.png",
        "Learning",
        "KL and clipping",
        (Panel("approx KL", "losses/approx_kl"), Panel("clip fraction", "losses/clipfrac")),
    ),
    Chart("entropy.png", "Learning", "Entropy", (Panel("entropy", "losses/entropy"),)),
    Chart(
        "explained_variance.png",
        "Learning",
        "Explained variance",
        (Panel("explained variance", "losses/explained_variance"),),
    ),
    Chart(
        "throughput.png",
        "Speed",
        "Throughput",
        (Panel("turns/s", "charts/turns_per_s"), Panel("tokens/s", "charts/tokens_per_s")),
    ),
)
SECTIONS = ("Games", "Learning", "Speed")


def _panel_keys(panel: Panel, keys: Sequence[str]) -> list[tuple[str, str]]:
    """(label, key) of the lines of a panel that exist in ``keys``: overall first, then the families."""
    lines = [("all", panel.key)] if panel.key in keys else []
    for key in keys:
        prefix, family, name = split_key(key)
        if family is not None and prefix in FAMILY_PREFIXES and name in panel.family_names:
            lines.append((_short(family), key))
    return lines


def _short(family: str) -> str:
    return family.removeprefix("verlog/")


# ---------------------------------------------------------------------------------------------- plotting
def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(n_panels: int, height: float = 3.0) -> tuple[Any, list[Any]]:
    """A grid of up to 3 columns with fixed margins (constrained layout would double the drawing time)."""
    from matplotlib.figure import Figure

    cols = min(n_panels, 3)
    rows = math.ceil(n_panels / cols)
    width, total_h = 4.4 * cols, height * rows
    fig = Figure(figsize=(width, total_h), dpi=DPI)
    fig.subplots_adjust(
        left=0.6 / width,
        right=1 - 0.15 / width,
        bottom=0.45 / total_h,
        top=1 - 0.3 / total_h,
        wspace=0.75 / 3.6,
        hspace=0.8 / (height - 0.8),
    )
    axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def _ema(y: np.ndarray, weight: float = 0.8) -> np.ndarray:
    out = np.empty_like(y)
    acc = y[0]
    for i, v in enumerate(y):
        acc = weight * acc + (1 - weight) * v
        out[i] = acc
    return out


def _draw_lines(ax: Any, x: np.ndarray, lines: list[tuple[str, np.ndarray]], xlabel: str, title: str) -> None:
    """Each series on its finite points; markers when few, a smoothed line over the raw one when many."""
    many = len(lines) > MAX_LEGEND
    for i, (label, y) in enumerate(lines):
        ok = np.isfinite(y)
        xs, ys = x[ok], y[ok]
        if xs.size == 0:
            continue
        overall = label == "all"
        kwargs: dict[str, Any] = {"label": label, "linewidth": 2.0 if overall and len(lines) > 1 else 1.2}
        if overall and len(lines) > 1:
            kwargs["color"] = "black"
        if many and not overall:
            kwargs["linewidth"] = 0.7
        if xs.size <= MARKER_POINTS:
            kwargs["marker"] = "o"
            kwargs["markersize"] = 3
        if xs.size >= SMOOTH_POINTS:
            (raw,) = ax.plot(xs, ys, alpha=0.25, linewidth=0.8, color=kwargs.get("color", f"C{i % 10}"))
            kwargs["color"] = raw.get_color()
            ax.plot(xs, _ema(ys), **kwargs)
        else:
            ax.plot(xs, ys, **kwargs)
    _style(ax, title, xlabel)
    if 1 < len(lines) <= MAX_LEGEND:
        ax.legend(fontsize=6, ncol=1 if len(lines) <= 6 else 2)


def _compact(value: float, _pos: object = None) -> str:
    """Step counts as 20k / 1.5M, so x tick labels stay short."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


def _style(ax: Any, title: str, xlabel: str) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(_compact))
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


def _save(fig: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)  # a viewer of a live run never sees half a PNG


# ---------------------------------------------------------------------------------------------- formatting
def _fmt(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    if value == int(value) and abs(value) < 1e12:
        return str(int(value))
    return f"{value:.4g}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h {m:02d}m {s:02d}s"
    if m:
        return f"{m}m {s:02d}s"
    return f"{s}s"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _fence(text: str, lang: str = "text") -> list[str]:
    """A fenced block that cannot be closed early by backticks inside the text (CommonMark rule)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [ticks + lang, text.rstrip("\n"), ticks]


def _clip(text: str, budget: int, head_share: float) -> str:
    """Keep the head and the tail of a long text (a prompt's instruction and its latest observation).

    The cuts snap to line ends when one is near, so no line is shown half.
    """
    if len(text) <= budget:
        return text
    head_n = int(budget * head_share)
    tail_n = budget - head_n
    head = text[:head_n]
    nl = head.rfind("\n")
    if nl >= head_n // 2:
        head = head[: nl + 1]
    tail = text[len(text) - tail_n :] if tail_n else ""
    nl = tail.find("\n")
    if 0 <= nl < tail_n // 2:
        tail = tail[nl + 1 :]
    cut = len(text) - len(head) - len(tail)
    return head.rstrip("\n") + f"\n[… {cut} characters cut …]\n" + tail


def _lines_word(n: int) -> str:
    return f"{n} malformed line{'s' if n != 1 else ''}"


def _skipped_note(n: int, file: str, lines: list[int], truncated: bool, last_line: int | None) -> str:
    where = ", ".join(str(i) for i in lines[:10]) + (", …" if len(lines) > 10 else "")
    note = f"skipped {_lines_word(n)} in {file} (line{'s' if n != 1 else ''} {where})"
    if truncated and last_line is not None and lines and lines[-1] == last_line:
        note += "; the last line is incomplete: the run may still be writing it, or it crashed mid-write"
    return note


# ---------------------------------------------------------------------------------------------- the report
@dataclass
class _Builder:
    run: Path
    metrics: MetricsLog
    plots: bool
    md: list[str] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)

    @property
    def plot_dir(self) -> Path:
        return self.run / PLOTS_DIR

    def image(self, fig: Any, file: str, alt: str) -> None:
        self.plot_dir.mkdir(exist_ok=True)
        path = self.plot_dir / file
        _save(fig, path)
        self.written.append(path)
        self.md += [f"![{alt}]({PLOTS_DIR}/{file})", ""]

    def note(self, text: str) -> None:
        self.md += [f"_{text}_", ""]


def _summary(b: _Builder, n_samples: int | None) -> None:
    m, run = b.metrics, b.run
    rows: list[list[str]] = [["run", f"`{run.name}`"]]
    if m.records:
        upd = m.column("update")
        last_upd = upd[np.isfinite(upd)]
        rows.append(
            [
                "updates",
                f"{len(m.records)}" + (f" (last: update {_fmt(last_upd[-1])})" if last_upd.size else ""),
            ]
        )
        steps = m.column("global_step")
        steps = steps[np.isfinite(steps)]
        rows.append(["global steps", _fmt(steps[-1]) if steps.size else "— (no `global_step`)"])
        wall = _wall_time(m)
        if wall is not None:
            rows.append(["wall time", f"{_duration(wall[0])} (from `{wall[1]}`)"])
        phases = _phase_keys(m)
        if phases:
            total = float(np.nansum([np.nansum(m.column(k)) for k in phases]))
            rows.append(["timed phases", f"{_duration(total)} (sum of `time/*` phases over all updates)"])
    metrics_path = run / METRICS_FILE
    if metrics_path.exists():
        age = max(time.time() - metrics_path.stat().st_mtime, 0.0)
        stamp = datetime.fromtimestamp(metrics_path.stat().st_mtime).isoformat(timespec="seconds")
        rows.append(["last write to metrics.jsonl", f"{stamp} ({_duration(age)} before this report)"])
    ckpt = run / "checkpoints"
    if ckpt.is_dir():
        entries = sorted((p.name for p in ckpt.iterdir() if not p.name.startswith(".")), key=_natural)
        rows.append(["checkpoints", f"{len(entries)}" + (f" (last: `{entries[-1]}`)" if entries else "")])
    else:
        rows.append(["checkpoints", "none"])
    rows.append(["sampled turns", "no samples.jsonl" if n_samples is None else str(n_samples)])
    b.md += ["## Summary", "", *_table(["", ""], rows), ""]

    if not m.records:
        return
    keys = m.keys()
    upd = m.column("update")
    table = []
    for chart in CHARTS:
        for panel in chart.panels:
            table.extend(_summary_row(m, key, upd) for _, key in _panel_keys(panel, keys))
    if table:
        header = ["metric", "last", f"mean of last {RECENT}", "best", "best at"]
        b.md += ["### Main charts", "", *_table(header, table), ""]


def _summary_row(m: MetricsLog, key: str, upd: np.ndarray) -> list[str]:
    y = m.column(key)
    ok = np.flatnonzero(np.isfinite(y))
    direction = DIRECTION.get(split_key(key)[2])
    if ok.size == 0:
        return [f"`{key}`", "—", "—", "—", ""]
    last = _fmt(y[ok[-1]])
    recent = _fmt(float(y[ok[-RECENT:]].mean()))
    if direction is None:
        return [f"`{key}`", last, recent, "—", ""]
    best_i = ok[np.argmax(y[ok])] if direction == "max" else ok[np.argmin(y[ok])]
    at = f"update {_fmt(upd[best_i])}" if math.isfinite(upd[best_i]) else f"record {best_i + 1}"
    return [f"`{key}`", last, recent, f"{_fmt(y[best_i])} ({direction})", at]


def _natural(name: str) -> list[Any]:
    """Sort key that puts update-9 before update-10."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]


def _wall_time(m: MetricsLog) -> tuple[float, str] | None:
    for key in ELAPSED_KEYS:
        y = m.column(key)
        y = y[np.isfinite(y)]
        if y.size:
            return float(y[-1]), key
    for key in EPOCH_KEYS:
        y = m.column(key)
        y = y[np.isfinite(y)]
        if y.size >= 2 and y.min() > 1e9:  # looks like a Unix time
            return float(y[-1] - y[0]), f"{key}, last minus first"
    return None


def _phase_keys(m: MetricsLog) -> list[str]:
    out = []
    for key in m.keys():
        prefix, family, name = split_key(key)
        if prefix == "time" and family is None and name not in NOT_PHASES:
            out.append(key)
    return out


def _charts(b: _Builder) -> set[str]:
    """The curated sections; returns the keys they used (the rest goes to 'Other metrics')."""
    m = b.metrics
    keys = [k for k in m.keys() if m.has_data(k)]
    xlabel, x = m.x()
    used: set[str] = set()
    for section in SECTIONS:
        b.md += [f"## {section}", ""]
        for chart in (c for c in CHARTS if c.section == section):
            b.md += [f"### {chart.title}", ""]
            panels = [(p, _panel_keys(p, keys)) for p in chart.panels]
            present = [(p, lines) for p, lines in panels if lines]
            missing = [p.key for p, lines in panels if not lines]
            for _, lines in present:
                used.update(k for _, k in lines)
            if not present:
                b.note(
                    f"No data for {' / '.join(f'`{k}`' for k in missing)} in {METRICS_FILE}: plot omitted."
                )
                continue
            if b.plots:
                fig, axes = _figure(len(present))
                for ax, (panel, lines) in zip(axes, present, strict=True):
                    series = [(label, m.column(k)) for label, k in lines]
                    _draw_lines(ax, x, series, xlabel, panel.title)
                b.image(fig, chart.file, chart.title)
                families = max(len(lines) for _, lines in present)
                if families > MAX_LEGEND:
                    b.note(f"{families} lines: legend omitted, see the summary table for each game.")
            if missing:
                b.note(
                    f"No data for {' / '.join(f'`{k}`' for k in missing)} in {METRICS_FILE}: panel omitted."
                )
        if section == "Speed":
            used.update(_time_split(b, x, xlabel))
    return used


def _time_split(b: _Builder, x: np.ndarray, xlabel: str) -> list[str]:
    m = b.metrics
    phases = _phase_keys(m)
    b.md += ["### Time per update", ""]
    if not phases:
        b.note(f"No `time/*` keys in {METRICS_FILE}: time split omitted.")
        return []
    cols = np.vstack([m.column(k) for k in phases])
    filled = np.nan_to_num(cols, nan=0.0)
    if b.plots:
        fig, (ax_s, ax_f) = _figure(2)
        labels = [k.removeprefix("time/") for k in phases]
        totals = filled.sum(axis=0)
        frac = np.divide(filled, totals, out=np.zeros_like(filled), where=totals > 0)
        for ax, data, title in ((ax_s, filled, "seconds per update"), (ax_f, frac, "share of the update")):
            if len(x) <= MARKER_POINTS:
                gap = float(np.median(np.diff(x))) if len(x) > 1 else abs(float(x[0]))
                width = 0.8 * (gap if gap > 0 else 1.0)
                bottom = np.zeros(len(x))
                for i, (label, row) in enumerate(zip(labels, data, strict=True)):
                    ax.bar(x, row, width=width, bottom=bottom, label=label, color=f"C{i % 10}")
                    bottom = bottom + row
            else:
                ax.stackplot(x, data, labels=labels, colors=[f"C{i % 10}" for i in range(len(labels))])
            _style(ax, title, xlabel)
        ax_s.legend(fontsize=6, loc="upper left")
        b.image(fig, "time_split.png", "Time split per update")
    grand = float(filled.sum())
    rows = []
    for key, col in zip(phases, cols, strict=True):
        ok = col[np.isfinite(col)]
        mean = float(ok.mean()) if ok.size else math.nan
        share = float(np.nansum(col)) / grand if grand > 0 else math.nan
        rows.append(
            [
                f"`{key}`",
                _fmt(mean),
                f"{share:.0%}" if math.isfinite(share) else "—",
                _fmt(ok[-1] if ok.size else None),
            ]
        )
    b.md += [*_table(["phase", "mean s / update", "share", "last"], rows), ""]
    return phases


def _other(b: _Builder, used: set[str]) -> None:
    """Every key the curated charts did not show, one figure per prefix, one panel per metric name."""
    m = b.metrics
    xlabel, x = m.x()
    skip = set(X_KEYS) | used
    groups: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for key in m.keys():
        if key in skip or not m.has_data(key):
            continue
        prefix, family, name = split_key(key)
        lines = groups.setdefault(prefix, {}).setdefault(name, [])
        lines.append(("all" if family is None else _short(family), key))
    b.md += ["## Other metrics", ""]
    if not groups:
        b.note("Every logged metric is in a chart above.")
        return
    for prefix, panels in groups.items():
        names = list(panels)
        title = f"{prefix}/" if prefix else "(no prefix)"
        b.md += [f"### {title}", "", ", ".join(f"`{k}`" for n in names for _, k in panels[n]), ""]
        if not b.plots:
            continue
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", prefix) or "misc"
        for part, start in enumerate(range(0, len(names), MAX_PANELS), start=1):
            chunk = names[start : start + MAX_PANELS]
            fig, axes = _figure(len(chunk), height=2.6)
            for ax, name in zip(axes, chunk, strict=True):
                _draw_lines(ax, x, [(label, m.column(k)) for label, k in panels[name]], xlabel, name)
            suffix = "" if part == 1 else f"_{part}"
            b.image(fig, f"other_{safe}{suffix}.png", f"{title} metrics")


def _samples(b: _Builder, total: int | None, last: int, max_chars: int) -> None:
    """The last ``last`` sampled turns; ``total`` is the line count of samples.jsonl (None: no file)."""
    path = b.run / SAMPLES_FILE
    b.md += ["## Last sampled turns", ""]
    if total is None:
        b.note(f"No {SAMPLES_FILE} in this run (the trainer writes it with `verlog.samples.SampleWriter`).")
        return
    if last <= 0:
        b.note(f"{total} turns in {SAMPLES_FILE}; none shown (`--samples 0`).")
        return
    read = read_samples(path, last=last)
    if read.skipped:
        note = f"> skipped {_lines_word(read.skipped)} in {SAMPLES_FILE} (among its last {min(last, total)} lines)"
        if read.truncated_tail:
            note += "; the last line is incomplete: the run may still be writing it, or it crashed mid-write"
        b.md += [note + ".", ""]
    if not read.records:
        b.note(f"{SAMPLES_FILE} holds no readable turn yet.")
        return
    b.md += [f"The last {len(read.records)} of {total} turns in {SAMPLES_FILE}, oldest first.", ""]
    for r in read.records:
        head = " · ".join(
            [
                f"update {r.get('update', '?')}",
                f"step {r.get('global_step', '?')}",
                f"`{r.get('family') or r.get('env_id', '?')}`",
                f"env {r.get('env_index', '?')}",
                f"episode {r.get('episode', '?')}",
                f"turn {r.get('turn', '?')}",
                str(r.get("source", "?")),
            ]
        )
        valid = r.get("action_valid")
        validity = "valid" if valid is True else "**invalid**" if valid is False else "validity unknown"
        reward = _number(r.get("reward"))
        progression = _number(r.get("progression"))
        action = str(r.get("action", "?")).replace("`", "'")
        b.md += [
            f"#### {head}",
            "",
            f"action `{action}` ({validity}) · reward {_fmt(reward)} · progression {_fmt(progression)}",
            "",
        ]
        prompt = str(r.get("prompt", ""))
        response = str(r.get("response", ""))
        b.md += [
            f"<details><summary>prompt ({len(prompt)} characters)</summary>",
            "",
            *_fence(_clip(prompt, max_chars, 1 / 3)),
            "",
            "</details>",
            "",
            f"response ({len(response)} characters):",
            "",
            *_fence(_clip(response, max_chars, 3 / 4)),
            "",
        ]


def _config(b: _Builder) -> None:
    path = b.run / CONFIG_FILE
    b.md += ["## Config", ""]
    if not path.is_file():
        b.note(f"No {CONFIG_FILE} in this run.")
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    shown = "\n".join(lines[:300]) + (f"\n# … {len(lines) - 300} more lines" if len(lines) > 300 else "")
    b.md += [f"<details><summary>{CONFIG_FILE}</summary>", "", *_fence(shown, "toml"), "", "</details>", ""]


def _all_metrics(b: _Builder) -> None:
    m = b.metrics
    rows = []
    for key in m.keys():
        y = m.column(key)
        ok = y[np.isfinite(y)]
        if ok.size:
            rows.append([f"`{key}`", str(ok.size), _fmt(ok[0]), _fmt(ok[-1]), _fmt(ok.min()), _fmt(ok.max())])
        else:
            rows.append([f"`{key}`", "0", "—", "—", "—", "—"])
    b.md += ["## All metrics", "", *_table(["key", "points", "first", "last", "min", "max"], rows), ""]


def write_report(
    run: str | os.PathLike[str], *, samples: int = 8, max_chars: int = 2400, plots: bool = True
) -> Path:
    """Write ``RUN/report.md`` (and ``RUN/report/*.png``) from whatever the run folder holds now.

    Raises :class:`RunNotFoundError` when there is no such run; anything else (no metrics yet, bad lines,
    missing keys, no matplotlib) becomes a note in the report.
    """
    return _write_report(run, samples=samples, max_chars=max_chars, plots=plots)[0]


def _write_report(
    run: str | os.PathLike[str], *, samples: int, max_chars: int, plots: bool
) -> tuple[Path, MetricsLog]:
    run = resolve_run(run)
    metrics = read_metrics(run / METRICS_FILE)
    have_mpl = _have_matplotlib()
    b = _Builder(run=run, metrics=metrics, plots=plots and have_mpl and bool(metrics.records))
    b.md += [
        f"# Run report: {run.name}",
        "",
        f"_Written by `verlog report` at {datetime.now().isoformat(timespec='seconds')} from `{run}`._",
        "",
    ]
    if metrics.skipped:
        last_line = _last_line_number(run / METRICS_FILE) if metrics.truncated_tail else None
        note = _skipped_note(
            metrics.skipped, METRICS_FILE, metrics.skipped_lines, metrics.truncated_tail, last_line
        )
        b.md += [f"> {note}.", ""]
    if not metrics.exists:
        b.md += [
            f"> No {METRICS_FILE} yet: nothing to plot (has the trainer finished its first update?).",
            "",
        ]
    elif not metrics.records:
        b.md += [f"> {METRICS_FILE} holds no readable record yet: nothing to plot.", ""]
    if metrics.relogged:
        shown = ", ".join(str(u) for u in metrics.relogged[:10]) + (
            ", …" if len(metrics.relogged) > 10 else ""
        )
        b.md += [
            f"> {len(metrics.relogged)} update{'s were' if len(metrics.relogged) != 1 else ' was'} "
            "logged again with other values (a resumed run?): "
            f"the later values are shown (updates {shown}).",
            "",
        ]
    if metrics.records and plots and not have_mpl:
        b.md += [
            "> matplotlib is not installed: plots omitted (`pip install matplotlib`, or the `train` extra).",
            "",
        ]

    samples_path = run / SAMPLES_FILE
    n_samples = count_lines(samples_path) if samples_path.is_file() else None
    _summary(b, n_samples)
    if metrics.records:
        used = _charts(b)
        _other(b, used)
    _samples(b, n_samples, samples, max_chars)
    _config(b)
    if metrics.records:
        _all_metrics(b)

    out = run / REPORT_FILE
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(b.md).rstrip("\n") + "\n", encoding="utf-8")
    os.replace(tmp, out)  # a viewer of a live run never sees half a page
    _drop_stale_plots(b)
    return out, metrics


def _last_line_number(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (not data.endswith(b"\n"))


def _drop_stale_plots(b: _Builder) -> None:
    """Plots of an earlier report that this one no longer makes (e.g. after ``--no-plots``) would mislead."""
    if not b.plot_dir.is_dir():
        return
    keep = {p.name for p in b.written}
    for path in b.plot_dir.iterdir():
        if path.suffix in (".png", ".tmp") and path.name not in keep:
            path.unlink()


# ---------------------------------------------------------------------------------------------- CLI
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
        out, metrics = _write_report(
            args.run_dir, samples=args.samples, max_chars=args.max_chars, plots=not args.no_plots
        )
    except RunNotFoundError as err:
        print(f"verlog report: error: {err}", file=sys.stderr)
        return 2
    parts = [f"{len(metrics.records)} updates"]
    if not metrics.exists:
        parts = [f"no {METRICS_FILE} yet"]
    if metrics.skipped:
        parts.append(f"skipped {_lines_word(metrics.skipped)} in {METRICS_FILE}")
    print(f"wrote {out} ({'; '.join(parts)})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verlog.report RUN``."""
    parser = argparse.ArgumentParser(prog="python -m verlog.report", description=REPORT_HELP)
    add_report_arguments(parser)
    return run_report(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
