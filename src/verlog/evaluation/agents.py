"""Who plays an evaluation: a model (a Hugging Face folder, a run or one of its checkpoints) or a baseline.

Every agent answers a batch of turns at once (one ``generate`` call for all the envs that are waiting), and
is told when each episode starts, with its seed, so a baseline can seed itself per episode and give the same
actions however the episodes are scheduled. A model prompts and samples exactly as the learner does: the
learner's :class:`~verlog.models.prompts.PromptBuilder` and :class:`~verlog.sampling.TransformersSampler`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from verlog.config import Config, PromptConfig, SamplingConfig
from verlog.runkit.folder import (
    CHECKPOINTS,
    best_checkpoint,
    checkpoint_dir,
    is_checkpoint_name,
    is_run_dir,
    latest_checkpoint,
)

__all__ = [
    "BASELINES",
    "Agent",
    "ApiAgent",
    "EvalError",
    "ModelAgent",
    "ModelSource",
    "OracleAgent",
    "RandomAgent",
    "Turn",
    "resolve_model",
    "run_checkpoint",
]

#: Names that select a built-in baseline instead of a model path.
BASELINES = ("random", "oracle")


class EvalError(ValueError):
    """An evaluation that cannot run as asked (a missing export, a mismatched output folder, ...)."""


@dataclass(frozen=True)
class Turn:
    """One env waiting for an answer: its episode's id, the observation and the env's info."""

    key: str
    observation: str
    info: dict[str, Any]
    task: str = ""  # the env id it plays (prompts take the game's worked example from it)


class Agent(Protocol):
    #: Shown in tables and written to every episode record.
    name: str
    #: Whether :meth:`start` needs the sub-env itself (only sync vector envs can hand it over).
    needs_env: bool

    def identity(self) -> dict[str, Any]:
        """What makes two runs of this agent play the same episodes the same way (checked on resume)."""
        ...

    def start(self, key: str, seed: int, env: Any | None) -> None:
        """Episode ``key`` begins, reset with ``seed``; ``env`` is its sub-env when ``needs_env``."""
        ...

    def act(self, turns: Sequence[Turn]) -> list[str]:
        """One response per turn."""
        ...

    def finish(self, key: str) -> None:
        """Episode ``key`` ended; forget what was kept for it."""
        ...


class RandomAgent:
    """Uniform over ``info["valid_actions"]``, from an RNG seeded by the episode's seed."""

    name = "random"
    needs_env = False

    def __init__(self) -> None:
        self._rngs: dict[str, np.random.Generator] = {}

    def identity(self) -> dict[str, Any]:
        return {"agent": "random"}

    def start(self, key: str, seed: int, env: Any | None) -> None:
        self._rngs[key] = np.random.default_rng(seed)

    def act(self, turns: Sequence[Turn]) -> list[str]:
        out = []
        for turn in turns:
            actions = list(turn.info["valid_actions"])
            out.append(str(actions[int(self._rngs[turn.key].integers(len(actions)))]))
        return out

    def finish(self, key: str) -> None:
        self._rngs.pop(key, None)


