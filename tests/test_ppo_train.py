"""The trainer end to end: agents/ppo.py under accelerate launch, exact resume, atomic checkpoints,
critic pre-training, and garbage model output counted through the env contract."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID, LineEnv

import verlog
from verlog.config import load_config
from verlog.models.loading import load_models
from verlog.models.prompts import PromptBuilder
from verlog.models.tiny import build_tiny
from verlog.ppo.rollout import Rollout
from verlog.ppo.storage import TurnStorage
from verlog.ppo.trainer import Trainer
from verlog.runkit.checkpoint import save_checkpoint
from verlog.runkit.distributed import merge_process_metrics
from verlog.runkit.folder import latest_checkpoint
from verlog.runkit.logger import reproducible
from verlog.runkit.validate import problems
from verlog.sampling import TransformersSampler

ROOT = Path(__file__).resolve().parents[1]
MEMORY = {"turns": 2}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(
        tmp_path_factory.mktemp("tiny") / "model", TOY_ID, memory="history", memory_kwargs=MEMORY
    )


def _config(out: Path, model: Path, *overrides: str):
    return load_config(
        None,
        [
            f"run.output_dir={out}",
            "run.name=toy",
            "run.console=false",
            "run.torch_threads=1",
            "run.export_actor=false",
            f"model.path={model}",
            f"env.id={TOY_ID}",
            "env.num_envs=2",
            "env.memory=history",
            "env.memory_kwargs={turns = 2}",
            "env.kwargs={invalid_action_penalty = -0.1, max_steps = 4}",
            "prompt.format=action",
            "prompt.max_response_tokens=5",
            "ppo.turns_per_update=3",
            "ppo.num_minibatches=2",
            "ppo.micro_batch_tokens=512",
            "ppo.actor_lr=1e-3",
            "ppo.critic_lr=1e-3",
            *overrides,
        ],
    )


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_two_updates_through_the_script(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--num_processes=1", "--num_machines=1",
        "--mixed_precision=no", "--dynamo_backend=no",
        "agents/ppo.py", "--config", "envs/tiny.toml",
        f"run.output_dir={tmp_path}", f"model.path={tmp_path / 'tiny-model'}", "run.total_updates=2",
        "env.num_envs=2", "ppo.turns_per_update=2", "ppo.critic_warmup_batches=1", "ppo.critic_warmup_iters=1",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("COLUMNS", None)  # stdout is a pipe here, as when a run's output goes to a file
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = tmp_path / "tiny-0001"
    records = _records(run_dir)
    assert [r.get("warmup/iteration") for r in records] == [1.0, None, None]
    assert [r["update"] for r in records] == [0.0, 1.0, 2.0]
    assert records[-1]["global_step"] == 3 * 2 * 2  # warm-up batch + two updates, 4 turns each
    for key in (
        "charts/turns_per_s",
        "losses/policy_loss",
        "losses/value_loss",
        "time/generate",
        "env/invalid_action_rate",
    ):
        assert records[-1][key] is not None, key
    assert latest_checkpoint(run_dir).name == "000002"
    assert (run_dir / "checkpoints" / "000002" / "actor" / "config.json").is_file()
    assert load_config(run_dir / "config.toml").run.total_updates == 2
    assert "pg_loss" in done.stdout  # the console table
    lines = (done.stdout + done.stderr).splitlines()
    wide = [
        line for line in lines if len(line) > 80 and str(tmp_path) not in line
    ]  # a path is as long as it is
    assert not wide, wide  # the table, the setup line and the panel fit 80 columns in a file too
    assert "setup: 1 process on cpu, fp32, transformers sampler" in done.stdout
    # A quiet console: the libraries' notices and progress bars are in the run's log file, not on screen.
    shown = done.stdout + done.stderr
    assert "critic: new value head (score.bias, score.weight not in tiny-model)" in shown
    assert "PPO run finished" in done.stdout and f"verlog report {run_dir}" in done.stdout
    # The preset's closing note: a newcomer's first run says what it showed and where to watch one learn.
    assert done.stdout.rstrip().endswith(
        "note: machinery check (random model); for learning: --config envs/quick.toml"
    )
    for noise in ("LOAD REPORT", "Removed shared tensor", "Setting accelerator", "it/s]"):
        assert noise not in shown, noise
    log = (run_dir / "console.log").read_text()
    assert "LOAD REPORT" in log and "Removed shared tensor" in log
    assert "setup, why: fp32 (model.mixed_precision = " in log and "transformers sampler (auto: " in log


def test_resume_continues_exactly(tmp_path: Path, model_path: Path) -> None:
    first = Trainer(
        _config(
            tmp_path / "a",
            model_path,
            "run.total_updates=3",
            "run.checkpoint_every=1",
            "run.keep_checkpoints=3",
        )
    )
    first.train()
    # Stop "after update 2": a copy of the run without its last checkpoint, resumed from the folder.
    resumed_dir = tmp_path / "b"
    shutil.copytree(first.run_dir, resumed_dir)
    shutil.rmtree(resumed_dir / "checkpoints" / "000003")
    with open(resumed_dir / "metrics.jsonl", "a") as f:
        f.write('{"update": 4.0, "charts/va')  # the kill cut a line short
    second = Trainer(load_config(resumed_dir / "config.toml"), resume=resumed_dir)
    assert second.update == 2
    second.train()
    assert second.update == 3
    for name in ("responses", "response_mask", "rewards", "masks", "bad_masks", "old_logprobs", "returns"):
        assert torch.equal(getattr(first.storage, name), getattr(second.storage, name)), name
    assert first.storage.prompts == second.storage.prompts
    for a, b in (
        (first.learner.models.actor, second.learner.models.actor),
        (first.learner.models.critic, second.learner.models.critic),
    ):
        wa, wb = _weights(a), _weights(b)
        assert all(torch.equal(wa[k], wb[k]) for k in wa)

    # The run files equal the uninterrupted run's, apart from times: update 3 once, the same sampled turns.
    def timeless(rows: list[dict]) -> list[dict]:
        return [reproducible(r) for r in rows]

    assert [r["update"] for r in _records(resumed_dir)] == [1.0, 2.0, 3.0]
    assert timeless(_records(first.run_dir)) == timeless(_records(resumed_dir))
    samples = [(run / "samples.jsonl").read_text() for run in (first.run_dir, resumed_dir)]
    assert samples[0] == samples[1] and samples[0].count('"update": 3') > 0
    dropped = (resumed_dir / "metrics.dropped.jsonl").read_text().splitlines()
    assert (
        json.loads(dropped[0])["update"] == 3.0 and dropped[1] == '{"update": 4.0, "charts/va'
    )  # kept aside


def test_a_crash_mid_checkpoint_leaves_the_previous_one(
    tmp_path: Path, model_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = Trainer(_config(tmp_path, model_path, "run.total_updates=1"))
    trainer.train()
    run_dir = trainer.run_dir
    with pytest.raises(TypeError, match="JSON serializable"):  # an env state that is not data: the crash
        save_checkpoint(run_dir, 2, accelerator=trainer.accelerator, trainer_state={}, envs=[lambda: None])
    assert (run_dir / "checkpoints" / ".tmp-000002" / "state").is_dir()  # the half-written one
    assert latest_checkpoint(run_dir).name == "000001"
    capsys.readouterr()
    resumed = Trainer(load_config(run_dir / "config.toml", ["run.total_updates=2"]), resume=run_dir)
    assert resumed.update == 1
    # said after the model's "critic: new value head" line, which a resumed run would otherwise end on
    said = "resumed at update 1 from checkpoints/000001: actor, critic and optimisers as saved"
    assert said in capsys.readouterr().out
    resumed.train()
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["000001", "000002"]
    # resumed once more, the finished run would stop at once: the config check says how to extend it
    (finished,) = problems(load_config(run_dir / "config.toml"), run_dir)
    assert finished.startswith(
        f"--resume {run_dir}: the run is finished (2 of run.total_updates = 2 updates)"
    )
    assert finished.endswith(f"--resume {run_dir} run.total_updates=4")


def test_a_turn_budget_stops_the_run_and_memory_is_logged(tmp_path: Path, model_path: Path) -> None:
    """run.total_turns: 2 envs x 3 turns an update, so 13 turns take three updates whatever total_updates says;
    every update logs the process's resident memory."""
    trainer = Trainer(_config(tmp_path, model_path, "run.total_updates=50", "run.total_turns=13"))
    trainer.train()
    assert trainer.update == 3 and trainer.global_step == 18
    rss = [r["sys/rss_mb"] for r in _records(trainer.run_dir) if r.get("update")]
    assert len(rss) == 3 and all(50 < mb < 100_000 for mb in rss)


