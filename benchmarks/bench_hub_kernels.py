"""What transformers' hub kernels (`from_pretrained(use_kernels=...)`, on by default from transformers 5.25 unless
`USE_HUB_KERNELS=0`) do to our classes and to transformers' own Sapiens2 classes, on this machine's device.

For each side the same saved seg model (0.4b width, `--layers` blocks, seeded random weights) is loaded twice, with
`use_kernels` left to transformers (the default) and with `use_kernels=False`. Printed per side: the modules whose class
declares a hub-kernel layer (what `kernels.kernelize` may replace: transformers decorates its RMSNorm and SiLU, ours
declares none), how many of them had their forward replaced after loading, the max-abs difference of the logits
between the two loads, and the median time per forward of each with their ratio (rounds alternate the two models).

On a CPU the kernels library maps none of those layers (Liger's RMSNorm and the activation kernels are registered for
CUDA/ROCm/XPU only), so both sides run torch's code either way. On a GPU transformers' class gets Liger's RMSNorm from
the Hub (a download; needs Hub access) and ours still runs its own.

    HF_HUB_OFFLINE=1 python benchmarks/bench_hub_kernels.py [--device cpu] [--layers 4] [--size 256 192] [--rounds 8]
"""

import argparse
import importlib.metadata
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

import sapiens2_hf


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--size", type=int, nargs=2, default=[256, 192], metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the figures to this file")
    return parser.parse_args(argv)


def kernel_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Modules whose class declares a hub-kernel layer name (`kernels.use_kernel_forward_from_hub`)."""
    return [module for module in model.modules() if getattr(type(module), "kernel_layer_name", None)]


def replaced_forwards(model: torch.nn.Module) -> int:
    """How many kernel layers run a forward other than their class's own (what `kernelize` swaps in)."""
    return sum(type(module).forward is not getattr(module.forward, "__func__", module.forward)
               or "forward" in vars(module) for module in kernel_layers(model))


def time_pair(models, pixel_values, rounds):
    times = [[], []]
    with torch.no_grad():
        for model in models:
            model(pixel_values)  # warm-up
        for round_index in range(rounds):
            order = (0, 1) if round_index % 2 == 0 else (1, 0)
            for index in order:
                start = time.perf_counter()
                models[index](pixel_values)
                if pixel_values.device.type == "cuda":
                    torch.cuda.synchronize()
                times[index].append(time.perf_counter() - start)
    return [statistics.median(side) for side in times]


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    config = sapiens2_hf.Sapiens2Config.from_preset("0.4b", task="seg", num_hidden_layers=args.layers,
                                                     image_size=list(args.size))
    torch.manual_seed(0)
    ours = sapiens2_hf.Sapiens2ForSemanticSegmentation(config)
    theirs = transformers.Sapiens2ForSemanticSegmentation(transformers.Sapiens2Config.from_dict(config.to_dict()))
    theirs.load_state_dict(ours.state_dict(), strict=True)
    pixel_values = torch.randn(1, 3, *args.size, generator=torch.Generator().manual_seed(0)).to(args.device)
    try:
        kernels_version = importlib.metadata.version("kernels")
    except importlib.metadata.PackageNotFoundError:
        kernels_version = "not installed"
    print(f"transformers {transformers.__version__}, kernels {kernels_version}, torch {torch.__version__}, "
          f"device {args.device}, {platform.machine()} {torch.backends.cpu.get_cpu_capability()}, "
          f"{args.threads} threads, 0.4b width x {args.layers} layers at {args.size[0]}x{args.size[1]}")
    record = {"transformers": transformers.__version__, "kernels": kernels_version, "device": args.device, "sides": {}}
    with tempfile.TemporaryDirectory() as folder:
        for side, model, cls in (("sapiens2_hf", ours, sapiens2_hf.Sapiens2ForSemanticSegmentation),
                                 ("transformers", theirs, transformers.Sapiens2ForSemanticSegmentation)):
            path = Path(folder) / side
            model.save_pretrained(path)
            default = cls.from_pretrained(path).to(args.device).eval()
            off = cls.from_pretrained(path, use_kernels=False).to(args.device).eval()
            with torch.no_grad():
                difference = (default(pixel_values).logits - off(pixel_values).logits).abs().max().item()
            seconds_default, seconds_off = time_pair((default, off), pixel_values, args.rounds)
            figures = {"kernel_layers": len(kernel_layers(default)), "replaced": replaced_forwards(default),
                       "use_kernels_after_default_load": bool(getattr(default, "use_kernels", False)),
                       "max_abs_difference": difference, "seconds_default": seconds_default,
                       "seconds_use_kernels_false": seconds_off, "ratio": seconds_default / seconds_off}
            record["sides"][side] = figures
            print(f"{side:>13}: kernel layers {figures['kernel_layers']:3d}, replaced {figures['replaced']:3d}, "
                  f"use_kernels after a default load {figures['use_kernels_after_default_load']}, logits max-abs "
                  f"{difference:.3g}, default {seconds_default * 1e3:.1f} ms vs use_kernels=False "
                  f"{seconds_off * 1e3:.1f} ms (ratio {figures['ratio']:.3f})")
    if args.json:
        sys.path.insert(0, str(Path(__file__).parent))
        from _results import write_record

        write_record(args.json, record)


if __name__ == "__main__":
    main()
