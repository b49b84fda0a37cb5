"""The `sapiens2-hf` command.

Start-up: the parser is built from the command modules' `add_*_subparser` functions, which import only the standard
library (and this package's lazy `__init__`), so `--help` and argument errors answer without importing torch or
transformers (tests/test_cli_startup.py); each command imports what it needs inside its handler.
"""

import argparse
import sys

from ..modeling.sapiens2_tasks import installed_task_names
from .app import add_app_subparser
from .convert import add_convert_subparser
from .curate import add_curate_subparser
from .demo import add_demo_subparser
from .env import add_env_subparser
from ..runs.errors import error_message, is_expected_error
from .export import add_export_subparser
from .merge import add_merge_subparser
from .pose3d import add_pose3d_subparser
from .predict import add_predict_subparsers
from .threads import torch_threads
from .tiny import add_tiny_subparser


def build_parser() -> argparse.ArgumentParser:
    if installed_task_names():  # tasks of installed packages (entry points): their model code needs torch
        from ..tasks import load_installed_tasks

        load_installed_tasks()
    parser = argparse.ArgumentParser(prog="sapiens2-hf", description="Sapiens2 models in the Hugging Face ecosystem.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add_subparsers in (add_convert_subparser, add_demo_subparser, add_predict_subparsers, add_merge_subparser,
                           add_export_subparser, add_app_subparser, add_env_subparser, add_tiny_subparser,
                           add_pose3d_subparser, add_curate_subparser):
        add_subparsers(subparsers)
    return parser


def _run(args) -> int:
    """The command's handler, after the registration with transformers that the console script deferred
    (`sapiens2_hf_cli.py`): commands reach the model code through sub-modules, which do not trigger it."""
    from transformers.utils import logging as transformers_logging  # heavy: only once a command runs

    from .._registration import register  # the model code (torch)

    bars_were_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # per-load / per-save weight bars are noise on the command line
    try:
        register()
        return args.handler(args)
    finally:
        if bars_were_on:  # `main` called from Python (tests, notebooks) leaves the caller's setting as it was
            transformers_logging.enable_progress_bar()


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "precheck", None) is not None:  # the command's paths, before torch and transformers load
            args.precheck(args)
        if "threads" in vars(args):  # every command that computes takes --threads (cli/threads.py)
            with torch_threads(args.threads, default=getattr(args, "threads_default", "auto")):
                return _run(args)
        return _run(args)
    except Exception as error:  # noqa: BLE001 - re-raised below unless it is the user's input at fault
        if not is_expected_error(error):
            raise
        print(f"sapiens2-hf {args.command}: error: {error_message(error)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
