"""The collapse watchdog rolls a collapsed run back to its last good checkpoint with a lower learning rate,
never touches a healthy run, and stops with one line after its last rollback; the validation panel plays
held-out episodes during training and keeps its best checkpoint for `verlog eval --checkpoint best`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from verlog.config import WatchdogConfig, load_config
from verlog.evaluation.panel import own_random_stream
from verlog.ppo.trainer import Trainer
from verlog.runkit.validate import validate
from verlog.runkit.watchdog import Collapsed, Watchdog

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the signals, by hand
def test_each_signal_is_measured_from_the_last_good_point() -> None:
    dog = Watchdog(WatchdogConfig())
    dog.saved(4)
    dog.healthy({"env/invalid_action_rate": 0.1, "losses/entropy": 5.0, "charts/capped_share": 0.2})
    assert dog.good_update == 4
    assert (
        dog.check({"env/invalid_action_rate": 0.35, "losses/entropy": 4.0, "charts/capped_share": 0.5})
        is None
    )
    assert "invalid-action rate rose by 0.35" in dog.check({"env/invalid_action_rate": 0.45})
    assert "entropy moved by -2.50 nats" in dog.check({"losses/entropy": 2.5})
    assert "entropy moved by +2.10 nats" in dog.check({"losses/entropy": 7.1})  # noise is a collapse too
    assert "ran to the token cap" in dog.check({"charts/capped_share": 0.95})
    capped = Watchdog(WatchdogConfig())
    capped.healthy({"charts/capped_share": 0.85})  # a model that mostly ran long already: not a new sign
    assert capped.check({"charts/capped_share": 1.0}) is None


def test_a_saved_checkpoint_is_the_good_point_only_once_the_next_update_passes() -> None:
    """Checkpoint k holds weights that act only in update k+1: its rollout must look healthy first."""
    dog = Watchdog(WatchdogConfig())
    dog.healthy({"losses/entropy": 5.0})  # update 1: the reference, no checkpoint behind it yet
    dog.saved(1)
    assert dog.good_update is None and dog.candidate == 1
    assert dog.check({"losses/entropy": 1.0}) is not None  # update 2 collapsed: checkpoint 1 is not good
    assert dog.good_update is None
    dog.healthy({"losses/entropy": 4.9})  # had update 2 been fine, checkpoint 1 would be the good point
    assert dog.good_update == 1 and dog.candidate is None
    assert dog.good == {"losses/entropy": pytest.approx(4.95)}  # the mean of the healthy updates so far


def test_the_reference_is_the_mean_of_recent_healthy_updates_so_one_lucky_update_is_not_the_bar() -> None:
    """learn_real seed 1 (entropy bonus, 96 updates): invalid rates 0.47, 0.41, 0.25, then a lucky 0.06, then an
    ordinary 0.44. Against the last update alone that is a rise of 0.38 (a rollback, and the replay met the same luck until the run stopped);
    against the mean of the last four (0.30) it is 0.14. A real jump still trips, and the window survives a
    checkpoint (a rollback restores the reference of its good point)."""
    alone, mean = Watchdog(WatchdogConfig(reference_updates=1)), Watchdog(WatchdogConfig())
    for rate in (0.47, 0.41, 0.25, 0.06):
        alone.healthy({"env/invalid_action_rate": rate})
        mean.healthy({"env/invalid_action_rate": rate})
    assert "rose by 0.38" in alone.check({"env/invalid_action_rate": 0.44})
    assert mean.check({"env/invalid_action_rate": 0.44}) is None
    assert "rose by 0.65" in mean.check({"env/invalid_action_rate": 0.95})
    mean.healthy({"env/invalid_action_rate": 0.44})  # 0.47 leaves the window of four
    assert mean.good == {"env/invalid_action_rate": pytest.approx((0.41 + 0.25 + 0.06 + 0.44) / 4)}
    again = Watchdog(WatchdogConfig())
    again.load_state_dict(json.loads(json.dumps(mean.state_dict())))
    assert again.good == mean.good and list(again.recent) == list(mean.recent)


def test_panel_success_falling_by_k_standard_errors_is_a_collapse() -> None:
    dog = Watchdog(WatchdogConfig(eval_drop_se=3.0))
    assert dog.check({"eval/success": 0.5, "eval/success_se": 0.05}) is None  # the first panel is the best
    assert dog.check({"eval/success": 0.35, "eval/success_se": 0.05}) is None  # 2.1 SE below: noise
    assert "panel success fell to 0.20 from its best 0.50" in dog.check(
        {"eval/success": 0.2, "eval/success_se": 0.05}
    )


def test_after_the_panel_falls_the_run_goes_back_to_the_best_panel_not_the_last_good_point() -> None:
    """learn_real seed 2 (16 envs): best panel 0.44 at update 16, spinning in place by update 25, panel 0.03 at
    32. The per-update signals saw nothing, so the last good point was update 30, already spinning: the run
    went back there three times. The panel's fall goes back to the best panel's checkpoint."""
    dog = Watchdog(WatchdogConfig())
    for update in range(1, 31):
        metrics = {"env/invalid_action_rate": 0.05, "losses/entropy": 1.0}
        if update == 16:
            metrics |= {"eval/success": 0.44, "eval/success_se": 0.09}
        assert dog.check(metrics) is None
        dog.healthy(metrics)
        dog.saved(update)
    assert "panel success fell to 0.03" in dog.check({"eval/success": 0.03, "eval/success_se": 0.03})
    assert dog.target(best_update=16) == 16
    assert dog.target(best_update=None) == 29  # no best checkpoint kept: the last good point
    assert "entropy moved" in dog.check({"losses/entropy": 3.5})  # a per-update collapse: the last good point
    assert dog.target(best_update=16) == 29


def test_rollbacks_lower_the_rate_until_the_last_then_stop() -> None:
    dog = Watchdog(WatchdogConfig(lr_factor=0.5, max_rollbacks=2))
    dog.roll_back("x")
    dog.roll_back("x")
    assert (dog.rollbacks, dog.lr_scale) == (2, 0.25)
    with pytest.raises(Collapsed, match=r"collapsed again \(y\) after 2 rollback\(s\)"):
        dog.roll_back("y")
    again = Watchdog(WatchdogConfig())
    again.load_state_dict(json.loads(json.dumps(dog.state_dict())))
    assert (again.rollbacks, again.lr_scale) == (2, 0.25)


# ------------------------------------------------------------------ real runs of the tiny preset
def _tiny(tmp_path: Path, *overrides: str) -> Trainer:
    config = load_config(
        ROOT / "envs" / "tiny.toml",
        [
            f"run.output_dir={tmp_path / 'runs'}",
            f"model.path={tmp_path / 'model'}",
            "run.console=false",
            "env.num_envs=2",
            "ppo.turns_per_update=4",
            "ppo.critic_warmup_batches=0",
            "ppo.critic_warmup_iters=0",
            *overrides,
        ],  # fmt: skip
    )
    validate(config)
    return Trainer(config)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_forced_collapse_rolls_back_lowers_the_rate_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = _tiny(
        tmp_path,
        "ppo.actor_lr=3.0",
        "run.total_updates=5",
        "run.checkpoint_every=2",
        "watchdog.lr_factor=0.001",
    )
    trainer.train()
    said = capsys.readouterr()
    lines = [line for line in (said.out + said.err).splitlines() if line.startswith("watchdog: ")]
    assert len(lines) == 1 and "rolled back to checkpoint 000000" in lines[0] and "actor lr 0.003" in lines[0]
    rows = [r for r in _rows(trainer.run_dir) if "watchdog/rollbacks" in r]
    assert [r["update"] for r in rows] == [
        1,
        2,
        3,
        4,
        5,
    ]  # the collapsed updates moved to metrics.dropped.jsonl
    assert rows[-1]["watchdog/rollbacks"] == 1 and math.isclose(rows[-1]["watchdog/actor_lr"], 0.003)
    assert trainer.update == 5 and (trainer.run_dir / "metrics.dropped.jsonl").is_file()
    assert all(math.isclose(g["lr"], 0.003) for g in trainer.learner.models.actor_optimizer.param_groups)


def test_the_actor_rate_follows_its_milestones_and_a_rollback_scales_the_scheduled_rate(
    tmp_path: Path,
) -> None:
    """``ppo.actor_lr_milestones``: the rate drops once each milestone update is done, as a function of the
    update count, so a resumed or rolled-back run trains at the rate its update number calls for."""
    trainer = _tiny(
        tmp_path, "ppo.actor_lr=1e-3", "ppo.actor_lr_milestones=[2]", "ppo.actor_lr_gamma=0.1",
        "run.total_updates=3", "run.checkpoint_every=1",
    )  # fmt: skip
    trainer.train()
    used = [r["charts/actor_lr"] for r in _rows(trainer.run_dir) if "charts/actor_lr" in r]
    assert used == pytest.approx([1e-3, 1e-3, 1e-4])
    assert all(
        math.isclose(g["lr"], 1e-4) for g in trainer.learner.models.actor_optimizer.param_groups
    )  # what AdamW used
    trainer.watchdog.lr_scale = 0.5  # as after a rollback: the scheduled rate, halved
    assert math.isclose(trainer.actor_lr_now(), 5e-5)


def test_the_entropy_bonus_anneals_linearly_and_the_loss_uses_the_scheduled_value(tmp_path: Path) -> None:
    """``ppo.entropy_anneal_updates``: the bonus goes from ``entropy_coef`` to ``entropy_coef_final`` over that
    many updates, then stays; each update's loss takes the value its update number calls for."""
    trainer = _tiny(
        tmp_path, "ppo.entropy_coef=0.1", "ppo.entropy_coef_final=0.02", "ppo.entropy_anneal_updates=2",
        "run.total_updates=4",
    )  # fmt: skip
    trainer.train()
    used = [r["charts/entropy_coef"] for r in _rows(trainer.run_dir) if "charts/entropy_coef" in r]
    assert used == pytest.approx([0.1, 0.06, 0.02, 0.02])
    assert (
        trainer.config.ppo.entropy_coef == 0.1
    )  # the config itself is not rewritten: a resume reads it again


