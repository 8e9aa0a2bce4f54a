"""Where does a trained BabyAI policy leave the bot's path? Per task kind, on the policy's own episodes.

The tiny BabyAI mix learns goto and pickup (over 80 % on every seed) while open and putnext stay near random.
This probe plays a trained run's actor (its newest checkpoint) on seeded episodes of each kind, as the judge plays
them, drawing every action from the actor's distribution over the six actions (one token each, renormalised:
what ``sampling.constrain = "actions"`` samples). At every state minigrid's BabyAI bot advises one action; the
bot is built for DAgger, so it replans from wherever the policy's own action led. The figures per kind:

- **agreement with the bot**, split by what it advises: a move (turn left, turn right, go forward) or an
  interaction (pick up, drop, toggle); and how often the policy answers each interaction where the bot advises
  something else: a policy that reads when to interact answers it far more often where the bot advises it;
- **the win rate by the bot's own solution length** from the reset (the bot played alone in a copy);
- **how lost episodes were lost**: the mission failed (minigrid's verifier, e.g. the wrong door opened); the
  policy never reached a state where the bot advised the kind's key interaction (lost on the way); it reached
  one and never took it there (lost at the interaction); or it took it and lost afterwards.

Written to ``benchmarks/results/bot_following.json`` (one entry per run, the latest).

    nox -s probe_bot_following                     # the run folders of learn_babyai_mix.json's seeds
    python -m benchmarks.probes.bot_following [RUN ...] [--episodes 32] [--seed 10000]
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

STEM = "bot_following"
MOVES = ("turn left", "turn right", "go forward")
INTERACTIONS = ("pick up", "drop", "toggle")
#: The bot's solution lengths from the reset the win rate is split by.
SOLUTION_LENGTHS = {"bot 1-8": (1, 8), "bot 9-16": (9, 16), "bot 17+": (17, 10**9)}
#: The interaction each kind cannot be won without (pick_up_seq_go_to picks up first, then goes to the other).
KEY_INTERACTION = {"goto": None, "pickup": "pick up", "open": "toggle", "putnext": "drop",
                   "pick_up_seq_go_to": "pick up"}  # fmt: skip


def bot_action(bot: Any, taken: int | None) -> str | None:
    """The bot's advice after the policy took ``taken`` (None at the reset), as the env's action name; None when
    the bot gives up (it raises on a few states the policy's wandering makes, e.g. a box it cannot account for)."""
    from verlog.envs.babyai import BabyAITextEnv

    try:
        advised = int(bot.replan(taken))
    except Exception:  # the bot's own asserts and DisappearedBoxError: no advice from here on
        return None
    names = BabyAITextEnv.actions
    return names[advised] if 0 <= advised < len(names) else None  # "done" is not an action the env offers


def bot_solution_length(level: Any, cap: int) -> int | None:
    """Steps the bot alone takes from the level's state to the mission's success (None: it fails or runs out)."""
    from minigrid.utils.baby_ai_bot import BabyAIBot

    twin = copy.deepcopy(level)
    bot, taken = BabyAIBot(twin), None
    for step in range(1, cap + 1):
        try:
            taken = int(bot.replan(taken))
        except Exception:
            return None
        _, reward, terminated, truncated, _ = twin.step(taken)
        if terminated or truncated:
            return step if terminated and reward > 0 else None
    return None


def play_kind(
    model: Any,
    tokenizer: Any,
    config: Any,
    kind: str,
    *,
    episodes: int,
    seed: int,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """``episodes`` seeded episodes of ``kind``, all played at once; per episode its turns' records."""
    import gymnasium as gym
    import torch
    from minigrid.utils.baby_ai_bot import BabyAIBot

    import verlog  # noqa: F401  (registers the ids)
    from benchmarks.demos.held_out import kind_kwargs, task_kinds
    from verlog.models.prompts import prompt_builder
    from verlog.ppo.forward import collate

    builder = prompt_builder(tokenizer, config.prompt, config.env.id)
    key = (task_kinds(config.env.id, config.env.kwargs) or ("task", ()))[0]
    envs = [gym.make(config.env.id, **kind_kwargs(config.env.kwargs, key, kind)) for _ in range(episodes)]
    actions = list(envs[0].unwrapped.offered_actions)
    action_ids = [tokenizer(f" {a}", add_special_tokens=False)["input_ids"] for a in actions]
    if any(len(i) != 1 for i in action_ids):
        raise SystemExit("the run's actions must be one token each (a tiny model's action-words tokenizer)")
    first = [i[0] for i in action_ids]
    index = {name: i for i, name in enumerate(type(envs[0].unwrapped).actions)}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    played, observations, bots, taken = [], [], [], []
    for k, env in enumerate(envs):
        obs, info = env.reset(seed=seed + k)
        level = env.unwrapped.level
        played.append(
            {"seed": seed + k, "bot_length": bot_solution_length(level, level.max_steps), "turns": []}
        )
        observations.append((obs, info))
        bots.append(BabyAIBot(level))
        taken.append(None)
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
            advised = bot_action(bots[k], taken[k]) if bots[k] is not None else None
            if advised is None:
                bots[k] = None  # the bot gave up: no advice for the rest of the episode
            choice = int(rng.choice(len(actions), p=p / p.sum()))
            played[k]["turns"].append(
                {"advised": advised, "chosen": actions[choice],
                 "advised_probability": float(p[actions.index(advised)]) if advised in actions else None}
            )  # fmt: skip
            taken[k] = index[actions[choice]]
            obs, reward, terminated, truncated, info = env.step(actions[choice])
            observations[k] = (obs, info)
            if terminated or truncated:
                won = bool(info.get("success", False))
                played[k]["won"] = won
                played[k]["end"] = "win" if won else ("failed" if terminated else "steps")
            else:
                still.append(k)
        active = still
    for env in envs:
        env.close()
    return played


def _two(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def summary(played: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """One kind's figures: win rate, agreement by advice, wins by the bot's length, and how losses were lost."""
    turns = [t for e in played for t in e["turns"] if t["advised"] is not None]
    agreement = {}
    for name, group in {"move": MOVES, **{a: (a,) for a in INTERACTIONS}}.items():
        advised = [t for t in turns if t["advised"] in group]
        agreement[name] = {
            "states": len(advised),
            "followed": _mean([t["chosen"] == t["advised"] for t in advised]),
            "advised_probability": _mean([t["advised_probability"] for t in advised]),
        }
    # each interaction answered where the bot advises it, against where it advises anything else
    answered = {}
    for action in INTERACTIONS:
        elsewhere = [t for t in turns if t["advised"] != action]
        answered[action] = {
            "where_advised": agreement[action]["followed"],
            "elsewhere": _mean([t["chosen"] == action for t in elsewhere]),
        }
    by_length = {}
    for name, (lo, hi) in SOLUTION_LENGTHS.items():
        group = [e for e in played if e["bot_length"] is not None and lo <= e["bot_length"] <= hi]
        if group:
            by_length[name] = {"episodes": len(group), "won": float(np.mean([e["won"] for e in group]))}
    key = KEY_INTERACTION.get(kind)
    lost = [e for e in played if not e["won"]]
    failed = [e for e in lost if e["end"] == "failed"]
    reached = [e for e in lost if e not in failed and any(t["advised"] == key for t in e["turns"])]
    took = [e for e in reached if any(t["advised"] == key == t["chosen"] for t in e["turns"])]
    return {
        "episodes": len(played),
        "won": float(np.mean([e["won"] for e in played])),
        "advised_turns": len(turns),
        "agreement": agreement,
        "interaction_answered": answered,
        "by_bot_length": by_length,
        "lost": {
            "episodes": len(lost),
            "mission_failed": len(failed),
            "key_interaction": key,
            "never_reached_it": len(lost) - len(failed) - len(reached) if key else None,
            "reached_it_never_took_it": len(reached) - len(took) if key else None,
            "took_it_and_lost": len(took) if key else None,  # pick_up_seq_go_to: lost on the way after it
            # per interaction: lost episodes where the bot advised it at least once, and where the policy took it
            # there at least once (putnext: did it get the object, did it reach the drop?)
            "advised": {
                a: sum(any(t["advised"] == a for t in e["turns"]) for e in lost) for a in INTERACTIONS
            },
            "taken_where_advised": {
                a: sum(any(t["advised"] == a == t["chosen"] for t in e["turns"]) for e in lost)
                for a in INTERACTIONS
            },
        },
    }


def probe(run: Path, *, episodes: int, seed: int) -> dict[str, Any]:
    """The run's newest actor on ``episodes`` episodes of each of its kinds."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.demos.held_out import task_kinds
    from verlog.config import load_config
    from verlog.runkit.folder import CONFIG_FILE, latest_checkpoint

    newest = latest_checkpoint(run)
    if newest is None:
        raise SystemExit(f"{run}: no checkpoint to probe (checkpoints/NNNNNN)")
    config = load_config(run / CONFIG_FILE)
    kinds = task_kinds(config.env.id, config.env.kwargs)
    if not config.env.id.startswith("verlog/BabyAI") or kinds is None:
        raise SystemExit(f"{run}: not a BabyAI mix run (a verlog/BabyAI id drawing several task kinds)")
    tokenizer = AutoTokenizer.from_pretrained(newest / "actor")
    model = AutoModelForCausalLM.from_pretrained(newest / "actor").eval()
    rng = np.random.default_rng(seed)
    figures = {}
    for kind in kinds[1]:
        start = time.perf_counter()
        played = play_kind(model, tokenizer, config, kind, episodes=episodes, seed=seed, rng=rng)
        f = figures[kind] = summary(played, kind)
        key, lost = f["lost"]["key_interaction"], f["lost"]
        line = f"{run.name} {kind}: won {f['won']:.2f}; follows the bot's moves {_two(f['agreement']['move']['followed'])}"
        if key:
            answered = f["interaction_answered"][key]
            line += (f"; {key!r} {_two(answered['where_advised'])} where advised, {_two(answered['elsewhere'])} "
                     f"elsewhere; lost {lost['episodes']}: {lost['never_reached_it']} never reached it, "
                     f"{lost['reached_it_never_took_it']} reached it and never took it")  # fmt: skip
        print(f"{line} ({time.perf_counter() - start:.0f} s)", flush=True)
    return {"checkpoint": newest.name, "kinds": figures}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="*", type=Path, help="tiny-model BabyAI mix run folders")
    parser.add_argument(
        "--stem", default="learn_babyai_mix", help="without RUN: the seeds of this results file"
    )
    parser.add_argument("--episodes", type=int, default=32, help="episodes per kind")
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
