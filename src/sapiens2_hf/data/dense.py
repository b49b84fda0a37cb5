"""Dense-task data: on-disk readers and the official train / evaluation transforms for body-part segmentation,
surface normals, pointmaps and albedo (the train / val pipelines of facebookresearch/sapiens2 `sapiens/dense/configs`),
and the matting transform.

On-disk formats (one file per image, matched by file stem; images are any OpenCV-readable file):

| task | target file | content |
|---|---|---|
| seg | `<label_dir>/<stem>.png` | uint8 class ids 0-28, 255 = ignore |
| normal | `<target_dir>/<stem>.npy` | float32 `(H, W, 3)` camera-frame normals (X right, Y down, Z forward) |
| pointmap | `<target_dir>/<stem>.npz` | `depth` float32 `(H, W)` metric Z (or `pointmap` `(H, W, 3)` metric XYZ), |
| | | and `K` `(3, 3)` pixel intrinsics |
| albedo | `<target_dir>/<stem>.npy` or `.png` | float32 `(H, W, 3)` in [0, 1], or 8-bit RGB |
| matting | `<target_dir>/<stem>.png` or `.npy` | alpha: 8-bit grey (0-255), or float32 `(H, W)` in [0, 1] |

An optional `<mask_dir>/<stem>.png` (non-zero = foreground) gives the valid pixels; without it the mask is derived
from the target (finite, non-zero normals; positive depth; non-zero albedo). An `.npz` target may also carry `mask`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
import torch

from . import augment
from ..runs.inputs import image_files
from .images import load_image, normalize_image
from .label_tables import SEG_FLIP_SWAP_PAIRS, SEG_IGNORE_INDEX
from .tasks import DATA_TASKS


CANONICAL_FOCAL_LENGTH = 768.0


# ------------------------------------------------------------------------------------------------------ readers
def _images_by_stem(image_dir: Path) -> dict[str, Path]:
    return {p.stem: p for p in image_files(image_dir)}


def _find(folder: Path | None, stem: str, suffixes: Sequence[str]) -> Path | None:
    if folder is None:
        return None
    for suffix in suffixes:
        candidate = Path(folder) / f"{stem}{suffix}"
        if candidate.exists():
            return candidate
    return None


def read_dense_folder(image_dir: str | Path, target_dir: str | Path, task: str,
                      mask_dir: str | Path | None = None) -> list[dict]:
    """Pair images with their targets (formats in the module docstring; per task, the data-layer registry's
    `DataTaskSpec.file_suffixes`, tried in order, and `file_key`); images without a target are skipped.

    Returns:
        `list[dict]` with `image`, the target path under the task's `file_key` (`label`, `normal`, `pointmap_file`,
        `albedo` or `alpha`), and for a task that reads masks, `mask` (path or `None`; `mask_dir` is not read for the
        others).
    """
    readable = [name for name, spec in DATA_TASKS.items() if spec.file_suffixes]
    if task not in readable:
        raise ValueError(f"read_dense_folder handles {sorted(readable)}, not {task!r}.")
    spec = DATA_TASKS[task]
    records = []
    for stem, image in _images_by_stem(Path(image_dir)).items():
        target = _find(Path(target_dir), stem, spec.file_suffixes)
        if target is None:
            continue
        record = {"image": str(image), spec.file_key: str(target)}
        if "mask" in spec.roles:
            mask = _find(Path(mask_dir) if mask_dir is not None else None, stem, (".png",))
            record["mask"] = str(mask) if mask else None
        records.append(record)
    if not records:
        raise ValueError(f"No image in {image_dir} has a matching {task} target {spec.file_suffixes} in {target_dir}.")
    return records


def _load_array(value, dtype=np.float32) -> np.ndarray:
    """Array, tensor, PIL image or path (.npy / .png / any OpenCV image) -> numpy array."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (str, Path)):
        path = Path(value)
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        array = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
        if array is None:
            raise ValueError(f"Could not read {path}.")
        return array[..., ::-1].copy() if array.ndim == 3 else array
    return np.asarray(value)


