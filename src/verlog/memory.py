"""Memory wrappers: what the agent sees of its past, as one text per turn.

A text env returns only the current observation. A memory wrapper turns it into the text the agent is shown
(the *user* message of its prompt): the observation alone (:class:`NoMemory`), the last turns with the agent's
own responses (:class:`History`, BALROG's layout), or the current observation below notes the agent keeps for
itself (:class:`Notes`). They are plain :class:`gymnasium.Wrapper` s: they hold no model and no tokenizer, they
pickle, and they depend only on what the env returned and what the agent said, so they are deterministic.

A character budget (``max_chars``) drops the oldest turns first and never the current observation; every
``info`` says how many turns the budget dropped in ``info["memory_dropped_turns"]``, so a learner can count cuts,
and carries the env's own current observation in ``info["raw_observation"]``, the fallback a learner uses when
the memory text is too long for its prompt budget.

The observation space of a wrapper is a :class:`UnicodeText`: echoed responses may hold any character a model
writes, so the space holds any ``str`` up to a computed maximum length.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from verlog.envs.base import PRINTABLE

__all__ = [
    "DROPPED_KEY",
    "MEMORIES",
    "RAW_KEY",
    "History",
    "NoMemory",
    "Notes",
    "UnicodeText",
    "split_notes",
    "wrap_memory",
]

#: The info key that counts the turns the character budget dropped from this turn's text.
DROPPED_KEY = "memory_dropped_turns"
#: The info key that holds the env's own current observation, without any memory.
RAW_KEY = "raw_observation"

_CURRENT = "Current Observation:\n"
_PAST = "Observation:\n"
_RESPONSE = "Your response:\n"
_ACTION = "Your action:\n"
_NOTES = "Your notes:\n"
_NO_NOTES = '(none yet: write "NOTES: ..." in a response to keep notes for the rest of the episode)'
#: Room for the labels and the invalid-action line of one past turn (executed action names are clipped to 100).
_TURN_OVERHEAD = 256
_MAX_ACTION_NAME = 100
_NOTES_LABEL = re.compile(r"\bnotes\s*:", re.IGNORECASE)
_ACTION_MARK = re.compile(r"<action>|<\|ACTION\|>|\baction\s*:", re.IGNORECASE)


class UnicodeText(spaces.Text):
    """A Text space that holds *any* ``str`` of at most ``max_length`` characters.

    Gymnasium's :class:`~gymnasium.spaces.Text` only holds characters of its charset; a memory text echoes the
    model's responses, which may hold any Unicode character. ``sample`` draws printable ASCII (any member of
    the space is a valid sample).
    """

    def __init__(self, max_length: int, min_length: int = 0) -> None:
        super().__init__(max_length=max_length, min_length=min_length, charset=PRINTABLE)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __eq__(self, other: object, /) -> bool:
        return (
            type(other) is type(self)
            and self.min_length == other.min_length  # type: ignore[attr-defined]
            and self.max_length == other.max_length  # type: ignore[attr-defined]
        )

    def __hash__(self) -> int:
        return hash((type(self), self.min_length, self.max_length))

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


def _inner_max_length(env: gym.Env) -> int:
    space = env.observation_space
    if not isinstance(space, spaces.Text):
        raise TypeError(f"memory wrappers need a text env (a Text observation space), got {space!r}")
    return space.max_length


def _response_text(action: object) -> str:
    """The response as text, the way the env's parser reads it (bytes decoded, None empty)."""
    if isinstance(action, str):
        return action
    if isinstance(action, bytes | bytearray):
        return bytes(action).decode("utf-8", errors="replace")
    return "" if action is None else str(action)


def _clip(text: str, limit: int) -> str:
    """Keep the head and the tail of a long text (a response ends with its action), marking the cut."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters cut ...]\n"
    keep = max(limit - len(marker), 0)
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :] if keep else text[-limit:]


class NoMemory(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """The agent sees the current observation only (BALROG with ``max_text_history=1``)."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        info[DROPPED_KEY], info[RAW_KEY] = 0, obs
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info[DROPPED_KEY], info[RAW_KEY] = 0, obs
        return obs, reward, terminated, truncated, info


