r"""Every ``algo.advantage`` estimator, behind one switch: PPO's dual-discount GAE and the critic-free group
baselines (GRPO, GiGPO), plus the discounted reverse sum they share.

**Dual-discount GAE** (``"gae"``): Verlog's turn-level advantage, computed for a whole ``[T, N, R]`` batch at
once. Notation. Turn ``t`` of env ``n`` has ``L = L_{t,n} >= 1`` response tokens ``y_0 .. y_{L-1}`` (a prefix of the
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
:func:`verlog.ppo.gae_reference.dual_discount_gae_loop` is the plain per-env, per-turn, per-token recursion,
kept as the slow reference that tests and ``benchmarks/gae.py`` compare against.

**Group baselines** (``"grpo"``, ``"gigpo"``): A batch is ``groups x G`` whole episodes; episodes ``[k G, (k+1) G)`` form group ``k`` and started from the
same state (one reset seed). Every turn of episode ``i`` gets the *episode* advantage

    A_E(i) = (R_i - mean_k R)                    norm = "mean"
    A_E(i) = (R_i - mean_k R) / (std_k R + eps)  norm = "mean_std"   (std with Bessel's correction, eps 1e-6)

where ``R_i`` is the episode's undiscounted return (a truncated episode: the rewards it got; there is no critic
to bootstrap it). A group of one has no baseline: its advantage is the return itself (mean 0, std 1, as verl and
verl-agent do). GiGPO (arXiv 2505.10978, verl-agent's ``core_gigpo.py``) adds a *step* advantage: within a
group, the turns whose current observation is identical (an "anchor state", matched exactly: ``reset(seed)``
fixes the start, so equal texts are equal observations) form a step group, turns of the same episode included;
each turn's discounted return from that turn, ``sum_k gamma^k r_{t+k}``, is normalised the same way within its
step group (a step group of one gets 0), and

    A(i, t) = A_E(i) + w * A_S(i, t)        (w = algo.step_weight, verl-agent's step_advantage_w = 1.0)

One difference from verl-agent, on purpose: the episode statistics are over the group's episodes, one return
each (its "standard episode-level" option), not over every turn's copy of the return, which would weigh long
episodes more.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

__all__ = [
    "EPS",
    "GroupAdvantages",
    "discounted_returns",
    "discounted_reverse_cumsum",
    "check_gae_inputs",
    "dual_discount_gae",
    "episode_advantages",
    "group_advantages",
]


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


# ------------------------------------------------------------------ group baselines (no critic)
#: Added to the std before dividing (verl-agent's epsilon).
EPS = 1e-6


def _normalise(values: np.ndarray, *, std: bool, weights: np.ndarray | None = None) -> np.ndarray:
    """Values minus their mean (over std + EPS when ``std``). ``weights``: how many rows each value stands for
    (pooled over turns, as verl-agent's default); one row in all has no baseline: the value itself (mean 0,
    std 1, as verl and verl-agent do)."""
    w = np.ones_like(values) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.sum() <= 1:
        return values.copy()
    mean = float((w * values).sum() / w.sum())
    centred = values - mean
    if not std:
        return centred
    return centred / (np.sqrt((w * centred**2).sum() / (w.sum() - 1)) + EPS)  # Bessel over rows


def episode_advantages(
    returns: Sequence[float],
    group_size: int,
    *,
    std: bool,
    baseline: str = "mean",
    lengths: Sequence[int] | None = None,
) -> np.ndarray:
    """A_E of each episode; ``returns`` holds consecutive groups of ``group_size`` episodes.

    ``baseline = "mean"``: the group's mean (GRPO), its std too with ``std``; ``lengths`` (turns per episode)
    pools the statistics over turns instead of episodes. ``"loo"`` (RLOO): the mean of the *other* episodes of
    the group, ``R_i - (sum_j R_j - R_i) / (G - 1)``, not divided by a std.
    """
    values = np.asarray(returns, dtype=np.float64)
    if len(values) % group_size:
        raise ValueError(f"{len(values)} episodes do not divide into groups of {group_size}")
    if baseline == "loo" and group_size < 2:
        raise ValueError("a leave-one-out baseline needs groups of at least 2 episodes")
    out = np.empty_like(values)
    for start in range(0, len(values), group_size):
        group = values[start : start + group_size]
        if baseline == "loo":
            out[start : start + group_size] = group - (group.sum() - group) / (group_size - 1)
        else:
            weights = None if lengths is None else np.asarray(lengths[start : start + group_size])
            out[start : start + group_size] = _normalise(group, std=std, weights=weights)
    return out


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """The return from each turn to the end of the episode: ``G_t = r_t + gamma * G_{t+1}``."""
    if not len(rewards):
        return np.zeros(0)
    return discounted_reverse_cumsum(torch.as_tensor(rewards, dtype=torch.float64), gamma).numpy()


@dataclass
class GroupAdvantages:
    """Per-turn advantages of each episode and what the batch held."""

    turns: list[np.ndarray]
    """``turns[i][t]``: the advantage of turn t of episode i."""
    signal: list[bool] = field(default_factory=list)
    """Per group: whether any of its turns has a non-zero advantage (a group without carries no gradient)."""
    step_groups: list[int] = field(default_factory=list)
    """GiGPO: the size of every step group (a turn alone in its step group counts as a group of one)."""
    action_means: dict[Hashable, float] = field(default_factory=dict)
    """With ``actions``: each action's mean advantage over the batch before it was subtracted."""

    @property
    def no_signal_groups(self) -> int:
        return self.signal.count(False)