def _load_pointmap_target(record: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Returns metric depth `(H, W)`, intrinsics `(3, 3)` and an optional mask."""
    if record.get("pointmap_file") is not None:
        with np.load(record["pointmap_file"], allow_pickle=False) as data:
            fields = {key: data[key] for key in data.files}
    else:
        keys = ("depth", "pointmap", "intrinsics", "K")
        fields = {key: _load_array(record[key]) for key in keys if record.get(key) is not None}
    intrinsics = fields.get("K", fields.get("intrinsics"))
    if intrinsics is None:
        raise ValueError("A pointmap target needs pixel intrinsics `K` (3, 3).")
    if "depth" in fields:
        depth = np.asarray(fields["depth"], dtype=np.float32)
    elif fields.get("pointmap") is not None:  # a file field (the (H, W, 3) points), not the task
        depth = np.asarray(fields["pointmap"], dtype=np.float32)[..., 2]
    else:
        raise ValueError("A pointmap target needs `depth` (H, W) or `pointmap` (H, W, 3).")
    return depth, np.asarray(intrinsics, dtype=np.float64).reshape(3, 3), fields.get("mask")


# ------------------------------------------------------------------------------------------------- helpers
def _nearest(array: np.ndarray, size_wh: tuple[int, int]) -> np.ndarray:
    out = cv2.resize(array, size_wh, interpolation=cv2.INTER_NEAREST)
    return out[..., None] if array.ndim == 3 and out.ndim == 2 else out


def _random_rescale(image, arrays, generator, scale_range):
    """Official ``*RandomScale``: image linear, targets nearest; returns the factor."""
    height, width = image.shape[:2]
    factor = augment.uniform(generator, *scale_range)
    size = (int(round(width * factor)), int(round(height * factor)))
    targets = [None if a is None else _nearest(a, size) for a in arrays]
    return cv2.resize(image, size, interpolation=cv2.INTER_LINEAR), targets, factor


def _crop(arrays, box):
    y1, y2, x1, x2 = box
    return [None if a is None else a[y1:y2, x1:x2] for a in arrays]


def _letterbox_all(image, arrays, input_size):
    image = augment.letterbox_array(image, input_size, cv2.INTER_LINEAR)
    return image, [None if a is None else augment.letterbox_array(a, input_size, cv2.INTER_NEAREST) for a in arrays]


def _pixel_noise_blur(image, generator, blur_prob, noise_prob):
    if blur_prob and augment.coin(generator, blur_prob):
        image = augment.gaussian_blur(image, generator)
    if noise_prob and augment.coin(generator, noise_prob):
        image = augment.gaussian_noise(image, generator)
    return image


def _load_mask(record: dict, default) -> np.ndarray:
    """`record["mask"]` (non-zero = valid), else ``default()``, as an `(H, W)` uint8 0/1 map."""
    mask = _load_array(record.get("mask"))
    mask = np.asarray(default() if mask is None else mask) > 0
    return (mask[..., 0] if mask.ndim == 3 else mask).astype(np.uint8)


def _flip(*arrays):
    """Horizontal mirror of each array (a contiguous copy)."""
    return [a[:, ::-1].copy() for a in arrays]


class _TaskTransform:
    """Input size, train/eval mode and the step probabilities (`DEFAULT_PROBABILITIES` overridden by name); a call
    loads the record's image and runs the task's `_transform` with the generator (seed 0 when none is given)."""

    DEFAULT_PROBABILITIES: dict = {}

    def __init__(self, input_size: tuple[int, int] = (1024, 768), train: bool = True,
                 augment_probabilities: dict | None = None):
        self.input_size = (int(input_size[0]), int(input_size[1]))
        self.train = train
        self.p = augment.step_probabilities(self.DEFAULT_PROBABILITIES, augment_probabilities)

    def __call__(self, record: dict, generator: torch.Generator | None = None) -> dict | None:
        generator = generator if generator is not None else torch.Generator().manual_seed(0)
        return self._transform(record, load_image(record["image"]), generator)

    def _scale_and_crop(self, image, maps, generator):
        """Random scale 0.5-2.0 (targets nearest) and random crop, each with its probability; returns the image,
        the maps, the scale factor (None when not scaled) and the crop box (None when not cropped)."""
        factor = box = None
        if augment.coin(generator, self.p["scale"]):
            image, maps, factor = _random_rescale(image, maps, generator, (0.5, 2.0))
        if augment.coin(generator, self.p["crop"]):
            box = augment.random_crop_box(generator, image.shape[:2])
            if box is not None:
                image, *maps = _crop([image, *maps], box)
        return image, maps, factor, box


def _valid_fraction_ok(mask: np.ndarray, max_fraction: float = 0.96, min_pixels: int = 16) -> bool:
    count = int((mask > 0).sum())
    return count >= min_pixels and count / mask.size <= max_fraction


# ---------------------------------------------------------------------------------------------- segmentation
class SegTransform(_TaskTransform):
    """Official body-part segmentation pipeline.

    Train: background replacement p 0.8 (only if `backgrounds` are given; records with `is_itw` are skipped; plain
    alpha compositing, without the official Reinhard colour transfer) -> random aspect-keeping resize to 0.4-2.0x
    the input size -> random crop to the input size p 0.3 (padding image 0 / label 255, at most 75 % of one class,
    10 tries) -> Gaussian blur p 0.3 -> Gaussian noise p 0.3 -> rotation p 0.5 in +-60 deg (label padding 0 =
    background) -> horizontal flip p 0.5 swapping left/right classes -> photometric distortion -> stretch to the
    input size. Samples with < 1 % labelled foreground return `None` (the dataset draws another one).
    Eval: stretch the image only; the label stays at its original resolution (the official evaluator upsamples the
    logits to it) and `label_size` records it so a collator can pad.

    Another class set than the official 29 passes its own `swap_pairs` (left/right classes, by name), its
    `ignore_index`, and `reduce_labels` (transformers' `do_reduce_labels`: 0 -> ignored, every other id - 1).

    Returns a dict with `pixel_values` (`(3, H, W)` float32), `labels` (`(h, w)` int64) and `label_size` (`(2,)`).
    """

    DEFAULT_PROBABILITIES = {"background": 0.8, "resize": 1.0, "crop": 0.3, "blur": 0.3, "noise": 0.3, "rotate": 0.5,
                             "flip": 0.5, "photometric": 1.0}

    def __init__(self, input_size: tuple[int, int] = (1024, 768), train: bool = True,
                 swap_pairs: Sequence[Sequence[int]] = SEG_FLIP_SWAP_PAIRS, backgrounds: Sequence | None = None,
                 augment_probabilities: dict | None = None, ignore_index: int = SEG_IGNORE_INDEX,
                 reduce_labels: bool = False):
        super().__init__(input_size, train, augment_probabilities)
        self.swap = np.arange(256, dtype=np.uint8)
        for a, b in swap_pairs:
            self.swap[a], self.swap[b] = b, a
        self.backgrounds = list(backgrounds or [])
        self.ignore_index = ignore_index
        self.reduce_labels = reduce_labels

    def _stretch(self, image: np.ndarray) -> np.ndarray:
        height, width = self.input_size
        interpolation = cv2.INTER_AREA if width < image.shape[1] else cv2.INTER_CUBIC
        return cv2.resize(image, (width, height), interpolation=interpolation)

    def _load_label(self, record: dict, image: np.ndarray) -> np.ndarray:
        """The record's class-id map `(H, W)` uint8 (reduced with `reduce_labels`), checked against the image."""
        label = np.asarray(_load_array(record["label"]))
        if label.ndim == 3:
            label = label[..., 0]
        label = label.astype(np.uint8)
        if self.reduce_labels:  # 0 (unlabelled) -> ignored, 1.. -> 0..; the ignored value stays ignored
            ignored = label == self.ignore_index
            label = np.where((label == 0) | ignored, self.ignore_index, label.astype(np.int64) - 1).astype(np.uint8)
        if label.shape != image.shape[:2]:
            raise ValueError(f"Label {label.shape} and image {image.shape[:2]} sizes differ for {record.get('image')}.")
        return label

    def _random_resize(self, image, label, generator):
        """Aspect-keeping resize so that the image fits 0.4-2.0x the input size (label nearest)."""
        height, width = self.input_size
        ratio = augment.uniform(generator, 0.4, 2.0)
        target_h, target_w = int(height * ratio), int(width * ratio)
        scale = min(target_w / image.shape[1], target_h / image.shape[0])
        new_w, new_h = int(round(image.shape[1] * scale)), int(round(image.shape[0] * scale))
        interpolation = cv2.INTER_AREA if new_w < image.shape[1] else cv2.INTER_CUBIC
        image = cv2.resize(image, (new_w, new_h), interpolation=interpolation)
        return image, cv2.resize(label, (new_w, new_h), interpolation=cv2.INTER_NEAREST)

    def _random_crop(self, image, label, generator):
        """Pad to the input size (image 0, label ignored), then crop it where no class covers 75 % (10 tries)."""
        height, width = self.input_size
        new_h, new_w = label.shape
        pad_h, pad_w = max(height - new_h, 0), max(width - new_w, 0)
        image = cv2.copyMakeBorder(image, 0, pad_h, 0, pad_w, cv2.BORDER_CONSTANT, value=0)
        label = cv2.copyMakeBorder(label, 0, pad_h, 0, pad_w, cv2.BORDER_CONSTANT, value=self.ignore_index)

        def draw_box():
            y = augment.randint(generator, 0, label.shape[0] - height)
            x = augment.randint(generator, 0, label.shape[1] - width)
            return y, x

        y, x = draw_box()
        for _ in range(10):
            values, counts = np.unique(label[y : y + height, x : x + width], return_counts=True)
            counts = counts[values != self.ignore_index]
            if len(counts) > 1 and counts.max() / counts.sum() < 0.75:
                break
            y, x = draw_box()
        return image[y : y + height, x : x + width], label[y : y + height, x : x + width]

    def _transform(self, record: dict, image: np.ndarray, generator: torch.Generator) -> dict | None:
        label = self._load_label(record, image)
        if not self.train:
            return {"pixel_values": normalize_image(self._stretch(image)), "labels": torch.from_numpy(label.astype(np.int64)),
                    "label_size": torch.tensor(label.shape)}
        height, width = self.input_size
        if self.backgrounds and not record.get("is_itw", False) and augment.coin(generator, self.p["background"]):
            background = load_image(self.backgrounds[augment.randint(generator, 0, len(self.backgrounds) - 1)])
            background = cv2.resize(background, (image.shape[1], image.shape[0]), interpolation=cv2.INTER_LINEAR)
            foreground = (label > 0)[..., None]
            image = np.where(foreground, image, background).astype(np.uint8)
        if augment.coin(generator, self.p["resize"]):
            image, label = self._random_resize(image, label, generator)
        if augment.coin(generator, self.p["crop"]):
            image, label = self._random_crop(image, label, generator)
        image = _pixel_noise_blur(image, generator, self.p["blur"], self.p["noise"])
        if augment.coin(generator, self.p["rotate"]):
            degree = augment.uniform(generator, -60.0, 60.0)
            matrix = cv2.getRotationMatrix2D((image.shape[1] / 2, image.shape[0] / 2), degree, 1.0)
            size = (image.shape[1], image.shape[0])
            image = cv2.warpAffine(image, matrix, size, flags=cv2.INTER_LINEAR, borderValue=0)
            label = cv2.warpAffine(label, matrix, size, flags=cv2.INTER_NEAREST, borderValue=0)
        if augment.coin(generator, self.p["flip"]):
            image = image[:, ::-1].copy()
            label = self.swap[label[:, ::-1]]
        if augment.coin(generator, self.p["photometric"]):
            image = augment.photometric_distortion(image, generator)
        image = self._stretch(image)
        label = cv2.resize(label, (width, height), interpolation=cv2.INTER_NEAREST)
        foreground = (label > 0) & (label != self.ignore_index)
        if foreground.mean() < 0.01:
            return None
        return {"pixel_values": normalize_image(image), "labels": torch.from_numpy(label.astype(np.int64)),
                "label_size": torch.tensor(label.shape)}


# ------------------------------------------------------------------------------------- normal / albedo / pointmap
class NormalTransform(_TaskTransform):
    """Official surface-normal pipeline.

    Train: photometric distortion -> down-up resampling p 0.2 (x0.1-0.7, random interpolations) -> random scale
    0.5-2.0 p 0.3 -> random crop (aspect 0.5-2, area 0.4-1) p 0.3 -> horizontal flip p 0.3 (negates the normals'
    x) -> aspect resize + centred zero padding to the input size (targets nearest) -> Gaussian blur p 0.3 ->
    Gaussian noise p 0.3 -> solarize p 0.3 -> targets re-normalised. Samples with < 16 valid pixels or > 96 %
    foreground return `None`. Eval: the same letterbox for image, normals and mask (the official validation keeps the
    target at its original size; here both are at input resolution so batches stack).

    Returns `pixel_values` (`(3, H, W)`), `labels` (`(3, H, W)` unit normals, 0 off the mask) and `mask`
    (`(1, H, W)` bool).
    """

    DEFAULT_PROBABILITIES = {"photometric": 1.0, "down_up": 0.2, "scale": 0.3, "crop": 0.3, "flip": 0.3, "blur": 0.3,
                             "noise": 0.3, "solarize": 0.3}

    def _transform(self, record: dict, image: np.ndarray, generator: torch.Generator) -> dict | None:
        normal = np.asarray(_load_array(record["normal"]), dtype=np.float32)
        mask = _load_mask(record, lambda: np.isfinite(normal).all(-1)
                          & (np.linalg.norm(np.nan_to_num(normal), axis=-1) > 0))
        normal = np.nan_to_num(normal)
        if self.train:
            if augment.coin(generator, self.p["photometric"]):
                image = augment.photometric_distortion(image, generator)
            if augment.coin(generator, self.p["down_up"]):
                image = augment.down_up_sample(image, generator)
            image, (normal, mask), _, _ = self._scale_and_crop(image, [normal, mask], generator)
            if augment.coin(generator, self.p["flip"]):
                image, normal, mask = _flip(image, normal, mask)
                normal[..., 0] = -normal[..., 0]
        image, (normal, mask) = _letterbox_all(image, [normal, mask], self.input_size)
        if self.train:
            image = _pixel_noise_blur(image, generator, self.p["blur"], self.p["noise"])
            if augment.coin(generator, self.p["solarize"]):
                image = augment.solarize(image)
            if not _valid_fraction_ok(mask):
                return None
        normal = normal / (np.linalg.norm(normal, axis=-1, keepdims=True) + 1e-6)
        normal[mask == 0] = 0.0
        return {"pixel_values": normalize_image(image),
                "labels": torch.from_numpy(np.ascontiguousarray(normal.transpose(2, 0, 1))),
                "mask": torch.from_numpy(mask > 0)[None]}


class LetterboxMapTransform(_TaskTransform):
    """The transform of a dense task registered with `sapiens2_hf.register_task` whose target is a map of any channel
    count, read from `record[key]` (an array or a .npy / image file; `(H, W)` or `(H, W, C)`) with an
    optional `record["mask"]` of valid pixels (default: the pixels where the target is finite). `for_key(key)` makes
    the class for another record key; the default one reads `"map"`.

    Train: random scale 0.5-2.0 p 0.3 -> random crop p 0.3 -> aspect resize + centred padding to the input size
    (targets nearest) -> Gaussian noise p 0.2. No flip: what mirroring does to a map's values is task-specific
    (normals negate x, UV swaps charts), so a task that wants it writes its own transform. Samples with < 16 valid
    pixels return `None`. Eval: the letterbox alone.

    Returns `pixel_values` `(3, H, W)`, `labels` `(C, H, W)` float32 (0 off the mask) and `mask` `(1, H, W)` bool.
    """

    key = "map"
    DEFAULT_PROBABILITIES = {"scale": 0.3, "crop": 0.3, "noise": 0.2}

    @classmethod
    def for_key(cls, key: str) -> type["LetterboxMapTransform"]:
        """This transform reading its target from `record[key]`."""
        return type(f"{cls.__name__}[{key}]", (cls,), {"key": key, "__module__": cls.__module__})

    def _target_and_mask(self, record: dict) -> tuple[np.ndarray, np.ndarray]:
        target = np.asarray(_load_array(record[self.key]), dtype=np.float32)
        target = target[..., None] if target.ndim == 2 else target
        mask = _load_mask(record, lambda: np.isfinite(target).all(-1))
        return np.nan_to_num(target), mask

    def _rejected(self, target: np.ndarray, mask: np.ndarray) -> bool:
        return (mask > 0).sum() < 16

    def _transform(self, record: dict, image: np.ndarray, generator: torch.Generator) -> dict | None:
        target, mask = self._target_and_mask(record)
        if self.train:
            image, (target, mask), _, _ = self._scale_and_crop(image, [target, mask], generator)
            if "flip" in self.p and augment.coin(generator, self.p["flip"]):
                image, target, mask = _flip(image, target, mask)
        image, (target, mask) = _letterbox_all(image, [target, mask], self.input_size)
        target = target[..., None] if target.ndim == 2 else target  # cv2 drops a single channel
        if self.train:
            image = _pixel_noise_blur(image, generator, 0.0, self.p["noise"])
            if self._rejected(target, mask):
                return None
        target = np.where(mask[..., None] > 0, target, 0.0).astype(np.float32)
        return {"pixel_values": normalize_image(image),
                "labels": torch.from_numpy(np.ascontiguousarray(target.transpose(2, 0, 1))),
                "mask": torch.from_numpy(mask > 0)[None]}


class AlbedoTransform(LetterboxMapTransform):
    """Official albedo pipeline.

    Train: random scale 0.5-2.0 p 0.3 -> random crop p 0.3 -> horizontal flip p 0.3 -> aspect resize + centred
    padding -> Gaussian noise p 0.2. Samples with < 16 valid pixels, or whose albedo is near-constant (largest
    per-channel standard deviation over the foreground < 0.02, the official dataset filter) return `None`.

    Returns `pixel_values`, `labels` (`(3, H, W)` albedo in [0, 1]) and `mask` (`(1, H, W)` bool).
    """

    key = "albedo"
    DEFAULT_PROBABILITIES = {"scale": 0.3, "crop": 0.3, "flip": 0.3, "noise": 0.2}

    def _target_and_mask(self, record: dict) -> tuple[np.ndarray, np.ndarray]:
        albedo = np.asarray(_load_array(record["albedo"]))
        albedo = (albedo.astype(np.float32) / 255.0 if albedo.dtype == np.uint8 else albedo.astype(np.float32))[..., :3]
        return albedo, _load_mask(record, lambda: albedo.max(axis=-1) > 0)

    def _rejected(self, target: np.ndarray, mask: np.ndarray) -> bool:
        return super()._rejected(target, mask) or target[mask > 0].std(axis=0).max() < 0.02


class PointmapTransform(_TaskTransform):
    """Official pointmap pipeline.

    Train: photometric distortion -> random scale 0.5-2.0 p 0.3 (intrinsics scaled) -> random crop p 0.3 (principal
    point shifted) -> horizontal flip p 0.3 (`c_x -> W - 1 - c_x`) -> aspect resize + centred padding (intrinsics
    updated) -> target: depth back-projected with the final intrinsics, `X = (u - c_x) Z / f_x`,
    `Y = (v - c_y) Z / f_y`, times the canonical scale `768 / f_x`. Samples with < 16 valid pixels, > 96 % foreground
    or a canonical depth below 0.04 return `None`. Eval: letterbox only.

    Args:
        canonical_focal_length (`float`, *optional*, defaults to 768): Focal length (pixels) of the canonical camera.

    Returns `pixel_values`, `labels` (`(3, H, W)` canonical XYZ, 0 off the mask), `mask` (`(1, H, W)` bool),
    `target_scales` (`(1,)`, `768 / f_x`), `intrinsics` (`(3, 3)`, the input grid's pre-canonical pixel intrinsics)
    and `target_mean_depth` (`()`, mean canonical Z over the mask).
    """

    DEFAULT_PROBABILITIES = {"photometric": 1.0, "scale": 0.3, "crop": 0.3, "flip": 0.3}

    def __init__(self, input_size: tuple[int, int] = (1024, 768), train: bool = True,
                 augment_probabilities: dict | None = None, canonical_focal_length: float = CANONICAL_FOCAL_LENGTH):
        super().__init__(input_size, train, augment_probabilities)
        self.canonical_focal_length = float(canonical_focal_length)

    def _transform(self, record: dict, image: np.ndarray, generator: torch.Generator) -> dict | None:
        depth, K, file_mask = _load_pointmap_target(record)
        mask = _load_mask(record, lambda: (np.isfinite(depth) & (depth > 0)) if file_mask is None else file_mask)
        depth = np.where(mask > 0, np.nan_to_num(depth), 0.0).astype(np.float32)
        K = K.copy()
        if self.train:
            if augment.coin(generator, self.p["photometric"]):
                image = augment.photometric_distortion(image, generator)
            image, (depth, mask), factor, box = self._scale_and_crop(image, [depth, mask], generator)
            if factor is not None:
                K[:2] *= factor
                K[2] = [0.0, 0.0, 1.0]
            if box is not None:
                K[0, 2] -= box[2]
                K[1, 2] -= box[0]
            if augment.coin(generator, self.p["flip"]):
                image, depth, mask = _flip(image, depth, mask)
                K[0, 2] = image.shape[1] - K[0, 2] - 1
        (new_h, new_w), (left, _, top, _), _ = augment.letterbox_geometry(image.shape[:2], self.input_size)
        scale_x, scale_y = new_w / image.shape[1], new_h / image.shape[0]
        image, (depth, mask) = _letterbox_all(image, [depth, mask], self.input_size)
        K[0, 0] *= scale_x
        K[1, 1] *= scale_y
        K[0, 2] = K[0, 2] * scale_x + left
        K[1, 2] = K[1, 2] * scale_y + top
        canonical = self.canonical_focal_length / K[0, 0]
        xyz = depth_to_canonical_pointmap(depth, K, self.canonical_focal_length)
        xyz[mask == 0] = 0.0
        if self.train:
            if not _valid_fraction_ok(mask) or xyz[mask > 0, 2].min() < 0.04:
                return None
        elif not (mask > 0).any():
            raise ValueError(f"Pointmap sample {record.get('image')} has no valid pixel after the letterbox.")
        mean_depth = float(xyz[mask > 0, 2].mean())
        return {"pixel_values": normalize_image(image),
                "labels": torch.from_numpy(np.ascontiguousarray(xyz.transpose(2, 0, 1)).astype(np.float32)),
                "mask": torch.from_numpy(mask > 0)[None],
                "target_scales": torch.tensor([canonical], dtype=torch.float32),
                "intrinsics": torch.from_numpy(K.astype(np.float32)),
                "target_mean_depth": torch.tensor(mean_depth, dtype=torch.float32)}


# ------------------------------------------------------------------------------------------------------- matting
def _unit_interval(array: np.ndarray) -> np.ndarray:
    """uint8 (0-255) or uint16 (0-65535) -> float32 in [0, 1]; float arrays are taken as [0, 1] and clipped."""
    array = np.asarray(array)
    if array.dtype == np.uint8:
        return array.astype(np.float32) / 255.0
    if array.dtype == np.uint16:
        return array.astype(np.float32) / 65535.0
    return np.clip(np.nan_to_num(array.astype(np.float32)), 0.0, 1.0)


class MattingTransform(_TaskTransform):
    """Matting pipeline: the geometry of the official Sapiens2 matting config, stretch resize at evaluation.

    Train (each step a probability in `augment_probabilities`): random crop p 0.5 (aspect 0.5-2, area 0.4-1) ->
    rotation p 0.5 in +-60 deg (image border white, alpha and foreground border 0, as the official config pads) ->
    horizontal flip p 0.5 -> stretch to the input size (image: area when the width shrinks, else linear, as the
    official resize; alpha and foreground linear) -> photometric distortion p 1.0. The official recipe's
    random background replacement, JPEG compression and alpha-box crop need data this transform does not have and
    are left out. Eval: stretch only (the official test pipeline resizes without keeping the aspect ratio), as the
    processor does. Alpha is resized linearly (a fraction, not a label); samples whose alpha is all zero in training
    return `None` (the dataset draws another one).

    Records: `image`, `alpha` (path, `(H, W)` float in [0, 1] or uint8 0-255), optional `foreground` (`(H, W, 3)`
    colour in [0, 1] or uint8, not pre-multiplied) and optional `mask` (valid pixels, non-zero).

    Returns `pixel_values` (`(3, H, W)`), `labels` (`(1, H, W)` float32 alpha), `mask` (`(1, H, W)` bool) and, with
    a foreground, `foreground_labels` (`(3, H, W)` float32, pre-multiplied `alpha * F`: what the model predicts).
    """

    DEFAULT_PROBABILITIES = {"crop": 0.5, "rotate": 0.5, "flip": 0.5, "photometric": 1.0}

    @staticmethod
    def _load_maps(record: dict, image: np.ndarray) -> list:
        """``[alpha, mask, foreground]``: alpha `(H, W)` and valid mask float32, foreground `(H, W, 3)` or None."""
        alpha = _load_array(record["alpha"])
        alpha = _unit_interval(alpha[..., 0] if alpha.ndim == 3 else alpha)
        if alpha.shape != image.shape[:2]:
            raise ValueError(f"Alpha {alpha.shape} and image {image.shape[:2]} sizes differ for {record.get('image')}.")
        foreground = _load_array(record.get("foreground"))
        if foreground is not None:
            foreground = _unit_interval(foreground)[..., :3]
        mask = _load_array(record.get("mask"))
        mask = np.ones(alpha.shape, np.float32) if mask is None else (np.asarray(mask) > 0).astype(np.float32)
        mask = mask[..., 0] if mask.ndim == 3 else mask
        return [alpha, mask, foreground]

    def _transform(self, record: dict, image: np.ndarray, generator: torch.Generator) -> dict | None:
        maps = self._load_maps(record, image)
        if self.train:
            if augment.coin(generator, self.p["crop"]):
                box = augment.random_crop_box(generator, image.shape[:2])
                if box is not None:
                    image, *maps = _crop([image, *maps], box)
            if augment.coin(generator, self.p["rotate"]):
                degree = augment.uniform(generator, -60.0, 60.0)
                matrix = cv2.getRotationMatrix2D((image.shape[1] / 2, image.shape[0] / 2), degree, 1.0)
                size = (image.shape[1], image.shape[0])
                image = cv2.warpAffine(image, matrix, size, flags=cv2.INTER_LINEAR, borderValue=(255, 255, 255))
                # The rotated-in corners are known background: alpha 0, valid.
                maps[0] = cv2.warpAffine(maps[0], matrix, size, flags=cv2.INTER_LINEAR, borderValue=0)
                maps[1] = cv2.warpAffine(maps[1], matrix, size, flags=cv2.INTER_NEAREST, borderValue=1)
                if maps[2] is not None:
                    maps[2] = cv2.warpAffine(maps[2], matrix, size, flags=cv2.INTER_LINEAR, borderValue=0)
            if augment.coin(generator, self.p["flip"]):
                image = image[:, ::-1].copy()
                maps = [None if m is None else m[:, ::-1].copy() for m in maps]
        height, width = self.input_size
        # the official MattingResize: INTER_AREA when the width shrinks, else INTER_LINEAR; targets linear
        image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA if width < image.shape[1]
                           else cv2.INTER_LINEAR)
        alpha = np.clip(cv2.resize(maps[0], (width, height), interpolation=cv2.INTER_LINEAR), 0.0, 1.0)
        mask = cv2.resize(maps[1], (width, height), interpolation=cv2.INTER_NEAREST) > 0
        if self.train:
            if augment.coin(generator, self.p["photometric"]):
                image = augment.photometric_distortion(image, generator)
            if not (alpha[mask] > 0).any():
                return None
        sample = {"pixel_values": normalize_image(image),
                  "labels": torch.from_numpy(np.ascontiguousarray(alpha, dtype=np.float32))[None],
                  "mask": torch.from_numpy(mask)[None]}
        if maps[2] is not None:
            colour = np.clip(cv2.resize(maps[2], (width, height), interpolation=cv2.INTER_LINEAR), 0.0, 1.0)
            premultiplied = (colour * alpha[..., None]).astype(np.float32)
            sample["foreground_labels"] = torch.from_numpy(np.ascontiguousarray(premultiplied.transpose(2, 0, 1)))
        return sample


def depth_to_canonical_pointmap(depth: np.ndarray, intrinsics: np.ndarray,
                                canonical_focal_length: float = CANONICAL_FOCAL_LENGTH) -> np.ndarray:
    """Back-project a metric depth map and express it in the canonical camera.

    Args:
        depth (`np.ndarray` of shape `(height, width)`): Metric Z (metres), 0 where invalid.
        intrinsics (`np.ndarray` of shape `(3, 3)`): Pixel intrinsics of the same grid.

    Returns:
        `np.ndarray` of shape `(height, width, 3)`: `(X, Y, Z) * canonical_focal_length / f_x`.
    """
    height, width = depth.shape
    u = np.arange(width)[None, :]
    v = np.arange(height)[:, None]
    xyz = np.stack([(u - intrinsics[0, 2]) * depth / intrinsics[0, 0], (v - intrinsics[1, 2]) * depth / intrinsics[1, 1],
                    depth], axis=-1)
    return xyz * (canonical_focal_length / intrinsics[0, 0])

