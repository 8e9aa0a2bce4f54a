"""benchmarks/probes/sweep.py: grid expansion, final metrics, the table over fake run folders, and one real tiny run."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sweep = importlib.import_module("benchmarks.probes.sweep")


def test_values_split_at_top_level_commas_only() -> None:
    assert sweep.split_values("1e-4,1e-3") == ["1e-4", "1e-3"]
    assert sweep.split_values("[1, 2],[3]") == ["[1, 2]", "[3]"]
    assert sweep.split_values("{turns = 1, reasoning = true}, {turns = 2}") == [
        "{turns = 1, reasoning = true}",
        "{turns = 2}",
    ]
    assert sweep.split_values('"a,b",c') == ['"a,b"', "c"]
    for bad in ("1,,2", "[1, 2", '"open'):
        with pytest.raises(ValueError):
            sweep.split_values(bad)


def test_the_grid_is_the_product_of_swept_keys() -> None:
    grid, fixed = sweep.expand(["ppo.actor_lr=1e-4,1e-3", "env.num_envs=4,8,16", "run.total_updates=3"])
    assert fixed == ["run.total_updates=3"]
    assert len(grid) == 6 and len({s.slug for s in grid}) == 6
    assert grid[0].overrides == ["ppo.actor_lr=1e-4", "env.num_envs=4"]
    assert grid[-1].slug == "actor_lr=1e-3_num_envs=16"
    assert sweep.expand([]) == ([sweep.Setting(())], [])
    for bad in (["lr=1,2"], ["ppo.actor_lr=1,2", "ppo.actor_lr=3,4"]):
        with pytest.raises(ValueError):
            sweep.expand(bad)


def _update(update: int, success: float | None, episodes: float, **more: float) -> dict:
    return {"update": update, "env/success": success, "charts/episodes": episodes, **more}


def test_final_metrics_average_the_last_updates_episode_weighted() -> None:
    records = [_update(u, 0.0, 4, **{"charts/turns_per_s": 1.0}) for u in range(1, 9)]
    records += [
        _update(9, 1.0, 1, **{"charts/turns_per_s": 3.0}),
        _update(10, 0.0, 3, **{"charts/turns_per_s": 5.0}),
    ]
    final = sweep.final_metrics(records, last=0.2)
    assert final["updates"] == 10
    assert final["env/success"] == pytest.approx(0.25)  # 1 success in 4 episodes, not (1 + 0) / 2
    assert final["charts/turns_per_s"] == pytest.approx(4.0)
    assert "charts/episodic_return" not in final
    assert sweep.final_metrics(records, last=0.01)["env/success"] == 0.0  # at least one update


def _fake_run(root: Path, name: str, successes: list[float], total: int) -> None:
    folder = root / "runs" / f"{name}-0001"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(f"[run]\ntotal_updates = {total}\n")
    lines = [json.dumps({"update": 0, "warmup/iteration": 1.0})]
    lines += [
        json.dumps(_update(i + 1, s, 2, **{"env/invalid_action_rate": 0.5})) for i, s in enumerate(successes)
    ]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n{broken")


def test_table_over_run_folders(tmp_path: Path) -> None:
    grid, _ = sweep.expand(["ppo.actor_lr=1e-4,1e-3"])
    low, high = grid
    runs = [sweep.Run(s, seed, f"{s.slug}-s{seed}") for s in grid for seed in (1, 2, 3)]
    for run, final in zip(runs, [0.1, 0.3, 0.2, 0.6, 0.8, None], strict=True):
        if final is None:  # seed 3 of the high learning rate died after 2 of 4 updates
            _fake_run(tmp_path, run.name, [0.0, 0.5], total=4)
        else:
            _fake_run(tmp_path, run.name, [0.0, 0.0, 0.0, final], total=4)
        run.folder = sweep.run_folders(tmp_path / "runs", run.name)[-1]
    meta = {"config": "envs/tiny.toml", "date": "today"}
    rows = sweep.write_tables(runs, ["ppo.actor_lr"], tmp_path, last=0.25, meta=meta)
    assert [row["ppo.actor_lr"] for row in rows] == ["1e-4", "1e-3"]
    assert rows[0]["seeds"] == 3 and rows[0]["failed"] == 0
    assert rows[0]["env/success/mean"] == pytest.approx(0.2)
    assert rows[0]["env/success/std"] == pytest.approx(0.1)
    assert (rows[0]["env/success/min"], rows[0]["env/success/max"]) == (0.1, 0.3)
    assert rows[1]["seeds"] == 2 and rows[1]["failed"] == 1
    assert rows[1]["env/success/mean"] == pytest.approx(0.7)
    assert math.isnan(rows[1]["charts/turns_per_s/mean"])
    table = (tmp_path / "sweep.md").read_text()
    assert "| 1e-4 | 3 | 0.200 ± 0.100 |" in table and "| 1e-3 | 2 (1 failed) | 0.700 ± 0.141 |" in table
    csv_lines = (tmp_path / "sweep.csv").read_text().splitlines()
    assert csv_lines[0].startswith("ppo.actor_lr,setting,seeds,failed,env/success/mean")
    assert len(csv_lines) == 3
    assert json.loads((tmp_path / "sweep.json").read_text())["rows"][1]["charts/turns_per_s/mean"] is None


def test_one_real_tiny_run_and_a_rerun_that_skips_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    cheap = [
        "run.total_updates=1", "env.num_envs=2", "ppo.turns_per_update=2", "prompt.max_response_tokens=3",
        "ppo.critic_warmup_batches=0", "ppo.critic_warmup_iters=0", "run.checkpoint_every=0",
        "run.export_actor=false", f"model.path={tmp_path / 'tiny'}", "ppo.actor_lr=1e-3",
    ]  # fmt: skip
    options = ["--seeds", "1", "--config", str(ROOT / "envs" / "tiny.toml"), "--out", str(tmp_path / "sweep")]
    assert sweep.main([*cheap, *options, "--dry-run"]) == 0
    assert not (tmp_path / "sweep").exists()
    assert sweep.main([*cheap, *options]) == 0
    rows = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["rows"]
    assert (
        len(rows) == 1 and rows[0]["setting"] == "base" and rows[0]["seeds"] == 1 and rows[0]["failed"] == 0
    )
    assert rows[0]["charts/turns_per_s/mean"] > 0
    assert [p.name for p in (tmp_path / "sweep" / "runs").iterdir()] == ["base-s1-0001"]
    capsys.readouterr()
    assert sweep.main([*cheap, *options]) == 0  # finished: not trained again
    assert "done before" in capsys.readouterr().out
    assert len(list((tmp_path / "sweep" / "runs").iterdir())) == 1
