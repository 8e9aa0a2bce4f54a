"""TurnStorage: insert, after_update, GAE over it (terminated vs truncated), whitening, token-budget minibatches."""

from __future__ import annotations

import pytest
import torch

from verlog.ppo.gae import gae_advantages, whiten
from verlog.ppo.storage import TurnStorage, pack_by_tokens

PAD = 0


def _fill(storage: TurnStorage, prompt_lengths: list[list[int]], response_lengths: list[list[int]]) -> None:
    """Insert every turn with prompts and responses of the given lengths (tokens are row-unique ids)."""
    T, N = storage.num_turns, storage.num_envs
    storage.reset_first([[1] * prompt_lengths[0][n] for n in range(N)])
    for t in range(T):
        responses = [[10 + t] * response_lengths[t][n] for n in range(N)]
        storage.insert(
            next_prompts=[[2 + t] * prompt_lengths[t + 1][n] for n in range(N)],
            responses=responses,
            sampler_logprobs=[[-1.0] * len(r) for r in responses],
            rewards=[0.0] * N,
            terminated=[False] * N,
            truncated=[False] * N,
        )


def test_insert_and_after_update_carry_the_last_slot() -> None:
    storage = TurnStorage(num_turns=2, num_envs=3, max_response_tokens=4, pad_id=PAD)
    storage.reset_first([[1], [1, 1], [1, 1, 1]])
    storage.insert(
        [[5], [6], [7]],
        [[9], [9, 9], [9, 9, 9, 9]],
        [[-1.0], [-1.0] * 2, [-1.0] * 4],
        [1, 0, 0],
        [1, 0, 0],
        [0, 0, 0],
    )
    storage.insert(
        [[8], [8], [8]],
        [[3], [3], [3]],
        [[-2.0]] * 3,
        [0, 0.5, 0],
        [0, 0, 0],
        [0, 1, 0],
        final_prompts={1: [4, 4]},
    )
    assert storage.response_mask[0].tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert storage.responses[0, 0].tolist() == [9, PAD, PAD, PAD]
    assert storage.masks[:, 0].tolist() == [1, 0, 1]  # env 0 ended at turn 0
    assert storage.bad_masks[:, 0].tolist() == [1, 1, 1]  # ...by termination
    assert storage.masks[:, 1].tolist() == [1, 1, 0] and storage.bad_masks[:, 1].tolist() == [1, 1, 0]
    assert storage.final_prompts == {(1, 1): [4, 4]}
    with pytest.raises(IndexError):
        storage.insert([[1]] * 3, [[1]] * 3, [[0.0]] * 3, [0] * 3, [0] * 3, [0] * 3)

    storage.after_update()
    assert storage.step == 0 and storage.prompts[0] == [[8], [8], [8]]
    assert storage.masks[0].tolist() == [1, 0, 1] and storage.bad_masks[0].tolist() == [1, 0, 1]
    assert storage.final_prompts == {}
    # The checkpointed state is slot 0, and loads back into a fresh storage.
    fresh = TurnStorage(2, 3, 4, PAD)
    fresh.load_state_dict(storage.state_dict())
    assert fresh.prompts[0] == storage.prompts[0] and torch.equal(fresh.masks[0], storage.masks[0])


def test_a_response_must_have_one_to_r_tokens() -> None:
    storage = TurnStorage(1, 1, max_response_tokens=2, pad_id=PAD)
    storage.reset_first([[1]])
    for bad in ([], [1, 2, 3]):
        with pytest.raises(ValueError, match="need 1..2"):
            storage.insert([[1]], [bad], [[0.0] * len(bad)], [0], [0], [0])