def test_critic_pretraining_moves_the_critic_only(tmp_path: Path, model_path: Path) -> None:
    trainer = Trainer(
        _config(
            tmp_path,
            model_path,
            "ppo.critic_warmup_batches=2",
            "ppo.critic_warmup_iters=2",
            "ppo.critic_warmup_sample=1",
        )
    )
    actor, critic = _weights(trainer.learner.models.actor), _weights(trainer.learner.models.critic)
    trainer.warmup_critic()
    assert all(torch.equal(actor[k], v) for k, v in _weights(trainer.learner.models.actor).items())
    assert not all(torch.equal(critic[k], v) for k, v in _weights(trainer.learner.models.critic).items())
    records = _records(trainer.run_dir)
    assert [r["warmup/iteration"] for r in records] == [1.0, 2.0]
    assert records[0]["losses/value_loss"] is not None and "losses/policy_loss" not in records[0]
    assert trainer.global_step == 2 * 3 * 2 and trainer.warmed_up
    trainer.envs.close()
    trainer.logger.close()


def test_sharing_the_prompt_prefix_trains_the_same_weights(tmp_path: Path, model_path: Path) -> None:
    """``ppo.share_prompt_prefix`` changes how many tokens go through the models, not what they learn."""
    weights = {}
    for share in (False, True):
        trainer = Trainer(
            _config(
                tmp_path / str(share),
                model_path,
                "run.seed=4",
                f"ppo.share_prompt_prefix={str(share).lower()}",
            )
        )
        assert trainer.storage.share_prefix is share
        for _ in range(2):
            trainer.train_update()
        weights[share] = (_weights(trainer.learner.models.actor), _weights(trainer.learner.models.critic))
        micro_batches = trainer.storage.micro_batches(trainer.storage.rows(), 512)
        assert any(m.batch.prefix_ids is not None for m in micro_batches) is share  # the history's head
        trainer.envs.close()
        trainer.logger.close()
    for whole, shared in zip(weights[False], weights[True], strict=True):
        for key, value in whole.items():
            torch.testing.assert_close(shared[key], value, atol=1e-5, rtol=1e-4, msg=key)


