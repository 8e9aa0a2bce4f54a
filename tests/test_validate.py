"""Every config value is checked before a model loads: one line naming the key, exit 2, no run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from toy_env import TOY_ID

from verlog.config import ConfigError, load_config
from verlog.runkit.folder import discard_if_refused
from verlog.runkit.validate import validate

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return tmp_path / "model"


BAD = {
    "model.path=/no/such/model": r"^model\.path: no such folder /no/such/model$",
    "model.path=someone/not-cached-model": r"^model\.path: .*not in the cache",
    "model.path=model.gguf": r"^model\.path: no such \.gguf file",
    "model.critic_path=/no/critic": r"^model\.critic_path: no such folder",
    "env.id=verlog/Nope-v0": r"^env\.id: no env registered with id 'verlog/Nope-v0'",
    "env.kwargs={bogus = 1}": r"^env\.kwargs: .* does not take the keyword argument\(s\) bogus",
    "env.kwargs={size = 1}": r"^env\.kwargs: .* rejects .*size must be at least 2",
    "env.memory_kwargs={turnz = 2}": r"^env\.memory_kwargs: memory 'history' does not take turnz",
    "env.memory_kwargs={turns = 0}": r"^env\.memory_kwargs: turns must be at least 1",
    "env.step_timeout_s=5.0": r"^env\.step_timeout_s needs env\.vectorization_mode = \"async\"",
    "ppo.actor_lr=-1e-5": r"^ppo\.actor_lr must be > 0",
    "ppo.critic_lr=0.0": r"^ppo\.critic_lr must be > 0",
    "ppo.actor_lr=nan": r"^ppo\.actor_lr must be a finite number",
    "ppo.critic_lr=inf": r"^ppo\.critic_lr must be a finite number",
    "prompt.examples=-1": r"^prompt\.examples must be >= 0, got -1",
    "prompt.examples=2": r"^prompt\.examples = 2, but .* offers 0 worked example\(s\)",
}


@pytest.mark.parametrize("override", list(BAD))
def test_each_bad_value_is_named(override: str, model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = load_config(
        None, [f"model.path={model_dir}", f"env.id={TOY_ID}", "env.memory=history", override]
    )
    with pytest.raises(ConfigError, match=BAD[override]):
        validate(config)


def test_a_good_config_passes(model_dir: Path) -> None:
    validate(load_config(None, [f"model.path={model_dir}", f"env.id={TOY_ID}", "env.kwargs={size = 5}"]))


def test_the_script_stops_with_one_line_before_loading_anything(tmp_path: Path, model_dir: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "runs"
    for args in (
        ["--config", "envs/babyai.toml", f"run.output_dir={out}", "model.path=/no/such/model"],
        [
            "--config",
            "envs/babyai.toml",
            f"run.output_dir={out}",
            f"model.path={model_dir}",
            "ppo.actor_lr=-1",
        ],
        ["--resume", str(tmp_path / "missing")],
    ):
        done = subprocess.run(
            [sys.executable, "agents/ppo.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert not out.exists()  # no empty run folder left behind
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text((ROOT / "envs" / "tiny.toml").read_text())
    done = subprocess.run(
        [sys.executable, "agents/ppo.py", "--resume", str(run)], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().endswith(
        f"{run} has no complete checkpoint to resume from"
    )
    assert sorted(p.name for p in run.iterdir()) == ["config.toml"]


def test_a_start_refused_after_the_folder_was_made_leaves_no_folder_to_take_the_next_number(
    tmp_path: Path,
) -> None:
    """The constraint is checked as the learner loads, after the run folder exists: refused there, the folder
    goes (nothing was written in it), so the run started again after the fix is ``tiny-0001`` again."""
    out = tmp_path / "runs"
    args = ["--config", "envs/tiny.toml", f"run.output_dir={out}", "sampling.constrain=actions"]
    done = subprocess.run(
        [sys.executable, "agents/ppo.py", *args, "prompt.max_response_tokens=1"],
        cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0 and "fix: raise it to" in done.stderr, done.stderr
    assert not any(out.iterdir())
    (out / "tiny-0001").mkdir()  # a folder with something in it stays
    (out / "tiny-0001" / "console.log").write_text("a start that got further\n")
    with pytest.raises(RuntimeError), discard_if_refused(out / "tiny-0001"):
        raise RuntimeError("refused")
    assert (out / "tiny-0001" / "console.log").is_file()


def test_a_refused_start_whose_log_holds_only_library_notices_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tiny model built during the start makes DeepSpeed log its accelerator line into the new folder's log:
    that notice is not the run's, so the refused start still leaves no folder, and the notice goes to stderr.
    A raw line (output of a step that started) keeps the folder."""
    run = tmp_path / "tiny-0001"
    run.mkdir()
    notice = "2026-12-02 02:46:05,692 WARNING DeepSpeed: Setting accelerator to CPU.\n"
    (run / "console.log").write_text(notice)
    (run / "empty.txt").write_text("")
    with pytest.raises(RuntimeError), discard_if_refused(run):
        raise RuntimeError("refused")
    assert not run.exists() and capsys.readouterr().err == notice
    run.mkdir()
    (run / "console.log").write_text(notice + "INFO 12-02 engine started\n")
    with pytest.raises(RuntimeError), discard_if_refused(run):
        raise RuntimeError("refused")
    assert (run / "console.log").is_file()