class History(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """The last ``turns`` observations, each past one followed by the agent's response (BALROG's layout).

    The text reads, oldest first::

        Observation:
        <an earlier observation>

        Your response:
        <what the agent answered to it>

        Current Observation:
        <the observation now>

    Args:
        env: a verlog text env (or a wrapper of one).
        turns: how many observations are shown, the current one included (BALROG's ``max_text_history``);
            ``turns=1`` shows the current observation only.
        reasoning: show each past response in full; with ``False`` only the executed action is shown
            (``Your action:``). An invalid response is always shown, with the action that ran instead.
        max_chars: character budget of the whole text. The oldest turns are dropped first; the current
            observation is always shown whole, even when it alone is longer than the budget.
        max_response_chars: an echoed response longer than this keeps its head and tail, so one runaway
            response cannot crowd out the history (and the observation space stays bounded).
    """

    def __init__(
        self,
        env: gym.Env,
        turns: int = 16,
        reasoning: bool = True,
        max_chars: int | None = None,
        max_response_chars: int = 4096,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, turns=turns, reasoning=reasoning, max_chars=max_chars, max_response_chars=max_response_chars
        )
        gym.Wrapper.__init__(self, env)
        if turns < 1:
            raise ValueError(f"turns must be at least 1 (the current observation), got {turns}")
        if max_chars is not None and max_chars < 1:
            raise ValueError(f"max_chars must be positive or None, got {max_chars}")
        if max_response_chars < 64:
            raise ValueError(f"max_response_chars must be at least 64, got {max_response_chars}")
        self.turns = int(turns)
        self.reasoning = bool(reasoning)
        self.max_chars = max_chars
        self.max_response_chars = int(max_response_chars)
        inner = _inner_max_length(env)
        current = len(_CURRENT) + inner
        past = len(_PAST) + inner + self.max_response_chars + _TURN_OVERHEAD
        bound = current + (self.turns - 1) * past
        self.observation_space = UnicodeText(
            bound if max_chars is None else min(bound, max(max_chars, current))
        )
        # Rendered past turns, oldest first: each is rendered once, when its turn ends.
        self._past: deque[str] = deque()
        self._obs = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._past.clear()
        self._obs = obs
        return self._text(info), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.turns > 1:
            self._past.append(self._render_turn(self._obs, _response_text(action), info))
            if len(self._past) >= self.turns:
                self._past.popleft()
        self._obs = obs
        return self._text(info), reward, terminated, truncated, info

    def _render_turn(self, obs: str, response: str, info: Mapping[str, Any]) -> str:
        executed = str(info.get("executed_action", response))[:_MAX_ACTION_NAME]
        if not info.get("action_valid", True):
            shown = (
                f"{_RESPONSE}{_clip(response, self.max_response_chars)}\n"
                f"(not a valid action: '{executed}' was executed instead)"
            )
        elif self.reasoning:
            shown = _RESPONSE + _clip(response, self.max_response_chars)
        else:
            shown = _ACTION + executed
        return f"{_PAST}{obs}\n\n{shown}\n\n"

    def _text(self, info: dict[str, Any]) -> str:
        current = _CURRENT + self._obs
        if self.max_chars is None:
            kept = len(self._past)
        else:
            room, kept = self.max_chars - len(current), 0
            for turn in reversed(self._past):
                room -= len(turn)
                if room < 0:
                    break
                kept += 1
        info[DROPPED_KEY], info[RAW_KEY] = len(self._past) - kept, self._obs
        if kept == 0:
            return current
        past = self._past if kept == len(self._past) else list(self._past)[-kept:]
        return "".join(past) + current


class Notes(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """The current observation below notes the agent keeps for itself across the turns of an episode.

    The agent writes ``NOTES: ...`` anywhere in a response (before its ``ACTION:``, or after the action); the
    notes run to the next action marker (``ACTION:``, ``<action>``, ``<|ACTION|>``) or to the end of the
    response. The latest notes replace the previous ones (an empty ``NOTES:`` clears them); a response without
    notes keeps them. The notes are cut out of the response before the env parses it, so they never make an
    action invalid. ``reset`` clears them.

    Args:
        env: a verlog text env (or a wrapper of one).
        max_chars: character budget of the whole text; when the notes do not fit next to the current
            observation they are left out for that turn (counted as one dropped turn). The current
            observation is always shown whole.
        max_note_chars: notes longer than this keep their head and tail.
    """

    def __init__(self, env: gym.Env, max_chars: int | None = None, max_note_chars: int = 2048) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, max_chars=max_chars, max_note_chars=max_note_chars)
        gym.Wrapper.__init__(self, env)
        if max_chars is not None and max_chars < 1:
            raise ValueError(f"max_chars must be positive or None, got {max_chars}")
        if max_note_chars < 64:
            raise ValueError(f"max_note_chars must be at least 64, got {max_note_chars}")
        self.max_chars = max_chars
        self.max_note_chars = int(max_note_chars)
        current = len(_CURRENT) + _inner_max_length(env)
        bound = len(_NOTES) + max(self.max_note_chars, len(_NO_NOTES)) + 2 + current
        self.observation_space = UnicodeText(
            bound if max_chars is None else min(bound, max(max_chars, current))
        )
        self.notes = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.notes = ""
        return self._text(obs, info), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        notes, rest = split_notes(_response_text(action))
        if notes is not None:
            self.notes = _clip(notes, self.max_note_chars)
            action = rest
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._text(obs, info), reward, terminated, truncated, info

    def _text(self, obs: str, info: dict[str, Any]) -> str:
        current = _CURRENT + obs
        info[RAW_KEY] = obs
        block = f"{_NOTES}{self.notes or _NO_NOTES}\n\n"
        if self.max_chars is not None and len(block) + len(current) > self.max_chars:
            info[DROPPED_KEY] = 1
            return current
        info[DROPPED_KEY] = 0
        return block + current


def split_notes(response: str) -> tuple[str | None, str]:
    """Split ``response`` into (the notes it writes or None, the response without them).

    The notes start after the last ``NOTES:`` (any case) and run to the next action marker or the end.
    """
    starts = list(_NOTES_LABEL.finditer(response))
    if not starts:
        return None, response
    label = starts[-1]
    end = _ACTION_MARK.search(response, label.end())
    stop = end.start() if end else len(response)
    return response[label.end() : stop].strip(), response[: label.start()] + response[stop:]


#: The memory names ``make_vec(..., memory=...)`` accepts.
MEMORIES: dict[str, Callable[..., gym.Wrapper]] = {"none": NoMemory, "history": History, "notes": Notes}


def wrap_memory(
    env: gym.Env,
    memory: str | Callable[[gym.Env], gym.Env] | None = None,
    **memory_kwargs: Any,
) -> gym.Env:
    """Wrap ``env`` in a memory: ``None``/``"none"``, ``"history"``, ``"notes"`` or a callable ``env -> env``."""
    if memory is None:
        memory = "none"
    if callable(memory):
        return memory(env, **memory_kwargs)
    if memory not in MEMORIES:
        raise ValueError(f"unknown memory {memory!r}; choose one of {sorted(MEMORIES)} or pass a callable")
    return MEMORIES[memory](env, **memory_kwargs)
