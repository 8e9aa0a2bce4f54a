"""Why Crafter's judged episodes end: what killed each agent's player, and how long it lived.

The trained tiny agents reach a Crafter score above PPO's but a return below it. Crafter's return is the
achievements unlocked, less 0.9 for a death (the health lost), so an agent that dies early has little time to
unlock anything. An episode's last step names its end (``info["end_reason"]``: ``lava``, ``zombie``, ``hunger``,
``thirst``, ``fatigue``, ``arrow`` or ``max_steps``) and ``verlog eval`` keeps it in each episode's record; this
probe reads evaluation folders and counts the ends per agent (``benchmarks.demos.judge.figures``' ``ends``).

    python -m benchmarks.probes.crafter_ends LABEL=FOLDER [LABEL=FOLDER ...]

A FOLDER is an evaluation folder (its ``episodes.jsonl``) or a demonstration's run folder (its judged
``eval-trained``). The demonstrations keep random's episodes under ``runs/random/`` and the untrained model's
under ``runs/judge/``. Writes ``benchmarks/results/crafter_ends.json``: per agent, the episodes, their mean length
and return, and the count of each end (``order``: the ends in the order a table shows them).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, machine
from benchmarks.demos.judge import figures

STEM = "crafter_ends"
#: The ends in the order a table shows them: the killers first, the step cap last.
ENDS = ("zombie", "arrow", "lava", "thirst", "hunger", "fatigue", "max_steps")


def folder_of(path: Path) -> Path:
    """The evaluation folder ``path`` names: itself, or a run folder's judged ``eval-trained``."""
    for candidate in (path, path / "eval-trained"):
        if (candidate / "episodes.jsonl").is_file():
            return candidate
    raise SystemExit(
        f"{path} holds no episodes.jsonl (nor {path / 'eval-trained'}): give an evaluation folder"
    )


def agent_row(label: str, folder: Path) -> dict[str, Any]:
    """One agent's ends, from its evaluation folder; refused when its episodes do not say why they ended."""
    f = figures(folder)
    ends = f.get("ends", {})
    if sum(ends.values()) != f["episodes"]:
        raise SystemExit(
            f"{folder}: {f['episodes'] - sum(ends.values())} of its {f['episodes']} episodes do not say why they "
            "ended (played before Crafter recorded it): play them again with verlog eval"
        )
    return {
        "agent": label,
        "folder": str(folder),
        "episodes": f["episodes"],
        "length": f["length"],
        "length_se": f["length_se"],
        "return": f["return"],
        "return_se": f["return_se"],
        "ends": ends,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("agents", nargs="+", metavar="LABEL=FOLDER")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = []
    for item in args.agents:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            parser.error(f"{item!r}: give each agent as LABEL=FOLDER, e.g. random=runs/random/<key>")
        rows.append(agent_row(label, folder_of(Path(path))))
    # a death with several vitals at zero is its own end ("hunger+thirst"): after the usual ones
    order = [*ENDS, *sorted({end for r in rows for end in r["ends"]} - set(ENDS))]
    for r in rows:  # an agent a paragraph, the ends that happened with their counts, wrapped at 80 columns
        ends = ", ".join(f"{e} {r['ends'][e]}" for e in order if r["ends"].get(e))
        line = f"{r['agent']}: {r['episodes']} episodes, length {r['length']:.0f}, return {r['return']:.2f}; {ends}"
        print(textwrap.fill(line, width=80, subsequent_indent="    "))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{STEM}.json"
    path.write_text(
        json.dumps({"benchmark": STEM, "machine": machine(), "order": order, "agents": rows}, indent=2) + "\n"
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
