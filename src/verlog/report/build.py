"""Assembling ``RUN/report.md``: summary, chart sections, other metrics, last sampled turns, config."""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from verlog.report import plots as plotting
from verlog.report.markdown import (
    clip,
    duration,
    fence,
    fmt,
    lines_word,
    md_table,
    skipped_note,
)
from verlog.report.plots import (
    CHARTS,
    MARKER_POINTS,
    MAX_LEGEND,
    MAX_PANELS,
    SECTIONS,
    draw_lines,
    figure,
    panel_keys,
    save_figure,
    short,
    style,
)
from verlog.report.reading import (
    X_KEYS,
    MetricsLog,
    number,
    read_metrics,
    split_key,
)
from verlog.runkit.folder import CONFIG_FILE, METRICS_FILE, SAMPLES_FILE, checkpoint_dir, resolve_run
from verlog.runkit.samples import count_lines, read_samples

REPORT_FILE = "report.md"
PLOTS_DIR = "report"
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
#: The summary's "mean of the last N" window: one update's value is noisy.
RECENT = 10


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
        save_figure(fig, path)
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
                f"{m.updates}"
                + (f" (last: update {fmt(last_upd[-1])})" if last_upd.size else "")
                + (f", after {m.warmup_rows} critic warm-up iterations" if m.warmup_rows else ""),
            ]
        )
        steps = m.column("global_step")
        steps = steps[np.isfinite(steps)]
        rows.append(["global steps", fmt(steps[-1]) if steps.size else "— (no `global_step`)"])
        wall = _wall_time(m)
        if wall is not None:
            rows.append(["wall time", f"{duration(wall[0])} (from `{wall[1]}`)"])
        phases = _phase_keys(m)
        if phases:
            total = float(np.nansum([np.nansum(m.column(k)) for k in phases]))
            rows.append(["timed phases", f"{duration(total)} (sum of `time/*` phases over all updates)"])
    metrics_path = run / METRICS_FILE
    if metrics_path.exists():
        age = max(time.time() - metrics_path.stat().st_mtime, 0.0)
        stamp = datetime.fromtimestamp(metrics_path.stat().st_mtime).isoformat(timespec="seconds")
        rows.append(["last write to metrics.jsonl", f"{stamp} ({duration(age)} before this report)"])
    ckpt = checkpoint_dir(run)
    if ckpt.is_dir():
        entries = sorted((p.name for p in ckpt.iterdir() if not p.name.startswith(".")), key=_natural)
        rows.append(["checkpoints", f"{len(entries)}" + (f" (last: `{entries[-1]}`)" if entries else "")])
    else:
        rows.append(["checkpoints", "none"])
    rows.append(["sampled turns", "no samples.jsonl" if n_samples is None else str(n_samples)])
    b.md += ["## Summary", "", *md_table(["", ""], rows), ""]

    if not m.records:
        return
    keys = m.keys()
    upd = m.column("update")
    table = []
    for chart in CHARTS:
        for panel in chart.panels:
            table.extend(_summary_row(m, key, upd) for _, key in panel_keys(panel, keys))
    if table:
        header = ["metric", "last", f"mean of last {RECENT}", "best", "best at"]
        b.md += ["### Main charts", "", *md_table(header, table), ""]


def _summary_row(m: MetricsLog, key: str, upd: np.ndarray) -> list[str]:
    y = m.column(key)
    ok = np.flatnonzero(np.isfinite(y))
    direction = DIRECTION.get(split_key(key)[2])
    if ok.size == 0:
        return [f"`{key}`", "—", "—", "—", ""]
    last = fmt(y[ok[-1]])
    recent = fmt(float(y[ok[-RECENT:]].mean()))
    if direction is None:
        return [f"`{key}`", last, recent, "—", ""]
    best_i = ok[np.argmax(y[ok])] if direction == "max" else ok[np.argmin(y[ok])]
    at = f"update {fmt(upd[best_i])}" if math.isfinite(upd[best_i]) else f"record {best_i + 1}"
    return [f"`{key}`", last, recent, f"{fmt(y[best_i])} ({direction})", at]


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
            panels = [(p, panel_keys(p, keys)) for p in chart.panels]
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
                fig, axes = figure(len(present))
                for ax, (panel, lines) in zip(axes, present, strict=True):
                    series = [(label, m.column(k)) for label, k in lines]
                    draw_lines(ax, x, series, xlabel, panel.title)
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
        fig, (ax_s, ax_f) = figure(2)
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
            style(ax, title, xlabel)
            plotting.around_single_x(ax, x)
        # Headroom above the tallest bar for the legend, so it never hides a bar.
        ax_s.set_ylim(0, max(float(totals.max()), 1e-9) * (1.2 + 0.12 * math.ceil(len(labels) / 3)))
        ax_f.set_ylim(0, 1)
        ax_s.legend(fontsize=6, loc="upper left", ncol=min(3, len(labels)))
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
                fmt(mean),
                f"{share:.0%}" if math.isfinite(share) else "—",
                fmt(ok[-1] if ok.size else None),
            ]
        )
    b.md += [*md_table(["phase", "mean s / update", "share", "last"], rows), ""]
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
        lines.append(("all" if family is None else short(family), key))
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
            fig, axes = figure(len(chunk), height=2.6)
            for ax, name in zip(axes, chunk, strict=True):
                draw_lines(ax, x, [(label, m.column(k)) for label, k in panels[name]], xlabel, name)
            suffix = "" if part == 1 else f"_{part}"
            b.image(fig, f"other_{safe}{suffix}.png", f"{title} metrics")


