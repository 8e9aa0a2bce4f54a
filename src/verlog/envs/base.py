"""The text-env contract, written once for every game.

A game subclasses :class:`TextEnv` and fills in four hooks (``_new_episode``, ``_apply``, ``_instruction``,
``_progression``). Everything an agent or a learner relies on lives here, so it holds for every game alike:

* the observation is a ``str`` a person can read; the action is a ``str``, the model's raw output;
* ``reset(seed=s)`` fully determines the episode: the game draws only from ``self.np_random``;
* the response is parsed by :func:`verlog.envs.parsing.parse_action`; an invalid one never raises: the game's
  default action (or ``invalid_action_fallback``, when given) runs, the step is counted in
  ``info["invalid_actions"]``, ``invalid_action_penalty`` is *added* to that step's reward, and (when
  ``invalid_action_feedback``) a short note goes in front of the returned observation;
* ``info`` always carries :data:`INFO_KEYS` next to the game's own fields, among them ``state_text``: the
  observation without that note, so the same state reached after a valid and after an invalid answer has the
  same text (GiGPO groups turns by it).
"""

from __future__ import annotations

import copy
import string
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium import spaces

from verlog.envs.parsing import ParsedAction, parse_action

__all__ = ["INFO_KEYS", "PRINTABLE", "STATE_KEY", "TextEnv", "deepcopy_sharing", "text_space"]

#: Every character a text observation or action may hold: printable ASCII plus whitespace.
PRINTABLE = string.printable
#: The info key of the observation without the invalid-action note (one text per game state).
STATE_KEY = "state_text"
#: Keys present in every ``info`` of every verlog env, at reset and at every step.
INFO_KEYS = (
    "instruction",
    "goal",
    "valid_actions",
    "action_valid",
    "executed_action",
    "progression",
    "invalid_actions",
    "state_text",
)


def text_space(max_length: int) -> spaces.Text:
    """A Text space that holds sentences (Gymnasium's default charset is alphanumeric only)."""
    return spaces.Text(max_length=max_length, min_length=0, charset=PRINTABLE)


def deepcopy_sharing(
    obj: Any, memo: dict[int, Any], shared: Sequence[object], state: Mapping[str, Any]
) -> Any:
    """``copy.deepcopy`` of ``obj`` whose attributes are ``state``, with the objects in ``shared`` kept, not copied
    (for a ``__deepcopy__``: what play never changes need not be copied for every state a learner branches from)."""
    for kept in shared:
        memo.setdefault(id(kept), kept)
    clone = type(obj).__new__(type(obj))
    memo[id(obj)] = clone
    for name, value in state.items():
        setattr(clone, name, copy.deepcopy(value, memo))
    return clone


