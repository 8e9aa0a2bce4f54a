"""What an evaluation leaves in its folder besides ``episodes.jsonl``: ``summary.json``, ``results.md`` (a
markdown table) and ``scores.png`` (BALROG scores with standard-error bars), plus the rich console table.
Crafter's tasks also show Crafter's own score (:mod:`verlog.evaluation.crafter_score`) with its bootstrap SE."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
from pathlib import Path
from typing import Any

from verlog.evaluation.suites import short_name

__all__ = [
    "PLOT_FILE",
    "SUMMARY_FILE",
    "TABLE_FILE",
    "EpisodeProgress",
    "console_table",
    "machine",
    "markdown",
    "plot",
    "write",
]

SUMMARY_FILE = "summary.json"
TABLE_FILE = "results.md"
PLOT_FILE = "scores.png"


def machine() -> dict[str, Any]:
    """The machine the figures were measured on (CPU model, cores, Python, torch and GPU if loaded)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
    }
    import sys

    torch = sys.modules.get("torch")  # only reported when the run used it
    if torch is not None:
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _pm(mean: float | None, se: float, digits: int = 1) -> str:
    if mean is None or not math.isfinite(mean):
        return "-"
    return f"{mean:.{digits}f} ± {se:.{digits}f}"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _tasks(n: int) -> str:
    return "1 task" if n == 1 else f"all {n} tasks"


def _crafter(summary: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(task, its figures) for every task scored with Crafter's score."""
    return [(short_name(task), s) for task, s in summary["tasks"].items() if "crafter_score" in s]


def _crafter_markdown(summary: dict[str, Any]) -> str:
    """Crafter's score of each Crafter task, beside its return (empty without a Crafter task)."""
    rows = _crafter(summary)
    if not rows:
        return ""
    lines = ["| task | episodes | Crafter score ± SE | return ± SE |", "|---|---:|---:|---:|"]
    for task, s in rows:
        lines.append(
            f"| {task} | {s['episodes']} | {_pm(s['crafter_score'], s['crafter_score_se'], 2)} "
            f"| {_pm(s['mean_return'], s['return_se'], 2)} |"
        )
    method = rows[0][1].get("crafter_score_se_method", "bootstrap over episodes")
    return (
        "\n\n"
        + "\n".join(lines)
        + "\n\nCrafter score = the Crafter paper's exp(mean ln(1 + s_i)) - 1 over the 22 "
        f"achievements' success rates s_i in % (all 22 count); SE: {method}.\n"
    )


def markdown(summary: dict[str, Any]) -> str:
    """The summary as markdown: one row per task, then one per game and the overall score."""
    header = (
        "| task | game | episodes | score ± SE | success % ± SE | length ± SE | invalid % |\n"
        "|---|---|---:|---:|---:|---:|---:|"
    )
    rows = [header]
    if summary.get("agent", {}).get("constrain"):  # BALROG parses free text: these are not its scores
        rows.insert(0, "Answers constrained to the valid actions: not BALROG's protocol.\n")
    for task, s in summary["tasks"].items():
        rows.append(
            f"| {short_name(task)} | {s['game']} | {s['episodes']} | {_pm(s['score'], s['score_se'])} "
            f"| {_pm(s['success_rate'], s['success_se'])} | {_pm(s['mean_length'], s['length_se'])} "
            f"| {_num(s['invalid_action_rate'])} |"
        )
    for game, s in summary["games"].items():
        rows.append(
            f"| **{game}** ({_tasks(s['tasks'])}) | | {s['episodes']} | **{_pm(s['score'], s['score_se'])}** "
            f"| {_pm(s['success_rate'], s['success_se'])} | {_pm(s['mean_length'], s['length_se'])} "
            f"| {_num(s['invalid_action_rate'])} |"
        )
    total = summary["overall"]
    rows.append(
        f"| **overall** (mean of {total['games']} game{'s' if total['games'] != 1 else ''}) | | "
        f"| **{_pm(total['score'], total['score_se'])}** | | | |"
    )
    agent = summary["agent"]
    title = f"# {agent.get('model', agent['agent'])} on {summary['suite']}\n\n"
    note = (
        f"\n\n{summary['episodes_per_task']} episodes per task, seeds derived from base seed {summary['seed']}; "
        f"score = BALROG progression x 100 (mean ± population std / sqrt(n)); overall = mean of game scores. "
        f"{summary['date']}, {summary['machine']['cpu']}.\n"
    )
    return title + "\n".join(rows) + note + _crafter_markdown(summary)


def can_plot() -> bool:
    """matplotlib is importable (it is in the ``train`` extra, not in the core install)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot(summary: dict[str, Any], path: Path) -> bool:
    """Horizontal bars of task, game and overall scores with SE error bars; False without matplotlib."""
    if not can_plot():
        return False
    from matplotlib.figure import Figure

    labels, values, errors, colors = [], [], [], []
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:olive")
    game_color = {game: palette[i % len(palette)] for i, game in enumerate(summary["games"])}
    total = summary["overall"]
    labels.append("overall")
    values.append(total["score"])
    errors.append(total["score_se"])
    colors.append("black")
    for game, s in summary["games"].items():
        labels.append(f"{game} (all)")
        values.append(s["score"])
        errors.append(s["score_se"])
        colors.append(game_color[game])
    for task, s in summary["tasks"].items():
        labels.append(short_name(task))
        values.append(s["score"])
        errors.append(s["score_se"])
        colors.append(game_color.get(s["game"], "grey"))
    fig = Figure(figsize=(8, 1.2 + 0.28 * len(labels)))
    ax = fig.add_subplot()
    ys = list(range(len(labels)))[::-1]
    ax.barh(ys, values, xerr=errors, color=colors, alpha=0.85, capsize=3, error_kw={"elinewidth": 1})
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlim(0, 105)
    ax.set_xlabel("BALROG score (progression x 100), ± standard error")
    agent = summary["agent"]
    ax.set_title(
        f"{agent.get('model', agent['agent'])} on {summary['suite']}, "
        f"{summary['episodes_per_task']} episodes per task",
        fontsize=9,
    )
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def write(summary: dict[str, Any], out: Path) -> list[Path]:
    """Write summary.json, results.md and scores.png into ``out``; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / SUMMARY_FILE, out / TABLE_FILE]
    (out / SUMMARY_FILE).write_text(json.dumps(_finite(summary), indent=2, allow_nan=False) + "\n")
    (out / TABLE_FILE).write_text(markdown(summary))
    if plot(summary, out / PLOT_FILE):
        written.append(out / PLOT_FILE)
    return written


