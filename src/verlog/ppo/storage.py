"""TurnStorage: T turns from N envs, in the pytorch-a2c-ppo-acktr-gail layout, one turn per sample.

Shapes (T turns per update, N envs, R = max response tokens)::

    [T+1, N]     prompts (ragged token-id lists), the valid actions a constrained answer chooses from, values,
                 masks, bad_masks
    [T, N]       rewards, truncated_values, response lengths
    [T, N, R]    responses, response_mask, sampler/old/ref log-probs, token_values, advantages, returns

Slot ``t`` of the ``[T+1, N]`` arrays is the state *before* turn ``t``; slot ``T`` is the bootstrap state,
which :meth:`TurnStorage.after_update` moves to slot 0, so episodes run on across updates.
``masks[t+1] = 0`` iff the episode ended at turn ``t``; ``bad_masks[t+1] = 0`` iff it ended by a time
limit (truncated, not terminated), in which case ``truncated_values[t] = V(final_obs)`` bootstraps it.

:class:`GroupStorage` (the critic-free estimators' whole episodes) is a :class:`TurnStorage` with the turn cap as
T and a mask of the turns that happened: scoring and the PPO update see only those. It also keeps what the group
estimators read: each played episode's rewards, anchor states and actions (:class:`Episode`), and the rewards
of the one-step branches tried from each played state.

A storage stores; :func:`verlog.ppo.advantages.compute_advantages` writes its ``advantages`` and ``returns``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from verlog.ppo.forward import Batch, SharedBatch, collate, collate_shared
from verlog.sampling.constrain import ActionConstraint

__all__ = ["Episode", "GroupStorage", "MicroBatch", "SharedMicroBatch", "TurnStorage", "pack_by_tokens"]


@dataclass
class MicroBatch:
    """Rows ``(t, n)`` packed for one forward pass, with their stored per-token tensors cut to ``[B, R']``."""

    rows: list[tuple[int, int]]
    batch: Batch | SharedBatch  # shared: ppo.share_branch_prompts's update
    old_logprobs: Tensor
    advantages: Tensor
    returns: Tensor
    old_values: Tensor

    def to(self, device: torch.device | str) -> MicroBatch:
        return MicroBatch(
            self.rows,
            self.batch.to(device),
            self.old_logprobs.to(device),
            self.advantages.to(device),
            self.returns.to(device),
            self.old_values.to(device),
        )


@dataclass
class SharedMicroBatch:
    """Rows ``(t, n)`` whose prompts repeat, packed so each distinct prompt runs once (``batch.owner``)."""

    rows: list[tuple[int, int]]
    batch: SharedBatch


def pack_by_tokens(sizes: Sequence[tuple[int, int]], max_tokens: int) -> list[list[int]]:
    """Group row indices so each group's padded size, rows x (longest prompt + longest response), stays within
    ``max_tokens``. Rows are sorted by length first so a group pads little; a row over the budget goes alone."""
    order = sorted(range(len(sizes)), key=lambda i: sum(sizes[i]), reverse=True)
    groups: list[list[int]] = []
    longest = (0, 0)
    for i in order:
        p, r = sizes[i]
        if groups:
            wider = (max(longest[0], p), max(longest[1], r))
            if (len(groups[-1]) + 1) * sum(wider) <= max_tokens:
                groups[-1].append(i)
                longest = wider
                continue
        groups.append([i])
        longest = (p, r)
    return groups


class TurnStorage:
    """Rollout storage of fixed length: ``insert`` T times, score, advantages, update, ``after_update``."""

    def __init__(self, num_turns: int, num_envs: int, max_response_tokens: int, pad_id: int) -> None:
        T, N, R = num_turns, num_envs, max_response_tokens
        self.num_turns, self.num_envs, self.max_response_tokens, self.pad_id = T, N, R, pad_id
        #: Micro-batches run the prompt prefix all their rows share once (``ppo.share_prompt_prefix``).
        self.share_prefix = False
        #: The update moves the turns that repeat a prompt (a played turn and its one-step branches) together
        #: and runs each prompt once for them (``ppo.share_branch_prompts``).
        self.share_branch_prompts = False
        #: Prompts of a micro-batch are padded to a multiple of this (``ppo.pad_to_multiple``): fewer shapes.
        self.pad_multiple = 1
        #: The columns whose answers the sampler gave (the rest, if any, are one-step branches it never sampled).
        self.sampled_columns = N
        self.prompts: list[list[list[int]]] = [[[] for _ in range(N)] for _ in range(T + 1)]
        #: Under ``sampling.constrain = "actions"``: each state's valid actions (the answer's choices), and the
        #: constraint that turns them into token masks for scoring and the update. None: free answers.
        self.actions: list[list[tuple[str, ...] | None]] = [[None] * N for _ in range(T + 1)]
        self.constraint: ActionConstraint | None = None
        #: ``ppo.trunk_cache``: each scored row's frozen-trunk states ``[prompt + response tokens, H]``, kept for
        #: the update within ``trunk_budget`` bytes (rows past it are recomputed there).
        self.trunk_states: dict[tuple[int, int], Tensor] = {}
        self.trunk_budget = 0
        # Prompts of the final observations of episodes cut by a time limit, keyed by (turn, env).
        self.final_prompts: dict[tuple[int, int], list[int]] = {}
        self.values = torch.zeros(T + 1, N)
        self.masks = torch.ones(T + 1, N)
        self.bad_masks = torch.ones(T + 1, N)
        self.rewards = torch.zeros(T, N)
        self.truncated_values = torch.zeros(T, N)
        self.response_lens = torch.zeros(T, N, dtype=torch.long)
        self.responses = torch.full((T, N, R), pad_id, dtype=torch.long)
        self.response_mask = torch.zeros(T, N, R)
        self.sampler_logprobs = torch.zeros(T, N, R)
        self.old_logprobs = torch.zeros(T, N, R)
        self.ref_logprobs = torch.zeros(T, N, R)
        self.token_values = torch.zeros(T, N, R)
        self.advantages = torch.zeros(T, N, R)
        self.returns = torch.zeros(T, N, R)
        self.step = 0

    # ------------------------------------------------------------------ filling
    def reset_first(
        self, prompts: Sequence[list[int]], actions: Sequence[tuple[str, ...] | None] | None = None
    ) -> None:
        """Slot 0 at the very start: the envs' first prompts (and their valid actions, when constrained)."""
        self.trunk_states.clear()
        self.prompts[0] = [list(p) for p in prompts]
        self.actions[0] = list(actions) if actions is not None else [None] * self.num_envs

    def insert(
        self,
        next_prompts: Sequence[list[int]],
        responses: Sequence[Sequence[int]],
        sampler_logprobs: Sequence[Sequence[float]],
        rewards: Sequence[float],
        terminated: Sequence[bool],
        truncated: Sequence[bool],
        final_prompts: dict[int, list[int]] | None = None,
        next_actions: Sequence[tuple[str, ...] | None] | None = None,
    ) -> None:
        """Store turn ``self.step``: its responses and rewards, and the state after it (slot ``step + 1``).

        ``final_prompts[n]`` is the prompt of env n's final observation, needed when it was truncated;
        ``next_actions`` the next states' valid actions (constrained answers).
        """
        t = self.step
        if t >= self.num_turns:
            raise IndexError(
                f"the storage holds {self.num_turns} turns; call after_update() before inserting more"
            )
        for n, (ids, lps) in enumerate(zip(responses, sampler_logprobs, strict=True)):
            self.put_response(t, n, ids, lps)
        self.prompts[t + 1] = [list(p) for p in next_prompts]
        self.actions[t + 1] = list(next_actions) if next_actions is not None else [None] * self.num_envs
        self.rewards[t] = torch.as_tensor(rewards, dtype=torch.float32)
        term = torch.as_tensor(terminated, dtype=torch.bool)
        trunc = torch.as_tensor(truncated, dtype=torch.bool)
        self.masks[t + 1] = (~(term | trunc)).float()
        self.bad_masks[t + 1] = (~(trunc & ~term)).float()
        for key in [k for k in self.final_prompts if k[0] == t]:
            del self.final_prompts[key]
        for n, ids in (final_prompts or {}).items():
            if trunc[n] and not term[n]:
                self.final_prompts[(t, n)] = list(ids)
        self.step = t + 1

    def put_response(self, t: int, n: int, ids: Sequence[int], logprobs: Sequence[float]) -> None:
        """Write env n's response of turn t: its tokens (padded), mask, sampler log-probs and length."""
        self.trunk_states.pop((t, n), None)  # kept for the turn's previous answer
        length = len(ids)
        if not 1 <= length <= self.max_response_tokens:
            raise ValueError(f"env {n}: a response has {length} tokens, need 1..{self.max_response_tokens}")
        self.responses[t, n] = self.pad_id
        self.responses[t, n, :length] = torch.as_tensor(ids, dtype=torch.long)
        self.response_mask[t, n] = 0.0
        self.response_mask[t, n, :length] = 1.0
        self.sampler_logprobs[t, n] = 0.0
        self.sampler_logprobs[t, n, :length] = torch.as_tensor(logprobs, dtype=torch.float32)
        self.response_lens[t, n] = length

    def after_update(self) -> None:
        """Slot T becomes slot 0: the next update starts where this one stopped."""
        self.prompts[0] = self.prompts[-1]
        self.actions[0] = self.actions[-1]
        self.values[0] = self.values[-1]
        self.masks[0] = self.masks[-1]
        self.bad_masks[0] = self.bad_masks[-1]
        self.final_prompts.clear()
        self.trunk_states.clear()
        self.step = 0

    def keep_sampled_states(self, t: int, states: Sequence[Tensor]) -> None:
        """Keep turn ``t``'s trunk states as the sampler ran them (``[prompt + answer tokens, H]`` per env), while
        they fit: scoring then does not run the trunk over those turns again."""
        used = self.trunk_bytes
        for n, row in enumerate(states):
            used += row.numel() * row.element_size()
            if used > self.trunk_budget:
                return
            self.trunk_states[(t, n)] = row

    def keep_trunk_states(self, rows: Sequence[tuple[int, int]], batch: Batch) -> None:
        """Keep each row's trunk states from a scored ``batch`` (its real columns only), while they fit."""
        assert batch.hidden is not None
        prefix, used = batch.prefix_hidden, self.trunk_bytes
        for i, row in enumerate(rows):
            if row in self.trunk_states:  # kept already (by the sampler, or by an earlier scoring)
                continue
            states = batch.hidden[i][batch.attention_mask[i].bool()]
            states = states if prefix is None else torch.cat([prefix, states])
            used += states.numel() * states.element_size()
            if used > self.trunk_budget:
                return
            self.trunk_states[row] = states

    @property
    def trunk_bytes(self) -> int:
        """Memory the kept trunk states take."""
        return sum(s.numel() * s.element_size() for s in self.trunk_states.values())

    # ------------------------------------------------------------------ batching
    def like(self, num_turns: int) -> TurnStorage:
        """An empty storage of ``num_turns`` turns for the same envs and settings (critic pre-training's)."""
        storage = TurnStorage(num_turns, self.num_envs, self.max_response_tokens, self.pad_id)
        storage.share_prefix = self.share_prefix
        storage.pad_multiple = self.pad_multiple
        storage.constraint = self.constraint
        return storage

    def rows(self) -> list[tuple[int, int]]:
        return [(t, n) for t in range(self.num_turns) for n in range(self.num_envs)]

    def micro_batches(self, rows: Sequence[tuple[int, int]], max_tokens: int) -> Iterator[MicroBatch]:
        """Pack ``rows`` by the token budget (for scoring and for one minibatch of the update)."""
        sizes = [(len(self.prompts[t][n]), int(self.response_lens[t, n])) for t, n in rows]
        for group in pack_by_tokens(sizes, max_tokens):
            yield self._micro_batch([rows[i] for i in group])

    def shared_prompt_batches(
        self, rows: Sequence[tuple[int, int]], max_tokens: int
    ) -> list[SharedMicroBatch]:
        """The ``rows`` whose prompt another row repeats (a played turn and its one-step branches), grouped by
        prompt and packed by the token budget, each prompt counted once; rows with a prompt of their own are
        left out (:meth:`micro_batches` packs those)."""
        repeated = [members for members in self.prompt_groups(rows) if len(members) > 1]
        packed = self._pack_groups(repeated, max_tokens)
        return [SharedMicroBatch(members, self._shared_batch(members, owner)) for members, owner in packed]

    def prompt_groups(self, rows: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
        """``rows`` grouped by identical prompt, in order of first appearance."""
        groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for t, n in rows:
            groups.setdefault(tuple(self.prompts[t][n]), []).append((t, n))
        return list(groups.values())

    def _pack_groups(
        self, groups: Sequence[list[tuple[int, int]]], max_tokens: int
    ) -> Iterator[tuple[list[tuple[int, int]], list[int]]]:
        """Prompt groups packed by the token budget, each prompt counted once: (rows, each row's prompt index)."""
        sizes = [
            (len(self.prompts[g[0][0]][g[0][1]]), sum(int(self.response_lens[t, n]) for t, n in g))
            for g in groups
        ]
        for pack in pack_by_tokens(sizes, max_tokens):
            yield [row for i in pack for row in groups[i]], [j for j, i in enumerate(pack) for _ in groups[i]]

    def _shared_batch(self, members: list[tuple[int, int]], owner: list[int]) -> SharedBatch:
        """``members`` packed with each distinct prompt once: row k continues prompt ``owner[k]``."""
        prompts: dict[int, list[int]] = {}
        for o, (t, n) in zip(owner, members, strict=True):
            prompts.setdefault(o, self.prompts[t][n])
        answers = [self.responses[t, n, : int(self.response_lens[t, n])].tolist() for t, n in members]
        shared = collate_shared([prompts[o] for o in range(len(prompts))], answers, owner, self.pad_id)
        shared.allowed = self.allowed_tokens(members, answers, shared.response_ids.shape[1])
        return shared

    def minibatches(
        self,
        num_minibatches: int,
        max_tokens: int,
        generator: torch.Generator | None = None,
        limit: int | None = None,
    ) -> Iterator[list[MicroBatch]]:
        """Shuffle the stored turns (keep the first ``limit``), cut them into ``num_minibatches`` near-equal
        minibatches (equal when they divide: a turn batch's always do), pack each by tokens. With
        ``share_branch_prompts`` the distinct prompts are shuffled and cut instead, each with all its turns.

        Shuffling draws from ``generator`` (torch's global RNG by default, which checkpoints save).
        """
        rows = self.rows()
        count = len(rows) if limit is None else min(limit, len(rows))
        if not 0 < num_minibatches <= count:
            raise ValueError(f"{count} turns do not divide into {num_minibatches} minibatches")
        if self.share_branch_prompts and limit is None:
            # A played turn and its branches move as one, and each micro-batch runs each of its prompts once.
            groups = self.prompt_groups(rows)
            if num_minibatches > len(groups):
                raise ValueError(f"{len(groups)} prompts do not divide into {num_minibatches} minibatches")
            order = torch.randperm(len(groups), generator=generator).tolist()
            for part in np.array_split(np.asarray(order, dtype=np.int64), num_minibatches):
                packed = self._pack_groups([groups[i] for i in part.tolist()], max_tokens)
                yield [self._shared_micro_batch(members, owner) for members, owner in packed]
            return
        order = torch.randperm(len(rows), generator=generator)[:count].tolist()
        for part in np.array_split(np.asarray(order, dtype=np.int64), num_minibatches):
            yield list(self.micro_batches([rows[i] for i in part.tolist()], max_tokens))

    def _shared_micro_batch(self, rows: list[tuple[int, int]], owner: list[int]) -> MicroBatch:
        """``rows`` as one forward pass that runs each distinct prompt once (row k continues ``owner[k]``)."""
        shared = self._shared_batch(rows, owner)
        return self._with_stored(rows, shared, shared.response_ids.shape[1])

    def _micro_batch(self, rows: list[tuple[int, int]]) -> MicroBatch:
        """``rows`` as one forward pass, each row's prompt whole (the kept trunk states filled in)."""
        r_len = max(int(self.response_lens[t, n]) for t, n in rows)
        responses = [self.responses[t, n, : int(self.response_lens[t, n])].tolist() for t, n in rows]
        kept = all(row in self.trunk_states for row in rows)
        prompts = [self.prompts[t][n] for t, n in rows]
        batch = collate(prompts, responses, self.pad_id, self.share_prefix, self.pad_multiple)
        if kept:  # the kept states fill the batch's real columns, in its layout (its prefix apart)
            shared = 0 if batch.prefix_ids is None else len(batch.prefix_ids)
            first = self.trunk_states[rows[0]]
            batch.prefix_hidden = first[:shared] if shared else None
            batch.hidden = first.new_zeros(len(rows), batch.input_ids.shape[1], first.shape[-1])
            for i, row in enumerate(rows):
                start = batch.prompt_len - (len(prompts[i]) - shared)
                batch.hidden[i, start : start + len(self.trunk_states[row]) - shared] = self.trunk_states[
                    row
                ][shared:]
        batch.allowed = self.allowed_tokens(rows, responses, r_len)
        return self._with_stored(rows, batch, r_len)

    def _with_stored(self, rows: list[tuple[int, int]], batch: Batch | SharedBatch, r_len: int) -> MicroBatch:
        """``batch`` with the rows' stored per-token tensors, cut to ``r_len`` answer tokens."""
        ts = torch.tensor([t for t, _ in rows])
        ns = torch.tensor([n for _, n in rows])
        stored = (self.old_logprobs, self.advantages, self.returns, self.token_values)
        return MicroBatch(rows, batch, *(x[ts, ns, :r_len] for x in stored))

    def allowed_tokens(
        self, rows: Sequence[tuple[int, int]], responses: Sequence[Sequence[int]], length: int
    ) -> Tensor | None:
        """``[B, length, V]``: what the constraint allowed before each token of these rows' answers (None when
        answers are free), replayed from the stored actions, so scoring and every epoch see what sampling saw."""
        if self.constraint is None:
            return None
        return self.constraint.token_masks(responses, [self.actions[t][n] for t, n in rows], length)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, object]:
        """Slot 0 only: what the next update needs (taken after :meth:`after_update`)."""
        return {
            "prompt": self.prompts[0],
            "actions": [list(a) if a is not None else None for a in self.actions[0]],
            "values": self.values[0].clone(),
            "masks": self.masks[0].clone(),
            "bad_masks": self.bad_masks[0].clone(),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.prompts[0] = [list(p) for p in state["prompt"]]  # type: ignore[attr-defined]
        saved = (
            state.get("actions") or [None] * self.num_envs
        )  # a checkpoint from before constraints has none
        self.actions[0] = [tuple(a) if a is not None else None for a in saved]  # type: ignore[union-attr]
        self.values[0] = state["values"]  # type: ignore[assignment]
        self.masks[0] = state["masks"]  # type: ignore[assignment]
        self.bad_masks[0] = state["bad_masks"]  # type: ignore[assignment]
        self.step = 0


@dataclass
class Episode:
    """One played episode of a :class:`GroupStorage` column: what the group estimators read."""

    rewards: list[float] = field(default_factory=list)
    """The stored reward of each turn (after ``env.binary_reward``)."""
    anchors: list[str] = field(default_factory=list)
    """The state before each turn (GiGPO's anchor; "" when the estimator does not use it)."""
    actions: list[str | None] = field(default_factory=list)
    """The action each turn chose, None for an invalid answer (recorded for ``algo.center_actions``)."""


class GroupStorage(TurnStorage):
    """T = the turn cap; columns: the N envs' episodes, then ``branch_width`` branch columns per env (env n's
    branch b in column ``N + n * B + b``); ``active[t, n]`` marks the turns that were played."""

    def __init__(
        self, max_turns: int, num_envs: int, max_response_tokens: int, pad_id: int, branch_width: int = 0
    ) -> None:
        super().__init__(max_turns, num_envs * (1 + branch_width), max_response_tokens, pad_id)
        self.sampled_columns = num_envs
        self.branch_width = branch_width
        self.active = torch.zeros(max_turns, self.num_envs, dtype=torch.bool)
        self.turn_advantages = torch.zeros(max_turns, self.num_envs)
        self.episodes = [Episode() for _ in range(num_envs)]
        #: (turn, env) of each played turn with branches -> the one-step reward of each, in action order.
        self.branch_rewards: dict[tuple[int, int], list[float]] = {}
        #: (turn, env) of each played turn with branches -> whether its answer named an offered action.
        self.branch_valid: dict[tuple[int, int], bool] = {}
        #: (turn, env) of each played turn with branches -> the actions its branches tried, in column order.
        self.branch_names: dict[tuple[int, int], tuple[str, ...]] = {}

    def branch_column(self, n: int, b: int) -> int:
        """The column of env n's branch b."""
        return self.sampled_columns + n * self.branch_width + b

    def branch_columns(self, envs: Iterable[int]) -> list[int]:
        """The branch columns of ``envs``."""
        return [self.branch_column(n, b) for n in envs for b in range(self.branch_width)]

    def clear(self) -> None:
        self.active.zero_()
        self.turn_advantages.zero_()
        self.response_mask.zero_()
        self.rewards.zero_()
        self.response_lens.zero_()
        self.final_prompts.clear()
        self.trunk_states.clear()
        self.episodes = [Episode() for _ in range(self.sampled_columns)]
        self.branch_rewards.clear()
        self.branch_valid.clear()
        self.branch_names.clear()

    def reset_first(
        self, prompts: Sequence[list[int]], actions: Sequence[tuple[str, ...] | None] | None = None
    ) -> None:
        """The envs' first prompts (and valid actions) in their columns; any branch columns after them keep
        their place. The trainer calls it as it calls a :class:`TurnStorage`'s."""
        self.prompts[0][: len(prompts)] = [list(p) for p in prompts]
        if actions is not None:
            self.actions[0][: len(actions)] = list(actions)

    def forget(self, n: int, anchor: str = "") -> None:
        """Drop env n's turns and branches (its group is played again); its next episode starts at ``anchor``."""
        for column in [n, *self.branch_columns([n])]:
            self.active[:, column] = False
            self.turn_advantages[:, column] = 0.0
            self.response_mask[:, column] = 0.0
            self.rewards[:, column] = 0.0
            self.response_lens[:, column] = 0
        self.episodes[n] = Episode(anchors=[anchor])
        self.branch_rewards = {key: value for key, value in self.branch_rewards.items() if key[1] != n}
        self.branch_valid = {key: value for key, value in self.branch_valid.items() if key[1] != n}
        self.branch_names = {key: value for key, value in self.branch_names.items() if key[1] != n}

    def put(self, t: int, n: int, ids: Sequence[int], logprobs: Sequence[float], reward: float) -> None:
        """Store env n's response of turn t (its prompt is already in ``prompts[t][n]``)."""
        self.put_response(t, n, ids, logprobs)
        self.rewards[t, n] = reward
        self.active[t, n] = True

    @property
    def num_played(self) -> int:
        """Turns played in this batch."""
        return int(self.active.sum())

    def rows(self) -> list[tuple[int, int]]:
        return [(int(t), int(n)) for t, n in self.active.nonzero().tolist()]

    def state_dict(self) -> dict[str, object]:
        return {}  # every batch starts from fresh resets

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.step = 0
