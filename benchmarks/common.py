"""What more than one benchmark needs: the repository's folders, the machine record, a preset loaded as the
learner loads it, the update records of a run, a lock for results files, and the statistics the
demonstrations judge by.

Scripts import it as ``benchmarks.common`` (each runs as ``python -m benchmarks.<kind>.<name>`` from the
repository root), so no script reaches another through ``sys.path``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "JUDGE_DIR",
    "RANDOM_DIR",
    "RESULTS",
    "ROOT",
    "load_preset",
    "locked",
    "preset_parser",
    "machine",
    "mean_se",
    "cached_random",
    "random_folder",
    "random_key",
    "update_records",
    "window",
]

ROOT = Path(__file__).resolve().parents[1]
#: Every benchmark's figures (JSON, and PNG plots), read by the documentation's tables.
RESULTS = ROOT / "benchmarks" / "results"
#: Random-agent evaluations, one folder per :func:`random_key`, reused by every demonstration.
RANDOM_DIR = Path("runs") / "random"
#: Evaluations of an untrained model, one folder per digest of what they played, reused by every seed of a recipe.
JUDGE_DIR = Path("runs") / "judge"


def machine() -> dict[str, Any]:
    """The machine, with torch's version (imported here, so the record names it)."""
    import torch  # noqa: F401  (loaded, so the machine record names its version)

    from verlog.evaluation import output

    return output.machine()


#: The 1-minute load average under which the cores count as idle for a published speed figure.
IDLE_LOAD = 0.5


def settled_load(wait_s: float = 180.0, poll_s: float = 5.0) -> float:
    """The 1-minute load average once it falls under :data:`IDLE_LOAD`, waiting at most ``wait_s`` for it.

    A speed bench run right after another heavy job would otherwise record that job's tail as its own start
    load and be marked not idle; waiting for the load to settle makes back-to-back benches comparable. After
    ``wait_s`` it gives up and returns the load as it is (the record then says the cores were not idle)."""
    deadline = time.monotonic() + wait_s
    load = os.getloadavg()[0]
    if load >= IDLE_LOAD:  # say why nothing happens for a while
        print(f"waiting up to {wait_s:.0f} s for the load ({load:.2f}) to fall under {IDLE_LOAD}", flush=True)
    while load >= IDLE_LOAD and time.monotonic() < deadline:
        time.sleep(poll_s)
        load = os.getloadavg()[0]
    return load


def preset_parser(doc: str | None, preset: str, result: str) -> argparse.ArgumentParser:
    """The arguments of a benchmark that runs one preset: ``--config`` (default ``envs/<preset>``), ``--out``
    (the folder for ``result``) and config overrides; the script adds its own options to it."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=ROOT / "envs" / preset, help="preset")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"folder for {result}")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    return parser


def load_preset(parser: argparse.ArgumentParser, path: Path, overrides: Sequence[str]) -> Any:
    """The preset with its overrides, derived and checked as ``agents/ppo.py`` checks it; a bad one ends the
    script with the parser's one-line error before any model loads."""
    from verlog.config import ConfigError, load_config
    from verlog.runkit.validate import validate

    try:
        config = load_config(path, overrides)
        validate(config)
    except (ConfigError, OSError) as error:
        parser.error(f"config: {error}")
    return config


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (``flock`` on the folder itself, no lock file left behind): two
    demonstrations finishing at once read, merge and write one results file in turn, and neither entry is
    lost."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def claimed(name: str) -> Iterator[bool]:
    """Try to claim ``name`` for the length of the block (a non-blocking ``flock`` on a file of that name in the
    temp folder): True if this process holds it, False if another does. Two streams of the same grid then never
    run one cell twice; the claim ends with its process, so a killed stream leaves none behind."""
    folder = Path(tempfile.gettempdir()) / "verlog-claims"
    folder.mkdir(exist_ok=True)
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def update_records(run_dir: Path) -> list[dict[str, Any]]:
    """One record per update from ``metrics.jsonl``, read as the report reads it (critic warm-up lines dropped;
    an update logged twice, as a resumed run does, keeps its later values)."""
    from verlog.report.reading import WARMUP_KEY, read_metrics
    from verlog.runkit.folder import METRICS_FILE

    log = read_metrics(run_dir / METRICS_FILE)
    return [r for r in log.records if WARMUP_KEY not in r and r.get("update")]