def _samples(b: _Builder, total: int | None, last: int, max_chars: int) -> None:
    """The last ``last`` sampled turns; ``total`` is the line count of samples.jsonl (None: no file)."""
    path = b.run / SAMPLES_FILE
    b.md += ["## Last sampled turns", ""]
    if total is None:
        b.note(
            f"No {SAMPLES_FILE} in this run (the trainer writes it with `verlog.runkit.samples.SampleWriter`)."
        )
        return
    if last <= 0:
        b.note(f"{total} turns in {SAMPLES_FILE}; none shown (`--samples 0`).")
        return
    read = read_samples(path, last=last)
    if read.skipped:
        note = f"> skipped {lines_word(read.skipped)} in {SAMPLES_FILE} (among its last {min(last, total)} lines)"
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
        reward = number(r.get("reward"))
        progression = number(r.get("progression"))
        action = str(r.get("action", "?")).replace("`", "'")
        b.md += [
            f"#### {head}",
            "",
            f"action `{action}` ({validity}) · reward {fmt(reward)} · progression {fmt(progression)}",
            "",
        ]
        prompt = str(r.get("prompt", ""))
        response = str(r.get("response", ""))
        b.md += [
            f"<details><summary>prompt ({len(prompt)} characters)</summary>",
            "",
            *fence(clip(prompt, max_chars, 1 / 3)),
            "",
            "</details>",
            "",
            f"response ({len(response)} characters):",
            "",
            *fence(clip(response, max_chars, 3 / 4)),
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
    b.md += [f"<details><summary>{CONFIG_FILE}</summary>", "", *fence(shown, "toml"), "", "</details>", ""]


def _all_metrics(b: _Builder) -> None:
    m = b.metrics
    rows = []
    for key in m.keys():
        y = m.column(key)
        ok = y[np.isfinite(y)]
        if ok.size:
            rows.append([f"`{key}`", str(ok.size), fmt(ok[0]), fmt(ok[-1]), fmt(ok.min()), fmt(ok.max())])
        else:
            rows.append([f"`{key}`", "0", "—", "—", "—", "—"])
    b.md += ["## All metrics", "", *md_table(["key", "points", "first", "last", "min", "max"], rows), ""]


class PlotsWouldBeLost(RuntimeError):
    """A report with plots exists and this one could draw none (no matplotlib): the old one is kept."""


def write_report(
    run: str | os.PathLike[str], *, samples: int = 8, max_chars: int = 2400, plots: bool = True
) -> Path:
    """Write ``RUN/report.md`` (and ``RUN/report/*.png``) from whatever the run folder holds now.

    Raises :class:`RunNotFoundError` when there is no such run and :class:`PlotsWouldBeLost` rather than
    replace a report that has plots with one without (no matplotlib here); anything else (no metrics yet, bad lines,
    missing keys, no matplotlib) becomes a note in the report.
    """
    return write_report_and_metrics(run, samples=samples, max_chars=max_chars, plots=plots)[0]


def write_report_and_metrics(
    run: str | os.PathLike[str], *, samples: int, max_chars: int, plots: bool
) -> tuple[Path, MetricsLog]:
    run = resolve_run(run)
    metrics = read_metrics(run / METRICS_FILE)
    have_mpl = plotting.have_matplotlib()
    if plots and not have_mpl and any((run / PLOTS_DIR).glob("*.png")):
        raise PlotsWouldBeLost(
            f"matplotlib is not installed, and {run / REPORT_FILE} has plots: kept as it is "
            "(pip install matplotlib, or --no-plots to write one without them)"
        )
    b = _Builder(run=run, metrics=metrics, plots=plots and have_mpl and bool(metrics.records))
    b.md += [
        f"# Run report: {run.name}",
        "",
        f"_Written by `verlog report` at {datetime.now().isoformat(timespec='seconds')} from `{run}`._",
        "",
    ]
    if metrics.skipped:
        last_line = _last_line_number(run / METRICS_FILE) if metrics.truncated_tail else None
        note = skipped_note(
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
