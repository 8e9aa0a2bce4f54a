"""``verlog eval RUN`` right after training: it plays as the run trained (env kwargs, prompts, temperature),
says so in one line, keeps each set of settings in a folder of its own, fits 80 columns, and shows its
progress in turns, also when its output is a pipe."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from toy_env import TOY_ID

from verlog.evaluation import progress
from verlog.evaluation.command import main
from verlog.evaluation.progress import EvalProgress

GOTO = "verlog/BabyAI-GoTo-v0"


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained two updates on the line game with env kwargs and a temperature of its own."""
    torch = pytest.importorskip("torch")
    from verlog.config import load_config
    from verlog.models.tiny import build_tiny
    from verlog.ppo.trainer import Trainer

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("as-trained")
    model = build_tiny(root / "model", TOY_ID, memory="none")
    config = load_config(
        None,
        [
            f"run.output_dir={root}", "run.name=toy", "run.console=false", "run.torch_threads=1",
            "run.total_updates=2", f"model.path={model}", f"env.id={TOY_ID}", "env.num_envs=2",
            "env.memory=none", "env.memory_kwargs={}", "env.kwargs={max_steps = 3, size = 4}",
            "prompt.format=action", "prompt.max_response_tokens=3", "ppo.turns_per_update=2",
            "ppo.num_minibatches=1", "ppo.micro_batch_tokens=512", "ppo.critic_warmup_iters=0",
            "sampling.temperature=0.7",
        ],
    )  # fmt: skip
    Trainer(config).train()
    return root / "toy-0001"


def _eval(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str, Path]:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    return out, err, Path(out.split("wrote ", 1)[1].strip())


def test_a_run_is_evaluated_as_it_trained_unless_asked_otherwise(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    common = ["--suite", TOY_ID, "--episodes", "2", "--num-envs", "2"]
    out, err, folder = _eval(capsys, str(trained_run), *common)
    assert "as trained: prompts, env kwargs, temperature 0.7 (or --greedy, --env-defaults)" in err
    settings = json.loads((folder / "settings.json").read_text())
    assert settings["trained_env_kwargs"] == {TOY_ID: {"max_steps": 3, "size": 4}}
    assert settings["agent"]["temperature"] == 0.7 and "greedy" not in settings["agent"]
    episodes = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and all(e["length"] <= 3 for e in episodes)  # its env's max_steps
    assert "note:" not in err
    assert max(map(len, (out + err).splitlines())) <= 80
    assert folder.parent == Path("runs/eval") and folder.name.startswith("toy-0001-Line-s0-t0.7-")

    # greedy on the env's defaults: asked for, said (with what differs from training), in another folder
    out, err, other = _eval(capsys, str(trained_run), *common, "--greedy", "--env-defaults")
    assert "as trained: prompts; as asked: the env's defaults, greedy" in err
    assert "note: Line not as trained: max_steps, size" in err
    assert other != folder and "-greedy-" in other.name
    assert json.loads((other / "settings.json").read_text())["agent"]["greedy"] is True
    assert max(map(len, (out + err).splitlines())) <= 80

    # the same command again resumes its own folder: nothing played twice
    out, _, again = _eval(capsys, str(trained_run), *common)
    assert again == folder and "0 episodes played now, 2 resumed" in out


def test_a_baseline_or_another_config_is_not_a_run(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    _, err, folder = _eval(capsys, "random", "--suite", TOY_ID, "--episodes", "1")
    assert "as trained" not in err and folder.name.startswith("random-Line-s0-")
    # two baselines with other env kwargs: two folders, never "holds an evaluation with other settings"
    _, _, other = _eval(capsys, "random", "--suite", TOY_ID, "--episodes", "1", "--env-kwargs", "{size = 3}")
    assert other != folder


def test_a_piped_evaluation_prints_its_progress_in_turns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(progress, "EVERY_S", 0.01)  # a line every 10 ms instead of every 10 s
    argv = ["random", "--suite", GOTO, "--episodes", "3", "--num-envs", "1", "--out", str(tmp_path / "e")]
    assert main([*argv, "--env-kwargs", "{ max_episode_steps = 40 }"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("eval: ")]
    assert lines, "no progress line on a pipe"
    assert all(" episodes, " in line and " turn/s, " in line for line in lines)


def test_progress_counts_turns_and_estimates_the_time_left() -> None:
    clock = iter([0.0, 0.0, *[10.0] * 3, *[20.0] * 3])
    shown = EvalProgress(True, 4, 1, console=Console(file=io.StringIO()), now=lambda: next(clock))
    with shown:  # a file is no terminal: a timer thread prints the lines, not tested here
        for _ in range(50):
            shown.turn()
        assert shown.line() == "eval: 1/5 episodes, 50 turns in 10s, 5.0 turn/s, no estimate yet"
        shown.episode(40)  # 10 turns in flight; 3 episodes of 40 turns left: 110 turns at 2.5 turn/s
        assert shown.line() == "eval: 2/5 episodes, 50 turns in 20s, 2.5 turn/s, ~44s left"
