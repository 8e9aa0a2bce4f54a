"""Tables of measured results, made from ``benchmarks/results/*.json`` so that no figure is copied by hand.

A page (or README.md) asks for a table with a marker on a line of its own::

    <!-- results: headline -->

The mkdocs build (this file is one of its ``hooks``) replaces each marker with :func:`render` of its name; an
unknown name or a results file that is not there fails the build. README.md keeps its headline table between
``<!-- results: headline -->`` and ``<!-- /results -->``; ``python docs/hooks/results.py --readme`` rewrites it
and ``tests/test_docs.py`` fails when it differs from what the files say.

A demonstration is one line of :data:`DEMONSTRATIONS` (its results file and title). A file holds a ``seeds``
list (and ``earlier_runs``, the runs a rerun replaced); each entry has ``seed``, ``passed``, and a before and an
after block: ``zero_shot``/``trained`` (``benchmarks/demos/learn_real.py``), ``initial``/``trained``,
``untrained``/``trained`` (``benchmarks/demos/learn_crafter.py``) or ``before``/``after``; a ``random`` block beside them
is random's figure on the same episodes. A block's figure is its ``success`` (a fraction), else its
``crafter_score`` (Crafter's own score, ``benchmarks/demos/judge.py``), ``progression`` (a fraction) or ``return``,
each with ``<name>_se`` (or ``se``). A field that is missing leaves its cell empty: entries written before
Crafter's score existed show their progression. A Crafter score whose SE came from stored rates alone (the
rates-only bootstrap) is marked with :data:`APPROXIMATE`.

Stdlib only: the tests import it without mkdocs.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

#: The demonstrations README's headline table and the results page show: (results file, title). One line each.
DEMONSTRATIONS: list[tuple[str, str]] = [
    ("learn.json", "Tiny random model, BabyAI GoTo (`nox -s learn`)"),
    (
        "learn_crafter.json",
        "Tiny random model, Crafter, ~170-turn episodes, answers constrained to actions (`nox -s learn_crafter`)",
    ),
    ("learn_crafter_real.json", "SmolLM2-135M, Crafter, 200-step episodes (`nox -s learn_crafter_real`)"),
    ("learn_real.json", "SmolLM2-135M, BabyAI GoTo in a 5×5 room (`nox -s learn_real`)"),
    ("learn_goto.json", "SmolLM2-135M, BALROG's GoTo through a curriculum (`nox -s learn_goto`)"),
    ("learn_pickup.json", "SmolLM2-135M, BALROG's Pickup through a curriculum (`nox -s learn_pickup`)"),
    (
        "learn_babaisai_branch.json",
        "SmolLM2-135M, BabaIsAI goto_win, one-step branches (`nox -s learn_babaisai`)",
    ),
    (
        "learn_babaisai_two_room.json",
        "SmolLM2-135M, BabaIsAI two_room-goto_win in 16 steps, one-step branches (`nox -s learn_two_room`)",
    ),
]

#: Other recipes that were run to the end (earlier presets and variants), shown on the results page.
OTHER_RECIPES: list[tuple[str, str]] = [
    ("learn_real_batch8.json", "learn_real with 8 envs × 4 turns (the preset before)"),
    ("learn_real_entropy.json", "learn_real_batch8 + entropy bonus 0.01"),
    ("learn_babaisai.json", "BabaIsAI goto_win ×5, PPO + shaping (attempt 3)"),
    ("learn_babaisai_goto_win.json", "BabaIsAI goto_win alone, PPO (attempt 6)"),
    ("learn_babaisai_gigpo.json", "BabaIsAI goto_win, GiGPO (attempts 8, 12, 14, 15)"),
    ("learn_crafter_before_reading.json", "learn_crafter without the reading loss: the preset before"),
    ("learn_crafter_unshaped.json", "learn_crafter without the breadth shaping: the preset before that"),
    ("learn_crafter_free.json", "learn_crafter free (no constraint), entropy 0.01: an earlier preset"),
    ("learn_crafter_constrained.json", "learn_crafter at entropy 0.01 (`nox -s learn_crafter_constrained`)"),
    (
        "learn_crafter_constrained_critic.json",
        "learn_crafter at entropy 0.01 + the critic's own λ of 1.0 (a probe)",
    ),
    ("learn_crafter_constrained_critic_ent.json", "learn_crafter + the critic's own λ of 1.0 (a probe)"),
    ("learn_crafter_wide.json", "learn_crafter, a tiny model of width 128 (a probe)"),
    ("learn_crafter_deep.json", "learn_crafter, a tiny model of 4 layers (a probe)"),
]

#: Published Crafter agents (agent, score, return), 1M environment steps on pixels, Crafter's own episodes of up
#: to 10,000 steps: the Crafter paper's (Hafner 2021; random, PPO, Rainbow, human experts) and DreamerV3's
#: (Hafner et al. 2023). Another setting than any table's here (text, BALROG's step caps): shown for scale.
CRAFTER_PAPER: list[tuple[str, float, float]] = [
    ("random", 1.6, 2.1),
    ("PPO", 4.6, 4.2),
    ("Rainbow", 4.3, 6.0),
    ("DreamerV3", 14.5, 11.7),
    ("human experts", 50.5, 14.3),
]
#: The mark of a Crafter score SE made from stored rates alone (the runs' per-episode records were not kept).
APPROXIMATE = "†"
CRAFTER_NOTES = (
    "Crafter score: the Crafter paper's exp(mean ln(1 + s_i)) − 1 over the 22 achievements' success rates s_i "
    "in %, SE a bootstrap over episodes; "
    f"{APPROXIMATE} SE from the stored achievement rates alone (rates-only bootstrap, ignores correlation between "
    "achievements; these runs' per-episode records were not kept). Published rows: 1M steps on pixels with "
    "Crafter's own episodes (up to 10,000 steps), from the Crafter paper and DreamerV3's: a different setting, "
    "for scale."
)

#: Joins what must not wrap apart in a narrow cell: a figure and its SE, before and after.
NBSP = "\u00a0"
MARKER = re.compile(r"^([ \t]*)<!-- results: ([a-z0-9_]+) -->[ \t]*$", re.MULTILINE)
README_BLOCK = re.compile(r"(<!-- results: ([a-z0-9_]+) -->\n).*?(<!-- /results -->)", re.DOTALL)


# ---------------------------------------------------------------------------------------------- reading
def load(name: str) -> Any:
    """A results file by its path under ``benchmarks/results/``."""
    return json.loads((RESULTS / name).read_text())


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _first(block: Mapping[str, Any] | None, *keys: str) -> Any:
    for key in keys:
        if block and key in block:
            return block[key]
    return None


def figure(block: Mapping[str, Any] | None) -> str:
    """A before/after block's headline figure: Crafter's score (a Crafter block also counts a success that
    never comes), else success in %, else progression or return, with its SE."""
    if not block:
        return ""
    for key, percent in (
        ("crafter_score", False),
        ("success", True),
        ("progression", True),
        ("return", False),
    ):
        value = _number(block.get(key))
        if value is None:
            continue
        se = _number(_first(block, f"{key}_se", "se"))
        scale, unit = (100.0, " %") if percent else (1.0, "")
        digits = 1 if percent else 2
        text = f"{value * scale:.{digits}f}"
        if se is not None:
            text += f" ± {se * scale:.{digits}f}" + (_approximate(block) if key == "crafter_score" else "")
        return text + unit
    return ""


def _approximate(block: Mapping[str, Any] | None) -> str:
    """:data:`APPROXIMATE` when the block's Crafter score SE came from its stored rates alone."""
    return (
        APPROXIMATE if str((block or {}).get("crafter_score_se_method", "")).startswith("rates-only") else ""
    )


def _metric(block: Mapping[str, Any] | None) -> str:
    for key, label in (("crafter_score", "Crafter score"), ("success", "success"), ("progression", "progression"),
                       ("return", "return")):  # fmt: skip
        if block and _number(block.get(key)) is not None:
            return label
    return ""


