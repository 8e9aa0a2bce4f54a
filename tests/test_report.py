"""verlog report: a readable page from a run folder, whatever state the run is in."""

from __future__ import annotations

import argparse
import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from verlog.report import (
    RunNotFoundError,
    add_report_arguments,
    add_report_command,
    main,
    read_metrics,
    resolve_run,
    run_report,
    write_report,
)
from verlog.runkit.samples import SampleWriter, TurnSample

GOTO = "verlog/BabyAI-GoTo-v0"
CRAFTER = "verlog/Crafter-v0"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def metrics_record(u: int) -> dict[str, float]:
    record = {
        "update": u,
        "global_step": 64 * u,
        "charts/episodic_return": 0.1 * u,
        "charts/episodic_length": 30 - u,
        "charts/turns_per_s": 2.0 + 0.1 * u,
        "env/success": 0.05 * u,
        "env/progression": 0.1 * u,
        "env/invalid_action_rate": 0.5 / u,
        "env/prompt_cuts": u % 2,
        f"env/{GOTO}/progression": 0.12 * u,
        f"env/{CRAFTER}/progression": 0.08 * u,
        "losses/policy_loss": 0.01 * (-1) ** u,
        "losses/value_loss": 1.0 / u,
        "losses/approx_kl": 0.001 * u,
        "losses/clipfrac": 0.02,
        "losses/explained_variance": 0.1 * u,
        "losses/grad_norm": 0.5,
        "custom/brand_new_metric": u * u,  # unknown to the report: must still show up
        "time/generate": 3.0,
        "time/env": 1.0,
        "time/update": 2.0,
        "time/elapsed": 6.0 * u,
    }
    return record
    # no charts/tokens_per_s, no losses/entropy: a panel and a plot are omitted


def turn(i: int, family: str, prompt: str = "") -> TurnSample:
    return TurnSample(
        update=i,
        global_step=64 * i,
        env_id=family,
        family=family,
        env_index=i % 2,
        episode=0,
        turn=i,
        prompt=prompt or f"<|system|>Go to the red ball.\n<|user|>You see a wall {i} steps ahead.",
        response=f"I will turn left (turn {i}).",
        action="turn left",
        action_valid=i % 2 == 0,
        reward=0.0,
        progression=0.1 * i,
    )


def make_run(root: Path, n_updates: int, *, garbage: bool = True, with_samples: bool = True) -> Path:
    run = root / "tiny-0001"
    for name in ("update-9", "update-10", "update-2"):
        (run / "checkpoints" / name).mkdir(parents=True)
    (run / "config.toml").write_text('[ppo]\nlearning_rate = 1e-5\nenv_ids = ["verlog/BabyAI-GoTo-v0"]\n')
    lines = [json.dumps(metrics_record(u)) for u in range(1, n_updates + 1)]
    if garbage:
        lines.insert(2, "not json at all")
        text = "\n".join(lines) + "\n" + json.dumps(metrics_record(n_updates + 1))[:30]  # crash mid-line
    else:
        text = "\n".join(lines) + "\n"
    (run / "metrics.jsonl").write_text(text)
    if with_samples:
        long_prompt = (
            "<|system|>Instruction first.\n" + "".join(f"row {k}: wall\n" for k in range(800)) + "LATEST"
        )
        with SampleWriter(run) as writer:
            writer.write_many(turn(i, GOTO if i % 2 else CRAFTER) for i in range(10))
            writer.write(turn(10, GOTO, prompt=long_prompt + "\n```python\nprint(1)\n```"))
    return run


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    width, height = struct.unpack(">II", data[16:24])  # IHDR
    assert width >= 200 and height >= 150 and len(data) > 2000, (path, width, height, len(data))


