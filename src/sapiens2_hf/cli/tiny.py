"""`sapiens2-hf tiny TASK [TASK ...] --out DIR`: tiny random-weight model folders, offline (`hub.tiny_models`)."""

import argparse
from pathlib import Path

from ..modeling.sapiens2_tasks import TASK_NAMES  # torch-free: the stdlib-only catalog
from ..predict.options import out_folder, seed


def add_tiny_subparser(subparsers) -> None:
    tasks = list(TASK_NAMES)
    parser = subparsers.add_parser(
        "tiny",
        help="write tiny random-weight models (offline) to try the pipelines and commands",
        description="Writes a loadable model folder per task (weights, config, processor, card) with tiny random "
        "weights: real output formats, meaningless values. `all` writes every task, each into DIR/<task>; one task "
        "writes into DIR itself.",
    )
    parser.add_argument("tasks", nargs="+", choices=["all", *tasks], metavar="TASK",
                        help=f"one or more of {', '.join(tasks)}, or all")
    parser.add_argument("--out", type=out_folder, required=True, help="output folder")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the random weights (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace the files of an earlier tiny model there")
    parser.set_defaults(handler=run_tiny)


def run_tiny(args: argparse.Namespace) -> int:
    from ..hub.tiny_models import save_tiny_model

    tasks = list(TASK_NAMES) if "all" in args.tasks else list(dict.fromkeys(args.tasks))
    out = Path(args.out)
    for task in tasks:
        folder = out if len(tasks) == 1 and "all" not in args.tasks else out / task
        save_tiny_model(task, folder, seed=args.seed, overwrite=args.overwrite)
        print(f"wrote {folder} (tiny {task} model, random weights)")
    return 0
