"""Humans in 3D: the files made from `sapiens2-pose-3d` results, and 3D keypoint tracks over a video.

- `pose3d_record`: one image's result as JSON-ready data (`<name>_3d.json` of `sapiens2-hf pose3d`): units and frame
  stated, per person the 2D keypoints and scores, the 3D keypoints (`null` where there is none), confidence, validity
  and the reason a keypoint is not valid, the lifting's parameters, keypoint names and skeleton.
- `write_pose3d_outputs`: that JSON and `<name>.glb` (the people's pointmap mesh and 3D skeletons,
  `visualization.gltf`).
- `Keypoint3DSmoother`: per track, the One-Euro filter of `sapiens2_hf.video.smoothing` (the temporal filters' one
  home) on camera-frame metres; `lift_video` runs a clip frame by frame (IoU tracks, boxes carried by keypoints);
  `write_video_tracks` writes its tracks as `.npz` (`write_track_file`) and as an animated glTF skeleton.

Why an animated glTF and not BVH for the video skeleton: BVH stores joint rotations in a fixed-length bone
hierarchy, which 3D keypoints do not give without an inverse-kinematics fit to a rig (and bone lengths would be
forced); glTF animates each joint's position as measured, opens in Blender, three.js and Gradio's `Model3D`, and is
the format of the per-image result.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES
from ..utils.atomic_io import atomic_write_bytes, atomic_write_json
from ..video.io import VideoReader
from ..video.smoothing import DEFAULT_D_CUTOFF, OneEuroFilter
from ..video.tracking import IouTracker, box_from_keypoints
from ..visualization import SKELETON_LINKS
from ..visualization.gltf import write_people_glb, write_skeleton_animation
from .lifting import joint_depths_for, lift_keypoints
from .pipeline import POSE_3D_FRAME

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
        "lifting": {"rule": "sapiens2_hf.pose3d.lifting.lift_keypoints", **(lifting or {})},
        "keypoint_names": names,
        "skeleton": [[int(a), int(b)] for a, b in skeleton],
        "skeleton_indexing": "0-based indices into keypoint_names",
        "people": entries,
    }


def write_pose3d_outputs(folder: str | os.PathLike, name: str, result: dict, image: np.ndarray, *, source: str,
                         skeleton=(), lifting: dict | None = None, glb: bool = True,
                         max_vertices: int = 250_000) -> list[Path]:
    """Writes `<folder>/<name>_3d.json` and (with `glb`) `<folder>/<name>.glb` atomically; returns their paths."""
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


def skeleton_links(own, num_keypoints: int) -> list[tuple[int, int]]:
    """A model's keypoint links (its config's `skeleton`, else the official 308 skeleton) within `num_keypoints`."""
    links = own if own else SKELETON_LINKS
    return [(int(a), int(b)) for a, b in links if int(a) < num_keypoints and int(b) < num_keypoints]


def lift_video(path: str | os.PathLike, predict: Callable[[np.ndarray, Any], dict], listed: Callable[[int], Any], *,
               kpt_threshold: float, track_iou: float, video_stride: int = 1, max_frames: int | None = None,
               smoother: Keypoint3DSmoother | None = None) -> tuple[list[dict], list[str]]:
    """A clip's 3D keypoint tracks, frame by frame: `predict(image, boxes or None)` is one frame's
    `sapiens2-pose-3d` result (None: the caller's fallback, whole image or detector); `listed(frame index)` the
    given boxes of a frame, or None. People keep their track id by IoU matching (`IouTracker`); between given or
    detected boxes each person's box follows their keypoints of the previous frame. Returns the frames as
    `write_track_file` takes them and the keypoint names."""
    tracker = IouTracker(track_iou)
    frames, names, previous = [], None, None
    with VideoReader(path) as reader:
        for frame in reader:
            if frame.index % video_stride:
                continue
            if max_frames is not None and len(frames) >= max_frames:
                break
            given = listed(frame.index)
            result = predict(frame.image, given if given is not None or previous is None else previous)
            people = result["people"]
            if people and names is None:
                names = list(people[0]["labels"])
            tracks = tracker.update([person["bbox"] for person in people], [person["bbox_score"] for person in people])
            raw = np.stack([p["keypoints_3d"] for p in people]) if people else np.zeros((0, len(names or []), 3))
            valid = np.stack([p["keypoint_3d_valid"] for p in people]) if people else np.zeros(raw.shape[:2], bool)
            track_ids = [track.track_id for track in tracks]
            smoothed = smoother.filter(track_ids, raw, valid, frame.time) if smoother is not None else \
                np.where(valid[..., None], raw, np.nan)
            frames.append({"frame_index": frame.index, "time_s": frame.time, "track_ids": track_ids,
                           "keypoints_3d": raw, "smoothed": smoothed, "valid": valid,
                           "confidence": np.stack([p["keypoint_3d_confidence"] for p in people]) if people
                           else np.zeros(raw.shape[:2], np.float32)})
            # the next frame's boxes follow each person's keypoints (the detector, or given boxes, only when lost)
            carried = [box_from_keypoints(p["keypoints"], p["scores"], kpt_threshold, frame.image.shape[:2])
                       for p in people]
            previous = [box.tolist() for box in carried if box is not None] or None
    if not frames:
        raise ValueError(f"{path}: no frame was processed")
    return frames, names or []


def write_video_tracks(folder: str | os.PathLike, name: str, frames: list[dict], names: list[str], *,
                       smoothing: dict | None, links, glb: bool = True) -> list[Path]:
    """Writes `<name>_3d.npz` (`write_track_file`) and, with `glb`, `<name>_3d.glb` (each track an animated
    skeleton of `links`) atomically; returns their paths."""
    folder = Path(folder)
    files = [write_track_file(folder / f"{name}_3d.npz", frames, names, smoothing=smoothing)]
    if glb and names:
        with np.load(files[0]) as tracks:
            positions, track_ids, times = tracks["keypoints_3d"], tracks["track_ids"], tracks["time_s"]
        count = len(names)
        joints = [(a + k * count, b + k * count) for k in range(len(track_ids)) for a, b in links]
        joint_names = [f"track{track}_{label}" for track in track_ids for label in names]
        write_skeleton_animation(folder / f"{name}_3d.glb", times - times[0], positions.reshape(len(times), -1, 3),
                                 joints, joint_names)
        files.append(folder / f"{name}_3d.glb")
    return files


def jitter_mm(tracks: np.ndarray) -> float:
    """Mean length of the second difference of `(T, K, 3)` metre tracks (NaN skipped), in millimetres per frame^2:
    the frame-to-frame shake that smoothing removes."""
    tracks = np.asarray(tracks, np.float64)
    second = tracks[2:] - 2 * tracks[1:-1] + tracks[:-2]
    lengths = np.linalg.norm(second, axis=-1)
    lengths = lengths[np.isfinite(lengths)]
    return float(lengths.mean() * 1000) if len(lengths) else math.nan


__all__ = ["DEFAULT_BETA_3D", "DEFAULT_MIN_CUTOFF_3D", "Keypoint3DSmoother", "ground_truth_result", "jitter_mm",
           "lift_video", "pose3d_record", "skeleton_links", "write_pose3d_outputs", "write_track_file",
           "write_video_tracks"]