def image_links(md: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    run = make_run(tmp_path_factory.mktemp("full"), 6)
    out = write_report(run, samples=4, max_chars=600)
    return run, out.read_text()


def test_report_sections_and_skipped_lines(full_run: tuple[Path, str]) -> None:
    run, md = full_run
    assert "skipped 2 malformed lines in metrics.jsonl (lines 3, 8)" in md
    assert "the last line is incomplete" in md
    for heading in (
        "## Summary",
        "### Main charts",
        "## Games",
        "## Learning",
        "## Speed",
        "### Time per update",
    ):
        assert f"\n{heading}\n" in md, heading
    for heading in ("## Other metrics", "## Last sampled turns", "## Config", "## All metrics"):
        assert f"\n{heading}\n" in md, heading
    assert "| updates | 6 (last: update 6) |" in md
    assert "| global steps | 384 |" in md
    assert "| wall time | 36s (from `time/elapsed`) |" in md
    assert "| checkpoints | 3 (last: `update-10`) |" in md
    assert "| sampled turns | 11 |" in md
    assert "| `charts/episodic_return` | 0.6 | 0.35 | 0.6 (max) | update 6 |" in md
    assert "| `env/invalid_action_rate` | 0.08333 | 0.2042 | 0.08333 (min) | update 6 |" in md
    assert f"| `env/{GOTO}/progression` | 0.72 | 0.42 | 0.72 (max) | update 6 |" in md
    assert "| `losses/approx_kl` | 0.006 | 0.0035 | — |  |" in md
    assert "| `time/generate` | 3 | 50% | 3 |" in md
    assert "learning_rate = 1e-5" in md


def test_report_plots_are_pngs_and_missing_metrics_are_noted(full_run: tuple[Path, str]) -> None:
    run, md = full_run
    links = image_links(md)
    for name in (
        "return",
        "progression",
        "invalid_actions",
        "losses",
        "kl",
        "explained_variance",
        "throughput",
    ):
        assert f"report/{name}.png" in links, name
    assert "report/time_split.png" in links
    assert "report/other_custom.png" in links and "`custom/brand_new_metric`" in md
    for link in links:
        assert_png(run / link)
    assert sorted(p.name for p in (run / "report").iterdir()) == sorted(Path(x).name for x in links)
    # Absent metrics: a whole plot, or one panel of a plot, is left out with a note.
    assert "No data for `losses/entropy` / `losses/answer_information` in metrics.jsonl: plot omitted." in md
    assert not (run / "report" / "entropy.png").exists()
    assert "No data for `charts/tokens_per_s` in metrics.jsonl: panel omitted." in md


def test_report_shows_last_turns_fenced_and_clipped(full_run: tuple[Path, str]) -> None:
    _, md = full_run
    turns = md.split("## Last sampled turns")[1].split("## Config")[0]
    assert "The last 4 of 11 turns in samples.jsonl" in turns
    assert turns.count("#### update") == 4 and "#### update 7 " in turns and "#### update 10 " in turns
    assert f"`{GOTO}`" in turns and "(**invalid**)" in turns and "action `turn left` (valid)" in turns
    assert "I will turn left (turn 10)." in turns
    # The long prompt keeps its instruction and its latest lines; its backticks do not end the block.
    assert "Instruction first." in turns and "characters cut" in turns and "print(1)" in turns
    assert "\n````text\n<|system|>Instruction first." in turns
    assert "row 400: wall" not in turns


def test_single_update_run(tmp_path: Path) -> None:
    run = make_run(tmp_path, 1, garbage=False, with_samples=False)
    md = write_report(run).read_text()
    assert "malformed" not in md
    assert "| updates | 1 (last: update 1) |" in md
    assert "No samples.jsonl in this run" in md
    links = image_links(md)
    assert "report/return.png" in links and "report/time_split.png" in links
    for link in links:
        assert_png(run / link)


def test_empty_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "fresh-0001"
    run.mkdir()
    assert main([str(run)]) == 0
    assert "no metrics.jsonl yet" in capsys.readouterr().out
    md = (run / "report.md").read_text()
    assert "No metrics.jsonl yet: nothing to plot" in md and "| checkpoints | none |" in md
    assert image_links(md) == [] and not (run / "report").exists()
    # Started but nothing readable yet: the one line is being written.
    (run / "metrics.jsonl").write_text('{"update": 1, "glo')
    md = write_report(run).read_text()
    assert "skipped 1 malformed line in metrics.jsonl (line 1)" in md
    assert "holds no readable record yet" in md


def test_nonexistent_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RunNotFoundError, match="does not exist"):
        write_report(tmp_path / "nope-0001")
    assert main([str(tmp_path / "nope-0001")]) == 2
    assert "verlog report: error: run folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    with pytest.raises(RunNotFoundError, match="not a run folder"):
        write_report(tmp_path / "file")


def test_run_name_resolves_to_latest_numbered_folder(tmp_path: Path) -> None:
    for n in ("0002", "0010", "0009"):
        (tmp_path / f"tiny-{n}").mkdir()
    (tmp_path / "tiny-extra").mkdir()
    assert resolve_run(tmp_path / "tiny") == tmp_path / "tiny-0010"
    assert resolve_run(tmp_path / "tiny-0002") == tmp_path / "tiny-0002"


