"""Where does a trained BabaIsAI policy leave the plan? Per family, on the policy's own episodes.

The tiny BabaIsAI mix learns three of Verlog's four families and stalls near 50 % on
two_room-maybe_break_stop-goto_win, though the same model reads that family's best moves from labels (0.95
held out, ``supervised_aim``). This probe plays a trained run's actor (its newest checkpoint) on seeded episodes
of each family, as the judge plays them (the preset's judged step cap, no shaping), drawing every move from the
actor's distribution over the offered moves (one token each, renormalised: what ``sampling.constrain =
"actions"`` samples). At every state it also reads:

- the best moves, by trying each offered move once in a copy of the env with the plan's shaping (the one-step
  branches ``algo.branch_actions`` compares): whether the policy chose one, and the probability it gave them,
  beside what always answering one move would hit on the same states (the best a blind policy does);
- whether a win still exists from the state, given a whole episode's steps (the solver's fast search, up to
  20,000 states): a lost episode either walked into a dead end (a rule broken for good, a block stuck; the
  episode counts as dead from there) or wandered until the steps ran out while a win was still there.

Figures per family: the win rate; the best-move accuracy by turn, inside the training window (the preset's
``algo.max_episode_turns``), in the window after it and beyond; the win rate by the reset's plan length; and
how lost episodes were lost. Written to ``benchmarks/results/plan_following.json`` (one entry per run, the latest).

    nox -s probe_plan_following                    # the run folders of learn_babaisai_mix.json's seeds
    python -m benchmarks.probes.plan_following [RUN ...] [--episodes 32] [--seed 10000]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, machine, record_runs, seed_runs

STEM = "plan_following"
#: The reset's fast-plan lengths the win rate is split by (the same edges for every run, whatever its window).
PLAN_LENGTHS = {"plan 1-4": (1, 4), "plan 5-8": (5, 8), "plan 9-16": (9, 16), "plan 17+": (17, 10**9)}
#: The solver's search budget for "can it still win" and the reset's plan (the plan potential's is 5,000 states).
SEARCH_STATES = 20_000


def winnable(env: Any) -> bool:
    """Whether a win exists from the env's state given a whole episode's steps (the fast search, up to
    :data:`SEARCH_STATES` states): False is a dead end (a rule broken for good, a block stuck), not a clock
    that ran out."""
    from verlog.envs.babaisai.solver import solve_state

    return solve_state(env.board, env.state, env.max_steps, SEARCH_STATES, optimal=False).actions is not None


def play_family(
    model: Any,
    tokenizer: Any,
    config: Any,
    family: str,
    *,
    episodes: int,
    seed: int,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """``episodes`` seeded episodes of ``family``, all played at once; per episode its turns' records."""
    import gymnasium as gym
    import torch

    import verlog  # noqa: F401  (registers the ids)
    from verlog.envs.babaisai import solve
    from verlog.models.prompts import prompt_builder
    from verlog.ppo.forward import collate

    builder = prompt_builder(tokenizer, config.prompt, config.env.id)
    kwargs = {**config.env.kwargs, "levels": [family], "shaping": 1.0, "potential": "plan"}
    if "max_episode_steps" in kwargs:  # the game's own cap, which the solver's "steps left" counts against
        kwargs["max_steps"] = kwargs.pop("max_episode_steps")
    envs = [gym.make(config.env.id, **kwargs).unwrapped for _ in range(episodes)]
    moves = [str(m) for m in config.env.kwargs["offered_actions"]]
    move_ids = [tokenizer(f" {m}", add_special_tokens=False)["input_ids"] for m in moves]
    if any(len(i) != 1 for i in move_ids):
        raise SystemExit("the run's moves must be one token each (a tiny model's action-words tokenizer)")
    first = [i[0] for i in move_ids]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    played: list[dict[str, Any]] = []
    observations = []
    for k, env in enumerate(envs):
        obs, info = env.reset(seed=seed + k)
        plan = solve(env, max_states=SEARCH_STATES, optimal=False)
        played.append(
            {"seed": seed + k, "plan": None if plan is None else len(plan), "turns": [], "won": False}
        )
        observations.append((obs, info))
    active = list(range(episodes))
    while active:
        packed = collate([builder.from_info(*observations[k]) for k in active], [[]] * len(active), pad)
        with torch.no_grad():
            logits = model(
                input_ids=packed.input_ids,
                attention_mask=packed.attention_mask,
                position_ids=packed.position_ids,
                logits_to_keep=1,
            ).logits[:, -1, first]
        probabilities = torch.softmax(logits.double(), -1).numpy()
        still = []
        for k, p in zip(active, probabilities, strict=True):
            env = envs[k]
            earned = [copy.deepcopy(env).step(move)[1] for move in moves]
            best = np.isclose(earned, max(earned))
            turns = played[k]["turns"]
            alive = turns[-1]["alive"] if turns else True  # an episode stays dead from its first dead end on
            alive = alive and winnable(env)
            choice = int(rng.choice(len(moves), p=p / p.sum()))
            turns.append(
                {"best_hit": bool(best[choice]), "best_probability": float(p[best].sum()),
                 "informative": bool(not best.all()), "alive": alive, "best": best.tolist()}
            )  # fmt: skip
            obs, _, terminated, truncated, info = env.step(moves[choice])
            observations[k] = (obs, info)
            if terminated or truncated:
                played[k]["won"] = info.get("progression", 0.0) >= 1.0
                played[k]["end"] = "win" if played[k]["won"] else ("defeat" if terminated else "steps")
            else:
                still.append(k)
        active = still
    for env in envs:
        env.close()
    return played


