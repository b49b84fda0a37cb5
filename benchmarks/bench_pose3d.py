"""How far from the true 3D joints does `sapiens2-pose-3d` land, and how much does smoothing steady a 3D track?

Synthetic humans (`sapiens2_hf.data.synthetic`) carry their camera-frame 3D keypoints (`keypoints_3d`, metres), so
the lift is measured against ground truth. Errors are MPJPE and PA-MPJPE (after the best similarity transform) in
millimetres over the keypoints the render labels visible (v = 2) that the lift marks valid.

Cases:
- `truth` (a): the true 2D keypoints lifted with the true pointmap and person mask: the error of the lifting rule
  itself. Body joints (shoulders, elbows, wrists, hips, knees, ankles, neck, knuckles) lie inside the body and the
  pointmap on its skin; the table gives their error left on the skin (`joint_depths=0`) and with the rule's step
  along the inward normal, and the error of the points defined on the skin (face, feet, ...). Scenes as the synthetic
  generator draws them (close-ups included: a side-on chest hides the shoulder joint behind it, which no single-layer
  pointmap shows) and with `close_up_prob=0`.
- `models` (b): tiny pose and pointmap models (hidden 64, 4 layers, 128x96) fine-tuned on synthetic humans (other
  scenes), run through their pipelines with the true person box, mask and focal length; also each model alone with
  the other input true, to say which one the error comes from. Their heatmap maxima stay under the 0.3 validity
  threshold, so these cases lift every keypoint (`score_threshold=0`).
- `video`: a synthetic clip of a person walking and turning (`bench_temporal_filter.render_clip`), lifted per frame
  (with the `models` when they were trained, else the truth plus per-frame noise: 1.5 px on the 2D keypoints, 1 cm on
  the pointmap), before and after `Keypoint3DSmoother` (One-Euro on metres): jitter (mean second difference, mm per
  frame^2) and MPJPE against the truth, for the default filter and a few settings.

`--picture PATH` also draws one `truth` result from the side (the pointmap mesh, the lifted skeleton in cyan, the true
joints in red), for the README.

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_pose3d.py --threads 2 \
        --model-dir /tmp/pose3d_models --out benchmarks/results/pose3d.json --picture docs/images/pose3d.png
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_record  # noqa: E402


def _names_and_body():
    from sapiens2_hf.pose3d.lifting import joint_depths_for
    from sapiens2_hf.modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES

    return POSE_KEYPOINT_NAMES, joint_depths_for(POSE_KEYPOINT_NAMES) > 0


def _errors(people_3d, valid, truth, visibility, body) -> dict:
    """Per-keypoint distances (mm) of one person, split into body joints and skin points."""
    ok = (visibility == 2) & valid
    distance = np.linalg.norm(people_3d - truth, axis=-1) * 1000
    return {"all": distance[ok], "body": distance[ok & body], "skin": distance[ok & ~body], "ok": ok}


def _summary(values: list[np.ndarray]) -> dict:
    pooled = np.concatenate(values) if values else np.zeros(0)
    if not len(pooled):
        return {"count": 0}
    return {"mean_mm": round(float(pooled.mean()), 1), "median_mm": round(float(np.median(pooled)), 1),
            "p90_mm": round(float(np.percentile(pooled, 90)), 1), "count": int(len(pooled))}


def case_truth(scenes: int, size: tuple[int, int], seed: int, close_ups: bool) -> dict:
    from sapiens2_hf.data.synthetic import render_sample
    from sapiens2_hf.pose3d.lifting import pa_mpjpe
    from sapiens2_hf.pose3d.outputs import ground_truth_result

    _, body = _names_and_body()
    config = {} if close_ups else {"close_up_prob": 0.0}
    rule, skin_only, pa, visible, valid, statuses = {"all": [], "body": [], "skin": []}, [], [], 0, 0, {}
    begin = time.perf_counter()
    for index in range(scenes):
        sample = render_sample(seed + index, height=size[0], width=size[1], num_people=1, **config)
        if sample["num_people"] == 0:
            continue
        truth, visibility = sample["keypoints_3d"][0], sample["keypoint_visibility"][0]
        person = ground_truth_result(sample)["people"][0]
        errors = _errors(person["keypoints_3d"], person["keypoint_3d_valid"], truth, visibility, body)
        for key in rule:
            rule[key].append(errors[key])
        on_skin = ground_truth_result(sample, joint_depths=0.0)["people"][0]
        skin_only.append(_errors(on_skin["keypoints_3d"], on_skin["keypoint_3d_valid"], truth, visibility, body)["body"])
        if errors["ok"].sum() >= 3:
            pa.append(np.array([pa_mpjpe(person["keypoints_3d"], truth, errors["ok"]) * 1000]))
        visible += int((visibility == 2).sum())
        valid += int(errors["ok"].sum())
        for status, seen in zip(person["keypoint_3d_status"], visibility == 2):
            if seen:
                statuses[status] = statuses.get(status, 0) + 1
    return {
        "scenes": scenes, "size": list(size), "close_ups": close_ups, "seconds": round(time.perf_counter() - begin, 1),
        "mpjpe": _summary(rule["all"]), "pa_mpjpe_per_scene": _summary(pa),
        "body_joints_with_rule": _summary(rule["body"]), "body_joints_on_skin": _summary(skin_only),
        "skin_points": _summary(rule["skin"]), "valid_of_visible": round(valid / max(1, visible), 3),
        "status_of_visible": statuses,
    }


def fine_tuned_models(model_dir: Path, steps: int, seed: int):
    """The tiny pose and pointmap models of `bench_temporal_filter` (its `fine_tune`, pose added)."""
    import bench_temporal_filter as temporal

    temporal.MODEL["learning_rate"].setdefault("pose", 1e-2)
    models = {}
    for task in ("pose", "pointmap"):
        # the pose head decodes at a quarter of the patch-16 grid: pose keeps patch 16 at 256x192 (16x12 tokens)
        changes = {"patch_size": 16, "input_size": (256, 192)} if task == "pose" else {}
        saved = {key: temporal.MODEL[key] for key in changes}
        temporal.MODEL.update(changes)
        try:
            models[task] = temporal.fine_tune(task, model_dir, (256, 192), steps, seed)
        finally:
            temporal.MODEL.update(saved)
    return models


def _pipelines(models):
    import sapiens2_hf

    pose_model, pose_processor, _ = models["pose"]
    pointmap_model, pointmap_processor, _ = models["pointmap"]
    pose = sapiens2_hf.pipeline("sapiens2-pose", model=pose_model, image_processor=pose_processor, device="cpu")
    pointmap = sapiens2_hf.pipeline("sapiens2-pointmap", model=pointmap_model, image_processor=pointmap_processor,
                                    device="cpu")
    return pose, pointmap, pointmap_processor


def _predict(sample: dict, pose, pointmap, pointmap_processor) -> tuple[dict, np.ndarray]:
    """The models' 2D person (true box) and metric pointmap (true mask and focal length) of one sample."""
    from sapiens2_hf.modeling.image_processing_sapiens2_hf import CANONICAL_FOCAL_LENGTH

    person = pose(sample["image"], boxes=[sample["boxes"][0].tolist()])[0]
    result = pointmap({"image": sample["image"], "foreground_mask": sample["mask"],
                       "focal_length": float(sample["camera_intrinsics"][0, 0])})
    # the fine-tuned model's canonical camera is its input width, the pipeline's 768 px (bench_temporal_filter)
    factor = CANONICAL_FOCAL_LENGTH / pointmap_processor.size["width"]
    return person, result["pointmap"] * factor


