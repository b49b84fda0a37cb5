"""Question: what does one Sapiens2 pretraining step cost per image, compared with a plain MAE step at the same
size? (And what would the student pass cost without token removal?)

Measured in one process, interleaved round-robin so that machine load affects all variants alike:

- `pretraining`: `Sapiens2ForPreTraining` with every term (teacher on the full global views, masked student pass,
  local crops, MAE decoder, DINO/iBOT heads, KoLeo), backward, AdamW step, EMA update.
- `plain_mae`: the same model with `contrastive_loss_weight=0` (teacher, heads and local crops skipped): masked student
  pass + MAE decoder, backward, AdamW step. Same backbone, decoder, crop size and mask ratio.
- `student_unmasked`: forward + backward of the backbone alone on the *full* global views (no decoder, no loss
  terms): a lower bound of what the student pass costs without token removal.

Batches are built once (collation is timed separately and reported) so the figures are model compute only.
Reports the median and interquartile range of the per-image step time, and ratios against `plain_mae`; writes JSON
with the environment. Defaults are small enough for a CPU; pass `--variant 0.4b --global-size 1024 768 ...
--device cuda --dtype bfloat16` for a real-scale measurement.

    python benchmarks/bench_pretraining.py --output benchmarks/results/pretraining_cpu.json
"""

import argparse
import json
import platform
import statistics
import time

import torch
import transformers

from sapiens2_hf.pretraining import (
    MultiCropAugmentation,
    MultiCropCollator,
    Sapiens2ForPreTraining,
    Sapiens2PreTrainingConfig,
    tiny_pretraining_config,
)
from sapiens2_hf.utils.atomic_io import atomic_write_text


def build_config(args, contrastive: bool) -> Sapiens2PreTrainingConfig:
    overrides = {"mask_ratio": args.mask_ratio, "contrastive_loss_weight": 1.0 if contrastive else 0.0}
    if args.variant == "tiny":
        backbone = {
            "hidden_size": args.hidden_size,
            "intermediate_size": 4 * args.hidden_size,
            "num_hidden_layers": args.num_layers,
            "num_attention_heads": args.hidden_size // 32,
            "num_key_value_attention_heads": args.hidden_size // 32,
            "image_size": list(args.global_size),
        }
        return tiny_pretraining_config(
            backbone, decoder_hidden_size=args.decoder_hidden_size, decoder_num_hidden_layers=args.decoder_layers,
            decoder_num_attention_heads=args.decoder_hidden_size // 32, head_hidden_size=256, head_bottleneck_size=64,
            cls_num_prototypes=1024, patch_num_prototypes=1024, **overrides,
        )
    return Sapiens2PreTrainingConfig.from_preset(args.variant, **overrides)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="tiny", help="'tiny' (sizes below) or an official size, e.g. 0.4b")
    parser.add_argument("--hidden-size", type=int, default=128, help="tiny variant only")
    parser.add_argument("--num-layers", type=int, default=4, help="tiny variant only")
    parser.add_argument("--decoder-hidden-size", type=int, default=128, help="tiny variant only")
    parser.add_argument("--decoder-layers", type=int, default=2, help="tiny variant only")
    parser.add_argument("--global-size", type=int, nargs=2, default=[128, 96], metavar=("H", "W"))
    parser.add_argument("--local-size", type=int, nargs=2, default=[64, 48], metavar=("H", "W"))
    parser.add_argument("--num-local", type=int, default=2)
    parser.add_argument("--mask-ratio", type=float, default=0.75)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="autocast dtype")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--output", default=None, help="JSON file for the results")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)

    augmentation = MultiCropAugmentation(
        global_crop_size=tuple(args.global_size), local_crop_size=tuple(args.local_size), num_local_crops=args.num_local
    )
    full_config = build_config(args, contrastive=True)
    collator = MultiCropCollator.from_config(full_config, augmentation)
    height, width = args.global_size
    images = torch.randint(0, 256, (args.batch_size, 3, height + height // 4, width + width // 4), dtype=torch.uint8)
    start = time.perf_counter()
    batch = collator([{"image": image, "seed": i} for i, image in enumerate(images)])
    collate_seconds = time.perf_counter() - start
    batch = {k: v.to(device) for k, v in batch.items()}
    mae_batch = {k: v for k, v in batch.items() if k != "local_pixel_values"}

    models = {
        "pretraining": Sapiens2ForPreTraining(full_config).to(device).train(),
        "plain_mae": Sapiens2ForPreTraining(build_config(args, contrastive=False)).to(device).train(),
    }
    optimizers = {
        name: torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        for name, model in models.items()
    }
    global_views = batch["pixel_values"].flatten(0, 1)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")

    def step(name):
        model, optimizer = models[name], optimizers[name]
        with autocast:
            outputs = model(**(batch if name == "pretraining" else mae_batch), schedule_step=100)
        outputs.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if name == "pretraining":
            model.update_teacher(0.996)

    def student_unmasked():
        backbone = models["plain_mae"].model
        with autocast:
            hidden = backbone(global_views).last_hidden_state
        hidden.float().square().mean().backward()
        backbone.zero_grad(set_to_none=True)

    variants = {"pretraining": lambda: step("pretraining"), "plain_mae": lambda: step("plain_mae"), "student_unmasked": student_unmasked}
    for _ in range(args.warmup):
        for run in variants.values():
            run()
    times = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, run in variants.items():
            synchronize(device)
            start = time.perf_counter()
            run()
            synchronize(device)
            times[name].append((time.perf_counter() - start) / args.batch_size)

    def summary(values):
        quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        return {"median_s_per_image": statistics.median(values), "iqr_s_per_image": quartiles[2] - quartiles[0]}

    results = {name: summary(values) for name, values in times.items()}
    baseline = results["plain_mae"]["median_s_per_image"]
    for name in results:
        results[name]["ratio_vs_plain_mae"] = results[name]["median_s_per_image"] / baseline
    report = {
        "question": "pretraining step time per image vs a plain MAE step at the same size",
        "results": results,
        "collate_s_per_image": collate_seconds / args.batch_size,
        "setting": {
            "variant": args.variant,
            "backbone": {k: full_config.backbone_config.to_dict()[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")},
            "decoder": [full_config.decoder_hidden_size, full_config.decoder_num_hidden_layers],
            "prototypes": full_config.cls_num_prototypes,
            "global_size": args.global_size,
            "num_global": augmentation.num_global_crops,
            "local_size": args.local_size,
            "num_local": args.num_local,
            "mask_ratio": args.mask_ratio,
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "warmup": args.warmup,
        },
        "environment": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "threads": torch.get_num_threads(),
            "dtype": args.dtype,
            "python": platform.python_version(),
        },
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        atomic_write_text(args.output, text + "\n")


if __name__ == "__main__":
    main()