def test_a_healthy_run_never_rolls_back_and_the_panel_keeps_its_best(tmp_path: Path) -> None:
    trainer = _tiny(
        tmp_path, "run.total_updates=4", "run.checkpoint_every=1", "run.keep_checkpoints=1", "run.eval_every=2",
        "panel.episodes=3", "panel.env_kwargs={ max_episode_steps = 4 }",
    )  # fmt: skip
    trainer.train()
    rows = _rows(trainer.run_dir)
    updates = [r for r in rows if "watchdog/rollbacks" in r]
    assert len(updates) == 4 and all(r["watchdog/rollbacks"] == 0 for r in updates)
    panels = [r for r in rows if "eval/success" in r]
    assert [r["update"] for r in panels] == [2, 4]
    assert all(r["eval/episodes"] == 3 and 0 <= r["eval/invalid_action_rate"] <= 1 for r in panels)
    best = json.loads((trainer.run_dir / "best.json").read_text())
    assert (trainer.run_dir / "checkpoints" / best["checkpoint"]).is_dir()  # kept through keep_checkpoints=1
    done = subprocess.run(
        [sys.executable, "-m", "verlog", "eval", str(trainer.run_dir), "--checkpoint", "best", "--suite",
         "verlog/BabyAI-GoTo-v0", "--episodes", "1", "--env-kwargs", "{ max_episode_steps = 2 }", "--quiet",
         "--out", str(tmp_path / "eval")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "eval" / "settings.json").read_text())["agent"]["model"].endswith(
        f"{best['checkpoint']}/actor"
    )


