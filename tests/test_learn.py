"""benchmarks/learn.py's check: pooled success windows, their standard errors and the three-SE rule.

The check runs on metrics.jsonl records; the demonstration itself (`nox -s learn`) is the proof that the
learner learns, these tests only make sure its arithmetic cannot pass a learner that does not."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("learn_demo", ROOT / "benchmarks" / "learn.py")
learn = importlib.util.module_from_spec(_spec)
sys.modules["learn_demo"] = learn
_spec.loader.exec_module(learn)


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


def test_the_real_model_verdict_needs_three_standard_errors_and_fewer_invalid_answers() -> None:
    """benchmarks/learn_real.py's rule: success up by >= 3 SE of the difference, and the invalid rate down."""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # it imports learn.py's helpers as a sibling module
    spec = importlib.util.spec_from_file_location("learn_real_demo", ROOT / "benchmarks" / "learn_real.py")
    real = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real)
    before = {"success": 0.10, "success_se": 0.03, "invalid_action_rate": 0.30, "invalid_se": 0.01}
    learned = {"success": 0.40, "success_se": 0.05, "invalid_action_rate": 0.10, "invalid_se": 0.01}
    result = real.verdict(before, learned)
    assert result["passed"] and result["z"] == pytest.approx(0.30 / math.sqrt(0.03**2 + 0.05**2))
    more_invalid = {**learned, "invalid_action_rate": 0.35}
    assert not real.verdict(before, more_invalid)["passed"]
    assert not real.verdict(before, {**learned, "success": 0.20})["passed"]  # 1.7 SE only
    assert real._episode_rate_se([0.0, 1.0]) == pytest.approx(0.5)
    assert math.isnan(real._episode_rate_se([0.5]))
