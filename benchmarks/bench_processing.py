"""How fast is the official-parity pre/post-processing, against transformers' processor and against the model?

Questions answered in one run (same process, same machine):
1. Pose decoding: our `Sapiens2HFImageProcessor.post_process_pose_estimation` vs transformers'
   `Sapiens2ImageProcessor.post_process_pose_estimation` on the same heatmaps (308 x 256 x 192 per person), for 1 and
   8 people; ratio = theirs / ours, plus the largest keypoint difference between the two (equal-results check).
2. Per task: pre-processing + post-processing time per image vs model forward time (random weights, the chosen
   variant and resolution). Pose at 1 and 8 people with the flip test (the model cost is 2 forwards per person; the
   8-person model time is 8x the measured 1-person time unless --full-pose-model).

Usage (CPU defaults; GPU sizes via flags):
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_processing.py --out benchmarks/results/bench_processing_cpu.json
    ... --skip-model                      # only the processing columns and the transformers comparison
    ... --device cuda --variant 1b        # on a GPU
Prints a table and writes JSON with the environment next to the numbers. Times: median and IQR of --repeats runs
after --warmup runs, with device synchronisation.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import types
from pathlib import Path

import numpy as np
import torch

from sapiens2_hf.modeling.post_processing_sapiens2_hf import FlippedCropOutputs


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, warmup: int, repeats: int) -> dict:
    for _ in range(warmup):
        fn()
    _sync(device)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        samples.append(time.perf_counter() - start)
    quartiles = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return {"median_s": statistics.median(samples), "iqr_s": quartiles[2] - quartiles[0], "runs": len(samples)}


def synthetic_heatmaps(num_people: int, size=(256, 192), seed: int = 0, device="cpu") -> torch.Tensor:
    """Gaussian blobs (sigma 6, peak ~1) plus noise, one per channel: realistic for the refinement's cost."""
    generator = torch.Generator().manual_seed(seed)
    height, width = size
    centres = torch.rand(num_people, 308, 2, generator=generator) * torch.tensor([width - 1, height - 1])
    ys = torch.arange(height).float()[:, None]
    xs = torch.arange(width).float()[None, :]
    maps = torch.exp(-((xs - centres[..., 0, None, None]) ** 2 + (ys - centres[..., 1, None, None]) ** 2) / 72.0)
    maps = maps * (0.5 + 0.5 * torch.rand(num_people, 308, 1, 1, generator=generator))
    maps = maps + 0.02 * torch.randn(maps.shape, generator=generator)
    return maps.to(device)


