"""benchmarks/demos/learn.py's check: pooled success windows, their standard errors and the three-SE rule.

The check runs on metrics.jsonl records; the demonstration itself (`nox -s learn`) is the proof that the
learner learns, these tests only make sure its arithmetic cannot pass a learner that does not."""

from __future__ import annotations

import importlib
import io
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
learn = importlib.import_module("benchmarks.demos.learn")


def _records(successes: list[tuple[float | None, float]]) -> list[dict]:
    return [{"update": i + 1, "env/success": s, "charts/episodes": n} for i, (s, n) in enumerate(successes)]


def test_a_window_pools_episodes_across_updates() -> None:
    w = learn.window(_records([(1.0, 1), (0.0, 3), (None, 0)]))
    assert w["episodes"] == 4 and w["success"] == pytest.approx(0.25)
    assert w["se"] == pytest.approx(math.sqrt(0.25 * 0.75 / 4))
    assert (w["first_update"], w["last_update"]) == (1, 3)
    assert math.isnan(learn.window(_records([(None, 0)]))["success"])


def test_three_standard_errors_of_the_difference_are_required() -> None:
    flat = _records([(0.5, 20)] * 20)
    assert not learn.compare(flat)["passed"]  # no change: z = 0
    rising = _records([(0.1, 50)] * 2 + [(0.3, 10)] * 16 + [(0.5, 50)] * 2)
    result = learn.compare(rising)  # 10% of 20 updates = the first 2 and the last 2
    assert result["first"]["episodes"] == 100 and result["last"]["episodes"] == 100
    se = math.sqrt(0.1 * 0.9 / 100 + 0.5 * 0.5 / 100)
    assert result["gap_se"] == pytest.approx(se) and result["z"] == pytest.approx(0.4 / se)
    assert result["passed"]
    small = _records([(0.0, 4)] * 2 + [(0.5, 4)] * 16 + [(0.5, 4)] * 2)  # +50 points, but 8 episodes each
    assert learn.compare(small)["z"] < 3 and not learn.compare(small)["passed"]
    falling = _records([(0.5, 50)] * 2 + [(0.1, 50)] * 18)
    assert learn.compare(falling)["z"] < 0 and not learn.compare(falling)["passed"]
    empty_start = _records([(None, 0)] * 2 + [(0.9, 50)] * 18)  # nothing measured: it cannot pass
    assert not learn.compare(empty_start)["passed"]
    certain = _records([(0.0, 3)] * 2 + [(1.0, 3)] * 18)  # 0 of 6, then 6 of 6: SE 0, but too few episodes
    assert learn.compare(certain)["z"] == math.inf and not learn.compare(certain)["passed"]


def _learn_real():
    return importlib.import_module("benchmarks.demos.learn_real")


judge = importlib.import_module("benchmarks.demos.judge")


#: A random agent far below every trained figure below: the zero-shot rule alone decides there.
_FLOOR = {"success": 0.0, "success_se": 0.0, "invalid_action_rate": 0.0, "invalid_se": 0.0}


def test_the_real_model_verdict_needs_three_standard_errors_and_fewer_invalid_answers() -> None:
    """The success rule learn_real.py judges by: success up by >= 3 SE of the difference, the invalid rate down."""
    rule = judge.success_verdict
    before = {"success": 0.10, "success_se": 0.03, "invalid_action_rate": 0.30, "invalid_se": 0.01}
    learned = {"success": 0.40, "success_se": 0.05, "invalid_action_rate": 0.10, "invalid_se": 0.01}
    result = rule(before, learned, _FLOOR)
    assert result["passed"] and result["z"] == pytest.approx(0.30 / math.sqrt(0.03**2 + 0.05**2))
    more_invalid = {**learned, "invalid_action_rate": 0.35}
    assert not rule(before, more_invalid, _FLOOR)["passed"]
    assert not rule(before, {**learned, "success": 0.20}, _FLOOR)["passed"]  # 1.7 SE only
    never_invalid = {**before, "invalid_action_rate": 0.0, "invalid_se": 0.0}  # greedy answers: none to lower
    valid = {**learned, "invalid_action_rate": 0.0, "invalid_se": 0.0}
    assert rule(never_invalid, valid, _FLOOR)["passed"]
    assert not rule(never_invalid, learned, _FLOOR)["passed"]  # from none to some is a rise


