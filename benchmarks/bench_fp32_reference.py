"""fp32 CPU speed at the reference: sapiens2_hf's `Sapiens2Model` vs transformers' `Sapiens2Model` (its port) vs the
official standalone backbone, on the same seeded weights and input.

The official backbone is not a dependency: pass the path of facebookresearch/sapiens2's
`sapiens/backbones/standalone/sapiens2.py` with `--official`; it is imported from that path. Its seeded, randomised
weights are then read into ours with our official-format reader (`Sapiens2Model.from_official_state_dict`, the same
path as an official checkpoint file), and ours go into transformers' class with a strict `load_state_dict`. Without
`--official` only ours and transformers' run.

Timing: one warm-up call per model, then `--rounds` rounds; each round runs every model once, in an order rotated
from round to round (so no model always runs first after the others heated the caches or the CPU). Printed per model:
median seconds and GFLOP/s; per pair: the median of the per-round ratios (robust to a slow round, which hits every
model of that round alike), and the max-abs deviation of the outputs (full token sequence after the final norm).
Ours computes RoPE in `--rope-dtype` (bfloat16 like the official model by default); transformers' port always in
float32, so its deviation from the other two is the RoPE rounding (0.2-0.4 % relative), not a bug.

Default: the 0.4b width with 8 layers (2 + 4 grouped-query + 2, the official 8/8/8 split scaled down) at 512x384,
2 threads: about 2 minutes on a 2-core machine.

    python benchmarks/bench_fp32_reference.py --official /path/to/sapiens2.py [--variant 0.4b] [--layers 8]
        [--size 512 384] [--rounds 12] [--threads 2] [--json out.json]
"""

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time

import torch
import transformers

