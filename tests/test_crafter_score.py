"""Crafter's own score (the Crafter paper's geometric mean of the 22 achievements' success rates) and its
bootstrap SE, and `verlog eval` reporting it for Crafter: the figure a reader compares with the paper's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from verlog.evaluation import crafter_score as cs
from verlog.evaluation import evaluate, summarize

CRAFTER = "verlog/Crafter-v0"


def test_the_22_achievements_are_crafters_own() -> None:
    import crafter.constants

    assert cs.achievement_names() == tuple(crafter.constants.achievements)
    assert len(cs.achievement_names()) == 22 and "collect_diamond" in cs.achievement_names()


def test_the_score_is_the_geometric_mean_over_all_22_achievements() -> None:
    """One achievement in every episode, 21 never: exp(ln(1 + 100) / 22) - 1 (the 21 zeros count)."""
    one = math.exp(math.log(101) / 22) - 1
    assert one == pytest.approx(0.2334, abs=1e-4)
    assert cs.score_from_rates({"wake_up": 1.0}) == pytest.approx(one)
    assert cs.crafter_score([["wake_up"], ["wake_up"]]) == pytest.approx(one)
    # half the episodes: s = 50 %; two achievements at 50 % and 25 %
    assert cs.crafter_score([["wake_up"], []]) == pytest.approx(math.exp(math.log(51) / 22) - 1)
    rates = {"collect_wood": 0.5, "place_table": 0.25}
    assert cs.score_from_rates(rates) == pytest.approx(math.exp((math.log(51) + math.log(26)) / 22) - 1)
    assert cs.score_from_rates({}) == 0.0 and cs.score_from_rates(
        dict.fromkeys(cs.achievement_names(), 1.0)
    ) == (pytest.approx(100.0))
    # breadth beats routine: two achievements always < every achievement a fifth of the time
    assert cs.score_from_rates({"wake_up": 1.0, "collect_sapling": 1.0}) < cs.score_from_rates(
        dict.fromkeys(cs.achievement_names(), 0.2)
    )
    assert math.isnan(cs.crafter_score([]))
    with pytest.raises(ValueError, match="not Crafter achievements"):
        cs.score_from_rates({"colect_wood": 1.0})  # a misspelt name must not count as never unlocked
    with pytest.raises(ValueError, match="not a Crafter achievement"):
        cs.crafter_score([["colect_wood"]])


def _episodes(k: int) -> list[list[str]]:
    """``k`` copies of a mixed set of eight episodes."""
    base = [["wake_up", "collect_wood"], ["wake_up"], [], ["collect_sapling", "place_plant"],
            ["wake_up", "collect_wood", "place_table"], ["wake_up"], ["collect_drink"], []]  # fmt: skip
    return base * k


def test_the_bootstrap_se_is_seeded_and_shrinks_with_more_episodes() -> None:
    small, large = _episodes(2), _episodes(8)
    se = cs.bootstrap_se(small)
    assert se == cs.bootstrap_se(small) and se > 0  # the same episodes, the same SE
    assert cs.bootstrap_se(small, seed=1) != se
    assert cs.bootstrap_se(large) < 0.65 * se  # four times the episodes: about half the SE
    assert cs.bootstrap_se([["wake_up"]] * 5) == pytest.approx(0.0, abs=1e-12)  # every resample alike
    assert math.isnan(cs.bootstrap_se([]))


def test_the_rates_only_se_is_seeded_shrinks_and_is_labelled() -> None:
    rates = cs.success_rates(_episodes(2))
    se = cs.rates_bootstrap_se(rates, 16)
    assert se == cs.rates_bootstrap_se(rates, 16) > cs.rates_bootstrap_se(rates, 256) > 0
    assert cs.RATES_ONLY.startswith("rates-only bootstrap, ignores correlation between achievements")
    assert math.isnan(cs.rates_bootstrap_se(rates, 0))


def _record(achievements: list[str] | None, task: str = CRAFTER) -> dict:
    record = {"task": task, "return": float(len(achievements or [])), "length": 10, "success": False,
              "progression": len(achievements or []) / 22, "invalid_actions": 0}  # fmt: skip
    if achievements is not None:
        record["achievements"] = achievements
    return record


def test_a_crafter_summary_carries_the_score_and_other_games_do_not() -> None:
    goto = "verlog/BabyAI-GoTo-v0"
    records = [_record(a) for a in _episodes(1)] + [_record(None, goto)]
    s = summarize(records, [CRAFTER, goto], {CRAFTER: "crafter", goto: "babyai"})
    crafter = s["tasks"][CRAFTER]
    assert crafter["crafter_score"] == pytest.approx(cs.crafter_score(_episodes(1)))
    assert crafter["crafter_score_se"] == pytest.approx(cs.bootstrap_se(_episodes(1)))
    assert crafter["crafter_score_se_method"] == cs.EPISODE_BOOTSTRAP
    assert len(crafter["achievement_rates"]) == 22 and crafter["achievement_rates"]["wake_up"] == 0.5
    assert s["games"]["crafter"]["crafter_score"] == crafter["crafter_score"]
    assert "crafter_score" not in s["tasks"][goto] and "crafter_score" not in s["games"]["babyai"]


def test_verlog_eval_on_crafter_reports_the_score_with_its_se(tmp_path: Path) -> None:
    summary = evaluate("random", CRAFTER, out=tmp_path, episodes=3, num_envs=3, env_kwargs={"max_steps": 30})
    task = summary["tasks"][CRAFTER]
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert task["crafter_score"] == pytest.approx(cs.crafter_score([r["achievements"] for r in records]))
    assert math.isfinite(task["crafter_score_se"])
    on_file = json.loads((tmp_path / "summary.json").read_text())["tasks"][CRAFTER]
    assert on_file["crafter_score"] == pytest.approx(task["crafter_score"])
    table = (tmp_path / "results.md").read_text()
    assert f"| Crafter | 3 | {task['crafter_score']:.2f} ± {task['crafter_score_se']:.2f} |" in table
    assert "bootstrap over episodes" in table
