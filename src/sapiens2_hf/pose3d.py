"""Humans in 3D: the files made from `sapiens2-pose-3d` results, and 3D keypoint tracks over a video.

- `pose3d_record`: one image's result as JSON-ready data (`<name>_3d.json` of `sapiens2-hf pose3d`): units and frame
  stated, per person the 2D keypoints and scores, the 3D keypoints (`null` where there is none), confidence, validity
  and the reason a keypoint is not valid, the lifting's parameters, keypoint names and skeleton.
- `write_pose3d_outputs`: that JSON and `<name>.glb` (the people's pointmap mesh and 3D skeletons,
  `visualization.gltf`).
- `Keypoint3DSmoother`: per track, the One-Euro filter of `sapiens2_hf.video.smoothing` (the temporal filters' one
  home) on camera-frame metres; `write_track_file` and `write_skeleton_animation` write a clip's tracks as `.npz` and
  as an animated glTF skeleton.

Why an animated glTF and not BVH for the video skeleton: BVH stores joint rotations in a fixed-length bone
hierarchy, which 3D keypoints do not give without an inverse-kinematics fit to a rig (and bone lengths would be
forced); glTF animates each joint's position as measured, opens in Blender, three.js and Gradio's `Model3D`, and is
the format of the per-image result.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from .modeling.pipeline_sapiens2_hf import POSE_3D_FRAME
from .utils.atomic_io import atomic_write_json
from .video.smoothing import DEFAULT_D_CUTOFF, OneEuroFilter

# One-Euro filter on metres: 1 Hz at rest like the 2D filter; the speed coefficient per metre is the 2D one per pixel
# (0.02) at a person 3 m away under a 1000 px focal length (1 px ~ 3 mm), so the filter opens alike for the same
# motion. `benchmarks/bench_pose3d.py` prints the jitter before and after on a synthetic video.
DEFAULT_MIN_CUTOFF_3D = 1.0
DEFAULT_BETA_3D = 7.0


def _finite_or_none(values) -> list:
    return [None if not np.isfinite(row).all() else [float(v) for v in row] for row in np.asarray(values)]


def pose3d_record(result: dict, source: str, image_shape, *, skeleton=(), lifting: dict | None = None) -> dict:
    """JSON-ready data of one image's `sapiens2-pose-3d` result (see the module docstring); `skeleton` holds 0-based
    keypoint index pairs."""
    people = result["people"]
    names = list(people[0]["labels"]) if people else []
    entries = []
    for number, person in enumerate(people):
        entries.append({
            "id": number + 1,
            "bbox_xyxy": [float(v) for v in person["bbox"]],
            "bbox_score": float(person["bbox_score"]),
            "keypoints_2d": [[float(x), float(y)] for x, y in np.asarray(person["keypoints"])],
            "scores_2d": [float(v) for v in person["scores"]],
            "keypoints_3d": _finite_or_none(person["keypoints_3d"]),
            "confidence": [float(v) for v in person["keypoint_3d_confidence"]],
            "valid": [bool(v) for v in person["keypoint_3d_valid"]],
            "status": list(person["keypoint_3d_status"]),
            "num_valid": int(np.sum(person["keypoint_3d_valid"])),
        })
    focal = result.get("focal_length")
    return {
        "image": {"file_name": source, "height": int(image_shape[0]), "width": int(image_shape[1])},
        **POSE_3D_FRAME,
        "keypoints_2d_units": "image pixels, (x, y); pixel (row i, column j) has its centre at (j, i)",
        "focal_length": None if focal is None else float(focal),
        "camera": "given (focal_length / intrinsics)" if focal is not None else "predicted by the pointmap model",
        "lifting": {"rule": "sapiens2_hf.modeling.lifting_sapiens2_hf.lift_keypoints", **(lifting or {})},
        "keypoint_names": names,
        "skeleton": [[int(a), int(b)] for a, b in skeleton],
        "skeleton_indexing": "0-based indices into keypoint_names",
        "people": entries,
    }


def write_pose3d_outputs(folder: str | os.PathLike, name: str, result: dict, image: np.ndarray, *, source: str,
                         skeleton=(), lifting: dict | None = None, glb: bool = True,
                         max_vertices: int = 250_000) -> list[Path]:
    """Writes `<folder>/<name>_3d.json` and (with `glb`) `<folder>/<name>.glb` atomically; returns their paths."""
    from .visualization.gltf import write_people_glb

    folder = Path(folder)
    written = [folder / f"{name}_3d.json"]
    record = pose3d_record(result, source, image.shape, skeleton=skeleton, lifting=lifting)
    if glb:
        summary = write_people_glb(folder / f"{name}.glb", result["people"], result["pointmap"], image,
                                   result.get("mask"), links=skeleton, max_vertices=max_vertices)
        record["glb"] = {"file": f"{name}.glb", "frame": "glTF: (X, -Y, -Z) of the camera frame, Y up", **summary}
        written.append(folder / f"{name}.glb")
    atomic_write_json(written[0], record, indent=1, allow_nan=False)
    return written


class Keypoint3DSmoother:
    """Smooths 3D keypoint tracks over time: one `OneEuroFilter` per track id on camera-frame metres. Invalid
    keypoints are not smoothed (NaN in, NaN out) and restart their filter when they come back; a track that
    disappears is forgotten.

    Args:
        min_cutoff (`float`): Hz at rest (default `DEFAULT_MIN_CUTOFF_3D`).
        beta (`float`): cutoff increase per metre/second of speed (default `DEFAULT_BETA_3D`).
    """

    def __init__(self, min_cutoff: float = DEFAULT_MIN_CUTOFF_3D, beta: float = DEFAULT_BETA_3D,
                 d_cutoff: float = DEFAULT_D_CUTOFF):
        OneEuroFilter(min_cutoff, beta, d_cutoff)  # checks the values now
        self.settings = (float(min_cutoff), float(beta), float(d_cutoff))
        self._filters: dict[int, OneEuroFilter] = {}

    def filter(self, track_ids, keypoints_3d, valid, t: float) -> np.ndarray:
        """`(P, K, 3)` smoothed keypoints of one frame's people (`track_ids` `(P,)`, `valid` `(P, K)`) at time `t`."""
        keypoints_3d = np.asarray(keypoints_3d, dtype=np.float64)
        valid = np.asarray(valid, bool)
        smoothed = np.full_like(keypoints_3d, np.nan)
        for row, track_id in enumerate(track_ids):
            values = np.where(valid[row][:, None], keypoints_3d[row], np.nan)
            filter_ = self._filters.setdefault(int(track_id), OneEuroFilter(*self.settings))
            smoothed[row] = filter_.filter(values, t)
        for gone in set(self._filters) - {int(i) for i in track_ids}:
            del self._filters[gone]
        return smoothed


