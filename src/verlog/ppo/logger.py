"""Where metrics go: ``metrics.jsonl`` in the run folder always, accelerate trackers when configured, and
a rich progress bar with one table row per update on the console. Only the main process writes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "RunLogger"]

#: The console table: (metric, header, format). Every name is the one used in metrics.jsonl and trackers.
COLUMNS = (
    ("update", "upd", "{:.0f}"),
    ("global_step", "turns", "{:.0f}"),
    ("charts/turns_per_s", "turn/s", "{:.2f}"),
    ("charts/tokens_per_s", "tok/s", "{:.0f}"),
    ("charts/episodic_return", "return", "{:.3f}"),
    ("env/success", "success", "{:.2f}"),
    ("env/progression", "progr", "{:.2f}"),
    ("env/invalid_action_rate", "invalid", "{:.2f}"),
    ("losses/policy_loss", "pg_loss", "{:+.4f}"),
    ("losses/value_loss", "v_loss", "{:.4f}"),
    ("losses/entropy", "entropy", "{:.3f}"),
    ("losses/approx_kl", "kl", "{:.4f}"),
    ("time/generate", "gen s", "{:.1f}"),
    ("time/env", "env s", "{:.2f}"),
    ("time/score", "score s", "{:.1f}"),
    ("time/update", "upd s", "{:.1f}"),
)


class RunLogger:
    """Logs one metrics dict per update (or warm-up iteration)."""

    def __init__(self, run_dir: Path, accelerator: Any, *, total: int, console: bool, start: int = 0) -> None:
        self.accelerator = accelerator
        self.main = accelerator.is_main_process
        self.path = Path(run_dir) / "metrics.jsonl"
        self.progress = None
        self.rows = 0
        if self.main and self.path.exists():  # a resumed run: what came after its checkpoint is logged again
            _keep_until(self.path, start)
        if self.main and console:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            console = Console()
            if not console.is_terminal:  # a log file: no need to fit 80 columns
                console = Console(width=170)
            self.progress = Progress(
                TextColumn("[bold]PPO"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=False,
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
        if self.progress is not None:
            self.progress.console.print(self._row(metrics))
            if advance:
                self.progress.advance(self.task)

    def log_samples(self, samples: list[Any], *, step: int) -> None:
        """Sampled turns as a table in every tracker that has tables (wandb, ...), as text in tensorboard."""
        if not self.main or not self.accelerator.trackers or not samples:
            return
        from verlog.samples import samples_table

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

    def print(self, text: str) -> None:
        if self.main:
            (self.progress.console.print if self.progress is not None else print)(text)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        if self.main and self.accelerator.trackers:
            self.accelerator.end_training()

    def _row(self, metrics: dict[str, float]) -> Any:
        from rich.table import Table

        table = Table(show_header=self.rows % 20 == 0, box=None, pad_edge=False)
        for _, header, _ in COLUMNS:
            table.add_column(header, justify="right", min_width=max(len(header), 7), no_wrap=True)
        cells = []
        for key, _, fmt in COLUMNS:
            value = metrics.get(key)
            cells.append("-" if value is None or not math.isfinite(value) else fmt.format(value))
        table.add_row(*cells)
        self.rows += 1
        return table


def _keep_until(path: Path, update: int) -> None:
    """Drop the records of updates after ``update`` (logged before a crash, but not in the checkpoint)."""
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line).get("update", 0) <= update]
    if len(kept) != len(lines):
        path.write_text("".join(kept))


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
