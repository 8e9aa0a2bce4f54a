"""Crafter as a text environment, with BALROG's settings and (current) text format.

The game is :class:`crafter.Env` itself with BALROG's settings (64×64 world, 9×9 view, 256 px images,
``reward=True``); only what the agent sees is ours. Decisions a user should know:

* **No pixels unless asked, and deterministic.** The world runs headless and creature despawns follow
  creation order; each ``reset`` draws ``world_seed`` from ``self.np_random`` and plays that world's first
  episode, so ``reset(seed=s)`` fixes the map, the creatures and the whole future under the same actions
  (BALROG's doesn't); the game is otherwise crafter's, step for step (:mod:`verlog.envs.crafter_world`).
* **No hidden step at reset.** BALROG runs one ``noop`` inside ``reset`` only to get crafter's ``info``; we
  build the same fields from the fresh world, so the first observation is crafter's step 0 and
  ``max_steps`` counts exactly the agent's actions. (BALROG's world is one tick further along: creatures have
  moved once and the day/night cycle is shifted by one step.)
* **Text.** BALROG's current format, in the order its prompt shows the current observation: the status and
  inventory block first, then the sleeping / dead sentence, then the local view: every kind of thing in the
  9 wide × 7 tall window around the player (crafter's local view), scanned west to east and north to south,
  the nearest instance of each kind (Manhattan distance; ties keep the first scanned), in order of first
  appearance, as ``- tree 2 steps to your north-east``; then ``You face <name> at your front.`` Unlike
  BALROG, the facing cell is read with the right axes and the window is clipped at the map border, so
  offsets stay correct and cells outside the map are simply absent. ``describe_daylight=True`` adds a
  day/night sentence (BALROG shows daylight only in the image).
* **Reset speed.** World generation calls opensimplex noise 4096×~6 times. opensimplex ≥ 0.4 compiles its
  noise with numba when numba is importable (cached on disk, ``cache=True``), which takes a reset from
  ~1.3 s to ~60 ms; the first reset of a fresh process loads that cache (~0.6 s, ~2 s the very first time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from crafter import constants

from verlog.envs.base import TextEnv
from verlog.envs.crafter_shaping import CRAFTER_HEALTH_WEIGHT, CrafterShaping
from verlog.envs.crafter_world import HeadlessCrafter, death_cause

__all__ = ["ACHIEVEMENTS", "ACTIONS", "CrafterTextEnv"]

#: BALROG's action names, in crafter's action order (index i runs ``crafter.constants.actions[i]``).
ACTIONS: tuple[str, ...] = (
    "Noop",
    "Move West",
    "Move East",
    "Move North",
    "Move South",
    "Do",
    "Sleep",
    "Place Stone",
    "Place Table",
    "Place Furnace",
    "Place Plant",
    "Make Wood Pickaxe",
    "Make Stone Pickaxe",
    "Make Iron Pickaxe",
    "Make Wood Sword",
    "Make Stone Sword",
    "Make Iron Sword",
)
_ACTION_INDEX = {name: index for index, name in enumerate(ACTIONS)}

#: The 22 achievements in the order BALROG's prompt lists them (roughly the order they are reached).
ACHIEVEMENTS: tuple[str, ...] = (
    "collect_wood",
    "place_table",
    "eat_cow",
    "collect_sapling",
    "collect_drink",
    "make_wood_pickaxe",
    "make_wood_sword",
    "place_plant",
    "defeat_zombie",
    "collect_stone",
    "place_stone",
    "eat_plant",
    "defeat_skeleton",
    "make_stone_pickaxe",
    "make_stone_sword",
    "wake_up",
    "place_furnace",
    "collect_coal",
    "collect_iron",
    "make_iron_pickaxe",
    "make_iron_sword",
    "collect_diamond",
)

_VITALS = ("health", "food", "drink", "energy")
#: Half-width and half-height of the described window: 9 wide × 7 tall, crafter's local view.
_HALF_W, _HALF_H = 4, 3
_WINDOW = (2 * _HALF_W + 1, 2 * _HALF_H + 1)
_CENTER_CELL = _HALF_W * _WINDOW[1] + _HALF_H


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def _phrase(dx: int, dy: int, precise: bool) -> str:
    """Where offset (dx, dy) lies, in BALROG's words (x grows east, y grows south)."""
    ns = "north" if dy < 0 else "south" if dy > 0 else ""
    we = "west" if dx < 0 else "east" if dx > 0 else ""
    if precise:
        parts = [f"{_steps(abs(d))} {word}" for d, word in ((dy, ns), (dx, we)) if word]
        return " and ".join(parts) if parts else "at your location"
    return f"{_steps(abs(dx) + abs(dy))} to your {'-'.join(w for w in (ns, we) if w)}"


