r"""How an advantage is computed: every ``algo.advantage`` estimator registered by name (:data:`ESTIMATORS`),
behind the one function the trainer calls once a batch is collected and scored, :func:`compute_advantages`.

The rollouts collect and the storages store; neither computes an advantage. A
:class:`~verlog.ppo.storage.TurnStorage` holds what GAE reads (rewards, values, the masks of ended and cut
episodes); a :class:`~verlog.ppo.storage.GroupStorage` holds each played episode's turn rewards, GiGPO's anchor
states, the chosen actions and the one-step branches' rewards. After scoring, the estimator named by
``algo.advantage`` writes ``storage.advantages`` (and, with a critic, ``storage.returns``, the value targets)
from them. The PPO loss that reads them is :mod:`verlog.ppo.update`'s.

**Dual-discount GAE** (``"gae"``), with the critic: the formulas and the vectorised scan are
:mod:`verlog.ppo.gae`'s; the advantages are whitened over the batch (over every process's batch when several
train together) unless ``ppo.whiten_advantages = false``. The value after the batch's last turn bootstraps an
episode still running there, unless ``ppo.window_bootstrap = false`` (the ablations' cut).

**Group baselines** (``"grpo"``, ``"rloo"``, ``"gigpo"``), no critic. A batch is ``groups x G`` whole episodes; episodes ``[k G, (k+1) G)`` form group ``k`` and started from the
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

A critic-free estimator puts a turn's advantage on every token of its response, plus the return of the
per-token KL penalty to the response's end (discounted by ``ppo.token_gamma``) when ``ppo.kl_coef > 0``; with
no critic there are no returns to fit (left at 0).

**Branch term** (an addition to a group estimator, ``algo.branch_actions``; the branches themselves are played
by :class:`verlog.ppo.group_rollout.Brancher`): each offered action's one-step branch from a played state gets
``w * (r - mean)``, r its one-step reward, the mean over the state's branches and over the played answer too
when that was invalid (its penalty, through the mean, lifts every offered move of the state together). The
played turn keeps its group advantage alone. ``algo.branch_weight`` chooses other weights: "policy" scales each
by the actor's probability of the move, around the policy's mean (the gradient of the expected one-step reward);
"best" puts ``w / k`` on each of the state's k best moves and 0 on the rest (the cross-entropy toward them);
``algo.branch_balance`` then weighs a move that is best in few of the batch's states up (:func:`best_move_balance`).

**Dynamic sampling**: a group whose turns all have a zero advantage carries no gradient. :func:`group_signal`
says which groups do, so the rollout can play the others again: the estimator's judgement, asked before
scoring; :func:`compute_advantages` computes the same advantages later from the same stored episodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from verlog.config import AlgoConfig, Config
from verlog.ppo.gae import AllReduce, discounted_reverse_cumsum, gae_advantages
from verlog.ppo.storage import GroupStorage, TurnStorage

__all__ = [
    "EPS",
    "ESTIMATORS",
    "Estimator",
    "GroupAdvantages",
    "branch_advantages",
    "best_move_balance",
    "best_move_mass",
    "branch_term",
    "center_by_action",
    "compute_advantages",
    "discounted_returns",
    "episode_advantages",
    "group_advantages",
    "group_signal",
    "token_advantages",
]


# ------------------------------------------------------------------ the one entry point
@dataclass(frozen=True)
class Estimator:
    """One ``algo.advantage`` estimator: how it fills a scored storage, and what it needs from collection."""

    name: str
    compute: Callable[..., dict[str, float]]
    """``compute(storage, config, *, all_reduce, kl_coef)``: write the storage's advantages; return metrics."""
    baseline: str = "mean"
    """A group estimator's baseline: the group's mean ("mean") or the other episodes' mean ("loo", RLOO)."""
    anchors: bool = False
    """Whether the rollout records each turn's anchor state (GiGPO's step groups)."""


