"""The slow reference of dual-discount GAE: the textbook backward recursion, one token at a time.

Kept beside :func:`verlog.ppo.advantages.dual_discount_gae` (which training uses) so that tests and
``benchmarks/gae.py`` can compare the vectorised path against formulas checked by eye.
"""

from __future__ import annotations

import torch

from verlog.ppo.advantages import check_gae_inputs

__all__ = ["dual_discount_gae_loop"]


def dual_discount_gae_loop(
    rewards: torch.Tensor,
    token_values: torch.Tensor,
    response_mask: torch.Tensor,
    next_values: torch.Tensor,
    continues: torch.Tensor,
    *,
    turn_gamma: float,
    turn_lam: float,
    token_gamma: float,
    token_lam: float,
    token_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Slow reference of :func:`~verlog.ppo.advantages.dual_discount_gae`: the textbook backward recursion, one token at a time.

    Written the way Verlog computes it -- per env, turns from last to first, tokens from last to first,
    carrying the running advantage -- so that it can be checked by eye against the formulas. It works in
    Python floats (float64) on values copied out of the tensors, which makes it an accurate reference for the
    float32 vectorised path. Only tests and ``benchmarks/gae.py`` use it; it is far too slow for training.
    Same arguments, validation, outputs and dtype rules as :func:`~verlog.ppo.advantages.dual_discount_gae`.
    """
    dtype, _, lengths = check_gae_inputs(
        rewards,
        token_values,
        response_mask,
        next_values,
        continues,
        token_rewards,
        {"turn_gamma": turn_gamma, "turn_lam": turn_lam, "token_gamma": token_gamma, "token_lam": token_lam},
    )
    T, N, R = token_values.shape
    lengths = lengths.long().tolist()
    V = token_values.double().tolist()
    env_reward = rewards.double().tolist()
    boot = next_values.double().tolist()
    cont = continues.double().tolist()
    tok_reward = token_rewards.double().tolist() if token_rewards is not None else None

    adv = [[[0.0] * R for _ in range(N)] for _ in range(T)]
    ret = [[[0.0] * R for _ in range(N)] for _ in range(T)]
    for n in range(N):
        next_turn_adv = 0.0  # A_{t+1,0}; A_{T,0} := 0
        for t in reversed(range(T)):
            L = lengths[t][n]
            v = V[t][n]
            gae = 0.0
            for k in reversed(range(L)):
                r = tok_reward[t][n][k] if tok_reward is not None else 0.0
                if k == L - 1:
                    r += env_reward[t][n]
                    delta = r + turn_gamma * boot[t][n] - v[k]
                    gae = delta + turn_gamma * turn_lam * cont[t][n] * next_turn_adv
                else:
                    delta = r + token_gamma * v[k + 1] - v[k]
                    gae = delta + token_gamma * token_lam * gae
                adv[t][n][k] = gae
                ret[t][n][k] = gae + v[k]
            next_turn_adv = adv[t][n][0]
    device = token_values.device
    # reshape: nested lists lose the trailing dims of an empty batch (T or N = 0).
    return (
        torch.tensor(adv, dtype=dtype, device=device).reshape(T, N, R),
        torch.tensor(ret, dtype=dtype, device=device).reshape(T, N, R),
    )
