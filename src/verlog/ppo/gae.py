r"""Dual-discount GAE, the ``"gae"`` estimator of :mod:`verlog.ppo.advantages`: Verlog's turn-level advantage,
computed for a whole ``[T, N, R]`` batch at once, and over a scored :class:`~verlog.ppo.storage.TurnStorage`
(:func:`gae_advantages`: the critic's targets and the whitened advantages).

Notation. Turn ``t`` of env ``n`` has ``L = L_{t,n} >= 1`` response tokens ``y_0 .. y_{L-1}`` (a prefix of the
``R`` columns; the rest is padding). ``V_{t,k}`` is the critic's value just before token ``k``, so
``V_{t,0}`` is the value of the turn's state (its prompt). Rewards per token::

    r_{t,k} = token_rewards[t, n, k] (e.g. -beta * KL)  +  rewards[t, n] if k == L-1 else 0

Inside a turn the tokens are discounted with ``(gamma_tok, lam_tok)``; the last real token links to the next
turn with ``(gamma_turn, lam_turn)``::

    k <  L-1:  delta_{t,k} = r_{t,k} + gamma_tok * V_{t,k+1} - V_{t,k}
               A_{t,k}     = delta_{t,k} + gamma_tok * lam_tok * A_{t,k+1}
    k == L-1:  delta_{t,k} = r_{t,k} + gamma_turn * next_values[t] - V_{t,k}
               A_{t,k}     = delta_{t,k} + gamma_turn * lam_turn * continues[t] * A_{t+1,0}     (A_{T,0} := 0)

    returns = A + V on real tokens; both are 0 on padding.

With ``gamma_tok = lam_tok = 1`` (Verlog's setting) this telescopes to
``A_{t,k} = sum_{j>=k} r_{t,j} + gamma_turn * next_values[t] + gamma_turn * lam_turn * continues[t] * A_{t+1,0}
- V_{t,k}``. With the env reward alone, every token of a turn therefore shares one return target (A + V) and
only its baseline differs; per-token rewards make token k's target drop the token rewards earned before it.

How this differs from Verlog (verl ``compute_gae_advantage_return``, see shared/research/verlog-algorithm.md §3):

* **No extra value slot.** Verlog keeps a slot ``k = L`` (the value on the final response token, reward 0)
  whose delta links to ``V_{t+1,0}``. Here the last real token links to the next turn directly, so the critic
  is never asked to value a finished response it cannot act from.
* **Real ends cut the bootstrap, truncations keep it.** Verlog uses ``done = terminated or truncated`` and so
  treats a time limit as a terminal state. Here the caller (``TurnStorage``, from its ``masks`` and
  ``bad_masks``) passes ``next_values = 0`` after a real end, ``V(final_obs)`` after a time-limit truncation
  and ``V_{t+1,0}`` otherwise, plus ``continues = 0`` whenever the next turn starts a new episode, so no
  advantage leaks across episodes either way.

:func:`dual_discount_gae` is the vectorised implementation used by training: one Python loop over the ``T``
turns on ``[N]`` vectors, everything else as whole-tensor ops (no loop over tokens).
:func:`dual_discount_gae_loop` is the plain per-env, per-turn, per-token recursion,
kept as the slow reference that tests and ``benchmarks/speed/gae.py`` compare against.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

if TYPE_CHECKING:
    from verlog.ppo.storage import TurnStorage

__all__ = [
    "check_gae_inputs",
    "discounted_reverse_cumsum",
    "dual_discount_gae",
    "dual_discount_gae_loop",
    "gae_advantages",
    "masked_moments",
    "whiten",
]

#: Sums a tensor over processes (several processes' batches whitened with the same statistics).
AllReduce = Callable[[Tensor], Tensor]


def check_gae_inputs(
    rewards: torch.Tensor,
    token_values: torch.Tensor,
    response_mask: torch.Tensor,
    next_values: torch.Tensor,
    continues: torch.Tensor,
    token_rewards: torch.Tensor | None,
    coefficients: dict[str, float],
) -> tuple[torch.dtype, torch.Tensor, torch.Tensor]:
    """Validate shapes, coefficients and the mask; return the compute dtype, the mask in it and the lengths.

    Errors name the argument and the expected shape, because a transposed ``[N, T]`` tensor is the usual
    mistake and broadcasting would otherwise hide it. The mask check runs on every update, so its common path
    is three read-only float passes (bool tensor ops and temporaries are several times slower on CPU); only
    when it fails is the mask searched for the offending row.
    """
    if not isinstance(token_values, torch.Tensor):
        raise TypeError(f"token_values must be a torch.Tensor, got {type(token_values).__name__}")
    if token_values.dim() != 3:
        raise ValueError(f"token_values must have shape [T, N, R], got {list(token_values.shape)}")
    T, N, R = token_values.shape
    if R == 0:
        raise ValueError("token_values has R = 0 response columns; every turn needs at least one token")
    expected = {
        "rewards": (rewards, (T, N)),
        "response_mask": (response_mask, (T, N, R)),
        "next_values": (next_values, (T, N)),
        "continues": (continues, (T, N)),
    }
    if token_rewards is not None:
        expected["token_rewards"] = (token_rewards, (T, N, R))
    for name, (tensor, shape) in expected.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tuple(tensor.shape) != shape:
            dims = "[T, N, R]" if len(shape) == 3 else "[T, N]"
            raise ValueError(
                f"{name} must have shape {dims} = {list(shape)} (T, N, R taken from token_values), "
                f"got {list(tensor.shape)}"
            )
    for name, value in coefficients.items():
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")

    floats = [token_values, rewards, next_values] + ([token_rewards] if token_rewards is not None else [])
    # Half precision is too coarse for sums over hundreds of tokens: compute in float32 at least.
    dtype = torch.float64 if any(x.dtype == torch.float64 for x in floats) else torch.float32

    mask = response_mask.to(dtype)
    lengths = mask.sum(-1)
    # Three read-only passes, no temporaries: entries in [0, 1], and per row sum_k k*m_k == L(L-1)/2 with
    # L = sum_k m_k. Among [0, 1]-valued rows of mass L, the 0/1 prefix [0, L) is the unique minimiser of
    # sum_k k*m_k, with value L(L-1)/2 (a non-integer L cannot reach that value either), so the two checks
    # together mean "0/1 and a prefix". Sums of small integers are exact in float32 while R(R-1)/2 < 2**24.
    bounded = True
    if response_mask.dtype != torch.bool and mask.numel():
        low, high = mask.aminmax()
        bounded = 0 <= float(low) and float(high) <= 1
    exact = dtype if R <= 4096 else torch.float64
    position_sum = mask.to(exact) @ torch.arange(R, dtype=exact, device=mask.device)
    prefix_sum = (lengths * (lengths - 1) / 2).to(exact)
    if not (bounded and torch.equal(position_sum, prefix_sum)):
        # Error path only: find what is wrong, and where.
        binary = (mask == 0) | (mask == 1)
        if not bool(binary.all()):
            t, n, k = (int(i) for i in (~binary).nonzero()[0])
            raise ValueError(
                f"response_mask must hold only 0 and 1; it holds {float(mask[t, n, k])} at t={t}, n={n}"
            )
        t, n = (int(i) for i in (position_sum != prefix_sum).nonzero()[0])
        raise ValueError(
            f"response_mask must be a prefix in every row (1s first, then 0s padding); row t={t}, n={n} is not"
        )
    if T * N and float(lengths.min()) < 1:
        t, n = (int(i) for i in (lengths < 1).nonzero()[0])
        raise ValueError(
            f"response_mask has a turn with no response token (t={t}, n={n}); every turn needs L >= 1 "
            "(the sampler always emits at least the EOS token)"
        )
    return dtype, mask, lengths


class _ScanWeights(NamedTuple):
    """Powers of ``c`` used by the blocked scan, cached per (R, c, dtype, device): building them costs a few
    dozen tiny ops, a noticeable share of a call at small R."""

    block: int  # b, tokens per block (R itself when one block is enough)
    within: torch.Tensor  # [b, b], entry (j, i) = c**(j-i) for j >= i, else 0 (the transposed scan matrix)
    across: torch.Tensor  # [nb, nb], entry (m, i) = c**(b*(m-i)) for m >= i, else 0
    tail: torch.Tensor  # [b], c**(b-p): how the next block's first token reaches token p of this block
    from_start: torch.Tensor  # [R], c**k: how token k reaches token 0


@functools.lru_cache(maxsize=16)
def _scan_weights(R: int, c: float, dtype: torch.dtype, device: torch.device) -> _ScanWeights:
    """Every weight is a power of ``c <= 1``, computed in float64, cast, and flushed to 0 below the smallest
    normal number: powers of ``c < 1`` underflow over long responses, and subnormal operands put x86 matmuls
    on a slow path while changing results by less than 1e-38."""
    tiny = torch.finfo(dtype).tiny

    def powers(exponents: torch.Tensor) -> torch.Tensor:
        p = c ** exponents.to(torch.float64)
        return torch.where(p < tiny, 0.0, p).to(dtype)

    def triangle(n: int, step: int) -> torch.Tensor:
        idx = torch.arange(n, device=device)
        diff = idx[:, None] - idx[None, :]
        return torch.where(diff >= 0, powers(step * diff.clamp(min=0)), 0.0).to(dtype)

    b = max(16, 2 ** round(math.log2((2 * R) ** (1 / 3))))
    if R <= b:
        b = R
    nb = -(-R // b)
    return _ScanWeights(
        block=b,
        within=triangle(b, 1),
        across=triangle(nb, b),
        tail=powers(torch.arange(b, 0, -1, device=device)),
        from_start=powers(torch.arange(R, device=device)),
    )


def discounted_reverse_cumsum(x: torch.Tensor, c: float) -> torch.Tensor:
    """``y_k = sum_{j >= k} c**(j-k) * x_j`` along the last dim, for ``0 <= c <= 1``, without a token loop.

    Two-level blocked scan: the last dim is cut into ``nb`` blocks of ``b`` tokens. One matmul with a
    ``[b, b]`` upper-triangular matrix of ``c**(q-p)`` scans inside every block; a second with an ``[nb, nb]``
    matrix of ``c**(b*(m-i))`` scans the block starts; a broadcast ``c**(b-p)`` adds each block's tail. Cost per
    row is ``R*b + nb**2`` multiply-adds instead of ``R**2`` for one ``[R, R]`` matmul (``b ~ (2R)**(1/3)``
    minimises it), and every weight is a power of ``c <= 1`` -- unlike the ``c**-k``-rescaled cumsum, which
    overflows on long responses.
    """
    R = x.shape[-1]
    w = _scan_weights(R, c, x.dtype, x.device)
    b = w.block
    if R == b:
        return x @ w.within
    nb = -(-R // b)
    if nb * b != R:
        x = torch.nn.functional.pad(x, (0, nb * b - R))
    local = (x.reshape(-1, b) @ w.within).reshape(-1, nb, b)  # scan inside each block
    starts = local[..., 0] @ w.across  # [rows, nb]: y at each block's first token
    after = torch.zeros(starts.shape, dtype=x.dtype, device=x.device)
    after[:, :-1] = starts[:, 1:]  # y at the next block's first token
    local.addcmul_(after[..., None], w.tail)
    y = local.reshape(*x.shape[:-1], nb * b)
    return y if nb * b == R else y[..., :R].contiguous()


def dual_discount_gae(
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
    """Dual-discount GAE over a ``[T, N, R]`` batch of turns (formulas in the module docstring).

    Args:
        rewards: ``[T, N]`` env reward of turn ``t``, credited to its last response token.
        token_values: ``[T, N, R]`` ``V_{t,k}``, the critic value before response token ``k``.
        response_mask: ``[T, N, R]`` 1 on real response tokens (a non-empty prefix of each row), 0 on padding;
            bool, integer or float.
        next_values: ``[T, N]`` value of the state after turn ``t``: ``V_{t+1,0}`` if the episode goes on,
            ``V(final_obs)`` after a time-limit truncation, 0 after a real end.
        continues: ``[T, N]`` 1 if turn ``t+1`` continues the same episode (its advantage is carried back).
        turn_gamma, turn_lam: discount and GAE lambda between turns, in [0, 1].
        token_gamma, token_lam: discount and GAE lambda between tokens of a turn, in [0, 1].
        token_rewards: optional ``[T, N, R]`` extra per-token rewards (e.g. ``-beta * KL``).

    Padding entries of ``token_values`` and ``token_rewards`` are ignored as long as they are finite (they
    are multiplied by the mask: a float multiply is several times cheaper than ``torch.where`` on CPU).

    Returns:
        ``(advantages, returns)``, both ``[T, N, R]``, ``returns = advantages + token_values`` on real tokens,
        both exactly 0 on padding. The dtype is float64 if any float input is float64, else float32 (half
        precision is upcast); the device is the inputs' device.

    Raises:
        ValueError: a wrong shape (naming the argument and the expected shape), a coefficient outside
            [0, 1], a mask that is not 0/1 or not a prefix, or a turn with no response token.

    One function of some 110 lines on purpose: it works in place in the two output buffers, reading each
    full-size input once, and splitting it would pass (or re-create) those ``[T, N, R]`` temporaries.
    """
    dtype, mask, lengths = check_gae_inputs(
        rewards,
        token_values,
        response_mask,
        next_values,
        continues,
        token_rewards,
        {"turn_gamma": turn_gamma, "turn_lam": turn_lam, "token_gamma": token_gamma, "token_lam": token_lam},
    )
    T, N, R = token_values.shape
    device = token_values.device
    # Full-size [T, N, R] work is done in place in the two output buffers, and padding is zeroed by
    # multiplying with the mask as each full-size input is read: fresh multi-MB temporaries cost page faults,
    # which on CPU take as long as the arithmetic itself. Every [T, N, R] intermediate is exactly 0 on padding,
    # so V_{t,L} (a slot our formulation does not have) reads as 0 where the shifted values are added.
    values = token_values.to(dtype)
    tok = token_rewards.to(dtype) if token_rewards is not None else None
    # What token L-1 receives besides its token reward: the env reward and the bootstrap gamma_turn * next
    # value (and, once known, the carried gamma_turn * lam_turn * continues[t] * A_{t+1,0}).
    at_last = rewards.to(dtype) + turn_gamma * next_values.to(dtype)

    # The carry needs, per turn, only the first-token advantage without it (first) and the weight c**(L-1)
    # with which A_{t+1,0}, entering at token L-1, reaches token 0 (first_weight). Both are [T, N], so the
    # one Python loop, over turns, touches [N] vectors only.
    c = token_gamma * token_lam
    if c == 1.0:
        # gamma_tok = lam_tok = 1: the deltas telescope, A_{t,k} = sum_{j>=k} r_{t,j} + bootstrap + carry - V_k,
        # so no delta (a difference of values) is ever formed -- the more accurate float32 path as well.
        first = at_last - values[..., 0]  # token 0 is always real (L >= 1): no mask needed
        if tok is not None:
            advantages = torch.mul(tok, mask, out=torch.empty(T, N, R, dtype=dtype, device=device))
            advantages.cumsum_(-1)
            total = advantages[..., -1].clone()
            first += total
        first_weight = torch.ones(T, N, dtype=dtype, device=device)
    else:
        # delta_{t,k} = r_{t,k} - V_{t,k} + gamma_tok * V_{t,k+1}; the terms of token L-1 are added below.
        delta = torch.empty(T, N, R, dtype=dtype, device=device)
        if tok is not None:
            torch.sub(tok, values, out=delta)
        else:
            torch.neg(values, out=delta)
        delta.mul_(mask)
        delta[..., :-1].addcmul_(values[..., 1:], mask[..., 1:], value=token_gamma)
        from_start = _scan_weights(R, c, dtype, device).from_start  # c**k
        first_weight = from_start[lengths.long() - 1]  # c**(L-1)
        first = delta @ from_start + first_weight * at_last

    link = turn_gamma * turn_lam * continues.to(dtype)
    carry = torch.zeros(T, N, dtype=dtype, device=device)
    for t in range(T - 2, -1, -1):
        carry[t] = link[t] * (first[t + 1] + first_weight[t + 1] * carry[t + 1])  # link * A_{t+1,0}
    at_last += carry

    if c == 1.0:
        # Everything token L-1 receives reaches every real token undiscounted.
        if tok is not None:
            # Token rewards to go, sum_{j>=k} r_j = total - cumsum_k + r_k: exactly 0 on padding, where the
            # cumsum has stopped moving.
            advantages.neg_().add_(total[..., None]).addcmul_(tok, mask)
            advantages.addcmul_(mask, at_last[..., None]).addcmul_(values, mask, value=-1.0)
        else:
            advantages = torch.sub(
                at_last[..., None], values, out=torch.empty(T, N, R, dtype=dtype, device=device)
            )
            advantages.mul_(mask)
        returns = torch.addcmul(advantages, values, mask)
    else:
        delta.scatter_add_(-1, (lengths.long() - 1)[..., None], at_last[..., None])
        advantages = discounted_reverse_cumsum(delta, c)  # exactly 0 on padding: delta = 0 from there on
        returns = torch.addcmul(advantages, values, mask, out=delta)
    return advantages, returns


# ------------------------------------------------------------------ the slow reference
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
    """Slow reference of :func:`dual_discount_gae`: the textbook backward recursion, one token at a time.

    Written the way Verlog computes it -- per env, turns from last to first, tokens from last to first,
    carrying the running advantage -- so that it can be checked by eye against the formulas. It works in
    Python floats (float64) on values copied out of the tensors, which makes it an accurate reference for the
    float32 vectorised path. Only tests and ``benchmarks/speed/gae.py`` use it; it is far too slow for training.
    Same arguments, validation, outputs and dtype rules as :func:`dual_discount_gae`.
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


