"""`sapiens2-hf convert SRC --out DIR [--task T]`: official checkpoint file -> Hugging Face folder."""

import argparse

from ..modeling.sapiens2_tasks import TASK_NAMES
from ..predict.options import check_local_source, out_folder, positive_int


def add_convert_subparser(subparsers) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert an official sapiens2_<size>_<task>.safetensors file into a Hugging Face folder",
        description="Convert an official Sapiens2 checkpoint into a folder with config.json, model.safetensors, "
        "preprocessor_config.json and a model card; the architecture is inferred from the tensor shapes.",
    )
    parser.add_argument(
        "source",
        help="official sapiens2_<size>_<task>.safetensors file, or a folder or Hub repo holding one (Meta's official "
        "repos, with or without transformers-format files beside it)",
    )
    parser.add_argument("--out", type=out_folder, required=True, help="output folder")
    parser.add_argument("--task", default="auto", choices=["auto", "pretrain", *TASK_NAMES],
                        help="default: read from the checkpoint's tensors")
    parser.add_argument("--rope-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument(
        "--image-size", type=positive_int, nargs=2, metavar=("HEIGHT", "WIDTH"), default=None,
        help="input size the model is meant for (default: the checkpoint's own; see Sapiens2 infer_image_size)",
    )
    parser.add_argument("--no-verify", action="store_true", help="skip the reload-and-compare check")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    from .threads import add_threads_argument

    add_threads_argument(parser)
    parser.set_defaults(handler=run_convert, precheck=_check_source)


def _check_source(args: argparse.Namespace) -> None:
    from .hub_access import hub_ids, prepare_hub_access

    check_local_source("", args.source)
    prepare_hub_access("convert", hub_ids(args.source))


def run_convert(args: argparse.Namespace) -> int:
    from ..hub.convert_official import convert_official_checkpoint

    check_local_source("", args.source)
    out = convert_official_checkpoint(
        args.source,
        args.out,
        task=args.task,
        rope_dtype=args.rope_dtype,
        image_size=args.image_size,
        verify=not args.no_verify,
        overwrite=args.overwrite,
    )
    # verify_reload raises when a check fails: reaching here means every check passed
    checked = ("; --no-verify: not checked" if args.no_verify else
               "; verified by reloading it: every tensor bit-exact, the same config, outputs within float rounding "
               "of the source model's (relative L2 <= 1e-3)")
    print(f"wrote {out}{checked}")
    return 0
