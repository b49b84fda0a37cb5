"""Top-down pose data: COCO-format keypoint readers (308 layout, the raw 344 layout, COCO-WholeBody 133), the
official UDP crop with train-time augmentation, and UDP Gaussian heatmap targets.

Coordinate conventions: points are `(x, y)` in pixels with pixel centres at integer coordinates; boxes are COCO
`(x, y, width, height)`; image sizes are `(height, width)`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
import torch

from . import augment
from ..modeling.sapiens2_label_data import NUM_POSE_KEYPOINTS
from .images import load_image, normalize_image
from .label_tables import (
    COCO_WHOLEBODY_TO_308,
    KEYPOINT_FLIP_INDICES,
    LOWER_BODY_KEYPOINT_IDS,
    UPPER_BODY_KEYPOINT_IDS,
)


# The raw Sapiens annotations carry 344 keypoints; the 36 teeth (original indices 220..255) are dropped.
TEETH_INDICES_344 = tuple(range(220, 256))
_WHOLEBODY_PARTS = ("keypoints", "foot_kpts", "face_kpts", "lefthand_kpts", "righthand_kpts")  # 17+6+68+21+21


def coco_wholebody_to_308(keypoints: np.ndarray) -> np.ndarray:
    """Map COCO-WholeBody keypoints to the Sapiens2 308 layout.

    The 53 keypoints whose names exist in both layouts are copied (`label_tables.COCO_WHOLEBODY_TO_308`); every other
    308 keypoint is absent (zeros, visibility 0).

    `keypoints` `(..., 133, 3)` are `(x, y, visibility)` in COCO-WholeBody order (body 17, feet 6, face 68, left hand
    21, right hand 21); returns `(..., 308, 3)` float32.
    """
    keypoints = np.asarray(keypoints, dtype=np.float32)
    if keypoints.shape[-2:] != (133, 3):
        raise ValueError(f"COCO-WholeBody keypoints must be (..., 133, 3), got {keypoints.shape}.")
    out = np.zeros(keypoints.shape[:-2] + (NUM_POSE_KEYPOINTS, 3), dtype=np.float32)
    source = np.array(list(COCO_WHOLEBODY_TO_308.keys()))
    target = np.array(list(COCO_WHOLEBODY_TO_308.values()))
    out[..., target, :] = keypoints[..., source, :]
    return out


def _annotation_keypoints(annotation: dict, layout: str) -> np.ndarray:
    if layout == "file":
        return np.asarray(annotation["keypoints"], dtype=np.float32).reshape(-1, 3)
    if layout == "coco_wholebody":
        parts = [np.asarray(annotation.get(part, []), dtype=np.float32).reshape(-1, 3) for part in _WHOLEBODY_PARTS]
        return coco_wholebody_to_308(np.concatenate(parts))
    keypoints = np.asarray(annotation["keypoints"], dtype=np.float32).reshape(-1, 3)
    if layout == "sapiens344":
        keypoints = np.delete(keypoints, TEETH_INDICES_344, axis=0)
    if keypoints.shape[0] != NUM_POSE_KEYPOINTS:
        raise ValueError(
            f"Annotation {annotation.get('id')} has {keypoints.shape[0]} keypoints after the {layout!r} layout; "
            "expected 308. Pass keypoint_layout='sapiens344' for raw 344-keypoint files or 'coco_wholebody'."
        )
    return keypoints


def _detect_layout(annotation: dict) -> str:
    if "lefthand_kpts" in annotation or "righthand_kpts" in annotation:
        return "coco_wholebody"
    count = len(annotation["keypoints"]) // 3
    return {NUM_POSE_KEYPOINTS: "sapiens308", 344: "sapiens344"}.get(count, f"unknown({count} keypoints)")


class CocoFileError(ValueError):
    """A COCO keypoint file lacks what the readers use; the message names the file, the entry, the key and the
    format."""


_COCO_NEEDS = ("a COCO keypoint file needs 'images' (each with 'id' and 'file_name') and 'annotations' (each with "
               "'image_id', 'bbox' [x, y, width, height] and 'keypoints' [x, y, v, ...])")


def _first_missing(entry, keys: Sequence[str]) -> str | None:
    if not isinstance(entry, dict):
        return keys[0]
    return next((key for key in keys if key not in entry), None)


def load_coco_keypoint_file(annotation_file: str | Path) -> dict:
    """The parsed COCO keypoint file, checked up front for every key the readers use, so that a file missing one is
    a one-line `CocoFileError` naming the file, the entry and the key, not a `KeyError` deep in a reader.

    Values are checked later, per record (`sapiens2_hf.data.validation`), where a bad one skips its record instead
    of stopping the run.
    """
    path = Path(annotation_file)
    try:
        data = json.loads(path.read_text())
    except ValueError as error:  # not JSON, or not UTF-8 text
        raise CocoFileError(f"{path} is not a JSON file ({error}); {_COCO_NEEDS}.") from None
    if not isinstance(data, dict):
        raise CocoFileError(f"{path} holds a JSON {type(data).__name__}, not an object; {_COCO_NEEDS}.")
    for key in ("images", "annotations"):
        if not isinstance(data.get(key), list):
            found = "no" if key not in data else f"a {type(data[key]).__name__} as its"
            raise CocoFileError(f"{path} has {found} '{key}' list; {_COCO_NEEDS}.")
    for index, image in enumerate(data["images"]):
        missing = _first_missing(image, ("id", "file_name"))
        if missing is not None:
            raise CocoFileError(f"{path}: image {index} has no '{missing}'; {_COCO_NEEDS}.")
    image_ids = {image["id"] for image in data["images"]}
    for index, annotation in enumerate(data["annotations"]):
        missing = _first_missing(annotation, ("image_id", "bbox", "keypoints"))
        where = f"annotation {index} (id {annotation.get('id', '?') if isinstance(annotation, dict) else '?'})"
        if missing is not None:
            raise CocoFileError(f"{path}: {where} has no '{missing}'; {_COCO_NEEDS}.")
        if annotation["image_id"] not in image_ids:
            raise CocoFileError(f"{path}: {where} has 'image_id' {annotation['image_id']!r}, which no entry of "
                                f"'images' has; {_COCO_NEEDS}.")
    return data


def coco_image_candidates(file_name: str, image_dir: str | Path, annotation_file: str | Path) -> list[Path]:
    """Where a COCO `file_name` may be, in order, without duplicates: under `image_dir` (COCO's convention), then under
    the annotation file's folder and `image_dir`'s parent (a `file_name` such as `write_dataset`'s `"images/x.png"`)."""
    candidates = []
    for base in (Path(image_dir), Path(annotation_file).parent, Path(image_dir).parent):
        if base / file_name not in candidates:
            candidates.append(base / file_name)
    return candidates


def resolve_coco_image(file_name: str, image_dir: str | Path, annotation_file: str | Path) -> Path:
    """The first of `coco_image_candidates` that exists, else the first (a missing image is then reported, by that
    path, by the record checks of `sapiens2_hf.data.validation`)."""
    candidates = coco_image_candidates(file_name, image_dir, annotation_file)
    return next((path for path in candidates if path.is_file()), candidates[0])


def check_coco_images_found(annotation_file: str | Path, image_dir: str | Path | None, records: list[dict],
                            images_option: str = "image_dir") -> None:
    """A one-line `ValueError` when no image of the `read_coco_keypoints` records exists, naming the paths tried for
    the first and the fix (`images_option`, which sets the image folder); a few missing ones are left to the record
    checks."""
    if not records or any(Path(record["image"]).is_file() for record in records):
        return
    annotation_file = Path(annotation_file)
    images = {image["id"]: image for image in load_coco_keypoint_file(annotation_file)["images"]}
    file_name = images[records[0]["image_id"]]["file_name"]
    image_dir = Path(image_dir) if image_dir is not None else annotation_file.parent
    tried = " or ".join(str(path) for path in coco_image_candidates(file_name, image_dir, annotation_file))
    raise ValueError(
        f"No image of {annotation_file} exists: the first, file_name {file_name!r}, is not at {tried}. Pass "
        f"{images_option} the folder that the file_name entries are relative to."
    )


def read_coco_keypoints(annotation_file: str | Path, image_dir: str | Path | None = None, keypoint_layout: str = "auto",
                        skip_crowd: bool = True, min_keypoints: int = 1) -> list[dict]:
    """Read a COCO-format keypoint annotation file into one record per person.

    Args:
        annotation_file: COCO JSON with `images`, `annotations` (`keypoints` flat `[x, y, v] * K`, `bbox`, optional
            `area`, `iscrowd`, `num_keypoints`).
        image_dir: folder of the images' `file_name`s (default: the JSON's folder; see `resolve_coco_image`).
        keypoint_layout (`str`, *optional*, defaults to `"auto"`): `"sapiens308"` (official order), `"sapiens344"`
            (raw annotations, teeth removed), `"coco_wholebody"` (mapped with `coco_wholebody_to_308`), `"file"` (the
            file's own keypoints, for a model fine-tuned on that set: `keypoint_sets.KeypointSet.from_coco_category`)
            or `"auto"` (the first three by the annotation's shape, else `"file"`).
        skip_crowd, min_keypoints: drop `iscrowd` annotations (training convention) and persons with fewer
            labelled keypoints.

    Returns:
        `list[dict]` with `image` (path), `image_id`, `instance_id`, `bbox` (COCO xywh, float32 (4,)), `keypoints`
        (`(308, 3)` float32, image pixels + visibility), `area` and `iscrowd`.

    Raises:
        CocoFileError: the file lacks a key the reader uses (`load_coco_keypoint_file`).
    """
    annotation_file = Path(annotation_file)
    data = load_coco_keypoint_file(annotation_file)
    image_dir = Path(image_dir) if image_dir is not None else annotation_file.parent
    images = {image["id"]: image for image in data["images"]}
    valid_layouts = ("auto", "sapiens308", "sapiens344", "coco_wholebody", "file")
    if keypoint_layout not in valid_layouts:
        raise ValueError(f"keypoint_layout must be one of {valid_layouts}, got {keypoint_layout!r}.")
    records = []
    for annotation in data["annotations"]:
        if skip_crowd and annotation.get("iscrowd", 0):
            continue
        layout = _detect_layout(annotation) if keypoint_layout == "auto" else keypoint_layout
        if layout.startswith("unknown"):
            layout = "file"
        keypoints = _annotation_keypoints(annotation, layout)
        if int((keypoints[:, 2] > 0).sum()) < min_keypoints:
            continue
        image = resolve_coco_image(images[annotation["image_id"]]["file_name"], image_dir, annotation_file)
        records.append(_person_record(annotation, image, keypoints, default_id=len(records)))
    return records


def _person_record(annotation: dict, image: Path, keypoints: np.ndarray, default_id: int) -> dict:
    bbox = np.asarray(annotation["bbox"], dtype=np.float32)
    return {
        "image": str(image),
        "image_id": int(annotation["image_id"]),
        "instance_id": int(annotation.get("id", default_id)),
        "bbox": bbox,
        "keypoints": keypoints,
        "area": float(annotation.get("area", bbox[2] * bbox[3])),
        "iscrowd": int(annotation.get("iscrowd", 0)),
    }


def udp_warp_matrix(center: Sequence[float], scale: Sequence[float], rotation_deg: float,
                    input_size: tuple[int, int]) -> np.ndarray:
    """Unbiased (UDP) affine warp from image to crop pixels, with rotation about the box centre.

    `x' = (W - 1) / w * (cos r (x - cx) - sin r (y - cy) + w / 2)` and
    `y' = (H - 1) / h * (sin r (x - cx) + cos r (y - cy) + h / 2)`: the box edges map to the first and last pixel
    centres of the crop.

    `center` `(cx, cy)` and `scale` `(w, h)` (padded and aspect-fixed) are the box in image pixels, `rotation_deg`
    counter-clockwise (official convention), `input_size` the crop `(height, width)`. Returns `(2, 3)` float64.
    """
    cx, cy = float(center[0]), float(center[1])
    w, h = float(scale[0]), float(scale[1])
    sx, sy = (input_size[1] - 1) / w, (input_size[0] - 1) / h
    cos, sin = math.cos(math.radians(rotation_deg)), math.sin(math.radians(rotation_deg))
    return np.array([
        [cos * sx, -sin * sx, sx * (-cos * cx + sin * cy + 0.5 * w)],
        [sin * sy, cos * sy, sy * (-sin * cx - cos * cy + 0.5 * h)],
    ])


def fix_aspect_ratio(scale: np.ndarray, aspect_ratio: float) -> np.ndarray:
    """Grow a `(w, h)` box size to `w / h == aspect_ratio` (official ``_fix_aspect_ratio``)."""
    w, h = float(scale[0]), float(scale[1])
    return np.array([w, w / aspect_ratio] if w > h * aspect_ratio else [h * aspect_ratio, h], dtype=np.float64)


def encode_udp_heatmaps(keypoints: np.ndarray, visible: np.ndarray, input_size: tuple[int, int],
                        heatmap_size: tuple[int, int], sigma: float = 6.0) -> tuple[np.ndarray, np.ndarray]:
    """UDP Gaussian heatmap targets of one crop (official ``UDPHeatmap.encode``).

    A keypoint at crop pixel `p` sits at heatmap pixel `p / ((input - 1) / (heatmap - 1))` per axis; its target is
    `exp(-d^2 / (2 sigma^2))` (peak 1, sub-pixel centre) inside the `(6 sigma + 1)`-pixel window around the rounded
    centre and 0 outside. A keypoint that is not visible, or whose window misses the heatmap, gets weight 0.

    Args:
        keypoints (`(num_keypoints, 2)`), visible (`(num_keypoints,)`, in [0, 1]; >= 0.5 counts): crop pixels `(x, y)`.
        input_size, heatmap_size: crop and heatmap `(height, width)`.
        sigma (`float`, defaults to 6.0): Gaussian sigma in heatmap pixels (official 6 at 256x192).

    Returns:
        `tuple`: heatmaps `(num_keypoints, heatmap_height, heatmap_width)` float32 and weights `(num_keypoints,)`
        float32 (the visibility, or 0).
    """
    height, width = heatmap_size
    factor = np.array([(input_size[1] - 1) / (width - 1), (input_size[0] - 1) / (height - 1)])
    points = np.asarray(keypoints, dtype=np.float64) / factor  # (K, 2) heatmap pixels
    weights = np.asarray(visible, dtype=np.float32).copy()
    radius = sigma * 3
    centre = (points + 0.5).astype(np.int64)  # truncation, as the official encoder
    left, top = (centre - radius).astype(np.int64).T
    right, bottom = (centre + radius + 1).astype(np.int64).T
    outside = (left >= width) | (top >= height) | (right < 0) | (bottom < 0)
    weights[(weights < 0.5) | outside] = 0.0
    xs = np.arange(width)[None, None, :]
    ys = np.arange(height)[None, :, None]
    gaussian = np.exp(-((xs - points[:, 0, None, None]) ** 2 + (ys - points[:, 1, None, None]) ** 2) / (2 * sigma**2))
    window = ((xs >= left[:, None, None]) & (xs < right[:, None, None])
              & (ys >= top[:, None, None]) & (ys < bottom[:, None, None]))
    heatmaps = np.where(window & (weights[:, None, None] > 0), gaussian, 0.0).astype(np.float32)
    return heatmaps, weights


class PoseTransform:
    """Turn one person record into a top-down training (or evaluation) example, following the official pipeline.

    Train order: box -> centre/scale (x1.25) -> horizontal flip p 0.5 (image, box centre and keypoints, channels
    swapped with `flip_indices`) -> half-body p 0.3 (needs >= 9 visible keypoints; upper body preferred p 0.7; box
    x1.5) -> box jitter (shift 0.16 * truncnorm p 0.3, scale truncnorm in [0.5, 1.5], rotation 80 * truncnorm deg
    p 0.6) -> aspect fix -> UDP affine (INTER_AREA when shrinking, INTER_CUBIC otherwise) -> photometric distortion
    p 0.8 -> box blur p 0.1 -> median blur p 0.1 -> coarse dropout p 1.0 -> UDP heatmaps. Evaluation keeps the box
    (x1.25, aspect fix) and the affine only. Keypoints that leave the crop lose their weight.

    `input_size` is the crop `(height, width)`; `heatmap_size` defaults to a quarter of it and `sigma` to 6 scaled by
    `heatmap_width / 192`. `flip_indices` (the keypoint permutation of a flip) and `upper_body_ids` / `lower_body_ids`
    (the half-body sets) default to the official 308's. `augment_probabilities` overrides the official probabilities
    by step (`flip`, `half_body`, `shift`, `scale`, `rotate`, `photometric`, `blur`, `median_blur`, `dropout`).

    Call with `(record, generator)`; returns a dict with `pixel_values` (`(3, H, W)` float32, normalised),
    `labels` (`(num_keypoints, h, w)` float32 heatmaps), `label_weights` (`(num_keypoints,)` float32) and the
    evaluation metadata `crop_center`, `crop_scale` (`(2,)`, the aspect-fixed box mapping crop pixels back to the
    image), `gt_keypoints` (`(num_keypoints, 3)` image pixels), `gt_bbox` (`(4,)` COCO), `gt_area`, `image_id`,
    `instance_id`.
    """

    DEFAULT_PROBABILITIES = {"flip": 0.5, "half_body": 0.3, "shift": 0.3, "scale": 1.0, "rotate": 0.6,
                             "photometric": 0.8, "blur": 0.1, "median_blur": 0.1, "dropout": 1.0}

    def __init__(self, input_size: tuple[int, int] = (1024, 768), heatmap_size: tuple[int, int] | None = None,
                 sigma: float | None = None, train: bool = True, flip_indices: Sequence[int] = KEYPOINT_FLIP_INDICES,
                 upper_body_ids: Sequence[int] = UPPER_BODY_KEYPOINT_IDS,
                 lower_body_ids: Sequence[int] = LOWER_BODY_KEYPOINT_IDS, augment_probabilities: dict | None = None):
        self.input_size = (int(input_size[0]), int(input_size[1]))
        self.heatmap_size = heatmap_size or (self.input_size[0] // 4, self.input_size[1] // 4)
        self.sigma = float(sigma) if sigma is not None else 6.0 * self.heatmap_size[1] / 192.0
        self.train = train
        self.flip_indices = np.asarray(flip_indices)
        self.upper_body_ids = list(upper_body_ids)
        self.lower_body_ids = list(lower_body_ids)
        self.p = augment.step_probabilities(self.DEFAULT_PROBABILITIES, augment_probabilities)

    def _half_body(self, keypoints, visible, generator):
        if visible.sum() < 9 or not augment.coin(generator, self.p["half_body"]):
            return None
        upper = [i for i in self.upper_body_ids if visible[i] > 0]
        lower = [i for i in self.lower_body_ids if visible[i] > 0]
        prefer_upper = augment.coin(generator, 0.7)
        if len(upper) < 2 and len(lower) < 3:
            return None
        ids = upper if len(lower) < 3 else lower if len(upper) < 2 else (upper if prefer_upper else lower)
        selected = keypoints[ids]
        center = selected.mean(axis=0)
        scale = (selected.max(axis=0) - selected.min(axis=0)) * 1.5
        return center, scale

    def _random_box(self, image, points, visible, center, scale, generator):
        """Flip, half-body box, shift, scale and rotation, each with its probability (the official order)."""
        rotation = 0.0
        image_width = image.shape[1]
        if augment.coin(generator, self.p["flip"]):
            image = image[:, ::-1].copy()
            center[0] = image_width - 1 - center[0]
            points, visible = points[self.flip_indices], visible[self.flip_indices]
            points[:, 0] = image_width - 1 - points[:, 0]
        half = self._half_body(points, visible, generator)
        if half is not None:
            center, scale = half
        shift = augment.truncnorm(generator, 2) * 0.16
        if augment.coin(generator, self.p["shift"]):
            center = center + shift * scale
        factor = augment.truncnorm(generator, 1)[0] * 0.5 + 1.0
        if augment.coin(generator, self.p["scale"]):
            scale = scale * factor
        angle = augment.truncnorm(generator, 1)[0] * 80.0
        if augment.coin(generator, self.p["rotate"]):
            rotation = float(angle)
        return image, points, visible, center, scale, rotation

    def _warp(self, image, points, visible, center, scale, rotation):
        """The UDP crop of the box and its keypoints; keypoints that leave the crop become (0, 0) and invisible."""
        height, width = self.input_size
        warp = udp_warp_matrix(center, scale, rotation, self.input_size)
        shrink = min(np.linalg.norm(warp[0, :2]), np.linalg.norm(warp[1, :2])) < 1.0
        crop = cv2.warpAffine(image, warp, (width, height), flags=cv2.INTER_AREA if shrink else cv2.INTER_CUBIC)
        # float32 like the official cv2.transform with a float32 matrix (it decides which pixel a keypoint rounds to).
        warp32 = warp.astype(np.float32)
        crop_points = (points.astype(np.float32) @ warp32[:, :2].T + warp32[:, 2]).astype(np.float64)
        outside = ((crop_points[:, 0] < 0) | (crop_points[:, 0] >= width)
                   | (crop_points[:, 1] < 0) | (crop_points[:, 1] >= height))
        crop_points[outside] = 0.0
        return crop, crop_points, np.where(outside, 0.0, visible)

    def _pixel_augment(self, crop, generator):
        if augment.coin(generator, self.p["photometric"]):
            crop = augment.photometric_distortion(crop, generator)
        if augment.coin(generator, self.p["blur"]):
            crop = augment.box_blur(crop, generator)
        if augment.coin(generator, self.p["median_blur"]):
            crop = augment.median_blur(crop, generator)
        if augment.coin(generator, self.p["dropout"]):
            crop = augment.coarse_dropout(crop, generator)
        return crop

    def __call__(self, record: dict, generator: torch.Generator | None = None) -> dict:
        generator = generator if generator is not None else torch.Generator().manual_seed(0)
        image = load_image(record["image"])
        keypoints = np.asarray(record["keypoints"], dtype=np.float64)
        if keypoints.ndim != 2 or keypoints.shape[1] < 2:
            raise ValueError(f"`keypoints` must be (num_keypoints, 3), got {keypoints.shape}.")
        points = keypoints[:, :2].copy()
        visible = np.minimum(1.0, keypoints[:, 2]) if keypoints.shape[1] > 2 else np.ones(len(points))
        x, y, w, h = (float(v) for v in record["bbox"])
        center = np.array([x + 0.5 * w, y + 0.5 * h])
        scale = np.array([w, h]) * 1.25
        rotation = 0.0
        if self.train:
            image, points, visible, center, scale, rotation = self._random_box(image, points, visible, center, scale,
                                                                               generator)
        scale = fix_aspect_ratio(scale, self.input_size[1] / self.input_size[0])
        crop, crop_points, visible = self._warp(image, points, visible, center, scale, rotation)
        if self.train:
            crop = self._pixel_augment(crop, generator)
        heatmaps, weights = encode_udp_heatmaps(crop_points, visible, self.input_size, self.heatmap_size, self.sigma)
        gt = np.asarray(record["keypoints"], dtype=np.float32)
        return {
            "pixel_values": normalize_image(crop),
            "labels": torch.from_numpy(heatmaps),
            "label_weights": torch.from_numpy(weights),
            "crop_center": torch.tensor(center, dtype=torch.float32),
            "crop_scale": torch.tensor(scale, dtype=torch.float32),
            "gt_keypoints": torch.from_numpy(gt if gt.shape[1] == 3 else np.concatenate([gt, np.ones_like(gt[:, :1])], 1)),
            "gt_bbox": torch.tensor(record["bbox"], dtype=torch.float32),
            "gt_area": torch.tensor(float(record.get("area", w * h)), dtype=torch.float32),
            "image_id": torch.tensor(int(record.get("image_id", 0))),
            "instance_id": torch.tensor(int(record.get("instance_id", 0))),
        }
