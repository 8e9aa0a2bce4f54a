"""Dual-discount GAE: hand-worked numbers, agreement with the loop reference, and the properties callers rely on.

The loop reference (:func:`dual_discount_gae_loop`) is the formulas written out token by token; the vectorised
function must match it on every shape, mask, coefficient and dtype. The hand-worked examples pin both to the
definition itself, so a shared misreading cannot pass.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verlog.ppo.gae import discounted_reverse_cumsum, dual_discount_gae, dual_discount_gae_loop

IMPLEMENTATIONS = [dual_discount_gae, dual_discount_gae_loop]


def _two_turn_example(next_value_1: float, continues_1: float) -> dict[str, torch.Tensor]:
    """T=2, N=1, R=3: turn 0 has 2 tokens (V = 1, 2), turn 1 has 3 tokens (V = 4, 2, 1).

    Turn 0 earns 1, turn 1 earns 2; turn 1 continues turn 0's episode (next_values[0] = V_{1,0} = 4). The
    padding slot of turn 0 holds a junk value 9 that must be ignored.
    """
    return {
        "rewards": torch.tensor([[1.0], [2.0]]),
        "token_values": torch.tensor([[[1.0, 2.0, 9.0]], [[4.0, 2.0, 1.0]]]),
        "response_mask": torch.tensor([[[1, 1, 0]], [[1, 1, 1]]]),
        "next_values": torch.tensor([[4.0], [next_value_1]]),
        "continues": torch.tensor([[1.0], [continues_1]]),
    }


def _random_batch(
    T: int, N: int, R: int, seed: int, *, dtype: torch.dtype = torch.float32, token_rewards: bool = True
) -> dict[str, torch.Tensor]:
    """A batch shaped like real rollouts: random lengths in [1, R], values in [-1, 1], sparse env rewards,
    small per-token (KL-like) rewards, random episode ends and truncations. Padding holds junk on purpose."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, R + 1, (T, N), generator=g)
    lengths.view(-1)[0] = R  # always exercise a full-length response
    mask = (torch.arange(R) < lengths[..., None]).to(dtype)
    junk = 100.0 * torch.randn(T, N, R, generator=g, dtype=dtype)
    values = torch.where(mask.bool(), 2 * torch.rand(T, N, R, generator=g, dtype=dtype) - 1, junk)
    rewards = torch.where(
        torch.rand(T, N, generator=g) < 0.3,
        torch.randn(T, N, generator=g, dtype=dtype),
        torch.zeros((), dtype=dtype),
    )
    continues = (torch.rand(T, N, generator=g) < 0.7).to(dtype)
    truncated = (torch.rand(T, N, generator=g) < 0.5).to(dtype)
    next_start = torch.cat([values[1:, :, 0], torch.rand(1, N, generator=g, dtype=dtype)])
    final_obs_value = torch.rand(T, N, generator=g, dtype=dtype)
    # Continue: V_{t+1,0}; episode over: V(final_obs) if truncated, else 0.
    next_values = torch.where(continues.bool(), next_start, truncated * final_obs_value)
    batch = {
        "rewards": rewards,
        "token_values": values,
        "response_mask": mask,
        "next_values": next_values,
        "continues": continues,
    }
    if token_rewards:
        batch["token_rewards"] = torch.where(
            mask.bool(), 0.01 * torch.randn(T, N, R, generator=g, dtype=dtype), junk
        )
    return batch


COEFS = {"turn_gamma": 0.99, "turn_lam": 0.95, "token_gamma": 1.0, "token_lam": 1.0}


