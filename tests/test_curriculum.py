"""The curriculum over env difficulty: stages advance on recent success, the envs change with them, the stage is
logged every update and a resumed run continues at its stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.config import ConfigError, load_config
from verlog.models.tiny import build_tiny
from verlog.ppo.trainer import Trainer
from verlog.runkit.curriculum import Curriculum
from verlog.runkit.validate import validate


def test_a_stage_advances_once_the_window_of_episodes_reaches_the_threshold() -> None:
    curriculum = Curriculum([{"size": 2}, {"size": 4}, {"size": 7}], threshold=0.5, window=10)
    assert curriculum.env_kwargs({"max_steps": 3, "size": 9}) == {"max_steps": 3, "size": 2}
    assert not curriculum.observe({"charts/episodes": 6.0, "env/success": 1.0})  # 6 episodes: window not full
    assert curriculum.success_rate() is None
    assert not curriculum.observe({"charts/episodes": 0.0, "env/success": float("nan")})  # none ended
    assert curriculum.observe({"charts/episodes": 6.0, "env/success": 0.0})  # 6 of 12 won: 0.5 reached
    assert curriculum.stage == 1 and "stage 2 of 3 (size = 4)" in curriculum.describe()
    assert curriculum.env_kwargs({"max_steps": 3}) == {"max_steps": 3, "size": 4}


def test_the_window_keeps_just_enough_updates_and_the_last_stage_stays() -> None:
    curriculum = Curriculum([{"size": 2}, {"size": 7}], threshold=0.5, window=4)
    assert not curriculum.observe({"charts/episodes": 4.0, "env/success": 0.25})
    assert not curriculum.observe({"charts/episodes": 4.0, "env/success": 0.25})
    assert curriculum.success_rate() == 0.25 and len(curriculum.recent) == 1  # the oldest update fell out
    assert curriculum.observe({"charts/episodes": 4.0, "env/success": 0.75})
    assert curriculum.stage == 1 and curriculum.success_rate() is None  # the window starts again
    for _ in range(3):
        assert not curriculum.observe({"charts/episodes": 8.0, "env/success": 1.0})  # the last stage stays
    state = curriculum.state_dict()
    again = Curriculum([{"size": 2}, {"size": 7}], threshold=0.5, window=4)
    again.load_state_dict(json.loads(json.dumps(state)))
    assert again.stage == 1 and again.recent == curriculum.recent


def test_bad_stages_are_config_problems() -> None:
    config = load_config(
        None,
        [
            "model.build_tiny=true",
            f"env.id={TOY_ID}",
            "env.kwargs={}",
            "curriculum.stages=[{ size = 2 }, { size = 1 }, { sizee = 3 }]",
            "curriculum.threshold=1.5",
        ],
    )
    with pytest.raises(ConfigError) as raised:
        validate(config)
    text = str(raised.value)
    assert "curriculum.threshold must be in (0, 1]" in text
    assert "curriculum.stages[1]" in text and "size must be at least 2" in text
    assert "curriculum.stages[2]" in text and "sizee" in text


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model", TOY_ID, memory="history")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_run_moves_to_the_harder_stage_and_resumes_there(
    tmp_path: Path, model_path: Path, mode: str
) -> None:
    """Stage 1: a line of two cells where every answer the tiny model cannot name falls back to "right": about
    half the episodes are won in one step. Stage 2: seven cells."""
    overrides = [
        f"run.output_dir={tmp_path}", "run.console=false", "run.torch_threads=1", "run.export_actor=false",
        "run.total_updates=4", "run.checkpoint_every=1", f"model.path={model_path}", f"env.id={TOY_ID}",
        "env.num_envs=4", f'env.vectorization_mode="{mode}"', "env.memory=none", "env.memory_kwargs={}",
        "env.kwargs={max_steps = 3}", "prompt.max_response_tokens=3", "ppo.turns_per_update=4",
        "ppo.micro_batch_tokens=512", "ppo.critic_warmup_batches=0", "ppo.critic_warmup_iters=0",
        'curriculum.stages=[{ size = 2, invalid_action_fallback = "right" }, { size = 7 }]',
        "curriculum.threshold=0.25", "curriculum.window=6",
    ]  # fmt: skip
    config = load_config(None, overrides)
    validate(config)
    trainer = Trainer(config)
    trainer.train()
    records = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    stages = [r["curriculum/stage"] for r in records]
    assert stages[0] == 1.0 and stages[-1] == 2.0 and stages == sorted(stages), stages
    resumed = Trainer(
        load_config(trainer.run_dir / "config.toml", ["run.total_updates=5"]), resume=trainer.run_dir
    )
    assert resumed.curriculum.stage == 1 and resumed.envs.get_attr("size") == (7, 7, 7, 7)  # the stage's envs
    resumed.train()
    assert (
        json.loads((trainer.run_dir / "metrics.jsonl").read_text().splitlines()[-1])["curriculum/stage"]
        == 2.0
    )
