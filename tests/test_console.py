"""The training console a person reads: table rows that fit the terminal, and the closing summary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from accelerate import Accelerator
from rich.console import Console

from verlog.runkit.distributed import Distributed
from verlog.runkit.logger import CELL, COLUMNS, RunLogger, fitting_columns

ESSENTIALS = ("upd", "turns", "turn/s", "return", "success", "invalid", "pg_loss", "v_loss", "kl")
METRICS = {
    "update": 3.0,
    "global_step": 96.0,
    "charts/turns_per_s": 6.5,
    "charts/tokens_per_s": 107.0,
    "charts/episodic_return": 0.25,
    "env/success": 0.5,
    "env/progression": 0.5,
    "env/invalid_action_rate": 0.97,
    "losses/policy_loss": -0.0002,
    "losses/value_loss": 0.0658,
    "losses/entropy": 6.222,
    "losses/approx_kl": 0.0,
    "time/generate": 1.1,
    "time/env": 0.03,
    "time/score": 1.2,
    "time/update": 2.5,
}


def _logger(tmp_path: Path, width: int, total: int = 3, env_id: str = "") -> tuple[RunLogger, Console]:
    console = Console(record=True, width=width, force_terminal=False)
    logger = RunLogger(tmp_path, Accelerator(cpu=True), total=total, console=console, env_id=env_id)
    return logger, console


@pytest.mark.parametrize("width", [80, 120])
def test_rows_fit_the_terminal_with_the_essentials(tmp_path: Path, width: int) -> None:
    logger, console = _logger(tmp_path, width)
    logger.log({**METRICS, "update": 0.0, "warmup/iteration": 1.0}, step=64, advance=False)
    logger.log(METRICS, step=96)
    logger.close()
    lines = [line for line in console.export_text().splitlines() if line.strip()]
    header, warmup, row = (_cells(line) for line in lines[:3])
    assert all(len(line) <= width for line in lines)
    assert header == [h for _, h, _, _ in fitting_columns(width)]
    assert set(ESSENTIALS) <= set(header)
    assert warmup[0] == "w1"  # critic pre-training is not update 0
    cells = dict(zip(header, row, strict=True))
    assert (cells["success"], cells["invalid"], cells["kl"]) == ("0.50", "0.97", "0.0000")
    if width == 120:
        assert {"entropy", "tok/s", "gen s"} <= set(cells)
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["update"] == 3.0


def _cells(line: str) -> list[str]:
    """A table line cut into its fixed-width cells (a header may hold a space: ``gen s``)."""
    return [line[i : i + CELL + 1].strip() for i in range(0, len(line), CELL + 1)]


def test_a_wide_console_shows_every_column() -> None:
    assert fitting_columns(170) == list(COLUMNS)


def test_a_run_written_to_a_file_fits_80_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Output to a file or pipe (here pytest's capture) is 80 columns wide unless $COLUMNS says otherwise."""
    monkeypatch.delenv("COLUMNS", raising=False)
    logger = RunLogger(tmp_path, Accelerator(cpu=True), total=3, console=True)
    try:
        assert not logger.console.is_terminal and logger.console.width == 80
        assert {h for _, h, _, _ in logger.columns} == {*ESSENTIALS, "entropy"}
    finally:
        logger.close()
    monkeypatch.setenv("COLUMNS", "120")
    wide = RunLogger(tmp_path, Accelerator(cpu=True), total=3, console=True)
    wide.close()
    assert wide.console.width == 120


def test_the_run_ends_on_a_summary_panel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = Path("runs/tiny-0001")
    (run / "checkpoints" / "000003").mkdir(parents=True)
    logger, console = _logger(run, 80)
    logger.log({**METRICS, "charts/episodes": 32.0}, step=96)
    logger.summary(updates=3, turns=96, env_id="verlog/BabyAI-GoTo-v0")
    logger.close()
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "PPO run finished" in text
    assert "3 updates, 96 turns" in text
    assert "success 0.50, return 0.250" in text
    assert "checkpoint  checkpoints/000003" in text
    assert "  verlog report runs/tiny-0001\n" in text
    # the evaluation that plays as the run trained (verlog eval's default for a run), on as many episodes as
    # the last update finished, so it measures what the panel's last figure did
    assert "  verlog eval runs/tiny-0001 --suite verlog/BabyAI-GoTo-v0 --episodes 32\n" in text
    assert "(plays as the run trained: its success should come near 0.50)" in text
    assert "PPO ━" not in text.splitlines()[-1]  # not the progress bar


@pytest.mark.parametrize("width", [80, 120])
def test_a_game_scored_by_progression_shows_it_where_success_would_be(tmp_path: Path, width: int) -> None:
    logger, console = _logger(tmp_path, width, total=3)
    no_episode = {**METRICS, "env/success": math.nan, "env/progression": math.nan}
    crafter = {**METRICS, "env/success": 0.0, "env/progression": 0.14}  # achievements, never a success
    for update, row in enumerate((no_episode, crafter, no_episode)):
        logger.log({**row, "update": float(update + 1)}, step=update)
    logger.close()
    lines = [_cells(line) for line in console.export_text().splitlines() if line.strip()]
    if width == 80:  # no room for a progression column: the success column turns into it, with a new header
        assert lines[0][4] == "success" and lines[1][4] == "-"
        assert lines[2][4] == "progr" and lines[3][4] == "0.14" and lines[4][4] == "-"
    else:  # both columns shown: each keeps its own figure
        header = lines[0]
        assert len(lines) == 4 and "success" in header and "progr" in header
        assert lines[2][header.index("success")] == "0.00" and lines[2][header.index("progr")] == "0.14"


