"""The demonstrations' one judge: what an evaluation folder's episodes say (each figure with its SE), the gain of
one agent over another in standard errors of the difference, the verdict rules, Crafter's own score, and the
merge of a seed's record into a results file. A demonstration only says what it trains and on what.

The rules (each gain counted in SEs of the difference, sqrt(SE_a^2 + SE_b^2), needing :data:`Z_REQUIRED`):

- Crafter (:func:`crafter_verdict`): the trained model's return **and** Crafter score each beat the untrained
  model's and random's on the same held-out episodes; progression is reported beside them, not judged.
- success (:func:`success_verdict`, BabyAI and BabaIsAI): success beats the zero-shot model's and random's, and
  the invalid-answer rate falls from zero-shot (or stays at none).

A results file holds one entry per seed (and variant), its latest run; a rerun's old entry moves to
``earlier_runs``, and when the judge itself changes (the task, the episodes, their seeds, the rule) every old
entry moves there with the judge it had, so the verdicts only count seeds judged alike.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import cached_random, locked, mean_se, random_key
from verlog.evaluation import crafter_score as crafter
from verlog.tomlconfig import toml_value

__all__ = [
    "CRAFTER_JUDGED",
    "CRAFTER_REPORTED",
    "EVAL_SEED",
    "JUDGE_KEYS",
    "Z_REQUIRED",
    "crafter_verdict",
    "difference",
    "evaluation",
    "figures",
    "gain",
    "merge",
    "random_baseline",
    "random_command",
    "record_seed",
    "rejudge_crafter",
    "score_block",
    "exit_if_stopped",
    "success_verdict",
    "unjudged_stop",
]

Z_REQUIRED = 3.0
#: The base seed of every demonstration's held-out episodes (``verlog eval --seed``): far from the training
#: envs' (``run.seed`` + env index) and the validation panel's (900,000), so no judged episode was trained on.
EVAL_SEED = 10_000
#: Crafter's judged figures: each must beat the untrained model and random by Z_REQUIRED SEs.
CRAFTER_JUDGED = ("return", "crafter_score")
#: Crafter's figures reported with their gains, not judged.
CRAFTER_REPORTED = ("progression",)
#: The header fields that say how seeds were judged: entries judged otherwise are not counted beside a new one.
JUDGE_KEYS = ("task", "episodes", "eval_seed", "judge_temperature", "pass_on", "z_required", "judged")
#: How the Crafter files were judged again (written into them, so the step can be repeated).
REJUDGE_COMMAND = "python -m benchmarks.demos.learn_crafter --rejudge FILE"


def unjudged_stop(trainer: Any, judge_later: str) -> tuple[str, int] | None:
    """Why a run must not be judged now, and the exit status: Ctrl-C or SIGTERM stopped it after an update
    before its budget ended (a time budget, ``run.max_minutes``, is not such a stop). Judging it would write a
    stopped run's figures as the preset's, so the script says how to continue it and how to judge it after."""
    from verlog.runkit.faults import stopped_run
    from verlog.runkit.stop import exit_status

    signal = trainer.early_stop.signal
    if signal is None:
        return None
    return (
        f"stopped by {signal} after update {trainer.update} of {trainer.config.run.total_updates}: not judged, "
        f"nor written to a results file. {stopped_run(trainer, None, fix=False, script='agents/ppo.py')}; then "
        f"judge it with: {judge_later}",
        exit_status(signal),
    )


def exit_if_stopped(trainer: Any, console: Any, judge_later: str) -> None:
    """End a demonstration whose run a signal stopped (:func:`unjudged_stop`), saying so on ``console``."""
    if (stop := unjudged_stop(trainer, judge_later)) is not None:
        console.print(stop[0])  # a stopped run's figures are not the preset's
        raise SystemExit(stop[1])


# ------------------------------------------------------------------------------------------------ figures
def episodes(folder: Path) -> list[dict[str, Any]]:
    """The per-episode records of an evaluation folder (``verlog eval``'s ``episodes.jsonl``)."""
    lines = (folder / "episodes.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def figures(folder: Path) -> dict[str, Any]:
    """Every figure of an evaluation folder's episodes, each with its SE over episodes.

    Success is a rate with BALROG's SE sqrt(p (1 - p) / n); return, progression (BALROG's, a fraction) and
    length are means with the sample SE (``benchmarks.common.mean_se``: a little wider, so a verdict errs
    strict); the invalid-answer rate is pooled over turns, its SE over the per-episode rates (the turns of one
    episode are not independent). Crafter's episodes, which list their achievements, add the achievements per
    episode, each achievement's rate (those unlocked at least once) and Crafter's score with its bootstrap SE.
    Episodes that say why they ended add the count of each reason (``ends``: Crafter's killer, or ``max_steps``).
    """
    rows = episodes(folder)
    n, turns = len(rows), sum(int(r["length"]) for r in rows)
    p = sum(bool(r.get("success", False)) for r in rows) / n if n else math.nan
    result: dict[str, Any] = {
        "episodes": n,
        "turns": turns,
        "success": p,
        "success_se": math.sqrt(p * (1 - p) / n) if n else math.nan,
        "invalid_action_rate": sum(int(r["invalid_actions"]) for r in rows) / turns if turns else math.nan,
        "invalid_se": mean_se([r["invalid_actions"] / max(1, r["length"]) for r in rows])[1],
    }
    columns = {
        "return": [float(r["return"]) for r in rows],
        "progression": [float(r["progression"]) for r in rows],
        "length": [float(r["length"]) for r in rows],
    }
    if rows and all("achievements" in r for r in rows):  # Crafter's
        columns["achievements"] = [float(len(r["achievements"])) for r in rows]
        stats = crafter.crafter_stats([r["achievements"] for r in rows])
        result["achievement_rates"] = {a: v for a, v in stats.pop("achievement_rates").items() if v > 0}
        result.update(stats)
    ends = Counter(r["end_reason"] for r in rows if r.get("end_reason"))
    if ends:  # why the episodes ended, where the game says (Crafter: what killed, or the step cap)
        result["ends"] = dict(ends.most_common())
    for name, values in columns.items():
        result[name], result[f"{name}_se"] = mean_se(values)
    return result


def score_block(block: Mapping[str, Any]) -> dict[str, Any]:
    """A Crafter block with its Crafter score: kept when it has one (from its episodes), else from its stored
    ``achievement_rates`` with the rates-only bootstrap SE, labelled as such."""
    if "crafter_score" in block or "achievement_rates" not in block:
        return dict(block)
    rates, n = block["achievement_rates"], int(block["episodes"])
    return {
        **block,
        "crafter_score": crafter.score_from_rates(rates),
        "crafter_score_se": crafter.rates_bootstrap_se(rates, n),
        "crafter_score_se_method": crafter.RATES_ONLY,
    }


# ------------------------------------------------------------------------------------------------ agents
def evaluation(command: Sequence[str], out: Path) -> dict[str, Any]:
    """Runs a ``verlog eval`` ``command`` in a child process (its own sampler engine, none left behind in the
    trainer's) and reads ``out``'s :func:`figures`."""
    from verlog.sampling.vllm import child_env

    subprocess.run(list(command), check=True, env=child_env())
    return figures(out)


def random_command(
    env_id: str,
    env_kwargs: dict[str, Any],
    memory: str,
    memory_kwargs: dict[str, Any],
    out: Path,
    episodes: int,
    seed: int,
    num_envs: int,
) -> list[str]:
    """``verlog eval random`` on the target task into ``out``, with the run's memory (no config file needed:
    random reads no prompt and decodes nothing)."""
    return [
        sys.executable, "-m", "verlog", "eval", "random", "--suite", env_id, "--episodes", str(episodes),
        "--seed", str(seed), "--num-envs", str(num_envs), "--set", f"env.memory={toml_value(memory)}",
        "--set", f"env.memory_kwargs={toml_value(dict(memory_kwargs))}", "--env-kwargs", toml_value(env_kwargs),
        "--out", str(out), "--quiet",
    ]  # fmt: skip


def random_baseline(
    env_id: str,
    env_kwargs: dict[str, Any],
    memory: str,
    memory_kwargs: dict[str, Any],
    episodes: int,
    seed: int,
    num_envs: int,
) -> tuple[dict, Path, bool]:
    """The random agent's evaluation on the judged episodes, from ``runs/random/<key>`` (:func:`random_key`)
    when played before; else played in a child process and kept there. Returns (figures, folder, cached)."""
    return cached_random(
        random_key(env_id, env_kwargs, memory, memory_kwargs, episodes, seed),
        lambda partial: evaluation(
            random_command(env_id, env_kwargs, memory, memory_kwargs, partial, episodes, seed, num_envs),
            partial,
        ),
        figures,
    )


# ---------------------------------------------------------------------------------------------- verdicts
def difference(after: float, after_se: float, before: float, before_se: float) -> dict[str, float]:
    """``after - before``, the SE of the difference sqrt(SE_a^2 + SE_b^2), and the gap in those SEs (a gap with
    no spread at all counts as infinitely many, of its sign)."""
    gap = after - before
    se = math.sqrt(after_se**2 + before_se**2)
    z = gap / se if se > 0 else (math.inf if gap > 0 else -math.inf)
    return {"gain": gap, "se": se, "z": z}


def gain(after: Mapping[str, Any], before: Mapping[str, Any], name: str) -> dict[str, float]:
    """``after`` minus ``before`` on figure ``name`` (blocks holding ``name`` and ``name_se``); NaN where either
    lacks the figure (an old block without Crafter's score), which no rule counts as a pass."""
    values = [_number(block.get(key)) for block in (after, before) for key in (name, f"{name}_se")]
    if None in values:
        return {"gain": math.nan, "se": math.nan, "z": math.nan}
    return difference(*values)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not math.isnan(value) else None


def crafter_verdict(
    trained: Mapping[str, Any], untrained: Mapping[str, Any], random: Mapping[str, Any]
) -> dict[str, Any]:
    """Crafter's rule: return and Crafter score (:data:`CRAFTER_JUDGED`) each beat the untrained model and
    random by :data:`Z_REQUIRED` SEs of the difference; progression's gains are reported too."""
    gains = {
        f"{name}_over_{label}": gain(trained, base, name)
        for name in CRAFTER_JUDGED + CRAFTER_REPORTED
        for label, base in (("untrained", untrained), ("random", random))
    }
    passed = all(
        gains[f"{name}_over_{label}"]["z"] >= Z_REQUIRED
        for name in CRAFTER_JUDGED
        for label in ("untrained", "random")
    )
    return {"gains": gains, "judged": list(CRAFTER_JUDGED), "passed": bool(passed)}


def success_verdict(
    before: Mapping[str, Any], after: Mapping[str, Any], random: Mapping[str, Any]
) -> dict[str, Any]:
    """The success rule: success up from zero-shot (``before``) and from random by :data:`Z_REQUIRED` SEs each,
    and the invalid-answer rate down from zero-shot.

    A zero-shot model that answered validly every time (greedy decoding often does) has no invalid rate to
    lower: there the trained one must stay at none. Random answers validly by construction: it is a floor for
    success only."""
    over_zero = difference(after["success"], after["success_se"], before["success"], before["success_se"])
    over_random = difference(after["success"], after["success_se"], random["success"], random["success_se"])
    fall = before["invalid_action_rate"] - after["invalid_action_rate"]
    fall_se = math.sqrt(before["invalid_se"] ** 2 + after["invalid_se"] ** 2)
    return {
        "success_gain": over_zero["gain"],
        "success_gain_se": over_zero["se"],
        "z": over_zero["z"],
        "invalid_fall": fall,
        "invalid_fall_se": fall_se,
        "invalid_z": fall / fall_se if fall_se > 0 else math.nan,
        "random_gain": over_random["gain"],
        "random_gain_se": over_random["se"],
        "z_random": over_random["z"],
        "passed": bool(
            over_zero["z"] >= Z_REQUIRED
            and over_random["z"] >= Z_REQUIRED
            and (fall > 0 or before["invalid_action_rate"] == after["invalid_action_rate"] == 0)
        ),
    }


# ------------------------------------------------------------------------------------------ results files
def _one_run_file(old: dict[str, Any]) -> dict[str, Any]:
    """A results file from before results were kept per seed (one run, ``before``/``after``) as that run's
    seed entry."""
    legacy = {"seed": old["config"]["run"]["seed"], "zero_shot": old["before"], "trained": old["after"]}
    return {"seeds": [{**old, **legacy, "panel": False}]}


def _label(entry: Mapping[str, Any], key: Sequence[str]) -> Any:
    """How the file's passed/failed lists name an entry: its seed, or [variant, seed]."""
    values = [entry[k] for k in key]
    return values[0] if len(values) == 1 else values


def merge(
    path: Path, record: dict[str, Any], header: dict[str, Any], key: Sequence[str] = ("seed",)
) -> dict[str, Any]:
    """The results file at ``path`` with ``record`` as the entry of its ``key`` (the seed, or the variant and
    the seed); the entry it replaces moves to ``earlier_runs`` (kept, not counted: a seed's outcome is its
    latest run, and a rerun that fails must not erase the one that passed, nor the reverse).

    When the judge changed (a header field of :data:`JUDGE_KEYS` differs), every old entry moves to
    ``earlier_runs`` with the judge it had under ``judge``."""
    old: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    if old and "seeds" not in old:
        old = _one_run_file(old)
    old_judge = {k: old[k] for k in JUDGE_KEYS if k in old}
    if any(old_judge[k] != header[k] for k in old_judge if k in header):
        moved = [{**s, "judge": old_judge} for s in old.get("seeds", [])]
        old = {"seeds": [], "earlier_runs": old.get("earlier_runs", []) + moved}
    same = lambda s: all(s.get(k) == record[k] for k in key)  # noqa: E731
    replaced = [s for s in old.get("seeds", []) if same(s)]
    seeds = [s for s in old.get("seeds", []) if not same(s)] + [record]
    seeds.sort(key=lambda s: tuple(s[k] for k in key))
    return {
        **header,
        "seeds_passed": [_label(s, key) for s in seeds if s["passed"]],
        "seeds_failed": [_label(s, key) for s in seeds if not s["passed"]],
        "seeds": seeds,
        "earlier_runs": old.get("earlier_runs", []) + replaced,
    }


def record_seed(
    folder: Path, stem: str, record: dict[str, Any], header: dict[str, Any], key: Sequence[str] = ("seed",)
) -> dict[str, Any]:
    """Merge ``record`` into ``folder/stem.json`` under the folder's lock (another seed may be writing the same
    file) and write it; returns the merged results."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    with locked(folder):
        results = merge(path, record, header, key)
        path.write_text(json.dumps(results, indent=2) + "\n")
    return results


# ----------------------------------------------------------------------------------------- judging again
#: Plays random again on an entry's judged episodes (the entry, their count, their base seed) and returns its
#: figures (:func:`figures`), or None where it cannot.
Replay = Callable[[Mapping[str, Any], int, int], dict[str, Any] | None]


def _same_episodes(stored: Mapping[str, Any], replayed: Mapping[str, Any]) -> bool:
    """Whether a replay's figures are the stored block's (the same episodes played the same way)."""
    keys = ("return", "progression", "length")
    rates, again = stored.get("achievement_rates", {}), replayed.get("achievement_rates", {})
    return (
        stored.get("episodes") == replayed.get("episodes")
        and all(math.isclose(stored[k], replayed[k], abs_tol=1e-9) for k in keys)
        and set(rates) == set(again)
        and all(math.isclose(rates[a], again[a], abs_tol=1e-9) for a in rates)
    )


def _random_block(block: dict[str, Any], replayed: Mapping[str, Any] | None) -> dict[str, Any]:
    """Random's block with its score's SE from a replay of its episodes where the replay matches it (random
    seeds itself per episode, so it plays them again exactly); the rates-only SE is kept beside it."""
    if replayed is None or not _same_episodes(block, replayed):
        return block
    return {
        **block,
        "crafter_score": replayed["crafter_score"],
        "crafter_score_se": replayed["crafter_score_se"],
        "crafter_score_se_method": replayed["crafter_score_se_method"]
        + " (random replayed on the same episodes: return and rates identical)",
        "crafter_score_se_rates_only": crafter.rates_bootstrap_se(
            block["achievement_rates"], block["episodes"]
        ),
    }


def _rejudged(
    entry: dict[str, Any], judged_before: Sequence[str], eval_seed: int | None, replay: Replay | None
) -> dict[str, Any]:
    """One Crafter entry under :func:`crafter_verdict`, its blocks scored, its first verdict kept."""
    blocks = {name: score_block(entry[name]) for name in ("random", "untrained", "trained")}
    random = blocks["random"]
    if (
        replay is not None
        and eval_seed is not None
        and "rates-only" in random.get("crafter_score_se_method", "")
    ):
        blocks["random"] = _random_block(random, replay(entry, int(random["episodes"]), eval_seed))
    before = entry.get("verdict_before_crafter_rule") or {
        "passed": entry["passed"],
        "judged": list(judged_before),
        "gains": entry.get("gains", {}),
    }
    verdict = crafter_verdict(blocks["trained"], blocks["untrained"], blocks["random"])
    return {
        **entry,
        **blocks,
        **verdict,
        "verdict_crafter_rule": {
            "passed": verdict["passed"],
            "judged": verdict["judged"],
            "z_required": Z_REQUIRED,
            "crafter_score_se": {name: b.get("crafter_score_se_method", "") for name, b in blocks.items()},
        },
        "verdict_before_crafter_rule": before,
    }


def rejudge_crafter(results: dict[str, Any], replay: Replay | None = None) -> dict[str, Any]:
    """A Crafter results file judged again under :func:`crafter_verdict` from the figures it holds.

    The runs' per-episode records were not kept, so a block without a Crafter score gets one from its stored
    rates, with the rates-only SE (labelled); random's block, where ``replay`` plays its episodes again and
    the replay matches, gets the SE from those episodes instead. Earlier runs are judged again too (still not
    counted); each entry's first verdict stays under ``verdict_before_crafter_rule``, the file's first rule
    under ``judged_before_crafter_rule``. Judging a file twice gives the same file."""
    before = results.get("judged_before_crafter_rule") or {
        k: results[k] for k in ("judged", "pass_on") if k in results
    }
    judged_before = before.get("judged", ["return", "progression"])

    def again(entry: dict[str, Any]) -> dict[str, Any]:
        judge = entry.get("judge", {})  # an earlier run judged otherwise says how
        seed = judge.get("eval_seed", results.get("eval_seed"))
        return _rejudged(entry, judge.get("judged", judged_before), seed, replay)

    seeds = [again(e) for e in results["seeds"]]
    earlier = [again(e) for e in results.get("earlier_runs", [])]
    key = ("variant", "seed")
    header = {k: v for k, v in results.items() if k not in ("pass_on", "seeds", "earlier_runs")}
    return {
        **header,
        "judged": list(CRAFTER_JUDGED),
        "judged_before_crafter_rule": before,
        "rejudged_by": REJUDGE_COMMAND,
        "seeds_passed": [_label(s, key) for s in seeds if s["passed"]],
        "seeds_failed": [_label(s, key) for s in seeds if not s["passed"]],
        "seeds": seeds,
        "earlier_runs": earlier,
    }
