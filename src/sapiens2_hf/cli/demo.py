"""`sapiens2-hf demo`: the offline end-to-end demo (see `sapiens2_hf.demo`)."""

import argparse

from ..predict.options import out_folder, seed


def add_demo_subparser(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="offline end-to-end demo: synthetic data, pretraining, LoRA pose fine-tuning, pipeline, Hub folder",
        description="Runs the whole library offline in a few minutes on a CPU with tiny models (see sapiens2_hf.demo).",
    )
    parser.add_argument("--out", type=out_folder, default="demo_output", help="output folder (overlays, JSON, report, saved model)")
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--pretrain-steps", type=int, default=40)
    parser.add_argument("--finetune-steps", type=int, default=150)
    from .threads import DEMO_DEFAULT, add_threads_argument

    add_threads_argument(parser, default=DEMO_DEFAULT)
    parser.set_defaults(handler=run_demo_command)


def run_demo_command(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    # `main` has set the threads (`--threads`, default 1) for the whole command.
    report = run_demo(args.out, seed=args.seed, pretrain_steps=args.pretrain_steps,
                      finetune_steps=args.finetune_steps)
    return 0 if report["pck_0_1_after"] > report["pck_0_1_before"] else 1
