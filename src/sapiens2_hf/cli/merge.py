"""`sapiens2-hf merge ADAPTER --out DIR`: LoRA adapter folder -> plain model folder (base + adapter merged)."""

import argparse

from ..predict.options import check_local_source, out_folder


def add_merge_subparser(subparsers) -> None:
    parser = subparsers.add_parser(
        "merge",
        help="merge a LoRA adapter (from training_scripts/finetune.py --use_lora) into a plain model folder",
        description="Load the base named in the adapter's adapter_config.json, apply the adapter, merge it into the "
        "weights (the heads trained in full are kept) and write a model folder with config.json, model.safetensors, "
        "preprocessor_config.json and a model card, loadable with from_pretrained and the pipelines.",
    )
    parser.add_argument("adapter", help="adapter folder (or Hub repo) with adapter_config.json and config.json")
    parser.add_argument("--out", type=out_folder, required=True, help="output folder")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into a non-empty output folder (only the files this command writes are replaced)")
    parser.add_argument("--no-remote-code", action="store_true", help="do not ship the modeling files")
    from .threads import add_threads_argument

    add_threads_argument(parser)
    parser.set_defaults(handler=run_merge, precheck=lambda args: check_local_source("", args.adapter))


def run_merge(args: argparse.Namespace) -> int:
    from ..training.lora import merge_lora

    check_local_source("", args.adapter)
    out = merge_lora(args.adapter, args.out, overwrite=args.overwrite, remote_code=not args.no_remote_code)
    print(f"wrote {out}")
    return 0
