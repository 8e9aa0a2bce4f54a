"""What each turn-level piece buys on long episodes: the Crafter demonstration with one piece taken out at a time.

    nox -s ablation_crafter                                   # every variant x seeds 1 2 3, missing cells only
    python -m benchmarks.demos.ablation_crafter [--seeds 1 2 3] [--variants grpo gigpo] [--turns 120832] [--table]

Variants (``learn_crafter.VARIANTS``), each trained from the preset (``envs/learn_crafter.toml``: answers
constrained to the valid actions, entropy bonus 0.03) for the same number of turns played (``run.total_turns``,
critic pre-training's turns included) and judged on the same held-out episodes:

- ``verlog``: the preset as it is (window-edge bootstrap, critic pre-training, dual-discount GAE); its row is the
  preset's own seeds, ``learn_crafter.json``, unless the ablation's file holds its own;
- ``no-bootstrap``: an episode still running at the batch end gets 0 for the value after the cut
  (``ppo.window_bootstrap = false``), as a trainer does that treats a batch end as an episode end;
- ``no-warmup``: no critic pre-training (``ppo.critic_warmup_batches = 0``);
- ``grpo``: critic-free GRPO in groups of 8 envs sharing a seed, which must play whole episodes (up to the
  2,000-step cap) before it can update: a group's turns all share their episode's normalised return;
- ``gigpo``: GRPO plus GiGPO's step term (turns of a group that met the same observation compared by their
  discounted return from there), with the same whole-episode groups.

Each cell is one ``learn_crafter.py --variant V --seed S`` run in a child process; a cell already in the results
file that played at least the turn budget is kept (``--force`` reruns it). A stream claims a cell while it runs
(``benchmarks.common.claimed``), so several streams over the same grid, side by side, never run a cell twice.
``--table`` only prints the table from the results file. The script exits 0 whichever way the results come out:
an ablation is published as it falls.

The first ablation, on the free preset of its day (no constraint, no entropy bonus, seeds 1 and 2), is kept in
``learn_crafter_ablation_free.json``; it was run as ``--stem learn_crafter_ablation_free --seeds 1 2 --variants
verlog no-bootstrap no-warmup grpo entropy sampling.constrain=off ppo.entropy_coef=0.0``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, claimed, locked, mean_se
from benchmarks.demos.learn_crafter import ABLATION, VARIANTS, plot

STEM = "learn_crafter_ablation"
#: The preset's own results: the full preset's row when the ablation's file has none.
PRESET_STEM = "learn_crafter"


def cells(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The results file's entries by (variant, seed)."""
    if not path.is_file():
        return {}
    return {(s["variant"], s["seed"]): s for s in json.loads(path.read_text())["seeds"]}


def with_preset(entries: dict[tuple[str, int], dict[str, Any]], folder: Path) -> dict[tuple[str, int], dict]:
    """``entries`` with the preset's own seeds as the ``verlog`` row when they hold none of theirs."""
    if any(v == "verlog" for v, _ in entries):
        return entries
    return {**entries, **{k: e for k, e in cells(folder / f"{PRESET_STEM}.json").items() if k[0] == "verlog"}}


def variants_in(entries: dict[tuple[str, int], dict[str, Any]]) -> list[str]:
    """The variants to tabulate: the ablation's, then any other a file holds (the first one's ``entropy``)."""
    return [*ABLATION, *sorted({v for v, _ in entries} - set(ABLATION))]


def _z(runs: Sequence[dict[str, Any]], name: str) -> list[float]:
    """Each run's gain ``name`` in SEs, to one decimal (NaN where the run has no such gain)."""
    return [round(e["gains"].get(name, {}).get("z", math.nan), 1) for e in runs]


