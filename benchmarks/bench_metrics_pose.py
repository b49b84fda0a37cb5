"""OKS keypoint AP: our `KeypointOksAP` vs pycocotools' `COCOeval(iouType="keypoints")` with the 308 Sapiens2 sigmas,
on the same synthetic detections: equality of the ten COCO figures and time.

Synthetic set: `--images` images with 1-5 persons each, 0-90 % of each person's keypoints unlabelled (and the
detections far off there), missed persons, duplicate and far-off false detections, crowd regions, zero-keypoint
annotations, areas from 300 to 40000 px^2. Both evaluate the same in-memory annotations end to end (pycocotools: index,
`loadRes`, evaluate, accumulate, summarize; ours: add the instances, compute), with OKS-NMS and the official rescoring
off on our side, which COCOeval does not do. Rounds alternate the two; the medians and the median of per-round ratios
are printed with the largest absolute difference over the ten figures (0 means bit-equal).

pycocotools is a test extra (`pip install -e .[test]`).

    python benchmarks/bench_metrics_pose.py [--images 300] [--rounds 5] [--seed 0] [--json out.json]
"""

import argparse
import contextlib
import io
import json
import statistics
import sys
import time

import numpy as np

from sapiens2_hf.data.label_tables import KEYPOINT_OKS_SIGMAS
from sapiens2_hf.metrics import KeypointOksAP

NUM_KEYPOINTS = len(KEYPOINT_OKS_SIGMAS)
NAMES = ["oks_ap", "oks_ap50", "oks_ap75", "oks_ap_medium", "oks_ap_large",
         "oks_ar", "oks_ar50", "oks_ar75", "oks_ar_medium", "oks_ar_large"]


def synthetic_coco(num_images: int, seed: int):
    """COCO-format ground truth and detections (see the module docstring)."""
    rng = np.random.default_rng(seed)
    images, annotations, detections = [], [], []
    ann_id = 1
    for image_id in range(1, num_images + 1):
        images.append({"id": image_id, "width": 640, "height": 480})
        for _ in range(int(rng.integers(1, 6))):
            area = float(rng.uniform(300.0, 40000.0))
            side = np.sqrt(area)
            x0, y0 = rng.uniform(0, 400, size=2)
            offsets = rng.uniform(0, side, size=(2, NUM_KEYPOINTS))
            keypoints = np.stack([x0 + offsets[0], y0 + offsets[1]], 1)
            visible = (rng.uniform(size=NUM_KEYPOINTS) > rng.uniform(0.0, 0.9)).astype(float) * 2
            if rng.uniform() < 0.05:
                visible[:] = 0
            annotations.append({
                "id": ann_id, "image_id": image_id, "category_id": 1, "area": area, "iscrowd": 0,
                "keypoints": np.concatenate([keypoints, visible[:, None]], 1).reshape(-1).tolist(),
                "num_keypoints": int((visible > 0).sum()), "bbox": [x0, y0, side, side],
            })
            ann_id += 1
            for _ in range(int(rng.integers(0, 3))):  # 0: a missed person, 2: a duplicate
                detected = keypoints + rng.normal(0, side * rng.choice([0.01, 0.05, 0.2]), size=(NUM_KEYPOINTS, 2))
                detected[visible == 0] += rng.normal(0, side * 0.5, size=(int((visible == 0).sum()), 2))
                scores = rng.uniform(0, 1, (NUM_KEYPOINTS, 1))
                detections.append({"image_id": image_id, "category_id": 1, "score": float(rng.uniform(0.1, 1.0)),
                                   "keypoints": np.concatenate([detected, scores], 1).reshape(-1).tolist()})
        if rng.uniform() < 0.2:
            annotations.append({"id": ann_id, "image_id": image_id, "category_id": 1, "area": 9000.0, "iscrowd": 1,
                                "keypoints": [0.0] * (3 * NUM_KEYPOINTS), "num_keypoints": 0,
                                "bbox": [350.0, 50.0, 90.0, 100.0]})
            ann_id += 1
        if rng.uniform() < 0.3:
            far = np.stack([rng.uniform(500, 600, NUM_KEYPOINTS), rng.uniform(400, 470, NUM_KEYPOINTS)], 1)
            detections.append({"image_id": image_id, "category_id": 1, "score": float(rng.uniform(0.5, 1.0)),
                               "keypoints": np.concatenate([far, np.ones((NUM_KEYPOINTS, 1))], 1).reshape(-1).tolist()})
    ground_truth = {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "person"}]}
    return ground_truth, detections


