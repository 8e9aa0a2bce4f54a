"""Vectorised dual-discount GAE against the per-token loop reference: agreement and speed.

Both implementations run on the same random rollout-like batch (lengths uniform in [1, R], values in [-1, 1],
sparse env rewards, KL-sized per-token rewards, random episode ends and truncations) at T=16 turns, N=128
envs (Verlog's Crafter batch) and a sweep of response widths R, for the two code paths: token gamma = lambda
= 1 (Verlog's setting, the telescoped closed form) and token gamma * lambda < 1 (the blocked scan).

Per setting it reports the max abs difference (must be <= 1e-5) and the speed ratio (target >= 50x), prints a
rich table, and writes ``benchmarks/results/gae.json`` and ``benchmarks/results/gae.png``. Times are the best
of several runs (the loop: of ``--loop-repeats``), with ``--threads`` torch threads (default 1: the loop is
single-threaded Python anyway, and on a shared 2-core machine multi-threaded timings measure the neighbours).
With ``--loop-envs K`` the loop runs on the first K envs only and its time is scaled by N/K (flagged in the
output). Exits with status 1 if any difference exceeds the tolerance.

Run: ``nox -s bench_gae`` or ``python -m benchmarks.speed.gae [--threads 1] [--loop-envs K] [--quick]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib
import torch
from rich.console import Console
from rich.table import Table

from benchmarks.common import RESULTS
from verlog.evaluation.output import machine
from verlog.pipes import closed_pipe_ok
from verlog.ppo.gae import dual_discount_gae, dual_discount_gae_loop

TOLERANCE = 1e-5
TARGET_RATIO = 50.0
T, N = 16, 128
HEADLINE_R = 512
SWEEP_R = (32, 64, 128, 256, 512, 1024)
TURN = {"turn_gamma": 0.99, "turn_lam": 0.95}
PATHS = {
    "tok γλ=1": {"token_gamma": 1.0, "token_lam": 1.0},  # Verlog's setting: the telescoped closed form
    "tok .99/.95": {"token_gamma": 0.99, "token_lam": 0.95},  # the blocked scan
}


def make_batch(T: int, N: int, R: int, seed: int) -> dict[str, torch.Tensor]:
    """A float32 batch shaped like real rollouts, with junk in the padding (which both must ignore)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, R + 1, (T, N), generator=g)
    mask = (torch.arange(R) < lengths[..., None]).float()
    values = (2 * torch.rand(T, N, R, generator=g) - 1) * mask + 7.0 * (1 - mask)
    rewards = (torch.rand(T, N, generator=g) < 0.2).float() * torch.randn(T, N, generator=g)
    continues = (torch.rand(T, N, generator=g) < 0.8).float()
    truncated = (torch.rand(T, N, generator=g) < 0.5).float()
    next_start = torch.cat([values[1:, :, 0], torch.rand(1, N, generator=g)])
    next_values = continues * next_start + (1 - continues) * truncated * torch.rand(T, N, generator=g)
    token_rewards = 1e-2 * torch.randn(T, N, R, generator=g) * mask
    return {
        "rewards": rewards,
        "token_values": values,
        "response_mask": mask,
        "next_values": next_values,
        "continues": continues,
        "token_rewards": token_rewards,
    }