class OracleAgent:
    """BabaIsAI's solver: plays a shortest winning plan from the episode's start, and plans again from the
    current state whenever the plan runs out or names an action the env does not list. Where proving a plan
    shortest takes more than ``max_states`` states (a few deep two-room levels), it plays the fast search's
    plan, a few steps longer, and lists the episode in :attr:`not_shortest`. When no search finds a win
    within the remaining steps and the budget it plays the game's default action for the rest of the
    episode, which then scores what it scores, and the episode is listed in :attr:`unsolved`.
    """

    name = "oracle"
    needs_env = True

    def __init__(self, max_states: int = 500_000) -> None:
        from verlog.envs.babaisai import solve  # the documented entry point of the game package

        self._solve = solve
        self.max_states = max_states
        self._envs: dict[str, Any] = {}
        self._plans: dict[str, list[str]] = {}
        #: Episodes for which the solver found no plan at some turn (counted, for the summary).
        self.unsolved: set[str] = set()
        #: Episodes that played a plan not proven shortest within the budget.
        self.not_shortest: set[str] = set()

    def identity(self) -> dict[str, Any]:
        return {"agent": "oracle", "max_states": self.max_states, "fallback": "fast search"}

    def start(self, key: str, seed: int, env: Any | None) -> None:
        if env is None:
            raise EvalError("the oracle reads the game state: run it with sync vector envs")
        self._envs[key] = env
        self._plans[key] = []

    def act(self, turns: Sequence[Turn]) -> list[str]:
        out = []
        for turn in turns:
            plan = self._plans[turn.key]
            stale = not plan or plan[0] not in turn.info["valid_actions"]
            if stale and turn.key not in self.unsolved:  # a search that failed is not run again each turn
                env = self._envs[turn.key]
                found = self._solve(env, max_states=self.max_states)
                if found is None:  # no shortest plan proven within the budget: the fast search's, if any
                    found = self._solve(env, max_states=self.max_states, optimal=False)
                    if found is not None:
                        self.not_shortest.add(turn.key)
                plan[:] = found or []
                if found is None:
                    self.unsolved.add(turn.key)
            out.append(plan.pop(0) if plan else str(self._envs[turn.key].unwrapped.default_action))
        return out

    def finish(self, key: str) -> None:
        self._envs.pop(key, None)
        self._plans.pop(key, None)


@dataclass(frozen=True)
class ModelSource:
    """Where a model's weights are, and the run whose ``config.toml`` it was trained with (if any)."""

    model_path: str
    run_dir: Path | None = None
    checkpoint: Path | None = None


def run_checkpoint(run: str, which: str) -> Path:
    """``--checkpoint best|NNNNNN`` of run folder ``run``: the checkpoint folder to evaluate."""
    if not is_run_dir(run):
        raise EvalError(f"--checkpoint {which}: {run} is not a run folder (no checkpoints/ or config.toml)")
    if which == "best":
        best = best_checkpoint(run)
        if best is None:
            raise EvalError(
                f"--checkpoint best: {run} has no best checkpoint (the validation panel writes best.json: "
                "train with run.eval_every > 0)"
            )
        return best
    folder = checkpoint_dir(run) / which
    if not (is_checkpoint_name(which) and folder.is_dir()):
        held = ", ".join(sorted(p.name for p in checkpoint_dir(run).glob("[0-9]*"))) or "none"
        raise EvalError(
            f"--checkpoint {which}: no such checkpoint in {run} (it has: {held}; or newest, best)"
        )
    return folder


def resolve_model(spec: str) -> ModelSource:
    """A Hugging Face folder or hub id, a run folder (its newest checkpoint) or a checkpoint folder, as the
    folder of the actor to load. Errors name what is missing."""
    path = Path(spec)
    if not path.exists():
        if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
            raise EvalError(f"{spec}: no such folder (and not a Hugging Face id of the form owner/name)")
        return ModelSource(spec)  # a hub id: from_pretrained fetches it
    if not path.is_dir():
        raise EvalError(f"{spec} is a file; give a model folder, a run folder or a checkpoint folder")
    if (path / "config.json").is_file():
        run_dir = None
        if path.name == "actor" and path.parent.parent.name == CHECKPOINTS:
            run_dir = path.parent.parent.parent
        return ModelSource(str(path), run_dir, path.parent if run_dir else None)
    if is_run_dir(path):
        run_dir, checkpoint = path, latest_checkpoint(path)
        if checkpoint is None:
            raise EvalError(
                f"run {path} has no complete checkpoint (checkpoints/NNNNNN): it saved none yet; "
                "wait for one (run.checkpoint_every) or point at another run"
            )
    elif is_checkpoint_name(path.name) and path.parent.name == CHECKPOINTS:
        run_dir, checkpoint = path.parent.parent, path
    else:
        raise EvalError(
            f"{path} is not a model folder (no config.json), a run folder (no checkpoints/) "
            "or a checkpoint folder (checkpoints/NNNNNN)"
        )
    actor = checkpoint / "actor"
    if not (actor / "config.json").is_file():
        held = ", ".join(sorted(p.name for p in checkpoint.iterdir())) or "nothing"
        raise EvalError(
            f"checkpoint {checkpoint} has no actor/ folder with the actor in Hugging Face format (it holds: "
            f"{held}); the run was trained with run.export_actor = false, so only the training state was "
            "saved. Train with run.export_actor = true (the default) to evaluate its checkpoints."
        )
    return ModelSource(str(actor), run_dir, checkpoint)