import sapiens2_hf


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", help="path of the official standalone sapiens2.py (optional)")
    parser.add_argument("--variant", default="0.4b", help="width/heads of this official size (default 0.4b)")
    parser.add_argument("--layers", type=int, default=8, help="number of transformer blocks (default 8)")
    parser.add_argument("--size", type=int, nargs=2, default=[512, 384], metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rope-dtype", default="bfloat16", choices=["bfloat16", "float32"], help="ours only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures to this file")
    return parser.parse_args(argv)


def full_attention_layers(num_layers: int) -> int:
    """Leading (= trailing) blocks with full attention: 8 of 24 officially, the same third when scaled down."""
    return min(8, max(1, num_layers // 3))


def load_official_module(path: str):
    spec = importlib.util.spec_from_file_location("official_sapiens2_standalone", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--official {path!r} is not a Python file; pass the path of the official sapiens2.py.")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "Sapiens2"):
        raise SystemExit(f"{path} has no `Sapiens2` class; pass sapiens/backbones/standalone/sapiens2.py.")
    return module


def randomised(state_dict: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Seeded noise on every weight: fresh models have LayerScale 1e-4 and unit norms, which would make the attention
    and MLP branches nearly vanish and the deviation figures meaningless. Buffers that are not weights (the RoPE
    periods) are left alone."""
    generator = torch.Generator().manual_seed(seed)
    return {
        name: tensor if name.endswith("periods") else tensor + 0.05 * torch.randn(tensor.shape, generator=generator)
        for name, tensor in state_dict.items()
    }


def build_models(args):
    """`{name: (model, call)}` where `call(pixel_values)` returns the `(batch, tokens, hidden)` output."""
    arch = sapiens2_hf.Sapiens2Config.from_preset(args.variant)
    full = full_attention_layers(args.layers)
    models = {}
    if args.official:
        official_module = load_official_module(args.official)
        arch_name = f"bench_{args.variant}_{args.layers}"
        official_module.Sapiens2.arch_zoo = {
            **official_module.Sapiens2.arch_zoo,
            arch_name: {
                "embed_dims": arch.hidden_size,
                "num_layers": args.layers,
                "num_heads": arch.num_attention_heads,
                "feedforward_channels": arch.intermediate_size,
                "num_tokenizer_layers": 0,
            },
        }
        grouped = arch.num_attention_heads // 2
        layer_cfgs = [
            {"num_kv_heads": None if index < full or index >= args.layers - full else grouped}
            for index in range(args.layers)
        ]
        torch.manual_seed(args.seed)
        official = official_module.Sapiens2(arch=arch_name, img_size=tuple(args.size), layer_cfgs=layer_cfgs)
        official.load_state_dict(randomised(official.state_dict(), args.seed))
        official.eval()
        ours = sapiens2_hf.Sapiens2Model.from_official_state_dict(
            official.state_dict(), rope_dtype=args.rope_dtype
        ).eval()
        models["official"] = (official, lambda pixel_values: official(pixel_values)[0])
    else:
        config = sapiens2_hf.Sapiens2Config.from_preset(
            args.variant,
            num_hidden_layers=args.layers,
            num_first_full_attention_layers=full,
            num_last_full_attention_layers=full,
            image_size=list(args.size),
            rope_dtype=args.rope_dtype,
        )
        torch.manual_seed(args.seed)
        ours = sapiens2_hf.Sapiens2Model(config)
        ours.load_state_dict(randomised(ours.state_dict(), args.seed))
        ours.eval()
    theirs_config = transformers.Sapiens2Config.from_dict(ours.config.to_dict())
    theirs = transformers.Sapiens2Model(theirs_config)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    theirs.eval()
    models["sapiens2_hf"] = (ours, lambda pixel_values: ours(pixel_values).last_hidden_state)
    models["transformers"] = (theirs, lambda pixel_values: theirs(pixel_values).last_hidden_state)
    return models, ours.config


def forward_gflop(config, batch: int, height: int, width: int) -> float:
    """Matmul FLOPs of one backbone forward (2 per multiply-add), the patch-embedding conv included."""
    hidden, heads = config.hidden_size, config.num_attention_heads
    head_dim = hidden // heads
    patches = (height // config.patch_size) * (width // config.patch_size)
    tokens = patches + config.num_prefix_tokens
    total = 2 * patches * hidden * 3 * config.patch_size**2
    for kv_heads in config.num_key_value_heads_per_layer:
        projections = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim  # q + o, k + v
        mlp = 3 * hidden * config.intermediate_size  # SwiGLU: gate, up, down
        total += 2 * tokens * (projections + mlp) + 4 * tokens * tokens * hidden  # + QK^T and AV
    return batch * total / 1e9


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    models, config = build_models(args)
    names = list(models)
    height, width = args.size
    generator = torch.Generator().manual_seed(args.seed + 1)
    pixel_values = torch.randn(args.batch, 3, height, width, generator=generator)

    outputs = {}
    with torch.inference_mode():
        for name in names:  # warm-up, and the outputs compared below
            outputs[name] = models[name][1](pixel_values).float()
        times = {name: [] for name in names}
        for round_index in range(args.rounds):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                models[name][1](pixel_values)
                times[name].append(time.perf_counter() - start)

    gflop = forward_gflop(config, args.batch, height, width)
    report = {
        "setup": {
            "variant": args.variant,
            "layers": args.layers,
            "size": args.size,
            "batch": args.batch,
            "threads": args.threads,
            "rounds": args.rounds,
            "rope_dtype_ours": args.rope_dtype,
            "gflop_per_forward": round(gflop, 1),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "machine": platform.processor() or platform.machine(),
        },
        "median_s": {name: statistics.median(times[name]) for name in names},
        "ratios": {},
        "max_abs_deviation": {},
    }
    for other in ("official", "transformers"):
        if other in times:
            per_round = [ours / theirs for ours, theirs in zip(times["sapiens2_hf"], times[other])]
            report["ratios"][f"sapiens2_hf/{other}"] = {
                "median": statistics.median(per_round),
                "min": min(per_round),
                "max": max(per_round),
            }
    for first, second in (("sapiens2_hf", "official"), ("sapiens2_hf", "transformers"), ("transformers", "official")):
        if first in outputs and second in outputs:
            report["max_abs_deviation"][f"{first} vs {second}"] = (outputs[first] - outputs[second]).abs().max().item()
    scale = outputs["sapiens2_hf"].abs().max().item()

    print(
        f"{args.variant} width, {args.layers} layers, {height}x{width}, batch {args.batch}, {args.threads} threads, "
        f"{args.rounds} interleaved rounds, fp32 ({gflop:.1f} GFLOP per forward)"
    )
    for name in names:
        median = report["median_s"][name]
        print(f"  {name:<13} median {median:7.3f} s   {gflop / median:6.1f} GFLOP/s")
    for pair, ratio in report["ratios"].items():
        print(f"  {pair:<26} median of per-round ratios {ratio['median']:.3f} "
              f"(range {ratio['min']:.3f}-{ratio['max']:.3f})")
    for pair, deviation in report["max_abs_deviation"].items():
        print(f"  max |{pair}| = {deviation:.3e}  (output max-abs {scale:.3g})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return report


if __name__ == "__main__":
    sys.exit(main() and 0)