def group_advantages(
    rewards: Sequence[Sequence[float]],
    group_size: int,
    *,
    std: bool,
    anchors: Sequence[Sequence[Hashable]] | None = None,
    step_weight: float = 1.0,
    step_gamma: float = 0.95,
    baseline: str = "mean",
    pool: str = "episode",
    actions: Sequence[Sequence[Hashable | None]] | None = None,
) -> GroupAdvantages:
    """GRPO (``anchors=None``), RLOO (``baseline="loo"``) or GiGPO advantages of every turn of ``rewards[i]``
    (episode i's turn rewards). ``anchors[i][t]`` is the state episode i saw before its turn t (GiGPO's anchor).
    ``pool = "turn"`` computes the episode statistics over every turn's copy of its episode's return.
    ``actions[i][t]``: the action turn t chose (None for an invalid answer); given, each action's mean
    advantage over the batch is subtracted from its turns (:func:`center_by_action`)."""
    returns = [float(np.sum(r)) for r in rewards]
    lengths = [len(r) for r in rewards] if pool == "turn" else None
    episode = episode_advantages(returns, group_size, std=std, baseline=baseline, lengths=lengths)
    result = GroupAdvantages([np.full(len(r), episode[i]) for i, r in enumerate(rewards)])
    for start in range(0, len(rewards) if anchors is not None else 0, group_size):
        members: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
        step_returns: dict[int, np.ndarray] = {}
        for i in range(start, start + group_size):
            if len(anchors[i]) != len(rewards[i]):
                raise ValueError(f"episode {i}: {len(anchors[i])} anchors for {len(rewards[i])} turns")
            step_returns[i] = discounted_returns(rewards[i], step_gamma)
            for t, anchor in enumerate(anchors[i]):
                members[anchor].append((i, t))
        for turns in members.values():
            values = np.array([step_returns[i][t] for i, t in turns])
            steps = _normalise(values, std=std) if len(turns) > 1 else np.zeros(1)  # a step group of one: 0
            for (i, t), value in zip(turns, steps, strict=True):
                result.turns[i][t] += step_weight * value
            result.step_groups.append(len(turns))
    if actions is not None:
        result.action_means = center_by_action(result.turns, actions)
    result.signal = [
        any(bool(np.any(result.turns[i] != 0)) for i in range(start, start + group_size))
        for start in range(0, len(rewards), group_size)
    ]
    return result


def center_by_action(
    turns: list[np.ndarray], actions: Sequence[Sequence[Hashable | None]]
) -> dict[Hashable, float]:
    """Subtract from each turn's advantage the mean advantage of every turn in the batch that chose the same
    action, in place; turns whose action is None (invalid answers) keep theirs. Returns the means subtracted.

    Why: a policy that does not yet read its observation gets, from each batch, a push toward whichever action
    happened to fare best on average, and a sampled policy's noise settles on the action it already favours
    (every critic-free BabaIsAI run collapsed onto its prior's favourite move). With every action's mean at
    zero, that state-blind part of the gradient is gone; what is left says which action was better *in its
    state* than the same action elsewhere. Invalid answers keep their penalty, so they are still unlearned.
    """
    sums: dict[Hashable, float] = defaultdict(float)
    counts: dict[Hashable, int] = defaultdict(int)
    for i, chosen in enumerate(actions):
        if len(chosen) != len(turns[i]):
            raise ValueError(f"episode {i}: {len(chosen)} actions for {len(turns[i])} turns")
        for t, action in enumerate(chosen):
            if action is not None:
                sums[action] += float(turns[i][t])
                counts[action] += 1
    means = {action: sums[action] / counts[action] for action in sums}
    for i, chosen in enumerate(actions):
        for t, action in enumerate(chosen):
            if action is not None:
                turns[i][t] -= means[action]
    return means