def _window_tables(precise: bool) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per cell of the 9×7 window (flat index x * 7 + y): its index grid, its distance and its phrase."""
    dx, dy = np.meshgrid(np.arange(-_HALF_W, _HALF_W + 1), np.arange(-_HALF_H, _HALF_H + 1), indexing="ij")
    cells = np.arange(dx.size).reshape(dx.shape)
    distance = (np.abs(dx) + np.abs(dy)).ravel()
    phrases = [_phrase(int(a), int(b), precise) for a, b in zip(dx.ravel(), dy.ravel(), strict=True)]
    return cells, distance, phrases


def _join(amounts: dict[str, int]) -> str:
    return " and ".join(f"{n} {item.replace('_', ' ')}" for item, n in amounts.items())


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


GOAL = "Survive, gather materials and craft tools to unlock as many achievements as possible."


def _instruction_text() -> str:
    """BALROG-style task prompt; costs and requirements are read from crafter's own rule table."""
    place, make = constants.place, constants.make

    def placing(name: str, what: str) -> str:
        return f"place {what} on the cell you face (uses {_join(place[name]['uses'])})"

    def making(name: str) -> str:
        near = " and a ".join(make[name]["nearby"])
        tool = name.replace("_", " ")
        return f"craft {_a(tool)} (needs a nearby {near}; uses {_join(make[name]['uses'])})"

    collecting = "; ".join(
        f"{material} needs {' and '.join(_a(tool.replace('_', ' ')) for tool in info['require'])}"
        if info["require"]
        else f"{material} gives {_join(info['receive'])}"
        for material, info in constants.collect.items()
        if material in ("tree", "stone", "coal", "iron", "diamond")
    )
    descriptions = {
        "Noop": "do nothing for one step",
        "Move West": "walk one cell west (left); you turn to face west even if the way is blocked",
        "Move East": "walk one cell east (right); you turn to face east even if the way is blocked",
        "Move North": "walk one cell north (up); you turn to face north even if the way is blocked",
        "Move South": "walk one cell south (down); you turn to face south even if the way is blocked",
        "Do": (
            f"interact with the cell you face: collect a material ({collecting}), drink water, attack a "
            "creature (a cow you defeat is eaten) or eat a ripe plant"
        ),
        "Sleep": (
            "sleep to restore energy; while asleep your actions are ignored, and you wake up when your "
            "energy is full or when you are hurt"
        ),
        "Place Stone": placing("stone", "a stone"),
        "Place Table": placing("table", "a crafting table"),
        "Place Furnace": placing("furnace", "a furnace"),
        "Place Plant": placing("plant", "a sapling") + "; it must be placed on grass",
        **{name: making(name.lower().removeprefix("make ").replace(" ", "_")) for name in ACTIONS[11:]},
    }
    actions = ",\n".join(f"{name}: {descriptions[name]}" for name in ACTIONS)
    achievements = "\n".join(
        f"{i}. {name.replace('_', ' ').title()}" for i, name in enumerate(ACHIEVEMENTS, start=1)
    )
    return (
        "You are playing Crafter, a 2D open-world survival game. You see the land around you from above; "
        "keep your health, food, drink and energy up, gather materials, craft tools and fight off zombies "
        "and skeletons.\n\n"
        f"You can take these actions:\n{actions}.\n\n"
        f"There are {len(ACHIEVEMENTS)} achievements to unlock:\n{achievements}\n\n"
        "Each turn you get an observation: your status, your inventory, what you see around you and what "
        "you face. Answer with one action. A history of past actions and observations may come with it. "
        "Your goal is to unlock as many achievements as possible.\n\n"
        "PLAY!"
    )


