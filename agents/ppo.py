"""Train an LLM agent with turn-level PPO on a verlog text game.

    accelerate launch agents/ppo.py --config envs/tiny.toml
    accelerate launch agents/ppo.py --config envs/babyai.toml model.path=/models/Qwen2.5-3B-Instruct
    accelerate launch agents/ppo.py --config envs/babyai.toml --resume runs/babyai-0001
    python agents/ppo.py --help-config          # every key, its default and what it does

Overrides are ``section.key=value`` with TOML values (``ppo.actor_lr=2e-6``, ``run.trackers=["tensorboard"]``),
a bare word being a string (``algo.advantage=grpo``).
``--resume RUN`` reloads ``RUN/config.toml`` (plus any overrides) and continues from the newest checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from verlog.config import ConfigError, describe, load_config
from verlog.extras import as_missing, require
from verlog.pipes import closed_pipe_ok
from verlog.runkit.folder import CONFIG_FILE
from verlog.runkit.validate import ConfigProblems, validate


def _parser() -> argparse.ArgumentParser:
    """The script's arguments (its docstring is the help)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", metavar="TOML", help="preset to start from, e.g. envs/babyai.toml")
    parser.add_argument("--resume", metavar="RUN", help="run folder to continue, e.g. runs/babyai-0001")
    parser.add_argument("--help-config", action="store_true", help="list every config key and exit")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show the libraries' own output (load reports, progress bars) instead of keeping it in RUN/console.log",
    )
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    return parser


@closed_pipe_ok
def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.help_config:
        print(describe())
        return 0

    path = args.config
    if args.resume:
        path = Path(args.resume) / CONFIG_FILE
        if not path.is_file():
            return _bad_input(parser, f"--resume {args.resume}: no config.toml there (is it a run folder?)")
    try:
        config = load_config(path, args.overrides)
        validate(config, args.resume)  # every value, before any model loads or a run folder is made
    except ConfigProblems as error:  # every problem of the config, one line each
        return _bad_input(parser, f"config: {error}", keep_lines=True)
    except (ConfigError, OSError) as error:
        return _bad_input(parser, f"config: {error}")

    if not args.verbose:
        from verlog.quiet import quiet_console

        quiet_console()
    try:
        require("training", "torch", "transformers", "accelerate")
        from verlog.ppo.trainer import Trainer  # torch and transformers load only once the config is good
        from verlog.runkit.faults import Diverged, stopped_run
        from verlog.runkit.launch import LaunchError, exit_on_peer_loss
        from verlog.runkit.manifest import CheckpointError
        from verlog.runkit.stop import exit_status
        from verlog.runkit.watchdog import Collapsed
        from verlog.sampling import SamplerError
        from verlog.sampling.constrain import ConstraintError
        from verlog.vector import SubEnvError
    except ImportError as error:
        if (missing := as_missing(error)) is None:
            raise
        return _bad_input(parser, str(missing))

    trainer = None
    try:
        # A lost peer process (another machine died or hangs) ends this one with one line and the --resume command.
        with exit_on_peer_loss(lambda: trainer.run_dir if trainer else args.resume):
            trainer = Trainer(config, resume=args.resume)
            trainer.train()
        if (signal := trainer.early_stop.signal) is not None:  # Ctrl-C or SIGTERM: saved after the update
            print(
                f"{parser.prog}: stopped by {signal}. {stopped_run(trainer, args.resume, fix=False)}",
                file=sys.stderr,
            )
            return exit_status(signal)
    except LaunchError as error:
        print(f"{parser.prog}: launch: {error}", file=sys.stderr)
        return 2
    except ImportError as error:  # e.g. gguf for model.build = "smollm2-135m-instruct"
        if (missing := as_missing(error)) is None:
            raise
        return _bad_input(parser, str(missing))
    except SamplerError as error:  # vLLM missing, or a model it cannot load: one line, nothing written lost
        parser.exit(2, f"{parser.prog}: sampler: {error}\n")
    except ConstraintError as error:  # actions sampling.constrain cannot hold: checked before weights load
        parser.exit(2, f"{parser.prog}: constrain: {error}\n")
    except CheckpointError as error:  # nothing loaded from it: the run folder is as it was
        print(f"{parser.prog}: resume: {error}", file=sys.stderr)
        return 1
    except (Diverged, Collapsed, SubEnvError) as error:  # the run stops; its newest checkpoint is intact
        print(f"{parser.prog}: {error}. {stopped_run(trainer, args.resume)}", file=sys.stderr)
        return 1
    return 0


#: How long a silent process waits after a config error for the first process to end the launch (see below).
SIBLING_WAIT_S = 60.0


def _bad_input(parser: argparse.ArgumentParser, message: str, *, keep_lines: bool = False) -> int:
    """One line naming the problem, exit status 2 (argparse's for bad usage), no usage block, no traceback.
    ``keep_lines``: the message is several problems of a config, one per line. Every launched process checks
    the same config: only the first process of each machine says so. The others wait for it to end the launch
    (the launcher stops them when it exits): leaving first, a silent sibling could have the launcher stop the
    first process before its line is out, on a busy machine."""
    if os.environ.get("LOCAL_RANK", "0") == "0":
        lines = message.splitlines() if keep_lines else [" ".join(message.split())]
        print(f"{parser.prog}: " + "\n".join(lines), file=sys.stderr)
    else:
        time.sleep(SIBLING_WAIT_S)
    return 2


if __name__ == "__main__":
    sys.exit(main())
