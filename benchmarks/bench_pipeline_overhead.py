"""Pipeline overhead on CPU: `sapiens2_hf` pipeline wall time vs the pure model time of the same calls.

For each case the pipeline runs on one image (given boxes for pose, no detector) and the model runs exactly the calls
the pipeline's `_forward` makes on it: one `(1, 3, H, W)` call for the dense tasks; for pose one call on all the
person crops together (`crop_batch_size` = number of people) plus its flipped copy (flip test, the default). The
model's inputs are the processor's own, prepared once outside the timing. Both are warm (one untimed call each), then
`--rounds` interleaved rounds (pipeline, model, pipeline, ...); the overhead is the median over rounds of
`pipeline / model - 1`, robust to a slow round on a shared machine. Target: <= 5 %.

The model is an official preset's architecture (random weights; speed does not depend on them), by default the 0.4b
width with 4 blocks at a 256x192 input, so the whole run takes about 2 minutes on 2 cores; pre/post-processing cost
does not depend on the depth, so a full 24-block model's overhead is about 1/6 of the one printed (divide by the model
time ratio). `--profile` adds a cProfile of the pipeline calls of each case with the top functions (file:line).

    python benchmarks/bench_pipeline_overhead.py [--variant 0.4b] [--layers 4] [--size 256 192]
        [--image-size 480 640] [--rounds 5] [--threads 2] [--profile] [--json out.json]
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time

import numpy as np
import torch

import sapiens2_hf
from sapiens2_hf.processing import Sapiens2HFImageProcessor

PIPELINE_TASK = {"pose": "sapiens2-pose", "seg": "sapiens2-segmentation", "normal": "sapiens2-normal",
                 "pointmap": "sapiens2-pointmap", "albedo": "sapiens2-albedo"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="0.4b", help="official size whose width/heads/heads' layout to use")
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks (the official 0.4b has 24)")
    parser.add_argument("--size", type=int, nargs=2, default=[256, 192], metavar=("HEIGHT", "WIDTH"),
                        help="model input size (pose crops and dense inputs)")
    parser.add_argument("--image-size", type=int, nargs=2, default=[480, 640], metavar=("HEIGHT", "WIDTH"),
                        help="size of the input photo")
    parser.add_argument("--cases", nargs="+", default=["pose:1", "pose:8", "seg", "normal", "pointmap", "albedo"],
                        help="task, or pose:<people>")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="cProfile the pipeline calls; print the top 15")
    parser.add_argument("--json", help="also write the figures to this file")
    return parser.parse_args(argv)


def input_size(task: str, args) -> list[int]:
    """`--size`, except that the pointmap's scale branch (strided convs + InstanceNorm) needs >= 256x192."""
    if task == "pointmap":
        return [max(args.size[0], 256), max(args.size[1], 192)]
    return list(args.size)


def build_model(task: str, args) -> torch.nn.Module:
    torch.manual_seed(0)
    full = min(8, max(1, args.layers // 3))  # the official 8 + GQA + 8 layout scaled down, as bench_fp32_reference
    config = sapiens2_hf.Sapiens2Config.from_preset(
        args.variant, task=task, num_hidden_layers=args.layers, num_first_full_attention_layers=full,
        num_last_full_attention_layers=full, image_size=input_size(task, args))
    return sapiens2_hf.model_class_for_task(task)(config).eval()


def person_boxes(count: int, height: int, width: int) -> list[list[float]]:
    """`count` boxes side by side across the photo (xyxy pixels)."""
    step = width / count
    return [[i * step + 2.0, 0.1 * height, (i + 1) * step - 2.0, 0.95 * height] for i in range(count)]


def make_case(case: str, args):
    """(pipeline call, pure model call) for one case; both run the same model on the same inputs."""
    task, _, people = case.partition(":")
    height, width = args.image_size
    image = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    model = build_model(task, args)
    size = input_size(task, args)
    processor = Sapiens2HFImageProcessor(task=task, size={"height": size[0], "width": size[1]})
    pipe = sapiens2_hf.pipeline(PIPELINE_TASK[task], model=model, image_processor=processor, device="cpu")
    if task == "pose":
        boxes = person_boxes(int(people or 1), height, width)
        pixel_values = processor([image], boxes=[boxes], box_format="xyxy", task="pose")["pixel_values"]

        def run_pipeline():
            return pipe(image, boxes=boxes, crop_batch_size=len(boxes))

        def run_model():
            with torch.inference_mode():
                return [model(pixel_values=run).heatmaps.float() for run in (pixel_values, pixel_values.flip(-1))]
    else:
        pixel_values = processor(image, task=task)["pixel_values"]

        def run_pipeline():
            return pipe(image)

        def run_model():
            with torch.inference_mode():
                return model(pixel_values=pixel_values)
    return run_pipeline, run_model, tuple(pixel_values.shape)


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def profile(function, rounds: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(rounds):
        function()
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(15)
    return stream.getvalue()


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {args.threads} threads, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
          f"; model: {args.variant} width, {args.layers} blocks, input {args.size[0]}x{args.size[1]}; photo "
          f"{args.image_size[0]}x{args.image_size[1]}; {args.rounds} rounds")
    print(f"{'case':<10} {'model batch':<18} {'model s':>9} {'pipeline s':>10} {'overhead':>9}")
    rows = []
    for case in args.cases:
        run_pipeline, run_model, shape = make_case(case, args)
        run_pipeline(), run_model()  # warm: allocator, RoPE cache, processor state
        model_times, pipeline_times, ratios = [], [], []
        for _ in range(args.rounds):
            pipeline_time = timed(run_pipeline)
            model_time = timed(run_model)
            pipeline_times.append(pipeline_time)
            model_times.append(model_time)
            ratios.append(pipeline_time / model_time - 1)
        overhead = statistics.median(ratios)
        row = {"case": case, "model_batch": list(shape), "model_s": statistics.median(model_times),
               "pipeline_s": statistics.median(pipeline_times), "overhead": overhead}
        rows.append(row)
        calls = "2x " if case.startswith("pose") else ""
        print(f"{case:<10} {calls + 'x'.join(map(str, shape)):<18} {row['model_s']:9.3f} {row['pipeline_s']:10.3f} "
              f"{overhead:9.1%}{'' if overhead <= 0.05 else '  (> 5 %)'}", flush=True)
        if args.profile:
            print(profile(run_pipeline, max(1, args.rounds // 2)))
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "load_average": load, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
