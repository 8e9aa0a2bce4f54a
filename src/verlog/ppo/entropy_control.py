"""An entropy bonus that adapts to a target entropy, as the adaptive KL controller of Ziegler et al. (2019)
adapts its KL coefficient: after each update the coefficient grows while the policy's entropy is under the
target and shrinks while it is over, so the bonus is as strong as it needs to be and no stronger.

Why: a fixed bonus is either too weak late (a policy that finds one answer that pays often collapses onto it, and
every other skill goes; SmolLM2 on Crafter, docs/log.md) or too strong early (it keeps a state's answer random
when the reward says otherwise). A target names what is wanted, the entropy the policy keeps, in the units the
run logs (``losses/entropy``, nats per response token).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from verlog.config import PPOConfig

__all__ = ["EntropyController", "MAX_ENTROPY_COEF", "MIN_ENTROPY_COEF"]

#: Bounds of the adapted coefficient: above 1 the bonus outweighs a whitened advantage on every token, and under
#: 1e-5 it would take many updates to climb back.
MIN_ENTROPY_COEF = 1e-5
MAX_ENTROPY_COEF = 1.0


@dataclass
class EntropyController:
    """The entropy coefficient of the next update, moved after each update toward ``target``.

    One step multiplies the coefficient by ``exp(rate * e)``, ``e = clip((target - entropy) / target, -1, 1)``:
    at most a factor ``exp(rate)`` an update, so the coefficient's path is smooth whatever one batch's entropy
    is. Its state (the coefficient) goes into checkpoints, so a resumed run goes on with the same bonus.
    """

    coef: float
    target: float
    rate: float

    @classmethod
    def from_config(cls, ppo: PPOConfig) -> EntropyController | None:
        """The controller ``ppo.entropy_target`` asks for, starting at ``ppo.entropy_coef``; None when off (0)."""
        if ppo.entropy_target <= 0:
            return None
        return cls(coef=ppo.entropy_coef, target=ppo.entropy_target, rate=ppo.entropy_target_rate)

    def observe(self, entropy: float) -> float:
        """Move the coefficient after an update whose mean entropy per response token was ``entropy``; return it.
        A batch without a finite entropy (every optimiser step skipped) leaves it as it was."""
        if math.isfinite(entropy):
            error = max(-1.0, min(1.0, (self.target - entropy) / self.target))
            self.coef = min(MAX_ENTROPY_COEF, max(MIN_ENTROPY_COEF, self.coef * math.exp(self.rate * error)))
        return self.coef
