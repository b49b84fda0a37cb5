"""Frames per second of `sapiens2-hf <task> video.mp4` against the per-image path and against the model alone.

A synthetic video (moving bright boxes on a noisy background, written with PyAV) runs through, in interleaved rounds
(so machine load hits every path alike; the median round is the figure):

- `model only`: the model's forward on the frames' preprocessed tensors, batch `--batch-size` (the floor: pose runs
  one crop per frame, with the flip test like the CLI's default);
- `per-image`: the CLI on a folder holding the same frames as PNG files (how a video was processed before: frames
  extracted first; the extraction is not timed), batch 1, one overlay PNG per frame;
- `video bN`: the CLI on the mp4, batch N (decoding, inference, per-frame outputs, encoding the annotated mp4);
  `video bN serial`: the same with decoding and writing on the calling thread instead of their background threads
  (predict/video.py), to show what the overlap gains.
  Pose: person boxes from `--boxes` for frame 0 only and `--detect-every` far away, so every later frame takes its
  box from the tracked keypoints (no detector is timed: the default one needs the Hub), with One-Euro smoothing.

Every CLI run writes its arrays/JSON (`--no-arrays` is not used), one thread, CPU unless `--device`. With the tiny
model (default) the model is cheap and the figures show each path's own overhead; `--model FOLDER` times a real
converted checkpoint.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_video.py [--task seg|pose] [--frames 48] [--rounds 3]
        [--height 240 --width 320] [--batch-size 8] [--model FOLDER] [--device cpu] [--output result.json]
"""

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import sapiens2_hf  # noqa: E402
from sapiens2_hf.cli.main import main as cli  # noqa: E402
from sapiens2_hf.processing import Sapiens2HFImageProcessor  # noqa: E402
from sapiens2_hf.utils.atomic_io import atomic_write_text  # noqa: E402
from sapiens2_hf.video import write_video  # noqa: E402