def test_garbage_output_is_handled_and_counted(model_path: Path) -> None:
    models = load_models(str(model_path), with_reference=False)
    envs = verlog.make_vec(
        TOY_ID, 3, memory="history", memory_kwargs=MEMORY, seed=0, invalid_action_penalty=-0.1, max_steps=2
    )
    sampler = TransformersSampler(models.actor, models.tokenizer, max_new_tokens=5)
    rollout = Rollout(envs, sampler, PromptBuilder(models.tokenizer, "action", 512))
    storage = TurnStorage(4, 3, 5, models.tokenizer.pad_token_id)
    storage.reset_first(rollout.first_prompts(*envs.reset()))
    torch.manual_seed(0)
    metrics = rollout.collect(storage)
    envs.close()
    texts = [
        models.tokenizer.decode(
            storage.responses[t, n, : storage.response_lens[t, n]], skip_special_tokens=True
        )
        for t in range(4)
        for n in range(3)
    ]
    valid = torch.tensor([LineEnv().parse(text).valid for text in texts]).reshape(4, 3)
    assert metrics["env/invalid_action_rate"] == pytest.approx(1 - valid.float().mean().item())
    assert (~valid).any()  # a random tiny model writes gibberish
    assert torch.all(storage.rewards[~valid] <= -0.1 + 1.0)  # the penalty is added, never replaces
    assert storage.rewards[~valid].min().item() == pytest.approx(-0.1)
    # max_steps=2 over 4 turns: episodes were cut by the time limit and bootstrap from their final prompts
    assert (storage.bad_masks == 0).any() and storage.final_prompts
    assert metrics["charts/episodes"] >= 3 and metrics["env/prompt_cuts"] == 0