def test_returns_bootstrap_truncations_and_stop_at_terminations() -> None:
    """One-token responses, gamma_turn = 0.5, lambda = 1: returns are discounted sums with the right bootstrap."""
    storage = TurnStorage(num_turns=2, num_envs=3, max_response_tokens=2, pad_id=PAD)
    storage.reset_first([[1]] * 3)
    # env 0 runs on; env 1 terminates at turn 0; env 2 is truncated at turn 0 (final obs valued 8).
    storage.insert([[1]] * 3, [[5]] * 3, [[0.0]] * 3, [1.0, 1.0, 1.0], [0, 1, 0], [0, 0, 1], {2: [7]})
    storage.insert([[1]] * 3, [[5]] * 3, [[0.0]] * 3, [2.0, 2.0, 2.0], [0, 0, 0], [0, 0, 0])
    storage.token_values[:, :, 0] = torch.tensor([[4.0, 4.0, 4.0], [6.0, 6.0, 6.0]])
    storage.values[:2] = storage.token_values[:, :, 0]
    storage.values[2] = 10.0  # bootstrap state after turn 1
    storage.truncated_values[0, 2] = 8.0
    gae_advantages(storage, turn_gamma=0.5, turn_lam=1.0, token_gamma=1.0, token_lam=1.0)
    ret = storage.returns[:, :, 0]
    assert ret[1].tolist() == [2 + 0.5 * 10] * 3
    assert ret[0, 0].item() == pytest.approx(1 + 0.5 * (2 + 0.5 * 10))  # the episode goes on
    assert ret[0, 1].item() == pytest.approx(1.0)  # terminated: no bootstrap
    assert ret[0, 2].item() == pytest.approx(1 + 0.5 * 8)  # truncated: V(final_obs), not the next episode
    assert storage.returns[:, :, 1].abs().sum() == 0  # padding
    adv = storage.advantages[storage.response_mask.bool()]
    assert adv.mean().item() == pytest.approx(0.0, abs=1e-6) and adv.std().item() == pytest.approx(
        1.0, abs=1e-4
    )


def test_without_window_bootstrap_a_running_episode_is_cut_at_the_batch_end() -> None:
    """The ablation's cut: the value after the last turn counts as 0 for a running episode; earlier turns, a
    termination and a time-limit truncation inside the batch are as with the bootstrap."""
    storage = TurnStorage(num_turns=2, num_envs=2, max_response_tokens=1, pad_id=PAD)
    storage.reset_first([[1]] * 2)
    # env 0 runs on past the batch; env 1 is truncated at turn 1 (final obs valued 8).
    storage.insert([[1]] * 2, [[5]] * 2, [[0.0]] * 2, [1.0, 1.0], [0, 0], [0, 0])
    storage.insert([[1]] * 2, [[5]] * 2, [[0.0]] * 2, [2.0, 2.0], [0, 0], [0, 1], {1: [7]})
    storage.values[2] = 10.0
    storage.truncated_values[1, 1] = 8.0
    gae_advantages(
        storage, turn_gamma=0.5, turn_lam=1.0, token_gamma=1.0, token_lam=1.0, window_bootstrap=False
    )
    ret = storage.returns[:, :, 0]
    assert ret[1].tolist() == pytest.approx([2.0, 2 + 0.5 * 8])  # cut at the edge; truncation still valued
    assert ret[0].tolist() == pytest.approx([1 + 0.5 * 2.0, 1 + 0.5 * (2 + 0.5 * 8)])
    gae_advantages(storage, turn_gamma=0.5, turn_lam=1.0, token_gamma=1.0, token_lam=1.0)
    assert storage.returns[1, 0, 0].item() == pytest.approx(2 + 0.5 * 10)  # the default bootstraps


def test_a_decoupled_critic_lambda_changes_the_targets_and_not_the_advantages() -> None:
    """``ppo.critic_lam = 1``: the critic's targets are the discounted returns that followed (bootstrapped only
    at the batch end), while the policy's advantages keep ``turn_lam``."""
    storage = TurnStorage(num_turns=2, num_envs=1, max_response_tokens=1, pad_id=PAD)
    storage.reset_first([[1]])
    storage.insert([[1]], [[5]], [[0.0]], [1.0], [0], [0])
    storage.insert([[1]], [[5]], [[0.0]], [2.0], [0], [0])
    storage.token_values[:, 0, 0] = torch.tensor([4.0, 6.0])
    storage.values[:2, 0] = torch.tensor([4.0, 6.0])
    storage.values[2] = 10.0
    kwargs = dict(turn_gamma=0.5, turn_lam=0.0, token_gamma=1.0, token_lam=1.0, whiten_advantages=False)
    gae_advantages(storage, **kwargs)
    coupled = storage.advantages.clone()
    assert storage.returns[0, 0, 0].item() == pytest.approx(1 + 0.5 * 6)  # lambda 0: one-step target
    gae_advantages(storage, critic_lam=1.0, **kwargs)
    assert storage.returns[0, 0, 0].item() == pytest.approx(1 + 0.5 * (2 + 0.5 * 10))  # what followed
    assert torch.equal(storage.advantages, coupled)


