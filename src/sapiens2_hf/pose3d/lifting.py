# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Lifting 2D keypoints into metres with a pointmap: each keypoint's camera-frame XYZ, a confidence and why it is
not valid when it is not. Used by the `sapiens2-pose-3d` pipeline (`pose3d.pipeline`); numpy only.

The rule, per keypoint (`lift_keypoints`):
1. **Window.** The pointmap's person pixels in a square window of radius `window_radius` pixels around the keypoint
   (pixel `(row i, column j)` has its centre at `(x, y) = (j, i)`). Person pixels are those of `person_mask` that
   hold finite XYZ with Z > 0.
2. **One surface.** The window's depths are sorted and split at every gap larger than `depth_jump` metres; only the
   group of the person pixel nearest the keypoint is kept (an arm in front of the chest: the arm). A split marks the
   keypoint as lying at a depth discontinuity.
3. **Surface point.** Each of X, Y, Z is fitted by least squares as an affine function of the pixel position over
   the kept pixels and evaluated at the keypoint's sub-pixel position (a median when fewer than 3 pixels or a
   degenerate layout remain). An affine fit commutes with translations, so moving the pointmap by a vector moves the
   result by that vector.
4. **Into the body.** Joints lie inside the body, the pointmap on its skin. The fitted plane's normal
   `dP/du x dP/dv` points away from the camera on every surface the camera sees (the pixel grid's orientation), so
   the keypoint moves along it by its `joint_depths` entry: about a limb's radius for shoulders, elbows, wrists, hips,
   knees, ankles, the neck and the knuckles (`JOINT_DEPTHS_M`, adult anthropometry), 0 for points defined on the
   skin (face, ears, toes, heels, acromion, olecranon...). For a cylinder (a limb) seen anywhere on its visible
   side, a step of its radius along the inward normal reaches its axis. Pass `joint_depths=0` for surface points.

Each keypoint gets a status: `"valid"`, `"low_score"` (2D score under `score_threshold`), `"outside_image"`,
`"outside_mask"` (person pixels fill less than `min_person_fraction` of the window, or none is within
`window_radius`), `"depth_discontinuity"`. XYZ is given whenever it could be computed (NaN otherwise), valid or not;
`confidence` is the 2D score times the fraction of the window's pixels that were kept (0 where invalid).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STATUSES = ("valid", "low_score", "outside_image", "outside_mask", "depth_discontinuity")

# How far below the skin a keypoint lies, metres, by name (the 308 set's names; other sets match by name too).
# Adult values from anthropometric circumferences (a limb's radius at the joint, half the depth of the neck and of the
# hip joint below the skin seen from the front or back); every name not listed is a point on the skin (0).
JOINT_DEPTHS_M = {
    "shoulder": 0.045, "elbow": 0.035, "wrist": 0.025, "hip": 0.07, "knee": 0.045, "ankle": 0.03, "neck": 0.05,
    # finger knuckles (the hand's metacarpophalangeal joints); the finger joints beyond them lie a few millimetres
    # below the skin, less than the window resolves, and stay on it
    "thumb_third_joint": 0.01, "forefinger_third_joint": 0.01, "middle_finger_third_joint": 0.01,
    "ring_finger_third_joint": 0.01, "pinky_finger_third_joint": 0.008,
}


def joint_depths_for(names) -> np.ndarray:
    """`(len(names),)` float32 depths below the skin (`JOINT_DEPTHS_M`) for keypoint names such as
    `"left_elbow"`: the name without its `left_` / `right_` prefix is looked up; unknown names are on the skin."""
    depths = np.zeros(len(names), dtype=np.float32)
    for index, name in enumerate(names):
        bare = str(name)
        for prefix in ("left_", "right_"):
            if bare.startswith(prefix):
                bare = bare[len(prefix):]
        depths[index] = JOINT_DEPTHS_M.get(bare, 0.0)
    return depths


@dataclass
class LiftedKeypoints:
    """One person's keypoints in 3D.

    Attributes:
        keypoints_3d (`np.ndarray` `(num_keypoints, 3)`, float32): camera-frame XYZ in metres (X right, Y down, Z
            forward, the pointmap's frame); NaN where it could not be computed.
        confidence (`np.ndarray` `(num_keypoints,)`, float32): in [0, 1], 0 for invalid keypoints.
        valid (`np.ndarray` `(num_keypoints,)`, bool).
        status (`list[str]`): one of `STATUSES` per keypoint.
        surface_points (`np.ndarray` `(num_keypoints, 3)`, float32): step 3's point on the skin, before step 4.
    """

    keypoints_3d: np.ndarray
    confidence: np.ndarray
    valid: np.ndarray
    status: list[str]
    surface_points: np.ndarray


def default_window_radius(box=None, image_shape=None) -> int:
    """2 % of the person box's larger side (of the image's, without a box), at least 2 pixels."""
    if box is not None:
        size = max(float(box[2]) - float(box[0]), float(box[3]) - float(box[1]))
    else:
        size = float(max(image_shape[:2]))
    return max(2, int(round(0.02 * size)))


def _affine_at(offsets: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Least-squares `values ~ c0 + offsets @ [cu, cv]` evaluated at offset 0 (`c0`, `(3,)`), with the gradients
    `(2, 3)` (None when the fit is degenerate: then `c0` is the median)."""
    if len(values) >= 3:
        design = np.concatenate([np.ones((len(values), 1)), offsets], axis=1)
        if np.linalg.matrix_rank(design) == 3:
            coefficients, *_ = np.linalg.lstsq(design, values, rcond=None)
            return coefficients[0], coefficients[1:]
    return np.median(values, axis=0), None


def check_lifting_options(*, score_threshold: float = 0.3, window_radius=None, depth_jump: float = 0.1,
                          min_person_fraction: float = 0.25, joint_depths=None, num_keypoints: int | None = None):
    """Refuses lifting parameters that would silently mislabel keypoints (a NaN threshold passes every score, a
    negative `depth_jump` flags every point): each must be finite and in range, and `joint_depths` one finite,
    non-negative number or one per keypoint. Called where the values enter (`lift_keypoints`, the 3D pipeline)."""

    def number(name, value, low, high=np.inf, low_open=False):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, got {value!r}.") from None
        if not (np.isfinite(value) and (value > low if low_open else value >= low) and value <= high):
            bound = f"> {low}" if low_open else f">= {low}"
            accepted = f"a finite number {bound}" + (f" and <= {high}" if np.isfinite(high) else "")
            raise ValueError(f"{name} must be {accepted}, got {value!r}.")

    number("score_threshold", score_threshold, 0.0, 1.0)
    number("depth_jump", depth_jump, 0.0, low_open=True)
    number("min_person_fraction", min_person_fraction, 0.0, 1.0)
    if window_radius is not None:
        number("window_radius", window_radius, 0.0)
        if float(window_radius) != int(window_radius):
            raise ValueError(f"window_radius is in whole pixels, got {window_radius!r}.")
    if joint_depths is None:
        return
    if isinstance(joint_depths, str):
        if joint_depths == "auto" and num_keypoints is None:  # the 3D pipeline resolves "auto" by keypoint name
            return
        raise ValueError(f"joint_depths must be metres: one number or one per keypoint, got {joint_depths!r}"
                         + (" (or \"auto\" in the 3D pipeline)." if num_keypoints is not None else "."))
    try:
        depths = np.asarray(joint_depths, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"joint_depths must be metres: one number or one per keypoint, got {joint_depths!r}.") \
            from None
    if depths.ndim > 1 or (depths.ndim == 1 and num_keypoints is not None and len(depths) != num_keypoints):
        raise ValueError(f"joint_depths has shape {depths.shape}; pass one number or {num_keypoints or 'one'} "
                         "per keypoint (metres below the skin).")
    if not (np.isfinite(depths).all() and (depths >= 0).all()):
        raise ValueError(f"joint_depths must be finite metres >= 0, got {joint_depths!r}.")


def lift_keypoints(keypoints, scores, pointmap, person_mask=None, *, score_threshold: float = 0.3,
                   window_radius: int | None = None, depth_jump: float = 0.1, min_person_fraction: float = 0.25,
                   joint_depths=None, box=None) -> LiftedKeypoints:
    """Lifts one person's 2D keypoints with a pointmap of the same image (the module docstring has the rule).

    Args:
        keypoints (`(num_keypoints, 2)`): (x, y) in pixels of the pointmap's image.
        scores (`(num_keypoints,)`): 2D scores in [0, 1] (heatmap maxima).
        pointmap (`(height, width, 3)`): camera-frame XYZ in metres; NaN (or Z <= 0) where there is none.
        person_mask (`(height, width)` bool, *optional*): the person's (or people's) pixels; default: every pixel
            with finite XYZ. Without it nothing is flagged `"outside_mask"` unless the pointmap itself is NaN there.
        score_threshold: least 2D score of a valid keypoint.
        window_radius: pixels; default `default_window_radius(box, pointmap.shape)`.
        depth_jump: metres; a larger gap between the window's sorted depths is a discontinuity.
        min_person_fraction: least fraction of the window's pixels that must be person pixels.
        joint_depths (`(num_keypoints,)` or a number, *optional*): metres below the skin (default: none, 0).
        box (`(4,)` xyxy, *optional*): the person's box, for the default window radius.
    """
    keypoints, scores, pointmap, usable = _checked_inputs(keypoints, scores, pointmap, person_mask)
    count = len(keypoints)
    check_lifting_options(score_threshold=score_threshold, window_radius=window_radius, depth_jump=depth_jump,
                          min_person_fraction=min_person_fraction, joint_depths=joint_depths, num_keypoints=count)
    depths = np.zeros(count) if joint_depths is None else np.broadcast_to(
        np.asarray(joint_depths, dtype=np.float64), (count,))
    radius = int(window_radius) if window_radius is not None else default_window_radius(box, pointmap.shape)
    window_size = (2 * radius + 1) ** 2

    lifted = np.full((count, 3), np.nan)
    surface = np.full((count, 3), np.nan)
    support = np.zeros(count)
    status = ["valid"] * count
    for k, (x, y) in enumerate(keypoints):
        window = _window(usable, x, y, radius)
        if window is None or len(window[0]) == 0:
            status[k] = "outside_image" if window is None else "outside_mask"
            continue
        points = pointmap[window]
        offsets = np.stack([window[1] - x, window[0] - y], axis=1)
        keep, discontinuity = _one_surface(points[:, 2], offsets, depth_jump)
        # 3. the surface point: an affine fit of X, Y, Z over the kept pixels, at the keypoint
        surface[k], gradients = _affine_at(offsets[keep], points[keep])
        lifted[k] = _into_body(surface[k], gradients, depths[k])
        support[k] = keep.sum() / window_size
        status[k] = _status(len(points) < min_person_fraction * window_size, discontinuity, scores[k], score_threshold)
    valid = np.array([s == "valid" for s in status], dtype=bool)
    confidence = np.where(valid, np.clip(scores, 0, 1) * support, 0.0)
    return LiftedKeypoints(keypoints_3d=lifted.astype(np.float32), confidence=confidence.astype(np.float32),
                           valid=valid, status=status, surface_points=surface.astype(np.float32))


def _checked_inputs(keypoints, scores, pointmap, person_mask):
    """The inputs as float64 arrays, their shapes checked, with the usable pixels `(height, width)` bool: finite
    XYZ with Z > 0, within `person_mask` when it is given."""
    keypoints = np.asarray(keypoints, dtype=np.float64).reshape(-1, 2)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    pointmap = np.asarray(pointmap, dtype=np.float64)
    if pointmap.ndim != 3 or pointmap.shape[-1] != 3:
        raise ValueError(f"pointmap must be (height, width, 3) XYZ, got shape {pointmap.shape}.")
    if len(scores) != len(keypoints):
        raise ValueError(f"{len(keypoints)} keypoints but {len(scores)} scores.")
    usable = np.isfinite(pointmap).all(axis=-1) & (pointmap[..., 2] > 0)
    if person_mask is not None:
        person_mask = np.asarray(person_mask, dtype=bool)
        if person_mask.shape != pointmap.shape[:2]:
            raise ValueError(f"person_mask has shape {person_mask.shape}, the pointmap {pointmap.shape[:2]}.")
        usable &= person_mask
    return keypoints, scores, pointmap, usable


def _window(usable: np.ndarray, x: float, y: float, radius: int):
    """1. the (rows, columns) of the person pixels within `radius` of the keypoint `(x, y)`, or None for a keypoint
    outside the image."""
    height, width = usable.shape
    if not (np.isfinite(x) and np.isfinite(y)) or not (-0.5 <= x < width - 0.5 and -0.5 <= y < height - 0.5):
        return None
    column, row = int(round(x)), int(round(y))
    top, bottom = max(0, row - radius), min(height, row + radius + 1)
    left, right = max(0, column - radius), min(width, column + radius + 1)
    rows, columns = np.nonzero(usable[top:bottom, left:right])
    return rows + top, columns + left


def _one_surface(z: np.ndarray, offsets: np.ndarray, depth_jump: float) -> tuple[np.ndarray, bool]:
    """2. split the sorted depths `z` at gaps over `depth_jump` and keep the group of the pixel nearest the keypoint
    (`offsets` from it): the kept pixels' mask, and whether there was a split."""
    order = np.argsort(z, kind="stable")
    group = np.zeros(len(z), dtype=np.int64)
    group[order[1:]] = np.cumsum(np.diff(z[order]) > depth_jump)
    nearest = int(np.argmin((offsets ** 2).sum(axis=1)))
    return group == group[nearest], bool(group.max() > 0)


def _status(few_person_pixels: bool, discontinuity: bool, score: float, score_threshold: float) -> str:
    """The status of a keypoint whose point was computed, in the order of precedence: too few person pixels in its
    window, a split of its window's depths, a 2D score under the threshold."""
    if few_person_pixels:
        return "outside_mask"
    if discontinuity:
        return "depth_discontinuity"
    if score < score_threshold or not np.isfinite(score):
        return "low_score"
    return "valid"


def _into_body(point: np.ndarray, gradients: np.ndarray | None, depth: float) -> np.ndarray:
    """4. `point` moved `depth` metres along the fitted plane's inward normal (away from the camera on visible
    surfaces); unmoved for a degenerate fit or a zero normal."""
    if depth == 0 or gradients is None:
        return point
    normal = np.cross(gradients[0], gradients[1])
    length = np.linalg.norm(normal)
    return point + depth * normal / length if length > 0 else point


def mpjpe(predicted, target, valid=None) -> float:
    """Mean per-joint position error (same units as the inputs) over `valid` joints."""
    predicted, target = np.asarray(predicted, np.float64), np.asarray(target, np.float64)
    valid = np.ones(len(target), bool) if valid is None else np.asarray(valid, bool)
    return float(np.linalg.norm(predicted[valid] - target[valid], axis=-1).mean())


def procrustes_align(predicted, target) -> np.ndarray:
    """`predicted` moved onto `target` by the similarity transform (rotation, scale, translation) that minimises the
    squared error (Umeyama), as PA-MPJPE does."""
    predicted, target = np.asarray(predicted, np.float64), np.asarray(target, np.float64)
    mean_p, mean_t = predicted.mean(0), target.mean(0)
    p, t = predicted - mean_p, target - mean_t
    u, singular, vt = np.linalg.svd(p.T @ t)
    sign = np.ones(3)
    sign[-1] = np.sign(np.linalg.det(u @ vt)) or 1.0
    rotation = (u * sign) @ vt
    scale = (singular * sign).sum() / max((p ** 2).sum(), 1e-12)
    return scale * p @ rotation + mean_t


def pa_mpjpe(predicted, target, valid=None) -> float:
    """MPJPE after `procrustes_align` on the `valid` joints."""
    predicted, target = np.asarray(predicted, np.float64), np.asarray(target, np.float64)
    valid = np.ones(len(target), bool) if valid is None else np.asarray(valid, bool)
    return mpjpe(procrustes_align(predicted[valid], target[valid]), target[valid])


__all__ = ["JOINT_DEPTHS_M", "LiftedKeypoints", "STATUSES", "check_lifting_options", "default_window_radius", "joint_depths_for",
           "lift_keypoints", "mpjpe", "pa_mpjpe", "procrustes_align"]
