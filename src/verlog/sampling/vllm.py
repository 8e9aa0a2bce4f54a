"""The vLLM sampler: an engine colocated with training on each process's GPU, weights pushed once per update.

Every process runs its own vLLM engine (tensor parallel size 1) on its own GPU, next to its share of the
training (accelerate/DeepSpeed) state; ``distributed_executor_backend="external_launcher"`` keeps the engine in
the launched process, so it joins the process group ``accelerate launch`` set up instead of spawning workers.
Each process samples for its own envs, so generation is data-parallel like everything else.

One update's cycle: :meth:`VLLMSampler.update_weights` wakes the engine's weights, pushes the actor's weights
into it (:func:`verlog.models.weights.full_weights`: ZeRO-3 shards gathered one module at a time, LoRA adapters
merged), wakes the KV cache and resets the prefix cache (its blocks were computed by the old weights); the
rollout generates with prefix caching on (the turns of a multi-turn prompt share their history); then
:meth:`VLLMSampler.offload` puts the engine to sleep while the learner scores and updates. Verlog synced the
weights before every turn; here it happens once per update, since the actor only changes in the update.

Log-probs are returned for the sampled tokens (``SamplingParams(logprobs=0)``), under the sampling
distribution where vLLM offers it (``logprobs_mode="processed_logprobs"``); the learner recomputes the old
log-probs itself, so these only feed the ``charts/sampler_logprob_gap`` metric.

Written against vLLM's documented Python API (``LLM``, ``SamplingParams``, ``LLM.sleep``/``wake_up``,
``reset_prefix_cache``, the model's ``load_weights``, as TRL's colocated mode uses them); it needs a CUDA GPU
and is exercised only by the GPU tests of tests/test_vllm_sampler.py.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from verlog.sampling.base import Samples, eos_token_ids

__all__ = ["VLLMSampler"]

#: Tensors handed to ``load_weights`` per call: few calls, and no more than a few layers in flight.
PUSH_CHUNK = 64


class VLLMSampler:
    """A colocated vLLM engine behind the :class:`verlog.sampling.Sampler` interface."""

    def __init__(
        self,
        model_path: str,
        tokenizer: Any,
        weights: Callable[[], Iterable[tuple[str, torch.Tensor]]],
        *,
        max_new_tokens: int,
        max_model_len: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        gpu_memory_utilization: float = 0.3,
        sleep_level: int = 1,
        seed: int = 0,
        dtype: str = "auto",
    ) -> None:
        """``weights()`` yields the actor's current weights in Hugging Face naming; every process calls it in
        :meth:`update_weights` at the same time (under ZeRO-3 its gathers are collective)."""
        from vllm import LLM

        _distributed_env()
        self.tokenizer = tokenizer
        self.weights = weights
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.sleep_level = sleep_level
        self.eos_ids = eos_token_ids(tokenizer, _generation_config(model_path))
        kwargs: dict[str, Any] = {
            "model": model_path,
            "tokenizer": model_path,
            "dtype": dtype,
            "seed": seed,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": max_model_len,
            "enable_prefix_caching": True,
            "enable_sleep_mode": sleep_level > 0,
            "distributed_executor_backend": "external_launcher",
            "tensor_parallel_size": 1,
            "logprobs_mode": "processed_logprobs",
        }
        try:
            self.llm = LLM(**kwargs)
            self.processed_logprobs = True
        except TypeError as error:  # a vLLM without logprobs_mode returns log-probs before temperature/top-p
            if "logprobs_mode" not in str(error):
                raise
            del kwargs["logprobs_mode"]
            self.llm = LLM(**kwargs)
            self.processed_logprobs = False
        self.asleep = False
        self.offload()  # the learner's models come next; the first update_weights wakes the engine

    @classmethod
    def from_config(
        cls,
        config: Any,
        tokenizer: Any,
        weights: Callable[[], Iterable[tuple[str, torch.Tensor]]],
        process_index: int = 0,
    ) -> VLLMSampler:
        """The sampler a :class:`verlog.ppo.config.Config` asks for, on process ``process_index``."""
        return cls(
            config.model.path,
            tokenizer,
            weights,
            max_new_tokens=config.prompt.max_response_tokens,
            max_model_len=config.prompt.max_prompt_tokens + config.prompt.max_response_tokens,
            temperature=config.sampling.temperature,
            top_p=config.sampling.top_p,
            gpu_memory_utilization=config.sampling.vllm_gpu_memory_utilization,
            sleep_level=config.sampling.vllm_sleep_level,
            seed=config.run.seed + process_index,
        )

    # ------------------------------------------------------------------ the Sampler interface
    def update_weights(self) -> None:
        """Wake the weights, push the actor's into them, wake the KV cache, forget the cached prefixes.

        The weights wake first and alone, so the push never meets a full KV cache in GPU memory.
        """
        if self.asleep:
            self._wake(["weights"])
        for chunk in _chunks(self.weights(), PUSH_CHUNK):
            self._load(chunk)
        if self.asleep:
            self._wake(["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def offload(self) -> None:
        """Sleep (level 1: weights to CPU memory, KV cache freed; level 2: weights dropped too)."""
        if self.sleep_level and not self.asleep:
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True

    def generate(self, prompts: Sequence[Sequence[int]], *, greedy: bool = False) -> Samples:
        from vllm import SamplingParams

        if self.asleep:  # generating outside the training loop (evaluation): weights are current already
            self._wake(None)
            self.asleep = False
        # One seed per request, drawn from torch's RNG, so a resumed run samples like the original.
        base = int(torch.randint(0, 2**31 - 1, ()).item())
        params = [
            SamplingParams(
                n=1,
                temperature=0.0 if greedy else self.temperature,
                top_p=1.0 if greedy else self.top_p,
                max_tokens=self.max_new_tokens,
                stop_token_ids=list(self.eos_ids),
                logprobs=0,
                seed=base + i,
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        token_ids, logprobs = [], []
        for output in outputs:
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            lps = [
                _sampled_logprob(position, token)
                for position, token in zip(completion.logprobs, ids, strict=True)
            ]
            length = next((k + 1 for k, token in enumerate(ids) if token in self.eos_ids), len(ids))
            token_ids.append(ids[:length])
            logprobs.append(lps[:length])
        texts = self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)
        return Samples(token_ids, texts, logprobs)

    # ------------------------------------------------------------------ vLLM internals
    def _wake(self, tags: list[str] | None) -> None:
        """Wake everything, or only the memory with these tags ("weights", "kv_cache")."""
        if tags is None:
            self.llm.wake_up()
        else:
            self.llm.wake_up(tags=tags)

    def _load(self, chunk: list[tuple[str, torch.Tensor]]) -> None:
        """Hand a chunk of HF-named tensors to the engine's model (vLLM maps the names to its fused layers)."""
        engine = self.llm.llm_engine
        worker = getattr(getattr(engine, "model_executor", None), "driver_worker", None)
        if worker is not None:
            worker.model_runner.model.load_weights(weights=chunk)
        else:  # engines without an in-process driver worker take the call over their RPC
            self.llm.collective_rpc(_load_weights, args=(chunk,))


def _load_weights(worker: Any, chunk: list[tuple[str, torch.Tensor]]) -> None:
    worker.model_runner.model.load_weights(weights=chunk)


def _sampled_logprob(position: Any, token: int) -> float:
    """The sampled token's log-prob out of one position's ``{token_id: Logprob}`` (NaN if vLLM left it out)."""
    entry = position.get(token) if position is not None else None
    return float(entry.logprob) if entry is not None else math.nan


def _distributed_env() -> None:
    """external_launcher reads the torch.distributed variables; a single unlaunched process has none."""
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(29500 + int(os.environ["LOCAL_RANK"])))


def _generation_config(model_path: str) -> Any:
    """The checkpoint's generation config (for its EOS ids), or None when it has none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_path)
    except OSError:
        return None


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of ``size`` items (the last one shorter)."""
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
