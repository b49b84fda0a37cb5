"""GPU recipe benchmark: images/s per task for Sapiens2 0.4b and 1b at 1024x768, eager vs compiled, fp32 vs bf16,
with each configuration's max deviation from fp32 eager.

Models have the official presets' architecture with seeded random weights (`Sapiens2Config.from_preset`), so no
download is needed; speed does not depend on the weights, and the deviation figures are those of random weights
(trained ones have other activation scales; quote them as relative deviations). Every configuration is set up by
the library's own recipe, `sapiens2_hf.inference_recipe.prepare_for_inference` (bf16 weights with the RoPE kept in
its official dtype, SDPA attention: FlashAttention through SDPA where the GPU has it, `torch.compile`), so the
figures are those of `sapiens2_hf.pipeline(..., fast=True)` and `sapiens2-hf <task> --compile` minus pre/post-
processing (benchmarks/bench_pipeline_overhead.py measures that part).

Timing: `--warmup` calls (the first one compiles; its time is printed as "compile s"), then `--rounds` timed calls,
each synchronised; images/s = batch * rounds / time. `--cuda-graphs` adds `mode="reduce-overhead"` (CUDA graphs).

    python benchmarks/bench_gpu.py --device cuda                       # 0.4b and 1b, all tasks (~15-30 min on H100)
    python benchmarks/bench_gpu.py --device cuda --variants 1b --tasks pose --cuda-graphs
    python benchmarks/bench_gpu.py --device cpu --variant tiny         # smoke test of the script itself (CPU)
"""

import argparse
import copy
import gc
import json
import platform
import sys
import time

import torch

import sapiens2_hf
from sapiens2_hf.inference_recipe import prepare_for_inference, resolve_dtype

TASKS = ("pose", "seg", "normal", "pointmap", "albedo")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--variants", "--variant", nargs="+", default=["0.4b", "1b"],
                        help="official sizes, or 'tiny' (the test configuration, 64x48) for a smoke test")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"],
                        choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--size", type=int, nargs=2, default=None, metavar=("HEIGHT", "WIDTH"),
                        help="input size (default 1024 768; the tiny variant: 64 48)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--cuda-graphs", action="store_true", help="also compiled with mode='reduce-overhead'")
    parser.add_argument("--compile-backend", default="inductor", help="'eager' checks capture only (fast smoke test)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures to this file")
    return parser.parse_args(argv)


def build_model(variant: str, task: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = (sapiens2_hf.tiny_config(task) if variant == "tiny"
              else sapiens2_hf.Sapiens2Config.from_preset(variant, task=task))
    return sapiens2_hf.model_class_for_task(task)(config).eval()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main_output(outputs) -> torch.Tensor:
    """The task's prediction (heatmaps, logits, normals, pointmap, albedo): the first field of the output."""
    return outputs.to_tuple()[0] if hasattr(outputs, "to_tuple") else outputs[0]


def run_configuration(model, pixel_values, args, device):
    """(compile seconds, seconds per call, output on the CPU in float32)."""
    with torch.inference_mode():
        start = time.perf_counter()
        output = main_output(model(pixel_values=pixel_values)).float()
        synchronize(device)
        first = time.perf_counter() - start
        for _ in range(args.warmup - 1):
            main_output(model(pixel_values=pixel_values))
        synchronize(device)
        start = time.perf_counter()
        for _ in range(args.rounds):
            main_output(model(pixel_values=pixel_values))
        synchronize(device)
        per_call = (time.perf_counter() - start) / args.rounds
    return first, per_call, output.cpu()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    # fp32 eager runs first: it is the reference of the deviation column (without float32, the first dtype is).
    args.dtypes = sorted(dict.fromkeys(args.dtypes), key=lambda name: name != "float32")
    modes = [("eager", False, None)]
    if not args.no_compile:
        modes.append(("compiled", True, None))
        if args.cuda_graphs:
            modes.append(("compiled+cudagraphs", True, "reduce-overhead"))
    where = torch.cuda.get_device_name(device) if device.type == "cuda" and torch.cuda.is_available() else (
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print(f"device {device} ({where}), torch {torch.__version__}, batch {args.batch}, {args.rounds} rounds")
    print(f"{'model':<18} {'dtype':<9} {'mode':<20} {'img/s':>8} {'ms/call':>9} {'compile s':>9} "
          f"{'max|x-fp32|':>11} {'rel':>8}  attention")
    rows = []
    for variant in args.variants:
        for task in args.tasks:
            base = build_model(variant, task, args.seed)
            height, width = args.size or ((64, 48) if variant == "tiny" else (1024, 768))
            pixel_values = torch.randn(args.batch, 3, height, width, generator=torch.Generator().manual_seed(1))
            reference = None
            for dtype_name in args.dtypes:
                dtype = resolve_dtype(dtype_name)
                for mode_name, compile_model, mode in modes:
                    torch._dynamo.reset()  # every configuration compiles afresh (no recompile limit, fair timing)
                    model = prepare_for_inference(copy.deepcopy(base), device=device, dtype=dtype,
                                                  compile=compile_model, attention="sdpa", mode=mode,
                                                  backend=args.compile_backend)
                    inputs = pixel_values.to(device, dtype)
                    first, per_call, output = run_configuration(model, inputs, args, device)
                    if reference is None:  # fp32 eager comes first when float32 is in --dtypes
                        reference = output
                    deviation = (output - reference).abs().max().item()
                    relative = deviation / max(reference.abs().max().item(), 1e-12)
                    row = {"variant": variant, "task": task, "dtype": dtype_name, "mode": mode_name,
                           "images_per_s": args.batch / per_call, "ms_per_call": 1000 * per_call,
                           "compile_s": first if compile_model else None, "max_abs_vs_fp32": deviation,
                           "relative_vs_fp32": relative, "attention": model.config._attn_implementation,
                           "flash_available": model.inference_recipe.flash_attention_available,
                           "size": [height, width], "batch": args.batch}
                    rows.append(row)
                    compile_text = f"{first:9.1f}" if compile_model else f"{'-':>9}"
                    flash = " (flash)" if row["flash_available"] else ""
                    print(f"{variant + ' ' + task:<18} {dtype_name:<9} {mode_name:<20} {row['images_per_s']:8.2f} "
                          f"{row['ms_per_call']:9.1f} {compile_text} {deviation:11.3g} {relative:8.2%}  "
                          f"{row['attention']}{flash}", flush=True)
                    del model, inputs
                    gc.collect()
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
            del base
            gc.collect()
    if reference is None or not rows:
        return 1
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": str(device), "where": where, "torch": torch.__version__, "rows": rows}, handle,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