def best_time(fn: Callable[[], object], repeats: int, min_total_s: float = 0.0) -> tuple[float, float]:
    """(best, median) wall time of ``fn`` over at least ``repeats`` runs and ``min_total_s`` seconds."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats or time.perf_counter() - start < min_total_s:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def run_setting(path: str, R: int, loop_envs: int, loop_repeats: int, seed: int) -> dict[str, object]:
    batch = make_batch(T, N, R, seed)
    coefs = {**TURN, **PATHS[path]}
    sub = {k: v[:, :loop_envs] for k, v in batch.items()}

    for _ in range(3):  # warm-up: first calls allocate and load kernels
        adv, ret = dual_discount_gae(**batch, **coefs)
    vec_best, vec_median = best_time(lambda: dual_discount_gae(**batch, **coefs), repeats=10, min_total_s=0.5)
    holder: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def loop() -> None:
        holder["out"] = dual_discount_gae_loop(**sub, **coefs)

    loop_best, _ = best_time(loop, repeats=loop_repeats)
    ref_adv, ref_ret = holder["out"]
    scale = N / loop_envs
    diff_adv = float((adv[:, :loop_envs] - ref_adv).abs().max())
    diff_ret = float((ret[:, :loop_envs] - ref_ret).abs().max())
    loop_s = loop_best * scale
    return {
        "path": path,
        **coefs,
        "T": T,
        "N": N,
        "R": R,
        "tokens": int(batch["response_mask"].sum()),
        "vectorised_s": vec_best,
        "vectorised_median_s": vec_median,
        "loop_s": loop_s,
        "loop_envs_timed": loop_envs,
        "loop_scaled": loop_envs != N,
        "ratio": loop_s / vec_best,
        "max_abs_diff_advantages": diff_adv,
        "max_abs_diff_returns": diff_ret,
        "max_abs_advantage": float(ref_adv.abs().max()),
        "within_tolerance": max(diff_adv, diff_ret) <= TOLERANCE,
    }


def plot(rows: list[dict[str, object]], path: Path) -> None:
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (name, style), color in zip(((p, "o-") for p in PATHS), ("tab:blue", "tab:orange"), strict=True):
        sub = [r for r in rows if r["path"] == name]
        Rs = [r["R"] for r in sub]
        ax_t.plot(Rs, [r["loop_s"] * 1e3 for r in sub], "s--", color=color, label=f"loop, {name}")
        ax_t.plot(Rs, [r["vectorised_s"] * 1e3 for r in sub], style, color=color, label=f"vectorised, {name}")
        ax_r.plot(Rs, [r["ratio"] for r in sub], style, color=color, label=name)
    ax_t.set(xscale="log", yscale="log", xlabel="R (response width)", ylabel="time per call (ms)")
    ax_t.set_title(f"dual-discount GAE, T={T}, N={N}")
    ax_t.legend(fontsize=7)
    ax_r.axhline(TARGET_RATIO, color="grey", ls=":", label=f"target {TARGET_RATIO:.0f}x")
    ax_r.set(xscale="log", yscale="log", xlabel="R (response width)", ylabel="loop / vectorised")
    ax_r.set_title("speed ratio")
    ax_r.legend(fontsize=7)
    for ax in (ax_t, ax_r):
        ax.set_xticks(list(SWEEP_R), [str(r) for r in SWEEP_R])
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@closed_pipe_ok
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument(
        "--loop-envs", type=int, default=N, help=f"envs the loop runs on, time scaled (≤ {N})"
    )
    parser.add_argument("--loop-repeats", type=int, default=2, help="loop runs per setting (best is kept)")
    parser.add_argument("--quick", action="store_true", help="R in (32, 512) only")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for gae.json and gae.png")
    args = parser.parse_args(argv)
    if not 1 <= args.loop_envs <= N:
        parser.error(f"--loop-envs must be in [1, {N}]")
    torch.set_num_threads(args.threads)
    console = Console()
    sweep = (32, HEADLINE_R) if args.quick else SWEEP_R

    started = time.perf_counter()
    rows = []
    for path in PATHS:
        for R in sweep:
            with console.status(f"{path}, R={R} ..."):
                rows.append(run_setting(path, R, args.loop_envs, args.loop_repeats, seed=R))
    elapsed = time.perf_counter() - started

    table = Table(
        title=f"Dual-discount GAE, T={T}, N={N}, float32, {torch.get_num_threads()} torch thread(s)"
    )
    for column in ("path", "R", "loop ms", "vec ms", "ratio", "max |Δ|", "ok"):
        table.add_column(column, justify="left" if column == "path" else "right")
    for r in rows:
        loop = f"{r['loop_s'] * 1e3:,.0f}" + ("*" if r["loop_scaled"] else "")
        ratio = f"{r['ratio']:,.0f}×"
        table.add_row(
            str(r["path"]),
            f"[bold]{r['R']}[/bold]" if r["R"] == HEADLINE_R else str(r["R"]),
            loop,
            f"{r['vectorised_s'] * 1e3:.2f}",
            ratio if r["ratio"] >= TARGET_RATIO else f"[red]{ratio}[/red]",
            f"{max(r['max_abs_diff_advantages'], r['max_abs_diff_returns']):.1e}",
            "[green]yes[/green]" if r["within_tolerance"] else "[red]NO[/red]",
        )
    console.print(table)
    console.print(
        f"Best wall time of several calls; loop = the per-env, per-turn, per-token reference (Python floats). "
        f"max |Δ| over advantages and returns, tolerance {TOLERANCE:g}; speed target {TARGET_RATIO:.0f}×; "
        f"headline R={HEADLINE_R}."
    )
    if args.loop_envs != N:
        console.print(
            f"[yellow]* The loop ran on {args.loop_envs} of {N} envs; its times are scaled by "
            f"{N / args.loop_envs:g}, and differences are over those envs.[/yellow]"
        )

    headline = {r["path"]: r["ratio"] for r in rows if r["R"] == HEADLINE_R}
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "settings": {
            "T": T,
            "N": N,
            "R_sweep": list(sweep),
            "dtype": "float32",
            **TURN,
            "paths": PATHS,
            "loop_envs": args.loop_envs,
            "loop_repeats": args.loop_repeats,
            "timing": "best wall time; vectorised over >= 10 calls and >= 0.5 s after 3 warm-up calls",
        },
        "tolerance": TOLERANCE,
        "target_ratio": TARGET_RATIO,
        f"ratio_at_R{HEADLINE_R}": headline,
        "results": rows,
        "elapsed_s": elapsed,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gae.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    plot(rows, args.out / "gae.png")
    console.print(f"Wrote {args.out / 'gae.json'} and {args.out / 'gae.png'} in {elapsed:.0f} s.")
    return 0 if all(r["within_tolerance"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
