"""The plot of a real-model demonstration's results file: one panel per seed, drawn from the stored curves.

Each panel shows training success (episode-weighted over a sliding window), the validation panel's held-out
success ± SE, the training invalid-action rate, curriculum stage changes and watchdog rollbacks (dotted lines),
and the judge's evaluations (zero-shot at update 0, trained at the last update) with ± 1 SE bars, and random's
success on the same episodes, where the seed was judged against it, as a dashed line with its ± 1 SE band.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import window


def _smoothed_success(curve: Sequence[dict[str, Any]]) -> list[float]:
    k = max(1, round(0.1 * len(curve)))
    out = []
    for i in range(len(curve)):
        w = window(curve[max(0, i - k + 1) : i + 1])
        out.append(w["success"] if w["episodes"] >= 5 else math.nan)
    return out


def _events(curve: Sequence[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    """Updates where ``key`` changed, with its new value."""
    events, last = [], None
    for record in curve:
        value = record.get(key)
        if value is not None and last is not None and value != last:
            events.append((int(record["update"]), value))
        last = value if value is not None else last
    return events


def _seed_panel(ax: Any, entry: dict[str, Any]) -> None:
    curve = entry["curve"]
    updates = [int(r["update"]) for r in curve]
    ax.plot(updates, _smoothed_success(curve), color="tab:blue", label="training success (sliding window)")
    ax.plot(updates, [r.get("env/invalid_action_rate") for r in curve], color="grey", lw=0.8,
            label="training invalid-action rate")  # fmt: skip
    panel = [r for r in curve if r.get("eval/success") is not None]
    if panel:
        ax.errorbar([int(r["update"]) for r in panel], [r["eval/success"] for r in panel],
                    yerr=[r.get("eval/success_se") or 0.0 for r in panel], color="tab:purple", marker=".",
                    capsize=3, label="validation panel success ± SE (held out)")  # fmt: skip
    for update, stage in _events(curve, "curriculum/stage"):
        ax.axvline(update, color="tab:orange", ls=":", lw=1)
        ax.annotate(f"stage {stage:g}", (update, 0.97), fontsize=7, color="tab:orange", rotation=90, va="top")
    for update, _ in _events(curve, "watchdog/rollbacks"):
        ax.axvline(update, color="tab:red", ls="--", lw=1)
        ax.annotate("rollback", (update, 0.6), fontsize=7, color="tab:red", rotation=90)
    last = updates[-1] if updates else 0
    for x, figures, name in ((0, entry["zero_shot"], "zero-shot"), (last, entry["trained"], "trained")):
        ax.errorbar(x, figures["success"], yerr=figures["success_se"], fmt="o", color="tab:green", capsize=4)
        ax.errorbar(x, figures["invalid_action_rate"], yerr=figures["invalid_se"], fmt="s", color="tab:red",
                    capsize=4)  # fmt: skip
        ax.annotate(f"{name}: {figures['success']:.2f}", (x, figures["success"]), xytext=(6, 6),
                    textcoords="offset points", fontsize=8)  # fmt: skip
    random = entry.get("random")
    title = f"seed {entry['seed']}: {entry['success_gain']:+.2f} ({entry['z']:.1f} SE)"
    if random is not None:
        p, se = random["success"], random["success_se"]
        ax.axhline(p, color="tab:brown", ls="--", lw=1, label="random agent: success ± SE (same episodes)")
        ax.axhspan(p - se, p + se, color="tab:brown", alpha=0.12)
        title += f",\nvs random {entry['random_gain']:+.2f} ({entry['z_random']:.1f} SE)"
    verdict = "pass" if entry["passed"] else "FAIL"
    ax.set(xlabel="PPO update", ylim=(0, 1), title=f"{title}, {verdict}")
    ax.grid(True, alpha=0.3)


def plot(results: dict[str, Any], path: Path) -> None:
    """Every seed of ``results`` side by side, one shared legend and a title naming the task."""
    from matplotlib.figure import Figure

    seeds = results["seeds"]
    fig = Figure(figsize=(max(9.0, 4.2 * len(seeds) + 1.0), 4.8))  # wide enough for the legend
    axes = fig.subplots(1, len(seeds), squeeze=False, sharey=True)[0]
    for ax, entry in zip(axes, seeds, strict=True):
        _seed_panel(ax, entry)
    axes[0].set_ylabel("rate")
    axes[0].plot([], [], "o", color="tab:green", label="judge: success ± SE (same held-out episodes)")
    axes[0].plot([], [], "s", color="tab:red", label="judge: invalid-action rate ± SE")
    task = results["task"]
    fig.suptitle(f"PPO, SmolLM2-135M-Instruct, {task['env_id']} (CPU)", fontsize=10)
    legend: dict[str, Any] = {}  # every label once, from whichever seed drew it (a seed may have no panel)
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), fontsize=8, loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