def test_cli_wiring_and_no_plots_drops_stale_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path, 3, garbage=False, with_samples=False)
    (run / "report").mkdir()
    (run / "report" / "old.png").write_bytes(PNG_MAGIC)
    parser = argparse.ArgumentParser(prog="verlog")
    add_report_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(run), "--no-plots", "--samples", "2"])
    assert args.func is run_report and args.func(args) == 0
    assert "(3 updates)" in capsys.readouterr().out
    md = (run / "report.md").read_text()
    assert image_links(md) == [] and "### Main charts" in md and "## Games" in md
    assert not (run / "report" / "old.png").exists()
    # verlog.cli's registry puts the command function in `args.run`: the positional must not take it.
    registry_style = argparse.ArgumentParser(prog="verlog")
    sub = registry_style.add_subparsers(dest="command").add_parser("report")
    add_report_arguments(sub)
    sub.set_defaults(run=run_report)
    args = registry_style.parse_args(["report", str(run), "--no-plots"])
    assert args.run is run_report and args.run(args) == 0


def test_python_dash_m(tmp_path: Path) -> None:
    run = make_run(tmp_path, 2, with_samples=False)
    done = subprocess.run(
        [sys.executable, "-m", "verlog.report", str(run), "--no-plots"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "skipped 2 malformed lines in metrics.jsonl" in done.stdout
    assert (run / "report.md").is_file()


def test_read_metrics_counts_and_keeps_order(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"update": 1, "a/b": 1.0, "note": "text"}\n\n[1, 2]\n{"update": 2, "a/b": NaN}\n')
    log = read_metrics(path)
    assert len(log.records) == 2 and log.skipped_lines == [3] and not log.truncated_tail
    assert log.keys() == ["update", "a/b"]  # strings are not plotted
    assert log.x()[0] == "update"


def test_resumed_run_and_split_update_lines_are_merged(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [metrics_record(u) for u in (1, 2, 3)]
    lines.append({"update": 3, "global_step": 192, "eval/success": 0.5})  # a second line for update 3
    lines += [{**metrics_record(u), "charts/episodic_return": -1.0} for u in (2, 3, 4)]  # resumed at 2
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    log = read_metrics(path)
    assert [r["update"] for r in log.records] == [1, 2, 3, 4] and log.relogged == [2, 3]
    assert list(log.column("charts/episodic_return")) == [0.1, -1.0, -1.0, -1.0]
    assert list(log.column("eval/success"))[2] == 0.5
    md = write_report(tmp_path, plots=False).read_text()
    assert "2 updates were logged again with other values (a resumed run?)" in md


def test_without_matplotlib_the_tables_remain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import verlog.report

    monkeypatch.setattr(verlog.report.plots, "have_matplotlib", lambda: False)
    run = make_run(tmp_path, 2, garbage=False)
    md = write_report(run).read_text()
    assert "matplotlib is not installed: plots omitted" in md
    assert image_links(md) == [] and "### Main charts" in md and "#### update 10 " in md


def test_critic_warmup_rows_are_kept_and_not_called_a_resume(tmp_path: Path) -> None:
    lines = [
        {"update": 0, "global_step": 64, "warmup/iteration": 1.0, "losses/value_loss": 0.5},
        {"update": 0, "global_step": 64, "warmup/iteration": 2.0, "losses/value_loss": 0.3},
        metrics_record(1),
        metrics_record(2),
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    log = read_metrics(tmp_path / "metrics.jsonl")
    assert log.relogged == [] and log.updates == 2 and log.warmup_rows == 2
    assert list(log.column("losses/value_loss"))[:2] == [0.5, 0.3]  # both iterations, in order
    assert log.x()[0] == "update"  # the number the console shows
    md = write_report(tmp_path, plots=False).read_text()
    assert "logged again" not in md
    assert "| updates | 2 (last: update 2), after 2 critic warm-up iterations |" in md


def test_without_matplotlib_a_report_with_plots_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import verlog.report

    run = make_run(tmp_path, 2, garbage=False, with_samples=False)
    assert main([str(run)]) == 0
    before = (run / "report.md").read_text()
    plots = sorted(p.name for p in (run / "report").glob("*.png"))
    assert plots
    capsys.readouterr()
    monkeypatch.setattr(verlog.report.plots, "have_matplotlib", lambda: False)
    assert main([str(run)]) == 1
    assert "matplotlib is not installed" in capsys.readouterr().err
    assert (run / "report.md").read_text() == before
    assert sorted(p.name for p in (run / "report").glob("*.png")) == plots
    fresh = make_run(tmp_path / "fresh", 2, garbage=False, with_samples=False)
    assert main([str(fresh)]) == 0
    assert "matplotlib is not installed: plots omitted" in capsys.readouterr().err


def test_a_single_point_is_a_marker_between_two_ticks() -> None:
    import numpy as np
    from matplotlib.figure import Figure

    from verlog.report.plots import draw_lines

    ax = Figure().subplots()
    draw_lines(ax, np.array([1.0]), [("all", np.array([0.5]))], "update", "success")
    (line,) = ax.get_lines()
    assert line.get_marker() == "o"
    assert ax.get_xlim() == (0.0, 2.0)