def test_past_its_last_rollback_the_script_stops_with_one_line(tmp_path: Path) -> None:
    command = [
        sys.executable, "agents/ppo.py", "--config", "envs/tiny.toml", f"run.output_dir={tmp_path}",
        f"model.path={tmp_path / 'model'}", "run.total_updates=3", "ppo.actor_lr=3.0", "watchdog.max_rollbacks=0",
        "run.console=false",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "the run collapsed again" in last and "watchdog.max_rollbacks = 0" in last and "--resume" in last


def test_a_sampled_panel_leaves_training_as_it_was_and_draws_the_same_each_time(tmp_path: Path) -> None:
    """``run.eval_every`` must not change a seeded run: the panel samples from its own stream, seeded the same at
    every panel, so two panels of the same weights give the same answers."""

    def training_rows(name: str, *overrides: str) -> list[dict]:
        trainer = _tiny(tmp_path / name, "run.total_updates=3", "run.checkpoint_every=0", *overrides)
        trainer.train()
        keep = ("env/", "losses/", "charts/episodes")
        return [
            {k: v for k, v in row.items() if k.startswith(keep)}
            for row in _rows(trainer.run_dir)
            if "watchdog/rollbacks" in row
        ]

    panel = ("panel.greedy=false", "panel.episodes=2", "panel.env_kwargs={ max_episode_steps = 3 }")
    every_update = training_rows("panels", "run.eval_every=1", *panel)
    assert training_rows("no-panel") == every_update and len(every_update) == 3
    assert training_rows("one-panel", "run.eval_every=3", *panel) == every_update
    # the same weights, the same draws: two panels sample the same answers, and the stream outside is untouched
    trainer = _tiny(tmp_path / "twice", "run.total_updates=1", *panel)
    prompts = [trainer.learner.tokenizer("Goal: go to the red ball.").input_ids] * 4
    outside = torch.get_rng_state()
    with own_random_stream(900_000):
        first = trainer.learner.sampler.generate(prompts).texts
    with own_random_stream(900_000):
        second = trainer.learner.sampler.generate(prompts).texts
    assert first == second and len(set(first)) > 1  # sampled, not greedy: the four answers differ
    assert torch.equal(torch.get_rng_state(), outside)