# ------------------------------------------------------------------ over a TurnStorage, whitened
def masked_moments(x: Tensor, mask: Tensor, all_reduce: AllReduce | None = None) -> tuple[float, float]:
    """Mean and unbiased variance of ``x`` over the entries where ``mask`` is 1; ``all_reduce`` sums a tensor
    over processes, so several processes get the same statistics."""
    stats = torch.stack([(x * mask).sum(), (x * x * mask).sum(), mask.sum()]).double()
    if all_reduce is not None:
        stats = all_reduce(stats)
    total, total_sq, count = stats.tolist()
    mean = total / max(count, 1.0)
    return mean, max((total_sq - count * mean * mean) / max(count - 1.0, 1.0), 0.0)


def whiten(
    x: Tensor, mask: Tensor, all_reduce: AllReduce | None = None, moments: tuple[float, float] | None = None
) -> Tensor:
    """(x - mean) / sqrt(var + 1e-8) over the entries where ``mask`` is 1 (:func:`masked_moments`, unless
    given); 0 elsewhere."""
    mean, var = masked_moments(x, mask, all_reduce) if moments is None else moments
    return (x - mean) * torch.rsqrt(torch.tensor(var + 1e-8, dtype=x.dtype)) * mask


def gae_advantages(
    storage: TurnStorage,
    *,
    turn_gamma: float,
    turn_lam: float,
    token_gamma: float,
    token_lam: float,
    kl_coef: float = 0.0,
    all_reduce: AllReduce | None = None,
    window_bootstrap: bool = True,
    whiten_advantages: bool = True,
    critic_lam: float | None = None,
) -> float:
    """Dual-discount GAE over a turn batch: ``storage.returns`` are the critic targets, ``storage.advantages``
    are whitened (unless ``whiten_advantages=False``); returns the advantages' std before any whitening.

    ``values``, ``token_values``, ``truncated_values``, ``old_logprobs`` (and ``ref_logprobs`` when
    ``kl_coef > 0``) must be scored first. The value after a turn is ``V_{t+1,0}`` while the episode goes on,
    ``V(final_obs)`` after a time-limit cut (``bad_masks``) and 0 after a real end (``masks``).
    ``window_bootstrap=False`` takes the value after the batch's last turn as 0 for an episode still running
    there (the cut that ablations compare against). ``critic_lam`` (None: ``turn_lam``) is the turn lambda of the
    critic's targets alone, decoupled from the policy's (VAPO: 1.0, the actual discounted returns).
    """
    s = storage
    next_values = s.masks[1:] * s.values[1:] + (1.0 - s.bad_masks[1:]) * s.truncated_values
    if not window_bootstrap:
        next_values = next_values.clone()
        next_values[-1] -= s.masks[-1] * s.values[-1]
    token_rewards = None
    if kl_coef > 0:
        token_rewards = -kl_coef * (s.old_logprobs - s.ref_logprobs) * s.response_mask
    gae = functools.partial(
        dual_discount_gae,
        s.rewards,
        s.token_values,
        s.response_mask,
        next_values,
        s.masks[1:],
        turn_gamma=turn_gamma,
        token_gamma=token_gamma,
        token_lam=token_lam,
        token_rewards=token_rewards,
    )
    advantages, returns = gae(turn_lam=turn_lam)
    if critic_lam is not None and critic_lam != turn_lam:  # the critic's targets on their own lambda
        _, returns = gae(turn_lam=critic_lam)
    s.returns = returns.float()
    advantages, mask = advantages.float(), s.response_mask
    moments = masked_moments(advantages, mask, all_reduce)
    s.advantages = whiten(advantages, mask, moments=moments) if whiten_advantages else advantages * mask
    return moments[1] ** 0.5