def test_the_closing_panel_shows_the_first_to_last_trend_and_the_presets_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("tiny-0001", "tiny-0002"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    logger, console = _logger(Path("runs/tiny-0001"), 80, total=10)
    for update in range(10):  # success 0.1 -> 1.0, invalid 0.9 -> 0.0 (one update without episodes)
        success = math.nan if update == 1 else (update + 1) / 10
        row = {
            **METRICS,
            "env/success": success,
            "env/progression": success,
            "env/invalid_action_rate": 0.9 - update / 10,
        }
        logger.log({**row, "update": float(update + 1)}, step=update)
    logger.summary(updates=10, turns=960, env_id="verlog/BabyAI-GoTo-v0", note="a tiny preset's word")
    logger.close()
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    # 9 updates had episodes (not update 2): the means of their first 4 (0.1-0.5) and last 4 (0.7-1.0)
    assert "first→last  success 0.33 → 0.85, invalid 0.70 → 0.20, entropy 6.2 → 6.2" in text
    assert text.rstrip().endswith("note: a tiny preset's word")
    (tmp_path / "runs" / "crafter-0001").mkdir(parents=True)
    crafter, console = _logger(Path("runs/crafter-0001"), 80, total=8, env_id="verlog/Crafter-v0")
    for update in range(8):  # Crafter: no episode succeeds, achievements move progression, and the long
        ended = update in (2, 4, 7)  # episodes end in a few updates only
        row = {
            **METRICS,
            "env/success": 0.0 if ended else math.nan,
            "env/progression": 0.04 + update / 50 if ended else math.nan,
            "update": float(update + 1),
        }
        crafter.log(row, step=update)
    crafter.summary(updates=8, turns=256, env_id="verlog/Crafter-v0")
    text = console.export_text()
    assert "ended       progression 0.18, return 0.250 (last update)" in text
    assert "first→last  progression 0.08 → 0.18, invalid" in text  # update 3's episodes, then update 8's
    assert "success" not in text  # a game without one: not in the table's header either
    short, console = _logger(Path("runs/tiny-0002"), 80)
    for update in range(3):
        short.log({**METRICS, "update": float(update + 1)}, step=update)
    short.summary(updates=3, turns=96, env_id="verlog/BabyAI-GoTo-v0")
    assert "first→last" not in console.export_text() and "note:" not in console.export_text()


QUIET_SCRIPT = """
import logging, sys, warnings
from verlog.quiet import attach_run_log, quiet_console

quiet_console()
ds = logging.getLogger("DeepSpeed")  # as DeepSpeed does at import: its own stdout handler, no propagation
ds.addHandler(logging.StreamHandler(sys.stdout))
ds.propagate = False
ds.warning("Setting accelerator to CPU.")
logging.getLogger("transformers.modeling_utils").warning("LOAD REPORT score.weight MISSING")
logging.getLogger("accelerate.utils.other").error("a real error")
warnings.warn_explicit("is deprecated", FutureWarning, "/site-packages/somelib/x.py", 1)
logging.getLogger("verlog").info("critic head initialised fresh")
attach_run_log(sys.argv[1])
logging.getLogger("accelerate.utils.other").warning("Removed shared tensor")
"""


def test_the_libraries_notices_go_to_the_run_log(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", QUIET_SCRIPT, str(tmp_path / "runs" / "logs")],
        capture_output=True,
        text=True,
        timeout=120,
    )  # a folder that does not exist yet, as a benchmark's runs/logs on a fresh clone
    assert done.returncode == 0, done.stderr
    shown = done.stdout + done.stderr
    assert "critic head initialised fresh" in shown and "a real error" in shown  # verlog's line, errors
    for noise in ("Setting accelerator", "LOAD REPORT", "is deprecated", "Removed shared tensor"):
        assert noise not in shown, noise
    log = (tmp_path / "runs" / "logs" / "console.log").read_text()
    for line in (
        "Setting accelerator",
        "LOAD REPORT",
        "a real error",
        "is deprecated",
        "Removed shared tensor",
    ):
        assert line in log, line  # what came before the run folder existed too


def test_the_setup_line_says_processes_device_engine_and_precision_in_plain_words() -> None:
    accelerator = Accelerator(cpu=True)
    assert Distributed(accelerator, accelerator, None, False, 0).describe() == "1 process on cpu, fp32"
    zero3 = Distributed(accelerator, accelerator, None, True, 3)
    assert zero3.describe() == "1 process on cpu, DeepSpeed ZeRO-3, fp32"


@pytest.mark.parametrize("width", [80, 120])
def test_a_game_without_success_never_shows_a_success_column(tmp_path: Path, width: int) -> None:
    logger, console = _logger(tmp_path, width, env_id="verlog/Crafter-v0")
    logger.log({**METRICS, "env/success": 0.0, "env/progression": 0.14}, step=1)
    logger.close()
    header, row = (_cells(line) for line in console.export_text().splitlines() if line.strip())
    assert "success" not in header and row[header.index("progr")] == "0.14"
