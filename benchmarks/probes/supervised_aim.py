"""Can the tiny model read where to go at all? Supervised learning of the best move, as a ceiling for RL.

Every tiny BabaIsAI run so far has been blind: its answer carried no information about the state
(``losses/answer_information`` ~0), whatever the reward (binary, shaped, one-step branches). This probe asks the
question underneath: given the labels outright, does the same untrained model (the preset's model folder, the
preset's prompt) learn to pick the move that brings the win closer, on states it has not seen?

States come from seeded resets of the preset's env (its families, offered moves and prompt), each followed by
0..``--walk`` uniformly random moves. Each state is labelled by trying every offered move once in a copy of the
env with a shaping reward (the preset's steps-to-win potential, ``env.kwargs.potential``: the heuristic's
estimate unless it says ``"plan"``; the one ``algo.branch_actions`` compares): the best moves are those that
earn the most. The model is trained by cross-entropy on the offered
moves' first-token logits (renormalised over the moves, as ``sampling.constrain = "actions"`` answers), toward
a uniform target over the best moves, and judged on held-out states (other seeds): how often its most likely
move is a best one, against the best a blind policy can do (always answering the move that is most often best).

    python -m benchmarks.probes.supervised_aim [--config envs/learn_babaisai_mix.toml] [--states 4096]
        [--objective cross-entropy|branches-uniform|branches-policy] [env.kwargs.potential=plan]

``--objective branches-uniform`` / ``branches-policy`` trains on the same states with the loss a run with
``algo.branch_actions`` uses instead (each move's log-prob weighed by its branch advantage, as
``algo.branch_weight`` weighs it): the same labels, so what separates the objectives is the objective.
Figures go to ``benchmarks/results/supervised_aim.json`` (one entry per preset, objective and potential, the
latest), with the held-out accuracy per family.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, ROOT, load_preset, locked, machine

STEM = "supervised_aim"
#: Seeds of the training states start here, the held-out states' at TEST_SEED (both away from the judge's 10,000).
TRAIN_SEED, TEST_SEED = 70_000, 90_000
#: What the model is trained toward: the best moves, or the one-step branches' advantages as a run weighs them.
OBJECTIVES = ("cross-entropy", "branches-uniform", "branches-policy")


def labelled_states(config: Any, tokenizer: Any, *, count: int, walk: int, seed: int) -> list[dict[str, Any]]:
    """``count`` states of the preset's env, each with its prompt's token ids and its best moves."""
    import gymnasium as gym

    import verlog  # noqa: F401  (registers the ids)
    from verlog.models.prompts import prompt_builder

    builder = prompt_builder(tokenizer, config.prompt, config.env.id)
    env = gym.make(config.env.id, **{**config.env.kwargs, "shaping": 1.0}).unwrapped
    rng = np.random.default_rng(seed)
    states: list[dict[str, Any]] = []
    episode = 0
    while len(states) < count:
        obs, info = env.reset(seed=seed + episode)
        episode += 1
        moves = list(info["valid_actions"])
        done = False
        for _ in range(int(rng.integers(0, walk + 1))):
            obs, _, terminated, truncated, info = env.step(moves[int(rng.integers(len(moves)))])
            if terminated or truncated:
                done = True
                break
        if done:
            continue
        earned = []
        for move in moves:
            branch = copy.deepcopy(env)
            earned.append(branch.step(move)[1])
        best = np.isclose(earned, max(earned))
        if best.all():  # nothing tells the moves apart here (the heuristic holds no estimate)
            continue
        states.append(
            {
                "ids": builder.from_info(obs, info),
                "best": best,
                "earned": earned,
                "level": info.get("level", ""),
            }
        )
    env.close()
    return states


def train_and_judge(
    model: Any, move_ids: list[int], pad_id: int, train: list, test: list, args: Any
) -> list[dict[str, float]]:
    """Cross-entropy toward each state's best moves; the held-out accuracy every ``--every`` steps."""
    import torch

    from verlog.ppo.advantages import branch_advantages
    from verlog.ppo.forward import collate

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rng = np.random.default_rng(args.seed)

    def logits_of(batch: list[dict[str, Any]]) -> torch.Tensor:
        """The moves' logits after each prompt, packed as the learner packs a batch (left padding, positions
        counted from each row's first real token), so the answer's position is the last column."""
        packed = collate([s["ids"] for s in batch], [[]] * len(batch), pad_id)
        out = model(
            input_ids=packed.input_ids,
            attention_mask=packed.attention_mask,
            position_ids=packed.position_ids,
            logits_to_keep=1,
        ).logits[:, -1]
        return out[:, move_ids]

    def judge() -> dict[str, Any]:
        model.eval()
        hit = np.zeros(len(test))
        probability = 0.0
        with torch.no_grad():
            for k in range(0, len(test), 128):
                part = test[k : k + 128]
                p = torch.softmax(logits_of(part), -1).numpy()
                best = np.stack([s["best"] for s in part])
                hit[k : k + len(part)] = best[np.arange(len(part)), p.argmax(-1)]
                probability += float((p * best).sum())
        model.train()
        levels = sorted({s["level"] for s in test})
        by_level = {
            lv: float(np.mean([h for h, s in zip(hit, test, strict=True) if s["level"] == lv]))
            for lv in levels
        }
        return {
            "accuracy": float(hit.mean()),
            "best_probability": probability / len(test),
            "by_level": by_level,
        }

    curve = [{"step": 0, "examples": 0, **judge()}]
    for step in range(1, args.steps + 1):
        batch = [train[i] for i in rng.integers(len(train), size=args.batch)]
        logprobs = torch.log_softmax(logits_of(batch), -1)
        if args.objective == "cross-entropy":
            target = np.stack([s["best"] / s["best"].sum() for s in batch])
        else:  # the one-step branches' advantages, as algo.branch_weight weighs them in a run
            chances = logprobs.detach().exp().tolist()
            target = np.stack([
                branch_advantages(s["earned"], 1.0, mode=args.objective.removeprefix("branches-"), probabilities=p)
                for s, p in zip(batch, chances, strict=True)
            ])  # fmt: skip
        loss = -(torch.as_tensor(target, dtype=torch.float32) * logprobs).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.every == 0 or step == args.steps:
            curve.append({"step": step, "examples": step * args.batch, "loss": loss.item(), **judge()})
            print(f"  step {step:5d}  loss {loss.item():.3f}  " + "  ".join(
                f"{k} {v:.3f}" for k, v in curve[-1].items() if k in ("accuracy", "best_probability")
            ), flush=True)  # fmt: skip
    return curve


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config", type=Path, default=ROOT / "envs" / "learn_babaisai_mix.toml", help="preset"
    )
    parser.add_argument("--states", type=int, default=4096, help="training states")
    parser.add_argument("--test", type=int, default=512, help="held-out states")
    parser.add_argument("--walk", type=int, default=15, help="random moves after a reset, at most")
    parser.add_argument("--steps", type=int, default=1500, help="optimiser steps")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3, help="the preset's actor rate by default")
    parser.add_argument("--every", type=int, default=100, help="judge every this many steps")
    parser.add_argument("--seed", type=int, default=0, help="torch's and the batches' seed")
    parser.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="cross-entropy",
        help="toward the best moves, or the branches' advantages weighed as algo.branch_weight uniform/policy",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    args = parser.parse_args(argv)
    config = load_preset(parser, args.config, args.overrides)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verlog.models.sources import resolve_model_path

    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, config.run.torch_threads))
    path = resolve_model_path(config.model, config.env)  # the preset's untrained model (built if missing)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    start = time.perf_counter()
    train = labelled_states(config, tokenizer, count=args.states, walk=args.walk, seed=TRAIN_SEED)
    test = labelled_states(config, tokenizer, count=args.test, walk=args.walk, seed=TEST_SEED)
    moves = [str(m) for m in config.env.kwargs.get("offered_actions", ())]
    move_ids = [tokenizer(f" {m}", add_special_tokens=False)["input_ids"] for m in moves]
    if not moves or any(len(i) != 1 for i in move_ids):
        parser.error(
            "the preset must offer its moves (env.kwargs.offered_actions), each one token of its tokenizer"
        )
    best = np.stack([s["best"] for s in test])
    blind = float(best.mean(0).max())  # always answering the move most often best
    print(f"{len(train)} training and {len(test)} held-out states labelled in {time.perf_counter() - start:.0f} s;"
          f" a blind policy's best accuracy {blind:.3f}", flush=True)  # fmt: skip
    potential = str(config.env.kwargs.get("potential", "estimate"))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    curve = train_and_judge(model, [i[0] for i in move_ids], pad_id, train, test, args)
    entry = {
        "config": str(args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config),
        "model": str(path),
        "machine": machine(),
        "states": len(train),
        "held_out": len(test),
        "walk": args.walk,
        "objective": args.objective,
        "potential": potential,
        "lr": args.lr,
        "batch": args.batch,
        "blind_accuracy": blind,
        "levels": {lv: int(sum(s["level"] == lv for s in test)) for lv in sorted({s["level"] for s in test})},
        "curve": curve,
        "wall_s": time.perf_counter() - start,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{STEM}.json"
    with locked(args.out):
        records = json.loads(out.read_text()) if out.exists() else {}
        records[
            f"{entry['config']} {args.objective}" + ("" if potential == "estimate" else f" {potential}")
        ] = entry
        out.write_text(json.dumps(records, indent=1) + "\n")
    last = curve[-1]
    print(f"held-out accuracy {curve[0]['accuracy']:.3f} -> {last['accuracy']:.3f} after {last['examples']} "
          f"examples (blind best {blind:.3f}); {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
