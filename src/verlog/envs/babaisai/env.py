"""``BabaIsAIEnv``: a BabaIsAI level family as a Gymnasium text environment."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from verlog.envs.babaisai.engine import ACTIONS, Board, Rules, State
from verlog.envs.babaisai.heuristic import estimate, is_plain
from verlog.envs.babaisai.levels import LEVELS, generate
from verlog.envs.babaisai.render import render_ansi, render_rgb
from verlog.envs.babaisai.solver import solve_state
from verlog.envs.babaisai.text import Observer
from verlog.envs.base import TextEnv

__all__ = ["INSTRUCTION", "POTENTIALS", "BabaIsAIEnv"]


@lru_cache(maxsize=16_384)
def _fast_plan_steps(board: Board, state: State, max_depth: int) -> int | None:
    """The length of the solver's fast plan from ``state`` (None when it finds none), shared by every env
    of the process: each state played is asked for again by the next step's "before", by the one-step
    branch that made the same move, and by a walk that comes back to it (~16 MB when full)."""
    plan = solve_state(board, state, max_depth, 5_000, optimal=False).actions
    return None if plan is None else len(plan)


#: What the shaping reward counts as the steps still needed (``BabaIsAIEnv(potential=...)``).
POTENTIALS = ("estimate", "plan")

_INSTRUCTION_TEMPLATE = """You are playing Baba Is You, a puzzle game in which the rules of a level are word blocks lying on the map, and you change the rules by pushing those blocks around.

A rule is three word blocks in a row, read left to right or top to bottom, such as `baba is you`. The observation lists the active rules, then every object and word block (shown as rule `word`) with its offset from the object you control.

Actions (answer with exactly one of them each turn):
{actions}.

Tips:
- Look at every object and every word block on the map before you move.
- Rules have the shape [Subject] IS [Property]: BABA IS YOU means that you control baba.
- Pushing a word block out of line breaks its rule; pushing blocks into line makes a new one.
- Objects that are STOP cannot be walked through; word blocks can always be pushed.
- You usually win by moving onto an object that is WIN.
- Be creative: if you are stuck, break a rule that is in the way.
- You can make a different object YOU, or change which object is WIN.