def test_a_crafter_rollout_unbatches_nested_infos(model_path: Path) -> None:
    """Crafter's infos hold dicts (inventory, achievements), which Gymnasium batches as dicts of arrays."""
    models = load_models(str(model_path), with_reference=False)
    envs = verlog.make_vec(
        "verlog/Crafter-v0", 2, memory="history", memory_kwargs=MEMORY, seed=0, max_steps=2
    )
    sampler = TransformersSampler(models.actor, models.tokenizer, max_new_tokens=3)
    rollout = Rollout(
        envs, sampler, PromptBuilder(models.tokenizer, "action", 8192), env_id="verlog/Crafter-v0"
    )
    storage = TurnStorage(3, 2, 3, models.tokenizer.pad_token_id)
    storage.reset_first(rollout.first_prompts(*envs.reset()))
    metrics = rollout.collect(storage)
    envs.close()
    assert metrics["charts/episodes"] == 2  # max_steps=2 over 3 turns: each env finished one episode
    assert storage.final_prompts and (storage.bad_masks == 0).any()
    # both were cut by the step limit (counted), and both play on past the batch end (bootstrapped)
    assert metrics["charts/episodes_truncated"] == 2 and metrics["charts/episodes_running"] == 2
    # Crafter's prompts are long: the mean prompt a turn prefilled is logged beside the answer's length
    lengths = [len(storage.prompts[t][n]) for t in range(3) for n in range(2)]
    assert (
        metrics["charts/prompt_tokens"] == pytest.approx(sum(lengths) / len(lengths)) and min(lengths) > 100
    )


def test_metrics_from_several_processes_weigh_episodes_by_count() -> None:
    """Process 0 ended 3 episodes, all won; process 1 ended 1, lost: the success rate is 3/4, not 1/2."""
    parts = [
        (
            {
                "env/success": 1.0,
                "env/BabyAI-GoTo/success": 1.0,
                "charts/episodes": 3.0,
                "losses/value_loss": 0.2,
            },
            {"env/success": 3, "env/BabyAI-GoTo/success": 3},
        ),
        ({"env/success": 0.0, "charts/episodes": 1.0, "losses/value_loss": 0.4}, {"env/success": 1}),
        ({"charts/episodes": 0.0, "losses/value_loss": 0.6}, {}),  # ended no episode: reports no success
    ]
    merged = merge_process_metrics(parts)
    assert merged["env/success"] == pytest.approx(0.75)
    assert merged["env/BabyAI-GoTo/success"] == pytest.approx(1.0)  # only process 0 played that task
    assert merged["charts/episodes"] == 4.0  # counts add up
    assert merged["losses/value_loss"] == pytest.approx(0.4)  # per-process figures are averaged


def test_the_kl_to_the_reference_is_logged_when_the_samplers_logprobs_are_reused(
    model_path: Path, tmp_path: Path
) -> None:
    """With ``ppo.reuse_sampler_logprobs`` the old log-probs are the sampler's, and the anchor's figure is still
    logged: before the first step the reference is the sampler's own model, so the KL is only rounding."""
    trainer = Trainer(
        _config(
            tmp_path,
            model_path,
            "ppo.kl_coef=0.1",
            "ppo.reuse_sampler_logprobs=true",
            "ppo.critic_warmup_iters=0",
        )
    )
    try:
        kl = trainer.train_update()["charts/kl_to_reference"]
    finally:
        trainer.envs.close()
        trainer.logger.close()
    assert abs(kl) < 1e-3


def test_the_reference_scores_in_the_actors_precision(model_path: Path, tmp_path: Path) -> None:
    """Before the first update the reference is the actor: under bf16 the KL to it is exactly zero (an fp32
    reference beside a bf16 actor read its rounding as KL: a penalty of noise). In a child process: accelerate's
    precision is set once per process, and this one's is fp32."""
    config = _config(
        tmp_path, model_path, "model.mixed_precision=bf16", "ppo.kl_coef=0.1",
        "ppo.reuse_sampler_logprobs=false", "ppo.critic_warmup_iters=0",
    )  # fmt: skip
    (tmp_path / "config.toml").write_text(config.to_toml())
    script = (
        "import sys, toy_env; from verlog.config import load_config; from verlog.ppo.trainer import Trainer; "
        "print(Trainer(load_config(sys.argv[1], [])).train_update()['charts/kl_to_reference'])"
    )
    tests = str(Path(__file__).parent)  # toy_env registers the toy game
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "config.toml")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.strip().splitlines()[-1]) == 0.0
