"""Crafter's training shaping: what a learner may be paid on top of (or instead of) Crafter's own reward.

Every option here is for training only and is off by default; the judge and the panel play Crafter's own reward
(+1 per achievement first unlocked in an episode, ±0.1 per health point won or lost), so a shaped run is always
measured on the game's terms. :class:`~verlog.envs.crafter.CrafterTextEnv` holds one :class:`CrafterShaping` and
asks it, around each step, for the reward to add to crafter's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from crafter import constants

__all__ = [
    "CRAFTER_HEALTH_WEIGHT",
    "CRAFTERS_OWN",
    "ITEMS",
    "MATERIALS",
    "POTENTIAL_CAP",
    "PROXIMITY_RANGE",
    "CrafterShaping",
]

#: Crafter's own reward for each health point won or lost.
CRAFTER_HEALTH_WEIGHT = 0.1
#: Every shaping option at its "off" value: the env kwargs that make the reward Crafter's own (a judge sets these).
CRAFTERS_OWN: Mapping[str, Any] = MappingProxyType(
    {
        "achievement_rewards": {},
        "inventory_potential": {},
        "proximity_potential": {},
        "novelty_bonus": 0.0,
        "health_weight": CRAFTER_HEALTH_WEIGHT,
    }
)
#: Units of an item that count toward ``inventory_potential`` (a hoard is worth no more).
POTENTIAL_CAP = 5
#: The items an ``inventory_potential`` may weigh: the inventory but the vitals.
ITEMS = tuple(name for name in constants.items if name not in ("health", "food", "drink", "energy"))
#: The materials a ``proximity_potential`` may weigh: crafter's, e.g. ``tree`` or ``water``.
MATERIALS = tuple(constants.materials)
#: Steps from the faced cell at which a material in view is worth nothing: one more than the farthest cell of the
#: 9x7 window (8 steps), so anything in view is worth something and the faced cell its whole weight.
PROXIMITY_RANGE = 9
#: The window the text describes, as offsets from the player: 9 wide, 7 high.
_WINDOW = tuple((dx, dy) for dx in range(-4, 5) for dy in range(-3, 4))


def _checked(
    option: str, weights: Mapping[str, float] | None, known: Sequence[str], kind: str
) -> dict[str, float]:
    """A shaping option's ``weights`` checked against the names it may use (a misspelt one would pay nothing)."""
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(known))
    if unknown:
        raise ValueError(f"{option} names {unknown}, which are not Crafter {kind}; use some of {list(known)}")
    return {name: float(value) for name, value in weights.items()}


@dataclass(frozen=True)
class CrafterShaping:
    """The training shaping of one env; see :class:`~verlog.envs.crafter.CrafterTextEnv` for each option's why.

    :meth:`before` notes what the step may change (only what an active option needs: with none, nothing is
    copied), and :meth:`extra` returns what to add to crafter's reward for that step.
    """

    achievement_rewards: dict[str, float]
    inventory_potential: dict[str, float]
    proximity_potential: dict[str, float]
    novelty_bonus: float
    health_weight: float

    @classmethod
    def of(
        cls,
        *,
        achievements: Sequence[str],
        achievement_rewards: Mapping[str, float] | None = None,
        inventory_potential: Mapping[str, float] | None = None,
        proximity_potential: Mapping[str, float] | None = None,
        novelty_bonus: float = 0.0,
        health_weight: float = CRAFTER_HEALTH_WEIGHT,
    ) -> CrafterShaping:
        """The options checked: an unknown achievement or item name raises, naming the ones allowed."""
        return cls(
            achievement_rewards=_checked(
                "achievement_rewards", achievement_rewards, achievements, "achievements"
            ),
            inventory_potential=_checked("inventory_potential", inventory_potential, ITEMS, "items"),
            proximity_potential=_checked("proximity_potential", proximity_potential, MATERIALS, "materials"),
            novelty_bonus=float(novelty_bonus),
            health_weight=float(health_weight),
        )

    def before(self, player: Any, unlocked: set[str]) -> tuple[set[str] | None, float, int]:
        """What the step's reward is measured against: the unlocked achievements, the potential, health."""
        return set(unlocked) if self.achievement_rewards else None, self.potential(player), int(player.health)

    def extra(
        self,
        before: tuple[set[str] | None, float, int],
        player: Any,
        unlocked: set[str],
        *,
        dead: bool,
        novel: bool,
    ) -> float:
        """The reward to add to crafter's for the step just run (0.0 with every option at its default)."""
        was_unlocked, potential, health = before
        extra = 0.0
        if was_unlocked is not None and len(unlocked) > len(was_unlocked):
            # crafter pays +1 for a step that unlocks anything (once, however many); pay each its own reward.
            extra += sum(self.achievement_rewards.get(name, 1.0) for name in unlocked - was_unlocked) - 1.0
        if self.inventory_potential or self.proximity_potential:  # death pays the potential back
            extra += (0.0 if dead else self.potential(player)) - potential
        if self.health_weight != CRAFTER_HEALTH_WEIGHT:
            extra += (self.health_weight - CRAFTER_HEALTH_WEIGHT) * (int(player.health) - health)
        return extra + self.novelty_bonus * novel

    def potential(self, player: Any) -> float:
        """The state's potential: the inventory's worth plus the closeness of what is in view (0 without them)."""
        return self.worth(player) + self.closeness(player)

    def worth(self, player: Any) -> float:
        """The inventory's worth under ``inventory_potential`` (0 without it)."""
        held = player.inventory
        return sum(w * min(held[name], POTENTIAL_CAP) for name, w in self.inventory_potential.items())

    def closeness(self, player: Any) -> float:
        """How close the nearest cell of each ``proximity_potential`` material in the 9x7 window is to the cell the
        player faces: the weight times ``1 - steps / PROXIMITY_RANGE`` (the whole weight when faced, nothing out of
        view), in steps up-down plus left-right. Measured from the faced cell, so turning to face a tree pays too."""
        if not self.proximity_potential:
            return 0.0
        (px, py), (fx, fy) = (int(v) for v in player.pos), (int(v) for v in player.facing)
        nearest = dict.fromkeys(self.proximity_potential, PROXIMITY_RANGE)
        for dx, dy in _WINDOW:
            material, _ = player.world[(px + dx, py + dy)]
            if material in nearest:
                nearest[material] = min(nearest[material], abs(dx - fx) + abs(dy - fy))
        return sum(w * (1.0 - nearest[m] / PROXIMITY_RANGE) for m, w in self.proximity_potential.items())