class TextEnv(gym.Env[str, str], ABC):
    """Base class of every verlog game: str observations in, raw model text out.

    Subclasses set :attr:`actions` and :attr:`default_action` (and optionally :attr:`synonyms`) and implement
    the four hooks. ``render_mode="ansi"`` returns the current observation text unless a game overrides
    :meth:`render`.

    Args:
        invalid_action_penalty: added to the reward of a step whose answer named no valid action.
        invalid_action_feedback: put a short note in front of the next observation after an invalid answer.
        strict_parsing: BALROG's exact parsing (letter filter, case-sensitive exact match) instead of the
            lenient default (case, punctuation and game synonyms ignored).
        render_mode: ``"ansi"`` (the observation text) or one of the game's other ``render_modes``; no image
            is drawn unless ``"rgb_array"`` asks.
        invalid_action_fallback: the action run after an invalid answer (default: the game's, BALROG's).
        offered_actions: a subset of the game's actions to list and accept (default: all of them).
        shaping: weight of the game's potential-based shaping reward, for training (0: the game's own reward).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    #: Canonical action names, in the game's own action order.
    actions: ClassVar[tuple[str, ...]] = ()
    #: The action that runs when a response names none.
    default_action: ClassVar[str] = ""
    #: Lenient-mode phrases (any case/punctuation) mapped to canonical action names.
    synonyms: ClassVar[Mapping[str, str]] = {}
    #: Worked turns in this game's own words for few-shot prompts, each (observation, one-line reason, action);
    #: ``prompt.examples = k`` shows the first k, so the first one is the game's single example.
    prompt_examples: ClassVar[tuple[tuple[str, str, str], ...]] = ()
    #: Longest observation the env can produce (sets ``observation_space``).
    max_observation_chars: ClassVar[int] = 8192
    #: Longest response sampled by ``action_space.sample()``; longer responses are accepted all the same.
    max_action_chars: ClassVar[int] = 1024

    def __init__(
        self,
        *,
        invalid_action_penalty: float = 0.0,
        invalid_action_feedback: bool = True,
        strict_parsing: bool = False,
        render_mode: str | None = None,
        invalid_action_fallback: str | None = None,
        offered_actions: Sequence[str] | None = None,
        shaping: float = 0.0,
    ) -> None:
        if not shaping >= 0:
            raise ValueError(f"shaping must be a weight >= 0, got {shaping!r}")
        if shaping and type(self)._potential is TextEnv._potential:
            raise ValueError(f"shaping={shaping!r}: {type(self).__name__} has no shaping potential")
        if offered_actions is not None:
            unknown = [a for a in offered_actions if a not in self.actions]
            if unknown or not offered_actions or isinstance(offered_actions, str):
                raise ValueError(
                    f"offered_actions={offered_actions!r} must be a non-empty list of actions of "
                    f"{type(self).__name__}; choose from {list(self.actions)}"
                )
        if invalid_action_fallback is not None and invalid_action_fallback not in self.actions:
            raise ValueError(
                f"invalid_action_fallback={invalid_action_fallback!r} is not an action of {type(self).__name__}; "
                f"choose one of {list(self.actions)}"
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not supported by {type(self).__name__}; "
                f"choose one of {self.metadata['render_modes']}"
            )
        self.render_mode = render_mode
        self.invalid_action_penalty = float(invalid_action_penalty)
        #: Weight of the potential-based shaping reward (training only; 0 is the game's own reward).
        self.shaping = float(shaping)
        self.invalid_action_feedback = bool(invalid_action_feedback)
        self.strict_parsing = bool(strict_parsing)
        #: What runs after an invalid response: the game's default (BALROG's), or a chosen action. A learner
        #: wants a no-op here when the default is a useful move (BabyAI's "go forward" would reward garbage).
        self.fallback_action = invalid_action_fallback or self.default_action
        #: The actions the agent is offered (``info["valid_actions"]``, what the parser accepts), in the
        #: game's order: all of them, or a subset (a navigation task needs no "toggle"). The fallback may be
        #: any action of the game, offered or not.
        self.offered_actions: tuple[str, ...] = self.actions
        self._synonyms: Mapping[str, str] = self.synonyms
        if offered_actions is not None:
            self.offered_actions = tuple(a for a in self.actions if a in set(offered_actions))
            self._synonyms = {k: v for k, v in self.synonyms.items() if v in self.offered_actions}
        note = self.invalid_action_note(ParsedAction(self.fallback_action, False, ""))
        self.observation_space = text_space(self.max_observation_chars + len(note))
        self.action_space = text_space(self.max_action_chars)
        self._observation = ""
        self._invalid_actions = 0

    # ------------------------------------------------------------------ game hooks
    @abstractmethod
    def _new_episode(self) -> tuple[str, dict[str, Any]]:
        """Build a new episode from ``self.np_random``; return its first observation text and game info."""

    @abstractmethod
    def _apply(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run one canonical action; return ``(text, reward, terminated, truncated, game_info)``."""

    def __deepcopy__(self, memo: dict[int, Any]) -> TextEnv:
        """A copy that plays on exactly as this env does. What never changes in play is shared, not copied: the
        two text spaces (their large charsets were half the cost of copying a BabyAI env), the spec, the
        answer synonyms and whatever :meth:`_shared_in_copies` names; one-step branches
        (``algo.branch_actions``) copy every state played. The spaces' own sampling generator is shared with
        them."""
        spaces = (self.observation_space, self.action_space)
        shared = (*spaces, self.spec, self._synonyms, *self._shared_in_copies())
        return deepcopy_sharing(self, memo, shared, self._copied_state())

    def _shared_in_copies(self) -> Sequence[object]:
        """Objects a deep copy shares with this env: ones that play never changes (none by default)."""
        return ()

    def _copied_state(self) -> Mapping[str, Any]:
        """The attributes a deep copy holds copies of (all of them by default)."""
        return vars(self)

    def _potential(self) -> int | None:
        """Steps still needed to reach the goal, by the game's own estimate, for the shaping reward; None
        where the game has none for this episode. ``shaping`` pays ``weight * (before - after)`` per step."""
        return None

    @abstractmethod
    def _instruction(self) -> str:
        """The task prompt for the current episode (system prompt of the agent)."""

    @abstractmethod
    def _goal(self) -> str:
        """The current episode's goal in one sentence (short prompts for small models carry it alone)."""

    @abstractmethod
    def _progression(self) -> float:
        """BALROG's progression of the current episode, in [0, 1]."""

    # ------------------------------------------------------------------ the contract
    def parse(self, response: object) -> ParsedAction:
        """Parse a model response the way :meth:`step` does, without stepping."""
        return parse_action(
            response, self.offered_actions, self.fallback_action, self.strict_parsing, self._synonyms
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed, options=options)
        self._invalid_actions = 0
        text, game_info = self._new_episode()
        self._observation = text
        return text, self._info(game_info, valid=True, executed="", state=text)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        parsed = self.parse(action)
        before = self._potential() if self.shaping else None
        text, reward, terminated, truncated, game_info = self._apply(parsed.action)
        state = text
        reward = float(reward)
        if before is not None and self._progression() < 1.0:  # a win pays its own reward
            reward += self.shaping * (before - self._potential())
        if not parsed.valid:
            self._invalid_actions += 1
            reward += self.invalid_action_penalty
            if self.invalid_action_feedback:
                text = self.invalid_action_note(parsed) + text
        self._observation = text
        return text, reward, terminated, truncated, self._info(game_info, parsed.valid, parsed.action, state)

    def invalid_action_note(self, parsed: ParsedAction) -> str:
        """The note put in front of the observation after an invalid response."""
        return (
            "Your previous response did not name a valid action, "
            f"so the default action '{parsed.action}' was executed.\n\n"
        )

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._observation
        return None

    def _info(self, game_info: dict[str, Any], valid: bool, executed: str, state: str) -> dict[str, Any]:
        info = dict(game_info)
        info.update(
            instruction=self._instruction(),
            goal=self._goal(),
            valid_actions=list(self.offered_actions),
            action_valid=valid,
            executed_action=executed,
            progression=float(self._progression()),
            invalid_actions=self._invalid_actions,
            state_text=state,
        )
        return info
