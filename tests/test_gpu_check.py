"""benchmarks/speed/gpu_check.py: its CPU smoke run takes every path the GPU run takes (the tiny preset, real
architectures with and without LoRA and a critic, FSDP2 under accelerate launch, the GPU-marked tests), so the
script cannot rot between GPU loans; and the FLOP arithmetic behind its MFU."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
flops = importlib.import_module("benchmarks.speed.gpu_flops")

VARIANTS = ("full+critic", "full, critic-free", "lora+critic", "lora, critic-free")


def test_peak_rates_by_device_name() -> None:
    assert flops.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert flops.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert flops.peak_tflops("NVIDIA H200") == 989.0
    assert flops.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert flops.peak_tflops(None) is None and flops.peak_tflops("Some Future GPU") is None


class _Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4, bias=False)
        self.lm_head = nn.Linear(4, 10, bias=False)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int = 0
    ) -> torch.Tensor:
        hidden = self.body(torch.ones(*input_ids.shape, 4))
        return self.lm_head(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)


def test_flops_count_the_training_forwards_only() -> None:
    model = _Toy()
    model.body.requires_grad_(False)  # like a frozen base: no weight gradient
    params = flops.linear_params(model)
    assert (params.body, params.body_trainable, params.head, params.head_trainable) == (16, 0, 40, True)
    ids, mask = torch.zeros(2, 5, dtype=torch.long), torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    with flops.counting({"actor": model, "critic": None}) as counters:
        with torch.no_grad():  # scoring or generation: not counted
            model(input_ids=ids, attention_mask=mask, logits_to_keep=3)
        model(input_ids=ids, attention_mask=mask, logits_to_keep=3)
    counter = counters["actor"]
    assert (counter.tokens, counter.head_tokens) == (9, 6)  # 9 real tokens; 2 rows x 3 logits
    assert flops.update_flops(params, counter) == 4 * 16 * 9 + 6 * 40 * 6
    assert not model._forward_pre_hooks  # removed after the block


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("gpu-check")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.speed.gpu_check", "--cpu-smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "GPU check" in proc.stdout  # the table
    return json.loads((out / "gpu.json").read_text())


def test_cpu_smoke_runs_every_leg(smoke: dict) -> None:
    assert smoke["mode"] == "cpu-smoke"
    assert smoke["device"]["type"] == "cpu" and smoke["device"]["peak_bf16_tflops"] is None
    assert {"torch", "transformers", "accelerate", "peft", "python"} <= set(smoke["versions"])
    names = [leg["name"] for leg in smoke["legs"]]
    cases = [f"qwen2-tiny {v}" for v in VARIANTS]
    expected = ["tests", "tiny", "qwen2-tiny build", *cases, "qwen2-tiny full+critic FSDP2"]
    assert names == expected
    assert not [leg for leg in smoke["legs"] if "failed" in leg or "skipped" in leg]


def test_the_gpu_tests_are_found_and_skip_here(smoke: dict) -> None:
    tests = smoke["legs"][0]
    assert "test_returns.py" in tests["files"]
    assert tests["tests_failed"] == 0
    assert tests["tests_passed"] + tests["tests_skipped"] >= 1
    if not torch.cuda.is_available():
        assert tests["tests_skipped"] >= 1


def test_figures_are_sane(smoke: dict) -> None:
    plan = smoke["plan"]
    response_cap = int(
        next(s.split("=")[1] for s in plan["sizes"] if s.startswith("prompt.max_response_tokens"))
    )
    measured = [leg for leg in smoke["legs"] if "time_per_update" in leg]
    assert len(measured) == 6
    for leg in measured:
        name = leg["name"]
        tiny = name == "tiny"  # the preset as it ships: 4 envs x 8 turns, 16-token answers
        assert leg["turns_per_s"] > 0 and leg["generated_tokens_per_s"] > 0, name
        # The plan's batch: 4 envs x 2 turns, critic-free too (algo.max_episode_turns=2).
        assert leg["turns_per_update"] == (32 if tiny else 8), name
        assert 0 < leg["mean_response_tokens"] <= (16 if tiny else response_cap), name
        split = leg["time_per_update"]
        parts = sum(v for k, v in split.items() if k not in ("total_s", "other_s"))
        assert all(v >= 0 for k, v in split.items() if k != "other_s"), (name, split)
        assert 0.8 * split["total_s"] <= parts <= split["total_s"] * 1.001, (name, split)
        assert leg["update_tokens_per_update"] > 0 and leg["update_flops_per_update"] > 0, name
        assert leg["update_tflops_per_s"] > 0, name
        # A CPU has no peak rate in the table, and no GPU memory.
        assert leg["mfu"] is None and leg["peak_gpu_memory_gib"] is None, name
        assert leg["actor_params"] > 0 and leg["wall_s"] > 0, name
        critic = "critic-free" not in name
        assert (leg["critic_params"] > 0) == critic, name
        linear = leg["actor_linear_params"]
        if "lora" in name:
            assert 0 < linear["body_trainable"] < linear["body"] and not linear["head_trainable"], name
        else:
            assert linear["body_trainable"] == linear["body"], name
    fsdp = smoke["legs"][-1]
    assert fsdp["distributed"] == "FSDP"
    assert measured[1]["distributed"] == "NO"
    assert smoke["legs"][2]["checkpoint_gib"] > 0
    # The same case, the same batch: FSDP2 trains on as many tokens with as many FLOPs.
    assert fsdp["update_flops_per_update"] > 0
