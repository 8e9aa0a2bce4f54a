"""Answers that are always actions: decoding restricted to the turn's valid actions, in the prompt's answer format.

``sampling.constrain = "actions"`` turns every sampled answer into one of ``info["valid_actions"]``, written the
way the prompt asks for it (``prompt.format``): the action alone, ``THINK: … / ACTION: <action>``, or
``<think>…</think><action><action></action>`` (the reasoning stays free text). The grammar is xgrammar's, the
library vLLM's own structured outputs run on, so the three samplers agree on what is allowed:

- the ``transformers`` sampler (and the tiny model, which samples through it) masks the logits with
  :meth:`ActionConstraint.logits_processor` before temperature and top-p;
- vLLM gets the same grammar through its structured outputs (:meth:`ActionConstraint.vllm_params`);
- the learner replays each stored answer through the grammar (:meth:`ActionConstraint.token_masks`) and
  renormalises the actor's, the reference's and the updated actor's distributions over what was allowed at each
  token, so the PPO ratio of the first epoch is 1 and the entropy bonus spreads over actions, not the vocabulary.

The grammar works on the tokenizer's decoded vocabulary (xgrammar's ``TokenizerInfo.from_huggingface``, as vLLM
builds it). A word-level vocabulary (the tiny models' ``action-words``) has no decoder xgrammar reads: its tokens
are given to the grammar as ``" word"`` and every answer with a leading space, which is how ``decode`` joins them;
vLLM builds its own view of such a vocabulary, so there constrained answers need the ``transformers`` sampler.
:meth:`check` refuses what cannot be answered, naming the env and the action, before the first turn is sampled.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "CONSTRAIN_MODES",
    "ActionConstraint",
    "ConstraintError",
    "unpack_bitmask",
    "valid_actions",
    "xgrammar_missing",
]

#: ``sampling.constrain``'s values: free answers, or answers restricted to the valid actions.
CONSTRAIN_MODES = ("off", "actions")

#: How many tokens ahead a word-level vocabulary is searched for a way to finish an answer.
MAX_SEARCH = 8

#: What the free reasoning of each answer format may hold (the text before the action), as an EBNF class:
#: printable ASCII (one byte, so at most one token, a character), without the format's next delimiter.
_REASON = {"think": r"[ -~]", "tags": r"[ -;=-~]"}


class ConstraintError(ValueError):
    """An env or a tokenizer that cannot be constrained as asked; the message names the env, the action and the fix."""


def xgrammar_missing() -> str | None:
    """Why constrained decoding cannot run here (None when it can)."""
    try:
        import xgrammar  # noqa: F401
    except ImportError:
        return 'sampling.constrain = "actions" needs xgrammar: pip install -e ".[train]" (it lists it)'
    return None


def unpack_bitmask(bitmask: Tensor, vocab_size: int) -> Tensor:
    """xgrammar's packed int32 bitmask ``[..., ceil(V / 32)]`` as a bool mask ``[..., vocab_size]``."""
    bits = (bitmask.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.flatten(-2)[..., :vocab_size].bool()


def valid_actions(info: Any) -> tuple[str, ...] | None:
    """An env's ``info["valid_actions"]`` as a tuple (None when it gives none)."""
    actions = info.get("valid_actions") if hasattr(info, "get") else None
    return None if actions is None else tuple(str(a) for a in actions)


def is_word_level(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` is a word-level vocabulary (one token per word, decoded joined by spaces)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    return json.loads(backend.to_str()).get("model", {}).get("type") == "WordLevel"


def _literal(text: str) -> str:
    """An EBNF string literal (JSON escaping is a subset of xgrammar's)."""
    return json.dumps(text, ensure_ascii=False)


class ActionConstraint:
    """The grammar of a valid answer for one tokenizer and answer format, and the token masks it implies.

    ``vocab_size`` is the model's (its logits' width), which may exceed the tokenizer's; ``max_tokens`` is the
    answer's token cap, which every allowed path must finish within.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        answer_format: str,
        vocab_size: int,
        eos_ids: Sequence[int],
        max_tokens: int,
    ) -> None:
        missing = xgrammar_missing()
        if missing:
            raise ConstraintError(missing)
        import xgrammar as xgr

        if answer_format not in ("action", *_REASON):
            raise ConstraintError(f"prompt.format must be action, think or tags, got {answer_format!r}")
        self.tokenizer = tokenizer
        self.answer_format = answer_format
        self.vocab_size = vocab_size
        self.eos_ids = list(eos_ids)
        self.max_tokens = max_tokens  # an answer's token cap (prompt.max_response_tokens)
        #: A word-level vocabulary decodes its tokens joined by spaces: the grammar sees each token as " word"
        #: and every answer with that leading space, which the decoded text does not have.
        self.word_level = is_word_level(tokenizer)
        self.lead = " " if self.word_level else ""
        if self.word_level:
            vocab = [
                " " + t if t is not None else ""
                for t in tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
            ]
            specials = set(tokenizer.all_special_ids)
            vocab = [t.strip() if i in specials else t for i, t in enumerate(vocab)]
            self.info = xgr.TokenizerInfo(vocab, vocab_size=vocab_size, stop_token_ids=self.eos_ids)
        else:
            self.info = xgr.TokenizerInfo.from_huggingface(
                tokenizer, vocab_size=vocab_size, stop_token_ids=self.eos_ids
            )
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1)
        self._compiled: dict[tuple[str, ...], Any] = {}
        #: Answers whose tokens the grammar refused while masks were replayed (answers not sampled under it).
        self.refused = 0

    # ------------------------------------------------------------------ the grammar
    def grammar(self, actions: Sequence[str]) -> str:
        """The EBNF of an answer naming one of ``actions`` in this format."""
        if not actions:
            raise ConstraintError("an empty list of valid actions leaves nothing to answer")
        choice = " | ".join(_literal(self.lead + a) for a in dict.fromkeys(actions))
        if self.answer_format == "action":
            return f"root ::= {choice}"
        # The reasoning gets as many characters as the token cap leaves after the longest answer's bytes (a
        # token spells at least one byte, however the model splits the text), so the action always fits.
        longest = max(len(self.answer(a, reason="").encode()) for a in actions)
        reason = f"{_REASON[self.answer_format]}{{0,{max(0, self.max_tokens - longest)}}}"
        if self.answer_format == "think":
            return f'root ::= "THINK: " {reason} "\\nACTION: " ({choice})'
        return f'root ::= "<think>" {reason} "</think><action>" ({choice}) "</action>"'

    def answer(self, action: str, reason: str = "ok") -> str:
        """An answer naming ``action`` in this format (with ``reason`` where the format has reasoning)."""
        if self.answer_format == "think":
            return f"THINK: {reason}\nACTION: {action}"
        if self.answer_format == "tags":
            return f"<think>{reason}</think><action>{action}</action>"
        return action

    def compiled(self, actions: tuple[str, ...]) -> Any:
        """The compiled grammar of ``actions`` (kept: a run meets few distinct action lists)."""
        if actions not in self._compiled:
            self._compiled[actions] = self.compiler.compile_grammar(self.grammar(actions))
        return self._compiled[actions]

    def matcher(self, actions: Sequence[str]) -> Any:
        import xgrammar as xgr

        return xgr.GrammarMatcher(self.compiled(tuple(actions)))

    def check(self, actions: Sequence[str] | None, env_id: str = "the env") -> None:
        """Raise :class:`ConstraintError` unless every action can be answered: a list is given, it is not empty,
        and the tokenizer spells each answer in tokens the grammar accepts, within the token cap."""
        if actions is None:
            raise ConstraintError(
                f'{env_id} gives no info["valid_actions"]: sampling.constrain = "actions" needs the list '
                "(fix: sampling.constrain=off, or an env that lists its actions)"
            )
        if not actions:
            raise ConstraintError(
                f'{env_id} offers an empty info["valid_actions"]: nothing to constrain the answer to '
                "(fix: sampling.constrain=off)"
            )
        longest, most = "", 0  # the answer that can take the most tokens, and how many
        for action in actions:
            ids = self.tokenizer.encode(self.answer(action), add_special_tokens=False)
            matcher = self.matcher(actions)
            if not all(matcher.accept_token(i) for i in ids) or not matcher.is_completed():
                unknown = self.tokenizer.unk_token_id is not None and self.tokenizer.unk_token_id in ids
                raise ConstraintError(
                    f"{env_id}: the tokenizer cannot spell the answer {self.answer(action)!r} in tokens the "
                    f"grammar accepts (tokens {ids}{', unknown words among them' if unknown else ''}); fix: a "
                    'vocabulary with its words (tiny model: model.tiny_tokenizer="action-words"), '
                    'prompt.format="action", or sampling.constrain=off'
                )
            # The most tokens any spelling can take: a word-level vocabulary has one, a subword one may spell the
            # answer byte by byte (the grammar allows every spelling, as vLLM's does).
            tokens = len(ids) if self.word_level else len(self.answer(action, reason="").encode())
            if tokens > most:
                longest, most = self.answer(action, reason=""), tokens
        if most > self.max_tokens:  # named once, for the longest answer: one fix covers every action
            raise ConstraintError(
                f"{env_id}: the answer {longest!r} can take up to {most} tokens"
                f"{'' if self.word_level else ' (one a byte)'}, more than prompt.max_response_tokens = "
                f"{self.max_tokens} (fix: raise it to {most})"
            )

    # ------------------------------------------------------------------ masks
    def token_masks(
        self, responses: Sequence[Sequence[int]], actions: Sequence[Sequence[str] | None], length: int
    ) -> Tensor:
        """``[B, length, V]``: which tokens the grammar allowed before each response token (replayed).

        Positions past a response's end allow everything (they are masked out of every loss); a row without
        actions (an unconstrained turn) allows everything too. A token the grammar refuses (an answer that
        was not sampled under it) leaves the rest of its row unconstrained and is counted in :attr:`refused`.
        """
        import xgrammar as xgr

        masks = torch.ones(len(responses), length, self.vocab_size, dtype=torch.bool)
        bitmask = xgr.allocate_token_bitmask(length, self.vocab_size)
        for row, (ids, allowed) in enumerate(zip(responses, actions, strict=True)):
            if allowed is None:
                continue
            matcher = self.matcher(allowed)
            for k, token in enumerate(ids[:length]):
                if matcher.is_terminated():
                    break
                mask = self.next_tokens(matcher, bitmask, k, self.max_tokens - k)
                if not mask[int(token)] or not matcher.accept_token(int(token)):
                    self.refused += 1  # this token and the rest of the row stay unconstrained
                    break
                masks[row, k] = mask
        return masks

    def logits_processor(self, actions: Sequence[Sequence[str]], prompt_width: int) -> Any:
        """A ``transformers`` logits processor that keeps only the tokens the grammar allows next, per row."""
        return _GrammarProcessor(self, [self.matcher(a) for a in actions], prompt_width)

    def next_tokens(self, matcher: Any, bitmask: Tensor, row: int = 0, left: int = 0) -> Tensor:
        """``[V]`` bool: the tokens ``matcher`` allows next, ``left`` tokens before the answer is cut (0: no cut).

        In a word-level vocabulary a word may begin an answer that no token finishes ("Make" without
        " Pickaxe"), or none within the tokens left: such dead ends are pruned by a short search ahead, so a
        sampled answer always completes. A subword vocabulary needs no search: bytes spell anything, and
        :meth:`check` makes sure the cap holds any spelling of every answer."""
        matcher.fill_next_token_bitmask(bitmask, row)
        allowed = unpack_bitmask(bitmask[row], self.vocab_size)
        if self.word_level:
            depth = min(left - 1, MAX_SEARCH) if left else MAX_SEARCH
            pruned = allowed.clone()
            for token in allowed.nonzero().flatten().tolist():
                if token not in self.eos_ids and not self._finishes(matcher, token, depth):
                    pruned[token] = False
            if pruned.any():  # else no path finishes in time: the grammar's own choice, and a cut answer
                return pruned
        if (
            not allowed.any()
        ):  # nothing to continue with (a grammar that cannot go on): the model's own choice
            allowed[:] = True
        return allowed

    def _finishes(self, matcher: Any, token: int, depth: int) -> bool:
        """Whether some continuation after ``token`` completes the answer within ``depth`` more tokens."""
        import xgrammar as xgr

        ahead = matcher.fork()
        if not ahead.accept_token(token):
            return False
        if ahead.is_completed():
            return True
        if depth == 0:
            return False
        bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)
        ahead.fill_next_token_bitmask(bitmask, 0)
        options = unpack_bitmask(bitmask[0], self.vocab_size).nonzero().flatten().tolist()
        return any(self._finishes(ahead, t, depth - 1) for t in options if t not in self.eos_ids)

    def vllm_params(self, actions: Sequence[str]) -> Any:
        """vLLM's structured-outputs parameters for one request: the same grammar, run by vLLM itself."""
        from vllm.sampling_params import StructuredOutputsParams

        return StructuredOutputsParams(grammar=self.grammar(actions))


class _GrammarProcessor:
    """Masks each row's scores to its grammar's next tokens; a finished row is left alone (generate pads it)."""

    def __init__(self, constraint: ActionConstraint, matchers: list[Any], prompt_width: int) -> None:
        import xgrammar as xgr

        self.constraint = constraint
        self.matchers = matchers
        self.prompt_width = prompt_width
        self.bitmask = xgr.allocate_token_bitmask(len(matchers), constraint.vocab_size)

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        generated = input_ids.shape[1] - self.prompt_width
        allowed = torch.ones(scores.shape, dtype=torch.bool)
        for row, matcher in enumerate(self.matchers):
            if generated and not matcher.is_terminated():
                matcher.accept_token(int(input_ids[row, -1]))
            if matcher.is_terminated():
                continue
            mask = self.constraint.next_tokens(
                matcher, self.bitmask, row, self.constraint.max_tokens - generated
            )
            width = min(len(mask), scores.shape[1])
            allowed[row, :width] = mask[:width]
        return scores.masked_fill(~allowed.to(scores.device), -float("inf"))


def action_constraint(
    tokenizer: Any,
    model_path: str,
    *,
    answer_format: str,
    max_tokens: int,
) -> ActionConstraint:
    """The constraint for a model folder (its tokenizer, vocabulary size and EOS ids), read without its weights:
    check it on an env's first actions (:meth:`ActionConstraint.check`) before any weights load."""
    from transformers import AutoConfig

    from verlog.sampling.base import eos_token_ids, generation_config

    vocab_size = int(getattr(AutoConfig.from_pretrained(model_path), "vocab_size", 0) or len(tokenizer))
    return ActionConstraint(
        tokenizer,
        answer_format=answer_format,
        vocab_size=max(vocab_size, len(tokenizer)),
        eos_ids=eos_token_ids(tokenizer, generation_config(model_path)),
        max_tokens=max_tokens,
    )
