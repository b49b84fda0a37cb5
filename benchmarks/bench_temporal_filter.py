"""Does the flow-guided temporal filter (`--temporal-filter`) remove flicker from dense video outputs without lagging?

A synthetic clip with known per-frame ground truth: one procedural person (`sapiens2_hf.data.synthetic`) walking
across the frame (a smooth path: constant sideways speed, a slow turn about the vertical axis), rendered with all
labels at each frame. Each frame's "prediction" is the ground truth plus SIMULATED per-frame model noise: spatially
correlated (Gaussian-blurred, sigma 3 px) plus per-pixel noise, independent between frames, the way a per-frame model
flickers. (Simulated, not a model: this measures the filter, given flicker of this size. A tiny model fine-tuned on
synthetic humans would measure a model's own flicker; that is not done here.)

For each dense task (normal, pointmap, albedo, matting, seg), before (raw per-frame) and after filtering:
- error: per-frame error against the ground truth on the person (normals: mean angular error, degrees; pointmap:
  RMSE, metres; albedo, alpha: RMSE; seg: fraction of wrong labels over the image), averaged over frames;
- jitter: frame-to-frame change beyond the ground truth's own, `(out_t - gt_t) - (out_{t-1} - gt_{t-1})`, RMS over
  the pixels on the person in both frames (seg: fraction of pixels whose label changes when the truth's does not,
  or the reverse), averaged over frame pairs.
Targets (issue 22 item 2): jitter at least halved, error no more than 5 % worse.

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_temporal_filter.py \
        --out benchmarks/results/bench_temporal_filter_cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

NOISE = {"normal": 0.12, "pointmap": 0.03, "albedo": 0.04, "matting": 0.06, "seg": 0.6}  # per-frame noise scale


def render_clip(frames: int, height: int, width: int, seed: int, speed_px: float, turn_deg: float) -> list[dict]:
    """`frames` renders of one person moving sideways by about `speed_px` pixels per frame and turning
    `turn_deg` per frame about its vertical axis (body frame y), on a fixed camera and background; sensor noise is
    drawn anew each frame."""
    from sapiens2_hf.data.synthetic import SyntheticHumans
    from sapiens2_hf.data.synthetic.render import render_scene

    config = SyntheticHumans(height=height, width=width, num_people=1, noise_std=(0.01, 0.01), close_up_prob=0.0)
    scene = config.scene(seed)
    person = scene.people[0]
    depth = float(person.translation[2])
    step = speed_px * depth / scene.camera.fx  # metres per frame at the person's depth
    start = person.translation - np.array([0.5 * step * frames, 0.0, 0.0])
    clip = []
    for k in range(frames):
        c, s = np.cos(np.deg2rad(turn_deg * k)), np.sin(np.deg2rad(turn_deg * k))
        yaw = np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])
        moved = replace(person, rotation=person.rotation @ yaw, translation=start + np.array([step * k, 0.0, 0.0]))
        clip.append(render_scene(replace(scene, people=[moved], noise_seed=scene.noise_seed + k)))
    return clip


def _correlated(rng, shape, sigma=3.0):
    import cv2

    field = rng.standard_normal(shape).astype(np.float32)
    blurred = cv2.GaussianBlur(field, (0, 0), sigma).reshape(shape)
    return blurred / blurred.std()


def predictions(task: str, truth: dict, rng) -> dict:
    """The ground truth plus simulated per-frame model noise (see the module docstring)."""
    scale = NOISE[task]
    height, width = truth["mask"].shape

    def noise(channels, mask=truth["mask"] if task in ("normal", "pointmap", "albedo") else None):
        # normals, pointmap and albedo: on the person only (outside it the CLI's outputs are masked to 0 / NaN by a
        # foreground model, as the official demos do); alpha and labels everywhere
        shape = (height, width, channels)
        field = (0.8 * _correlated(rng, shape) + 0.6 * rng.standard_normal(shape)).astype(np.float32) * scale
        return field if mask is None else field * mask[..., None]

    if task == "normal":
        n = truth["normals"] + noise(3)
        n /= np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-12)
        return {"normals": n.astype(np.float32)}
    if task == "pointmap":
        p = truth["pointmap"] + noise(3) * np.maximum(truth["depth"], 1.0)[..., None] / 3
        return {"pointmap": p.astype(np.float32), "depth": p[..., 2].copy()}
    if task == "albedo":
        return {"albedo": np.clip(truth["albedo"] + noise(3), 0, 1).astype(np.float32)}
    if task == "matting":
        return {"alpha": np.clip(truth["alpha"] + noise(1)[..., 0], 0, 1).astype(np.float32)}
    labels = truth["segmentation"]
    logits = (labels[..., None] == np.arange(29)).astype(np.float32) * 2.0 + noise(29)
    return {"segmentation": logits.argmax(axis=-1)}


def _target(task: str, truth: dict) -> np.ndarray:
    return {"normal": truth["normals"], "pointmap": truth["pointmap"], "albedo": truth["albedo"],
            "matting": truth["alpha"], "seg": truth["segmentation"]}[task]


def _key(task: str) -> str:
    return {"normal": "normals", "pointmap": "pointmap", "albedo": "albedo", "matting": "alpha",
            "seg": "segmentation"}[task]


def evaluate(task: str, clip: list[dict], outputs: list[np.ndarray]) -> dict:
    errors, jitters = [], []
    previous = None
    for truth, out in zip(clip, outputs):
        gt, mask = _target(task, truth), truth["mask"]
        if task == "seg":
            errors.append(float(np.mean(out != gt)))
            if previous is not None:
                changed, truth_changed = out != previous[0], gt != previous[1]
                jitters.append(float(np.mean(changed != truth_changed)))
            previous = (out, gt, mask)
            continue
        error = (out - gt).reshape(*mask.shape, -1)
        if task == "normal":
            cos = np.clip(np.sum(out * gt, axis=-1), -1, 1)
            errors.append(float(np.degrees(np.arccos(cos[mask])).mean()))
        else:
            errors.append(float(np.sqrt(np.mean(np.sum(error[mask] ** 2, axis=-1)))))
        if previous is not None:
            both = mask & previous[1]
            change = error - previous[0]
            jitters.append(float(np.sqrt(np.mean(np.sum(change[both] ** 2, axis=-1)))))
        previous = (error, mask)
    return {"error": float(np.mean(errors[1:])), "jitter": float(np.mean(jitters))}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--size", type=int, nargs=2, default=[256, 192], metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--speed-px", type=float, default=2.0, help="sideways motion, pixels per frame")
    parser.add_argument("--turn-deg", type=float, default=1.5, help="turn about the vertical axis, degrees per frame")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--tasks", nargs="+", default=["normal", "pointmap", "albedo", "matting", "seg"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from sapiens2_hf.video.smoothing import DenseResultFilter

    start = time.perf_counter()
    clip = render_clip(args.frames, *args.size, args.seed, args.speed_px, args.turn_deg)
    render_s = time.perf_counter() - start
    rows = []
    for task in args.tasks:
        rng = np.random.default_rng(args.seed)
        raw = [predictions(task, truth, rng) for truth in clip]
        smoother = DenseResultFilter(task)
        filtered, seconds = [], []
        for k, (truth, result) in enumerate(zip(clip, raw)):
            begin = time.perf_counter()
            filtered.append(smoother.filter(result, truth["image"], k / args.fps))
            seconds.append(time.perf_counter() - begin)
        before = evaluate(task, clip, [r[_key(task)] for r in raw])
        after = evaluate(task, clip, [r[_key(task)] for r in filtered])
        rows.append({"task": task, "error_before": before["error"], "error_after": after["error"],
                     "jitter_before": before["jitter"], "jitter_after": after["jitter"],
                     "jitter_ratio": after["jitter"] / before["jitter"],
                     "error_change": after["error"] / before["error"] - 1.0,
                     "filter_ms_per_frame": 1e3 * float(np.median(seconds[1:])),
                     "min_cutoff": smoother.min_cutoff, "beta": smoother.beta})

    units = {"normal": "deg", "pointmap": "m", "albedo": "[0,1]", "matting": "[0,1]", "seg": "frac"}
    print(f"flow-guided temporal filter on a synthetic clip ({args.frames} frames {args.size[0]}x{args.size[1]}, "
          f"{args.speed_px} px/frame, {args.turn_deg} deg/frame turn, {args.fps:g} fps; SIMULATED per-frame model "
          f"noise on the ground truth)")
    print(f"{'task':>9} {'unit':>6} {'error raw':>10} {'error filt':>10} {'change':>7} {'jitter raw':>10} "
          f"{'jitter filt':>11} {'ratio':>6} {'ms/frame':>8}")
    for row in rows:
        print(f"{row['task']:>9} {units[row['task']]:>6} {row['error_before']:>10.4f} {row['error_after']:>10.4f} "
              f"{100 * row['error_change']:>+6.1f}% {row['jitter_before']:>10.4f} {row['jitter_after']:>11.4f} "
              f"{row['jitter_ratio']:>6.2f} {row['filter_ms_per_frame']:>8.1f}")
    record = {"benchmark": "temporal_filter",
              "environment": {"python": platform.python_version(), "numpy": np.__version__,
                              "frames": args.frames, "size": args.size, "fps": args.fps, "speed_px": args.speed_px,
                              "turn_deg": args.turn_deg, "seed": args.seed, "noise": NOISE,
                              "predictions": "simulated: ground truth + per-frame noise", "render_s": render_s},
              "results": rows}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    main()
