"""The entropy bonus that adapts to a target entropy: it rises while the policy is under the target, falls while
over, stays in its bounds, and a resumed run goes on with the coefficient it had."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.config import load_config
from verlog.models.tiny import build_tiny
from verlog.ppo.trainer import Trainer
from verlog.ppo.update import MAX_ENTROPY_COEF, MIN_ENTROPY_COEF, EntropyBonus
from verlog.runkit.validate import problems


def _bonus(*overrides: str) -> EntropyBonus:
    return EntropyBonus(load_config(None, list(overrides)).ppo)


def _entropy(value: float) -> dict[str, float]:
    return {"losses/entropy": value}


def test_the_bonus_rises_under_the_target_and_falls_over_it_at_most_one_factor_an_update() -> None:
    bonus = _bonus("ppo.entropy_coef=0.01", "ppo.entropy_target=0.5", "ppo.entropy_target_rate=0.1")
    up = 0.01 * math.exp(0.1)
    assert bonus.observe(_entropy(0.0)) == pytest.approx(up)  # far under: the whole step up
    assert bonus.observe(_entropy(0.25)) == pytest.approx(up * math.exp(0.05))  # half way under: half a step
    down = bonus.coef * math.exp(-0.1)
    assert bonus.observe(_entropy(5.0)) == pytest.approx(down)  # far over: clipped to one step down
    assert bonus.observe(_entropy(0.5)) == pytest.approx(down)  # on target: unchanged
    assert bonus.observe({}) == pytest.approx(down)  # every optimiser step skipped: no entropy this update
    assert bonus.coef_after(1000) == pytest.approx(down)  # the adapted value, not a schedule's


def test_the_bonus_stays_in_its_bounds() -> None:
    high = _bonus("ppo.entropy_coef=0.9", "ppo.entropy_target=1", "ppo.entropy_target_rate=1")
    low = _bonus("ppo.entropy_coef=2e-5", "ppo.entropy_target=1", "ppo.entropy_target_rate=1")
    for _ in range(5):
        high.observe(_entropy(0.0))
        low.observe(_entropy(10.0))
    assert (high.coef, low.coef) == (MAX_ENTROPY_COEF, MIN_ENTROPY_COEF)


def test_without_a_target_the_schedule_sets_the_bonus() -> None:
    bonus = _bonus("ppo.entropy_coef=0.03", "ppo.entropy_coef_final=0.01", "ppo.entropy_anneal_updates=10")
    bonus.observe(_entropy(0.0))
    assert (bonus.coef_after(0), bonus.coef_after(5), bonus.coef_after(20)) == pytest.approx(
        (0.03, 0.02, 0.01)
    )


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["ppo.entropy_target=-1"], "ppo.entropy_target must be >= 0 (0 = off)"),
        (["ppo.entropy_target=0.5", "ppo.entropy_coef=0"], "it needs ppo.entropy_coef > 0"),
        (["ppo.entropy_target=0.5", "ppo.entropy_target_rate=0"], "ppo.entropy_target_rate must be > 0"),
        (["ppo.entropy_target=0.5", "ppo.entropy_anneal_updates=10"], "no schedule beside it"),
    ],
)
def test_a_bad_target_is_a_clear_problem(overrides: list[str], said: str) -> None:
    assert any(said in problem for problem in problems(load_config(None, overrides)))


def _coefs(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["charts/entropy_coef"] for row in rows if "charts/entropy_coef" in row]


def test_a_run_adapts_the_bonus_and_a_resumed_run_goes_on_from_the_saved_one(tmp_path: Path) -> None:
    """A target far over any entropy: every update's bonus is the last one's times exp(rate), across a resume."""
    torch.set_num_threads(1)
    model = build_tiny(tmp_path / "model", TOY_ID)
    overrides = [
        f"run.output_dir={tmp_path}", "run.name=toy", "run.console=false", "run.torch_threads=1",
        "run.export_actor=false", f"model.path={model}", f"env.id={TOY_ID}", "env.num_envs=2",
        "env.kwargs={max_steps = 4}", "prompt.max_response_tokens=5", "ppo.turns_per_update=2",
        "ppo.num_minibatches=1", "ppo.micro_batch_tokens=512", "run.total_updates=2", "run.checkpoint_every=1",
        "ppo.entropy_coef=0.01", "ppo.entropy_target=1e6", "ppo.entropy_target_rate=0.5",
    ]  # fmt: skip
    trainer = Trainer(load_config(None, overrides))
    trainer.train()
    run_dir = trainer.run_dir
    assert _coefs(run_dir) == pytest.approx([0.01, 0.01 * math.exp(0.5)], rel=1e-4)
    shutil.rmtree(
        run_dir / "checkpoints" / "000002"
    )  # resume from update 1: its bonus was already moved once
    resumed = Trainer(load_config(run_dir / "config.toml", ["run.total_updates=3"]), resume=run_dir)
    resumed.train()
    assert _coefs(run_dir) == pytest.approx([0.01, 0.01 * math.exp(0.5), 0.01 * math.exp(1.0)], rel=1e-4)
