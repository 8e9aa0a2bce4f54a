"""Turn an env's instruction and observation into prompt token ids, through the tokenizer's chat template.

The system message is ``info["instruction"]``; the user message is the observation as the memory wrapper
produced it, followed by a request for the answer format. The memory wrapper budgets characters; here the
budget is in tokens: a prompt over ``max_prompt_tokens`` falls back to the env's current observation alone
(``info["raw_observation"]``), and only if even that does not fit is it an error.
"""

from __future__ import annotations

from typing import Any

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
        self.request = format_request or FORMAT_REQUESTS[format]
        self.max_prompt_tokens = max_prompt_tokens
        self.cuts = 0  # prompts that fell back to the current observation alone

    def messages(self, instruction: str, observation: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": instruction},
            {"role": "user", "content": f"{observation}\n\n{self.request}"},
        ]

    def encode(self, instruction: str, observation: str) -> list[int]:
        """Render the chat template as text, then tokenize it once (the same ids for any template)."""
        text = self.tokenizer.apply_chat_template(
            self.messages(instruction, observation), tokenize=False, add_generation_prompt=True
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def __call__(self, instruction: str, observation: str, raw_observation: str | None = None) -> list[int]:
        ids = self.encode(instruction, observation)
        if len(ids) <= self.max_prompt_tokens:
            return ids
        full = len(ids)
        if raw_observation is not None and raw_observation != observation:
            ids = self.encode(instruction, raw_observation)
            if len(ids) <= self.max_prompt_tokens:
                self.cuts += 1
                return ids
        raise PromptTooLong(
            f"the prompt has {len(ids)} tokens with the current observation alone ({full} with memory), "
            f"over prompt.max_prompt_tokens = {self.max_prompt_tokens}; raise it or shorten the instruction"
        )

    def from_info(self, observation: str, info: dict[str, Any]) -> list[int]:
        """The prompt for one env, from its observation and its (per-env) info dict."""
        return self(str(info["instruction"]), str(observation), info.get("raw_observation"))