def write_track_file(path: str | os.PathLike, frames: list[dict[str, Any]], names, *, smoothing: dict | None) -> Path:
    """Writes a clip's 3D keypoint tracks as `.npz` (atomically), arrays over (frame, track, keypoint):

    `track_ids` `(P,)`; `frame_index`, `time_s` `(T,)`; `keypoints_3d` `(T, P, K, 3)` float32 metres (smoothed
    unless `smoothing` is None; NaN where the track is absent or the keypoint invalid), `keypoints_3d_raw` (the
    per-frame lift), `confidence` `(T, P, K)`, `valid` `(T, P, K)` bool; `keypoint_names`, and `units`, `frame`,
    `smoothing` as strings.

    Args:
        frames: per processed frame `{"frame_index", "time_s", "track_ids" (P_t,), "keypoints_3d" (P_t, K, 3) raw,
            "smoothed" (P_t, K, 3), "confidence" (P_t, K), "valid" (P_t, K)}`.
    """
    import io

    from .utils.atomic_io import atomic_write_bytes

    track_ids = sorted({int(i) for frame in frames for i in frame["track_ids"]})
    column = {track: k for k, track in enumerate(track_ids)}
    count, people, joints = len(frames), len(track_ids), len(names)
    raw = np.full((count, people, joints, 3), np.nan, np.float32)
    smooth = raw.copy()
    confidence = np.zeros((count, people, joints), np.float32)
    valid = np.zeros((count, people, joints), bool)
    for t, frame in enumerate(frames):
        for row, track in enumerate(frame["track_ids"]):
            k = column[int(track)]
            raw[t, k] = np.where(frame["valid"][row][:, None], frame["keypoints_3d"][row], np.nan)
            smooth[t, k] = frame["smoothed"][row]
            confidence[t, k], valid[t, k] = frame["confidence"][row], frame["valid"][row]
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer, track_ids=np.asarray(track_ids, np.int64),
        frame_index=np.asarray([f["frame_index"] for f in frames], np.int64),
        time_s=np.asarray([f["time_s"] for f in frames], np.float64),
        keypoints_3d=smooth if smoothing is not None else raw, keypoints_3d_raw=raw, confidence=confidence,
        valid=valid, keypoint_names=np.asarray(list(names)), units=np.asarray(POSE_3D_FRAME["units"]),
        frame=np.asarray(POSE_3D_FRAME["frame"]),
        smoothing=np.asarray("none" if smoothing is None else
                             ", ".join(f"{key}={value}" for key, value in smoothing.items())))
    return atomic_write_bytes(path, buffer.getvalue())