# ---------------------------------------------------------------------------------------------- hand-worked


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_hand_worked_shared_target(gae) -> None:
    """gamma_turn = lam_turn = 0.5, gamma_tok = lam_tok = 1; turn 1 ends the episode for real (next 0).

    Turn 1 (r = 0, 0, 2; V = 4, 2, 1):
      k=2: delta = 2 + 0.5*0 - 1 = 1               A = 1 (continues = 0: nothing carried)
      k=1: delta = 0 + 1*1 - 2 = -1                A = -1 + 1*1 = 0
      k=0: delta = 0 + 1*2 - 4 = -2                A = -2 + 0 = -2
      returns = A + V = 2, 2, 2
    Turn 0 (r = 0, 1; V = 1, 2):
      k=1: delta = 1 + 0.5*4 - 2 = 1               A = 1 + 0.5*0.5*1*A_{1,0} = 1 - 0.5 = 0.5
      k=0: delta = 0 + 1*2 - 1 = 1                 A = 1 + 1*0.5 = 1.5
      returns = 2.5, 2.5  (= 1 + 0.5*(V_{1,0} + 0.5*A_{1,0}) = 1 + 0.5*(4 - 1))
    """
    adv, ret = gae(
        **_two_turn_example(0.0, 0.0), turn_gamma=0.5, turn_lam=0.5, token_gamma=1.0, token_lam=1.0
    )
    torch.testing.assert_close(adv, torch.tensor([[[1.5, 0.5, 0.0]], [[-2.0, 0.0, 1.0]]]))
    torch.testing.assert_close(ret, torch.tensor([[[2.5, 2.5, 0.0]], [[2.0, 2.0, 2.0]]]))


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_hand_worked_token_discount_and_truncation(gae) -> None:
    """gamma_turn = lam_turn = gamma_tok = lam_tok = 0.5; turn 1 is cut by a time limit with V(final_obs) = 2.

    Turn 1 (r = 0, 0, 2; V = 4, 2, 1):
      k=2: delta = 2 + 0.5*2 - 1 = 2               A = 2 (continues = 0: the next turn is a new episode)
      k=1: delta = 0 + 0.5*1 - 2 = -1.5            A = -1.5 + 0.25*2 = -1
      k=0: delta = 0 + 0.5*2 - 4 = -3              A = -3 + 0.25*(-1) = -3.25
    Turn 0 (r = 0, 1; V = 1, 2):
      k=1: delta = 1 + 0.5*4 - 2 = 1               A = 1 + 0.25*1*(-3.25) = 0.1875
      k=0: delta = 0 + 0.5*2 - 1 = 0               A = 0 + 0.25*0.1875 = 0.046875
    """
    adv, ret = gae(
        **_two_turn_example(2.0, 0.0), turn_gamma=0.5, turn_lam=0.5, token_gamma=0.5, token_lam=0.5
    )
    torch.testing.assert_close(adv, torch.tensor([[[0.046875, 0.1875, 0.0]], [[-3.25, -1.0, 2.0]]]))
    torch.testing.assert_close(ret, torch.tensor([[[1.046875, 2.1875, 0.0]], [[0.75, 1.0, 3.0]]]))


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_verlog_blog_example(gae) -> None:
    """The blog's closed form, reward r only at the final turn, gamma_tok = lam_tok = 1:
    A_{-1,k} = r - V_{-1,k} and A_{-2,k} = gamma*(lam*r + (1-lam)*V_{-1,0}) - V_{-2,k}."""
    gamma, lam, r = 0.9, 0.8, 1.0
    values = torch.tensor([[[0.3, 0.5, 0.7, 0.0]], [[0.6, 0.4, 0.2, 0.1]]])
    adv, ret = gae(
        rewards=torch.tensor([[0.0], [r]]),
        token_values=values,
        response_mask=torch.tensor([[[1, 1, 1, 0]], [[1, 1, 1, 1]]]),
        next_values=torch.tensor([[0.6], [0.0]]),
        continues=torch.tensor([[1.0], [0.0]]),
        turn_gamma=gamma,
        turn_lam=lam,
        token_gamma=1.0,
        token_lam=1.0,
    )
    torch.testing.assert_close(adv[1, 0], r - values[1, 0])
    expected = gamma * (lam * r + (1 - lam) * 0.6) - values[0, 0, :3]
    torch.testing.assert_close(adv[0, 0, :3], expected)
    torch.testing.assert_close(ret[0, 0, :3], torch.full((3,), gamma * (lam * r + (1 - lam) * 0.6)))


# ---------------------------------------------------------------------------------- agreement with the loop