def test_the_real_model_must_beat_random_too() -> None:
    """Three SE over zero-shot is not enough: the trained model must beat random on the same episodes by three
    SE of that difference as well (hand-computed: every SE of a difference here is sqrt(0.03^2 + 0.04^2) = 0.05)."""
    rule = judge.success_verdict
    zero_shot = {"success": 0.20, "success_se": 0.03, "invalid_action_rate": 0.40, "invalid_se": 0.02}
    random = {"success": 0.30, "success_se": 0.03, "invalid_action_rate": 0.0, "invalid_se": 0.0}
    trained = {"success": 0.44, "success_se": 0.04, "invalid_action_rate": 0.05, "invalid_se": 0.01}
    near_random = rule(zero_shot, trained, random)  # +0.24 = 4.8 SE over zero-shot, +0.14 = 2.8 over random
    assert near_random["z"] == pytest.approx(4.8) and near_random["z_random"] == pytest.approx(2.8)
    assert near_random["success_gain_se"] == pytest.approx(0.05) and near_random[
        "random_gain"
    ] == pytest.approx(0.14)
    assert not near_random["passed"]
    both = rule(zero_shot, {**trained, "success": 0.46}, random)  # 5.2 and 3.2 SE
    assert both["z"] == pytest.approx(5.2) and both["z_random"] == pytest.approx(3.2) and both["passed"]
    above_random_only = rule({**zero_shot, "success": 0.32}, {**trained, "success": 0.46}, random)
    assert above_random_only["z"] == pytest.approx(2.8) and not above_random_only["passed"]  # 0.14 / 0.05
    hopeless = {**random, "success": 0.0, "success_se": 0.0}  # 0 of n, then n of n: no SE, any gain counts
    assert rule(zero_shot, {**trained, "success": 1.0, "success_se": 0.0}, hopeless)["z_random"] == math.inf


def test_the_random_baseline_is_kept_per_task_episodes_and_seeds() -> None:
    """Random's evaluation is reused when the task, its kwargs, memory, episode count and base seed agree; the
    envs played at once are no part of the key (the agent seeds itself from each episode's seed)."""
    from benchmarks import common

    args = ("verlog/BabyAI-GoTo-v0", {"room_size": 5}, "none", {}, 128, 10_000)
    key = common.random_key(*args)
    assert key == {"agent": "random", "env_id": "verlog/BabyAI-GoTo-v0", "env_kwargs": {"room_size": 5},
                   "memory": "none", "memory_kwargs": {}, "episodes": 128, "seed": 10_000}  # fmt: skip
    folder = common.random_folder(key)
    assert folder.parent == Path("runs") / "random" and len(folder.name) == 12
    assert common.random_folder(common.random_key(*args)) == folder  # the same key, the same folder
    others = [
        common.random_key("verlog/BabyAI-GoTo-v0", {"room_size": 6}, "none", {}, 128, 10_000),
        common.random_key("verlog/BabyAI-GoTo-v0", {"room_size": 5}, "none", {}, 64, 10_000),
        common.random_key("verlog/BabyAI-GoTo-v0", {"room_size": 5}, "none", {}, 128, 0),
        common.random_key("verlog/BabaIsAI-v0", {"room_size": 5}, "none", {}, 128, 10_000),
    ]
    assert len({common.random_folder(k) for k in others} | {folder}) == 5
    command = judge.random_command(*args[:4], Path("out"), 128, 10_000, 32)
    assert command[command.index("eval") + 1] == "random" and "--sample" not in command
    assert (
        command[command.index("--seed") + 1] == "10000" and command[command.index("--episodes") + 1] == "128"
    )
    assert 'env.memory="none"' in command and command[command.index("--env-kwargs") + 1] == "{room_size = 5}"