def ground_truth_result(sample: dict, *, scores=None, **lifting) -> dict:
    """The `sapiens2-pose-3d` result of perfect models on a synthetic human (`data.synthetic.render_sample`): its
    true 2D keypoints (score 1, or `scores` `(num_people, 308)`) lifted with its true pointmap, masked to its people.
    What the benchmark and the tests measure the lifting rule on; `lifting` as `lift_keypoints` takes it."""
    from .modeling.lifting_sapiens2_hf import joint_depths_for, lift_keypoints
    from .modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES

    mask = np.asarray(sample["mask"], bool)
    pointmap = np.where(mask[..., None], sample["pointmap"], np.nan).astype(np.float32)
    lifting.setdefault("joint_depths", joint_depths_for(POSE_KEYPOINT_NAMES))
    people = []
    for number in range(int(sample["num_people"])):
        keypoints = np.asarray(sample["keypoints"][number], np.float64)
        person_scores = np.ones(len(keypoints)) if scores is None else np.asarray(scores[number], np.float64)
        box = np.asarray(sample["boxes"][number], np.float32)
        lifted = lift_keypoints(keypoints, person_scores, pointmap, mask, box=box, **lifting)
        people.append({"bbox": box, "bbox_score": 1.0, "keypoints": keypoints, "scores": person_scores,
                       "labels": list(POSE_KEYPOINT_NAMES), "keypoints_3d": lifted.keypoints_3d,
                       "keypoint_3d_confidence": lifted.confidence, "keypoint_3d_valid": lifted.valid,
                       "keypoint_3d_status": lifted.status})
    return {"people": people, "pointmap": pointmap, "mask": mask,
            "focal_length": float(sample["camera_intrinsics"][0, 0]), **POSE_3D_FRAME}


def jitter_mm(tracks: np.ndarray) -> float:
    """Mean length of the second difference of `(T, K, 3)` metre tracks (NaN skipped), in millimetres per frame^2:
    the frame-to-frame shake that smoothing removes."""
    tracks = np.asarray(tracks, np.float64)
    second = tracks[2:] - 2 * tracks[1:-1] + tracks[:-2]
    lengths = np.linalg.norm(second, axis=-1)
    lengths = lengths[np.isfinite(lengths)]
    return float(lengths.mean() * 1000) if len(lengths) else math.nan


__all__ = ["DEFAULT_BETA_3D", "DEFAULT_MIN_CUTOFF_3D", "Keypoint3DSmoother", "ground_truth_result", "jitter_mm",
           "pose3d_record",
           "write_pose3d_outputs", "write_track_file"]