def _finite(value: Any) -> Any:
    """NaN and infinities as null: strict JSON (a task with no steps has no invalid-action rate)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def console_table(summary: dict[str, Any]) -> Any:
    """The per-game table (and per task for short suites) as a rich Table."""
    from rich.table import Table

    agent = summary["agent"]
    constrained = " (answers constrained to valid actions)" if agent.get("constrain") else ""
    table = Table(title=f"{agent.get('model', agent['agent'])} on {summary['suite']}{constrained}")
    crafter = bool(_crafter(summary))  # a column for Crafter's score when a task has it
    columns = ("task / game", "episodes", "score ± SE", "success %", "length", "invalid %")
    for column in columns + (("Crafter score",) if crafter else ()):
        table.add_column(column, justify="left" if column == "task / game" else "right")
    if len(summary["tasks"]) <= 12:
        for task, s in summary["tasks"].items():
            table.add_row(
                short_name(task),
                str(s["episodes"]),
                _pm(s["score"], s["score_se"]),
                _pm(s["success_rate"], s["success_se"]),
                _num(s["mean_length"]),
                _num(s["invalid_action_rate"]),
                *([_pm(s.get("crafter_score"), s.get("crafter_score_se", math.nan), 2)] if crafter else []),
            )
    for game, s in summary["games"].items():
        table.add_row(
            f"[bold]{game}[/bold] ({_tasks(s['tasks'])})",
            str(s["episodes"]),
            f"[bold]{_pm(s['score'], s['score_se'])}[/bold]",
            _pm(s["success_rate"], s["success_se"]),
            _num(s["mean_length"]),
            _num(s["invalid_action_rate"]),
            *([_pm(s.get("crafter_score"), s.get("crafter_score_se", math.nan), 2)] if crafter else []),
        )
    total = summary["overall"]
    table.add_row(
        "[bold]overall[/bold]",
        "",
        f"[bold]{_pm(total['score'], total['score_se'])}[/bold]",
        *([""] * (4 if crafter else 3)),
    )
    return table


class EpisodeProgress:
    """A rich progress bar over episodes (or nothing), as a context manager that yields ``advance()``."""

    def __init__(self, show: bool, todo: int, done: int) -> None:
        self.show, self.todo, self.done = show, todo, done
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not self.show or not self.todo:
            return lambda: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True
        )
        self.bar.start()
        task = self.bar.add_task("episodes", total=self.todo + self.done, completed=self.done)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
