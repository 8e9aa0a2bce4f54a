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

__all__ = ["HeadlessCrafter"]


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