def test_a_results_file_is_judged_again_against_random(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--rejudge``: random plays each seed's judged episodes, the figures stay, the verdict is recomputed and
    the old one kept (once), and the passed and failed seed lists follow."""
    real = _learn_real()
    task = {"env_id": "verlog/BabyAI-GoTo-v0", "env_kwargs": {"room_size": 5, "shaping": 0.0}}
    zero_shot = {"success": 0.20, "success_se": 0.03, "invalid_action_rate": 0.40, "invalid_se": 0.02,
                 "episodes": 128}  # fmt: skip
    config = {"env": {"id": task["env_id"], "kwargs": {"room_size": 5, "shaping": 0.25}, "memory": "none",
                      "memory_kwargs": {}}, "panel": {"env_id": "", "env_kwargs": {"shaping": 0.0}}}  # fmt: skip
    seeds = []
    for seed, success in ((1, 0.46), (3, 0.44)):
        trained = {**zero_shot, "success": success, "success_se": 0.04, "invalid_action_rate": 0.05}
        entry = {"seed": seed, "eval_seed": 10_000 + seed, "zero_shot": zero_shot, "trained": trained,
                 "config": config, "curve": []}  # fmt: skip
        seeds.append({**entry, **judge.success_verdict(zero_shot, trained, _FLOOR)})
    path = tmp_path / "learn_real.json"
    path.write_text(json.dumps({"task": task, "seeds_passed": [1, 3], "seeds_failed": [], "seeds": seeds}))
    played = []

    def fake_random(env_id, env_kwargs, memory, memory_kwargs, episodes, seed, num_envs):
        played.append((env_id, env_kwargs, memory, episodes, seed))
        return (
            {"success": 0.30, "success_se": 0.03, "invalid_action_rate": 0.0, "invalid_se": 0.0},
            None,
            True,
        )

    monkeypatch.setattr(real, "random_baseline", fake_random)
    results = real.rejudge(path, 32)
    assert played == [(task["env_id"], task["env_kwargs"], "none", 128, 10_001),
                      (task["env_id"], task["env_kwargs"], "none", 128, 10_003)]  # fmt: skip
    assert results["seeds_passed"] == [1] and results["seeds_failed"] == [3]
    one, three = results["seeds"]
    assert one["trained"] == seeds[0]["trained"] and one["zero_shot"] == zero_shot  # the figures stay
    assert one["z_random"] == pytest.approx(3.2) and three["z_random"] == pytest.approx(2.8)
    assert three["verdict_before_random"]["passed"] and three["verdict_before_random"]["z"] == pytest.approx(
        4.8
    )
    assert three["random"]["success"] == 0.30 and not three["passed"]
    path.write_text(json.dumps(results))
    again = real.rejudge(path, 32)  # judged again: the verdict before random is still the first one
    assert again["seeds"][1]["verdict_before_random"]["passed"] and again["seeds_failed"] == [3]
    real.plot(again, tmp_path / "again.png")
    wrong = {**task, "env_kwargs": {"room_size": 6}}
    path.write_text(json.dumps({**results, "task": wrong}))
    with pytest.raises(SystemExit, match="was judged on"):
        real.rejudge(path, 32)


def test_the_tiny_demo_must_beat_the_initial_model_and_random() -> None:
    """benchmarks/demos/learn.py's evaluation rule: the trained model beats both by >= 3 SE of the difference;
    the seed's ``z`` is the held-out gain over the initial model (the windows' when nothing was played)."""
    initial = {"success": 0.10, "success_se": 0.03}
    random = {"success": 0.25, "success_se": 0.03}
    result = learn.judge_evaluation(
        {"initial": initial, "trained": {"success": 0.39, "success_se": 0.04}, "random": random}
    )
    assert result["vs_initial"]["z"] == pytest.approx(5.8) and result["vs_random"]["z"] == pytest.approx(2.8)
    assert not result["passed"]
    result = learn.judge_evaluation(
        {"initial": initial, "trained": {"success": 0.41, "success_se": 0.04}, "random": random}
    )
    assert result["vs_random"]["z"] == pytest.approx(3.2) and result["passed"]
    windows = {"z": 6.0, "passed": True}
    entry = learn.with_verdict({"seed": 1}, windows, None)  # evaluation skipped: the windows decide
    assert entry["passed"] and entry["evaluation_verdict"] is None and entry["z"] == 6.0
    good = {"initial": initial, "trained": {"success": 0.41, "success_se": 0.04}, "random": random}
    entry = learn.with_verdict({"seed": 1}, windows, good)
    assert entry["passed"] and entry["z"] == pytest.approx(31 / 5) and entry["trained"]["success"] == 0.41
    assert not learn.with_verdict({}, {"z": 2.0, "passed": False}, good)["passed"]


def _one_run_file() -> dict:
    """A learn.json from before it was kept per seed: verlog eval's figures, the invalid rate in %."""
    env = {"id": "verlog/BabyAI-GoTo-v0", "kwargs": {"invalid_action_penalty": 0.0}, "memory": "none",
           "memory_kwargs": {}, "num_envs": 32}  # fmt: skip
    block = {"episodes": 96, "invalid_action_rate": 40.0, "mean_length": 9.0}
    return {
        "config": {"run": {"seed": 1}, "env": env}, "wall_s": 600.0, "updates": 100, "curve": [],
        "first": {"success": 0.4, "se": 0.07}, "last": {"success": 0.9, "se": 0.02}, "gap": 0.5,
        "gap_se": 0.073, "z": 6.0, "passed": True, "z_required": 3.0,
        "evaluation": {"initial": {**block, "success": 0.10, "se": 0.03},
                       "trained": {**block, "success": 0.39, "se": 0.04}},
    }  # fmt: skip


