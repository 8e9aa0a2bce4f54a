"""Evaluation: BALROG's scoring against hand-computed numbers, seeded episodes that do not depend on the
schedule, end-to-end output files, resuming a crashed run, model sources, the oracle and a tiny model."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import pytest
from toy_env import LineEnv

from verlog.evaluation import evaluate, mean_se, summarize
from verlog.evaluation.agents import EvalError, OracleAgent, RandomAgent, Turn, resolve_model
from verlog.evaluation.command import add_eval_command, default_out, main, run_eval
from verlog.evaluation.runner import EnvSettings, EpisodeLog, play
from verlog.evaluation.scoring import overall
from verlog.evaluation.suites import SUITES, episode_seed, game_of, resolve_suite, short_name
from verlog.vector import sub_env_info

GOTO, PICKUP = "verlog/BabyAI-GoTo-v0", "verlog/BabyAI-Pickup-v0"
COUNTED = "verlog_test/CountedLine-v0"
SHORT = {"max_episode_steps": 12}  # short episodes keep the end-to-end tests fast


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]


def _by_episode(records: list[dict]) -> dict[tuple[str, int], dict]:
    return {(r["task"], r["episode"]): r for r in records}


# ---------------------------------------------------------------------------------------------- scoring
def test_mean_and_standard_error_are_balrogs() -> None:
    # progressions 0, .5, 1, 1: mean .625; population std sqrt(.171875) = .414578; SE = std / 2
    mean, se = mean_se([0.0, 0.5, 1.0, 1.0])
    assert mean == pytest.approx(0.625)
    assert se == pytest.approx(0.2072891, abs=1e-7)
    assert mean_se([0.3]) == (0.3, 0.0)  # one episode: BALROG's SE is 0
    assert all(math.isnan(x) for x in mean_se([]))


def _episode(task: str, progression: float, length: int = 10, invalid: int = 0) -> dict:
    return {
        "task": task,
        "progression": progression,
        "success": progression >= 1.0,
        "length": length,
        "return": progression,
        "invalid_actions": invalid,
    }


def test_summary_pools_a_games_episodes_and_averages_games() -> None:
    a, b, c = "verlog/BabyAI-GoTo-v0", "verlog/BabyAI-Open-v0", "verlog/Crafter-v0"
    records = [
        _episode(a, 1.0, 4, 1),
        _episode(a, 1.0, 6, 0),
        _episode(b, 0.0, 10, 3),
        _episode(c, 0.1),
        _episode(c, 0.3),
    ]
    s = summarize(records, [a, b, c], {t: game_of(t) for t in (a, b, c)})
    assert s["tasks"][a]["score"] == pytest.approx(100.0) and s["tasks"][a]["score_se"] == 0.0
    # the game pools its 3 episodes (66.7), it is not the mean of its task scores (50)
    babyai = s["games"]["babyai"]
    assert babyai["score"] == pytest.approx(200 / 3)
    assert babyai["score_se"] == pytest.approx(100 * math.sqrt(2 / 9) / math.sqrt(3))
    assert babyai["tasks"] == 2 and babyai["episodes"] == 3
    assert babyai["invalid_action_rate"] == pytest.approx(100 * 4 / 20)
    assert babyai["success_rate"] == pytest.approx(200 / 3)
    assert babyai["mean_length"] == pytest.approx(20 / 3)
    crafter = s["games"]["crafter"]
    assert crafter["score"] == pytest.approx(20.0) and crafter["score_se"] == pytest.approx(10 / math.sqrt(2))
    # overall: the mean of the game scores, SE = sqrt(sum of SE^2) / games
    assert s["overall"]["score"] == pytest.approx((200 / 3 + 20) / 2)
    expected_se = math.sqrt(babyai["score_se"] ** 2 + crafter["score_se"] ** 2) / 2
    assert s["overall"]["score_se"] == pytest.approx(expected_se)
    assert overall({})["games"] == 0


# ---------------------------------------------------------------------------------------------- suites
def test_suites_and_episode_seeds() -> None:
    babyai = resolve_suite("babyai")
    assert len(babyai.tasks) == 5 and babyai.default_episodes == 10
    assert all(gym.spec(t) for t in babyai.tasks)
    assert resolve_suite(f"{GOTO}, {PICKUP}").tasks == (GOTO, PICKUP)
    # comma-separated suites get folders of their own: named after their ids, or a hash when many
    pair = resolve_suite(f"{GOTO}, {PICKUP}")
    assert pair.name == "BabyAI-GoTo+BabyAI-Pickup"
    assert default_out("random", pair.name, 0) == Path("runs/eval/random-BabyAI-GoTo_BabyAI-Pickup-s0")
    babyai_ids, babaisai_ids = resolve_suite("babyai").tasks, resolve_suite("babaisai").tasks[:5]
    long_names = {resolve_suite(list(ids)).name for ids in (babyai_ids, babaisai_ids)}
    assert len(long_names) == 2 and all(n.startswith("5-tasks-") for n in long_names)
    with pytest.raises(gym.error.UnregisteredEnv, match="BabyAI-GoTo-v0"):
        resolve_suite("verlog/BabyAI-Goto-v0")
    assert game_of("verlog/BabaIsAI-goto_win-distr_obj-v0") == "babaisai"
    assert short_name(GOTO) == "BabyAI-GoTo"
    seeds = {episode_seed(0, t, i) for t in babyai.tasks for i in range(50)}
    assert len(seeds) == 250 and all(0 <= s < 2**31 for s in seeds)
    assert episode_seed(0, GOTO, 3) == episode_seed(0, GOTO, 3) != episode_seed(1, GOTO, 3)


# ---------------------------------------------------------------------------------------------- end to end
def test_random_baseline_writes_every_output_and_ignores_the_schedule(tmp_path: Path) -> None:
    common = {"suite": [GOTO, PICKUP], "episodes": 3, "env_kwargs": SHORT}
    summary = evaluate("random", out=tmp_path / "a", num_envs=2, **common)
    for name in ("episodes.jsonl", "settings.json", "summary.json", "results.md", "scores.png"):
        assert (tmp_path / "a" / name).stat().st_size > 0
    records = _records(tmp_path / "a")
    assert len(records) == 6 and summary["played_now"] == 6
    for r in records:
        assert r["seed"] == episode_seed(0, r["task"], r["episode"])
        assert r["agent"] == "random" and r["game"] == "babyai" and 1 <= r["length"] <= 12
        assert set(r) >= {"id", "return", "success", "progression", "invalid_actions"}
    on_file = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert on_file["tasks"][GOTO]["episodes"] == 3 and on_file["games"]["babyai"]["episodes"] == 6
    assert "| BabyAI-Pickup | babyai | 3 |" in (tmp_path / "a" / "results.md").read_text()
    # one env at a time (no parallel tasks, no partial batches) plays exactly the same episodes
    evaluate("random", out=tmp_path / "b", num_envs=1, **common)
    assert _by_episode(_records(tmp_path / "b")) == _by_episode(records)


class _CountedLine(LineEnv):
    """The test line walk, keeping the seed of every episode begun (the sync vector env runs it here)."""

    begun: ClassVar[list[int | None]] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        _CountedLine.begun.append(seed)
        return super().reset(seed=seed, options=options)


@pytest.mark.parametrize("num_envs", [1, 2, 8])
def test_an_evaluation_begins_only_the_episodes_it_plays(num_envs: int) -> None:
    """No autoreset after an episode: a TextWorld game is generated on the reset that begins it (minutes)."""
    if COUNTED not in gym.registry:
        gym.register(COUNTED, entry_point=_CountedLine)
    _CountedLine.begun.clear()
    records: list[dict] = []
    settings = EnvSettings(num_envs=num_envs, env_kwargs={"max_steps": 4})
    assert play(RandomAgent(), [COUNTED], 5, 0, settings, on_record=records.append) == 5
    assert len(_CountedLine.begun) == 5, _CountedLine.begun  # one reset per episode played, no autoreset
    seeds = sorted(episode_seed(0, COUNTED, i) for i in range(5))
    assert sorted(_CountedLine.begun) == seeds == sorted(r["seed"] for r in records)


def test_a_crashed_evaluation_resumes_without_replaying(tmp_path: Path) -> None:
    common = {"suite": [GOTO, PICKUP], "episodes": 4, "num_envs": 3, "env_kwargs": SHORT}
    whole = evaluate("random", out=tmp_path / "whole", **common)

    evaluate("random", out=tmp_path / "cut", **common)
    log = tmp_path / "cut" / "episodes.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:3]) + lines[3][:25])  # a crash in the middle of the 4th record
    kept = {(r["task"], r["seed"]) for r in _records_of(lines[:3])}

    resumed = evaluate("random", out=tmp_path / "cut", **common)
    assert resumed["resumed"] == 3 and resumed["played_now"] == 5
    records = _records(tmp_path / "cut")
    assert len(records) == 8  # the cut line is gone, the 3 kept ones were not played again
    assert {(r["task"], r["seed"]) for r in records[:3]} == kept
    assert _by_episode(records) == _by_episode(_records(tmp_path / "whole"))
    for key in ("tasks", "games", "overall"):
        assert resumed[key] == whole[key]

    again = evaluate("random", out=tmp_path / "cut", **common)  # nothing left to play
    assert again["played_now"] == 0 and again["overall"] == whole["overall"]
    with pytest.raises(EvalError, match="seed: 0 there, 1 now"):
        evaluate("random", out=tmp_path / "cut", seed=1, **common)


def _records_of(lines: list[bytes]) -> list[dict]:
    return [json.loads(line) for line in lines]


def test_sub_env_info_unbatches_nested_dicts_and_skips_unset_keys() -> None:
    import numpy as np

    infos = {
        "progression": np.array([0.0, 0.5]),
        "_progression": np.array([True, True]),
        "achievements": {"wood": np.array([0, 3]), "_wood": np.array([True, True])},
        "_achievements": np.array([True, True]),
        "won": np.array([False, True]),
        "_won": np.array([False, True]),
        "final_info": {"x": np.array([1, 2])},
    }
    assert sub_env_info(infos, 1) == {"progression": 0.5, "achievements": {"wood": 3}, "won": True}
    assert sub_env_info(infos, 0) == {"progression": 0.0, "achievements": {"wood": 0}}


def test_episode_log_skips_bad_lines_and_repairs_a_cut_tail(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    good = {"task": GOTO, "seed": 1, "episode": 0}
    path.write_text(json.dumps(good) + "\nnot json\n" + json.dumps({"x": 1}) + '\n{"task": "ver')
    log = EpisodeLog(path)
    assert log.read() == [good]
    assert log.bad_lines == 2 and log.repaired
    log.append(good)
    assert path.read_text().endswith("}\n" + json.dumps(good) + "\n")


def test_without_matplotlib_the_scores_plot_is_said_to_be_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    out = tmp_path / "no-mpl"
    assert main(["random", "--suite", GOTO, "--episodes", "1", "--out", str(out), "--quiet"]) == 0
    assert "matplotlib is not installed: scores.png not drawn" in capsys.readouterr().err
    assert (out / "summary.json").is_file() and not (out / "scores.png").exists()


def test_cli_command_and_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="verlog")
    add_eval_command(parser.add_subparsers(dest="command"))
    out = tmp_path / "cli"
    args = parser.parse_args(
        ["eval", "random", "--suite", GOTO, "--episodes", "2", "--out", str(out), "--quiet"]
        + ["--env-kwargs", "{ max_episode_steps = 5 }"]
    )
    assert args.func(args) == 0
    assert "2 episodes played now" in capsys.readouterr().out
    assert all(r["length"] <= 5 for r in _records(out))
    bad = parser.parse_args(["eval", "random", "--suite", "verlog/BabyAI-Goto-v0", "--quiet"])
    assert run_eval(bad) == 2
    assert "did you mean 'verlog/BabyAI-GoTo-v0'" in capsys.readouterr().err
    typo = parser.parse_args(["eval", "random", "--suite", "balrgo", "--quiet"])
    assert run_eval(typo) == 2
    err = capsys.readouterr().err
    assert "no suite or env id 'balrgo' (did you mean 'balrog'?)" in err and len(err.splitlines()) == 1
    assert f"suites: {', '.join(SUITES)};" in err and "`verlog list`" in err
    wrong = parser.parse_args(["eval", "random", "--suite", GOTO, "--quiet", "--env-kwargs", "{ speed = 3 }"])
    assert run_eval(wrong) == 2
    assert "speed" in capsys.readouterr().err


def test_eval_help_lists_every_suite(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    suites = text.split("--suite SUITE ", 1)[1].split("--episodes", 1)[0]  # the option, not the usage
    assert [name for name in SUITES if f"{name} (" not in suites] == []
    assert "balrog (all 56)" in suites and "babaisai (40 tasks)" in suites


# ---------------------------------------------------------------------------------------------- models
def test_model_sources_name_what_is_missing(tmp_path: Path) -> None:
    run = tmp_path / "run-0001"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.toml").write_text("")
    with pytest.raises(EvalError, match="no complete checkpoint"):
        resolve_model(str(run))
    (run / "checkpoints" / "000004" / "state").mkdir(parents=True)
    (run / "checkpoints" / "000004" / "trainer-0.json").write_text("{}")
    with pytest.raises(EvalError, match=r"no actor/ folder .*holds: state, trainer-0.json.*export_actor"):
        resolve_model(str(run))
    with pytest.raises(EvalError, match="not a model folder"):
        resolve_model(str(tmp_path))
    with pytest.raises(EvalError, match="no such folder"):
        resolve_model(str(tmp_path / "missing"))


def test_a_tiny_model_from_a_run_checkpoint(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from verlog.models.tiny import build_tiny

    torch.set_num_threads(1)
    run = tmp_path / "tiny-0001"
    actor = run / "checkpoints" / "000002" / "actor"
    build_tiny(actor, GOTO, memory="none")
    (run / "config.toml").write_text(
        f'[env]\nid = "{GOTO}"\nmemory = "none"\nmemory_kwargs = {{}}\n'
        "kwargs = { invalid_action_penalty = -0.1, invalid_action_feedback = false }\n"
        '[prompt]\nformat = "action"\nmax_prompt_tokens = 1024\nmax_response_tokens = 3\n'
    )
    source = resolve_model(str(run))
    assert Path(source.model_path) == actor and source.run_dir == run
    summary = evaluate(
        str(run), GOTO, out=tmp_path / "eval", episodes=2, num_envs=2, env_kwargs={"max_episode_steps": 4}
    )
    records = _records(tmp_path / "eval")
    assert len(records) == 2 and all(r["length"] == 4 and r["agent"] == str(actor) for r in records)
    agent = summary["agent"]
    assert agent["model"] == str(actor) and agent["greedy"] and agent["max_response_tokens"] == 3
    assert summary["memory"] == "none" and 1 <= summary["mean_response_tokens_now"] <= 3
    # scored on its training env with other settings than in training: said (the penalty does not count)
    assert summary["notes"] == ["BabyAI-GoTo not as trained: invalid_action_feedback"]
    # greedy decoding of a fixed model on seeded episodes: a second run plays the same episodes
    evaluate(
        str(run), GOTO, out=tmp_path / "again", episodes=2, num_envs=1, env_kwargs={"max_episode_steps": 4}
    )
    assert _by_episode(_records(tmp_path / "again")) == _by_episode(records)
    matched = {"max_episode_steps": 2, "invalid_action_feedback": False}
    assert "notes" not in evaluate(str(run), GOTO, out=tmp_path / "matched", episodes=1, env_kwargs=matched)


# ---------------------------------------------------------------------------------------------- oracle
def test_the_oracle_solves_babaisai_levels(tmp_path: Path) -> None:
    levels = ["verlog/BabaIsAI-goto_win-v0", "verlog/BabaIsAI-make_win-distr_obj-v0"]
    summary = evaluate("oracle", levels, out=tmp_path / "oracle", episodes=2, num_envs=3)
    assert summary["overall"]["score"] == pytest.approx(100.0)
    assert all(r["success"] for r in _records(tmp_path / "oracle"))
    with pytest.raises(EvalError, match="BabaIsAI's solver"):
        evaluate("oracle", GOTO, out=tmp_path / "no", episodes=1)


def test_the_oracle_wins_where_a_shortest_plan_is_over_its_budget() -> None:
    """This deep two-room level needs ~1M states to prove a plan shortest: the oracle plays the fast
    search's plan instead of giving up on the episode."""
    env = gym.make("verlog/BabaIsAI-two_room-make_win-distr_rule-v0")
    observation, info = env.reset(seed=1484440894)
    oracle = OracleAgent(max_states=20_000)
    oracle.start("level#0", 1484440894, env)
    terminated = truncated = False
    while not (terminated or truncated):
        (action,) = oracle.act([Turn("level#0", observation, info)])
        observation, _, terminated, truncated, info = env.step(action)
    assert terminated and info["progression"] == 1.0
    assert oracle.not_shortest == {"level#0"} and not oracle.unsolved