def case_models(models, scenes: int, seed: int) -> dict:
    from sapiens2_hf.data.synthetic import render_sample
    from sapiens2_hf.pose3d.lifting import joint_depths_for, lift_keypoints, pa_mpjpe

    names, body = _names_and_body()
    depths = joint_depths_for(names)
    pose, pointmap, processor = _pipelines(models)
    variants = {"both_models": [], "true_2d_model_pointmap": [], "model_2d_true_pointmap": []}
    pa = []
    for index in range(scenes):
        sample = render_sample(seed + index, height=256, width=192, num_people=1, close_up_prob=0.0)
        if sample["num_people"] == 0:
            continue
        person, predicted = _predict(sample, pose, pointmap, processor)
        true_map = np.where(sample["mask"][..., None], sample["pointmap"], np.nan)
        truth, visibility = sample["keypoints_3d"][0], sample["keypoint_visibility"][0]
        inputs = {"both_models": (person["keypoints"], person["scores"], predicted),
                  "true_2d_model_pointmap": (sample["keypoints"][0], np.ones(308), predicted),
                  "model_2d_true_pointmap": (person["keypoints"], person["scores"], true_map)}
        for name, (keypoints, scores, pointmap_array) in inputs.items():
            # the tiny pose model's heatmap maxima stay under the 0.3 validity threshold: every keypoint is taken
            lifted = lift_keypoints(keypoints, scores, pointmap_array, sample["mask"], joint_depths=depths,
                                    box=sample["boxes"][0], score_threshold=0.0)
            errors = _errors(lifted.keypoints_3d, lifted.valid, truth, visibility, body)
            variants[name].append(errors["all"])
            if name == "both_models" and errors["ok"].sum() >= 3:
                pa.append(np.array([pa_mpjpe(lifted.keypoints_3d, truth, errors["ok"]) * 1000]))
    record = {name: _summary(values) for name, values in variants.items()}
    record["both_models_pa_mpjpe_per_scene"] = _summary(pa)
    record["training"] = {task: models[task][2] for task in models}
    return record