def table(entries: dict[tuple[str, int], dict[str, Any]], variants: Sequence[str]) -> list[dict[str, Any]]:
    """One row per variant: the trained return, Crafter score, achievements and progression averaged over its
    seeds (± SE over seeds when there are several), the per-seed z of the judged figures over the untrained
    model and random, and the training time."""
    rows = []
    for variant in variants:
        runs = [e for (v, _), e in sorted(entries.items()) if v == variant]
        if not runs:
            continue
        ret, ret_se = mean_se([e["trained"]["return"] for e in runs])
        prog, prog_se = mean_se([e["trained"]["progression"] for e in runs])
        score, score_se = mean_se([e["trained"].get("crafter_score", math.nan) for e in runs])
        got, got_se = mean_se([e["trained"].get("achievements", math.nan) for e in runs])
        rows.append({
            "variant": variant,
            "seeds": [e["seed"] for e in runs],
            "return": ret, "return_se": ret_se,
            "crafter_score": score, "crafter_score_se": score_se,
            "achievements": got, "achievements_se": got_se,
            "progression": prog, "progression_se": prog_se,
            "length": sum(e["trained"]["length"] for e in runs) / len(runs),
            "z_return_over_untrained": _z(runs, "return_over_untrained"),
            "z_return_over_random": _z(runs, "return_over_random"),
            "z_crafter_score_over_untrained": _z(runs, "crafter_score_over_untrained"),
            "z_crafter_score_over_random": _z(runs, "crafter_score_over_random"),
            "passed": [e["passed"] for e in runs],
            "turns": [e["turns"] for e in runs],
            "updates": [e["updates"] for e in runs],
            "train_min": [round((e["train_s"] or math.nan) / 60, 1) for e in runs],
            # each seed's judged figures: a variant short of seeds is read against the preset on the same ones
            "per_seed": {str(e["seed"]): {k: e["trained"].get(k, math.nan) for k in ("return", "crafter_score")}
                         for e in runs},
        })  # fmt: skip
    return rows


def print_table(rows: list[dict[str, Any]], untrained: dict[str, Any], random: dict[str, Any]) -> None:
    nan = math.nan  # a block judged before Crafter's score existed has none
    print(f"{'variant':<13} {'return':>12} {'score':>12} {'progr %':>12} {'length':>7} {'z vs random':>12} "
          f"{'updates':>9}")  # fmt: skip
    for name, f in (("random", random), ("untrained", untrained)):
        print(f"{name:<13} {f['return']:>6.2f} ± {f['return_se']:.2f} {f.get('crafter_score', nan):>6.2f} ± "
              f"{f.get('crafter_score_se', nan):.2f} {100 * f['progression']:>6.1f} ± "
              f"{100 * f['progression_se']:.1f} {f['length']:>7.0f}")  # fmt: skip
    for r in rows:
        print(
            f"{r['variant']:<13} {r['return']:>6.2f} ± {r['return_se']:.2f} {r.get('crafter_score', nan):>6.2f} ± "
            f"{r.get('crafter_score_se', nan):.2f} {100 * r['progression']:>6.1f} ± "
            f"{100 * r['progression_se']:.1f} {r['length']:>7.0f} {str(r['z_return_over_random']):>12} "
            f"{str(r['updates']):>9}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(ABLATION))
    parser.add_argument("--stem", default=STEM, help=f"results file name (default {STEM})")
    parser.add_argument("--turns", type=int, default=120_832, help="turns played per run, every variant")
    parser.add_argument("--force", action="store_true", help="rerun cells already in the results file")
    parser.add_argument("--table", action="store_true", help="only print the table from the results file")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "overrides", nargs="*", metavar="section.key=value", help="config overrides, every cell"
    )
    args = parser.parse_args(argv)
    path = args.out / f"{args.stem}.json"
    if not args.table:
        for variant in args.variants:
            for seed in args.seeds:
                with claimed(f"{args.stem}-{variant}-{seed}") as mine:
                    done = with_preset(cells(path), args.out).get((variant, seed))
                    if not mine or (done and done["turns"] >= args.turns and not args.force):
                        if not mine:
                            print(f"{variant} seed {seed}: another stream is running it", flush=True)
                        continue
                    command = [
                        sys.executable, "-m", "benchmarks.demos.learn_crafter", "--variant", variant,
                        "--seed", str(seed), "--stem", args.stem, "--out", str(args.out),
                        f"run.total_turns={args.turns}", "run.total_updates=100000", *args.overrides,
                    ]  # fmt: skip
                    print(" ".join(command), flush=True)
                    subprocess.run(
                        command, check=False, cwd=ROOT
                    )  # one that does not learn exits 1: a result
    if not args.out.is_dir():
        print(f"no results in {path}")
        return 1
    with locked(args.out):  # a cell finishing in another process writes the same file under this lock
        entries = with_preset(cells(path), args.out)
        if not entries:
            print(f"no results in {path}")
            return 1
        rows = table(entries, variants_in(entries))
        summary = json.loads(path.read_text())
        summary["table"] = rows
        path.write_text(json.dumps(summary, indent=2) + "\n")
    any_entry = next(iter(entries.values()))
    print_table(rows, any_entry["untrained"], any_entry["random"])
    # the preset's own seeds are drawn too: they are the full preset's row
    plot({**summary, "seeds": list(entries.values())}, path.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