def bench_pose_decode(args, device) -> list[dict]:
    from transformers.models.sapiens2.image_processing_sapiens2 import Sapiens2ImageProcessor

    from sapiens2_hf.processing import Sapiens2HFImageProcessor

    ours = Sapiens2HFImageProcessor(task="pose", size={"height": 1024, "width": 768}, box_format="xywh")
    theirs = Sapiens2ImageProcessor(size={"height": 1024, "width": 768})
    rows = []
    for people in args.people:
        heatmaps = synthetic_heatmaps(people, device=device)
        boxes = [[[40.0 + 30 * k, 60.0, 300.0, 700.0] for k in range(people)]]
        outputs = types.SimpleNamespace(heatmaps=heatmaps)
        ours_t = timed(lambda: ours.post_process_pose_estimation(outputs, boxes=boxes, box_format="xywh"), device, args.warmup,
                       args.repeats)
        theirs_t = timed(lambda: theirs.post_process_pose_estimation(outputs, boxes=boxes), device, 1,
                         max(1, args.repeats // 2))
        a = torch.stack([p["keypoints"] for p in ours.post_process_pose_estimation(outputs, boxes=boxes, box_format="xywh")[0]])
        b = torch.stack([p["keypoints"] for p in theirs.post_process_pose_estimation(outputs, boxes=boxes)[0]])
        difference = (a.cpu().double() - b.cpu().double()).abs().max().item()
        rows.append({"people": people, "ours": ours_t, "transformers": theirs_t,
                     "ratio_transformers_over_ours": theirs_t["median_s"] / ours_t["median_s"],
                     "max_keypoint_difference_px": difference})
        print(f"pose decode {people} person(s): ours {ours_t['median_s'] * 1e3:8.1f} ms, transformers "
              f"{theirs_t['median_s'] * 1e3:8.1f} ms, ratio {rows[-1]['ratio_transformers_over_ours']:.1f}x, "
              f"max |difference| {difference:.2e} px")
    return rows


def _fake_outputs(task, batch, height, width, device):
    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(device)

    if task == "seg":
        return types.SimpleNamespace(logits=randn(batch, 29, height, width))
    if task == "normal":
        return types.SimpleNamespace(normals=randn(batch, 3, height, width))
    if task == "pointmap":
        return types.SimpleNamespace(pointmaps=randn(batch, 3, height, width), scales=randn(batch, 1).abs() + 0.1)
    return types.SimpleNamespace(albedos=randn(batch, 3, height, width))


def bench_tasks(args, device) -> list[dict]:
    import sapiens2_hf
    from sapiens2_hf.processing import Sapiens2HFImageProcessor

    height, width = args.height, args.width
    image = np.random.default_rng(0).integers(0, 256, (args.image_height, args.image_width, 3), dtype=np.uint8)
    rows = []
    model_time_1_person = None
    for task in args.tasks:
        processor = Sapiens2HFImageProcessor(task=task, size={"height": height, "width": width})
        model = None
        if not args.skip_model:
            config = sapiens2_hf.Sapiens2Config.from_preset(args.variant, task=task, image_size=[height, width])
            model = sapiens2_hf.model_class_for_task(task)(config).eval().to(device, getattr(torch, args.dtype))
        settings = [(p,) for p in args.people] if task == "pose" else [(None,)]
        for (people,) in settings:
            if task == "pose":
                boxes = [[[20.0 + 10 * k, 40.0 + 5 * k, args.image_width * 0.6, args.image_height * 0.9]
                          for k in range(people)]]
                pre = timed(lambda: processor(image, boxes=boxes, box_format="xyxy", device=device), device,
                            args.warmup, args.repeats)
                inputs = processor(image, boxes=boxes, box_format="xyxy")
                heatmaps = synthetic_heatmaps(people, (height // 4, width // 4), device=device)
                flipped = synthetic_heatmaps(people, (height // 4, width // 4), seed=1, device=device)
                post = timed(lambda: processor.post_process_pose_estimation(
                    types.SimpleNamespace(heatmaps=heatmaps), crops=inputs,
                    outputs_flipped=FlippedCropOutputs(types.SimpleNamespace(heatmaps=flipped))), device, args.warmup,
                    args.repeats)
                model_t = None
                if model is not None:
                    if people == 1 or args.full_pose_model or model_time_1_person is None:
                        pixels = inputs["pixel_values"].to(device, model.dtype)

                        def run():
                            with torch.inference_mode():
                                model(pixel_values=pixels)
                                model(pixel_values=pixels.flip(-1))

                        model_t = timed(run, device, 1, args.model_repeats)
                        if people == 1:
                            model_time_1_person = model_t
                    else:
                        model_t = {"median_s": model_time_1_person["median_s"] * people, "iqr_s": None,
                                   "runs": 0, "estimated_from_1_person": True}
            else:
                pre = timed(lambda: processor(image, device=device), device, args.warmup, args.repeats)
                inputs = processor(image)
                outputs = _fake_outputs(task, 1, height, width, device)
                post_fn = {"seg": lambda: processor.post_process_semantic_segmentation(
                               outputs, target_sizes=inputs["original_sizes"].tolist()),
                           "normal": lambda: processor.post_process_normal_estimation(
                               outputs, source_sizes=inputs["original_sizes"].tolist()),
                           "pointmap": lambda: processor.post_process_pointmap_estimation(
                               outputs, source_sizes=inputs["original_sizes"].tolist()),
                           "albedo": lambda: processor.post_process_albedo_estimation(
                               outputs, source_sizes=inputs["original_sizes"].tolist())}[task]
                post = timed(post_fn, device, args.warmup, args.repeats)
                model_t = None
                if model is not None:
                    pixels = inputs["pixel_values"].to(device, model.dtype)

                    def run():
                        with torch.inference_mode():
                            model(pixel_values=pixels)

                    model_t = timed(run, device, 1, args.model_repeats)
            processing = pre["median_s"] + post["median_s"]
            row = {"task": task, "people": people, "pre": pre, "post": post, "model": model_t,
                   "processing_over_model_percent": None if model_t is None
                   else 100.0 * processing / model_t["median_s"]}
            rows.append(row)
            label = task if people is None else f"pose x{people}"
            model_text = "  (model skipped)" if model_t is None else (
                f", model {model_t['median_s']:.2f} s -> pre+post = {row['processing_over_model_percent']:.2f} %"
                + (" (model estimated from 1 person)" if model_t.get("estimated_from_1_person") else ""))
            print(f"{label:12s} pre {pre['median_s'] * 1e3:8.1f} ms, post {post['median_s'] * 1e3:8.1f} ms"
                  + model_text)
        del model
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--variant", default="0.4b", help="model size for the model-time column")
    parser.add_argument("--height", type=int, default=1024)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--image-height", type=int, default=1920, help="size of the synthetic input photo")
    parser.add_argument("--image-width", type=int, default=1080)
    parser.add_argument("--people", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tasks", nargs="+", default=["pose", "seg", "normal", "pointmap", "albedo"])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model-repeats", type=int, default=1)
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--skip-tasks", action="store_true", help="only the transformers comparison")
    parser.add_argument("--full-pose-model", action="store_true", help="time the 8-person model run too")
    parser.add_argument("--out", default=None, help="JSON file for the results")
    args = parser.parse_args()
    device = torch.device(args.device)
    import transformers

    result = {
        "environment": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "numpy": np.__version__, "python": platform.python_version(), "machine": platform.machine(),
                        "device": str(device), "torch_threads": torch.get_num_threads(), "dtype": args.dtype,
                        "variant": args.variant, "input_hw": [args.height, args.width],
                        "image_hw": [args.image_height, args.image_width]},
        "pose_decode_vs_transformers": bench_pose_decode(args, device),
    }
    if not args.skip_tasks:
        result["tasks"] = bench_tasks(args, device)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
