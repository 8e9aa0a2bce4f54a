"""Crafter's own score, the headline metric of the Crafter paper (Hafner, "Benchmarking the Spectrum of Agent
Capabilities", 2021), with a bootstrap standard error.

For each of Crafter's 22 achievements, its success rate s_i in % is the share of episodes that unlocked it at
least once; the score is exp(mean_i ln(1 + s_i)) - 1, over all 22 (one never unlocked counts with s_i = 0). A
geometric mean: it rewards breadth (many achievements sometimes) over one routine (three achievements always),
which BALROG's progression (the mean count of achievements) does not.

The score is not a mean over episodes, so its standard error is a bootstrap: the episodes are resampled with
replacement :data:`RESAMPLES` times (a seeded generator, so the same episodes give the same SE), the score is
computed on each resample, and the SE is the standard deviation of those scores. Where only the rates are
kept (results files written before the score existed), :func:`rates_bootstrap_se` draws each achievement as an
independent binomial at its rate instead: an approximation that ignores how achievements go together in an
episode (a table needs wood), labelled :data:`RATES_ONLY` wherever it is written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

__all__ = [
    "EPISODE_BOOTSTRAP",
    "RATES_ONLY",
    "RESAMPLES",
    "achievement_names",
    "bootstrap_se",
    "crafter_score",
    "crafter_stats",
    "rates_bootstrap_se",
    "score_from_rates",
    "success_rates",
]

#: Bootstrap resamples behind every SE of the score; the generator's seed is :data:`SEED`.
RESAMPLES = 1000
SEED = 0
#: How an SE from per-episode achievements was made (written beside it).
EPISODE_BOOTSTRAP = f"bootstrap over episodes, {RESAMPLES} resamples, seed {SEED}"
#: How an SE from stored rates alone was made (written beside it).
RATES_ONLY = (
    f"rates-only bootstrap, ignores correlation between achievements (each an independent binomial at its "
    f"rate over the episodes), {RESAMPLES} resamples, seed {SEED}"
)


def achievement_names() -> tuple[str, ...]:
    """The 22 achievements, as the crafter package lists them (imported here: it loads the game)."""
    from crafter import constants

    return tuple(constants.achievements)


def _rate_vector(rates: Mapping[str, float]) -> np.ndarray:
    names = achievement_names()
    unknown = set(rates) - set(names)
    if unknown:  # a misspelt name would otherwise count as an achievement never unlocked
        raise ValueError(f"not Crafter achievements: {sorted(unknown)}")
    return np.array([float(rates.get(name, 0.0)) for name in names])


def _score(rates: np.ndarray) -> np.ndarray:
    """The score of rates given as fractions (last axis: the 22 achievements)."""
    return np.expm1(np.mean(np.log1p(100.0 * rates), axis=-1))


def score_from_rates(rates: Mapping[str, float]) -> float:
    """The score from each achievement's success rate as a *fraction* (0..1, as ``achievement_rates`` holds
    them); an achievement not named has rate 0. In the paper's units: random ~1.6, human experts ~50.5."""
    return float(_score(_rate_vector(rates)))


def _matrix(episodes: Iterable[Iterable[str]]) -> np.ndarray:
    """[episodes, 22]: 1 where the episode unlocked the achievement."""
    names = achievement_names()
    index = {name: i for i, name in enumerate(names)}
    rows = []
    for unlocked in episodes:
        row = np.zeros(len(names))
        for name in unlocked:
            if name not in index:
                raise ValueError(f"not a Crafter achievement: {name!r}")
            row[index[name]] = 1.0
        rows.append(row)
    return np.array(rows).reshape(len(rows), len(names))


def success_rates(episodes: Iterable[Iterable[str]]) -> dict[str, float]:
    """Every achievement's share of ``episodes`` (each the achievements it unlocked) that unlocked it."""
    matrix = _matrix(episodes)
    if not len(matrix):
        return {name: math.nan for name in achievement_names()}
    return dict(zip(achievement_names(), (float(r) for r in matrix.mean(axis=0)), strict=True))


def crafter_score(episodes: Iterable[Iterable[str]]) -> float:
    """The score of ``episodes``, each given as the achievements it unlocked; NaN for no episode."""
    matrix = _matrix(episodes)
    return float(_score(matrix.mean(axis=0))) if len(matrix) else math.nan


def bootstrap_se(episodes: Iterable[Iterable[str]], resamples: int = RESAMPLES, seed: int = SEED) -> float:
    """The score's SE: the std of the scores of ``resamples`` resamples of the episodes (with replacement,
    seeded); NaN for no episode."""
    matrix = _matrix(episodes)
    n = len(matrix)
    if n == 0:
        return math.nan
    rng = np.random.default_rng(seed)
    chunk = max(1, 1_000_000 // (n * matrix.shape[1]))  # resamples at once, a few MB whatever n is
    scores = []
    for start in range(0, resamples, chunk):
        picks = rng.integers(0, n, size=(min(chunk, resamples - start), n))
        scores.append(_score(matrix[picks].mean(axis=1)))
    return float(np.std(np.concatenate(scores), ddof=1)) if resamples > 1 else math.nan


def rates_bootstrap_se(
    rates: Mapping[str, float], episodes: int, resamples: int = RESAMPLES, seed: int = SEED
) -> float:
    """An approximate SE from the rates alone (:data:`RATES_ONLY`): each achievement an independent binomial at
    its rate over ``episodes`` episodes; NaN for none."""
    if episodes < 1:
        return math.nan
    p = np.clip(_rate_vector(rates), 0.0, 1.0)
    rng = np.random.default_rng(seed)
    drawn = rng.binomial(episodes, p, size=(resamples, len(p))) / episodes
    return float(np.std(_score(drawn), ddof=1)) if resamples > 1 else math.nan


def crafter_stats(episodes: Sequence[Iterable[str]]) -> dict[str, object]:
    """Score, its bootstrap SE, how the SE was made, and all 22 rates (fractions) of ``episodes``."""
    episodes = [list(e) for e in episodes]
    return {
        "crafter_score": crafter_score(episodes),
        "crafter_score_se": bootstrap_se(episodes),
        "crafter_score_se_method": EPISODE_BOOTSTRAP,
        "achievement_rates": success_rates(episodes),
    }