def pycocotools_stats(ground_truth, detections) -> list[float]:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = ground_truth
        coco.createIndex()
        results = coco.loadRes([dict(detection) for detection in detections])
        evaluator = COCOeval(coco, results, "keypoints")
        evaluator.params.kpt_oks_sigmas = np.asarray(KEYPOINT_OKS_SIGMAS)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return [float(value) for value in evaluator.stats[:10]]


def our_stats(ground_truth, detections) -> list[float]:
    metric = KeypointOksAP(nms_threshold=None, rescore=False)
    annotations = ground_truth["annotations"]
    metric.add_ground_truth(
        [a["image_id"] for a in annotations],
        np.asarray([a["keypoints"] for a in annotations]).reshape(len(annotations), NUM_KEYPOINTS, 3),
        [a["area"] for a in annotations],
        [a["bbox"] for a in annotations],
        [a["iscrowd"] for a in annotations],
        [a["id"] for a in annotations],
    )
    keypoints = np.asarray([d["keypoints"] for d in detections]).reshape(len(detections), NUM_KEYPOINTS, 3)
    metric.add_detections([d["image_id"] for d in detections], keypoints[..., :2], keypoints[..., 2],
                          [d["score"] for d in detections])
    results = metric.compute()
    return [results[name] for name in NAMES]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    try:
        import pycocotools  # noqa: F401
    except ImportError:
        raise SystemExit("pycocotools is not installed: `pip install -e .[test]` (or `pip install pycocotools`).")

    ground_truth, detections = synthetic_coco(args.images, args.seed)
    times = {"pycocotools": [], "sapiens2_hf": []}
    functions = {"pycocotools": pycocotools_stats, "sapiens2_hf": our_stats}
    stats = {}
    for round_index in range(args.rounds):
        order = list(functions) if round_index % 2 == 0 else list(functions)[::-1]
        for name in order:
            start = time.perf_counter()
            stats[name] = functions[name](ground_truth, detections)
            times[name].append(time.perf_counter() - start)
    ratios = [ours / theirs for ours, theirs in zip(times["sapiens2_hf"], times["pycocotools"])]
    deviation = max(abs(a - b) for a, b in zip(stats["sapiens2_hf"], stats["pycocotools"]))
    report = {
        "images": args.images,
        "ground_truths": len(ground_truth["annotations"]),
        "detections": len(detections),
        "median_s": {name: statistics.median(values) for name, values in times.items()},
        "ratio_sapiens2_hf_over_pycocotools": statistics.median(ratios),
        "max_abs_difference": deviation,
        "stats": dict(zip(NAMES, stats["sapiens2_hf"])),
    }
    print(f"OKS AP, 308 sigmas: {args.images} images, {report['ground_truths']} ground truths, "
          f"{len(detections)} detections, {args.rounds} alternating rounds")
    for name, median in report["median_s"].items():
        print(f"  {name:<12} median {median:.3f} s")
    print(f"  sapiens2_hf/pycocotools median of per-round ratios {report['ratio_sapiens2_hf_over_pycocotools']:.3f}")
    print(f"  max |difference| over the ten COCO figures: {deviation:.3e}  (AP {stats['pycocotools'][0]:.4f})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return report


if __name__ == "__main__":
    sys.exit(main() and 0)
