"""Turn an env's info and observation into prompt token ids, through the tokenizer's chat template.

Two styles (``prompt.style``):

- ``"full"`` (BALROG's): the system message is the env's whole instruction (rules, every action explained,
  tips); the user message is the observation as the memory wrapper produced it, then the format request.
- ``"short"`` (for small models, the default): a two-line system message that asks for the answer format, then
  one user message with the goal (``info["goal"]``), the observation and the list of valid actions. A 135M
  chat model drowns in a 250-token instruction; it answers a short prompt with a worked example.

``prompt.examples = k`` puts the first k worked turns of the game (the env's ``prompt_examples``) before the
real one, each as a user message and the assistant's answer in the requested format. The parser is the env's
either way: strict (BALROG) parsing is the env's ``strict_parsing`` and holds in every style.

The memory wrapper budgets characters; here the budget is in tokens: a prompt over ``max_prompt_tokens``
falls back to the env's current observation alone (``info["raw_observation"]``), and only if even that does
not fit is it an error. Prompts are tokenized by :class:`~verlog.models.piecewise.PiecewiseTokenizer`, which
caches the ids of the pieces that come back every turn, with the same ids as whole-text tokenization.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verlog.models.piecewise import PiecewiseTokenizer

__all__ = [
    "FORMAT_REQUESTS",
    "PROMPT_STYLES",
    "SHORT_SYSTEM",
    "PromptBuilder",
    "PromptContext",
    "PromptTooLong",
    "prompt_builder",
]

#: What each ``prompt.format`` asks the model for in the full style; the env's parser accepts all three.
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

#: The short style's system message per format: who the model is and the one form its answer takes.
SHORT_SYSTEM = {
    "action": "You control an agent in a game. Reply with exactly one action from the list and nothing else.",
    "think": (
        "You control an agent in a game. Reply in exactly two lines:\n"
        "THINK: <one short sentence>\nACTION: <one action from the list>"
    ),
    "tags": (
        "You control an agent in a game. Reply with one short sentence inside <think></think>, "
        "then one action from the list inside <action></action>."
    ),
}

PROMPT_STYLES = ("short", "full")


class PromptTooLong(ValueError):
    """Even the current observation alone does not fit in ``max_prompt_tokens``."""


@dataclass(frozen=True)
class PromptContext:
    """What a prompt says besides the observation: from one env's info dict."""

    instruction: str
    goal: str = ""
    actions: tuple[str, ...] = ()

    @classmethod
    def of(cls, info: Mapping[str, Any] | str) -> PromptContext:
        """From an env's info (a bare string is an instruction, for the full style)."""
        if isinstance(info, str):
            return cls(info)
        return cls(str(info["instruction"]), str(info.get("goal", "")), tuple(info.get("valid_actions", ())))