@settings(max_examples=60, deadline=None)
@given(
    T=st.integers(1, 5),
    N=st.integers(1, 4),
    R=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
    turn_gamma=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]),
    turn_lam=st.sampled_from([0.0, 0.5, 0.95, 1.0]),
    token_gamma=st.sampled_from([0.0, 0.7, 0.99, 1.0]),
    token_lam=st.sampled_from([0.0, 0.6, 0.95, 1.0]),
    with_token_rewards=st.booleans(),
    mask_dtype=st.sampled_from([torch.float32, torch.bool, torch.int64]),
)
def test_matches_loop(
    T: int,
    N: int,
    R: int,
    seed: int,
    turn_gamma: float,
    turn_lam: float,
    token_gamma: float,
    token_lam: float,
    with_token_rewards: bool,
    mask_dtype: torch.dtype,
) -> None:
    batch = _random_batch(T, N, R, seed, token_rewards=with_token_rewards)
    batch["response_mask"] = batch["response_mask"].to(mask_dtype)
    coefs = {
        "turn_gamma": turn_gamma,
        "turn_lam": turn_lam,
        "token_gamma": token_gamma,
        "token_lam": token_lam,
    }
    adv, ret = dual_discount_gae(**batch, **coefs)
    ref_adv, ref_ret = dual_discount_gae_loop(**batch, **coefs)
    assert adv.dtype == ret.dtype == torch.float32
    torch.testing.assert_close(adv, ref_adv, atol=1e-5, rtol=0)
    torch.testing.assert_close(ret, ref_ret, atol=1e-5, rtol=0)


@pytest.mark.parametrize("R", [16, 17, 100, 256, 300, 700])
@pytest.mark.parametrize(("token_gamma", "token_lam"), [(1.0, 1.0), (1.0, 0.95), (0.99, 0.95), (0.999, 1.0)])
def test_matches_loop_long_responses(R: int, token_gamma: float, token_lam: float) -> None:
    """Long rows go through the blocked scan (several blocks, R a multiple of the block or not)."""
    batch = _random_batch(3, 3, R, seed=R)
    coefs = {"turn_gamma": 0.99, "turn_lam": 0.95, "token_gamma": token_gamma, "token_lam": token_lam}
    adv, ret = dual_discount_gae(**batch, **coefs)
    ref_adv, ref_ret = dual_discount_gae_loop(**batch, **coefs)
    torch.testing.assert_close(adv, ref_adv, atol=1e-5, rtol=0)
    torch.testing.assert_close(ret, ref_ret, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("token_gamma", "token_lam"), [(1.0, 1.0), (0.999, 0.99)])
def test_float64_matches_loop_tightly(token_gamma: float, token_lam: float) -> None:
    """In float64 the two agree to rounding even with large rewards, so no formula difference hides in atol."""
    batch = _random_batch(6, 4, 333, seed=7, dtype=torch.float64)
    batch["token_rewards"] = batch["token_rewards"] * 100.0
    coefs = {"turn_gamma": 0.97, "turn_lam": 0.9, "token_gamma": token_gamma, "token_lam": token_lam}
    adv, ret = dual_discount_gae(**batch, **coefs)
    ref_adv, ref_ret = dual_discount_gae_loop(**batch, **coefs)
    assert adv.dtype == ret.dtype == ref_adv.dtype == torch.float64
    torch.testing.assert_close(adv, ref_adv, atol=1e-10, rtol=0)
    torch.testing.assert_close(ret, ref_ret, atol=1e-10, rtol=0)


@pytest.mark.parametrize("c", [0.0, 0.3, 0.95, 1.0])
@pytest.mark.parametrize("R", [1, 5, 16, 33, 64, 129])
def testdiscounted_reverse_cumsum(R: int, c: float) -> None:
    x = torch.randn(2, 3, R, dtype=torch.float64)
    expected = torch.zeros_like(x)
    running = torch.zeros(2, 3, dtype=torch.float64)
    for k in reversed(range(R)):
        running = x[..., k] + c * running
        expected[..., k] = running
    torch.testing.assert_close(discounted_reverse_cumsum(x, c), expected, atol=1e-12, rtol=0)