def summary(played: list[dict[str, Any]], window: int) -> dict[str, Any]:
    """One family's figures: win rate, accuracy by turn, wins by plan length, and how losses were lost."""
    buckets = {f"turns 0-{window - 1}": (0, window), f"turns {window}-{2 * window - 1}": (window, 2 * window),
               f"turns {2 * window}+": (2 * window, 10**9)}  # fmt: skip
    accuracy = {}
    for name, (lo, hi) in buckets.items():
        turns = [t for e in played for i, t in enumerate(e["turns"]) if lo <= i < hi and t["informative"]]
        accuracy[name] = {
            "states": len(turns),
            "best_hit": float(np.mean([t["best_hit"] for t in turns])) if turns else None,
            "best_probability": float(np.mean([t["best_probability"] for t in turns])) if turns else None,
            # what always answering one move would hit on the same states: the best a blind policy does
            "blind": float(np.mean([t["best"] for t in turns], axis=0).max()) if turns else None,
        }
    by_plan = {}
    for name, (lo, hi) in PLAN_LENGTHS.items():
        group = [e for e in played if e["plan"] is not None and lo <= e["plan"] <= hi]
        if group:
            by_plan[name] = {"episodes": len(group), "won": float(np.mean([e["won"] for e in group]))}
    unplanned = [e for e in played if e["plan"] is None]
    if unplanned:
        by_plan["no plan found"] = {
            "episodes": len(unplanned),
            "won": float(np.mean([e["won"] for e in unplanned])),
        }
    lost = [e for e in played if not e["won"]]
    dead = [e for e in lost if any(not t["alive"] for t in e["turns"])]
    first_dead = [next(i for i, t in enumerate(e["turns"]) if not t["alive"]) for e in dead]
    return {
        "episodes": len(played),
        "won": float(np.mean([e["won"] for e in played])),
        "accuracy": accuracy,
        "by_plan_length": by_plan,
        "lost": {
            "episodes": len(lost),
            "reached_a_dead_end": len(dead),
            "first_dead_turn_median": float(np.median(first_dead)) if first_dead else None,
            "wandered_while_winnable": len(lost) - len(dead),
            "ends": {end: sum(e.get("end") == end for e in lost) for end in ("defeat", "steps")},
        },
    }


def probe(run: Path, *, episodes: int, seed: int) -> dict[str, Any]:
    """The run's newest actor on ``episodes`` episodes of each of its families."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verlog.config import load_config
    from verlog.runkit.folder import CONFIG_FILE, latest_checkpoint

    newest = latest_checkpoint(run)
    if newest is None:
        raise SystemExit(f"{run}: no checkpoint to probe (checkpoints/NNNNNN)")
    config = load_config(run / CONFIG_FILE)
    if "offered_actions" not in config.env.kwargs or config.env.id != "verlog/BabaIsAI-v0":
        raise SystemExit(f"{run}: not a BabaIsAI run with offered moves (env.kwargs.offered_actions)")
    tokenizer = AutoTokenizer.from_pretrained(newest / "actor")
    model = AutoModelForCausalLM.from_pretrained(newest / "actor").eval()
    window = int(config.algo.max_episode_turns or config.ppo.turns_per_update)
    rng = np.random.default_rng(seed)
    families = {}
    for family in config.env.kwargs["levels"]:
        start = time.perf_counter()
        played = play_family(model, tokenizer, config, family, episodes=episodes, seed=seed, rng=rng)
        families[family] = summary(played, window)
        f = families[family]
        inside, beyond = (f["accuracy"][k]["best_hit"] for k in list(f["accuracy"])[:2])
        print(f"{run.name} {family}: won {f['won']:.2f}; best move {inside or float('nan'):.2f} inside the "
              f"{window}-turn window, {beyond or float('nan'):.2f} beyond; lost {f['lost']['episodes']}, of "
              f"which {f['lost']['reached_a_dead_end']} reached a dead end "
              f"({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
    return {"checkpoint": newest.name, "window": window, "families": families}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="*", type=Path, help="tiny-model BabaIsAI run folders")
    parser.add_argument(
        "--stem", default="learn_babaisai_mix", help="without RUN: the seeds of this results file"
    )
    parser.add_argument("--episodes", type=int, default=32, help="episodes per family")
    parser.add_argument(
        "--seed", type=int, default=10_000, help="first episode's seed (the judge's, by default)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    args.runs = args.runs or seed_runs(args.out, args.stem)
    entries = {}
    for run in args.runs:
        entries[run.name] = {"run": str(run), "machine": machine(), "seed": args.seed, "episodes": args.episodes,
                             **probe(run, episodes=args.episodes, seed=args.seed)}  # fmt: skip
    print(f"wrote {record_runs(args.out, STEM, entries)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