class PromptBuilder:
    """Builds prompt token ids and counts how often the token budget forced a cut."""

    def __init__(
        self,
        tokenizer: Any,
        format: str,
        max_prompt_tokens: int,
        format_request: str = "",
        *,
        style: str = "full",
        examples: Sequence[tuple[str, str, str]] = (),
        list_actions: bool = True,
    ) -> None:
        if format not in FORMAT_REQUESTS:
            raise ValueError(f"prompt format must be one of {sorted(FORMAT_REQUESTS)}, got {format!r}")
        if style not in PROMPT_STYLES:
            raise ValueError(f"prompt style must be one of {list(PROMPT_STYLES)}, got {style!r}")
        if tokenizer is not None and getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template; use an instruct model's tokenizer")
        self.tokenizer = tokenizer  # None: messages only (a chat server applies its own template)
        self.tokenize = PiecewiseTokenizer(tokenizer) if tokenizer is not None else None
        self.format = format
        self.style = style
        self.examples = tuple(examples)
        self.list_actions = list_actions  # the short style's "Actions: ..." line
        self.request = format_request or (FORMAT_REQUESTS[format] if style == "full" else "")
        self.max_prompt_tokens = max_prompt_tokens
        self.cuts = 0  # prompts that fell back to the current observation alone

    # ------------------------------------------------------------------ messages
    def messages(
        self, context: PromptContext | Mapping[str, Any] | str, observation: str
    ) -> list[dict[str, str]]:
        """The chat: system message, the worked examples (if any), then the current turn."""
        context = context if isinstance(context, PromptContext) else PromptContext.of(context)
        system = context.instruction if self.style == "full" else SHORT_SYSTEM[self.format]
        chat = [{"role": "system", "content": system}]
        for shown, reason, action in self.examples:
            chat.append({"role": "user", "content": self._user(context, shown, example=True)})
            chat.append({"role": "assistant", "content": self._answer(reason, action)})
        chat.append({"role": "user", "content": self._user(context, observation)})
        return chat

    def _user(self, context: PromptContext, observation: str, *, example: bool = False) -> str:
        if self.style == "full":
            return f"{observation}\n\n{self.request}"
        actions = f"Actions: {', '.join(context.actions)}." if context.actions and self.list_actions else ""
        body = observation if example else f"Goal: {context.goal}\nObservation:\n{observation}"
        return "\n".join(part for part in (body, actions, self.request) if part)

    def _answer(self, reason: str, action: str) -> str:
        if self.format == "think":
            return f"THINK: {reason}\nACTION: {action}"
        if self.format == "tags":
            return f"<think>{reason}</think><action>{action}</action>"
        return action

    def render(self, context: PromptContext | Mapping[str, Any] | str, observation: str) -> str:
        return self.tokenizer.apply_chat_template(
            self.messages(context, observation), tokenize=False, add_generation_prompt=True
        )

    # ------------------------------------------------------------------ token ids
    def encode_many(self, pairs: Sequence[tuple[PromptContext, str]]) -> list[list[int]]:
        """Token ids of (context, observation) pairs, rendered through the chat template."""
        texts = [self.render(context, observation) for context, observation in pairs]
        return self.tokenize(texts, keys=[self._key(context) for context, _ in pairs])

    def _key(self, context: PromptContext) -> str:
        """The part of a prompt that repeats across turns (the piecewise tokenizer checks each key once)."""
        return context.instruction if self.style == "full" else f"{context.goal}|{'|'.join(context.actions)}"

    def encode(self, context: PromptContext | Mapping[str, Any] | str, observation: str) -> list[int]:
        context = context if isinstance(context, PromptContext) else PromptContext.of(context)
        return self.encode_many([(context, observation)])[0]

    def build_many(self, items: Sequence[tuple[PromptContext, str, str | None]]) -> list[list[int]]:
        """Prompt ids for (context, observation, raw observation) triples, within the token budget."""
        prompts = self.encode_many([(context, observation) for context, observation, _ in items])
        for n, ids in enumerate(prompts):
            if len(ids) <= self.max_prompt_tokens:
                continue
            context, observation, raw_observation = items[n]
            full = len(ids)
            if raw_observation is not None and raw_observation != observation:
                ids = self.encode(context, raw_observation)
                if len(ids) <= self.max_prompt_tokens:
                    self.cuts += 1
                    prompts[n] = ids
                    continue
            raise PromptTooLong(
                f"the prompt has {len(ids)} tokens with the current observation alone ({full} with memory), "
                f"over prompt.max_prompt_tokens = {self.max_prompt_tokens}; raise it or shorten the instruction"
            )
        return prompts

    def __call__(
        self,
        context: PromptContext | Mapping[str, Any] | str,
        observation: str,
        raw_observation: str | None = None,
    ) -> list[int]:
        context = context if isinstance(context, PromptContext) else PromptContext.of(context)
        return self.build_many([(context, observation, raw_observation)])[0]

    def from_infos(self, observations: Sequence[str], infos: Sequence[Mapping[str, Any]]) -> list[list[int]]:
        """The prompts for a batch of envs, from their observations and their per-env info dicts."""
        return self.build_many(
            [
                (PromptContext.of(info), str(observation), info.get("raw_observation"))
                for observation, info in zip(observations, infos, strict=True)
            ]
        )

    def from_info(self, observation: str, info: Mapping[str, Any]) -> list[int]:
        """The prompt for one env, from its observation and its (per-env) info dict."""
        return self.from_infos([observation], [info])[0]


def prompt_builder(tokenizer: Any, settings: Any, env_id: str) -> PromptBuilder:
    """The builder for a ``[prompt]`` section (or anything with its fields) and the env it prompts for."""
    from verlog.envs import prompt_examples

    return PromptBuilder(
        tokenizer,
        settings.format,
        settings.max_prompt_tokens,
        settings.format_request,
        style=settings.style,
        examples=prompt_examples(env_id, settings.examples),
        list_actions=settings.list_actions,
    )