def compute_advantages(
    storage: TurnStorage,
    config: Config,
    *,
    all_reduce: AllReduce | None = None,
    kl_coef: float | None = None,
) -> dict[str, float]:
    """Write ``storage.advantages`` (and the critic's targets, ``storage.returns``) with the estimator named by
    ``config.algo.advantage``; return its metrics. ``kl_coef`` overrides ``config.ppo.kl_coef`` (0 in critic
    pre-training, whose log-probs are not scored); ``all_reduce`` sums over processes (GAE's whitening)."""
    estimator = ESTIMATORS[config.algo.advantage]
    kl = config.ppo.kl_coef if kl_coef is None else kl_coef
    return estimator.compute(storage, config, all_reduce=all_reduce, kl_coef=kl)


# ------------------------------------------------------------------ "gae": dual-discount GAE with the critic
def _gae(
    storage: TurnStorage, config: Config, *, all_reduce: AllReduce | None, kl_coef: float
) -> dict[str, float]:
    ppo = config.ppo
    std = gae_advantages(
        storage,
        turn_gamma=ppo.turn_gamma,
        turn_lam=ppo.turn_lam,
        token_gamma=ppo.token_gamma,
        token_lam=ppo.token_lam,
        kl_coef=kl_coef,
        all_reduce=all_reduce,
        window_bootstrap=ppo.window_bootstrap,
        whiten_advantages=ppo.whiten_advantages,
        critic_lam=ppo.critic_lam if ppo.critic_lam >= 0 else None,
    )
    return {"losses/advantage_std": std}  # before whitening: how much signal the batch's rewards carried


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


def branch_advantages(
    tried: Sequence[float],
    weight: float,
    invalid: float | None = None,
    *,
    mode: str = "uniform",
    probabilities: Sequence[float] = (),
    invalid_probability: float = 0.0,
) -> list[float]:
    """Each branch's advantage, as ``algo.branch_weight`` (``mode``) weighs it. "uniform": ``weight * (r -
    mean)``, the mean over the branches' rewards and, when the played answer was invalid, its reward ``invalid``
    too (its penalty lowers the mean: every offered move gains). "policy": ``weight * p * (r - mean)``, with
    ``probabilities`` p the actor's for the branches (``invalid_probability`` the invalid answer's) and the mean
    the policy's: summed, the gradient of the expected one-step reward. "best": ``weight / k`` on each of the k
    best moves, 0 on the others: the cross-entropy toward the best moves."""
    if mode == "best":
        best = _best_moves(tried)
        return [weight * b / sum(best) for b in best]
    rewards = [*tried] if invalid is None else [*tried, invalid]
    if mode == "uniform":
        return [weight * (r - sum(rewards) / len(rewards)) for r in tried]
    weights = [*probabilities] if invalid is None else [*probabilities, invalid_probability]
    total = sum(weights)
    mean = sum(w * r for w, r in zip(weights, rewards, strict=True)) / total if total > 0 else 0.0
    return [weight * p * (r - mean) for p, r in zip(probabilities, tried, strict=True)]


def _answer_probability(storage: GroupStorage, t: int, column: int) -> float:
    """The probability the actor gave turn ``t``'s answer in ``column`` before the update (its scored tokens)."""
    return float(torch.exp((storage.old_logprobs[t, column] * storage.response_mask[t, column]).sum()))


def best_move_balance(best: Sequence[Sequence[str]], power: float) -> dict[str, float]:
    """Per action, the factor ``algo.branch_balance`` (``power``) puts on it where it is one of a state's best
    moves: ``(mean / M_a) ** power``, M_a the batch's weight on the action as a best move (``1 / k`` from each
    state with k best moves), the mean over the actions that are ever best; scaled so the batch's total weight is
    unchanged. An interaction that is best in few states (BabyAI's toggle and drop) gets as much of the update as
    a move that is best in many when ``power`` is 1, and none more than today's when it is 0."""
    mass = best_move_mass(best)
    if not mass:
        return {}
    mean = sum(mass.values()) / len(mass)
    raw = {action: (mean / m) ** power for action, m in mass.items()}
    scale = sum(mass.values()) / sum(m * raw[action] for action, m in mass.items())
    return {action: scale * factor for action, factor in raw.items()}


