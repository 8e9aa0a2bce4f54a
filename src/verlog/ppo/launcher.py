"""``verlog launch``: ``accelerate launch`` with the same flags, plus a bounded, reported wait for the machines.

Over several machines, torchrun's agent (inside ``accelerate launch``) meets the other machines before it starts
any process of the learner, so the learner cannot report a machine that never joins: the agent waits silently
for 10 minutes, then fails with a traceback. This runs accelerate's own launch in this process and adds:

- a bounded wait for the other machines (``--join_timeout``, 180 s by default; torchrun's ``--rdzv_conf timeout``),
  with a line every ``--report_every`` seconds while it waits, and one line naming the address and port tried
  when it gives up;
- one line instead of the launcher's traceback when the learner fails (the learner's own output says why).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

__all__ = ["add_launch_arguments", "launch", "main"]


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
