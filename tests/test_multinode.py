"""Two machines on one host: two ``accelerate launch`` commands (machine ranks 0 and 1, one CPU process each)
that meet on 127.0.0.1, the way a user starts a run over two machines.

One run with DDP and one with DeepSpeed ZeRO-3 (gloo): one run folder in the shared ``run.output_dir``, every
process's part in each checkpoint, metrics merged over both machines, an exact ``--resume`` with the same
two launches, the same result as one machine with two processes; then a machine lost mid-run and a launch
whose ``--cpu`` flag started each process alone. Every wait is bounded; a failure kills both launches.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import torch

from verlog.models.tiny import build_tiny
from verlog.runkit.folder import latest_checkpoint
from verlog.runkit.launch import LaunchError, check_launch
from verlog.runkit.logger import reproducible

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "agents" / "accelerate"
TIMEOUT = 600
SMALL = [
    "run.console=false",
    "env.num_envs=2",
    "ppo.turns_per_update=2",
    "ppo.num_minibatches=2",
    "ppo.micro_batch_tokens=1024",
    "ppo.critic_warmup_batches=0",  # no critic pre-training: fewer batches per launch
    "ppo.critic_warmup_iters=0",
    "run.checkpoint_every=1",
    "run.keep_checkpoints=3",
]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(
        tmp_path_factory.mktemp("tiny") / "model",
        "verlog/BabyAI-GoTo-v0",
        {"invalid_action_penalty": -0.1},
        memory="history",
        memory_kwargs={"turns": 2, "reasoning": True},
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Machine:
    """One launcher (``accelerate launch`` and the processes it started, in their own process group)."""

    rank: int
    process: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def processes(self) -> list[psutil.Process]:
        """The launcher and every process it started (torchrun gives each worker a session of its own)."""
        try:
            launcher = psutil.Process(self.process.pid)
            return [launcher, *launcher.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill(self, sig: int = signal.SIGKILL) -> None:
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(sig)


def _env() -> dict[str, str]:
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",  # CPU processes even on a machine with GPUs
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("ACCELERATE_USE_CPU", None)  # it would make accelerate drop DeepSpeed
    return env


ACCELERATE = ["-m", "accelerate.commands.launch"]  # accelerate launch
VERLOG = ["-m", "verlog.cli", "launch"]  # verlog launch


def spawn(logs: Path, rank: int, launch: list[str], args: list[str], tool: list[str] = ACCELERATE) -> Machine:
    """Start ``accelerate launch LAUNCH ARGS`` in the background, its output in ``logs/machine-RANK.log``."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"machine-{rank}.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, *tool, *launch, *args], cwd=ROOT, env=_env(),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    return Machine(rank, process, log)


def start(
    logs: Path, launch: list[str], args: list[str], *, machines: int = 2, tool: list[str] = ACCELERATE
) -> list[Machine]:
    """Start one ``accelerate launch`` per machine rank, all meeting on 127.0.0.1 at a free port."""
    port = str(_free_port())
    if machines == 1:
        return [spawn(logs, 0, [*launch, "--main_process_port", port], args, tool)]
    flags = [
        "--num_machines",
        str(machines),
        "--num_processes",
        str(machines),
        "--main_process_ip",
        "127.0.0.1",
    ]
    return [
        spawn(
            logs,
            rank,
            [*launch, *flags, "--machine_rank", str(rank), "--main_process_port", port],
            args,
            tool,
        )
        for rank in range(machines)
    ]


