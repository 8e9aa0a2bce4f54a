"""The chart catalogue and its plotting: matplotlib's object API on the Agg canvas, imported lazily."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verlog.report.reading import split_key

#: Prefixes whose ``<prefix>/<family>/<name>`` keys join a curated per-game chart.
FAMILY_PREFIXES = ("env", "charts")
DPI = 90
MAX_PANELS = 9
MAX_LEGEND = 12
MARKER_POINTS = 40
SMOOTH_POINTS = 50


# ---------------------------------------------------------------------------------------------- charts
@dataclass(frozen=True)
class Panel:
    """One axes: an overall key and/or the per-family keys with one of ``family_names``, more ``extra`` keys,
    and every key that starts with ``prefix`` (each line labelled by what follows it)."""

    title: str
    key: str
    family_names: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    prefix: str = ""


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
        "panel.png",
        "Games",
        "Validation panel (held-out episodes)",
        (
            Panel("panel success", "eval/success"),
            Panel("panel invalid-action rate", "eval/invalid_action_rate"),
        ),
    ),
    Chart(
        "curriculum.png",
        "Games",
        "Curriculum stage and watchdog rollbacks",
        (Panel("curriculum stage", "curriculum/stage"), Panel("rollbacks", "watchdog/rollbacks")),
    ),
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
    Chart(
        "entropy.png",
        "Learning",
        "Entropy, and how much the answer depends on the state",
        (
            Panel(
                "entropy (each turn's, and the mean answer's)",
                "losses/entropy",
                extra=("losses/answer_entropy",),
            ),
            Panel("I(state; answer), nats", "losses/answer_information"),
        ),
    ),
    Chart(
        "explained_variance.png",
        "Learning",
        "Explained variance",
        (Panel("explained variance", "losses/explained_variance"),),
    ),
    Chart(
        "bootstrap.png",
        "Learning",
        "The critic's bootstrap at each batch end against the return that followed it",
        (
            Panel("value and return", "critic/bootstrap_value", extra=("critic/bootstrap_return",)),
            Panel("error (value - return)", "critic/bootstrap_error", extra=("critic/bootstrap_abs_error",)),
        ),
    ),
    Chart(
        "achievements.png",
        "Games",
        "Achievement unlock rates (Crafter: share of the update's finished episodes)",
        tuple(
            Panel(f"{verb} ...", "", prefix=f"achievements/{verb}_")
            for verb in ("collect", "place", "make", "eat", "defeat")
        )
        + (Panel("wake up", "achievements/wake_up"),),
    ),
    Chart(
        "throughput.png",
        "Speed",
        "Throughput",
        (Panel("turns/s", "charts/turns_per_s"), Panel("tokens/s", "charts/tokens_per_s")),
    ),
)
SECTIONS = ("Games", "Learning", "Speed")


def panel_keys(panel: Panel, keys: Sequence[str]) -> list[tuple[str, str]]:
    """(label, key) of the lines of a panel that exist in ``keys``: overall first, then the families."""
    lines = [("all" if not panel.extra else panel.key.split("/")[-1], panel.key)] if panel.key in keys else []
    lines += [(key.split("/")[-1], key) for key in panel.extra if key in keys]
    if panel.prefix:
        lines += [(key[len(panel.prefix) :], key) for key in keys if key.startswith(panel.prefix)]
    for key in keys:
        prefix, family, name = split_key(key)
        if family is not None and prefix in FAMILY_PREFIXES and name in panel.family_names:
            lines.append((short(family), key))
    return lines


def short(family: str) -> str:
    return family.removeprefix("verlog/")


# ---------------------------------------------------------------------------------------------- plotting
def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def figure(n_panels: int, height: float = 3.0) -> tuple[Any, list[Any]]:
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


def draw_lines(ax: Any, x: np.ndarray, lines: list[tuple[str, np.ndarray]], xlabel: str, title: str) -> None:
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
    style(ax, title, xlabel)
    around_single_x(ax, x)
    if 1 < len(lines) <= MAX_LEGEND:
        ax.legend(fontsize=6, ncol=1 if len(lines) <= 6 else 2)


def around_single_x(ax: Any, x: np.ndarray) -> None:
    """One x value (a single update so far): a marker in the middle with a tick either side, not a point
    pressed against matplotlib's default ±5% range."""
    values = np.unique(x[np.isfinite(x)])
    if values.size == 1:
        ax.set_xlim(values[0] - 1, values[0] + 1)


def _compact(value: float, _pos: object = None) -> str:
    """Step counts as 20k / 1.5M, so x tick labels stay short."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


def style(ax: Any, title: str, xlabel: str) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(_compact))
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


def save_figure(fig: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)  # a viewer of a live run never sees half a PNG