def test_every_problem_of_a_config_is_reported_at_once_each_with_its_fix() -> None:
    """A critic-free estimator on the tiny preset with two settings it cannot use: both in one go."""
    config = load_config(
        ROOT / "envs" / "tiny.toml",
        ['algo.advantage="grpo"', "algo.group_size=8", 'env.vectorization_mode="async"'],
    )
    with pytest.raises(ConfigError) as raised:
        validate(config)
    lines = str(raised.value).splitlines()
    assert lines[0] == "2 problems:"
    assert (
        "env.num_envs = 4 does not divide into groups of algo.group_size = 8 (fix: algo.group_size=4"
        in lines[1]
    )
    assert """steps each group's envs itself (fix: env.vectorization_mode="sync")""" in lines[2]


def test_the_script_prints_every_problem_on_its_own_line_and_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "agents/ppo.py", "--config", "envs/tiny.toml", f"run.output_dir={tmp_path}",
         "ppo.actor_lr=-1", "ppo.turn_gamma=2.0", "env.id=verlog/Nope-v0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "ppo.py: config: 3 problems:", done.stderr
    assert [line.split()[1] for line in lines[1:]] == ["ppo.actor_lr", "ppo.turn_gamma", "env.id:"]
    assert not any(tmp_path.iterdir())


def test_a_tracker_that_is_not_installed_is_a_problem_not_a_silent_drop(model_dir: Path) -> None:
    config = load_config(
        None, [f"model.path={model_dir}", f"env.id={TOY_ID}", 'run.trackers=["no_such_tracker"]']
    )
    with pytest.raises(ConfigError, match=r"^run\.trackers: no_such_tracker is not installed"):
        validate(config)


def test_unwhitened_advantages_are_for_gae_only() -> None:
    """A critic-free estimator has its own scaling (``algo.norm``): turning GAE's whitening off there would do
    nothing, silently."""
    config = load_config(
        None,
        ["model.build_tiny=true", f"env.id={TOY_ID}", 'algo.advantage="grpo"', "ppo.whiten_advantages=false"],
    )
    with pytest.raises(ConfigError, match=r'is for GAE; algo.advantage = .grpo. .*fix: algo.norm="mean"'):
        validate(config)
    validate(load_config(None, ["model.build_tiny=true", f"env.id={TOY_ID}", "ppo.whiten_advantages=false"]))


def test_a_tiny_model_of_another_size_is_built_anew_not_reused(tmp_path: Path) -> None:
    """model.tiny_hidden_size / tiny_layers size the tiny model; a folder built at another size is refused with
    the fix, so a capacity probe never trains the preset's model by mistake."""
    from verlog.models.sources import resolve_model_path

    path = tmp_path / "tiny"
    config = load_config(
        ROOT / "envs" / "quick.toml",
        [f"model.path={path}", "model.tiny_hidden_size=32", "model.tiny_layers=1"],
    )
    validate(config)
    resolve_model_path(config.model, config.env)  # built on first use at the size asked for
    built = json.loads((path / "config.json").read_text())
    assert (built["hidden_size"], built["num_hidden_layers"]) == (32, 1)
    validate(config)  # the same size again: reused
    wider = load_config(
        ROOT / "envs" / "quick.toml",
        [f"model.path={path}", "model.tiny_hidden_size=128", "model.tiny_layers=1"],
    )
    with pytest.raises(
        ConfigError, match=r"width 32 and 1 layers, not the 128 and 1 .*fix: a new model\.path"
    ):
        validate(wider)
    validate(
        load_config(ROOT / "envs" / "quick.toml", [f"model.path={path}"])
    )  # the default size: used as built
    with pytest.raises(ConfigError, match=r"tiny_hidden_size must be a positive multiple of 4"):
        validate(
            load_config(
                ROOT / "envs" / "quick.toml", [f"model.path={tmp_path / 'x'}", "model.tiny_hidden_size=30"]
            )
        )
