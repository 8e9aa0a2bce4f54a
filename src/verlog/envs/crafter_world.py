"""Crafter's own world and step, run headless and deterministically: the engine under the text env.

* **No pixels unless asked.** Crafter renders a 256×256 image on every step, about 85 % of its step time.
  We keep crafter's step and swap only its ``_obs`` hook, so the image is never drawn; :meth:`image` draws it on
  demand. Crafter's night-time image noise draws from the world's random stream, so the hook makes that same
  draw (cheap) at night: the world evolves exactly as in raw Crafter, and drawing the image (which restores the
  stream afterwards) never changes the future.
* **Determinism.** :meth:`HeadlessCrafter.start` begins the first episode of ``crafter.Env(seed=world_seed)``
  (crafter seeds its world with ``hash((seed, episode))``, and a tuple of ints hashes the same in every
  process). Crafter itself is *not* deterministic given its seed: every 10 steps it may despawn a creature
  picked by index from a ``set`` ordered by memory address, so two runs (or a pickled copy) drift apart within
  tens of steps. We hand it the chunk's creatures in creation order instead, so a world seed fixes the map, the
  creatures and the whole future under the same actions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import crafter
import numpy as np

__all__ = ["HeadlessCrafter", "death_cause"]

#: A zombie that strikes resets its cooldown to this (crafter's ``Zombie.update``), and counts it down only while
#: it stays next to the player: next to the player with this cooldown, it struck in the step just run.
_STRUCK = 5
#: The vitals that drain health a point at a time when at zero, by the word for their lack.
_LACKS = (("hunger", "food"), ("thirst", "drink"), ("fatigue", "energy"))


def death_cause(env: crafter.Env) -> str:
    """What killed the player in the step just run, so an evaluation can say why its episodes end: ``lava``
    (walked into), ``zombie`` (one next to the player struck this step), else the vitals at zero that drain
    health a point at a time (``hunger``, ``thirst``, ``fatigue``, joined by ``+``), else ``arrow`` (a skeleton's
    arrow hits and vanishes, leaving nothing else to blame)."""
    player, world = env._player, env._world
    if world[player.pos][0] == "lava":
        return "lava"
    for obj in world.objects:
        if isinstance(obj, crafter.objects.Zombie) and obj.distance(player) <= 1 and obj.cooldown == _STRUCK:
            return "zombie"
    awake = not player.sleeping  # asleep, energy at zero does not drain health
    lacks = [word for word, vital in _LACKS if player.inventory[vital] <= 0 and (vital != "energy" or awake)]
    return "+".join(lacks) or "arrow"


class HeadlessCrafter(crafter.Env):
    """``crafter.Env`` that never draws its observation image and despawns creatures by a seeded rule."""

    def __init__(self) -> None:
        # seed=0: crafter would otherwise draw one from the global numpy RNG; each reset sets it anyway.
        # length=None: the episode limit is the text env's max_steps, reported as a truncation.
        super().__init__(area=(64, 64), view=(9, 9), size=(256, 256), reward=True, length=None, seed=0)
        unit = self._size // self._view
        self._noise_shape = tuple(int(n) for n in self._local_view._grid * unit)

    def start(self, world_seed: int) -> None:
        """Start the episode that ``crafter.Env(seed=world_seed).reset()`` would start."""
        self._seed = world_seed
        self._episode = 0
        self.reset()

    def _balance_chunk(self, chunk: tuple[int, int, int, int], objs: Iterable[Any]) -> None:
        # Crafter keeps each chunk's creatures in a set, ordered by memory address, and despawns
        # ``creatures[random.randint(n)]``: which one goes differs between processes, copies and runs.
        # Creation order (the index in the world's object list) makes the choice a function of the seed.
        index = self._world._obj_map
        super()._balance_chunk(chunk, sorted(objs, key=lambda obj: index[obj.pos[0], obj.pos[1]]))

    def _obs(self) -> None:
        # Crafter's night-time image noise draws from the world's random stream, which creatures use next:
        # make the same draw so the world evolves exactly as with the image.
        if self._world.daylight < 0.5:
            self._world.random.uniform(32, 127, self._noise_shape)
        return None

    def image(self) -> np.ndarray:
        """The image crafter would show now, drawn without touching the world's random stream."""
        state = self._world.random.get_state()
        try:
            return self.render()
        finally:
            self._world.random.set_state(state)