def best_move_mass(best: Sequence[Sequence[str]]) -> dict[str, float]:
    """Per action, the batch's weight on it as a best move: ``1 / k`` from each state with k best moves."""
    mass: dict[str, float] = defaultdict(float)
    for moves in best:
        for action in moves:
            mass[action] += 1.0 / len(moves)
    return mass


def _best_moves(tried: Sequence[float]) -> list[bool]:
    """Which of a state's branches earned its best reward (to float rounding)."""
    top = max(tried)
    return [r >= top - 1e-6 for r in tried]


def branch_term(
    storage: GroupStorage, weight: float, mode: str = "uniform", balance: float = 0.0
) -> dict[str, float]:
    """Set the branch turns' advantages (``storage.turn_advantages``); return the branch metrics.

    ``mode`` is ``algo.branch_weight`` (:func:`branch_advantages`; "policy" reads the probabilities the actor
    gave the branches when scored); with "best", ``balance`` (``algo.branch_balance``) weighs each best move by
    :func:`best_move_balance` over the batch's states whose moves do not all earn the same. Over the played turns
    with a valid answer: ``groups/branch_gain``, the played move's reward minus the mean of its state's branches
    (above 0: better than a uniform choice among the offered moves), and ``groups/branch_best_share``, how often
    it earned as much as the state's best branch; over every state with branches,
    ``groups/branch_best_probability``, the probability the actor put on the state's best moves together (what
    the branches teach, read without sampling's noise). Per action a, over the states whose best moves it is among
    (and that tell moves apart): ``branch_best/<a>/probability``, the probability the actor gave it, and
    ``branch_best/<a>/share``, its share of the batch's best-move weight: whether a rarely best move is learned.
    """
    gains, on_best, best = [], [], []
    states = [(key, tried) for key, tried in storage.branch_rewards.items() if tried]
    names = storage.branch_names
    telling = [key for key, tried in states if max(tried) != min(tried)]
    best_sets = {
        key: [a for a, b in zip(names[key], _best_moves(storage.branch_rewards[key]), strict=True) if b]
        for key in telling
    }
    factors = best_move_balance(list(best_sets.values()), balance) if mode == "best" and balance else {}
    per_action: dict[str, list[float]] = defaultdict(list)
    for (t, n), tried in states:
        played, valid = float(storage.rewards[t, n]), storage.branch_valid.get((t, n), False)
        chances = [_answer_probability(storage, t, storage.branch_column(n, b)) for b in range(len(tried))]
        invalid = (None, 0.0) if valid else (played, _answer_probability(storage, t, n))
        advantages = branch_advantages(
            tried, weight, invalid[0], mode=mode, probabilities=chances, invalid_probability=invalid[1]
        )
        for b, advantage in enumerate(advantages):
            factor = factors.get(names[(t, n)][b], 1.0) if (t, n) in best_sets else 1.0
            storage.turn_advantages[t, storage.branch_column(n, b)] = advantage * factor
        is_best = _best_moves(tried)
        on_best.append(sum(p for p, b in zip(chances, is_best, strict=True) if b))
        if (t, n) in best_sets:
            for action, p, b in zip(names[(t, n)], chances, is_best, strict=True):
                if b:
                    per_action[action].append(p)
        if valid:
            gains.append(played - float(np.mean(tried)))
            best.append(played >= max(tried) - 1e-6)  # the played move as good as the best branch
    metrics = {
        "groups/branch_turns": float(sum(len(r) for r in storage.branch_rewards.values())),
        "groups/branch_gain": float(np.mean(gains)) if gains else 0.0,
        "groups/branch_best_share": float(np.mean(best)) if best else 0.0,
        "groups/branch_best_probability": float(np.mean(on_best)) if on_best else 0.0,
    }
    mass = best_move_mass(list(best_sets.values()))
    total = sum(mass.values())
    for action, chances in sorted(per_action.items()):
        key = action.replace(" ", "_")
        metrics[f"branch_best/{key}/probability"] = float(np.mean(chances))
        metrics[f"branch_best/{key}/share"] = mass[action] / total
    return metrics


