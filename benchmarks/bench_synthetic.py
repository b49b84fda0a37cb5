"""How many fully labelled synthetic samples per second does one CPU core render?

Renders `SyntheticHumans(256, 192).sample(sample_seed(0, i))`, sample i of a dataset with seed 0 (image + all labels:
segmentation, normals, pointmap/depth, albedo, mask, instances, 308 keypoints with visibility, boxes), on one thread
and reports images/s from the median per-image time, both wall clock and process CPU time (the CPU figure is the
fairer one on a shared machine). Baseline measured in the same process: decoding the same image from PNG with PIL
(what a disk-backed dataset pays per image). Optionally also times `write_dataset` (all on-disk formats).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_synthetic.py [--num-images 200] [--height 256 --width 192]
        [--write-samples 100] [--output result.json]
"""

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from sapiens2_hf.data.synthetic import SyntheticHumans, sample_seed, write_dataset  # noqa: E402
from sapiens2_hf.utils.atomic_io import atomic_write_text  # noqa: E402


def _quartiles(values):
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-images", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--height", type=int, default=256)
    parser.add_argument("--width", type=int, default=192)
    parser.add_argument("--write-samples", type=int, default=100, help="0 skips the write_dataset timing")
    parser.add_argument("--output", default=None, help="optional JSON file for the result")
    args = parser.parse_args()
    torch.set_num_threads(1)

    cfg = SyntheticHumans(args.height, args.width)
    for index in range(args.warmup):
        cfg.sample(sample_seed(1, index))
    wall, cpu, people = [], [], []
    for index in range(args.num_images):  # sample i of a dataset with seed 0 (the one seed rule)
        w0, c0 = time.perf_counter(), time.process_time()
        sample = cfg.sample(sample_seed(0, index))
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
        people.append(sample["num_people"])

    png = io.BytesIO()
    Image.fromarray(sample["image"]).save(png, format="PNG")
    decode = []
    for _ in range(max(50, args.num_images // 2)):
        w0 = time.perf_counter()
        np.asarray(Image.open(io.BytesIO(png.getvalue())).convert("RGB"))
        decode.append(time.perf_counter() - w0)

    wall_q, cpu_q, dec_q = _quartiles(wall), _quartiles(cpu), _quartiles(decode)
    result = {
        "question": "fully labelled synthetic samples per second on one CPU thread",
        "resolution": [args.height, args.width],
        "num_images": args.num_images,
        "mean_people_per_image": float(np.mean(people)),
        "images_per_s_wall_median": 1.0 / wall_q[1],
        "images_per_s_cpu_median": 1.0 / cpu_q[1],
        "images_per_s_wall_mean": len(wall) / sum(wall),
        "ms_per_image_wall_q1_median_q3": [1e3 * v for v in wall_q],
        "ms_per_image_cpu_q1_median_q3": [1e3 * v for v in cpu_q],
        "baseline_png_decode_ms_median": 1e3 * dec_q[1],
        "ratio_render_to_png_decode": wall_q[1] / dec_q[1],
    }
    if args.write_samples > 0:
        with tempfile.TemporaryDirectory() as tmp:
            w0, c0 = time.perf_counter(), time.process_time()
            write_dataset(tmp, args.write_samples, args.height, args.width, seed=0)
            result["write_dataset_samples_per_s_wall"] = args.write_samples / (time.perf_counter() - w0)
            result["write_dataset_samples_per_s_cpu"] = args.write_samples / (time.process_time() - c0)
            result["write_dataset_s_per_1000_wall"] = 1000.0 / result["write_dataset_samples_per_s_wall"]
    result["environment"] = {
        "python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "device": "cpu", "dtype": "float32 ray casting, float64 geometry",
    }
    text = json.dumps(result, indent=1)
    print(text)
    print(f"images/s (one thread, {args.height}x{args.width}, all labels): "
          f"{result['images_per_s_wall_median']:.1f} wall, {result['images_per_s_cpu_median']:.1f} CPU-time")
    if args.output:
        atomic_write_text(args.output, text)


if __name__ == "__main__":
    main()
