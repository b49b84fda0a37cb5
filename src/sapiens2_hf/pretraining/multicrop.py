"""Multi-crop views, photometric augmentation and patch masks for pretraining: the dataset and the collator.

Each image becomes `num_global_crops` global views (seen by the teacher in full and by the student with
`mask_ratio` of their patches removed) and `num_local_crops` smaller local views (student only), DINO's multi-crop.
Photometric augmentation is mild and keeps colour (no hue shift, grayscale or solarisation; rare blur): heavy
appearance augmentation makes the representation drift from the observed image, and the MAE term must reconstruct
the masked patches' real colours. The defaults and their sources are tabled in docs/pretraining.md.

Randomness: all crops, jitters and masks of an example come from a `torch.Generator` seeded with the example's own
seed (from the base seed, the epoch and the index), so the views are a pure function of (seed, epoch, index):
independent of batch composition, workers, process count and resuming. Sizes follow the model:
`MultiCropAugmentation.from_config(config)` crops at the config's `image_size`, and other global crops are refused
where the config is known (`check_crops_fit_config`).
"""

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data.validation import (
    NoUsableSamplesError,
    SampleLoadError,
    SkippedSample,
    describe_skipped,
    validate_image_files,
)
from ..modeling.sapiens2_processing_ops import OFFICIAL_MEAN_255, OFFICIAL_STD_255, gaussian_blur_reflect
from ..runs.decode import ImageDecodeError, decode_image
from ..runs.inputs import IMAGE_SUFFIXES, image_files
from .masking import num_kept_patches, random_patch_masks


# DINOv2's local/global crop side ratio (96 / 224 px), applied to the global crop size by `from_config`.
LOCAL_CROP_SIDE_RATIO = 96 / 224
_GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R 601 luma, as PIL and torchvision


@dataclass(frozen=True)
class MultiCropAugmentation:
    """Sizes, counts and photometric settings of the multi-crop views (see the module docstring for sources).

    All sizes are `(height, width)` in pixels and must be divisible by the patch size.
    """

    global_crop_size: tuple[int, int] = (1024, 768)
    local_crop_size: tuple[int, int] = (448, 336)
    num_global_crops: int = 2
    num_local_crops: int = 8
    global_crop_scale: tuple[float, float] = (0.32, 1.0)
    local_crop_scale: tuple[float, float] = (0.05, 0.32)
    crop_aspect_jitter: tuple[float, float] = (3 / 4, 4 / 3)
    flip_probability: float = 0.5
    color_jitter_probability: float = 0.8
    brightness: float = 0.2
    contrast: float = 0.2
    saturation: float = 0.1
    blur_probability: float = 0.1
    blur_sigma: tuple[float, float] = (0.1, 2.0)

    @classmethod
    def tiny(cls, **overrides) -> "MultiCropAugmentation":
        """Tiny preset for tests and CPU smoke runs (64 x 48 global and 32 x 32 local crops, 2 of each)."""
        kwargs = {"global_crop_size": (64, 48), "local_crop_size": (32, 32), "num_local_crops": 2}
        kwargs.update(overrides)
        return cls(**kwargs)

    @classmethod
    def from_config(cls, config, **overrides) -> "MultiCropAugmentation":
        """Crops at the `image_size` of `config` (pretraining or backbone): local crops of `LOCAL_CROP_SIDE_RATIO` of
        each side rounded up to a multiple of the patch size (1024 x 768 -> 448 x 336, the real-scale defaults; the
        tiny 64 x 48 -> 32 x 32, as `tiny()`); `overrides` set any other field."""
        backbone = getattr(config, "backbone_config", config)
        (height, width), (patch_h, patch_w) = backbone.image_size_hw, backbone.patch_size_hw
        local = (patch_h * math.ceil(height * LOCAL_CROP_SIDE_RATIO / patch_h),
                 patch_w * math.ceil(width * LOCAL_CROP_SIDE_RATIO / patch_w))
        kwargs = {"global_crop_size": (height, width), "local_crop_size": local}
        kwargs.update(overrides)
        return cls(**kwargs)


def check_crops_fit_config(augmentation: MultiCropAugmentation, config) -> None:
    """Refuses global crops of another size than `config`'s (pretraining or backbone) `image_size`: the crops set the
    resolution the backbone is pretrained at, which the exported config records (the default `MultiCropAugmentation()`
    is the real 1024 x 768 scale, ~100x the work of the tiny model's 64 x 48)."""
    backbone = getattr(config, "backbone_config", config)
    expected = tuple(backbone.image_size_hw)
    crop = tuple(augmentation.global_crop_size)
    if crop != expected:
        raise ValueError(
            f"The global crop size {crop[0]}x{crop[1]} differs from the model config's image_size "
            f"{expected[0]}x{expected[1]}: build the crops with MultiCropAugmentation.from_config(config) (or "
            f"MultiCropCollator.from_config(config)), or set the backbone config's image_size to [{crop[0]}, "
            f"{crop[1]}]."
        )