class CrafterTextEnv(TextEnv):
    """Crafter (BALROG settings) with text observations; progression = achievements unlocked / 22.

    Args:
        max_steps: actions per episode; reaching it ends the episode as *truncated* (death *terminates*).
        unique_items: list only the nearest instance of each kind (BALROG's default); else every cell.
        precise_location: ``1 step north and 2 steps west`` instead of ``3 steps to your north-west``.
        describe_daylight: add ``It is day.`` / ``It is night.`` (not in BALROG's text).
        describe_achievements: add the episode's achievements so far (not in BALROG's text): with no history in
            the prompt, the only way a policy can know it has already planted and should go for a tree.
        novelty_bonus: training shaping, count-based exploration: added to the reward the first time in an
            episode the player stands on a cell (0: crafter's reward alone); ``info["cells_visited"]`` counts them.
        achievement_rewards: training shaping, breadth: the reward for each named achievement's first unlock in an
            episode, in place of crafter's +1 (unnamed ones keep +1); e.g. less for the sapling-plant-sleep
            routine and more for the tech tree. The judged reward is crafter's own: leave it out there.
        inventory_potential: training shaping, the tech tree's unpaid steps (the second and third wood a table
            and a pickaxe need): each unit held of a named item, up to
            :data:`~verlog.envs.crafter_shaping.POTENTIAL_CAP`, is worth its weight; a step pays the change in that
            worth and death pays it back (the dead hold nothing), so over an episode that ends in death it adds
            nothing, only pays sooner. Judge without it.
        proximity_potential: training shaping, the way to a material: being near the nearest named material in
            view (e.g. ``tree``) is worth its weight times ``1 - steps / PROXIMITY_RANGE``, steps counted from the
            cell the player faces (:meth:`~verlog.envs.crafter_shaping.CrafterShaping.closeness`), so each step
            toward a tree pays and each step away costs the same; death pays it back. Judge without it.
        health_weight: training shaping, survival: the reward per health point won or lost, in place of crafter's
            0.1 (a zombie's blow costs two points); above 0.1 a blow and a death cost more, healing pays it back.
        invalid_action_penalty, invalid_action_feedback, strict_parsing, render_mode, invalid_action_fallback,
            offered_actions: see :class:`~verlog.envs.base.TextEnv`; ``render_mode`` may also be ``"rgb_array"`` (crafter's image).

    Observation: BALROG's text: vitals and inventory, then the nearest thing of each kind in the 9x7 window
    around the player with its distance and direction, then ``You face <name> at your front.``
    Reward: Crafter's: +1 per achievement first unlocked in the episode, ±0.1 per health point won or lost.
    Episode end: death terminates; ``max_steps`` actions truncate (Crafter's own 10 000-step cap is off); the last
    step's ``info["end_reason"]`` says which, and what killed (lava, zombie, hunger, thirst, fatigue, arrow).
    Progression: achievements unlocked in the episode / 22.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    actions: ClassVar[tuple[str, ...]] = ACTIONS
    prompt_examples: ClassVar[tuple[tuple[str, str, str], ...]] = (
        (
            f"Goal: {GOAL}\nObservation:\nYou see:\n- tree 1 step to your north\n\nYou face tree at your front.",
            "A tree is in front of me, so I collect wood.",
            "Do",
        ),
        # The rest show the other moves a first day needs (``prompt.examples`` up to 5), so a small model's
        # guesses spread over useful actions rather than repeating the first example's "Do"; the last is a
        # walk, the answer a model that copies the latest example would give.
        (
            f"Goal: {GOAL}\nObservation:\nYour status:\n- health: 9/9\n- food: 6/9\n- drink: 7/9\n- energy: 2/9\n\n"
            "You see:\n- grass 1 step to your south\n\nYou face grass at your front.",
            "My energy is low, so I sleep.",
            "Sleep",
        ),
        (
            f"Goal: {GOAL}\nObservation:\nYour inventory:\n- sapling: 1\n\nYou see:\n- grass 1 step to your east\n\n"
            "You face grass at your front.",
            "I have a sapling and face grass, so I plant it.",
            "Place Plant",
        ),
        (
            f"Goal: {GOAL}\nObservation:\nYou see:\n- water 1 step to your north\n\nYou face water at your front.",
            "Water is in front of me, so I drink.",
            "Do",
        ),
        (
            f"Goal: {GOAL}\nObservation:\nYou see:\n- tree 3 steps to your west\n- grass 1 step to your east\n\n"
            "You face grass at your front.",
            "The nearest tree is to my west, so I walk west.",
            "Move West",
        ),
    )
    default_action: ClassVar[str] = "Noop"
    synonyms: ClassVar[dict[str, str]] = {
        **{phrase: "Noop" for phrase in ("wait", "no op", "nothing", "do nothing", "idle", "stay")},
        **{
            phrase: f"Move {direction.title()}"
            for direction, side in (("west", "left"), ("east", "right"), ("north", "up"), ("south", "down"))
            for phrase in (
                direction,
                side,
                f"go {direction}",
                f"go {side}",
                f"move {side}",
                f"walk {direction}",
                f"walk {side}",
            )
        },
        **{
            phrase: "Do"
            for phrase in (
                "interact",
                "use",
                "attack",
                "hit",
                "chop",
                "chop tree",
                "chop wood",
                "cut tree",
                *(f"collect {item}" for item in ("wood", "sapling", "stone", "coal", "iron", "diamond")),
                "mine",
                *(f"mine {item}" for item in ("stone", "coal", "iron", "diamond")),
                "drink",
                "drink water",
                "collect drink",
                "eat",
                "eat cow",
                "eat plant",
                *(f"attack {creature}" for creature in ("cow", "zombie", "skeleton")),
                *(f"defeat {creature}" for creature in ("zombie", "skeleton")),
            )
        },
        **{phrase: "Sleep" for phrase in ("rest", "go to sleep")},
        **{
            phrase: "Place Table"
            for phrase in (
                "make table",
                "craft table",
                "build table",
                "make crafting table",
                "craft crafting table",
                "place crafting table",
            )
        },
        **{phrase: "Place Furnace" for phrase in ("make furnace", "craft furnace", "build furnace")},
        **{phrase: "Place Plant" for phrase in ("plant", "plant sapling", "place sapling")},
        **{name.replace("Make", "Craft").lower(): name for name in ACTIONS[11:]},
    }

    def __init__(
        self,
        *,
        max_steps: int = 2000,
        unique_items: bool = True,
        precise_location: bool = False,
        describe_daylight: bool = False,
        describe_achievements: bool = False,
        novelty_bonus: float = 0.0,
        achievement_rewards: Mapping[str, float] | None = None,
        inventory_potential: Mapping[str, float] | None = None,
        proximity_potential: Mapping[str, float] | None = None,
        health_weight: float = CRAFTER_HEALTH_WEIGHT,
        invalid_action_penalty: float = 0.0,
        invalid_action_feedback: bool = True,
        strict_parsing: bool = False,
        render_mode: str | None = None,
        invalid_action_fallback: str | None = None,
        offered_actions: Sequence[str] | None = None,
    ) -> None:
        super().__init__(
            invalid_action_penalty=invalid_action_penalty,
            invalid_action_feedback=invalid_action_feedback,
            strict_parsing=strict_parsing,
            render_mode=render_mode,
            invalid_action_fallback=invalid_action_fallback,
            offered_actions=offered_actions,
        )
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.max_steps = int(max_steps)
        self.unique_items = bool(unique_items)
        self.precise_location = bool(precise_location)
        self.describe_daylight = bool(describe_daylight)
        self.describe_achievements = bool(describe_achievements)
        self.shaping = CrafterShaping.of(
            achievements=ACHIEVEMENTS,
            achievement_rewards=achievement_rewards,
            inventory_potential=inventory_potential,
            proximity_potential=proximity_potential,
            novelty_bonus=novelty_bonus,
            health_weight=health_weight,
        )
        self._visited: set[tuple[int, int]] = set()
        self.world_seed: int | None = None
        self._env = HeadlessCrafter()
        # Semantic id -> name: materials by crafter's name, creatures by class name (BALROG's names).
        names = ["unknown"] * 256
        for material, index in self._env._world._mat_ids.items():
            if material is not None:
                names[index] = material
        for cls, index in self._env._sem_view._obj_ids.items():
            names[index] = cls.__name__.lower()
        self._names = names
        self._cells, self._distance, self._phrases = _window_tables(self.precise_location)
        self._instruction_cache = _instruction_text()

    # ------------------------------------------------------------------ game hooks
    def _new_episode(self) -> tuple[str, dict[str, Any]]:
        self.world_seed = int(self.np_random.integers(0, 2**31 - 1))
        self._env.start(self.world_seed)
        self._visited = {tuple(int(v) for v in self._env._player.pos)}
        semantic = self._env._sem_view()
        info = self._game_info(semantic, reward=0.0)
        return self._text(semantic), info

    def _apply(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        player = self._env._player
        before = self.shaping.before(player, self._env._unlocked)
        _, reward, _, crafter_info = self._env.step(_ACTION_INDEX[action])
        terminated = player.health <= 0
        truncated = not terminated and self._env._step >= self.max_steps
        end = death_cause(self._env) if terminated else "max_steps" if truncated else None
        semantic = crafter_info["semantic"]
        cell = tuple(int(v) for v in self._env._player.pos)
        novel = cell not in self._visited
        self._visited.add(cell)
        return (
            self._text(semantic),
            float(reward)
            + self.shaping.extra(before, player, self._env._unlocked, dead=terminated, novel=novel),
            terminated,
            truncated,
            self._game_info(semantic, crafter_info["reward"], end),
        )

    def _instruction(self) -> str:
        return self._instruction_cache

    def _goal(self) -> str:
        return GOAL

    def _progression(self) -> float:
        return self._score() / len(ACHIEVEMENTS)

    # ------------------------------------------------------------------ rendering
    def render(self) -> Any:
        """Crafter's 256×256 image for ``"rgb_array"`` (drawn now, not every step); the text for ``"ansi"``."""
        if self.render_mode == "rgb_array":
            return self._env.image() if self._env._player is not None else None
        return super().render()

    # ------------------------------------------------------------------ helpers
    def _score(self) -> int:
        player = self._env._player
        return 0 if player is None else sum(1 for count in player.achievements.values() if count > 0)

    def _game_info(self, semantic: np.ndarray, reward: float, end: str | None = None) -> dict[str, Any]:
        """Crafter's own info fields (the same at reset), plus what BALROG's wrapper adds, and at an episode's end
        why it ended (``end_reason``: :func:`~verlog.envs.crafter_world.death_cause`, or ``max_steps``)."""
        player = self._env._player
        dead = player.health <= 0
        return {
            "inventory": dict(player.inventory),
            "achievements": dict(player.achievements),
            "discount": 1.0 - float(dead),
            "semantic": semantic,
            "player_pos": np.array(player.pos),
            "reward": float(reward),
            "sleeping": bool(player.sleeping),
            "player_facing": (int(player.facing[0]), int(player.facing[1])),
            "dead": bool(dead),
            "score": self._score(),
            "daylight": float(self._env._world.daylight),
            "cells_visited": len(self._visited),
            **({"end_reason": end} if end else {}),
        }

    def _text(self, semantic: np.ndarray) -> str:
        player = self._env._player
        inventory = player.inventory
        vitals = "\n".join(f"- {v}: {inventory[v]}/{constants.items[v]['max']}" for v in _VITALS)
        items = "\n".join(f"- {k}: {n}" for k, n in inventory.items() if k not in _VITALS and n != 0)
        parts = [
            f"Your status:\n{vitals}",
            f"Your inventory:\n{items}" if items else "You have nothing in your inventory.",
        ]
        if self.describe_daylight:
            parts.append("It is day." if self._env._world.daylight >= 0.5 else "It is night.")
        if self.describe_achievements:
            done = [name.replace("_", " ") for name in ACHIEVEMENTS if player.achievements[name] > 0]
            parts.append(f"Achievements so far: {', '.join(done)}." if done else "No achievement yet.")
        if player.sleeping:
            parts.append("You are sleeping, and will not be able to take actions until your energy is full.")
        elif player.health <= 0:
            parts.append("You died.")
        seen = self._view_lines(semantic, int(player.pos[0]), int(player.pos[1]))
        parts.append("You see:\n" + "\n".join(seen) if seen else "You see nothing away from you.")
        parts.append(f"You face {self._facing_name(semantic)} at your front.")
        return "\n\n".join(parts)

    def _view_lines(self, semantic: np.ndarray, px: int, py: int) -> list[str]:
        """``- <name> <where>`` for the window around (px, py), clipped at the map border."""
        width, height = semantic.shape
        x0, x1 = max(px - _HALF_W, 0), min(px + _HALF_W + 1, width)
        y0, y1 = max(py - _HALF_H, 0), min(py + _HALF_H + 1, height)
        # Scan order is x outer, y inner: C order of the [x, y]-indexed map.
        ids = semantic[x0:x1, y0:y1].ravel()
        cells = self._cells[
            x0 - px + _HALF_W : x1 - px + _HALF_W, y0 - py + _HALF_H : y1 - py + _HALF_H
        ].ravel()
        keep = cells != _CENTER_CELL
        ids, cells = ids[keep], cells[keep]
        if self.unique_items and ids.size:
            # Group by kind, nearest first, ties in scan order; then list kinds by first appearance.
            order = np.lexsort((np.arange(ids.size), self._distance[cells], ids))
            grouped = ids[order]
            heads = np.flatnonzero(np.concatenate(([True], grouped[1:] != grouped[:-1])))
            first_seen = np.minimum.reduceat(order, heads)
            picks = order[heads][np.argsort(first_seen)]
            ids, cells = ids[picks], cells[picks]
        names, phrases = self._names, self._phrases
        return [f"- {names[i]} {phrases[c]}" for i, c in zip(ids.tolist(), cells.tolist(), strict=True)]

    def _facing_name(self, semantic: np.ndarray) -> str:
        player = self._env._player
        x, y = int(player.pos[0] + player.facing[0]), int(player.pos[1] + player.facing[1])
        width, height = semantic.shape
        return self._names[semantic[x, y]] if 0 <= x < width and 0 <= y < height else "nothing"