def before_after(entry: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """The blocks before and after training, under whichever names the file uses."""
    return _first(entry, "zero_shot", "initial", "untrained", "before"), _first(entry, "trained", "after")


def seeds(data: Mapping[str, Any], *, earlier: bool = False) -> list[dict[str, Any]]:
    """A results file's per-seed entries, earlier runs too if asked."""
    entries = [dict(e) for e in data.get("seeds", [])]
    if earlier:
        entries += [dict(e, earlier=True) for e in data.get("earlier_runs", [])]
    return entries


def _invalid(block: Mapping[str, Any] | None) -> float | None:
    return _number(_first(block, "invalid_action_rate"))


def _minutes(seconds: Any) -> str:
    value = _number(seconds)
    return f"{value / 60:.1f} min" if value is not None else ""


def _duration(seconds: Any) -> str:
    value = _number(seconds)
    if value is None:
        return ""
    return _minutes(value) if value >= 60 else ("< 1 s" if value < 1 else f"{value:.0f} s")


def _verdict(passed: Any) -> str:
    return {True: "✓", False: "✗"}.get(passed, "")


def _z(entry: Mapping[str, Any]) -> str:
    """The gain over the untrained model in SEs; a Crafter entry's is that of the figure shown (its Crafter
    score, or its progression when judged before the score existed)."""
    gains = entry.get("gains", {})
    crafter = gains.get("crafter_score_over_untrained") or gains.get("progression_over_untrained") or {}
    z = _number(entry.get("z", crafter.get("z")))
    return f"{z:+.1f}" if z is not None else ""


def _judged_z(entry: Mapping[str, Any], judged: Iterable[str] = ()) -> float | None:
    """A Crafter entry's smallest gain in SEs over the figures it was judged on (its own ``judged``, else
    ``judged``, else all of its gains)."""
    judged = entry.get("judged") or list(judged)
    zs = [
        _number(g.get("z"))
        for name, g in entry.get("gains", {}).items()
        if not judged or name.split("_over_")[0] in judged
    ]
    return min((z for z in zs if z is not None), default=None)


# --------------------------------------------------------------------------------------------- markdown
def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def headline(demonstrations: Iterable[tuple[str, str]] | None = None) -> str:
    """README's results table: one row per demonstration, random's and the untrained model's figure on the same
    held-out episodes, and every seed's trained figure."""
    rows = []
    for name, title in DEMONSTRATIONS if demonstrations is None else demonstrations:
        entries = seeds(load(name))
        before = before_after(entries[0])[0] if entries else None
        random = entries[0].get("random") if entries else None
        after = [f"{figure(before_after(e)[1])} (seed {e.get('seed')})" for e in entries]
        passed = sum(1 for e in entries if e.get("passed") is True)
        rows.append(
            [
                title,
                _metric(before),
                figure(random),
                figure(before),
                "<br>".join(after),
                f"{passed} of {len(entries)}",
            ]
        )
    header = ["demonstration", "measure", "random", "before training", "after training", "seeds passed"]
    text = table(header, rows)
    if APPROXIMATE in text:  # say what the mark means where it appears
        text += (
            f"\n\nCrafter score: the Crafter paper's geometric mean of the 22 achievements' success rates; "
            f"{APPROXIMATE} its SE from stored rates alone (rates-only bootstrap, ignores correlation between "
            "achievements)."
        )
    return text


#: The figure a block reports, in :func:`figure`'s order: key -> (its name in a header, unit, scale, digits).
MEASURES: dict[str, tuple[str, str, float, int]] = {
    "crafter_score": ("Crafter score", "", 1.0, 2),
    "success": ("success", "%", 100.0, 1),
    "progression": ("progression", "%", 100.0, 1),
    "return": ("return", "", 1.0, 2),
}


def _measure(block: Mapping[str, Any] | None) -> str:
    """The key of the figure a block reports (:data:`MEASURES`), the first it has."""
    return next((key for key in MEASURES if block and _number(block.get(key)) is not None), "")


def _estimate(block: Mapping[str, Any] | None, key: str) -> tuple[float, float | None] | None:
    value = _number((block or {}).get(key))
    return None if value is None else (value, _number(_first(block, f"{key}_se", "se")))


def _gain(entry: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    """After minus before on the held-out episodes, with its SE: the one the file's verdict used (Crafter's
    ``gains``, the tiny demo's ``evaluation_verdict``), else from the two blocks (independent episodes' SEs)."""
    stored = entry.get("gains", {}).get(f"{key}_over_untrained")
    if stored is None and key == "success":
        stored = (entry.get("evaluation_verdict") or {}).get("vs_initial")
    if stored and _number(stored.get("gain")) is not None and _number(stored.get("se")) is not None:
        return stored["gain"], stored["se"]
    before, after = (_estimate(block, key) for block in before_after(entry))
    if before is None or after is None or before[1] is None or after[1] is None:
        return None
    return after[0] - before[0], math.hypot(after[1], before[1])


def _cell(key: str, estimate: tuple[float, float | None] | None, block: Any = None, sign: str = "") -> str:
    """A per-seed cell: a figure of measure ``key`` in its table's unit, ± its SE, on one line."""
    if estimate is None:
        return ""
    (value, se), (_, _, scale, digits) = estimate, MEASURES[key]
    text = f"{value * scale:{sign}.{digits}f}"
    if se is not None:
        text += f" ± {se * scale:.{digits}f}" + (_approximate(block) if key == "crafter_score" else "")
    return text.replace(" ", NBSP)  # a figure and its SE stay on one line


def _recipe(name: str, piece: int = 10) -> str:
    """A recipe's short name in the per-seed tables: its results file's stem (mostly its nox session's name),
    free to wrap (``<wbr>``) after an underscore that ends at least ``piece`` characters, so that a long name
    breaks between its words (``learn_crafter_`` ``constrained``), never in one, and a short one not at all."""
    first, *rest = Path(name).stem.split("_")
    out, line = first, len(first)
    for word in rest:
        out += "_<wbr>" + word if line >= piece else "_" + word
        line = len(word) if line >= piece else line + 1 + len(word)
    return f"<code>{out}</code>"


def demonstrations(files: Iterable[tuple[str, str]], legend: bool = False) -> str:
    """Per seed, one table per measure so that a column holds one measure for every row: the figure before
    and after training on the same held-out episodes, after minus before with its SE, invalid answers as a
    share of turns, the watchdog's rollbacks (where a recipe has them), the wall time, the verdict. ``legend``
    puts a table of what each recipe is first (the headline table says it for the demonstrations)."""
    groups: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for name, title in files:
        for entry in seeds(load(name)):
            before, after = before_after(entry)
            groups.setdefault(_measure(before) or _measure(after), []).append((name, title, entry))
    out = []
    if legend:
        out.append(table(["recipe", "what it is"], [[_recipe(name), title] for name, title in files]))
    for key in groups:  # in the order the recipes come
        label, unit, _, _ = MEASURES[key]
        rollbacks = any("rollbacks" in entry for _, _, entry in groups[key])

        rows = []
        for name, _, entry in groups[key]:
            before, after = before_after(entry)
            invalid = [_invalid(before), _invalid(after)]
            rows.append([
                _recipe(name), entry.get("seed", ""), _cell(key, _estimate(before, key), before),
                _cell(key, _estimate(after, key), after), _cell(key, _gain(entry, key), sign="+"),
                f"{NBSP}→{NBSP}".join(f"{100 * v:.1f}" for v in invalid) if None not in invalid else "",
                *([entry.get("rollbacks", "")] if rollbacks else []),
                f"{_number(entry.get('wall_s')) / 60:.1f}" if _number(entry.get("wall_s")) is not None else "",
                _verdict(entry.get("passed")),
            ])  # fmt: skip
        unit_text = f", {unit}" if unit else ""
        header = [
            "recipe", "seed", f"{label} before{unit_text}", f"{label} after{unit_text}",
            "after − before" + (", points" if unit == "%" else "") + " ± SE", "invalid answers, % of turns, before → after",
            *(["rollbacks"] if rollbacks else []), "wall, min", "passed",
        ]  # fmt: skip
        out.append(table(header, rows))
    text = "\n\n".join(out)
    if APPROXIMATE in text:
        text += f"\n\n{APPROXIMATE} SE from the stored achievement rates alone (rates-only bootstrap)."
    return text


def _crafter_cell(block: Mapping[str, Any] | None, key: str, scale: float = 1.0, digits: int = 2) -> str:
    value, se = _number((block or {}).get(key)), _number((block or {}).get(f"{key}_se"))
    if value is None:
        return ""
    text = f"{value * scale:.{digits}f}" + (f" ± {se * scale:.{digits}f}" if se is not None else "")
    return text + (_approximate(block) if key == "crafter_score" and se is not None else "")


def _load(entry: Mapping[str, Any]) -> str:
    """`` (load A–B)``: the 1-minute load average when the run started and ended, on a 2-core machine."""
    load = entry.get("load_average")
    return f" (load {load[0]:.1f}–{load[1]:.1f})" if isinstance(load, list) and len(load) == 2 else ""


def _crafter_figures(block: Mapping[str, Any] | None) -> list[str]:
    """A block's return, Crafter score, achievements, progression % and length cells."""
    return [
        _crafter_cell(block, "return"),
        _crafter_cell(block, "crafter_score"),
        _crafter_cell(block, "achievements"),
        _crafter_cell(block, "progression", 100, 1),
        _crafter_cell(block, "length", 1, 0),
    ]


def _paper_rows(width: int) -> list[list[str]]:
    """The published Crafter agents (:data:`CRAFTER_PAPER`) as rows of ``width`` cells: agent, return, score."""
    return [
        [f"*{agent} (published, pixels, 1M steps)*", f"{ret:.1f}", f"{score:.1f}", *[""] * (width - 3)]
        for agent, score, ret in CRAFTER_PAPER
    ]


def crafter(name: str = "learn_crafter.json") -> str:
    """The Crafter judge's figures: random, the untrained and each seed's trained model on the same held-out
    episodes (return, Crafter score, achievements, progression, length), the smallest judged gain in SEs, the
    training time and the verdict; then the published agents' rows, for scale."""
    data = load(name)
    entries = seeds(data)
    rows = []
    for label, block in (("random", entries[0].get("random")), ("untrained", before_after(entries[0])[0])):
        rows.append([label, *_crafter_figures(block), "", "", ""])
    for e in entries:
        z = _judged_z(e, data.get("judged", []))
        rows.append([f"{e.get('variant', 'trained')}, seed {e.get('seed')}", *_crafter_figures(e.get("trained")),
                     f"{z:+.1f}" if z is not None else "", _minutes(e.get("train_s")) + _load(e),
                     _verdict(e.get("passed"))])  # fmt: skip
    header = ["agent", "return", "Crafter score", "achievements", "progression %", "length", "min gain (SE)",
              "training (load)", ""]  # fmt: skip
    rows += _paper_rows(len(header))
    judged = " and ".join({"crafter_score": "Crafter score"}.get(f, f) for f in data.get("judged", []))
    judge = (
        f"\n\nEach agent played the same {data['episodes']} held-out episodes (seeds from {data['eval_seed']:,})"
        + (f"; a seed passes when its {judged} each beat random and the untrained model by "
           f"{data.get('z_required', 3):g} SE, the min gain is over those." if judged else ".")
        if "episodes" in data and "eval_seed" in data
        else ""
    )  # fmt: skip
    return table(header, rows) + judge + "\n\n" + CRAFTER_NOTES


def _rate_cell(block: Mapping[str, Any] | None, achievement: str) -> str:
    """An achievement's rate over a block's episodes with its SE. A rate is the mean of a 0/1 outcome per episode,
    so its sample SE (``mean_se``'s, as every other figure) is sqrt(p (1 - p) / (n - 1)) and needs only p and n."""
    block = block or {}
    p, n = block.get("achievement_rates", {}).get(achievement, 0.0), int(block.get("episodes", 0))
    if n < 2:  # one episode says nothing about its spread
        return f"{100 * p:.0f} %"
    return f"{100 * p:.0f} ± {100 * math.sqrt(p * (1 - p) / (n - 1)):.0f} %"


def crafter_achievements(name: str = "learn_crafter.json") -> str:
    """Per-achievement success rates on the held-out episodes, each ± SE over episodes: random, untrained and
    every seed's trained model (a mean over seeds would hide the seed that learned something the others did not)."""
    entries = seeds(load(name))
    blocks = [("random", entries[0].get("random")), ("untrained", before_after(entries[0])[0])]
    blocks += [(f"seed {e['seed']}", e.get("trained")) for e in entries]
    names = sorted({a for _, b in blocks for a in (b or {}).get("achievement_rates", {})})
    rows = [[a, *(_rate_cell(b, a) for _, b in blocks)] for a in names]
    rows.append(["**Crafter score**", *(_crafter_cell(b, "crafter_score") for _, b in blocks)])
    return table(["achievement", *(label for label, _ in blocks)], rows)


def _training_return(
    entry: Mapping[str, Any], last: int = 10, key: str = "charts/episodic_return"
) -> float | None:
    """The mean of the curve's ``key`` (the training return) over the last ``last`` updates that finished an
    episode."""
    values = [_number(r.get(key)) for r in entry.get("curve", [])]
    values = [v for v in values if v is not None][-last:]
    return sum(values) / len(values) if values else None


def _turns_to_reach(
    entry: Mapping[str, Any], target: float, window: int = 10, key: str = "charts/episodic_return"
) -> int | None:
    """The first global step at which the mean of the curve's ``key`` (the training return) over the last
    ``window`` updates that finished an episode reaches ``target`` (None: never)."""
    seen: list[float] = []
    for record in entry.get("curve", []):
        value = _number(record.get(key))
        if value is None:
            continue
        seen = (seen + [value])[-window:]
        if len(seen) == window and sum(seen) / window >= target:
            return int(record.get("global_step", 0))
    return None


def constrained_vs_free(
    free: str = "learn_crafter_free.json", constrained: str = "learn_crafter_constrained.json"
) -> str:
    """What ``sampling.constrain = "actions"`` buys on the same preset and budget, seed by seed: the judged
    return and Crafter score of the free and the constrained model, the free model's invalid-answer rate, and
    the turns the constrained run took to reach the free run's final training return."""
    free_seeds = {e.get("seed"): e for e in seeds(load(free)) if e.get("variant", "verlog") == "verlog"}
    rows = []
    for e in seeds(load(constrained)):
        f = free_seeds.get(e.get("seed"))
        if f is None:
            continue
        target = _training_return(f)
        reached = _turns_to_reach(e, target) if target is not None else None
        invalid = _invalid(f.get("trained"))
        rows.append([
            f"seed {e.get('seed')}", _crafter_cell(f.get("trained"), "return"), _crafter_cell(e.get("trained"), "return"),
            _crafter_cell(f.get("trained"), "crafter_score"), _crafter_cell(e.get("trained"), "crafter_score"),
            f"{100 * invalid:.0f} %" if invalid is not None else "",
            (f"{reached:,} of {int(f.get('turns', 0)):,}" if reached is not None else "not reached")
            + (f" (target {target:.2f})" if target is not None else ""),
            _verdict(f.get("passed")), _verdict(e.get("passed")),
        ])  # fmt: skip
    header = ["seed", "return, free", "return, constrained", "Crafter score, free", "Crafter score, constrained",
              "free model's invalid answers", "turns to the free run's final training return", "free passes",
              "constrained passes"]  # fmt: skip
    text = table(header, rows)
    if APPROXIMATE in text:
        text += f"\n\n{APPROXIMATE} SE from the stored achievement rates alone (the free runs' episodes were not kept)."
    return text


def constrained_vs_free_success(
    free: str = "learn_real.json", constrained: str = "learn_real_constrained.json"
) -> str:
    """``constrained_vs_free`` for a success task (the SmolLM2 demonstrations): the judged success of the free
    and the constrained model seed by seed, the free model's invalid answers before and after training, and the
    turns the constrained run took to reach the free run's final training success."""
    free_seeds = {e.get("seed"): e for e in seeds(load(free))}
    rows = []
    for e in seeds(load(constrained)):
        f = free_seeds.get(e.get("seed"))
        if f is None:
            continue
        target = _training_return(f, key="env/success")
        reached = _turns_to_reach(e, target, key="env/success") if target is not None else None
        before, after = _invalid(f.get("zero_shot")), _invalid(f.get("trained"))
        rows.append([
            f"seed {e.get('seed')}", figure(f.get("trained")), figure(e.get("trained")),
            figure(e.get("zero_shot")), figure(e.get("random")),
            f"{100 * before:.0f} → {100 * after:.0f} %" if before is not None and after is not None else "",
            (f"{reached:,} of {int(f.get('turns', 0)):,}" if reached is not None else "not reached")
            + (f" (target {100 * target:.0f} %)" if target is not None else ""),
            _verdict(f.get("passed")), _verdict(e.get("passed")),
        ])  # fmt: skip
    header = ["seed", "success, free", "success, constrained", "zero-shot, constrained", "random",
              "free model's invalid answers, before → after", "turns to the free run's final training success",
              "free passes", "constrained passes"]  # fmt: skip
    return table(header, rows)


def training_speed(preset: str = "learn_crafter") -> str:
    """One line: a preset's training turns per second and where an update's time goes (``training.json``,
    ``nox -s bench_training``), with the load it was measured under."""
    entry = load("training.json")["presets"][preset]
    phases = entry["phases_s"]
    names = {
        "generate": "sampling",
        "env": "env steps",
        "prompt": "prompts",
        "score": "scoring",
        "update": "the update",
    }
    parts = ", ".join(
        f"{names[k]} {v:.1f} s" for k, v in sorted(phases.items(), key=lambda kv: -kv[1]) if v >= 0.05
    )
    load_start, load_end = entry["load_average"]
    return (
        f"`envs/{preset}.toml` trains at **{entry['turns_per_s']:.0f} turns/s** ({entry['torch_threads']} torch "
        f"thread{'s' if entry['torch_threads'] != 1 else ''}, {entry['num_envs']} envs × {entry['turns_per_update']} "
        f"turns an update, {entry['update_s']:.1f} s an update: {parts}; load {load_start:.2f} at the start, "
        f"{load_end:.2f} at the end, `nox -s bench_training`)."
    )


def training_levers(preset: str = "learn_crafter") -> str:
    """Every measured variant of a preset's training speed (``training.json``) beside the preset as it is."""
    entries = {k: e for k, e in load("training.json")["presets"].items() if k.split(" ")[0] == preset}
    rows = []
    for _, e in sorted(entries.items(), key=lambda kv: kv[0] != preset):
        phases = e["phases_s"]
        rows.append([
            " ".join(f"`{o}`" for o in e["overrides"]) or "the preset", f"{e['turns_per_s']:.0f}",
            f"{e['update_s']:.1f}", f"{phases['generate']:.1f}", f"{phases['score']:.1f}", f"{phases['update']:.1f}",
            f"{e['load_average'][0]:.2f}",
        ])  # fmt: skip
    header = ["variant", "turns/s", "s an update", "sampling s", "scoring s", "update s", "load at start"]
    return table(header, rows)


def _zs(row: Mapping[str, Any], gain: str) -> str:
    """An ablation row's per-seed gains ``z_<gain>`` in SEs (empty where its seeds have none)."""
    return ", ".join(f"{z:+.1f}" for z in row.get(f"z_{gain}", []) if _number(z) is not None)


def ablation(name: str = "learn_crafter_ablation.json") -> str:
    """One row per ablation variant: trained return, Crafter score, achievements (progression is achievements / 22,
    so it has no column) and length over its seeds, the per-seed gains over the untrained model and random, the
    updates each seed took at the shared turn budget; random and the untrained model on the same episodes above
    them, the published agents below."""
    data = load(name)
    entries = seeds(data)
    width = 9
    rows = []
    if entries:
        for label, block in (
            ("random", entries[0].get("random")),
            ("untrained", before_after(entries[0])[0]),
        ):
            figures = _crafter_figures(block)
            rows.append([label, *figures[:3], figures[4], *[""] * 4])
    for r in data.get("table", []):
        rows.append([f"`{r['variant']}`", _crafter_cell(r, "return"), _crafter_cell(r, "crafter_score"),
                     _crafter_cell(r, "achievements"), f"{r['length']:.0f}",
                     _zs(r, "return_over_untrained") + " / " + _zs(r, "return_over_random"),
                     _zs(r, "crafter_score_over_untrained") + " / " + _zs(r, "crafter_score_over_random"),
                     ", ".join(f"{s}: {u}" for s, u in zip(r["seeds"], r["updates"], strict=True)),
                     ", ".join(_verdict(p) for p in r.get("passed", []))])  # fmt: skip
    header = ["variant", "return", "Crafter score", "achievements", "length",
              "return gain (SE) over untrained / random", "score gain (SE) over untrained / random",
              "seed: updates", "passed"]  # fmt: skip
    rows += _paper_rows(width)
    note = "\n\nA variant's figures: the mean over its seeds, ± SE over seeds. " + CRAFTER_NOTES
    return table(header, rows) + note


def crafter_reading(name: str = "learn_crafter_ablation.json") -> str:
    """What each piece buys, in one sentence per variant, read off the ablation table against ``verlog``'s row."""
    rows = {r["variant"]: r for r in load(name).get("table", [])}
    base = rows.get("verlog")
    if base is None:
        return ""
    words = {
        "no-bootstrap": "Without the window-edge bootstrap",
        "no-warmup": "Without critic pre-training",
        "grpo": "With GRPO, which must wait for whole episodes",
        "gigpo": "With GiGPO, whole episodes too",
        "entropy": "With the entropy bonus",
    }
    lines = []
    for variant, lead in words.items():
        r = rows.get(variant)
        if r is None:
            continue
        base = _on_seeds(rows["verlog"], r["seeds"])  # the full preset on the seeds this variant has run
        parts, beyond, spread = [], [], True
        for key, label in (("return", "return"), ("crafter_score", "Crafter score")):
            if _number(r.get(key)) is None or _number(base.get(key)) is None:
                continue
            gap = r[key] - base[key]
            se = math.sqrt((r.get(f"{key}_se") or 0.0) ** 2 + (base.get(f"{key}_se") or 0.0) ** 2)
            spread = spread and bool(se) and math.isfinite(se)
            parts.append(f"{label} {r[key]:.2f} against {base[key]:.2f} ({gap:+.2f}"
                         f"{f' ± {se:.2f} over seeds' if bool(se) and math.isfinite(se) else ''})")  # fmt: skip
            if bool(se) and math.isfinite(se) and abs(gap) > 2 * se:
                beyond.append(label)
        seeds = len(r["seeds"])
        plural = "s" if seeds > 1 else ""
        seeds_said = f"{seeds} seed{plural}" + (
            f" (against the preset's seed{plural} {', '.join(map(str, r['seeds']))})"
            if base is not rows["verlog"]
            else ""
        )
        verdict = ""
        if spread:
            verdict = (
                f" Beyond twice the seeds' spread on {' and '.join(beyond)}."
                if beyond
                else " Within twice the seeds' spread: no difference these seeds can show."
            )
        lines.append(
            f"- {lead}: trained {', '.join(parts)}; {seeds_said}, "
            f"{', '.join(str(u) for u in r['updates'])} updates.{verdict}"
        )
    return "\n".join(lines)


def _on_seeds(base: Mapping[str, Any], seeds: Sequence[int]) -> Mapping[str, Any]:
    """``base`` (the full preset's ablation row) on ``seeds`` alone, from its per-seed figures: a variant with
    fewer seeds run so far is compared with the preset on the same seeds. The row itself when it has those seeds
    and no others, or no per-seed figures (files written before they were kept)."""
    per = base.get("per_seed") or {}
    own = [per[str(s)] for s in seeds if str(s) in per]
    if not own or sorted(base["seeds"]) == sorted(seeds):
        return base
    row = dict(base)
    for key in ("return", "crafter_score"):
        values = [o[key] for o in own]
        row[key] = statistics.fmean(values)
        row[f"{key}_se"] = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return row


def crafter_ends(name: str = "crafter_ends.json") -> str:
    """How each agent's judged Crafter episodes ended (``benchmarks/probes/crafter_ends.py``): the episodes' mean
    length and return, and the share each end took, killers first, the step cap last."""
    data = load(name)
    agents = data["agents"]
    single = [e for e in data["order"] if "+" not in e and any(a["ends"].get(e) for a in agents)]
    for a in (
        agents
    ):  # a death with several vitals at zero ("hunger+thirst") in one column: the table stays narrow
        a["ends"] = {**a["ends"], "several vitals": sum(n for e, n in a["ends"].items() if "+" in e)}
    seen = [*single, *(["several vitals"] if any(a["ends"]["several vitals"] for a in agents) else [])]
    rows = [
        [a["agent"], a["episodes"], f"{a['length']:.0f} ± {a['length_se']:.0f}", f"{a['return']:.2f} ± {a['return_se']:.2f}",
         *(f"{100 * a['ends'].get(e, 0) / a['episodes']:.0f} %" for e in seen)]
        for a in agents
    ]  # fmt: skip
    return table(["agent", "episodes", "length", "return", *(e.replace("_", " ") for e in seen)], rows)


#: How far each lever toward Crafter's tech tree got (issue 54): the lever, the results files of its runs (every
#: seed in them, all judged on the same held-out episodes) and what it did, read from the runs (each is a row of
#: docs/log.md). The figures come from the files.
TECH_TREE_LEVERS: list[tuple[str, tuple[str, ...], str]] = [
    ("the preset without shaping", ("learn_crafter_unshaped.json",), "sapling, plant, sleep, some wood"),
    ("the breadth shaping (the preset before the reading)", ("learn_crafter_before_reading.json",),
     "the broadest on the mean, blind"),
    ("+ the inventory as a potential", ("learn_crafter_inventory.json",), "more tables on one seed; level on the mean"),
    ("breadth paid by the score's gradient (the routine at 0.6)", ("learn_crafter_breadth.json",),
     "gives up sleep: the score holds, the return falls"),
    ("the breadth shaping at 3x the budget", ("learn_crafter_breadth_long.json",),
     "rates peak at updates 50-90, then drift back to the routine"),
    ("a wider, then a deeper model (unshaped)", ("learn_crafter_wide.json", "learn_crafter_deep.json"), "no gain"),
    ("three epochs an update (two shapings, then none)",
     ("learn_crafter_breadth_epochs.json", "learn_crafter_breadth_keep_epochs.json", "learn_crafter_epochs.json"),
     "the routine sooner"),
    ("the critic's rate above the actor's", ("learn_crafter_critic_lr.json",), "no gain"),
    ("wake-up paid 2.5, without then with the potential", ("learn_crafter_wake.json", "learn_crafter_wake_inv.json"),
     "back to the routine"),
    ("the entropy bonus annealed to 0.003", ("learn_crafter_breadth_entropy.json",), "the routine, below random"),
    ("sapling and plant unpaid, without then with the potential",
     ("learn_crafter_unroutine.json", "learn_crafter_unroutine_inv.json"),
     "sapling and plant stay (Do on grass); no gain"),
    ("the same with the potential, the entropy bonus at 0.015", ("learn_crafter_unroutine_inv_e15.json",),
     "stops sleeping, dies sooner"),
    ("the bonus on the mean answer, none per turn",
     ("learn_crafter_answer_entropy.json",), "blind; stopped once that showed"),
    ("no action list in the prompt (the observation last)", ("learn_crafter_no_action_list.json",),
     "still blind: no gain"),
    ("the critic on the actor's network (value_coef 0.5)", ("learn_crafter_shared_critic.json",),
     "reads a little (seed 1 most); the routine made reliable, the best returns"),
    ("the same at 3x the budget", ("learn_crafter_shared_critic_long.json",), "no further"),
    ("the same, the bonus on the mean answer (0.03) and 0.01 per turn", ("learn_crafter_shared_critic_answer.json",),
     "reads a little; wood lost"),
    ("the critic on the actor's network, the routine unpaid, the potential", ("learn_crafter_shared_critic_unroutine.json",),
     "the broadest: first stone, furnace, a stone pickaxe; still nearly blind"),
    ("a reading loss: the answer's position also names what the player faces", ("learn_crafter_reading.json",),
     "reads (Do 0.91 facing a tree, 0.19 on grass); seed 1 the best yet, seeds 2 and 3 tables but no further"),
    ("the reading with the shared critic, the routine unpaid, the potential",
     ("learn_crafter_shared_critic_unroutine_reading.json",), "reads; the most wood and tables, lower return"),
    ("the reading at 3x the budget (the preset)", ("learn_crafter.json",),
     "reads; wood and a table on every seed, pickaxes on all three"),
    ("the same without the shaping (Crafter's own reward)", ("learn_crafter_reading_unshaped.json",),
     "keeps the wake-up (92 %): the best return at this budget; fewer tables, a lower score"),
    ("the same, a health point priced 0.5 in training (Crafter's 0.1)", ("learn_crafter_survival.json",),
     "lives no longer (174 steps); fewer tables and drinks, a lower score and return"),
]  # fmt: skip
TECH_TREE_RATES = ("collect_wood", "place_table", "collect_drink", "make_wood_pickaxe")


def _per_seed(runs: list[list[dict[str, Any]]], key: str) -> str:
    """Each seed's trained figure, seeds of one file apart by " / ", files by ", "."""
    return ", ".join(" / ".join(f"{e['trained'][key]:.2f}" for e in entries) for entries in runs)


def _seed_label(entry: Mapping[str, Any]) -> str:
    """A seed, and how far its run got when it stopped before its planned updates (or turns)."""
    if entry.get("stopped_early") is False:  # a run that says it reached its budget
        return str(entry["seed"])
    planned = entry.get("planned_updates") or entry.get("config", {}).get("run", {}).get("total_updates")
    done = entry.get("updates")
    return (
        f"{entry['seed']} (stopped at {done} of {planned})"
        if planned and done and done < planned
        else str(entry["seed"])
    )


def tech_tree_levers(levers: Iterable[tuple[str, tuple[str, ...], str]] = TECH_TREE_LEVERS) -> str:
    """One row per lever: its seeds' Crafter scores and returns (files apart by a comma), and the tech tree's first
    rates as a mean over those seeds."""
    random = seeds(load("learn_crafter.json"))[0]["random"]
    rates = [f"{100 * random.get('achievement_rates', {}).get(a, 0.0):.0f} %" for a in TECH_TREE_RATES]
    rows = [["*random, on the same episodes*", "", f"{random['crafter_score']:.2f}", f"{random['return']:.2f}",
             *rates, ""]]  # fmt: skip
    for lever, files, reading in levers:
        runs = [seeds(load(name)) for name in files]
        every = [e["trained"] for entries in runs for e in entries]
        rates = [
            f"{100 * statistics.fmean(b.get('achievement_rates', {}).get(a, 0.0) for b in every):.0f} %"
            for a in TECH_TREE_RATES
        ]
        labels = ", ".join(" ".join(_seed_label(e) for e in entries) for entries in runs)
        rows.append(
            [lever, labels, _per_seed(runs, "crafter_score"), _per_seed(runs, "return"), *rates, reading]
        )
    header = [
        "lever",
        "seeds",
        "Crafter score",
        "return",
        "wood",
        "table",
        "drink",
        "wood pickaxe",
        "what it did",
    ]
    return table(header, rows)


def state_dependence(name: str = "state_dependence.json") -> str:
    """Whether each probed policy reads the observation: I(S; A) before and after training, and the trained
    policy's chance of Do by what the player faces (``benchmarks/probes/state_dependence.py``)."""
    rows = []
    for run, entry in load(name).get("runs", {}).items():
        trained, untrained = entry.get("trained") or {}, entry.get("untrained") or {}
        faced = trained.get("situations", {})
        do = [f"{faced[k]['do']:.2f}" if k in faced else "" for k in ("tree", "water", "grass")]
        top = ", ".join(f"{a} {p:.2f}" for a, p in faced.get("tree", {}).get("top", []))
        information = [f"{b['mutual_information']:.4f}" if b else "" for b in (untrained, trained)]
        stem, _, seed = run.partition(", ")  # a long results stem may wrap between its words
        label = f"{_recipe(stem)}, {seed}" if seed else run
        rows.append([label, f"{trained.get('states', 0):,}", *information, *do, top])
    header = ["run", "states", "I(S; A) untrained", "trained", "P(Do) facing a tree", "water", "grass",
              "top answers facing a tree"]  # fmt: skip
    return table(header, rows)


def _run_labels() -> dict[str, str]:
    """Run folder name -> "stem, seed N" for every seed (earlier runs too) of the demonstrations' results files."""
    labels = {}
    for path in sorted(RESULTS.glob("learn_*.json")):
        data = json.loads(path.read_text())
        for entry in (
            [*data.get("seeds", []), *data.get("earlier_runs", [])] if isinstance(data, dict) else []
        ):
            if isinstance(entry, dict) and entry.get("run_dir"):
                labels.setdefault(
                    Path(entry["run_dir"]).name, f"{_recipe(path.stem)}, seed {entry.get('seed')}"
                )
    return labels


def plan_following(name: str = "plan_following.json") -> str:
    """Where each probed BabaIsAI policy leaves the plan, per family: wins, best-move accuracy by turn span (the
    training window first), wins by the reset's plan length, and how lost episodes were lost
    (``benchmarks/probes/plan_following.py``)."""
    labels = _run_labels()
    rows = []
    for run, entry in load(name).get("runs", {}).items():
        for family, f in entry["families"].items():
            spans = [  # the policy's best-move rate, and the best a blind policy gets on the same states
                f"{a['best_hit']:.2f} ({a['blind']:.2f})" if a["best_hit"] is not None else "–"
                for a in f["accuracy"].values()
            ]
            plans = ", ".join(
                f"{k.removeprefix('plan ')}: {round(v['won'] * v['episodes'])}/{v['episodes']}"
                for k, v in f["by_plan_length"].items()
            )
            lost = f["lost"]
            rows.append([
                f"{labels.get(run, run)} ({entry['window']}-turn window)", family, f"{100 * f['won']:.0f} %", *spans, plans,
                f"{lost['reached_a_dead_end']} / {lost['episodes']}",
            ])  # fmt: skip
    header = ["run", "family", "won", "best move (blind): in the window", "next window", "after",
              "won by plan length", "dead ends / lost"]  # fmt: skip
    return table(header, rows)


def judge_temperature(name: str = "judge_temperature.json") -> str:
    """Each probed run's trained model on validation episodes at each decoding temperature: the mean success over
    the mix's kinds, its worst kind beside it, and the temperature chosen (``benchmarks/probes/judge_temperature.py``)."""
    data = load(name)
    runs = data.get("runs", {})
    keys = list(next(iter(runs.values()))["temperatures"]) if runs else []
    rows = []
    for run, entry in runs.items():
        cells = []
        for key in keys:
            t = entry["temperatures"][key]
            worst = min(t["kinds"], key=lambda kind: t["kinds"][kind]["success"])
            cells.append(f"{t['mean_success']:.3f} ({worst} {t['kinds'][worst]['success']:.2f})")
        rows.append([f"{run} ({entry['episodes']} a kind from seed {entry['seed']:,})", *cells])
    header = ["run", *("greedy" if float(k) == 0 else f"temperature {k}" for k in keys)]
    choice = data.get("choice", {})
    chosen = choice.get("chosen")
    note = "" if chosen is None else (
        f"\n\nMean success over the kinds (the worst kind in brackets); chosen: "
        f"{'greedy' if chosen == 0 else f'temperature {chosen:g}'}, the best mean over {len(choice['runs'])} runs."
    )  # fmt: skip
    return table(header, rows) + note


def bot_following(name: str = "bot_following.json") -> str:
    """Where each probed BabyAI policy leaves the bot's path, per kind: wins, agreement with the bot's moves, the
    kind's key interaction answered where the bot advises it and elsewhere, wins by the bot's solution length,
    and how lost episodes were lost (``benchmarks/probes/bot_following.py``)."""
    labels = _run_labels()
    rows = []
    for run, entry in load(name).get("runs", {}).items():
        for kind, f in entry["kinds"].items():
            lost, key = f["lost"], f["lost"]["key_interaction"]
            answered = f["interaction_answered"].get(key) if key else None
            reading = "–" if answered is None else " / ".join(
                "–" if answered[k] is None else f"{answered[k]:.2f}" for k in ("where_advised", "elsewhere")
            )  # fmt: skip
            lengths = ", ".join(
                f"{k.removeprefix('bot ')}: {round(v['won'] * v['episodes'])}/{v['episodes']}"
                for k, v in f["by_bot_length"].items()
            )
            ways = ("mission_failed", "never_reached_it", "reached_it_never_took_it", "took_it_and_lost")
            how = " / ".join(str(lost[way]) for way in ways) if key else ""
            moves = f["agreement"]["move"]["followed"]
            rows.append([
                labels.get(run, run), kind, f"{100 * f['won']:.0f} %", "–" if moves is None else f"{moves:.2f}",
                f"{key or '–'}: {reading}", lengths, f"{how} of {lost['episodes']}" if key else str(lost["episodes"]),
            ])  # fmt: skip
    header = ["run", "kind", "won", "follows the bot's moves", "key interaction: where advised / elsewhere",
              "won by the bot's length", "lost: mission failed / never reached it / reached, never took it / took "
              "it, lost after"]  # fmt: skip
    return table(header, rows)


def long_run(name: str = "long_run.json") -> str:
    """The hour-long run's memory and counters."""
    data = load(name)
    mem, counts = data["memory"], data["counters"]
    rows = [
        ["training", _minutes(data.get("train_s")), "updates", data.get("updates")],
        ["resident memory, first fifth (median)", f"{mem['first_fifth_median_mb']:.0f} MB", "last fifth",
         f"{mem['last_fifth_median_mb']:.0f} MB ({100 * mem['growth']:+.1f} %)"],
        ["resident memory, range", f"{mem['min_mb']:.0f}–{mem['max_mb']:.0f} MB", "least-squares slope",
         f"{mem['slope_mb_per_hour']:+.0f} MB per hour"],
        ["episodes ended", f"{counts['episodes_ended']:.0f}", "truncated by the step limit",
         f"{counts['episodes_truncated']:.0f}"],
        ["prompts cut to fit", f"{counts['prompt_cuts']:.0f}", "episodes carried over a window edge (mean)",
         f"{counts['mean_episodes_running_at_window_edge']:.1f}"],
        ["machine", f"{data['machine']['cpu_count']} cores, {data['machine']['cpu']}", "load average (start, end)",
         " → ".join(f"{x:.1f}" for x in data.get("load_average", []))],
    ]  # fmt: skip
    return table(["", "", "", ""], rows)


def _earlier(entry: Mapping[str, Any]) -> str:
    """`` (earlier run)`` for a replaced entry, with the judge's size where the judge has changed since."""
    if not entry.get("earlier"):
        return ""
    judge = entry.get("judge", {})
    return f" (earlier run, {judge['episodes']} episodes judged)" if "episodes" in judge else " (earlier run)"


def runs() -> str:
    """Every run the results files record, the replaced ones (``earlier_runs``) included: the log page."""
    rows = []
    for name, _ in DEMONSTRATIONS + OTHER_RECIPES:
        for entry in seeds(load(name), earlier=True):
            before, after = before_after(entry)
            rows.append(
                [
                    f"`{name}`" + _earlier(entry),
                    entry.get("seed", ""),
                    str(entry.get("date", ""))[:10],
                    entry.get("run_dir", ""),
                    figure(before),
                    figure(after),
                    _z(entry),
                    entry.get("updates", ""),
                    _minutes(entry.get("wall_s")),
                    _verdict(entry.get("passed")),
                ]
            )
    return table(
        ["results file", "seed", "date", "run", "before", "after", "gain (SE)", "updates", "wall", ""], rows
    )


def learn_demo() -> str:
    """The tiny demo's training-window figures, per seed (success over the first and last 10 % of updates)."""
    data, rows = load("learn.json"), []
    for entry in seeds(data):
        windows, seed = entry["windows"], entry.get("seed", "")
        first, last = windows["first"], windows["last"]
        rows += [
            [seed, "first 10 %", f"{first['first_update']}–{first['last_update']}", first["episodes"],
             f"{first['success'] * 100:.1f} % ± {first['se'] * 100:.1f}"],
            [seed, "last 10 %", f"{last['first_update']}–{last['last_update']}", last["episodes"],
             f"{last['success'] * 100:.1f} % ± {last['se'] * 100:.1f}"],
            [seed, "gap", "", "", f"z = {windows['z']:.1f} (needs {data.get('z_required', 3):g}); {_minutes(entry.get('wall_s'))}"],
        ]  # fmt: skip
    return table(["seed", "window", "updates", "episodes ended", "success"], rows)


#: Verlog's own success per task before -> after training (its README's table: Qwen2.5-3B-Instruct, PPO, one
#: model per task, 76.8k turns each, ~24 h on 4 GPUs), keyed by verlog's kind or family name: the reference
#: column of :func:`per_task`. BabyAI's putnext has no figure there.
VERLOG_REFERENCE: dict[str, tuple[float, float]] = {
    "goto": (0.88, 1.00),
    "pickup": (0.41, 1.00),
    "open": (0.09, 0.94),
    "pick_up_seq_go_to": (0.22, 0.65),
    "goto_win-distr_obj": (0.66, 1.00),
    "two_room-goto_win": (0.03, 0.89),
    "two_room-goto_win-distr_obj_rule": (0.22, 0.89),
    "two_room-maybe_break_stop-goto_win": (0.19, 0.36),
}
VERLOG_SETTING = (
    "Verlog's column is its own table: Qwen2.5-3B-Instruct, one model per task, 76.8k turns each (~24 h on 4 "
    "GPUs), its own prompt. A different model, budget and prompt: shown for reference, not as a comparison."
)


def _same_or_each(cells: list[tuple[Any, str]]) -> str:
    """One cell when every seed's figure is the same (the untrained model and random play the same episodes
    for every seed), else each seed's, labelled."""
    texts = [text for _, text in cells]
    if len(set(texts)) <= 1:
        return texts[0] if texts else ""
    return "<br>".join(f"{text} (seed {seed})" for seed, text in cells)


def _kind_rows(data: Mapping[str, Any]) -> list[list[str]]:
    """One row a kind of a mix's results: the kind, random's, the untrained model's and each seed's trained
    success, the seeds that passed it, and Verlog's own before -> after where it reports one."""
    entries = seeds(data)
    kinds = list(
        data.get("task", {}).get("kinds") or dict.fromkeys(k for e in entries for k in e.get("tasks", {}))
    )
    rows = []
    for kind in kinds:
        played = [(e.get("seed"), e["tasks"][kind]) for e in entries if kind in e.get("tasks", {})]
        reference = VERLOG_REFERENCE.get(kind)
        rows.append([
            kind,
            _same_or_each([(seed, figure(t.get("random"))) for seed, t in played]),
            _same_or_each([(seed, figure(t.get("initial"))) for seed, t in played]),
            "<br>".join(f"{figure(t.get('trained'))} (seed {seed})" for seed, t in played),
            f"{sum(1 for _, t in played if t.get('verdict', {}).get('passed') is True)} of {len(played)}",
            f"{reference[0] * 100:.0f} → {reference[1] * 100:.0f} %" if reference else "",
        ])  # fmt: skip
    return rows


def _played_on(data: Mapping[str, Any], episodes: str = "") -> str:
    """The sentence that says what each kind's figures were played on and the rule a seed passes by;
    ``episodes`` replaces the file's own count (a table of several games: each game's)."""
    if "episodes" not in data or "eval_seed" not in data:
        return ""
    return (
        f"Each kind: {episodes or data['episodes']} held-out episodes (seeds from {data['eval_seed']:,}) played by "
        f"random, the untrained and each seed's trained model; a seed passes a kind when its trained model beats "
        f"both by {data.get('z_required', 3):g} SE of the difference. "
    )  # fmt: skip


KIND_HEADER = ["task", "random", "before", "after", "seeds passed", "Verlog, Qwen2.5-3B (before → after)"]


def per_task(name: str) -> str:
    """A mix judged per task kind (``benchmarks/demos/learn.py`` on a mixed env), shaped like Verlog's table:
    one row per kind (:func:`_kind_rows`), then what was played, the rule, and why Verlog's figures are a
    reference only. Not in :data:`RENDERERS` until its results file exists (``learn_babyai_mix.json``,
    ``learn_babaisai_mix.json``, registered as ``babyai_mix`` and ``babaisai_mix``): every registered table must
    render from the files."""
    data = load(name)
    note = f"{_played_on(data)}{_trained_as(seeds(data))} {VERLOG_SETTING}"
    return table(KIND_HEADER, _kind_rows(data)) + f"\n\n{note}"


#: The mixes README's table shows, one model per game: (game, results file).
MIXES: list[tuple[str, str]] = [("BabyAI", "learn_babyai_mix.json"), ("BabaIsAI", "learn_babaisai_mix.json")]


def verlog_table(mixes: Iterable[tuple[str, str]] = MIXES) -> str:
    """Every mix's kinds in one table shaped like Verlog's (README's: one table, one note, where
    :func:`per_task` gives each game its own on the results page)."""
    rows, budgets, counts, first = [], [], [], None  # counts: (game, its episodes a kind)
    for game, name in mixes:
        data = load(name)
        rows += [[f"{game} {row[0]}", *row[1:]] for row in _kind_rows(data)]
        budgets.append(f"{game}: {_trained_as(seeds(data)).removeprefix('Here: ')}")
        counts.append((game, data.get("episodes")))
        first = first or data
    # The games may be judged on different counts (BabaIsAI's 512: random wins most of one family).
    episodes = "" if len({n for _, n in counts}) <= 1 else ", ".join(f"{n} ({game})" for game, n in counts)
    played_on = _played_on(first, episodes) if first else ""
    return table(KIND_HEADER, rows) + f"\n\n{played_on}{' '.join(budgets)} {VERLOG_SETTING}"


def _trained_as(entries: list[dict[str, Any]]) -> str:
    """What the mix's seeds trained: the model (from the first seed's config) and each seed's turns and time."""
    model = entries[0].get("config", {}).get("model", {}) if entries else {}
    name = (
        "a tiny randomly initialised model"
        if model.get("build_tiny")
        else model.get("build") or model.get("path")
    )
    name = name or "the preset's model"
    # One-step branches are trained on but not played: the turn counts are the played ones.
    branched = bool(entries and entries[0].get("config", {}).get("algo", {}).get("branch_actions"))
    unit = "played turns" if branched else "turns"
    budgets = [
        f"{e['turns']:,} {unit} in {_minutes(e.get('wall_s')) or 'an unrecorded time'} (seed {e.get('seed')})"
        for e in entries
        if _number(e.get("turns")) is not None
    ]
    tried = " (each played turn also tries every offered move once in a copy of the env)" if branched else ""
    return f"Here: {name}, one model for every kind" + (f"; {', '.join(budgets)}{tried}." if budgets else ".")


def speed() -> str:
    """How fast: env steps, Crafter reset, GAE, rollout, update, replay."""
    envs, gae, rollout, update, replay = (
        load(f) for f in ("envs.json", "gae.json", "rollout.json", "update.json", "replay.json")
    )
    games = envs["games"]
    ratios = ", ".join(f"{game} {g['text_over_raw']:.2f}×" for game, g in games.items())
    reset = envs["crafter_reset_ms"]
    gae_ratio = " and ".join(f"{v:.0f}× ({k})" for k, v in gae["ratio_at_R512"].items())
    gae_diff = max(r["max_abs_diff_advantages"] for r in gae["results"])
    results = rollout["results"]
    turns = " / ".join(f"{r['turns_per_s']:.1f}" for r in results)
    shares = " / ".join(f"{r['env_prompt_share'] * 100:.1f} %" for r in results)
    sizes = " / ".join(str(r["num_envs"]) for r in results)
    tiny = update["cases"]["tiny"]
    replays = ", ".join(f"{r['actions']} actions {r['replay_s']:.1f} s" for r in replay["rows"])
    rows = [
        ["text env / raw game steps/s (`envs.json`)", ratios, f"≥ {envs['targets']['text_over_raw']:g}×"],
        ["Crafter reset, median (`envs.json`)",
         f"{reset['text_median']:.0f} ms (raw `crafter.Env` {reset['raw_median']:.0f} ms)",
         f"≤ {envs['targets']['crafter_reset_ms']:g} ms"],
        [f"dual-discount GAE vs a per-token loop, T={gae['settings']['T']}, N={gae['settings']['N']}, R=512 "
         "(`gae.json`)", f"{gae_ratio} faster, max diff {gae_diff:.1e}",
         f"≥ {gae['target_ratio']:g}×, ≤ {gae['tolerance']:g}"],
        [f"rollout with `envs/tiny.toml`, N = {sizes} (`rollout.json`)",
         f"{turns} turns/s; env + prompt {shares} of a turn",
         f"env + prompt ≤ {rollout['target_env_prompt_share'] * 100:g} %"],
        ["PPO update, tiny model, CPU (`update.json`)", f"{tiny['tokens_per_s']:,.0f} tokens/s", ""],
        ["resume: replaying a Crafter sub-env (`replay.json`)", replays, ""],
    ]  # fmt: skip
    return table(["benchmark", "figure", "target"], rows)


def long_prompts() -> str:
    """Where a SmolLM2 Crafter turn's time goes, with the shared prompt prefix off and on (``prefix_update.json``),
    and branch scoring with each row whole against each prompt once (``branch_scoring.json``)."""
    prefix, branch = load("prefix_update.json"), load("branch_scoring.json")
    rows = []
    for name in ("off", "on"):
        r = prefix[name]
        rows.append([f"`{prefix['preset']}`, shared prefix {name}", f"{r['charts/turns_per_s']:.2f}",
                     f"{r['charts/prompt_tokens']:.0f} / {r['charts/response_tokens']:.1f}",
                     f"{r['time/generate']:.1f}", f"{r['time/score']:.1f}", f"{r['time/update']:.1f}",
                     f"{r['time/weight_sync']:.1f}", f"{r['time/total']:.1f}"])  # fmt: skip
    load_avg = prefix["load_average"]
    split = table(["setting", "turns/s", "prompt / answer tokens a turn", "generate s", "score s", "update s",
                   "weight sync s", "update total s"], rows)  # fmt: skip
    note = (f"\n\n{prefix['updates_each']} updates each way, alternating, {prefix['turns_per_update']} turns each; "
            f"{prefix['precision']}, {prefix['machine'].get('cpu', 'CPU')}, load {load_avg[0]:.1f}–{load_avg[1]:.1f}.\n\n")  # fmt: skip
    branches = table(
        ["branch scoring (`branch_scoring.json`)", "rows (played)", "distinct prompts", "tokens through the model",
         "seconds", "largest log-prob gap"],
        [[f"`{branch['preset']}` {' '.join(branch['overrides'])}", f"{branch['rows']} ({branch['played_rows']})",
          branch["distinct_prompts"], f"{branch['tokens_whole']:,} → {branch['tokens_shared']:,}",
          f"{branch['seconds_whole']:.1f} → {branch['seconds_shared']:.1f} ({branch['speedup']:.1f}×)",
          f"{branch['max_logprob_gap']:.1e}"]],
    )  # fmt: skip
    load_b = branch["load_average"]
    cache = load("prefix_cache.json")
    cached = table(
        ["vLLM prefix cache (`prefix_cache.json`)", "generation an update s", "first batch s", "later batches s"],
        [[f"{name} ({cache['batches_per_update']} batches of {cache['prompts_per_batch']} "
          f"{cache['prompt_tokens']:.0f}-token prompts)", f"{cache[name]['update_generate_s']:.1f}",
          f"{cache[name]['first_batch_s']:.2f}", f"{cache[name]['later_batch_s']:.2f}"] for name in ("off", "on")],
    )  # fmt: skip
    load_c = cache["load_average"]
    return (
        split + note + branches + f"\n\n{branch['precision']}; load {load_b[0]:.1f}–{load_b[1]:.1f} while "
        "scoring.\n\n" + cached
        + f"\n\n{cache['speedup']:.1f}× with the cache, median of {cache['updates']} updates, `{cache['preset']}`; "
        f"load {load_c[0]:.1f}–{load_c[1]:.1f}."
    )  # fmt: skip


def compare(name: str = "compare.json") -> str:
    """PPO + GAE against the critic-free estimators at the same turn budget."""
    data = load(name)
    rows = []
    for method in data["methods"].values():
        per_seed = ", ".join(f"{v:.2f}" for v in method.get("final_success_per_seed", []))
        share = method.get("no_signal_group_share")
        left = method.get("filtered_group_share")
        rows.append(
            [
                method["label"],
                f"{method['final_success']:.3f} ± {method['final_success_se']:.3f}",
                per_seed,
                f"{method['turns_per_s']:.1f}",
                f"{method['max_rss_mb']:.0f}",
                f"{method['critic_params']:,}",
                f"{share * 100:.0f} %" if share is not None else "–",
                f"{left * 100:.0f} %" if left is not None else "–",
            ]
        )
    budget = data["turn_budget"]
    return table(
        [f"method (`{name}`)", f"final success (last {budget // 4:,} of {budget:,} turns)", "per seed",
         "turns/s", "peak RSS (MB)", "critic parameters", "groups without signal (first draw)",
         "groups left out"],
        rows,
    )  # fmt: skip


def compare_memory() -> str:
    data = load("compare-memory.json")
    rows = [
        [m["label"], f"{m['max_rss_mb']:,.0f}", f"{m['critic_params']:,}"] for m in data["methods"].values()
    ]
    return table(["SmolLM2-135M, one update on the CPU (`compare-memory.json`)", "peak RSS (MB)", "critic parameters"], rows)  # fmt: skip


def _eval_row(folder: str) -> list[str]:
    data = load(f"eval/{folder}/summary.json")
    agent = data["agent"]
    name = "SmolLM2" if agent.get("agent") == "model" else agent.get("agent", "")
    (game, scores), *_ = data["games"].items()
    cap = data.get("env_kwargs", {}).get("max_episode_steps")
    return [
        f"{game} ({scores['tasks']} task{'s' if scores['tasks'] != 1 else ''} × {data['episodes_per_task']}"
        + (f", {cap} steps" if cap else "")
        + ")",
        name,
        f"{scores['score']:.1f} ± {scores['score_se']:.1f}",
        f"{scores['success_rate']:.1f}",
        f"{scores['invalid_action_rate']:.2f}",  # verlog eval writes a percentage
        _duration(data.get("elapsed_s")),
        f"`eval/{folder}`",
    ]


EVAL_HEADER = ["suite (tasks × episodes, step cap)", "agent", "BALROG score ± SE", "success %", "invalid %", "time", "files"]  # fmt: skip


def scores() -> str:
    """BALROG-comparable scores of the baselines at BALROG's episode counts."""
    folders = ("random-babyai", "random-babaisai", "oracle-babaisai", "random-crafter")
    return table(EVAL_HEADER, (_eval_row(f) for f in folders))


def zero_shot() -> str:
    """SmolLM2 zero-shot beside the random agent on the same capped episodes."""
    pairs = (("smollm2-babyai", "random-babyai-32"), ("smollm2-crafter", "random-crafter-50"),
             ("smollm2-babaisai", "random-babaisai-20"))  # fmt: skip
    return table(EVAL_HEADER, (_eval_row(f) for pair in pairs for f in pair))


def prompts() -> str:
    """SmolLM2's zero-shot valid-answer rate for each prompt setting (``prompts.json``)."""
    data = load("prompts.json")
    settings: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in data["rows"]:
        key = (row["style"], row["examples"], row["format"], row["memory"])
        settings.setdefault(key, {})[row["game"]] = row
    games = ("babyai", "crafter", "babaisai")
    out = []
    for (style, examples, fmt, memory), by_game in settings.items():
        label = f"{style}, {examples} example{'s' if examples != 1 else ''}, {fmt}, {memory}"
        valid = [f"{by_game[g]['valid']:.2f}" if g in by_game else "" for g in games]
        tokens = " / ".join(f"{by_game[g]['prompt_tokens']:.0f}" for g in games if g in by_game)
        out.append([label, *valid, tokens])
    return table(["prompt (style, examples, format, memory)", "BabyAI", "Crafter", "BabaIsAI", "prompt tokens"], out)  # fmt: skip


def first_moves() -> str:
    data = load("first_moves.json")
    rows = [
        [r["examples"], f"{r['p_move']:.2f}", f"{r['p_toward_given_move']:.3f}", f"{r['uniform_toward']:.3f}",
         f"{r['argmax_toward']:.2f}", ", ".join(f"{k} {v:.2f}" for k, v in r["move_shares"].items())]
        for r in data["rows"]
    ]  # fmt: skip
    return table(["worked examples", "P(a move)", "P(toward win \\| move)", "uniform", "argmax toward", "move shares"], rows)  # fmt: skip


def action_mixes(name: str = "action_mixes.json") -> str:
    """Fixed mixes of Crafter actions played blind on the judged episodes (``action_mixes.json``)."""
    data = load(name)
    rows = [
        [r["mix"], *(f"{r[k] * s:.{d}f} ± {r[k + '_se'] * s:.{d}f}"
                     for k, s, d in (("return", 1, 2), ("achievements", 1, 2), ("progression", 100, 1), ("cells", 1, 1)))]
        for r in data["rows"]
    ]  # fmt: skip
    return table(["mix (played blind)", "return", "achievements", "progression %", "cells visited"], rows)


def rollout_smollm2() -> str:
    data = load("rollout-smollm2/rollout.json")
    rows = [
        [r["backend"], f"{r['turns_per_s']:.1f}", f"{r['generated_tokens_per_s']:.0f}",
         f"{r['ms_per_turn']['generate']:.0f}"]
        for r in data["results"]
    ]  # fmt: skip
    for ratio in data.get("vllm_over_transformers", []):
        rows.append(["ratio vLLM / transformers", f"{ratio['turns_per_s']:.2f}×", f"{ratio['generated_tokens_per_s']:.2f}×", ""])  # fmt: skip
    return table(["sampler", "turns/s", "new tokens/s", "ms generating per turn"], rows)


def gpu_check(name: str = "gpu.json") -> str:
    """The prepared GPU check's figures (``nox -s gpu_check``): one row per measured leg, then what was skipped."""
    data = load(name)
    device, versions = data["device"], data["versions"]
    rows = []
    for leg in data["legs"]:
        split = leg.get("time_per_update")
        if split is None:  # a model build, the GPU tests, a skipped leg: said below the table
            continue
        other = split["other_s"] + split["env_s"] + split["prompt_s"]
        peak, mfu = leg.get("peak_gpu_memory_gib"), leg.get("mfu")
        rows.append(
            [leg["name"], f"{leg['actor_params'] / 1e6:,.{1 if leg['actor_params'] < 1e7 else 0}f}M", f"{leg['turns_per_s']:.2f}",
             f"{leg['generated_tokens_per_s']:,.0f}",
             f"{split['sampling_s']:.1f} / {split['scoring_s']:.1f} / {split['update_s']:.1f} / {other:.2f}",
             "-" if peak is None else f"{peak:.1f}", "-" if mfu is None else f"{100 * mfu:.1f} %"]
        )  # fmt: skip
    notes = [f"{leg['name']} {'skipped' if 'skipped' in leg else 'FAILED'} ({leg.get('skipped') or leg['failed']})"
             for leg in _gpu_not_measured(data)] + [_gpu_tests(data)]  # fmt: skip
    sizes = ", ".join(data["plan"]["sizes"][:3])
    head = (
        f"{device['name']}, {data['date'][:10]}, torch {versions['torch']}, transformers {versions['transformers']}, "
        f"commit {versions['verlog_commit']}; {sizes}, answers up to {_response_cap(data)} tokens, random weights, "
        "transformers sampler. Seconds per update: sampling / scoring / update / env + prompts."
    )
    body = table(["leg", "params", "turns/s", "gen tok/s", "s per update", "peak GiB", "MFU"], rows)
    return body + "\n\n" + head + " " + "; ".join(n for n in notes if n) + "."


def gpu_check_summary(name: str = "gpu.json") -> str:
    """The GPU check's real-shape legs in one paragraph (README); :func:`gpu_check` has every leg."""
    data = load(name)
    parts = []
    for leg in data["legs"]:
        split = leg.get("time_per_update")
        if split is None or leg["shape"] == "tiny":
            continue
        peak, mfu = leg.get("peak_gpu_memory_gib"), leg.get("mfu")
        memory = "" if peak is None else f", {peak:.0f} GiB"
        use = "" if mfu is None else f", MFU {100 * mfu:.0f} %"
        share = 100 * split["sampling_s"] / split["total_s"]
        parts.append(f"{leg['name']}: {leg['turns_per_s']:.2f} turns/s{memory}{use}, sampling {share:.0f} %")
    skipped = [leg["name"] for leg in _gpu_not_measured(data)]
    tail = f" Skipped: {'; '.join(skipped)}." if skipped else ""
    tested = f" {_gpu_tests(data)}." if _gpu_tests(data) else ""
    return (
        f"Last run: {data['device']['name']}, {data['date'][:10]}, random weights, transformers sampler, "
        f"answers of up to {_response_cap(data)} tokens. {'; '.join(parts)}.{tail}{tested}"
    )


def _gpu_not_measured(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The GPU check's legs that were skipped or failed."""
    return [leg for leg in data["legs"] if "skipped" in leg or "failed" in leg]


def _gpu_tests(data: Mapping[str, Any]) -> str:
    """What the GPU check's ``tests`` leg counted, or "" without one."""
    tests = next((leg for leg in data["legs"] if leg["name"] == "tests"), None)
    return f"GPU tests: {tests['tests_passed']} passed, {tests['tests_failed']} failed" if tests else ""


def _response_cap(data: Mapping[str, Any]) -> str:
    """The check's ``prompt.max_response_tokens``, read from its size overrides."""
    for item in data["plan"]["sizes"]:
        if item.startswith("prompt.max_response_tokens="):
            return item.split("=", 1)[1]
    return "?"


RENDERERS: dict[str, Callable[[], str]] = {
    "headline": headline,
    "demonstrations": lambda: demonstrations(DEMONSTRATIONS),
    "other_recipes": lambda: demonstrations(OTHER_RECIPES, legend=True),
    "runs": runs,
    "learn_demo": learn_demo,
    "speed": speed,
    "compare": compare,
    "compare_resample": lambda: compare("compare-resample2.json"),
    "compare_memory": compare_memory,
    "scores": scores,
    "zero_shot": zero_shot,
    "prompts": prompts,
    "first_moves": first_moves,
    "action_mixes": action_mixes,
    "rollout_smollm2": rollout_smollm2,
    "crafter": crafter,
    "long_prompts": long_prompts,
    "crafter_achievements": crafter_achievements,
    "ablation": ablation,
    "crafter_reading": crafter_reading,
    "ablation_before_reading": lambda: ablation("learn_crafter_ablation_before_reading.json"),
    "crafter_reading_before_reading": lambda: crafter_reading("learn_crafter_ablation_before_reading.json"),
    "crafter_before_reading": lambda: crafter("learn_crafter_before_reading.json"),
    "crafter_before_reading_achievements": lambda: crafter_achievements("learn_crafter_before_reading.json"),
    "tech_tree_levers": tech_tree_levers,
    "crafter_ends": crafter_ends,
    "state_dependence": state_dependence,
    "plan_following": plan_following,
    "bot_following": bot_following,
    "ablation_unshaped": lambda: ablation("learn_crafter_ablation_unshaped.json"),
    "crafter_reading_unshaped": lambda: crafter_reading("learn_crafter_ablation_unshaped.json"),
    "crafter_unshaped": lambda: crafter("learn_crafter_unshaped.json"),
    "crafter_unshaped_achievements": lambda: crafter_achievements("learn_crafter_unshaped.json"),
    "ablation_free": lambda: ablation("learn_crafter_ablation_free.json"),
    "crafter_reading_free": lambda: crafter_reading("learn_crafter_ablation_free.json"),
    "crafter_speed": training_speed,
    "crafter_speed_levers": training_levers,
    "long_run": long_run,
    "constrained_vs_free": constrained_vs_free,
    "constrained_vs_free_real": constrained_vs_free_success,
    "crafter_free": lambda: crafter("learn_crafter_free.json"),
    "crafter_free_achievements": lambda: crafter_achievements("learn_crafter_free.json"),
    "crafter_constrained": lambda: crafter("learn_crafter_constrained.json"),
    "crafter_constrained_achievements": lambda: crafter_achievements("learn_crafter_constrained.json"),
    "crafter_levers": lambda: crafter("learn_crafter_levers.json"),
    "crafter_levers_achievements": lambda: crafter_achievements("learn_crafter_levers.json"),
    "babyai_mix": lambda: per_task("learn_babyai_mix.json"),
    "babaisai_mix": lambda: per_task("learn_babaisai_mix.json"),
    "babaisai_mix_long": lambda: per_task("learn_babaisai_mix_long.json"),
    "babaisai_mix_walk": lambda: per_task("learn_babaisai_mix_walk.json"),
    "babaisai_mix_walk_512": lambda: per_task("learn_babaisai_mix_walk_512.json"),
    "babaisai_mix_300": lambda: per_task("learn_babaisai_mix_300.json"),
    "judge_temperature": judge_temperature,
    "verlog_table": verlog_table,
    "gpu_check": gpu_check,
    "gpu_check_summary": gpu_check_summary,
}

#: The SmolLM2 Crafter recipes on the results page (``learn_crafter_real<suffix>.json``): the preset and each attempt
#: get a table of the judged figures and one of the achievements, read off the results folder so that a new
#: attempt's file needs no line here.
CRAFTER_REAL_SUFFIXES = tuple(
    sorted(path.stem.removeprefix("learn_crafter_real") for path in RESULTS.glob("learn_crafter_real*.json"))
)
for _suffix in CRAFTER_REAL_SUFFIXES:
    RENDERERS[f"crafter_real{_suffix}"] = functools.partial(crafter, f"learn_crafter_real{_suffix}.json")
    RENDERERS[f"crafter_real{_suffix}_achievements"] = functools.partial(
        crafter_achievements, f"learn_crafter_real{_suffix}.json"
    )


def render(name: str) -> str:
    """The markdown of one named table."""
    if name not in RENDERERS:
        raise KeyError(f"no results table named {name!r}; known: {', '.join(RENDERERS)}")
    return RENDERERS[name]()


def expand(markdown: str) -> str:
    """Replace every ``<!-- results: NAME -->`` line with its table, indented as the marker is."""
    expanded = MARKER.sub(
        lambda m: "\n".join(m.group(1) + line for line in render(m.group(2)).split("\n")), markdown
    )
    left = [line for line in expanded.splitlines() if line.lstrip().startswith("<!-- results:")]
    if left:  # a marker with text after it, or a name that is not a word
        raise ValueError(f"a results marker that is misspelt: {left[0].strip()!r}")
    return expanded


def readme_block(text: str) -> str:
    """README's text with each ``<!-- results: NAME -->`` ... ``<!-- /results -->`` block (the headline table
    first) rewritten from the results files."""
    if "<!-- results: headline -->" not in text or not README_BLOCK.search(text):
        raise ValueError("README.md has no '<!-- results: headline -->' ... '<!-- /results -->' block")
    return README_BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + "\n" + m.group(3), text)


# ------------------------------------------------------------------------------------------ mkdocs hooks
#: Figures the pages show straight from benchmarks/results/, published under results/img/.
FIGURES = ("*.png", "rollout-smollm2/*.png")


def on_files(files: Any, config: Any) -> Any:
    """Publish benchmarks/results' PNGs as ``results/img/NAME.png``: the pages show the files themselves."""
    from mkdocs.structure.files import File

    for pattern in FIGURES:
        for path in sorted(RESULTS.glob(pattern)):
            uri = "results/img/" + path.relative_to(RESULTS).as_posix().replace("/", "-")
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Print a results table, or rewrite README's headline table.")
    parser.add_argument("name", nargs="?", choices=sorted(RENDERERS), help="the table to print")
    parser.add_argument("--readme", action="store_true", help="rewrite README.md's headline block in place")
    args = parser.parse_args()
    if args.readme:
        readme = ROOT / "README.md"
        readme.write_text(readme_block(readme.read_text()))
    else:
        print(render(args.name or "headline"))
