"""Turn an env's instruction and observation into prompt token ids, through the tokenizer's chat template.

The system message is ``info["instruction"]``; the user message is the observation as the memory wrapper
produced it, followed by a request for the answer format. The memory wrapper budgets characters; here the
budget is in tokens: a prompt over ``max_prompt_tokens`` falls back to the env's current observation alone
(``info["raw_observation"]``), and only if even that does not fit is it an error.

The rendered prompts are tokenized by :class:`~verlog.models.piecewise.PiecewiseTokenizer`, which caches the
ids of the pieces that come back every turn (the system message, observation lines), with the same ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verlog.models.piecewise import PiecewiseTokenizer

__all__ = ["FORMAT_REQUESTS", "PromptBuilder", "PromptTooLong"]

#: What each ``prompt.format`` asks the model for; the env's parser accepts all three.
FORMAT_REQUESTS = {
    "action": "Answer with one valid action only, exactly as it is written, and nothing else.",
    "think": (
        "First think step by step, then answer in exactly this form:\n"
        "THINK: <your step-by-step reasoning>\n"
        "ACTION: <one valid action>"
    ),
    "tags": (
        "First think step by step inside <think></think> tags, "
        "then give one valid action inside <action></action> tags."
    ),
}


class PromptTooLong(ValueError):
    """Even the current observation alone does not fit in ``max_prompt_tokens``."""


class PromptBuilder:
    """Builds prompt token ids and counts how often the token budget forced a cut."""

    def __init__(self, tokenizer: Any, format: str, max_prompt_tokens: int, format_request: str = "") -> None:
        if format not in FORMAT_REQUESTS:
            raise ValueError(f"prompt format must be one of {sorted(FORMAT_REQUESTS)}, got {format!r}")
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template; use an instruct model's tokenizer")
        self.tokenizer = tokenizer
        self.tokenize = PiecewiseTokenizer(tokenizer)
        self.request = format_request or FORMAT_REQUESTS[format]
        self.max_prompt_tokens = max_prompt_tokens
        self.cuts = 0  # prompts that fell back to the current observation alone

    def messages(self, instruction: str, observation: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": instruction},
            {"role": "user", "content": f"{observation}\n\n{self.request}"},
        ]

    def render(self, instruction: str, observation: str) -> str:
        return self.tokenizer.apply_chat_template(
            self.messages(instruction, observation), tokenize=False, add_generation_prompt=True
        )

    def encode_many(self, pairs: Sequence[tuple[str, str]]) -> list[list[int]]:
        """Token ids of (instruction, observation) pairs, rendered through the chat template."""
        texts = [self.render(instruction, observation) for instruction, observation in pairs]
        return self.tokenize(texts, keys=[instruction for instruction, _ in pairs])

    def encode(self, instruction: str, observation: str) -> list[int]:
        return self.encode_many([(instruction, observation)])[0]

    def build_many(self, items: Sequence[tuple[str, str, str | None]]) -> list[list[int]]:
        """Prompt ids for (instruction, observation, raw observation) triples, within the token budget."""
        prompts = self.encode_many([(instruction, observation) for instruction, observation, _ in items])
        for n, ids in enumerate(prompts):
            if len(ids) <= self.max_prompt_tokens:
                continue
            instruction, observation, raw_observation = items[n]
            full = len(ids)
            if raw_observation is not None and raw_observation != observation:
                ids = self.encode(instruction, raw_observation)
                if len(ids) <= self.max_prompt_tokens:
                    self.cuts += 1
                    prompts[n] = ids
                    continue
            raise PromptTooLong(
                f"the prompt has {len(ids)} tokens with the current observation alone ({full} with memory), "
                f"over prompt.max_prompt_tokens = {self.max_prompt_tokens}; raise it or shorten the instruction"
            )
        return prompts

    def __call__(self, instruction: str, observation: str, raw_observation: str | None = None) -> list[int]:
        return self.build_many([(instruction, observation, raw_observation)])[0]

    def from_infos(self, observations: Sequence[str], infos: Sequence[dict[str, Any]]) -> list[list[int]]:
        """The prompts for a batch of envs, from their observations and their per-env info dicts."""
        return self.build_many(
            [
                (str(info["instruction"]), str(observation), info.get("raw_observation"))
                for observation, info in zip(observations, infos, strict=True)
            ]
        )

    def from_info(self, observation: str, info: dict[str, Any]) -> list[int]:
        """The prompt for one env, from its observation and its (per-env) info dict."""
        return self.from_infos([observation], [info])[0]