def synthetic_frames(count: int, height: int, width: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    background = rng.integers(0, 80, (height, width, 3), dtype=np.uint8)
    for k in range(count):
        frame = background.copy()
        x = int((width // 8) + k * (width // 2) / max(count, 1))
        frame[height // 6 : height - height // 6, x : x + width // 5] = (200, 160, 120)
        yield frame, [float(x), float(height // 6), float(x + width // 5), float(height - height // 6)]


def tiny_model(folder: Path, task: str) -> Path:
    torch.manual_seed(0)
    sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task)).save_pretrained(folder)
    Sapiens2HFImageProcessor(task=task, size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def model_only_seconds(model_path: Path, task: str, frames: list, boxes: list, batch_size: int, device: str) -> float:
    """Seconds of the model's forward passes alone over all frames (inputs preprocessed beforehand)."""
    model = sapiens2_hf.model_class_for_task(task).from_pretrained(model_path).to(device).eval()
    processor = Sapiens2HFImageProcessor.from_pretrained(model_path)
    if task == "pose":
        tensors = [processor([f], boxes=[[b]], box_format="xyxy", task="pose")["pixel_values"]
                   for f, b in zip(frames, boxes)]
    else:
        tensors = [processor([f], task=task)["pixel_values"] for f in frames]
    batches = [torch.cat(tensors[i : i + batch_size]).to(device) for i in range(0, len(tensors), batch_size)]
    with torch.inference_mode():
        model(pixel_values=batches[0])  # warm-up
        start = time.perf_counter()
        for batch in batches:
            model(pixel_values=batch)
            if task == "pose":  # the CLI's default flip test runs the flipped crops too
                model(pixel_values=batch.flip(-1))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start


class _Serial:
    """predict/video.py's `_InOrder` without its thread: each item consumed when submitted."""

    def __init__(self, consume, size):
        self._consume = consume

    def submit(self, *item):
        self._consume(*item)

    def close(self):
        pass


def run_cli(argv: list[str], serial: bool = False) -> float:
    from sapiens2_hf.predict import video as video_cli

    patches = contextlib.ExitStack()
    if serial:
        for name, value in (("_InOrder", _Serial), ("_prefetch", lambda items, size: iter(items))):
            original = getattr(video_cli, name)
            setattr(video_cli, name, value)
            patches.callback(setattr, video_cli, name, original)
    with patches, contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        code = cli(argv)
        elapsed = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"sapiens2-hf {' '.join(argv)} exited with {code}")
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="seg", choices=["seg", "pose", "normal", "pointmap", "albedo"])
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--model", default=None, help="converted model folder (default: a tiny random model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--output", default=None, help="optional JSON file for the result")
    args = parser.parse_args()
    torch.set_num_threads(1)

    work = Path(tempfile.mkdtemp(prefix="bench_video_"))
    try:
        model = Path(args.model) if args.model else tiny_model(work / "model", args.task)
        pairs = list(synthetic_frames(args.frames, args.height, args.width))
        frames, boxes = [f for f, _ in pairs], [b for _, b in pairs]
        video = write_video(work / "clip.mp4", frames, fps=30)
        folder = work / "frames"
        folder.mkdir()
        for k, frame in enumerate(frames):
            Image.fromarray(frame).save(folder / f"frame_{k:06d}.png")
        boxes_file = work / "boxes.json"
        entries = {f"frame_{k:06d}.png": [b] for k, b in enumerate(boxes)}
        entries["clip.mp4#0"] = [boxes[0]]
        boxes_file.write_text(json.dumps(entries))
        common = ["--model", str(model), "--device", args.device, "--threads", "1", "--quiet", "--overwrite"]
        if args.task == "pose":
            common += ["--boxes", str(boxes_file)]
        paths = {
            "per-image b1": [args.task, str(folder), "--out", str(work / "out_images"), *common],
            "video b1": [args.task, str(video), "--out", str(work / "out_video1"), *common],
            f"video b{args.batch_size}": [args.task, str(video), "--out", str(work / "out_videoN"), *common,
                                          "--batch-size", str(args.batch_size)],
        }
        if args.task == "pose":
            for name in ("video b1", f"video b{args.batch_size}"):
                paths[name] += ["--detect-every", str(10 * args.frames)]
        seconds: dict[str, list[float]] = {name: [] for name in ["model only", *paths,
                                                                  f"video b{args.batch_size} serial"]}
        for name, argv in paths.items():  # warm-up (imports, first model load)
            run_cli(argv)
        for _ in range(args.rounds):
            seconds["model only"].append(
                model_only_seconds(model, args.task, frames, boxes, args.batch_size, args.device))
            for name, argv in paths.items():
                seconds[name].append(run_cli(argv))
            seconds[f"video b{args.batch_size} serial"].append(run_cli(paths[f"video b{args.batch_size}"], serial=True))
        result = {
            "task": args.task, "frames": args.frames, "size": [args.height, args.width],
            "batch_size": args.batch_size, "model": str(args.model or "tiny (random weights)"),
            "device": args.device, "threads": 1, "rounds": args.rounds,
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs, torch {torch.__version__}",
            "frames_per_second": {name: round(args.frames / statistics.median(values), 2)
                                  for name, values in seconds.items()},
            "median_seconds": {name: round(statistics.median(values), 3) for name, values in seconds.items()},
        }
        per_image = result["median_seconds"]["per-image b1"]
        print(f"{args.task}: {args.frames} frames {args.width}x{args.height}, {result['model']}, {args.device}, "
              f"median of {args.rounds} rounds")
        for name, fps in result["frames_per_second"].items():
            ratio = per_image / result["median_seconds"][name]
            print(f"  {name:<16} {fps:8.2f} frames/s   x{ratio:5.2f} vs per-image")
        if args.output:
            atomic_write_text(args.output, json.dumps(result, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
