"""Where metrics go: ``metrics.jsonl`` in the run folder always, accelerate trackers when configured, and
a rich progress bar with one table row per update on the console. Only the main process writes."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from verlog.envs.registration import has_success
from verlog.runkit.folder import METRICS_FILE, latest_checkpoint

__all__ = ["COLUMNS", "RunLogger", "flat_hyperparameters", "reproducible", "tracker_init_kwargs"]

#: The console table: (metric, header, format, priority). Every name is the one used in metrics.jsonl and
#: trackers. Priority 0 columns are always shown; the others join, lowest number first, while the row still
#: fits the console's width (80 columns, also a log file's, show the essentials and entropy; 120 most). The
#: rest are in metrics.jsonl. Where progression has no column, a game scored by it (Crafter: achievements, no
#: success) shows it in the success column, headed ``progr``, from its first finished episode.
COLUMNS = (
    ("update", "upd", "{:.0f}", 0),
    ("global_step", "turns", "{:.0f}", 0),
    ("charts/turns_per_s", "turn/s", "{:.2f}", 0),
    ("charts/tokens_per_s", "tok/s", "{:.0f}", 2),
    ("charts/episodic_return", "return", "{:.3f}", 0),
    ("env/success", "success", "{:.2f}", 0),
    ("env/progression", "progr", "{:.2f}", 3),
    ("env/invalid_action_rate", "invalid", "{:.2f}", 0),
    ("losses/policy_loss", "pg_loss", "{:+.4f}", 0),
    ("losses/value_loss", "v_loss", "{:.4f}", 0),
    ("losses/entropy", "entropy", "{:.3f}", 1),
    ("losses/approx_kl", "kl", "{:.4f}", 0),
    ("time/generate", "gen s", "{:.1f}", 4),
    ("time/env", "env s", "{:.2f}", 7),
    ("time/score", "score s", "{:.1f}", 6),
    ("time/update", "upd s", "{:.1f}", 5),
)
#: Width of every table column (the widest header is 7 characters); columns are one space apart.
CELL = 7


def fitting_columns(width: int) -> list[tuple[str, str, str, int]]:
    """The table columns that fit ``width`` characters, essentials first, in :data:`COLUMNS` order."""
    chosen = {c[0] for c in COLUMNS if c[3] == 0}
    used = len(chosen) * (CELL + 1) - 1
    for column in sorted((c for c in COLUMNS if c[3] > 0), key=lambda c: c[3]):
        if used + CELL + 1 > width:
            break
        chosen.add(column[0])
        used += CELL + 1
    return [c for c in COLUMNS if c[0] in chosen]


class RunLogger:
    """Logs one metrics dict per update (or warm-up iteration) and ends with a summary panel.

    ``console`` is True for rich's own console, False for none, or a :class:`rich.console.Console` to print
    on (tests record one at a fixed width). ``env_id``: a game without success (Crafter) shows progression
    where the others show success, from the first row.
    """

    def __init__(
        self, run_dir: Path, accelerator: Any, *, total: int, console: Any, start: int = 0, env_id: str = ""
    ) -> None:
        self.accelerator = accelerator
        self.main = accelerator.is_main_process
        self.run_dir = Path(run_dir)
        self.path = (
            self.run_dir / METRICS_FILE
        )  # a resumed run's is rewound to its checkpoint first (folder.rewind)
        self.progress = None
        self.rows = 0
        self.started = time.monotonic()
        self.last: dict[str, float] = {}
        #: Every update's metrics (not warm-up's), for the closing panel's first-to-last trend.
        self.history: list[dict[str, float]] = []
        #: What the table's success column shows: progression once a game scores partial progress (Crafter).
        self.measure = "env/success"
        self.env_id = env_id
        self.no_success = bool(env_id) and not has_success(env_id)
        self.console: Any = None
        if self.main and console:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            if not isinstance(console, Console):
                console = Console()  # the terminal's width; a file or pipe gets $COLUMNS, else 80
            self.console = console
            self.columns = fitting_columns(console.width)
            if self.no_success:  # its progression, under the success column's place and a new header
                self.measure = "env/progression"
                self.columns = [c for c in self.columns if c[0] != "env/progression"]
            self.progress = Progress(
                TextColumn("[bold]PPO"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=console,
                transient=True,  # the summary panel replaces it
            )
            self.task = self.progress.add_task("updates", total=total, completed=start)
            self.progress.start()

    def log(self, metrics: dict[str, float], *, step: int, advance: bool = True) -> None:
        """Write one record everywhere; ``advance`` moves the progress bar (False for warm-up)."""
        if not self.main:
            return
        record = {key: _finite_or_none(value) for key, value in metrics.items()}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.accelerator.trackers:
            self.accelerator.log({k: v for k, v in metrics.items() if math.isfinite(v)}, step=step)
        if advance:
            self.last = metrics
            self.history.append(metrics)
        if self.progress is not None:
            self.progress.console.print(self._row(metrics))
            if advance:
                self.progress.advance(self.task)

    def log_samples(self, samples: list[Any], *, step: int) -> None:
        """Sampled turns as a table in every tracker that has tables (wandb, ...), as text in tensorboard."""
        if not self.main or not self.accelerator.trackers or not samples:
            return
        from verlog.runkit.samples import samples_table

        columns, rows = samples_table(samples, max_chars=4000)
        for tracker in self.accelerator.trackers:
            if hasattr(tracker, "log_table"):
                tracker.log_table("samples", columns=columns, data=rows, step=step)
            elif tracker.name == "tensorboard":
                lines = [
                    f"**{s.family}** env {s.env_index} turn {s.turn}: `{s.action}` "
                    f"(valid={s.action_valid}, reward={s.reward:.3f})\n\n```\n{s.response}\n```"
                    for s in samples
                ]
                tracker.writer.add_text("samples", "\n\n".join(lines), global_step=step)

    def summary(self, *, updates: int, turns: int, env_id: str, note: str = "") -> None:
        """The closing panel: where the run is, what it did, how it ended, how it moved from its first updates
        to its last, and what to run next (its report, and the evaluation that plays the run's episodes as it
        trained, so it scores what the panel's last figure measures); then ``note`` (a preset's word)."""
        if self.console is None:
            return
        from rich.markup import escape
        from rich.panel import Panel

        self.close_progress()
        wall = time.monotonic() - self.started
        no_success = self.no_success or not has_success(env_id)
        key, label = _measure([*self.history, self.last], no_success)
        score = self.last.get(key, math.nan)
        ret = self.last.get("charts/episodic_return", math.nan)
        if math.isfinite(score) or math.isfinite(ret):
            ended = f"{label} {_or_dash(score, '{:.2f}')}, return {_or_dash(ret, '{:.3f}')} (last update)"
        else:
            ended = "no episode finished in the last update"
        checkpoint = latest_checkpoint(self.run_dir)
        run = escape(str(self.run_dir))
        lines = [
            f"[bold]run[/]         {run}",
            f"[bold]done[/]        {updates} updates, {turns} turns in {_clock(wall)}",
            f"[bold]ended[/]       {ended}",
            *([f"[bold]first→last[/]  {trend}"] if (trend := _trend(self.history, no_success)) else []),
            f"[bold]checkpoint[/]  {escape(str(checkpoint.relative_to(self.run_dir))) if checkpoint else 'none'}",
        ]
        self.console.print(
            Panel("\n".join(lines), title="PPO run finished", border_style="green", expand=False)
        )
        # The next commands outside the panel, unbroken by its border: they copy and paste as they are.
        episodes = max(10, int(_or_zero(self.last.get("charts/episodes"))))
        self.console.print("[bold]next:[/]")
        for command in (
            f"verlog report {run}",
            f"verlog eval {run} --suite {escape(env_id)} --episodes {episodes}",
        ):
            self.console.print(f"  {command}", soft_wrap=True)
        if math.isfinite(score):
            self.console.print(
                f"  [dim](plays as the run trained: its {label} should come near {score:.2f})[/]"
            )
        if note:
            self.console.print(f"[bold]note:[/] {escape(note)}")

    def print(self, text: str) -> None:
        if self.main:
            (self.progress.console.print if self.progress is not None else print)(text)

    def close_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def close(self) -> None:
        self.close_progress()
        if self.main:  # the process group is the trainer's to end (Trainer.close)
            for tracker in self.accelerator.trackers:
                tracker.finish()

    def _row(self, metrics: dict[str, float]) -> Any:
        from rich.table import Table

        # A game that scores partial progress (Crafter) shows it in the success column, under a new header,
        # unless the table is wide enough to show the progression column itself.
        swap = "env/progression" not in {column[0] for column in self.columns}
        if (
            swap
            and self.measure == "env/success"
            and _measure([metrics], self.no_success)[1] == "progression"
        ):
            self.measure, self.rows = "env/progression", 0
        table = Table(
            show_header=self.rows % 20 == 0, box=None, pad_edge=False, padding=(0, 1), collapse_padding=True
        )
        for key, header, _, _ in self.columns:
            header = "progr" if key == "env/success" and self.measure != key else header
            table.add_column(header, justify="right", width=CELL, no_wrap=True)
        cells = []
        warmup = metrics.get("warmup/iteration")
        for key, _, fmt, _ in self.columns:
            key = self.measure if key == "env/success" else key
            if key == "update" and warmup is not None:  # critic pre-training, before update 1
                cells.append(f"w{warmup:.0f}")
            else:
                cells.append(_or_dash(metrics.get(key), fmt))
        table.add_row(*cells)
        self.rows += 1
        return table


def reproducible(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` without the figures of the clock and the machine (``time/*``, ``*_per_s``, ``sys/*`` such as
    resident memory): what a resumed run must repeat exactly, and two runs of one seed must share."""
    return {k: v for k, v in metrics.items() if not (k.startswith("sys/") or "time" in k or "per_s" in k)}