def finish(machines: list[Machine], timeout: float = TIMEOUT, *, expect_ok: bool = True) -> list[int]:
    """Wait for every launcher (bounded); kill them all on a timeout or, with ``expect_ok``, on a failure."""
    deadline = time.monotonic() + timeout
    codes = []
    try:
        for machine in machines:
            codes.append(machine.process.wait(timeout=max(1.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        for machine in machines:
            machine.kill()
        pytest.fail(f"timed out after {timeout}s (a collective hang?)\n{_tails(machines)}")
    if expect_ok and any(codes):
        for machine in machines:
            machine.kill()
        pytest.fail(f"exit codes {codes}\n{_tails(machines)}")
    return codes


def _tails(machines: list[Machine]) -> str:
    return "\n".join(f"--- machine {m.rank} ---\n{m.output()[-8000:]}" for m in machines)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def actor(checkpoint: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(checkpoint / "actor" / "model.safetensors")


def same_weights(a: Path, b: Path) -> bool:
    x, y = actor(a), actor(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def check_two_machine_run(out: str, run: Path, model_path: Path, *, engine: str) -> None:
    """One run of 2 processes over both machines: its folder, metrics and checkpoints."""
    assert f"setup: 2 processes on cpu, {engine}, " in out
    assert [p.name for p in run.parent.iterdir() if p.name.startswith("tiny-")] == [run.name]  # one folder
    rows = records(run)
    assert [r["update"] for r in rows] == [1.0, 2.0]  # two updates, logged once each
    assert rows[-1]["global_step"] == 2 * 2 * 2 * 2  # 2 updates x 2 turns x 2 envs x 2 processes
    # Token counts are sums over both machines: more than one process can generate (4 responses x 16 tokens).
    assert all(r["charts/generated_tokens"] > 2 * 2 * 16 for r in rows)
    final = run / "checkpoints" / "000002"
    assert sorted(p.name for p in final.glob("trainer-*.json")) == ["trainer-0.json", "trainer-1.json"]
    assert sorted(p.name for p in final.glob("envs-*.json.gz")) == ["envs-0.json.gz", "envs-1.json.gz"]
    states = [json.loads((final / f"trainer-{r}.json").read_text()) for r in (0, 1)]
    assert states[0]["weights_checksum"] == states[1]["weights_checksum"]  # both machines hold the same model
    # Disjoint seeds: each machine's envs play their own episodes (seed + rank * num_envs).
    seeds = [
        [
            json.dumps([env["seed"], env["rng"]])
            for env in json.loads(gzip.decompress((final / f"envs-{r}.json.gz").read_bytes()))
        ]
        for r in (0, 1)
    ]
    assert len({s for part in seeds for s in part}) == 4, seeds

    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(final / "actor")  # the consolidated actor loads
    initial = AutoModelForCausalLM.from_pretrained(model_path)
    assert any(not torch.equal(v, initial.state_dict()[k]) for k, v in exported.state_dict().items())


DDP = ["--config_file", str(CONFIGS / "cpu_2proc.yaml")]
# Over several machines DeepSpeed's own launcher wants a hostfile and ssh; "standard" runs torchrun per machine.
ZERO3 = ["--config_file", str(CONFIGS / "zero3_cpu_2proc.yaml"), "--deepspeed_multinode_launcher", "standard"]
ENGINES = {"ddp": (DDP, "DDP"), "zero3": (ZERO3, "DeepSpeed ZeRO-3")}


def train_resume_and_match(
    tmp_path: Path, model_path: Path, engine: str, *, resume: bool = True, single: bool = True
) -> None:
    launch, name = ENGINES[engine]
    args = [
        "agents/ppo.py",
        "--config",
        "envs/tiny.toml",
        f"model.path={model_path}",
        "run.total_updates=2",
        *SMALL,
    ]
    shared = tmp_path / "shared"  # run.output_dir, seen by both machines
    machines = start(tmp_path / "logs", launch, [*args, f"run.output_dir={shared}"])
    finish(machines)
    run = shared / "tiny-0001"
    check_two_machine_run(machines[0].output() + machines[1].output(), run, model_path, engine=name)
    if engine == "zero3":  # one engine per model, each with both machines' ZeRO shards, once
        for part in ("state", "critic_state"):
            shards = (run / "checkpoints" / "000002" / part / "pytorch_model").glob(
                "zero_pp_rank_*_model_states.pt"
            )
            assert sorted(p.name[:14] for p in shards) == ["zero_pp_rank_0", "zero_pp_rank_1"], part

    if resume:
        # --resume with the same two launches, from a copy that stopped after logging update 2 but before its
        # checkpoint: the resumed run logs update 2 again, once, and ends where the uninterrupted run ended.
        resumed = tmp_path / "resumed" / "tiny-0001"
        shutil.copytree(run, resumed)
        shutil.rmtree(resumed / "checkpoints" / "000002")
        finish(start(tmp_path / "logs-resume", launch, ["agents/ppo.py", "--resume", str(resumed)]))
        assert latest_checkpoint(resumed).name == "000002"
        assert same_weights(run / "checkpoints" / "000002", resumed / "checkpoints" / "000002")
        assert [reproducible(r) for r in records(run)] == [reproducible(r) for r in records(resumed)]

    if single:
        # One machine with two processes, same seed: same metrics and weights.
        single_dir = tmp_path / "single"
        finish(start(tmp_path / "logs-single", launch, [*args, f"run.output_dir={single_dir}"], machines=1))
        assert [reproducible(r) for r in records(run)] == [
            reproducible(r) for r in records(single_dir / "tiny-0001")
        ]
        assert same_weights(
            run / "checkpoints" / "000002", single_dir / "tiny-0001" / "checkpoints" / "000002"
        )


def test_two_machines_ddp_train_resume_and_match_one_machine(tmp_path: Path, model_path: Path) -> None:
    train_resume_and_match(tmp_path, model_path, "ddp")


def test_two_machines_zero3_train_one_run(tmp_path: Path, model_path: Path) -> None:
    pytest.importorskip("deepspeed", reason="the train extra's deepspeed is not installed")
    train_resume_and_match(tmp_path, model_path, "zero3", resume=False, single=False)


@pytest.mark.slow  # nox -s multinode: three more ZeRO-3 launches
def test_two_machines_zero3_resume_and_match_one_machine(tmp_path: Path, model_path: Path) -> None:
    pytest.importorskip("deepspeed", reason="the train extra's deepspeed is not installed")
    train_resume_and_match(tmp_path, model_path, "zero3")


def _wait_for(path: Path, machines: list[Machine], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline or any(m.process.poll() is not None for m in machines):
            for machine in machines:
                machine.kill()
            pytest.fail(f"{path} never appeared\n{_tails(machines)}")
        time.sleep(0.5)


UPDATES = 40  # of the lost-machine run: several seconds of updates after its first checkpoint


@pytest.mark.parametrize(
    ("how", "engine"),
    [
        ("hangs", "ddp"),  # a frozen or unreachable machine (launched with verlog launch)
        pytest.param("dies", "ddp", marks=pytest.mark.slow),  # its connections close
        pytest.param("hangs", "zero3", marks=pytest.mark.slow),
    ],
)
def test_a_lost_machine_stops_the_other_with_the_resume_command(
    tmp_path: Path, model_path: Path, how: str, engine: str
) -> None:
    timeout = 10  # run.collective_timeout: how long machine 0 waits for a machine that stopped answering
    shared = tmp_path / "shared"
    # More updates than run before the stop lands: with 2, the tiny run could finish its last update before
    # machine 1 was stopped, and then nothing was lost (CI saw machine 0 wait at exit instead).
    args = [
        "agents/ppo.py", "--config", "envs/tiny.toml", f"model.path={model_path}", f"run.total_updates={UPDATES}",
        f"run.output_dir={shared}", f"run.collective_timeout={timeout}", *SMALL,
    ]  # fmt: skip
    tool = VERLOG if how == "hangs" else ACCELERATE
    machines = start(tmp_path / "logs", ENGINES[engine][0], args, tool=tool)
    run = shared / "tiny-0001"
    _wait_for(run / "checkpoints" / "000001", machines)
    survivors = machines[0].processes()
    machines[1].kill(signal.SIGSTOP if how == "hangs" else signal.SIGKILL)
    try:
        [code] = finish(machines[:1], timeout=timeout + 120, expect_ok=False)
    finally:
        machines[1].kill()
    assert code != 0
    assert not [p for p in survivors if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]  # none left
    output = machines[0].output()
    lines = [line for line in output.splitlines() if line.startswith("verlog: ")]
    assert len(lines) == 1, output[-6000:]
    assert "lost a peer process" in lines[0] and "resume on every machine" in lines[0]
    command = shlex.split(lines[0].split(" with: ", 1)[1])
    assert command[-3:] == ["agents/ppo.py", "--resume", str(run)]
    if tool == VERLOG:  # the learner's line and the launcher's, no traceback
        assert command[:2] == ["verlog", "launch"] and "Traceback" not in output, output[-6000:]
        assert "verlog launch: agents/ppo.py failed on this machine (process 0, exit code 1)" in output
    else:
        assert command[:2] == ["accelerate", "launch"]

    # The last complete checkpoint is intact: the printed command, on both machines, finishes the run.
    assert latest_checkpoint(run) is not None
    launch = command[2 : command.index("agents/ppo.py")]
    at = launch.index("--machine_rank") + 1
    machines = []
    for rank in (0, 1):  # "each with its own --machine_rank"
        launch[at] = str(rank)
        machines.append(spawn(tmp_path / "logs-resume", rank, launch, command[-3:], tool))
    finish(machines)
    assert latest_checkpoint(run).name == f"{UPDATES:06d}"
    assert [r["update"] for r in records(run)] == [
        float(u) for u in range(1, UPDATES + 1)
    ]  # each logged once


def test_a_machine_that_never_joins_is_a_bounded_reported_wait(tmp_path: Path) -> None:
    """Machine 0 whose peer never starts, and machine 1 pointed at a port where no machine 0 listens."""
    ports = [str(_free_port()), str(_free_port())]
    machines = [
        spawn(tmp_path / "logs", rank, [
            "--join_timeout", "5", "--report_every", "2", *DDP, "--num_machines", "2", "--num_processes", "2",
            "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1", "--main_process_port", ports[rank],
        ], ["agents/ppo.py", "--config", "envs/tiny.toml", f"run.output_dir={tmp_path / 'shared'}"], VERLOG)
        for rank in (0, 1)
    ]  # fmt: skip
    assert finish(machines, timeout=180, expect_ok=False) == [1, 1]
    for machine, port in zip(machines, ports, strict=True):
        output = machine.output()
        waiting = [
            line for line in output.splitlines() if f"waiting for the others at 127.0.0.1:{port}" in line
        ]
        gave_up = [line for line in output.splitlines() if line.startswith("verlog launch: gave up after ")]
        assert waiting and len(gave_up) == 1, output[-4000:]
        what = "the other machines never joined" if machine.rank == 0 else "machine 0 never answered"
        assert f"{what} at 127.0.0.1:{port} (this is machine {machine.rank} of 2" in gave_up[0]
        assert "Traceback" not in output  # (torch's C++ store may still log its own connection retries)
    assert not (tmp_path / "shared").exists()


def test_check_launch_tells_a_lone_process_from_a_real_launch() -> None:
    simple = {"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    with pytest.raises(LaunchError, match="started this process alone"):
        check_launch(simple)  # accelerate launch --cpu --num_processes 2 (or --num_machines 2)
    check_launch({**simple, "WORLD_SIZE": "2", "RANK": "1"})  # torchrun / DeepSpeed: the process has peers
    check_launch({**simple, "OMPI_COMM_WORLD_SIZE": "4"})  # mpirun
    check_launch({"ACCELERATE_USE_CPU": "True"})  # --cpu, one process asked for
    check_launch({})  # python agents/ppo.py


def test_a_cpu_flag_launch_that_starts_each_process_alone_stops_with_how_to_launch(tmp_path: Path) -> None:
    """accelerate's --cpu runs one plain process per launcher, whatever --num_machines says: each would train
    its own copy. The learner stops before it creates a run folder, saying how to launch instead."""
    shared = tmp_path / "shared"
    args = [
        "agents/ppo.py",
        "--config",
        "envs/tiny.toml",
        f"run.output_dir={shared}",
        "model.path=/nonexistent",
    ]
    machines = start(tmp_path / "logs", ["--cpu"], args)
    assert all(code != 0 for code in finish(machines, timeout=300, expect_ok=False))
    for machine in machines:
        lines = [line for line in machine.output().splitlines() if line.startswith("ppo.py: launch: ")]
        assert len(lines) == 1, machine.output()[-4000:]
        assert (
            "started this process alone" in lines[0]
            and "--config_file agents/accelerate/cpu_2proc.yaml" in lines[0]
        )
        assert "Traceback" not in machine.output().split(lines[0])[0]  # nothing of ours before it
    assert not shared.exists()
