"""Launching: the ``verlog launch`` command, what each launched process checks, and how a run of several
processes ends when one of them is lost. Both halves of one subject: what a launch starts, and what it reports.

**The command.** ``verlog launch`` is ``accelerate launch`` with the same flags, plus a bounded, reported wait
for the machines. Over several machines, torchrun's agent (inside ``accelerate launch``) meets the other machines before it starts
any process of the learner, so the learner cannot report a machine that never joins: the agent waits silently
for 10 minutes, then fails with a traceback. This runs accelerate's own launch in this process and adds:

- a bounded wait for the other machines (``--join_timeout``, 180 s by default; torchrun's ``--rdzv_conf timeout``),
  with a line every ``--report_every`` seconds while it waits, and one line naming the address and port tried
  when it gives up;
- one line instead of the launcher's traceback when the learner fails (the learner's own output says why);
- no accelerate "defaults used" page and no torch elastic error lines for a failure it reports itself.

**In each process.** ``accelerate launch`` is trusted for the topology, with two gaps a user only finds out
about later:

- A launch can ask for several processes or machines yet start each process alone: accelerate's ``--cpu``
  flag (``use_cpu: true``) runs its simple launcher, which starts one plain process per launcher whatever
  ``--num_processes`` / ``--num_machines`` say. Each would train its own single-process copy of the run.
  :func:`check_launch` stops such a process before it creates anything.
- A process that loses a peer (its machine died, hangs, or dropped off the network) gets an exception from
  the next collective: at once when the peer's connection closes, after ``run.collective_timeout`` when the
  peer just stops answering. :func:`exit_on_peer_loss` turns it into one line that says so and gives the
  exact ``--resume`` command, then ends the process (checkpoints are atomic: the last complete one stays).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "LaunchError",
    "add_launch_arguments",
    "check_launch",
    "exit_on_peer_loss",
    "is_peer_loss",
    "launch",
    "main",
    "resume_command",
]

#: Variables by which a launcher (torchrun, DeepSpeed, MPI) tells a process that it has peers.
_WORLD_VARS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
#: What gloo (and the store) say when the other side of a collective went away or stopped answering.
_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "timed out",
    "broken pipe",
    "socket timeout",
)


class LaunchError(RuntimeError):
    """A launch that cannot give the run it asked for; the message is one line for the user."""


def check_launch(env: Mapping[str, str] = os.environ) -> None:
    """Stop a process that ``accelerate launch`` started alone although the launch asked for several.

    accelerate's simple launcher (``--cpu``) always sets ``ACCELERATE_USE_CPU``, and sets ``MASTER_ADDR`` only
    when ``--num_processes`` or ``--num_machines`` is above 1; a real multi-process launch also sets the world
    size. Both of the first without the last is the launch that got less than it asked for.
    """
    if "ACCELERATE_USE_CPU" not in env or "MASTER_ADDR" not in env:
        return
    if any(int(env.get(name, "1") or 1) > 1 for name in _WORLD_VARS):
        return
    raise LaunchError(
        "this launch asked for several processes or machines but started this process alone "
        "(accelerate's --cpu flag / use_cpu: true runs one single-process copy per launcher): drop --cpu and "
        "launch with --config_file agents/accelerate/cpu_2proc.yaml (several machines: add --num_machines, "
        "--num_processes, --machine_rank, --main_process_ip, --main_process_port), as agents/accelerate/README.md shows"
    )


def is_peer_loss(error: BaseException) -> bool:
    """Whether ``error`` is a collective or store failure of a run with several processes."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return False
    if isinstance(error, dist.DistError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(sign in text for sign in _LOST)


def resume_command(run_dir: str | Path, argv: list[str] | None = None) -> str:
    """The command that resumes ``run_dir`` with this process's own launch (its launcher's flags)."""
    argv = list(sys.argv if argv is None else argv)
    script = argv[0]
    launcher = _launcher_argv(argv) or ["python"]
    return shlex.join([*launcher, script, "--resume", str(run_dir)])


def _launcher_argv(argv: list[str]) -> list[str] | None:
    """``accelerate launch`` and its flags, read from the parent process (the launcher), or None."""
    try:
        import psutil  # accelerate's dependency

        parent = psutil.Process(os.getppid()).cmdline()
    except Exception:  # no psutil, no permission: the caller falls back to a plain command
        return None
    n = len(argv)
    starts = [i for i in range(len(parent) - n + 1) if parent[i : i + n] == argv]
    if not starts:
        return None
    head = parent[: starts[-1]]
    for i, word in enumerate(head):  # python -m MODULE ..., or the console script (maybe run by python)
        if word == "accelerate.commands.launch":
            return ["accelerate", "launch", *head[i + 1 :]]
        if (word == "verlog.cli" or Path(word).name in ("accelerate", "verlog")) and head[i + 1 : i + 2] == [
            "launch"
        ]:
            return ["verlog" if "verlog" in word else "accelerate", "launch", *head[i + 2 :]]
    return None


@contextlib.contextmanager
def exit_on_peer_loss(run_dir: Callable[[], Path | str | None]) -> Iterator[None]:
    """End this process with one line and exit code 1 when a peer is lost; other errors pass through.

    The process exits at once (``os._exit``): interpreter shutdown would tear down a process group whose
    peers are gone, which can block. ``run_dir()`` is the run folder, if one was chosen yet.
    """
    try:
        yield
    except Exception as error:
        if not is_peer_loss(error):
            raise
        import torch.distributed as dist

        from verlog.runkit.folder import latest_checkpoint

        folder = run_dir()
        checkpoint = latest_checkpoint(folder) if folder else None
        rank, world = dist.get_rank(), dist.get_world_size()
        cause = " ".join(str(error).split())[:200]
        if checkpoint is None:
            then = "no checkpoint yet: start the run again"
        else:
            machines = int(os.environ.get("GROUP_WORLD_SIZE", "1") or 1)
            where = " on every machine (each with its own --machine_rank)" if machines > 1 else ""
            then = f"last checkpoint {checkpoint}; resume{where} with: {resume_command(folder)}"
        if int(os.environ.get("LOCAL_RANK", "0") or 0) == 0:  # one line per machine
            print(
                f"verlog: process {rank} of {world} lost a peer process (its machine died, hangs or is "
                f"unreachable: {cause}); stopping. {then}",
                file=sys.stderr,
                flush=True,
            )
        sys.stdout.flush()
        os._exit(1)


# ----------------------------------------------------------------------------------- verlog launch
_OPTIONS = {"--join_timeout": "join_timeout", "--report_every": "report_every"}


def add_launch_arguments(parser: Any) -> None:
    """For ``verlog launch --help``; :func:`main` parses the command line itself (see there)."""
    parser.add_argument(
        "--join_timeout", type=float, default=180.0, help="seconds to wait for the other machines (180)"
    )
    parser.add_argument(
        "--report_every", type=float, default=30.0, help="seconds between lines while waiting (30)"
    )
    parser.add_argument(
        "accelerate_args", nargs="*", metavar="ARG",
        help="what follows `accelerate launch`: its flags, the script and the script's arguments",
    )  # fmt: skip


def main(argv: list[str]) -> int:
    """``verlog launch [--join_timeout S] [--report_every S] ACCELERATE_LAUNCH_ARGS...``.

    Only leading options are ours; everything after them goes to accelerate unchanged (argparse would take the
    launcher's and the script's own ``--flags`` for unknown options of ``verlog``).
    """
    kwargs: dict[str, float] = {}
    argv = list(argv)
    while argv and argv[0].split("=", 1)[0] in _OPTIONS:
        name, _, value = argv.pop(0).partition("=")
        if not value:
            if not argv:
                print(f"verlog launch: {name} needs a value (seconds)", file=sys.stderr)
                return 2
            value = argv.pop(0)
        try:
            kwargs[_OPTIONS[name]] = float(value)
        except ValueError:
            print(f"verlog launch: {name} takes seconds, got {value!r}", file=sys.stderr)
            return 2
    return launch(argv, **kwargs)


def launch(argv: list[str], *, join_timeout: float = 180.0, report_every: float = 30.0) -> int:
    """Run ``accelerate launch ARGV`` here; return the exit code."""
    import psutil  # accelerate's dependency
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError

    _quiet_launcher()
    args = launch_command_parser().parse_args(argv)
    if "timeout=" not in args.rdzv_conf:
        args.rdzv_conf = ",".join(filter(None, [args.rdzv_conf, f"timeout={max(1, round(join_timeout))}"]))
    me = psutil.Process()
    started = threading.Event()  # the agent started the learner's processes: every machine has joined

    def watch() -> None:
        begin, due = time.monotonic(), min(5.0, report_every)
        while not started.wait(0.5):
            if me.children():
                started.set()
            elif time.monotonic() - begin >= due and _machines(args) > 1:
                print(
                    f"verlog launch: machine {args.machine_rank} of {_machines(args)} waiting for the others at "
                    f"{_address(args)} ({time.monotonic() - begin:.0f}s; --join_timeout {join_timeout:.0f}s)",
                    file=sys.stderr,
                    flush=True,
                )
                due += report_every

    begin = time.monotonic()
    threading.Thread(target=watch, daemon=True).start()
    try:
        launch_command(args)
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        print(
            f"verlog launch: {error.name} failed on this machine (process {rank}, exit code {failure.exitcode}); "
            "its output above says why",
            file=sys.stderr,
        )
        return failure.exitcode if failure.exitcode > 0 else 1
    except (DistError, RendezvousError, TimeoutError) as error:
        if started.is_set():
            raise
        rank, what = args.machine_rank, "the other machines never joined"
        if str(rank) != "0":  # a client of machine 0's store: it never reached it
            what = "machine 0 never answered"
        print(
            f"verlog launch: gave up after {time.monotonic() - begin:.0f}s: {what} at {_address(args)} "
            f"(this is machine {rank} of {_machines(args)}; {' '.join(str(error).split())[:160]}). "
            f"Check that each machine runs this launch with its own --machine_rank, that {args.main_process_ip} is "
            f"machine 0's address and reachable from the others, and that port {args.main_process_port} is open",
            file=sys.stderr,
        )
        return 1
    except Exception as error:
        returncode = getattr(error, "returncode", None)  # a single-process launcher's CalledProcessError
        if not isinstance(returncode, int):
            raise
        print(
            f"verlog launch: the learner exited with code {returncode}; its output above says why",
            file=sys.stderr,
        )
        return returncode or 1
    return 0


class _DropDefaultsNotice(logging.Filter):
    """accelerate's page of "values not passed ... defaults used": the learner's first line states the topology."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "had defaults used instead" not in record.getMessage()


def _quiet_launcher() -> None:
    """This command reports a failed learner itself (one line, the exit code): torch elastic's own error lines
    for the same failure, and accelerate's defaults notice, stay off the console."""
    logging.getLogger("accelerate.commands.launch").addFilter(_DropDefaultsNotice())
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)


def _machines(args: Any) -> int:
    return int(getattr(args, "num_machines", 1) or 1)


def _address(args: Any) -> str:
    return f"{args.main_process_ip}:{args.main_process_port}"
