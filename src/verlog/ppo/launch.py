"""What a launch really started, and how a run of several processes ends when one of them is lost.

``accelerate launch`` is trusted for the topology, with two gaps a user only finds out about later:

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
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

__all__ = ["LaunchError", "check_launch", "exit_on_peer_loss", "is_peer_loss", "resume_command"]

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

        from verlog.ppo.checkpoint import latest_checkpoint

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
