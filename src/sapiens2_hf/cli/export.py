"""`sapiens2-hf export MODEL --format onnx|torch-export|aoti --out DIR`, and the `--backend` choice of the predict
commands.

The export writes the artefact with config.json, preprocessor_config.json and export_info.json beside it, after
checking it against the eager model (see `sapiens2_hf.export`). Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

import argparse
import sys

from ..modeling.sapiens2_tasks import TASK_NAMES
from ..export.formats import EXPORT_FORMATS
from ..predict.options import BACKENDS, check_local_source, out_folder, positive_int


def add_export_subparser(subparsers) -> None:
    """Registers `export` on the `sapiens2-hf` command."""
    parser = subparsers.add_parser(
        "export",
        help="export a model to ONNX, torch.export or an AOTInductor package, verified against the eager model",
        description="Export a Sapiens2 model (backbone or any task) for deployment: a dynamic batch size, the input "
        "size fixed (the model's own unless --input-size), the image processor and config saved beside it, and the "
        "artefact checked against the eager model before the folder is written. ONNX folders run with "
        "`sapiens2-hf <task> ... --backend onnxruntime` or sapiens2_hf.export.OnnxRuntimeSapiens2Model; AOTInductor "
        "packages (--format aoti: compiled once here, no compile at start-up) with --backend aoti.",
    )
    parser.add_argument("model", help="converted folder, Hub id, or official sapiens2_<size>_<task>.safetensors file")
    parser.add_argument("--out", type=out_folder, required=True, help="output folder (written atomically)")
    parser.add_argument("--format", default="onnx", choices=EXPORT_FORMATS,
                        help="onnx (default), torch-export, or aoti: an AOTInductor package compiled for --device")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="--format aoti: the device the package is compiled for and verified on (default cpu)")
    parser.add_argument("--task", default="auto", choices=["auto", "pretrain", *TASK_NAMES],
                        help="default: read from the checkpoint")
    parser.add_argument("--input-size", type=positive_int, nargs=2, metavar=("HEIGHT", "WIDTH"), default=None,
                        help="fixed model input size (default: the model's image_size)")
    parser.add_argument("--rope-dtype", default=None, choices=["bfloat16", "float32"],
                        help="RoPE arithmetic (default: the model's own; bfloat16 is the official one)")
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset (default: the exporter's)")
    parser.add_argument("--quantize", default=None, choices=["int8-dynamic", "int8-dynamic-linear", "int8-static"],
                        help="also write model_int8.onnx, onnxruntime int8 of the linear layers (ONNX only; run it "
                             "with --backend onnxruntime-int8): int8-dynamic (fastest; int8-dynamic-linear is another "
                             "name for it) or int8-static (QDQ calibrated on noise: slower and less accurate here)")
    parser.add_argument("--no-verify", action="store_true", help="skip the comparison with the eager model")
    parser.add_argument("--overwrite", action="store_true", help="replace the export files in a non-empty folder")
    from .threads import add_threads_argument  # stdlib only: the parser stays light

    add_threads_argument(parser)
    parser.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    from ..export import ExportCheckError, export_model, format_report

    check_local_source("", args.model)
    # stderr: stdout carries the result lines; tracing, optimising and verifying take seconds to minutes
    print(f"exporting {args.model} to {args.format} (tracing, optimising"
          f"{'' if args.no_verify else ' and verifying'}: this takes a while) ...", file=sys.stderr, flush=True)
    try:
        result = export_model(
            args.model, args.out, format=args.format, task=args.task, input_size=args.input_size,
            rope_dtype=args.rope_dtype, opset=args.opset, verify=not args.no_verify, overwrite=args.overwrite,
            quantize=args.quantize, num_threads=getattr(args, "threads", None), device=args.device,
        )
    except (ExportCheckError, ImportError) as error:
        print(f"sapiens2-hf export: error: {error}", file=sys.stderr)
        return 2
    info = result.info
    height, width = info["input_size"]
    print(f"wrote {result.folder} ({info['format']}, task {info['task'] or 'backbone'}, input (batch, 3, {height}, "
          f"{width}), RoPE {info['rope']['dtype']}, {info['export_seconds']} s)")
    if "verification" in info:
        print(format_report(info["verification"]["outputs"], "verified against the eager model:"))
    if "quantization" in info:
        print(format_report(info["quantization"]["deviation_from_fp32_onnx"], "int8 vs float32 ONNX (not checked):"))
    return 0


def add_backend_argument(parser: argparse.ArgumentParser) -> None:
    """`--backend` for a predict command (see `BACKENDS`)."""
    parser.add_argument(
        "--backend", default="torch", choices=BACKENDS,
        help="torch (default), or onnxruntime / onnxruntime-int8 for a folder written by `sapiens2-hf export "
             "--format onnx` (CPU, float32 inputs; -int8 needs --quantize at export), or aoti for `--format aoti` "
             "(an AOTInductor package: nothing compiles at start-up)",
    )
    parser.add_argument(
        "--compile-cache", default=None, metavar="DIR",
        help="with --compile: the folder of the persistent compile cache (default ~/.cache/sapiens2_hf/compile), so "
             "that the next run does not compile from scratch",
    )
