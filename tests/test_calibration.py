"""The bootstrap's calibration: each batch end's value against the discounted return that followed it."""

from __future__ import annotations

import pytest

from verlog.ppo.calibration import BootstrapCalibration


def test_a_record_closes_at_the_episode_end_with_the_discounted_return_that_followed() -> None:
    calibration = BootstrapCalibration(num_envs=2, gamma=0.5)
    calibration.open([3.0, 1.0])
    calibration.step([1.0, 0.0], [False, False])
    assert calibration.metrics() == {}  # nothing ended yet
    calibration.open([2.0, 1.0])  # the next batch end: env 0 now has two open records
    calibration.step([2.0, 4.0], [True, False])
    metrics = calibration.metrics()
    # env 0: first record 1 + 0.5 * 2 = 2 (value 3), second 2 (value 2); env 1 still running.
    assert metrics["critic/bootstrap_pairs"] == 2
    assert metrics["critic/bootstrap_return"] == pytest.approx(2.0)
    assert metrics["critic/bootstrap_value"] == pytest.approx(2.5)
    assert metrics["critic/bootstrap_error"] == pytest.approx(0.5)
    assert calibration.metrics() == {}  # drained


def test_a_record_whose_discount_faded_closes_without_waiting_for_the_end() -> None:
    calibration = BootstrapCalibration(num_envs=1, gamma=0.5)
    calibration.open([0.0])
    for _ in range(6):  # 0.5 ** 7 < 0.01
        calibration.step([1.0], [False])
    assert calibration.metrics() == {}
    calibration.step([1.0], [False])
    assert calibration.metrics()["critic/bootstrap_return"] == pytest.approx(sum(0.5**k for k in range(7)))


def test_its_state_round_trips_so_a_resumed_run_closes_the_same_pairs() -> None:
    import json

    original = BootstrapCalibration(num_envs=1, gamma=0.5)
    original.open([1.0])
    original.step([2.0], [False])
    copy = BootstrapCalibration(num_envs=1, gamma=0.5)
    copy.load_state_dict(json.loads(json.dumps(original.state_dict())))
    for calibration in (original, copy):
        calibration.step([4.0], [True])
    assert copy.metrics() == original.metrics()