def seed_runs(folder: Path, stem: str) -> list[Path]:
    """The run folders of every seed of the results file ``folder/<stem>.json``: what a probe reads when it is
    given no run folder."""
    results = folder / f"{stem}.json"
    if not results.is_file():
        raise SystemExit(f"no run folders given and no {results}: name the runs, or train the preset first")
    return [Path(e["run_dir"]) for e in json.loads(results.read_text())["seeds"]]


def record_runs(folder: Path, stem: str, entries: dict[str, Any]) -> Path:
    """Merge a per-run probe's ``entries`` into ``folder/<stem>.json`` under ``runs`` (the latest probe of each
    run kept), under the folder's lock; returns the file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    with locked(folder):
        data = json.loads(path.read_text()) if path.is_file() else {"benchmark": stem, "runs": {}}
        data["runs"].update(entries)
        path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean over the values that are not NaN; NaN for what one value (the error)
    or none (both) cannot say. Sample std / sqrt(n), a little wider than BALROG's population std (which
    ``verlog.evaluation.mean_se`` keeps for BALROG-comparable scores), so a demonstration's verdict errs strict."""
    kept = [v for v in values if not math.isnan(v)]
    if not kept:
        return math.nan, math.nan
    se = statistics.stdev(kept) / math.sqrt(len(kept)) if len(kept) > 1 else math.nan
    return statistics.fmean(kept), se


def window(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Pooled success rate and its standard error over the episodes that ended in ``records``' updates
    (``env/success`` weighted by ``charts/episodes``; SE sqrt(p (1 - p) / n))."""
    successes = episodes = 0.0
    for record in records:
        n = record.get("charts/episodes") or 0.0
        rate = record.get("env/success")
        if n and rate is not None:
            successes += rate * n
            episodes += n
    if not episodes:
        return {"updates": len(records), "episodes": 0, "success": math.nan, "se": math.nan}
    p = successes / episodes
    return {
        "updates": len(records),
        "first_update": int(records[0]["update"]),
        "last_update": int(records[-1]["update"]),
        "episodes": int(round(episodes)),
        "success": p,
        "se": math.sqrt(p * (1.0 - p) / episodes),
    }


def random_key(
    env_id: str,
    env_kwargs: dict[str, Any],
    memory: str,
    memory_kwargs: dict[str, Any],
    episodes: int,
    seed: int,
) -> dict[str, Any]:
    """What decides the random agent's evaluation. It seeds itself per episode from the episode's seed, so how
    many envs play at once does not change it; no model, prompt or decoding takes part."""
    return {
        "agent": "random",
        "env_id": env_id,
        "env_kwargs": dict(env_kwargs),
        "memory": memory,
        "memory_kwargs": dict(memory_kwargs),
        "episodes": episodes,
        "seed": seed,
    }


def random_folder(key: dict[str, Any]) -> Path:
    """``runs/random/<digest of the key>``: the same key finds the same evaluation."""
    return RANDOM_DIR / hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def kept_evaluation(
    folder: Path,
    key: dict[str, Any],
    play: Callable[[Path], dict[str, Any]],
    read: Callable[[Path], dict[str, Any]],
) -> tuple[dict[str, Any], bool]:
    """An evaluation kept in ``folder`` and reused: ``read`` from there when played before, else ``play`` into a
    partial folder that becomes the kept one only once finished (an interrupted one is never reused). The
    folder's parent is locked meanwhile, so two demonstrations that need the same evaluation at once play it
    once: the second waits and reads it (unlocked, one deleted the other's partial folder mid-play and the
    evaluation kept was short of its episodes). Returns (figures, cached)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with locked(folder.parent):
        if (folder / "summary.json").is_file():
            return read(folder), True
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        result = play(partial)
        (partial / "key.json").write_text(json.dumps(key, indent=2, default=str) + "\n")
        partial.replace(folder)
    return result, False


def cached_random(
    key: dict[str, Any], play: Callable[[Path], dict[str, Any]], read: Callable[[Path], dict[str, Any]]
) -> tuple[dict[str, Any], Path, bool]:
    """The random agent's evaluation kept under :func:`random_folder` (:func:`kept_evaluation`). Returns
    (figures, folder, cached)."""
    folder = random_folder(key)
    result, cached = kept_evaluation(folder, key, play, read)
    return result, folder, cached