def case_video(models, frames: int, seed: int, fps: float, settings) -> dict:
    import bench_temporal_filter as temporal

    from sapiens2_hf.pose3d.lifting import joint_depths_for, lift_keypoints
    from sapiens2_hf.pose3d.outputs import Keypoint3DSmoother, jitter_mm

    names, body = _names_and_body()
    depths = joint_depths_for(names)
    clip = temporal.render_clip(frames, 256, 192, seed, 2.0, 1.5)
    rng = np.random.default_rng(seed)
    raw, truth, valid = [], [], []
    if models is not None:
        pose, pointmap, processor = _pipelines(models)
    for sample in clip:
        if models is not None:
            person, predicted = _predict(sample, pose, pointmap, processor)
            keypoints, scores = person["keypoints"], person["scores"]
        else:
            keypoints = sample["keypoints"][0] + rng.normal(scale=1.5, size=sample["keypoints"][0].shape)
            scores = np.ones(308)
            predicted = np.where(sample["mask"][..., None], sample["pointmap"] + rng.normal(
                scale=0.01, size=sample["pointmap"].shape), np.nan)
        lifted = lift_keypoints(keypoints, scores, predicted, sample["mask"], joint_depths=depths,
                                box=sample["boxes"][0], score_threshold=0.0)
        raw.append(np.where(lifted.valid[:, None], lifted.keypoints_3d, np.nan))
        truth.append(sample["keypoints_3d"][0])
        valid.append(lifted.valid & (sample["keypoint_visibility"][0] == 2))
    raw, truth, valid = np.array(raw), np.array(truth), np.array(valid)
    # keypoints valid and visible in at least 80 % of the frames (the tiny models' lifts flicker in and out of
    # validity); the jitter skips the gaps
    steady = valid.mean(axis=0) >= 0.8
    times = np.arange(frames) / fps

    def row(tracks):
        error = np.linalg.norm(tracks[:, steady] - truth[:, steady], axis=-1) * 1000
        error = error[np.isfinite(error)]
        return {"jitter_mm_per_frame2": round(jitter_mm(tracks[:, steady]), 2),
                "mpjpe_mm": round(float(np.nanmean(error)), 1)}

    rows = {"raw": row(raw), "truth_itself": row(truth)}
    for min_cutoff, beta in settings:
        smoother = Keypoint3DSmoother(min_cutoff, beta)
        smoothed = np.array([smoother.filter([1], raw[t][None], valid[t][None], times[t])[0] for t in range(frames)])
        rows[f"one_euro(min_cutoff={min_cutoff}, beta={beta})"] = row(smoothed)
    return {"frames": frames, "fps": fps, "predictions": "models" if models is not None else
            "truth + noise (1.5 px 2D, 1 cm pointmap)", "steady_keypoints": int(steady.sum()), "rows": rows}