def token_advantages(storage: GroupStorage, *, kl_coef: float = 0.0, token_gamma: float = 1.0) -> None:
    """Each turn's advantage (``storage.turn_advantages``) on every token of its response, plus the KL
    penalty's return to the response's end; no critic, so the returns stay 0."""
    advantages = storage.turn_advantages[:, :, None] * storage.response_mask
    if kl_coef > 0:
        penalty = -kl_coef * (storage.old_logprobs - storage.ref_logprobs) * storage.response_mask
        advantages = advantages + discounted_reverse_cumsum(penalty, token_gamma) * storage.response_mask
    storage.advantages = advantages.float()
    storage.returns.zero_()


def _stored_group_advantages(storage: GroupStorage, algo: AlgoConfig) -> GroupAdvantages:
    """The named group estimator over the episodes the storage holds."""
    estimator = ESTIMATORS[algo.advantage]
    episodes = storage.episodes[: storage.sampled_columns]
    return group_advantages(
        [e.rewards for e in episodes],
        algo.group_size,
        std=algo.norm == "mean_std",
        anchors=[e.anchors for e in episodes] if estimator.anchors else None,
        step_weight=algo.step_weight,
        step_gamma=algo.step_gamma,
        baseline=estimator.baseline,
        pool=algo.pool,
        actions=[e.actions for e in episodes] if algo.center_actions else None,
    )


def group_signal(storage: GroupStorage, algo: AlgoConfig) -> list[bool]:
    """Per group of the stored episodes: whether it carries a gradient (a turn with a non-zero advantage, or a
    state whose one-step branches told its actions apart)."""
    G = algo.group_size
    signal = _stored_group_advantages(storage, algo).signal
    return [
        any_turn or _branch_signal(storage, range(k * G, (k + 1) * G)) for k, any_turn in enumerate(signal)
    ]


def _branch_signal(storage: GroupStorage, envs: range) -> bool:
    return any(max(r) != min(r) for (_, n), r in storage.branch_rewards.items() if n in envs and r)


def _group(
    storage: TurnStorage, config: Config, *, all_reduce: AllReduce | None, kl_coef: float
) -> dict[str, float]:
    """A group estimator, the branch term added, on every token; the metrics of both."""
    assert isinstance(storage, GroupStorage)
    algo = config.algo
    result = _stored_group_advantages(storage, algo)
    for n, values in enumerate(result.turns):
        storage.turn_advantages[: len(values), n] = torch.as_tensor(values, dtype=torch.float32)
    metrics = {}
    if ESTIMATORS[algo.advantage].anchors:
        sizes = np.asarray(result.step_groups)
        turns = sum(len(values) for values in result.turns)
        metrics["groups/step_group_size"] = float(sizes.mean())
        metrics["groups/anchored_turn_fraction"] = float(sizes[sizes > 1].sum() / max(turns, 1))
    if storage.branch_width:
        metrics.update(branch_term(storage, algo.step_weight, algo.branch_weight, algo.branch_balance))
    if result.action_means:  # how far apart the actions' mean advantages were before centring
        means = result.action_means.values()
        metrics["groups/action_mean_spread"] = max(means) - min(means)
    token_advantages(storage, kl_coef=kl_coef, token_gamma=config.ppo.token_gamma)
    return metrics


#: Every ``algo.advantage`` by name (verl's registry of estimators, in one place).
ESTIMATORS: dict[str, Estimator] = {
    "gae": Estimator("gae", _gae),
    "grpo": Estimator("grpo", _group),
    "rloo": Estimator("rloo", _group, baseline="loo"),
    "gigpo": Estimator("gigpo", _group, anchors=True),
}