PLAY!"""

_ACTION_HELP = {
    "idle": "wait for one step",
    "up": "move one step up",
    "right": "move one step to the right",
    "down": "move one step down",
    "left": "move one step to the left",
}


def instruction_text(offered: tuple[str, ...] = ACTIONS) -> str:
    """The task prompt, listing only the actions offered (a prompt naming an action the parser refuses would
    teach the model to spend turns on it)."""
    return _INSTRUCTION_TEMPLATE.format(actions=",\n".join(f"{a}: {_ACTION_HELP[a]}" for a in offered))


#: The task prompt with every action offered (BALROG's).
INSTRUCTION = instruction_text()

_SYNONYMS = {
    "wait": "idle",
    "noop": "idle",
    "stay": "idle",
    "do nothing": "idle",
    "north": "up",
    "south": "down",
    "east": "right",
    "west": "left",
    **{f"{verb} {d}": d for verb in ("move", "go", "step", "walk") for d in ACTIONS[1:]},
}


GOAL = "Win the level: move the object you control onto an object that is win; push word blocks to change the rules."


class BabaIsAIEnv(TextEnv):
    """One BabaIsAI level family (or a mix of them) as a text env.

    Args:
        level: the family played (one of :data:`~verlog.envs.babaisai.levels.LEVELS`).
        levels: if given, a family is drawn from these at every reset instead (``level`` is ignored).
        max_steps: steps before the episode is truncated.
        colors: use the fixed observation format (colour names, grammatical "step"/"steps", every object
            listed) instead of BALROG's.
        shaping (a :class:`~verlog.envs.base.TextEnv` option): weight of a potential-based shaping reward,
            for training only: every step also pays
            ``shaping * (before - after)``, where before and after are the solver heuristic's estimate of the
            steps still needed to win (capped at the board's width plus height), so a step toward the WIN object pays and
            breaking the win rule costs. A sparse win teaches a small model little in a few thousand turns;
            this is the dense signal. Wins, ``progression`` and success are unchanged. 0 (BALROG's) is off.
        potential: what ``shaping`` counts as the steps still needed. ``"estimate"`` (the default): the
            heuristic above, which walks straight to the blocks and the WIN object, blind to STOP walls and
            push chains; greedily following it wins only ~47 % of ``two_room-maybe_break_stop-goto_win``,
            whose wall must be opened first. ``"plan"``: the length of the solver's fast plan from the state
            (A* by the estimate, a few hundred states at most, under a millisecond on BALROG's boards), capped at
            twice the width plus height where no plan exists; greedy on it wins ~100 % of every family.
        walk_start: for training only, the share of episodes that start after a random walk: the reset plays
            1 to ``walk_steps`` moves (uniform), each drawn from the offered moves that neither end the episode
            nor change the rules (a move that would win, lose, leave nothing YOU or make or break a rule is never
            taken: the level stays the one generated, only its pieces moved), from the env's seeded generator,
            then hands the level over with its step count at 0. Exploring starts: a policy that wins most levels
            early rarely trains on the states a long, wandering episode reaches, and those are where a judged
            episode is lost. 0 (the default) starts every episode at the generated level; the judge plays 0.
        walk_steps: the longest such walk.
        **kwargs: :class:`~verlog.envs.base.TextEnv` options (invalid-action policy, ``render_mode``).

    Observation: BALROG's text: ``Active rules:`` (one rule a line, ``baba is you``), then ``Objects on the
    map:``, every object and word block with its offset from the object that is YOU (``door 1 step to the
    right and 3 steps down``). ``info["rules"]`` has the rules as data.

    Reward: ``1 - 0.9 * t / max_steps`` on the step ``t`` that wins, ``-1`` on a defeat, else 0 (plus the
    shaping term when ``shaping`` is set).

    Episode end: terminated on a win, a defeat, or when no object is YOU any more (``info["end_reason"]`` says
    which); truncated after ``max_steps`` steps.

    Progression: 1 on a win, else 0.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    actions: ClassVar[tuple[str, ...]] = ACTIONS
    #: One worked turn per move. On 100 goto_win states (benchmarks/probes/first_moves.py) SmolLM2's first answer token
    #: is a move 68 % of the time after the first example alone (54 % of that "right", its answer), 91 % after all
    #: four (52 % "down", the last one's answer): more valid answers, the same lean toward the last example's move.
    prompt_examples: ClassVar[tuple[tuple[str, str, str], ...]] = (
        (
            f"Goal: {GOAL}\nObservation:\nActive rules:\nbaba is you\nflag is win\n\nObjects on the map:\nflag 1 step to the right",
            "The flag is win and it is one step to the right.",
            "right",
        ),
        (
            f"Goal: {GOAL}\nObservation:\nActive rules:\nkey is win\nbaba is you\n\nObjects on the map:\n"
            "rule `key` 1 step to the left and 3 step down\nrule `is` 3 step down\n"
            "rule `win` 1 step to the right and 3 step down\nkey 2 steps up",
            "The key is win and it is two steps up; the rule blocks below are words, not the key.",
            "up",
        ),
        (
            f"Goal: {GOAL}\nObservation:\nActive rules:\nbaba is you\nball is win\n\nObjects on the map:\n"
            "key 2 steps to the right\nball 3 steps to the left",
            "The ball is win and it is three steps to the left; the key is not win.",
            "left",
        ),
        (
            f"Goal: {GOAL}\nObservation:\nActive rules:\ndoor is win\nbaba is you\n\nObjects on the map:\n"
            "rule `door` 2 step to the left and 1 step up\nrule `is` 1 step to the left and 1 step up\n"
            "rule `win` 1 step up\ndoor 1 step to the right and 3 steps down",
            "The door is win; it is three steps down and one to the right, so I move down.",
            "down",
        ),
    )
    default_action: ClassVar[str] = "idle"
    synonyms: ClassVar[dict[str, str]] = _SYNONYMS

    def __init__(
        self,
        level: str = "goto_win",
        levels: tuple[str, ...] | list[str] | None = None,
        max_steps: int = 100,
        colors: bool = False,
        potential: str = "estimate",
        walk_start: float = 0.0,
        walk_steps: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if potential not in POTENTIALS:
            raise ValueError(f"potential={potential!r}: choose one of {POTENTIALS}")
        if not 0.0 <= walk_start <= 1.0:
            raise ValueError(f"walk_start={walk_start!r} is a share of episodes: give a number in [0, 1]")
        if walk_steps < 1:
            raise ValueError(f"walk_steps={walk_steps!r}: a walk takes at least 1 step")
        families = tuple(levels) if levels is not None else (level,)
        unknown = [f for f in families if f not in LEVELS]
        if unknown or not families:
            raise ValueError(f"unknown BabaIsAI level families {unknown}; choose from verlog's LEVELS")
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.levels = families
        self.max_steps = int(max_steps)
        self.colors = bool(colors)
        self.potential = potential
        self.walk_start = float(walk_start)
        self.walk_steps = int(walk_steps)
        self.level = families[0]
        # built once: the instruction goes into every step's info
        self._instruction_text = (
            INSTRUCTION if self.offered_actions == ACTIONS else instruction_text(self.offered_actions)
        )
        self.target_plan = ""
        self.board: Board | None = None
        self.state: State | None = None
        self.steps = 0
        self._won = False
        self._anchor: int | None = None
        # Caches, rebuilt from board and state whenever they are missing or stale (see _apply).
        self._observer: Observer | None = None
        self._named_rules: tuple[Rules | None, tuple[tuple[str, str], ...]] = (None, ())

    # ------------------------------------------------------------------ hooks
    def _new_episode(self) -> tuple[str, dict[str, Any]]:
        rng: np.random.Generator = self.np_random
        self.level = (
            self.levels[int(rng.integers(len(self.levels)))] if len(self.levels) > 1 else self.levels[0]
        )
        generated = generate(self.level, rng)
        self.board, self.state, self.target_plan = generated.board, generated.state, generated.target_plan
        self.steps = 0
        self._won = False
        self._observer = Observer(self.board, self.state, self.colors)
        if (
            self.walk_start and rng.random() < self.walk_start
        ):  # no draw at 0: the plain resets stay as they were
            self._text()  # observe the generated state: a move steps from its YOU cells
            self._random_walk(rng)
        return self._text(), self._game_info(None)

    def _apply(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observer = self._current_observer()
        self.steps += 1
        out = observer.step(ACTIONS.index(action))
        self.state = out.state
        reward, reason = 0.0, None
        if out.won:
            self._won = True
            reward, reason = 1.0 - 0.9 * self.steps / self.max_steps, "win"
        elif out.lost:
            reward, reason = -1.0, "defeat"
        elif not out.alive:
            reason = "no_you"
        terminated = reason is not None
        truncated = not terminated and self.steps >= self.max_steps
        if truncated:
            reason = "max_steps"
        return self._text(), reward, terminated, truncated, self._game_info(reason)

    def _instruction(self) -> str:
        return self._instruction_text

    def _goal(self) -> str:
        return GOAL

    def _progression(self) -> float:
        return 1.0 if self._won else 0.0

    # ------------------------------------------------------------------ helpers
    def _random_walk(self, rng: np.random.Generator) -> None:
        """``walk_start``'s walk: 1 to ``walk_steps`` moves, each the first of the offered moves in a random order
        that neither ends the episode nor changes the rules; it stops early where every move would."""
        moves = [ACTIONS.index(a) for a in self.offered_actions if a != "idle"]
        for _ in range(int(rng.integers(1, self.walk_steps + 1))):
            observer = self._current_observer()
            for move in rng.permutation(moves):
                out = observer.step(int(move))
                if (
                    not (out.won or out.lost or not out.alive)
                    and out.state.rules.pairs == self.state.rules.pairs
                ):
                    self.state = out.state
                    self._text()  # observe it: the next move steps from its YOU cells
                    break
            else:
                return

    def _potential(self) -> int:
        """The shaping potential: the heuristic's steps-to-win estimate, capped at the board's width plus
        height (a lost or unplannable state costs the longest walk, not the heuristic's large sentinel); the cap
        outside plain levels, where the heuristic does not hold, so shaping pays nothing there."""
        assert self.board is not None and self.state is not None
        if self.potential == "plan":
            return self._plan_length()
        cap = self.board.width + self.board.height
        if not is_plain(self.state):
            return cap
        return min(estimate(self.board, self.state), cap)

    def _plan_length(self) -> int:
        """Steps in the solver's fast plan from the current state (the ``"plan"`` potential), capped at twice
        the board's width plus height (a state with no plan found costs that)."""
        assert self.board is not None and self.state is not None
        steps = _fast_plan_steps(self.board, self.state, self.max_steps)
        cap = 2 * (self.board.width + self.board.height)
        return cap if steps is None else min(steps, cap)

    def _shared_in_copies(self) -> Sequence[object]:
        """The board, the state and the named rules are immutable (a step makes a new state), so a copy
        shares them; the observer's own copy shares its caches too (:meth:`Observer.__deepcopy__`)."""
        return (self.board, self.state, self._named_rules)

    def _current_observer(self) -> Observer:
        """The observer of ``self.state``. A board or state set from outside, a colour switch or a clone from
        pickle gets a fresh one, which then only ever sees states that its own steps made."""
        assert self.board is not None and self.state is not None, "call reset() first"
        observer = self._observer
        if (
            observer is None
            or observer.state is not self.state
            or observer.board is not self.board
            or observer.colors != self.colors
        ):
            observer = self._observer = Observer(self.board, self.state, self.colors)
            observer.observe(self.state, self._anchor)
        return observer

    def _text(self) -> str:
        assert self._observer is not None and self.state is not None
        text = self._observer.observe(self.state, self._anchor)
        if self._observer.you:
            self._anchor = self._observer.you[0]
        return text

    def _game_info(self, reason: str | None) -> dict[str, Any]:
        assert self.state is not None
        rules, named = self._named_rules
        if rules is not self.state.rules:  # the rules change on about 1% of steps
            rules, named = self._named_rules = self.state.rules, tuple(self.state.rules.named())
        return {
            "level": self.level,
            "rules": list(named),
            "steps": self.steps,
            "won": self._won,
            "end_reason": reason,
            "target_plan": self.target_plan,
        }

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the observer: it holds shared caches, and the copy rebuilds its own."""
        saved = self.__dict__.copy()
        saved["_observer"] = None
        return saved

    def render(self) -> Any:
        if self.board is None or self.state is None:
            return None
        if self.render_mode == "ansi":
            return render_ansi(self.board, self.state)
        if self.render_mode == "rgb_array":
            return render_rgb(self.board, self.state)
        return None