#: The closing panel's trend after the game's own measure: (metric, label, format), each the mean of the first
#: and of the last updates.
TREND = (
    ("env/invalid_action_rate", "invalid", "{:.2f}"),
    ("losses/entropy", "entropy", "{:.1f}"),
)


def _measure(history: list[dict[str, float]], no_success: bool = False) -> tuple[str, str]:
    """The metric that says how well the game went: success, unless the game has none (``no_success``:
    Crafter, NetHack) or scores partial progress (some update's progression above its success: TextWorld's
    points), where success is all but always 0 and progression is the figure that moves."""
    if no_success:
        return "env/progression", "progression"
    for row in history:
        progression, success = row.get("env/progression"), row.get("env/success")
        if progression is not None and success is not None and progression > success + 1e-9:
            return "env/progression", "progression"
    return "env/success", "success"


def _trend(history: list[dict[str, float]], no_success: bool = False) -> str:
    """``success 0.12 → 0.80, invalid 0.93 → 0.48, entropy 4.9 → 2.4``: for each, the mean of its first and of
    its last 5 values (fewer in a short run; one update's success is noisy), skipping updates without one (no
    episode ended: most of a long-horizon run's early updates): whether the run moved, at a glance. "" for
    fewer than 4 updates."""
    if len(history) < 4:
        return ""

    def ends(key: str, fmt: str) -> str:
        values = [v for row in history if (v := row.get(key)) is not None and math.isfinite(v)]
        k = min(5, len(values) // 2)
        if k == 0:
            return "-"
        return f"{_or_dash(sum(values[:k]) / k, fmt)} → {_or_dash(sum(values[-k:]) / k, fmt)}"

    return ", ".join(
        f"{label} {ends(key, fmt)}"
        for key, label, fmt in ((*_measure(history, no_success), "{:.2f}"), *TREND)
    )


def _or_zero(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) else 0.0


def _or_dash(value: float | None, fmt: str) -> str:
    return "-" if value is None or not math.isfinite(value) else fmt.format(value)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {seconds:02d}s" if hours else f"{minutes}m {seconds:02d}s"


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def tracker_init_kwargs(
    name: str, run_dir: Path, extra: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each tracker's init arguments: its run named ``name`` and kept in the run folder, then ``extra``'s."""
    kwargs: dict[str, dict[str, Any]] = {
        "wandb": {"name": name, "dir": str(run_dir)},
        "swanlab": {"experiment_name": name, "logdir": str(Path(run_dir) / "swanlog")},
        "mlflow": {"run_name": name},
    }
    for tracker, more in extra.items():
        kwargs.setdefault(tracker, {}).update(more)
    return kwargs


def flat_hyperparameters(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as ``section.key`` scalars (trackers take flat hyperparameters)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and not prefix:
            flat.update(flat_hyperparameters(value, f"{key}."))
        else:
            flat[prefix + key] = value if isinstance(value, int | float | str | bool) else str(value)
    return flat
