"""Steps left in a BabyAI level by minigrid's own BabyAI bot: the ``potential="bot"`` shaping of
:class:`~verlog.envs.babyai.BabyAITextEnv`.

BabyAI's reward is paid once, at success. Kinds that hinge on one interaction at one state (toggle the named
door, drop the carried object beside the named one) are almost never won by chance, so a learner sees no signal
there (``benchmarks/probes/bot_following.py``). A shaping potential that counts the steps still needed tells one
step apart from another on every kind. The count here is how many steps minigrid's ``BabyAIBot`` (the DAgger
oracle BabyAI ships, which solves every MixedTrainLocal kind) takes to finish the mission from the state, played
in a copy of the level with the whole grid known to it, so its plan is a function of the state and not of what
the agent happened to look at.

A bot rollout costs milliseconds, and one-step branches ask for one from every action of every state played, so
:class:`PlanLengths` remembers each state's count for the episode: every state a rollout passes through gets its
own count, and a rollout stops as soon as it reaches a state already counted. The memory is shared by the env's
deep copies (the branches' copies count into the same table), and emptied at each reset.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
from minigrid.core.actions import Actions
from minigrid.envs.babyai.core.verifier import AfterInstr, BeforeInstr, PutNextInstr
from minigrid.utils.baby_ai_bot import BabyAIBot, DropSubgoal, GoNextToSubgoal, PickupSubgoal

__all__ = ["PlanLengths", "bot_actions", "remaining_instruction", "start_near_an_interaction", "state_key"]


def remaining_instruction(instrs: Any) -> Any:
    """The part of a level's instruction not yet done: a sequence whose first part succeeded leaves its second
    (a fresh bot would otherwise plan the done part again, e.g. pick up what it already carries)."""
    if isinstance(instrs, BeforeInstr) and instrs.a_done == "success":
        return instrs.instr_b
    if isinstance(instrs, AfterInstr) and instrs.b_done == "success":
        return instrs.instr_a
    return instrs


def state_key(level: Any) -> tuple[Any, ...]:
    """What the bot's plan depends on: the agent's cell, heading and load, every cell's object and door state,
    and which part of the instruction is left. The step count is not in it (the plan does not depend on it)."""
    carrying = level.carrying
    objects = tuple(  # walls never move; a plain loop is ~10x faster than Grid.encode()
        (index, cell.type, cell.color, cell.is_open, cell.is_locked)
        if cell.type == "door"
        else (index, cell.type, cell.color)
        for index, cell in enumerate(level.grid.grid)
        if cell is not None and cell.type != "wall"
    )
    return (
        tuple(level.agent_pos),
        int(level.agent_dir),
        None if carrying is None else (carrying.type, carrying.color),
        objects,
        type(remaining_instruction(level.instrs)).__name__,  # a sequence's first part done or not
    )


class _FullViewBot(BabyAIBot):
    """minigrid's bot with the whole grid known from the start: the plan depends on the state alone, and the
    agent's view, which would only mark cells already marked, is not read."""

    def __init__(self, mission: Any) -> None:
        super().__init__(mission)
        self.vis_mask[:] = True
        self._plan_from_the_load()

    def _plan_from_the_load(self) -> None:
        """minigrid's bot plans from an episode's start, hands empty: from a state with something carried its
        plan picks up what it already holds and gives up ("nothing left to explore"), so every such state off
        the first plan's path counted the step cap. Carrying the object a PutNext moves, it goes straight on to
        the fixed one; carrying anything else while a pick up is still to come, it first puts it down."""
        level = self.mission.unwrapped
        if level.carrying is None:
            return
        instrs = level.instrs
        if isinstance(instrs, PutNextInstr) and any(level.carrying is o for o in instrs.desc_move.obj_set):
            del self.stack[-2:]  # the stack, top last: [Drop, GoNextTo(fixed), Pickup, GoNextTo(moved)]
        elif any(isinstance(subgoal, PickupSubgoal) for subgoal in self.stack):
            self.stack.append(DropSubgoal(self))
            self.stack.append(GoNextToSubgoal(self, self._find_drop_pos()))

    def _process_obs(self) -> None:  # minigrid's hook that marks the cells in view as seen: all are
        pass