def draw_picture(path: Path, size: tuple[int, int], seed: int) -> None:
    """One `truth` result from the side: the image beside a view turned 60 degrees about the vertical axis."""
    import cv2

    from sapiens2_hf.data.synthetic import render_sample
    from sapiens2_hf.pose3d.outputs import ground_truth_result
    from sapiens2_hf.visualization import SKELETON_LINKS
    from sapiens2_hf.visualization.gltf import pointmap_mesh

    sample = render_sample(seed, height=size[0], width=size[1], num_people=1, close_up_prob=0.0)
    result = ground_truth_result(sample)
    person = result["people"][0]
    mesh = pointmap_mesh(result["pointmap"], sample["image"], result["mask"])
    centre = np.nanmean(mesh.vertices, axis=0)
    angle = np.deg2rad(60)
    rotation = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0], [-np.sin(angle), 0, np.cos(angle)]])
    height, width = size
    scale = 0.8 * height / max(1e-6, np.ptp(mesh.vertices[:, 1]))

    def project(points):
        turned = (np.asarray(points) - centre) @ rotation.T
        return np.stack([width / 2 + scale * turned[:, 0], height / 2 + scale * turned[:, 1]], 1), turned[:, 2]

    canvas = np.full((height, width, 3), 242, np.uint8)
    depth = np.full((height, width), np.inf)
    pixels, z = project(mesh.vertices)
    for (x, y), distance, colour in zip(np.round(pixels).astype(int), z, mesh.colors):
        for dy in (0, 1):
            for dx in (0, 1):
                u, v = x + dx, y + dy
                if 0 <= u < width and 0 <= v < height and distance < depth[v, u]:
                    depth[v, u], canvas[v, u] = distance, colour
    lifted, _ = project(np.nan_to_num(person["keypoints_3d"]))
    true, _ = project(sample["keypoints_3d"][0])
    ok = person["keypoint_3d_valid"] & (sample["keypoint_visibility"][0] == 2)
    for a, b in SKELETON_LINKS:
        if ok[a] and ok[b]:
            cv2.line(canvas, tuple(np.round(lifted[a]).astype(int)), tuple(np.round(lifted[b]).astype(int)),
                     (0, 170, 230), 1, cv2.LINE_AA)
    for k in np.nonzero(ok)[0]:
        cv2.circle(canvas, tuple(np.round(true[k]).astype(int)), 2, (220, 30, 30), -1, cv2.LINE_AA)
    picture = np.concatenate([sample["image"], np.full((height, 8, 3), 255, np.uint8), canvas], axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), cv2.cvtColor(picture, cv2.COLOR_RGB2BGR))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["truth", "models", "video"])
    parser.add_argument("--scenes", type=int, default=40)
    parser.add_argument("--size", type=int, nargs=2, default=[512, 384], metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=300, help="fine-tuning steps per model")
    parser.add_argument("--model-dir", default=None, help="keep (and reuse) the fine-tuned models here")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--picture", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import tempfile

    import torch

    torch.set_num_threads(args.threads)
    record = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "threads": args.threads,
              "torch": torch.__version__}
    if "truth" in args.cases:
        record["truth"] = case_truth(args.scenes, tuple(args.size), args.seed, close_ups=True)
        record["truth_no_close_ups"] = case_truth(args.scenes, tuple(args.size), args.seed, close_ups=False)
    models = None
    with tempfile.TemporaryDirectory() as scratch:
        if "models" in args.cases:
            models = fine_tuned_models(Path(args.model_dir or scratch), args.steps, args.seed)
            record["models"] = case_models(models, args.scenes, args.seed + 500)
        if "video" in args.cases:
            settings = [(1.0, 0.0), (1.0, 1.0), (1.0, 2.0), (1.0, 4.0), (1.0, 7.0), (0.5, 2.0), (2.0, 2.0)]
            record["video"] = case_video(models, args.frames, 3, args.fps, settings)
            if models is not None:
                record["video_simulated"] = case_video(None, args.frames, 3, args.fps, settings)
    if args.picture:
        draw_picture(Path(args.picture), tuple(args.size), args.seed + 2)
    write_record(args.out, record)
    _print(record)
    return record


def _print(record: dict) -> None:
    print(f"machine: {record['machine']}, {record['threads']} threads, torch {record['torch']}")
    for case in ("truth", "truth_no_close_ups"):
        if case in record:
            r = record[case]
            print(f"\n[{case}] {r['scenes']} scenes {r['size'][0]}x{r['size'][1]}, valid/visible "
                  f"{r['valid_of_visible']}")
            for key in ("mpjpe", "pa_mpjpe_per_scene", "body_joints_on_skin", "body_joints_with_rule", "skin_points"):
                print(f"  {key:24s} {r[key]}")
    if "models" in record:
        print("\n[models] tiny fine-tuned pose + pointmap, 256x192 scenes")
        for key, value in record["models"].items():
            if key != "training":
                print(f"  {key:32s} {value}")
    for case in ("video", "video_simulated"):
        if case in record:
            r = record[case]
            print(f"\n[{case}] {r['frames']} frames at {r['fps']} fps, {r['predictions']}, "
                  f"{r['steady_keypoints']} keypoints valid in >= 80 % of the frames")
            for key, value in r["rows"].items():
                print(f"  {key:40s} {value}")


if __name__ == "__main__":
    main()
