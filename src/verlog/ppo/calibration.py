"""How well the critic's bootstrap holds: its value at each batch end against the return that actually followed.

An episode still running when a batch ends is carried into the next update by ``V(s_T)``, the critic's value of
the state the batch stopped in. Whether that carry is honest can only be seen later: once the episode ends, the
discounted reward that followed ``s_T`` is known. :class:`BootstrapCalibration` keeps one open record per env
per batch end, adds each later turn's reward with its discount, and closes the records when the episode ends
(a real end or a time-limit cut: what followed is then only what was played, so a cut episode's return is a
lower bound) or when the discount has faded below :data:`FADED` (the rest could not move it). The closed
pairs give the update's calibration metrics: the mean value, the mean return, and the mean error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["FADED", "BootstrapCalibration"]

#: A record whose remaining discount falls below this is closed: later rewards barely count.
FADED = 0.01


@dataclass
class _Open:
    value: float
    realised: float = 0.0
    discount: float = 1.0


class BootstrapCalibration:
    """Open records per env (one per batch end), closed as episodes end; :meth:`metrics` drains the closed."""

    def __init__(self, num_envs: int, gamma: float) -> None:
        self.gamma = gamma
        self.open_records: list[list[_Open]] = [[] for _ in range(num_envs)]
        self.closed: list[tuple[float, float]] = []  # (value, realised return)

    def open(self, values: Sequence[float]) -> None:
        """At a batch end: the bootstrap value of each env's current state."""
        for records, value in zip(self.open_records, values, strict=True):
            records.append(_Open(float(value)))

    def step(self, rewards: Sequence[float], done: Sequence[bool]) -> None:
        """One turn of every env: its reward, and whether its episode ended there."""
        for n, (reward, ended) in enumerate(zip(rewards, done, strict=True)):
            keep = []
            for record in self.open_records[n]:
                record.realised += record.discount * float(reward)
                record.discount *= self.gamma
                if ended or record.discount < FADED:
                    self.closed.append((record.value, record.realised))
                else:
                    keep.append(record)
            self.open_records[n] = keep

    def state_dict(self) -> dict[str, list]:
        """The open records and the closed pairs not yet reported (plain lists, for a JSON checkpoint)."""
        return {
            "open": [[[r.value, r.realised, r.discount] for r in records] for records in self.open_records],
            "closed": [list(pair) for pair in self.closed],
        }

    def load_state_dict(self, state: dict[str, list]) -> None:
        self.open_records = [[_Open(*record) for record in records] for records in state["open"]]
        self.closed = [(float(v), float(r)) for v, r in state["closed"]]

    def metrics(self) -> dict[str, float]:
        """The pairs closed since the last call: mean value, mean return, mean error (value - return) and mean
        absolute error; nothing when none closed."""
        pairs, self.closed = self.closed, []
        if not pairs:
            return {}
        count = len(pairs)
        return {
            "critic/bootstrap_value": sum(v for v, _ in pairs) / count,
            "critic/bootstrap_return": sum(r for _, r in pairs) / count,
            "critic/bootstrap_error": sum(v - r for v, r in pairs) / count,
            "critic/bootstrap_abs_error": sum(abs(v - r) for v, r in pairs) / count,
            "critic/bootstrap_pairs": float(count),
        }