def test_unwhitened_advantages_keep_the_rewards_scale() -> None:
    """``ppo.whiten_advantages = false``: a batch where little reward came keeps small advantages (the raw GAE,
    here ``returns - values`` with lambda 1) instead of being scaled up to std 1; the std before whitening is
    reported either way."""
    storage = TurnStorage(num_turns=2, num_envs=2, max_response_tokens=2, pad_id=PAD)
    storage.reset_first([[1]] * 2)
    storage.insert([[1]] * 2, [[5]] * 2, [[0.0]] * 2, [0.01, 0.0], [0, 0], [0, 0])
    storage.insert([[1]] * 2, [[5]] * 2, [[0.0]] * 2, [0.0, 0.02], [1, 1], [0, 0])
    kwargs = dict(turn_gamma=1.0, turn_lam=1.0, token_gamma=1.0, token_lam=1.0)
    raw_std = gae_advantages(storage, whiten_advantages=False, **kwargs)
    raw = storage.advantages[:, :, 0].flatten()
    assert raw.tolist() == pytest.approx((storage.returns - storage.token_values)[:, :, 0].flatten().tolist())
    assert raw.tolist() == pytest.approx([0.01, 0.02, 0.0, 0.02])
    assert storage.advantages[:, :, 1].abs().sum() == 0  # padding stays 0
    assert raw_std == pytest.approx(torch.tensor([0.01, 0.02, 0.0, 0.02]).std().item(), rel=1e-5)
    assert gae_advantages(storage, **kwargs) == pytest.approx(raw_std)
    assert storage.advantages[storage.response_mask.bool()].std().item() == pytest.approx(1.0, abs=1e-4)


def test_kl_penalty_enters_the_returns() -> None:
    storage = TurnStorage(1, 1, max_response_tokens=3, pad_id=PAD)
    storage.reset_first([[1]])
    storage.insert([[1]], [[5, 6]], [[0.0, 0.0]], [1.0], [1], [0])
    storage.old_logprobs[0, 0, :2] = torch.tensor([-1.0, -1.0])
    storage.ref_logprobs[0, 0, :2] = torch.tensor([-2.0, -3.0])  # KL per token 1 and 2
    gae_advantages(storage, turn_gamma=1.0, turn_lam=1.0, token_gamma=1.0, token_lam=1.0, kl_coef=0.1)
    assert storage.returns[0, 0].tolist() == pytest.approx([1 - 0.1 * 3, 1 - 0.1 * 2, 0.0])


def test_whiten_uses_masked_entries_only() -> None:
    x = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = whiten(x, mask)
    assert out[0, 2] == 0 and out[0, 0].item() == pytest.approx(-(2**-0.5), rel=1e-5)


def test_pack_by_tokens_respects_the_budget() -> None:
    sizes = [(30, 5), (10, 2), (12, 8), (50, 50), (3, 1), (20, 20)]
    groups = pack_by_tokens(sizes, max_tokens=64)
    assert sorted(i for g in groups for i in g) == list(range(len(sizes)))
    for group in groups:
        padded = len(group) * (max(sizes[i][0] for i in group) + max(sizes[i][1] for i in group))
        assert padded <= 64 or len(group) == 1


def test_minibatches_cover_every_turn_once_within_the_budget() -> None:
    T, N = 4, 3
    storage = TurnStorage(T, N, max_response_tokens=6, pad_id=PAD)
    gen = torch.Generator().manual_seed(0)
    plen = torch.randint(2, 20, (T + 1, N), generator=gen).tolist()
    rlen = torch.randint(1, 7, (T, N), generator=gen).tolist()
    _fill(storage, plen, rlen)
    seen = []
    for minibatch in storage.minibatches(num_minibatches=3, max_tokens=40, generator=gen):
        assert sum(len(mb.rows) for mb in minibatch) == 4
        for mb in minibatch:
            batch = mb.batch
            assert batch.input_ids.numel() <= 40 or len(mb.rows) == 1
            for i, (t, n) in enumerate(mb.rows):
                # prompt right-aligned at column P-1, response from column P, position ids contiguous
                assert (
                    batch.input_ids[i, batch.prompt_len - plen[t][n] : batch.prompt_len].tolist()
                    == storage.prompts[t][n]
                )
                assert batch.response_ids[i, : rlen[t][n]].tolist() == [10 + t] * rlen[t][n]
                real = batch.attention_mask[i].bool()
                assert batch.position_ids[i][real].tolist() == list(range(plen[t][n] + rlen[t][n]))
            seen += mb.rows
    assert sorted(seen) == storage.rows()
    subset = [mb.rows for m in storage.minibatches(2, 1000, limit=8) for mb in m]
    assert sum(len(r) for r in subset) == 8
    with pytest.raises(ValueError, match="do not divide"):
        next(storage.minibatches(13, 100))
