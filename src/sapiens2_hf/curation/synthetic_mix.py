"""A labelled mixed set to measure the curation stages on (benchmarks/bench_curation.py, the tests): synthetic humans
(`sapiens2_hf.data.synthetic`) and, of other humans, copies each spoiled in one known way, labelled with the stage
that should drop it.

| kind | made from a rendered human by | the stage meant for it |
|---|---|---|
| `good` | nothing | (kept) |
| `blurred` | Gaussian blur, sigma 3 px | `quality` |
| `jpeg` | JPEG at quality 3 | `quality` |
| `dark` | brightness x 0.04 | `quality` |
| `tiny` | a 96x72 downscale | `size` |
| `duplicate` | a 3 % crop of a `good` image, resized back, colours shifted, re-encoded as JPEG 90 | `duplicates` |
| `no_person` | the people painted out (OpenCV inpainting from the background) | `person` |
| `corrupt` | a PNG cut to half its bytes | `decode` |
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

KINDS = ("good", "blurred", "jpeg", "dark", "tiny", "duplicate", "no_person", "corrupt")
EXPECTED_STAGE = {"good": None, "blurred": "quality", "jpeg": "quality", "dark": "quality", "tiny": "size",
                  "duplicate": "duplicates", "no_person": "person", "corrupt": "decode"}


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _jpeg(image: np.ndarray, quality: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def spoil(kind: str, sample: dict, rng: np.random.Generator) -> tuple[bytes, str]:
    """The encoded image of `kind` made from a rendered `sample`, and its file suffix."""
    image = sample["image"]
    if kind == "good":
        return _png(image), ".png"
    if kind == "blurred":
        return _png(cv2.GaussianBlur(image, (0, 0), 3.0)), ".png"
    if kind == "jpeg":
        return _jpeg(image, 3), ".jpg"
    if kind == "dark":
        return _png((image.astype(np.float32) * 0.04).astype(np.uint8)), ".png"
    if kind == "tiny":
        return _png(cv2.resize(image, (72, 96), interpolation=cv2.INTER_AREA)), ".png"
    if kind == "duplicate":
        height, width = image.shape[:2]
        dy, dx = int(0.03 * height), int(0.03 * width)
        cropped = cv2.resize(image[dy:height - dy, dx:width - dx], (width, height), interpolation=cv2.INTER_LINEAR)
        shifted = np.clip(cropped.astype(np.int16) + rng.integers(-12, 13, size=3), 0, 255).astype(np.uint8)
        return _jpeg(shifted, 90), ".jpg"
    if kind == "no_person":
        mask = cv2.dilate(sample["mask"].astype(np.uint8) * 255, np.ones((7, 7), np.uint8))
        return _png(cv2.inpaint(image, mask, 5, cv2.INPAINT_TELEA)), ".png"
    if kind == "corrupt":
        data = _png(image)
        return data[: len(data) // 2], ".png"
    raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}.")


def true_person_mask(kind: str, sample: dict) -> np.ndarray | None:
    """The person pixels of the image `spoil(kind, sample)` makes (None for `corrupt`): what a perfect person
    segmentation would give, to measure the person stage's rule apart from its model."""
    mask = np.asarray(sample["mask"], bool)
    if kind == "no_person":
        return np.zeros_like(mask)
    if kind == "tiny":
        return cv2.resize(mask.astype(np.uint8), (72, 96), interpolation=cv2.INTER_NEAREST).astype(bool)
    if kind == "duplicate":
        height, width = mask.shape
        dy, dx = int(0.03 * height), int(0.03 * width)
        return cv2.resize(mask[dy:height - dy, dx:width - dx].astype(np.uint8), (width, height),
                          interpolation=cv2.INTER_NEAREST).astype(bool)
    return None if kind == "corrupt" else mask


def write_mixed_set(folder: str | Path, counts: dict[str, int], *, height: int = 384, width: int = 288,
                    seed: int = 0) -> list[dict]:
    """Writes the images of `counts` (kind -> how many) into `folder` and `folder/labels.json` (a list of `{"file",
    "kind", "expected_stage", "duplicate_of"}`); returns that list, each entry also with `"mask"`, its true person
    mask (`true_person_mask`). A `duplicate` copies one of the `good` images (they must be asked for too); other kinds
    spoil humans of their own."""
    from ..data.synthetic import render_sample

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels, good_files, goods, next_seed = [], [], [], seed * 100_000
    for kind in KINDS:
        for number in range(counts.get(kind, 0)):
            if kind == "duplicate":
                if not goods:
                    raise ValueError("duplicates copy good images: ask for some 'good' ones too.")
                source = number % len(goods)
                sample, duplicate_of = goods[source], good_files[source]
            else:
                sample, duplicate_of = render_sample(next_seed, height=height, width=width, num_people=1), None
                next_seed += 1
            data, suffix = spoil(kind, sample, rng)
            name = f"{kind}_{number:04d}{suffix}"
            (folder / name).write_bytes(data)
            if kind == "good":
                goods.append(sample)
                good_files.append(name)
            labels.append({"file": name, "kind": kind, "expected_stage": EXPECTED_STAGE[kind],
                           "duplicate_of": duplicate_of, "mask": true_person_mask(kind, sample)})
    (folder / "labels.json").write_text(json.dumps([{k: v for k, v in label.items() if k != "mask"}
                                                    for label in labels], indent=1))
    return labels


__all__ = ["EXPECTED_STAGE", "KINDS", "spoil", "true_person_mask", "write_mixed_set"]
