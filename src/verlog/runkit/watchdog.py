"""Collapse detection: the signs that a run has gone bad, each compared with the run's recent healthy updates.

The peers' users report the same failure again and again: answers degenerate into garbage or one repeated
action, response length runs to the cap, the valid-action rate crashes, and nothing notices until the run
ends. After every update :meth:`Watchdog.check` compares the update's metrics with the mean of the last
``watchdog.reference_updates`` healthy updates': a collapse is a sudden change, so a run that learns steadily
(entropy falling over many updates) never trips it. The reference is a mean, not the last update alone, because
an update of 32 turns is noisy: with the last update alone, one lucky update (invalid rate 0.06 in a run at
0.25-0.47) made the next, ordinary one a "rise of 0.38", and the replay after each rollback met the same luck
again, until the run stopped after its last rollback (learn_real, seed 1, entropy bonus, 96 updates: update 12).
The run rolls back to its last good point: a checkpoint saved after update k holds weights whose behaviour shows
only in update k+1's rollout, so a saved checkpoint is a candidate (:meth:`Watchdog.saved`) until the next update
passes the checks; then it is the good point (:meth:`Watchdog.healthy`). The signals:

- the invalid-action rate rose more than ``watchdog.invalid_rise`` (absolute) above the reference;
- the policy's entropy moved more than ``watchdog.entropy_nats`` from the reference, either way (a policy that
  collapses onto one answer, or one that dissolves into noise);
- at least ``watchdog.capped_share`` of the answers ran to the token cap, up by 0.3 or more on the reference;
- the validation panel's success fell more than ``watchdog.eval_drop_se`` standard errors below its best;
- and the divergence guard's own stop (weights past ``ppo.max_weight_abs``: :mod:`verlog.runkit.faults`).

A collapse the per-update signals see rolls back to the last good point. A panel's fall rolls back to the
best panel's checkpoint instead (:meth:`Watchdog.target`): the fall happened somewhere since the best panel,
and the per-update signals, which missed it, are no judge of where; with the last good point alone, learn_real
seed 2 (16 envs) went back to update 30, already spinning in place, three times, after its best panel at 16.
On a collapse the trainer rolls back (its exact-resume path), multiplies the actor's learning rate by
``watchdog.lr_factor`` and goes on; past ``watchdog.max_rollbacks`` the run stops with :class:`Collapsed`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["Collapsed", "Watchdog"]

#: The metrics a good point remembers.
SIGNALS = ("env/invalid_action_rate", "losses/entropy", "charts/capped_share")
#: How much the share of answers at the token cap must have risen (besides reaching watchdog.capped_share).
CAPPED_RISE = 0.3


class Collapsed(RuntimeError):
    """The run collapsed again after its last allowed rollback; the message is one line."""


class Watchdog:
    """The recent healthy updates, the last good point, the best panel result, and how many rollbacks."""

    def __init__(self, config: Any) -> None:
        self.config = config  # a WatchdogConfig
        # The signals of the last watchdog.reference_updates healthy updates: the reference is their mean.
        self.recent: deque[dict[str, float]] = deque(maxlen=config.reference_updates)
        self.good_update: int | None = None  # the newest checkpoint confirmed good: the one to roll back to
        self.candidate: int | None = None  # the newest checkpoint saved, not confirmed yet
        self.best_eval: tuple[float, float] | None = None  # (success, its SE) of the best panel so far
        self.rollbacks = 0
        self.lr_scale = 1.0
        self.panel_fell = False  # the last collapse found was the panel's fall (not a per-update signal)

    def saved(self, update: int) -> None:
        """A checkpoint was saved after ``update``: good once the next update's behaviour passes the checks."""
        self.candidate = update

    @property
    def good(self) -> dict[str, float]:
        """The reference: each signal's mean over the recent healthy updates that measured it."""
        measured = {key: [u[key] for u in self.recent if key in u] for key in SIGNALS}
        return {key: math.fsum(values) / len(values) for key, values in measured.items() if values}

    def healthy(self, metrics: Mapping[str, float]) -> None:
        """This update passed the checks: its metrics join the reference for the next ones (a collapse is a
        sudden change, so a run that learns steadily never trips it), and the candidate checkpoint behind it is
        good."""
        self.recent.append({k: float(metrics[k]) for k in SIGNALS if math.isfinite(metrics.get(k, math.nan))})
        if self.candidate is not None:
            self.good_update, self.candidate = self.candidate, None

    def target(self, best_update: int | None) -> int:
        """The checkpoint to roll back to: after the panel's fall the best panel's (``best_update``, when the run
        has one), otherwise the last good point."""
        if self.panel_fell and best_update is not None:
            return best_update
        return self.good_update or 0

    def check(self, metrics: Mapping[str, float]) -> str | None:
        """Why this update's metrics look collapsed (one phrase), or None."""
        cfg, good = self.config, self.good
        self.panel_fell = False

        def moved(key: str) -> float | None:
            value = metrics.get(key, math.nan)
            return value - good[key] if key in good and math.isfinite(value) else None

        rise = moved("env/invalid_action_rate")
        if rise is not None and rise > cfg.invalid_rise:
            return (
                f"the invalid-action rate rose by {rise:.2f} (watchdog.invalid_rise = {cfg.invalid_rise:g})"
            )
        shift = moved("losses/entropy")
        if shift is not None and abs(shift) > cfg.entropy_nats:
            return f"the entropy moved by {shift:+.2f} nats (watchdog.entropy_nats = {cfg.entropy_nats:g})"
        capped = metrics.get("charts/capped_share", math.nan)
        if capped >= cfg.capped_share and capped - good.get("charts/capped_share", 1.0) >= CAPPED_RISE:
            return f"{capped:.0%} of the answers ran to the token cap (watchdog.capped_share = {cfg.capped_share:g})"
        return self.check_eval(metrics)

    def check_eval(self, metrics: Mapping[str, float]) -> str | None:
        """The panel's success against its best so far (and remember a new best)."""
        success, se = metrics.get("eval/success", math.nan), metrics.get("eval/success_se", math.nan)
        if not math.isfinite(success):
            return None
        if self.best_eval is not None:
            best, best_se = self.best_eval
            margin = self.config.eval_drop_se * max(math.hypot(se, best_se), 1e-9)
            if success < best - margin:
                self.panel_fell = True
                return (
                    f"panel success fell to {success:.2f} from its best {best:.2f} (more than "
                    f"watchdog.eval_drop_se = {self.config.eval_drop_se:g} SE)"
                )
        if self.best_eval is None or success > self.best_eval[0]:
            self.best_eval = (success, se if math.isfinite(se) else 0.0)
        return None

    def roll_back(self, reason: str) -> None:
        """Count a rollback (and lower the learning rate), or raise :class:`Collapsed` past the last one."""
        if self.rollbacks >= self.config.max_rollbacks:
            raise Collapsed(
                f"the run collapsed again ({reason}) after {self.rollbacks} rollback(s) "
                f"(watchdog.max_rollbacks = {self.config.max_rollbacks})"
            )
        self.rollbacks += 1
        self.lr_scale *= self.config.lr_factor

    def state_dict(self) -> dict[str, Any]:
        return {
            "recent": list(self.recent),
            "good_update": self.good_update,
            "candidate": self.candidate,
            "best_eval": list(self.best_eval) if self.best_eval else None,
            "rollbacks": self.rollbacks,
            "lr_scale": self.lr_scale,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # A checkpoint from before the mean kept one update's signals under "good".
        recent = state["recent"] if "recent" in state else [state["good"]]
        self.recent = deque(
            ({k: float(v) for k, v in update.items()} for update in recent if update),
            maxlen=self.config.reference_updates,
        )
        self.good_update, self.candidate = state["good_update"], state["candidate"]
        self.best_eval = tuple(state["best_eval"]) if state["best_eval"] else None  # type: ignore[assignment]
        self.rollbacks = int(state["rollbacks"])
        self.lr_scale = float(state["lr_scale"])