@dataclass
class ModelSettings:
    """How a model is prompted and decoded: the learner's own ``prompt`` and ``sampling`` sections (a run's
    ``config.toml`` or the defaults, not copied field by field), the model's dtype, and what ``verlog eval``
    adds (greedy or sampled answers, the device, the seed of sampled runs)."""

    prompt: PromptConfig = field(default_factory=PromptConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    dtype: str = "float32"
    greedy: bool = True
    device: str = "auto"
    seed: int = 0

    @classmethod
    def of(cls, config: Config, *, greedy: bool, device: str, seed: int) -> ModelSettings:
        """The settings of a learner's configuration."""
        return cls(config.prompt, config.sampling, config.model.dtype, greedy, device, seed)

    def identity(self, agent: str, model: str, **more: Any) -> dict[str, Any]:
        """What makes two runs of a model agent play the same episodes the same way (checked on resume)."""
        p, s = self.prompt, self.sampling
        decoding = {"greedy": True} if self.greedy else {"temperature": s.temperature, "top_p": s.top_p}
        return {
            "agent": agent,
            "model": model,
            "style": p.style,
            "examples": p.examples,
            "format": p.format,
            "format_request": p.format_request,
            "max_response_tokens": p.max_response_tokens,
            **more,
            **decoding,
        }


class ModelAgent:
    """A causal LM prompted by the learner's prompt builder and decoded by its sampler (greedy by default)."""

    needs_env = False

    def __init__(self, source: ModelSource, settings: ModelSettings) -> None:
        import torch

        from verlog.models.loading import load_actor, load_tokenizer
        from verlog.sampling import SamplerError, TransformersSampler, select_backend

        self.source = source
        self.settings = settings
        self.name = source.model_path
        device = settings.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self.backend, self.backend_reason = select_backend(
                settings.sampling.backend, device, source.model_path
            )
            tokenizer = load_tokenizer(source.model_path)
            model = None if self.backend == "vllm" else load_actor(source.model_path, dtype=settings.dtype)
        except SamplerError as error:
            raise EvalError(str(error)) from error
        except (OSError, ValueError) as error:
            where = "" if Path(source.model_path).exists() else " (not a local folder: tried as a hub id)"
            raise EvalError(f"cannot load a model from {source.model_path}{where}: {error}") from error
        self.tokenizer = tokenizer
        self.builders: dict[str, Any] = {}  # per env id: each game has its own worked example
        if model is None:
            self.model = None
            self.sampler: Any = self._vllm(device)
        else:
            self.model = model.to(device).eval()
            self.sampler = TransformersSampler(
                self.model,
                tokenizer,
                max_new_tokens=settings.prompt.max_response_tokens,
                temperature=settings.sampling.temperature,
                top_p=settings.sampling.top_p,
                batch_size=settings.sampling.batch_size,
            )
        if not settings.greedy:
            torch.manual_seed(settings.seed)  # sampled runs repeat for the same settings and schedule
        self.generated_tokens = 0
        self.turns = 0

    def identity(self) -> dict[str, Any]:
        s = self.settings
        sampler = {"sampler": "vllm"} if self.backend == "vllm" else {}
        return s.identity(
            "model",
            self.source.model_path,
            max_prompt_tokens=s.prompt.max_prompt_tokens,
            dtype=s.dtype,
            **sampler,
        )

    def _vllm(self, device: str) -> Any:
        """A vLLM engine holding the checkpoint's weights (nothing is pushed: evaluation does not train)."""
        from verlog.sampling import SamplerError
        from verlog.sampling.vllm import VLLMSampler

        s = self.settings
        try:
            return VLLMSampler(
                self.source.model_path,
                self.tokenizer,
                None,
                max_new_tokens=s.prompt.max_response_tokens,
                max_model_len=s.prompt.max_prompt_tokens + s.prompt.max_response_tokens,
                temperature=s.sampling.temperature,
                top_p=s.sampling.top_p,
                device=device,
                gpu_memory_utilization=s.sampling.vllm_gpu_memory_utilization,
                sleep_level=0,
                cpu_kvcache_gib=s.sampling.vllm_cpu_kvcache_gib,
                enforce_eager=s.sampling.vllm_enforce_eager,
                seed=s.seed,
                dtype=s.dtype,
                prefix_caching=s.sampling.vllm_prefix_caching,
            )
        except SamplerError as error:
            raise EvalError(str(error)) from error

    def start(self, key: str, seed: int, env: Any | None) -> None:
        del key, seed, env  # the model keeps nothing per episode: the memory wrapper holds the history

    def act(self, turns: Sequence[Turn]) -> list[str]:
        prompts = [self._prompts(turn.task).from_info(turn.observation, turn.info) for turn in turns]
        samples = self.sampler.generate(prompts, greedy=self.settings.greedy)
        self.generated_tokens += sum(len(ids) for ids in samples.token_ids)
        self.turns += len(turns)
        return list(samples.texts)

    def finish(self, key: str) -> None:
        del key

    def _prompts(self, task: str) -> Any:
        from verlog.models.prompts import prompt_builder

        if task not in self.builders:
            self.builders[task] = prompt_builder(self.tokenizer, self.settings.prompt, task)
        return self.builders[task]


class ApiAgent:
    """A model behind an OpenAI-compatible chat server, prompted with the same messages as a local model.

    The server applies the model's chat template and returns text; the text goes to the env exactly as a local
    model's does, so the scores compare. A request that keeps failing raises
    :class:`verlog.sampling.api.ApiError` (the evaluation records it and stops; run it again to resume).
    """

    needs_env = False

    def __init__(self, api: Any, settings: ModelSettings) -> None:
        from verlog.sampling.api import ApiError, ChatClient

        self.api = api
        self.settings = settings
        self.name = api.model
        try:
            self.client = ChatClient(api)
        except ApiError as error:
            raise EvalError(str(error)) from error
        self.builders: dict[str, Any] = {}
        self.turns = 0

    def identity(self) -> dict[str, Any]:
        return self.settings.identity("api", self.api.model)

    def start(self, key: str, seed: int, env: Any | None) -> None:
        del key, seed, env

    def act(self, turns: Sequence[Turn]) -> list[str]:
        from verlog.models.prompts import PromptContext, prompt_builder

        chats = []
        for turn in turns:
            if turn.task not in self.builders:
                self.builders[turn.task] = prompt_builder(None, self.settings.prompt, turn.task)
            chats.append(self.builders[turn.task].messages(PromptContext.of(turn.info), turn.observation))
        s = self.settings
        answers = self.client.complete(
            chats,
            max_tokens=s.prompt.max_response_tokens,
            temperature=0.0 if s.greedy else s.sampling.temperature,
            top_p=1.0 if s.greedy else s.sampling.top_p,
            seed=None if s.greedy else s.seed,
        )
        self.turns += len(turns)
        return answers

    def finish(self, key: str) -> None:
        del key