def _bot_rollout(level: Any, cap: int) -> Iterator[tuple[int, Any, float, bool, bool]]:
    """The bot playing what is left of ``level``'s mission in a copy (the level is left as it was), at most
    ``cap`` steps: each step's action, the copy after it, its reward and whether it ended the episode. Stops
    early where the bot's own asserts give up (e.g. an opened box it cannot account for)."""
    twin = copy.deepcopy(level)
    twin.instrs = remaining_instruction(twin.instrs)  # the twin succeeds when what is left is done
    bot = _FullViewBot(twin)
    taken: int | None = None
    for _ in range(cap):
        try:
            taken = int(bot.replan(taken))
        except Exception:
            return
        _, reward, terminated, truncated, _ = twin.step(taken)
        yield taken, twin, float(reward), bool(terminated), bool(truncated)


def bot_actions(level: Any, cap: int) -> list[int]:
    """The actions the bot takes from ``level``'s state to the mission's success; empty when it cannot finish
    within ``cap`` steps."""
    actions: list[int] = []
    for taken, _, reward, terminated, truncated in _bot_rollout(level, cap):
        actions.append(taken)
        if terminated or truncated:
            return actions if terminated and reward > 0 else []
    return []


#: ``bot_start``: the actions a start is placed before, and how many steps before one at most.
INTERACTIONS = (Actions.pickup, Actions.drop, Actions.toggle)
STEPS_BEFORE = 3


def start_near_an_interaction(level: Any, rng: np.random.Generator) -> dict[str, Any]:
    """``bot_start``'s reset: play the bot's actions up to 0-3 steps before one of its plan's interactions (any
    step of a plan without one, as GoTo's), drawn from ``rng``, and restart the step count; the level's own
    verifier follows them, so a sequence's done first part stays done. Returns the level's observation."""
    plan = bot_actions(level, level.max_steps)
    obs = level.gen_obs()
    if not plan:
        return obs
    interactions = [t for t, action in enumerate(plan) if action in INTERACTIONS]
    if interactions:
        at = interactions[int(rng.integers(len(interactions)))]
        k = max(0, at - int(rng.integers(STEPS_BEFORE + 1)))
    else:
        k = int(rng.integers(len(plan)))
    for action in plan[:k]:
        obs, _, _, _, _ = level.step(action)
    level.step_count = 0
    return obs


class PlanLengths:
    """The bot's steps to success per state of one episode; shared, not copied, by the env's deep copies."""

    def __init__(self) -> None:
        self._lengths: dict[tuple[Any, ...], int] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> PlanLengths:
        return self  # a branch's copy of the env counts into the episode's one table

    def clear(self) -> None:
        self._lengths.clear()

    def steps_left(self, level: Any, cap: int) -> int:
        """Steps the bot needs from ``level``'s state to the mission's success, at most ``cap`` (also what a
        state the bot cannot finish from counts: a failed mission, the step cap, a state it gives up on)."""
        key = state_key(level)
        known = self._lengths.get(key)
        if known is not None:
            return known
        path = [key]
        value = cap
        for step, (_, twin, reward, terminated, truncated) in enumerate(_bot_rollout(level, cap), start=1):
            if terminated or truncated:
                value = step if terminated and reward > 0 else cap
                break
            reached = state_key(twin)
            known = self._lengths.get(reached)
            if known is not None:
                value = min(step + known, cap)
                break
            path.append(reached)
        for steps_done, visited in enumerate(path):  # each state on the bot's way is that much nearer
            if value >= cap:
                self._lengths.setdefault(visited, cap)
            else:
                self._lengths.setdefault(visited, value - steps_done)
        return self._lengths[key]
