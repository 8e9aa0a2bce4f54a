"""benchmarks/demos/learn_crafter.py's judge: figures from an evaluation folder, and the rule that return and progression
must each beat the untrained model and random by three standard errors. The demonstration itself
(`nox -s learn_crafter`) is the proof that the learner learns Crafter; these tests make sure its arithmetic
cannot pass a learner that does not."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def judge():
    return importlib.import_module("benchmarks.demos.learn_crafter")


def _episode(ret: float, achievements: list[str], length: int, invalid: int = 0) -> dict:
    return {"return": ret, "achievements": achievements, "progression": len(achievements) / 22,
            "length": length, "invalid_actions": invalid}  # fmt: skip


def test_figures_are_per_episode_means_with_their_standard_errors(judge, tmp_path: Path) -> None:
    rows = [
        _episode(1.0, ["wake_up"], 100, invalid=10),
        _episode(3.0, ["collect_wood", "place_table", "wake_up"], 300),
    ]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    f = judge.figures(tmp_path)
    assert f["episodes"] == 2 and f["return"] == 2.0 and f["return_se"] == pytest.approx(1.0)
    assert f["achievements"] == 2.0 and f["progression"] == pytest.approx(2 / 22)
    assert f["length"] == 200 and f["invalid_action_rate"] == pytest.approx(0.05)
    assert f["achievement_rates"] == {"collect_wood": 0.5, "place_table": 0.5, "wake_up": 1.0}


def _block(ret: float, ret_se: float, prog: float, prog_se: float) -> dict:
    return {"return": ret, "return_se": ret_se, "progression": prog, "progression_se": prog_se}


def test_a_seed_passes_only_above_both_baselines_on_both_figures(judge) -> None:
    untrained = _block(0.5, 0.1, 0.05, 0.005)
    random = _block(1.2, 0.2, 0.10, 0.008)
    # return +5.4 SE over untrained but +2.1 over random (sqrt(0.2^2 + 0.2^2) = 0.28): fails
    close = judge.verdict(_block(1.8, 0.2, 0.20, 0.01), untrained, random)
    assert close["gains"]["return_over_random"]["z"] == pytest.approx(0.6 / math.sqrt(0.08))
    assert not close["passed"]
    # return well above both, progression above untrained but not random (0.125 vs 0.10: +1.9 SE): fails
    assert not judge.verdict(_block(2.5, 0.2, 0.125, 0.01), untrained, random)["passed"]
    both = judge.verdict(_block(2.5, 0.2, 0.16, 0.01), untrained, random)
    assert both["passed"] and min(g["z"] for g in both["gains"].values()) >= judge.Z_REQUIRED
    # SmolLM2's rule (--pass-on either): one figure above both baselines is enough, two halves are not
    assert judge.verdict(_block(2.5, 0.2, 0.125, 0.01), untrained, random, "either")["passed"]
    # return above random only, progression above untrained only: neither figure holds against both
    assert not judge.verdict(_block(1.8, 0.2, 0.125, 0.01), untrained, random, "either")["passed"]
    # a figure below a baseline is a negative z, never a pass
    assert (
        judge.verdict(_block(0.1, 0.1, 0.01, 0.01), untrained, random)["gains"]["return_over_untrained"]["z"]
        < 0
    )


def test_every_variant_is_a_valid_preset_override(judge) -> None:
    """Each ablation variant's overrides load and validate against the demonstration's preset."""
    from verlog.config import load_config
    from verlog.runkit.validate import validate

    for variant, overrides in judge.VARIANTS.items():
        config = load_config(ROOT / "envs" / "learn_crafter.toml", overrides)
        validate(config)
        assert (variant != "no-bootstrap") == config.ppo.window_bootstrap
        assert (variant == "no-warmup") == (config.ppo.critic_warmup_batches == 0)
        assert (variant == "grpo") == (not config.algo.critic)


def test_rerunning_a_cell_keeps_the_old_entry_under_earlier_runs(judge, tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    for passed in (True, False):
        record = {"variant": "verlog", "seed": 1, "passed": passed}
        path.write_text(json.dumps(judge.merge(path, record, {"benchmark": "r"})))
    other = judge.merge(path, {"variant": "grpo", "seed": 1, "passed": False}, {"benchmark": "r"})
    assert [s["passed"] for s in other["seeds"] if s["variant"] == "verlog"] == [False]
    assert other["earlier_runs"] == [{"variant": "verlog", "seed": 1, "passed": True}]
    assert other["seeds_failed"] == [["grpo", 1], ["verlog", 1]]


def test_a_changed_judge_moves_every_old_entry_to_earlier_runs(judge, tmp_path: Path) -> None:
    """Seeds judged on 16 episodes are not counted beside one judged on 32: they stay, with their judge."""
    path = tmp_path / "r.json"
    small = {"benchmark": "r", "episodes": 16, "eval_seed": 10_000}
    for seed in (1, 2):
        path.write_text(
            json.dumps(judge.merge(path, {"variant": "verlog", "seed": seed, "passed": False}, small))
        )
    same_judge = judge.merge(path, {"variant": "verlog", "seed": 3, "passed": False}, small)
    assert [s["seed"] for s in same_judge["seeds"]] == [1, 2, 3] and same_judge["earlier_runs"] == []
    big = {**small, "episodes": 32}
    merged = judge.merge(path, {"variant": "verlog", "seed": 3, "passed": True}, big)
    assert merged["seeds_passed"] == [["verlog", 3]] and merged["seeds_failed"] == []
    assert [(s["seed"], s["judge"]["episodes"]) for s in merged["earlier_runs"]] == [(1, 16), (2, 16)]


def test_two_seeds_finishing_at_once_write_the_results_file_in_turn(tmp_path: Path) -> None:
    """While one demonstration holds the results folder's lock, another waits for it before it reads the file."""
    import threading

    from benchmarks.common import locked

    order: list[str] = []

    def second() -> None:
        with locked(tmp_path):
            order.append("second")

    with locked(tmp_path):
        waiting = threading.Thread(target=second)
        waiting.start()
        waiting.join(timeout=0.5)
        assert waiting.is_alive()  # blocked on the lock, not done
        order.append("first")
    waiting.join(timeout=10)
    assert order == ["first", "second"] and list(tmp_path.iterdir()) == []


def test_long_run_health_flags_growing_memory_and_sums_the_counters() -> None:
    long_run = importlib.import_module("benchmarks.probes.long_run")

    def records(mb: list[float]) -> list[dict]:
        return [{"update": i + 1, "global_step": 512 * (i + 1), "sys/rss_mb": m, "time/total": 36.0,
                 "charts/episodes": 2.0, "charts/episodes_truncated": 1.0, "env/prompt_cuts": 0.0,
                 "charts/episodes_running": 30.0} for i, m in enumerate(mb)]  # fmt: skip

    settled = [2000.0] * long_run.SETTLE_UPDATES  # the first updates (allocators filling up) are left out
    flat = long_run.memory_health(records(settled + [1000.0, 1010.0, 995.0, 1005.0, 1000.0] * 4), 0.1)
    assert flat["flat"] and abs(flat["growth"]) < 0.02
    growing = long_run.memory_health(records(settled + [1000.0 + 20 * i for i in range(20)]), 0.1)
    assert not growing["flat"] and growing["growth"] > 0.1 and growing["slope_mb_per_hour"] > 0
    counts = long_run.counters(records([1000.0] * 4))
    assert counts == {"episodes_ended": 8.0, "episodes_truncated": 4.0, "prompt_cuts": 0.0,
                      "mean_episodes_running_at_window_edge": 30.0, "turns": 2048.0}  # fmt: skip