# --------------------------------------------------------------------------------------------- properties


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_unit_token_discount_shares_one_target_per_turn(gae) -> None:
    """gamma_tok = lam_tok = 1 and only the env reward: one return target for all tokens of a turn."""
    batch = _random_batch(5, 6, 24, seed=3, token_rewards=False)
    adv, ret = gae(**batch, **COEFS)
    mask = batch["response_mask"].bool()
    first = ret[..., :1].expand_as(ret)
    torch.testing.assert_close(ret[mask], first[mask], atol=1e-5, rtol=0)
    # The baseline is the only per-token difference: A + V is shared, so A_{t,k} - A_{t,0} = V_{t,0} - V_{t,k}.
    values = batch["token_values"]
    torch.testing.assert_close(
        (adv - adv[..., :1])[mask], (values[..., :1] - values)[mask], atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_unit_token_discount_with_token_rewards(gae) -> None:
    """With per-token rewards the target of token k drops the rewards of the tokens before it:
    ret_{t,k} = ret_{t,0} - sum_{j<k} r_{t,j}."""
    batch = _random_batch(5, 6, 24, seed=3)
    _, ret = gae(**batch, **COEFS)
    mask = batch["response_mask"].bool()
    earned_before = torch.cumsum(batch["token_rewards"] * mask, -1) - batch["token_rewards"] * mask
    expected = ret[..., :1] - earned_before
    torch.testing.assert_close(ret[mask], expected[mask], atol=1e-5, rtol=0)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_padding_is_zero_whatever_it_held(gae) -> None:
    batch = _random_batch(4, 5, 20, seed=11)
    for coefs in (COEFS, {**COEFS, "token_gamma": 0.9, "token_lam": 0.8}):
        adv, ret = gae(**batch, **coefs)
        padding = ~batch["response_mask"].bool()
        assert padding.any()
        assert bool((adv[padding] == 0).all()) and bool((ret[padding] == 0).all())
        # And the junk in the padding of values / token rewards changes nothing on real tokens.
        clean = dict(batch)
        clean["token_values"] = batch["token_values"] * batch["response_mask"]
        clean["token_rewards"] = batch["token_rewards"] * batch["response_mask"]
        adv_clean, ret_clean = gae(**clean, **coefs)
        torch.testing.assert_close(adv, adv_clean, atol=1e-6, rtol=0)
        torch.testing.assert_close(ret, ret_clean, atol=1e-6, rtol=0)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
@pytest.mark.parametrize(("token_gamma", "token_lam"), [(1.0, 1.0), (0.9, 0.7)])
def test_token_rewards(gae, token_gamma: float, token_lam: float) -> None:
    """Token rewards enter like the env reward, token by token: with token_gamma = lam = 1 (one turn, no
    bootstrap) A_{k} = sum_{j>=k} r_j - V_k; in general they are linear, so A(with) - A(without) is the
    discounted reverse cumsum of the token rewards alone (values zero)."""
    batch = _random_batch(3, 4, 12, seed=5)
    coefs = {**COEFS, "token_gamma": token_gamma, "token_lam": token_lam}
    adv_with, _ = gae(**batch, **coefs)
    without = {k: v for k, v in batch.items() if k != "token_rewards"}
    adv_without, _ = gae(**without, **coefs)
    zero_env = {
        **batch,
        "rewards": torch.zeros_like(batch["rewards"]),
        "token_values": torch.zeros_like(batch["token_values"]),
        "next_values": torch.zeros_like(batch["next_values"]),
    }
    adv_tokens_only, _ = gae(**zero_env, **coefs)
    torch.testing.assert_close(adv_with - adv_without, adv_tokens_only, atol=1e-6, rtol=0)
    # A zero token-reward tensor is the same as none.
    adv_zero, _ = gae(**{**batch, "token_rewards": torch.zeros_like(batch["token_rewards"])}, **coefs)
    torch.testing.assert_close(adv_zero, adv_without, atol=1e-6, rtol=0)

    # One turn, one env, no bootstrap, gamma = lam = 1: A_k = sum_{j>=k} r_j + R_env - V_k.
    tok = torch.tensor([[[0.1, -0.2, 0.3, 0.0]]])
    adv, ret = gae(
        rewards=torch.tensor([[1.0]]),
        token_values=torch.tensor([[[0.5, 0.25, 0.125, 0.0]]]),
        response_mask=torch.tensor([[[1, 1, 1, 0]]]),
        next_values=torch.zeros(1, 1),
        continues=torch.zeros(1, 1),
        token_rewards=tok,
        **COEFS,
    )
    # sums of r from k on: 0.2+1, 0.1+1, 0.3+1 -> returns 1.2, 1.1, 1.3
    torch.testing.assert_close(ret, torch.tensor([[[1.2, 1.1, 1.3, 0.0]]]))
    torch.testing.assert_close(adv, torch.tensor([[[0.7, 0.85, 1.175, 0.0]]]))


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_terminated_versus_truncated(gae) -> None:
    """An episode ends after turn 1 of env 0. Terminated: next value 0. Truncated: V(final_obs) = v_f. Either
    way continues = 0, so nothing of turn 2 (a new episode) flows back; only the bootstrap differs."""
    batch = _random_batch(3, 2, 6, seed=13, token_rewards=False)
    batch["continues"][1, 0] = 0.0
    coefs = {"turn_gamma": 0.9, "turn_lam": 0.8, "token_gamma": 0.95, "token_lam": 0.9}
    v_f = 0.75
    terminated = {**batch, "next_values": batch["next_values"].clone()}
    terminated["next_values"][1, 0] = 0.0
    truncated = {**batch, "next_values": batch["next_values"].clone()}
    truncated["next_values"][1, 0] = v_f
    adv_term, _ = gae(**terminated, **coefs)
    adv_trunc, _ = gae(**truncated, **coefs)

    L = int(batch["response_mask"][1, 0].sum())
    c = coefs["token_gamma"] * coefs["token_lam"]
    # Turn 1: the bootstrap gamma_turn * v_f enters at token L-1 and reaches token k as c**(L-1-k).
    steps = torch.arange(L - 1, -1, -1, dtype=torch.float32)
    bump = coefs["turn_gamma"] * v_f * c**steps
    torch.testing.assert_close(adv_trunc[1, 0, :L] - adv_term[1, 0, :L], bump, atol=1e-6, rtol=0)
    # Turn 0 sees it through the carry (continues[0, 0] is whatever the batch drew) ...
    link = coefs["turn_gamma"] * coefs["turn_lam"] * float(batch["continues"][0, 0])
    L0 = int(batch["response_mask"][0, 0].sum())
    steps0 = torch.arange(L0 - 1, -1, -1, dtype=torch.float32)
    torch.testing.assert_close(
        adv_trunc[0, 0, :L0] - adv_term[0, 0, :L0], link * float(bump[0]) * c**steps0, atol=1e-6, rtol=0
    )
    # ... while turn 2 (the next episode) and env 1 are untouched.
    torch.testing.assert_close(adv_trunc[2], adv_term[2], atol=0, rtol=0)
    torch.testing.assert_close(adv_trunc[:, 1], adv_term[:, 1], atol=0, rtol=0)

    # continues = 0 cuts the carry: anything in turn 2 of env 0 leaves turns 0-1 unchanged.
    changed = {**terminated, "token_values": terminated["token_values"].clone()}
    changed["token_values"][2, 0] += 5.0
    changed["rewards"] = terminated["rewards"].clone()
    changed["rewards"][2, 0] += 3.0
    adv_changed, _ = gae(**changed, **coefs)
    torch.testing.assert_close(adv_changed[:2], adv_term[:2], atol=0, rtol=0)
    # With continues = 1 the same change does flow back.
    linked = {**changed, "continues": changed["continues"].clone()}
    linked["continues"][1, 0] = 1.0
    linked_base = {**terminated, "continues": linked["continues"]}
    assert not torch.allclose(gae(**linked, **coefs)[0][1, 0], gae(**linked_base, **coefs)[0][1, 0])


def test_dtypes_and_mask_kinds() -> None:
    batch = _random_batch(3, 2, 9, seed=17)
    adv, ret = dual_discount_gae(**batch, **COEFS)
    assert adv.dtype == ret.dtype == torch.float32
    for mask_dtype in (torch.bool, torch.int64, torch.float64):
        other = {**batch, "response_mask": batch["response_mask"].to(mask_dtype)}
        torch.testing.assert_close(dual_discount_gae(**other, **COEFS)[0], adv, atol=0, rtol=0)
    # float64 anywhere in the float inputs -> float64 out; half precision is upcast to float32.
    as64 = {k: (v.double() if k != "response_mask" else v) for k, v in batch.items()}
    adv64, ret64 = dual_discount_gae(**as64, **COEFS)
    assert adv64.dtype == ret64.dtype == torch.float64
    torch.testing.assert_close(adv64.float(), adv, atol=1e-5, rtol=0)
    half = {**batch, "token_values": batch["token_values"].to(torch.bfloat16)}
    assert dual_discount_gae(**half, **COEFS)[0].dtype == torch.float32


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
@pytest.mark.parametrize(("T", "N"), [(0, 3), (3, 0)])
def test_empty_batch(gae, T: int, N: int) -> None:
    for coefs in (COEFS, {**COEFS, "token_gamma": 0.9}):
        adv, ret = gae(
            rewards=torch.zeros(T, N),
            token_values=torch.zeros(T, N, 4),
            response_mask=torch.ones(T, N, 4),
            next_values=torch.zeros(T, N),
            continues=torch.zeros(T, N),
            token_rewards=torch.zeros(T, N, 4),
            **coefs,
        )
        assert adv.shape == ret.shape == (T, N, 4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu() -> None:
    batch = _random_batch(4, 8, 200, seed=19)
    coefs = {**COEFS, "token_gamma": 0.99, "token_lam": 0.95}
    adv, ret = dual_discount_gae(**batch, **coefs)
    adv_cuda, ret_cuda = dual_discount_gae(**{k: v.cuda() for k, v in batch.items()}, **coefs)
    assert adv_cuda.is_cuda
    torch.testing.assert_close(adv_cuda.cpu(), adv, atol=1e-5, rtol=0)
    torch.testing.assert_close(ret_cuda.cpu(), ret, atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
@pytest.mark.parametrize(
    ("name", "bad_shape", "message"),
    [
        ("rewards", (2, 3), r"rewards must have shape \[T, N\] = \[3, 2\]"),  # transposed [N, T]
        ("next_values", (3,), r"next_values must have shape \[T, N\] = \[3, 2\]"),
        ("continues", (3, 2, 1), r"continues must have shape \[T, N\] = \[3, 2\]"),
        ("response_mask", (3, 2, 4), r"response_mask must have shape \[T, N, R\] = \[3, 2, 5\]"),
        ("token_rewards", (3, 2), r"token_rewards must have shape \[T, N, R\] = \[3, 2, 5\]"),
    ],
)
def test_shape_errors_name_the_argument(gae, name: str, bad_shape: tuple[int, ...], message: str) -> None:
    batch = _random_batch(3, 2, 5, seed=0)
    batch[name] = torch.ones(bad_shape)
    with pytest.raises(ValueError, match=message):
        gae(**batch, **COEFS)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_input_errors(gae) -> None:
    batch = _random_batch(3, 2, 5, seed=0)
    with pytest.raises(ValueError, match=r"token_values must have shape \[T, N, R\]"):
        gae(**{**batch, "token_values": torch.zeros(3, 2)}, **COEFS)

    empty = batch["response_mask"].clone()
    empty[2, 1] = 0
    with pytest.raises(ValueError, match=r"no response token \(t=2, n=1\)"):
        gae(**{**batch, "response_mask": empty}, **COEFS)

    holes = torch.ones(3, 2, 5)
    holes[1, 0, 2] = 0
    with pytest.raises(ValueError, match=r"prefix.*t=1, n=0"):
        gae(**{**batch, "response_mask": holes}, **COEFS)

    for bad in (0.5, 2.0, -1.0):
        not_binary = torch.ones(3, 2, 5)
        not_binary[0, 0, 0] = bad
        with pytest.raises(ValueError, match="only 0 and 1"):
            gae(**{**batch, "response_mask": not_binary}, **COEFS)

    with pytest.raises(ValueError, match=r"turn_lam must be in \[0, 1\]"):
        gae(**batch, **{**COEFS, "turn_lam": 1.5})
    with pytest.raises(ValueError, match=r"token_gamma must be in \[0, 1\]"):
        gae(**batch, **{**COEFS, "token_gamma": -0.1})
    with pytest.raises(TypeError, match="rewards must be a torch.Tensor"):
        gae(**{**batch, "rewards": [[0.0, 0.0]] * 3}, **COEFS)