def test_the_tiny_demo_results_are_judged_again_against_random(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``learn.py --rejudge``: random plays the 96 episodes of base seed 0 the models played, with the run's env;
    a file from before learn.json was kept per seed becomes its seed's entry first, every figure kept."""
    old = _one_run_file()
    path = tmp_path / "learn.json"
    path.write_text(json.dumps(old))
    played = []

    def fake_random(env_id, env_kwargs, memory, memory_kwargs, episodes, seed, num_envs):
        played.append((env_id, env_kwargs, episodes, seed))
        return {"episodes": 96, "success": 0.25, "success_se": 0.03, "invalid_action_rate": 0.0}, None, False

    monkeypatch.setattr(learn, "play_random", fake_random)
    assert learn._rejudge_file(path, Console(file=io.StringIO())) == 1
    env = old["config"]["env"]
    assert played == [(env["id"], env["kwargs"], 96, 0)]
    results = json.loads(path.read_text())
    assert results["eval_seed"] == 0 and results["seeds_failed"] == [1] and results["earlier_runs"] == []
    (entry,) = results["seeds"]
    assert entry["verdict_before_random"] == {"passed": True} and entry["window_passed"]
    assert entry["evaluation_verdict"]["vs_random"]["z"] == pytest.approx(2.8) and not entry["passed"]
    assert (
        entry["windows"]["z"] == 6.0 and entry["windows"]["first"] == old["first"] and entry["wall_s"] == 600
    )
    assert entry["trained"]["success_se"] == 0.04 and entry["trained"]["invalid_action_rate"] == 0.4
    assert entry["z"] == pytest.approx(5.8)  # the held-out gain over the initial model, as the tables report


def test_the_tiny_demo_merges_each_seed_and_keeps_a_rerun_seeds_old_entry(tmp_path: Path) -> None:
    """learn.json through the judge's merge: a second seed's entry sits beside the first, and a rerun of a seed
    replaces its entry, the old one kept under earlier_runs (no training: the entries are made by hand)."""
    path = tmp_path / "learn.json"
    path.write_text(json.dumps(learn.from_one_run(_one_run_file())))
    blocks = {
        "initial": {"success": 0.10, "success_se": 0.03},
        "random": {"success": 0.25, "success_se": 0.03},
    }
    config = _one_run_file()["config"]
    header = learn.header(config, 96, 0)

    def run(seed: int, success: float) -> dict:
        trained = {"success": success, "success_se": 0.04}
        entry = {"seed": seed, "config": config, "eval_seed": 0}
        return learn.with_verdict(entry, {"z": 6.0, "passed": True}, {**blocks, "trained": trained})

    results = judge.record_seed(tmp_path, "learn", run(2, 0.39), header)  # 2.8 SE over random: fails
    assert [s["seed"] for s in results["seeds"]] == [1, 2]
    assert results["seeds_passed"] == [1] and results["seeds_failed"] == [2]
    assert results["seeds"][0]["windows"]["z"] == 6.0  # the first seed's entry kept whole
    assert json.loads(path.read_text()) == results
    again = judge.record_seed(tmp_path, "learn", run(1, 0.45), header)
    assert [s["seed"] for s in again["seeds"]] == [1, 2] and again["seeds_passed"] == [1]
    assert [(s["seed"], s["trained"]["success"]) for s in again["earlier_runs"]] == [(1, 0.39)]
    elsewhere = judge.record_seed(tmp_path, "learn", run(3, 0.45), learn.header(config, 96, 10_000))
    assert [s["seed"] for s in elsewhere["seeds"]] == [3]  # other episodes: the seeds judged on 0 move aside
    assert {s["judge"]["eval_seed"] for s in elsewhere["earlier_runs"] if "judge" in s} == {0}
    sharper = judge.record_seed(
        tmp_path, "learn", run(4, 0.5), learn.header(config, 96, 10_000, judge_temperature=0.5)
    )
    assert [s["seed"] for s in sharper["seeds"]] == [4]  # judged at another temperature: seed 3 moves aside


def _seed_entry(seed: int, passed: bool) -> dict:
    figures = {"success": 0.2, "success_se": 0.03, "invalid_action_rate": 0.3, "invalid_se": 0.01}
    curve = [
        {"update": u, "env/success": 0.1 * (u % 5), "charts/episodes": 4.0, "env/invalid_action_rate": 0.2,
         "curriculum/stage": 1.0 if u < 6 else 2.0, "watchdog/rollbacks": 0.0 if u < 8 else 1.0,
         **({"eval/success": 0.3, "eval/success_se": 0.08} if u % 4 == 0 else {})}
        for u in range(1, 11)
    ]  # fmt: skip
    return {"seed": seed, "passed": passed, "zero_shot": figures, "trained": {**figures, "success": 0.5},
            "success_gain": 0.3, "z": 4.0, "curve": curve}  # fmt: skip


def test_the_real_model_results_keep_every_seed_and_rerunning_a_seed_replaces_it(tmp_path: Path) -> None:
    """One results file per demonstration: seeds accumulate, a re-run seed replaces its entry (the replaced run
    is kept under earlier_runs), a file from
    before results were kept per seed becomes its seed's entry, and the plot draws every seed."""
    real = _learn_real()
    path = tmp_path / "learn_real.json"
    legacy = {
        "config": {"run": {"seed": 1}},
        "before": {"success": 0.2},
        "after": {"success": 0.4},
        "passed": True,
    }
    path.write_text(json.dumps(legacy))
    header = {"benchmark": "learn_real", "task": {"env_id": "verlog/BabyAI-GoTo-v0", "env_kwargs": {}}}
    merged = judge.merge(path, _seed_entry(3, passed=False), header)
    assert [s["seed"] for s in merged["seeds"]] == [1, 3]
    assert merged["seeds"][0]["zero_shot"] == {"success": 0.2} and merged["seeds"][0]["panel"] is False
    assert merged["seeds_passed"] == [1] and merged["seeds_failed"] == [3]
    path.write_text(json.dumps(merged))
    again = judge.merge(path, _seed_entry(3, passed=True), header)
    assert [s["seed"] for s in again["seeds"]] == [1, 3] and again["seeds_passed"] == [1, 3]
    assert [(s["seed"], s["passed"]) for s in again["earlier_runs"]] == [
        (3, False)
    ]  # the replaced run is kept
    path.write_text(json.dumps(again))
    third = judge.merge(path, _seed_entry(3, passed=False), header)
    assert [(s["seed"], s["passed"]) for s in third["earlier_runs"]] == [(3, False), (3, True)]
    assert third["seeds_failed"] == [3] and third["seeds_passed"] == [1]
    again["seeds"][0] = _seed_entry(1, passed=True)  # the legacy entry has no curve to draw
    real.plot(again, tmp_path / "learn_real.png")
    assert (tmp_path / "learn_real.png").stat().st_size > 10_000


def test_the_real_model_judge_plays_the_panels_task() -> None:
    """With a curriculum training on easier stages, the judge and the zero-shot baseline play the panel's task."""
    from verlog.config import load_config

    real = _learn_real()
    goto = load_config(ROOT / "envs" / "learn_goto.toml")
    env_id, kwargs = real.target(goto)
    assert env_id == "verlog/BabyAI-GoTo-v0" and "room_size" not in kwargs and "offered_actions" not in kwargs
    assert goto.curriculum.stages[0]["room_size"] == 5
    small = load_config(ROOT / "envs" / "learn_real.toml")
    assert real.target(small) == (small.env.id, small.env.kwargs)


def test_the_real_model_judge_decodes_as_the_panel_does() -> None:
    """Sampled at the training temperature by default; greedy (BALROG's leaderboard setting) with
    ``panel.greedy = true``, so the judged figures and the panel's curve are the same kind of number."""
    from verlog.config import load_config

    real = _learn_real()
    config = load_config(ROOT / "benchmarks" / "demos" / "attempts" / "learn_babaisai_gigpo.toml")
    sampled = real.eval_command("m", config, Path("c.toml"), Path("out"), 64, 10_000, 32)
    assert "--sample" in sampled and sampled[sampled.index("--episodes") + 1] == "64"
    config.panel.greedy = True
    greedy = real.eval_command("m", config, Path("c.toml"), Path("out"), 64, 10_000, 32, "best")
    assert "--sample" not in greedy and greedy[-2:] == ["--checkpoint", "best"]


def test_the_real_model_judge_can_play_the_panels_best_checkpoint(tmp_path: Path) -> None:
    """``--judge best`` judges the checkpoint best.json names, not the newest; ``newest`` the last one saved."""
    from verlog.runkit.folder import checkpoint_dir, checkpoint_name, mark_best

    real = _learn_real()
    for update in (16, 32, 48):
        (checkpoint_dir(tmp_path) / checkpoint_name(update)).mkdir(parents=True)
    assert real.checkpoint_judged(tmp_path, "best") is None  # no panel yet: nothing to pick
    mark_best(tmp_path, 32, {"eval/success": 0.5})
    assert real.checkpoint_judged(tmp_path, "best") == 32
    assert real.checkpoint_judged(tmp_path, "newest") == 48


@pytest.mark.slow
def test_the_quick_preset_shows_learning_within_its_run(tmp_path: Path) -> None:
    """envs/quick.toml is the run a newcomer watches learn (about two minutes on 2 cores): over its 15 updates
    invalid answers fall, entropy falls and success rises (means of the first and last 5 updates, as its
    closing panel shows them)."""
    import os
    import subprocess

    command = [
        sys.executable, "agents/ppo.py", "--config", "envs/quick.toml", f"run.output_dir={tmp_path}",
        f"model.path={tmp_path / 'model'}",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "quick-0001" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == list(range(1, 16))

    def mean(part: list[dict], key: str) -> float:
        return sum(r[key] for r in part) / len(part)

    first, last = rows[:5], rows[-5:]
    assert mean(last, "env/invalid_action_rate") < mean(first, "env/invalid_action_rate") - 0.15
    assert mean(last, "losses/entropy") < mean(first, "losses/entropy") - 0.5
    assert mean(last, "env/success") > mean(first, "env/success") + 0.05
    assert "first→last  success" in done.stdout


# ------------------------------------------------------------------------------------- a mix, judged per kind
held_out = importlib.import_module("benchmarks.demos.held_out")

#: Verlog's four BabaIsAI families, the ones envs/learn_babaisai_mix.toml draws from.
VERLOG_FAMILIES = (
    "goto_win-distr_obj",
    "two_room-goto_win",
    "two_room-goto_win-distr_obj_rule",
    "two_room-maybe_break_stop-goto_win",
)


def _block(
    success: float, se: float, episodes: int = 128, invalid: float = 0.1, length: float = 20.0
) -> dict:
    return {"episodes": episodes, "success": success, "success_se": se, "invalid_action_rate": invalid,
            "mean_length": length}  # fmt: skip


def test_a_mix_is_judged_kind_by_kind_against_the_initial_model_and_random() -> None:
    """Each kind passes on its own figures (3 SE of the difference over both, hand-computed: every SE of a
    difference below is sqrt(0.03^2 + 0.04^2) = 0.05); a seed passes only when every kind and the training
    windows do; the pooled mix is reported beside, with the stratified SE."""
    initial, random = _block(0.10, 0.03), _block(0.25, 0.03)
    evaluations = {
        "goto": {"initial": initial, "trained": _block(0.41, 0.04), "random": random},  # 6.2 and 3.2 SE
        "pickup": {"initial": initial, "trained": _block(0.39, 0.04), "random": random},  # 2.8 over random
        "open": {"initial": _block(0.30, 0.03), "trained": _block(0.44, 0.04), "random": _block(0.0, 0.03)},
    }
    judged = held_out.judge_tasks(evaluations)
    assert judged["tasks_passed"] == ["goto"] and judged["tasks_failed"] == ["pickup", "open"]
    goto, pickup, opened = (judged["tasks"][k]["verdict"] for k in ("goto", "pickup", "open"))
    assert goto["vs_initial"]["z"] == pytest.approx(6.2) and goto["vs_random"]["z"] == pytest.approx(3.2)
    assert pickup["vs_random"]["z"] == pytest.approx(2.8) and not pickup["passed"]
    assert (
        opened["vs_initial"]["z"] == pytest.approx(2.8) and opened["vs_random"]["z"] > 3
    )  # over the initial: no
    mix = judged["mix"]["trained"]
    assert mix["episodes"] == 384 and mix["success"] == pytest.approx((0.41 + 0.39 + 0.44) / 3)
    assert mix["success_se"] == pytest.approx(math.sqrt(3 * 0.04**2) / 3)

    windows = {"z": 6.0, "passed": True}
    entry = learn.with_task_verdicts({"seed": 1}, windows, evaluations)
    assert not entry["passed"] and entry["tasks_failed"] == ["pickup", "open"]
    assert (
        entry["tasks"]["goto"]["trained"]["success"] == 0.41 and entry["tasks"]["goto"]["verdict"]["passed"]
    )
    assert entry["trained"] == mix and entry["z"] == pytest.approx(judged["mix_verdict"]["vs_initial"]["z"])
    every = {k: {**e, "trained": _block(0.60, 0.04)} for k, e in evaluations.items()}
    assert learn.with_task_verdicts({"seed": 1}, windows, every)["passed"]
    assert not learn.with_task_verdicts({"seed": 1}, {"z": 2.0, "passed": False}, every)["passed"]


def test_the_kinds_of_a_mix_are_read_from_its_env_and_fixed_one_at_a_time() -> None:
    """A mix's kinds come from the env kwarg that draws them (registered, or the preset's over it); a single
    task is no mix; fixing a kind keeps every other setting; the results header names the kinds."""
    from verlog.config import load_config
    from verlog.envs.registration import BABYAI_TASKS

    assert held_out.task_kinds("verlog/BabyAI-Mixed-v0", {"room_size": 5}) == ("task", tuple(BABYAI_TASKS))
    assert held_out.task_kinds("verlog/BabyAI-Mixed-v0", {"task": ["goto", "open"]}) == (
        "task",
        ("goto", "open"),
    )
    assert held_out.task_kinds("verlog/BabyAI-Mixed-v0", {"task": "open"}) is None
    four = {"levels": list(VERLOG_FAMILIES), "max_steps": 50}
    assert held_out.task_kinds("verlog/BabaIsAI-v0", four) == ("levels", VERLOG_FAMILIES)
    assert held_out.task_kinds("verlog/BabaIsAI-v0", {"levels": ["goto_win"]}) is None
    goto = load_config(ROOT / "envs" / "learn.toml")
    assert held_out.task_kinds(goto.env.id, goto.env.kwargs) is None  # learn.toml is judged as it was
    fixed = held_out.kind_kwargs(four, "levels", "two_room-goto_win")
    assert fixed == {"levels": ["two_room-goto_win"], "max_steps": 50}
    assert held_out.kind_kwargs({"room_size": 5}, "task", "open") == {"room_size": 5, "task": "open"}
    header = learn.header(goto.to_dict(), 128, 10_000, "learn_mix", tuple(BABYAI_TASKS))
    assert header["benchmark"] == "learn_mix" and header["task"]["kinds"] == list(BABYAI_TASKS)
    assert learn.header(goto.to_dict(), 96, 10_000) == {
        "benchmark": "learn", "task": {"env_id": goto.env.id, "env_kwargs": goto.env.kwargs}, "episodes": 96,
        "eval_seed": 10_000, "judge_temperature": None, "z_required": 3.0,
    }  # fmt: skip
    assert learn.header(goto.to_dict(), 96, 10_000, judge_temperature=0.5)["judge_temperature"] == 0.5


def test_the_mix_presets_are_judged_on_babyais_five_kinds_and_verlogs_four_families() -> None:
    """envs/learn_babyai_mix.toml draws BALROG's five kinds (its env's own), envs/learn_babaisai_mix.toml exactly
    Verlog's four BabaIsAI families; each builds its own tiny model (a vocabulary of its own game's words)."""
    from verlog.config import load_config
    from verlog.envs.registration import BABYAI_TASKS

    babyai = load_config(ROOT / "envs" / "learn_babyai_mix.toml")
    assert held_out.task_kinds(babyai.env.id, babyai.env.kwargs) == ("task", tuple(BABYAI_TASKS))
    baba = load_config(ROOT / "envs" / "learn_babaisai_mix.toml")
    assert held_out.task_kinds(baba.env.id, baba.env.kwargs) == ("levels", VERLOG_FAMILIES)
    paths = {c.model.path for c in (babyai, baba, load_config(ROOT / "envs" / "learn.toml"))}
    assert len(paths) == 3 and babyai.model.build_tiny and baba.model.build_tiny


def test_the_judge_plays_without_what_only_training_has() -> None:
    """A shaping reward, BabyAI's bot_start and BabaIsAI's walk_start are set to 0 in the judge's env kwargs:
    it plays the game's own reward from its own resets; every other kwarg stays as trained."""
    trained = {"levels": ["goto_win"], "shaping": 0.25, "walk_start": 0.5, "walk_steps": 32, "bot_start": 0.3}
    assert held_out.judged_kwargs(trained) == {**trained, "shaping": 0.0, "walk_start": 0.0, "bot_start": 0.0}


def test_each_kind_of_a_mix_is_played_as_many_episodes_as_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-kind judge on a run trained one update: the initial model, the trained one and random each play
    the asked episodes of every kind, every episode of a kind's folder is of that kind, and a shaping reward
    and BabyAI's bot_start the run trained with are off in the judge (the game's own reward and resets); at a
    judge temperature both models are decoded at it, and a negative one is refused."""
    torch = pytest.importorskip("torch")
    from verlog.config import load_config
    from verlog.models.tiny import build_tiny
    from verlog.ppo.trainer import Trainer

    torch.set_num_threads(1)
    monkeypatch.chdir(tmp_path)  # random's evaluations are kept under runs/random
    kwargs = {"task": ["goto", "open"], "room_size": 5, "max_episode_steps": 3}
    model = build_tiny(tmp_path / "model", "verlog/BabyAI-Mixed-v0", kwargs, memory="none")
    config = load_config(
        None,
        [
            f"run.output_dir={tmp_path}", "run.name=mix", "run.console=false", "run.torch_threads=1",
            "run.total_updates=1", "run.checkpoint_every=0", f"model.path={model}",
            "env.id=verlog/BabyAI-Mixed-v0", "env.num_envs=2", "env.memory=none", "env.memory_kwargs={}",
            'env.kwargs={task = ["goto", "open"], room_size = 5, max_episode_steps = 3, shaping = 0.1, '
            "bot_start = 0.5}",
            "prompt.format=action",
            "prompt.max_response_tokens=1", "ppo.turns_per_update=2", "ppo.num_minibatches=1",
            "ppo.micro_batch_tokens=1024", "ppo.critic_warmup_iters=0",
        ],
    )  # fmt: skip
    Trainer(config).train()
    run_dir = tmp_path / "mix-0001"
    kinds = held_out.task_kinds(config.env.id, config.env.kwargs)
    assert kinds == ("task", ("goto", "open"))
    evaluations = held_out.evaluate_tasks(config, run_dir, 3, kinds)
    assert list(evaluations) == ["goto", "open"]
    assert {name: [evaluations[k][name]["episodes"] for k in evaluations] for name in evaluations["goto"]} == {
        "initial": [3, 3], "trained": [3, 3], "random": [3, 3]
    }  # fmt: skip
    for kind in ("goto", "open"):
        for name in ("initial", "trained"):
            folder = run_dir / f"eval-{name}-{kind}-seed{judge.EVAL_SEED}"
            rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
            assert rows and {r["family"] for r in rows} == {f"verlog/BabyAI-Mixed-v0:{kind}"}
            settings = json.loads((folder / "settings.json").read_text())
            assert settings["env_kwargs"]["shaping"] == 0.0 and settings["env_kwargs"]["task"] == kind
            assert settings["env_kwargs"]["bot_start"] == 0.0
    # another seed of the same recipe reads the initial model's episodes back from runs/judge, one per kind
    assert len(list((tmp_path / "runs" / "judge").glob("initial-*"))) == 2
    twin = tmp_path / "mix-0002"
    shutil.copytree(run_dir, twin, ignore=shutil.ignore_patterns("eval-*"))
    again = held_out.evaluate_tasks(config, twin, 3, kinds)
    for kind in ("goto", "open"):
        folder = twin / f"eval-initial-{kind}-seed{judge.EVAL_SEED}"
        assert json.loads((folder / "summary.json").read_text())["resumed"] == 3  # none played again
        assert again[kind]["initial"] == evaluations[kind]["initial"]
    # --judge-temperature: both models decoded alike at the judge's temperature (0 greedy), in their own folders
    goto = held_out.kind_kwargs(config.env.kwargs, "task", "goto")
    for temperature, label, decoding in (
        (0.5, "-t0.5", {"temperature": 0.5}),
        (0.0, "-greedy", {"greedy": True}),
    ):
        figures = held_out.evaluate_agents(config, run_dir, 2, goto, "goto", temperature)
        assert [figures[name]["episodes"] for name in ("initial", "trained", "random")] == [2, 2, 2]
        for name in ("initial", "trained"):
            folder = run_dir / f"eval-{name}-goto-seed{judge.EVAL_SEED}{label}"
            agent = json.loads((folder / "settings.json").read_text())["agent"]
            assert {k: agent.get(k) for k in decoding} == decoding
    with pytest.raises(SystemExit, match="a judge temperature must be 0 .greedy. or positive, not -1"):
        held_out.evaluate_agents(config, run_dir, 2, goto, "goto", -1.0)