def example_seed(base_seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for example `index` in epoch `epoch` (stable across Python processes and versions)."""
    digest = hashlib.blake2b(f"{base_seed}/{epoch}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def to_float_image(image) -> torch.Tensor:
    """A `PIL.Image` (any mode, converted to RGB), a `(height, width, 3)` uint8 array or a `(3, height, width)` tensor
    (uint8, or float in `[0, 255]`) as a float32 `(3, height, width)` tensor with values in `[0, 255]`."""
    if isinstance(image, torch.Tensor):
        tensor = image
    elif isinstance(image, np.ndarray):
        if image.ndim != 3 or image.shape[-1] != 3:
            raise ValueError(f"A numpy image must have shape (height, width, 3), got {image.shape}.")
        tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
    elif hasattr(image, "convert"):
        tensor = torch.from_numpy(np.asarray(image.convert("RGB")).copy()).permute(2, 0, 1)
    else:
        raise TypeError(f"Unsupported image type {type(image).__name__}: pass a PIL image, numpy array or tensor.")
    if tensor.ndim != 3 or tensor.shape[0] != 3:
        raise ValueError(f"An image tensor must have shape (3, height, width), got {tuple(tensor.shape)}.")
    return tensor.to(torch.float32)


def _uniform(generator: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator))


def _bernoulli(generator: torch.Generator, probability: float) -> bool:
    return probability > 0 and float(torch.rand((), generator=generator)) < probability


def sample_crop_box(image_hw: tuple[int, int], output_hw: tuple[int, int], scale: tuple[float, float],
                    aspect_jitter: tuple[float, float], generator: torch.Generator) -> tuple[int, int, int, int]:
    """RandomResizedCrop box: area fraction uniform in `scale`, aspect log-uniform in `aspect_jitter` times the
    output aspect; up to 10 tries, then the largest centred box with the output aspect.

    Returns:
        `(top, left, height, width)` in source pixels.
    """
    height, width = image_hw
    area = height * width
    output_aspect = output_hw[1] / output_hw[0]  # width / height
    log_low, log_high = math.log(aspect_jitter[0]), math.log(aspect_jitter[1])
    for _ in range(10):
        target_area = area * _uniform(generator, *scale)
        aspect = output_aspect * math.exp(_uniform(generator, log_low, log_high))
        crop_w = int(round(math.sqrt(target_area * aspect)))
        crop_h = int(round(math.sqrt(target_area / aspect)))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            top = int(torch.randint(0, height - crop_h + 1, (), generator=generator))
            left = int(torch.randint(0, width - crop_w + 1, (), generator=generator))
            return top, left, crop_h, crop_w
    if width / height > output_aspect:
        crop_h, crop_w = height, max(1, int(round(height * output_aspect)))
    else:
        crop_h, crop_w = max(1, int(round(width / output_aspect))), width
    return (height - crop_h) // 2, (width - crop_w) // 2, crop_h, crop_w


def _grayscale(image: torch.Tensor) -> torch.Tensor:
    weights = torch.tensor(_GRAY_WEIGHTS, dtype=image.dtype, device=image.device).view(3, 1, 1)
    return (image * weights).sum(dim=0, keepdim=True)  # (1, height, width)


def color_jitter(image: torch.Tensor, brightness: float, contrast: float, saturation: float) -> torch.Tensor:
    """Brightness, then contrast, then saturation scaling of a `(3, height, width)` image in `[0, 255]` by the given
    factors (1 = unchanged), clamped; contrast blends with the mean grey level, saturation with the grey image
    (torchvision's definitions)."""
    image = (image * brightness).clamp(0, 255)
    image = ((image - _grayscale(image).mean()) * contrast + _grayscale(image).mean()).clamp(0, 255)
    gray = _grayscale(image)
    return ((image - gray) * saturation + gray).clamp(0, 255)


def gaussian_blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian blur of a `(3, height, width)` image with radius `ceil(3 sigma)` (capped by the image size) and
    reflect padding (the processor's `gaussian_blur_reflect`)."""
    radius = min(int(math.ceil(3 * sigma)), image.shape[-2] - 1, image.shape[-1] - 1)
    if radius < 1:
        return image
    return gaussian_blur_reflect(image[None], 2 * radius + 1, sigma)[0]


def normalize_image(image: torch.Tensor) -> torch.Tensor:
    """`(image - mean) / std` of `(..., 3, height, width)` images in `[0, 255]`, with the official constants."""
    mean = torch.tensor(OFFICIAL_MEAN_255, dtype=image.dtype, device=image.device).view(3, 1, 1)
    std = torch.tensor(OFFICIAL_STD_255, dtype=image.dtype, device=image.device).view(3, 1, 1)
    return (image - mean) / std


def augmented_view(image: torch.Tensor, output_hw: tuple[int, int], scale: tuple[float, float],
                   augmentation: MultiCropAugmentation, generator: torch.Generator) -> torch.Tensor:
    """One random view of a `(3, height, width)` image in `[0, 255]`: random resized crop, horizontal flip, colour
    jitter, blur, normalisation (official mean/std) -> `(3, output_h, output_w)` float32."""
    top, left, crop_h, crop_w = sample_crop_box(
        tuple(image.shape[-2:]), output_hw, scale, augmentation.crop_aspect_jitter, generator
    )
    crop = image[:, top : top + crop_h, left : left + crop_w]
    view = F.interpolate(crop[None], size=output_hw, mode="bilinear", antialias=True, align_corners=False)[0]
    view = view.clamp(0, 255)
    if _bernoulli(generator, augmentation.flip_probability):
        view = view.flip(-1)
    if _bernoulli(generator, augmentation.color_jitter_probability):
        factors = [
            _uniform(generator, max(0.0, 1 - strength), 1 + strength)
            for strength in (augmentation.brightness, augmentation.contrast, augmentation.saturation)
        ]
        view = color_jitter(view, *factors)
    if _bernoulli(generator, augmentation.blur_probability):
        view = gaussian_blur(view, _uniform(generator, *augmentation.blur_sigma))
    return normalize_image(view)


class MultiCropCollator:
    """Builds the pretraining batch: global and local views of each image, plus the patch masks.

    `mask_ratio` is the fraction of each global view's patches removed; `seed` seeds the collator's own generator,
    used only for examples without a `"seed"` (those batches are then not reproducible across a resume). Call it on a
    list of examples, each a dict with `"image"` (see `to_float_image`) and optionally `"seed"` (`int`).

    Returns (dict):
        - `pixel_values` (`torch.Tensor` of shape `(batch_size, num_global_crops, 3, global_h, global_w)`): normalised
          global views (official mean/std).
        - `local_pixel_values` (`torch.Tensor` of shape `(batch_size, num_local_crops, 3, local_h, local_w)`):
          normalised local views; absent when `num_local_crops == 0`.
        - `patch_keep_indices` (`torch.LongTensor` of shape `(batch_size, num_global_crops, num_kept)`) and
          `patch_mask_indices` (`torch.LongTensor` of shape `(batch_size, num_global_crops, num_masked)`): sorted
          row-major patch indices of each global view's grid, partitioning it.
    """

    def __init__(self, augmentation: MultiCropAugmentation, patch_size: int | tuple[int, int], mask_ratio: float,
                 seed: int = 0):
        self.augmentation = augmentation
        self.patch_size = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
        self.mask_ratio = mask_ratio
        crops = [("global_crop_size", augmentation.global_crop_size)]
        if augmentation.num_local_crops:
            crops.append(("local_crop_size", augmentation.local_crop_size))
        for name, (height, width) in crops:
            if height % self.patch_size[0] or width % self.patch_size[1]:
                raise ValueError(
                    f"`{name}` {height}x{width} is not divisible by the patch size {self.patch_size[0]}x"
                    f"{self.patch_size[1]}."
                )
        if augmentation.num_global_crops < 1:
            raise ValueError("At least one global crop is needed (the teacher and the MAE term use them).")
        self.grid_size = (
            augmentation.global_crop_size[0] // self.patch_size[0],
            augmentation.global_crop_size[1] // self.patch_size[1],
        )
        num_kept_patches(self.grid_size[0] * self.grid_size[1], mask_ratio)  # validates early
        self._fallback_generator = torch.Generator().manual_seed(seed)

    @classmethod
    def from_config(cls, config, augmentation: MultiCropAugmentation | None = None,
                    seed: int = 0) -> "MultiCropCollator":
        """Collator for a `Sapiens2PreTrainingConfig` (its backbone patch size, `image_size` and `mask_ratio`).

        `augmentation` defaults to `MultiCropAugmentation.from_config(config)`; one given must crop at the config's
        `image_size` (`check_crops_fit_config`)."""
        if augmentation is None:
            augmentation = MultiCropAugmentation.from_config(config)
        check_crops_fit_config(augmentation, config)
        return cls(augmentation, config.backbone_config.patch_size_hw, config.mask_ratio, seed=seed)

    def views(self, image, seed: int) -> dict[str, torch.Tensor]:
        """The views and masks of one image (unbatched shapes of the class docstring)."""
        generator = torch.Generator().manual_seed(int(seed))
        augmentation = self.augmentation
        image = to_float_image(image)

        def crops(size, scale, count):
            return torch.stack([augmented_view(image, size, scale, augmentation, generator) for _ in range(count)])

        num_global = augmentation.num_global_crops
        global_views = crops(augmentation.global_crop_size, augmentation.global_crop_scale, num_global)
        num_patches = self.grid_size[0] * self.grid_size[1]
        masks = [random_patch_masks(num_patches, self.mask_ratio, generator) for _ in range(num_global)]
        result = {"pixel_values": global_views, "patch_keep_indices": torch.stack([keep for keep, _ in masks]),
                  "patch_mask_indices": torch.stack([mask for _, mask in masks])}
        if augmentation.num_local_crops:
            result["local_pixel_values"] = crops(augmentation.local_crop_size, augmentation.local_crop_scale,
                                                 augmentation.num_local_crops)
        return result

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("Cannot collate an empty list of examples.")
        per_example = []
        for example in examples:
            if "image" not in example:
                raise ValueError(f"Each example needs an `image` entry; got keys {sorted(example)}.")
            seed = example.get("seed")
            if seed is None:
                seed = int(torch.randint(0, 2**62, (), generator=self._fallback_generator))
            per_example.append(self.views(example["image"], seed))
        return {key: torch.stack([views[key] for views in per_example]) for key in per_example[0]}


class PretrainingImageDataset(torch.utils.data.Dataset):
    """Unlabelled images for pretraining: a list of image files, a list of images, or a `datasets.Dataset`.

    Each item is `{"image": torch.Tensor of shape (3, height, width), uint8, "seed": int}`, where the seed is a
    function of (`seed`, current epoch, index) (see `example_seed`); `set_epoch` is called by the pretraining
    trainer at the start of every epoch so that each epoch draws new views.

    Args:
        source: a list of file paths, a list of images (PIL, numpy `(height, width, 3)` uint8, or tensors
            `(3, height, width)` uint8), or a `datasets.Dataset` whose `image_column` holds the images (decoded, or
            undecoded `{"bytes", "path"}` cells).
        validate (`bool`, defaults to `True`): check a list of image files up front (`sapiens2_hf.data.validation`)
            and leave the bad ones out, listed in `skipped` (`list[SkippedSample]`); `strict` raises `BadSampleError`
            on the first instead. In-memory images and `datasets` sources are not checked (that would decode every
            image); a bad one fails when it is read, with an error naming it.
    """

    def __init__(self, source, image_column: str = "image", seed: int = 0, validate: bool = True,
                 strict: bool = False):
        self.image_column = image_column
        self.seed = seed
        self.epoch = 0
        self.skipped: list[SkippedSample] = []
        if hasattr(source, "column_names") and image_column not in source.column_names:
            raise ValueError(
                f"The dataset has no column {image_column!r} (columns: {source.column_names}); pass image_column=..."
            )
        is_file_list = isinstance(source, (list, tuple)) and all(isinstance(i, (str, os.PathLike)) for i in source)
        if validate and is_file_list and len(source):
            source, self.skipped = validate_image_files(source, strict=strict)
        self.source = source
        if len(self) == 0:
            detail = f" ({describe_skipped(self.skipped)})" if self.skipped else ""
            raise NoUsableSamplesError(f"The pretraining dataset is empty{detail}.", self.skipped)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, seed: int = 0, strict: bool = False):
        """All image files under `folder` (the run layer's `image_files`, recursive), checked up front (see
        `validate`)."""
        root = Path(folder)
        if not root.is_dir():
            raise ValueError(f"{root} is not a folder.")
        paths = [str(path) for path in image_files(root, recursive=True)]
        if not paths:
            raise ValueError(f"No image files ({', '.join(sorted(IMAGE_SUFFIXES))}) found under {root}.")
        return cls(paths, seed=seed, strict=strict)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = self.source[index]
        if hasattr(self.source, "column_names"):
            item = item[self.image_column]
        cell = isinstance(item, dict) and ("bytes" in item or "path" in item)  # a `datasets.Image(decode=False)` cell
        if cell or isinstance(item, (str, os.PathLike, bytes)):
            # the run layer's one decoder (its pixel, memory and aspect limits, EXIF orientation); its message names
            # the file, and this one the sample too: among millions of images both are needed
            path = item.get("path") if cell else item
            name = str(path) if path is not None and not (cell and item.get("bytes")) else f"image {index}"
            try:
                item = decode_image(item, name=name)
            except ImageDecodeError as error:
                raise SampleLoadError(f"Could not read pretraining image {index} ({name}): {error}") from error
        image = to_float_image(item).round().clamp(0, 255).to(torch.uint8)
        return {"image": image, "seed": example_seed(self.seed, self.epoch, index)}


__all__ = ["LOCAL_CROP_SIDE_RATIO", "MultiCropAugmentation", "MultiCropCollator", "PretrainingImageDataset",
           "augmented_view", "check_crops_fit_config", "color_jitter", "example_seed", "gaussian_blur",
           "normalize_image", "sample_crop_box", "to_float_image"]
