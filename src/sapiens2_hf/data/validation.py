"""Up-front checks of training records, so that one bad sample is found when the dataset is built, not hours into a
run: a zero-size box (the UDP crop divides by the box size), non-finite or absent keypoints (the sample trains at loss
0), a missing, empty, unreadable or truncated image or target file.

`validate_records` returns the usable records and one `SkippedSample` per dropped record (`strict=True`: raises
`BadSampleError` on the first). The file checks are cheap (`image_file_problem`); a file broken in a way only a full
decode shows still fails when it is read, with an error naming it (`SampleLoadError`, raised by the datasets).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from ..runs.inputs import IMAGE_SUFFIXES
from ..utils.atomic_io import atomic_write_json
from .tasks import DATA_TASKS, is_top_down


class BadSampleError(ValueError):
    """A record fails the up-front checks and the run is strict (`--strict`)."""


class NoUsableSamplesError(ValueError):
    """Every record of a split failed the up-front checks (or there were none).

    Attributes:
        skipped (`list[SkippedSample]`): the records left out, so that the run can still write
            `skipped_samples.json` before it stops: the one list that says what to fix.
    """

    def __init__(self, message: str, skipped: Sequence["SkippedSample"] = ()):
        super().__init__(message)
        self.skipped = list(skipped)


class SampleLoadError(ValueError):
    """A sample that passed the up-front checks fails when it is read; the message names its file."""


@dataclass(frozen=True)
class SkippedSample:
    """One record left out of a dataset: its `index` in the source (before skipping), its image `file` (or the
    offending target file; `None` for in-memory data), the `reason` in words, and the `split` (`"train"`, `"eval"`
    or `"pretrain"`)."""

    index: int
    file: str | None
    reason: str
    split: str = "train"


# The last bytes of a complete file of each format (PNG: the IEND chunk with its CRC; JPEG: the EOI marker).
_END_MARKERS = {"PNG": b"IEND\xaeB`\x82", "JPEG": b"\xff\xd9"}
_TAIL_BYTES = 64


def image_file_problem(path: str | os.PathLike) -> str | None:
    """Why the image file at `path` cannot be trained on, or `None` when it looks complete.

    Reads the header (format and size) and, for PNG and JPEG, the file's end marker. A file without its end marker is
    decoded in full: cameras append trailers after a JPEG's end marker, and such files are fine.
    """
    path = Path(path)
    if not path.is_file():
        return "missing file"
    size = path.stat().st_size
    if size == 0:
        return "empty file"
    try:
        with Image.open(path) as image:
            image_format, (width, height) = image.format, image.size
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        return f"not a readable image ({error})"
    if width == 0 or height == 0:
        return "zero-size image"
    marker = _END_MARKERS.get(image_format)
    if marker is None:
        return None
    with open(path, "rb") as handle:
        handle.seek(max(0, size - _TAIL_BYTES))
        if marker in handle.read():
            return None
    try:
        with Image.open(path) as image:
            image.load()
    except (OSError, ValueError, SyntaxError) as error:
        return f"truncated or corrupt {image_format} file ({error})"
    return None


def _target_file_problem(path: Path) -> str | None:
    if not path.is_file():
        return "missing file"
    if path.stat().st_size == 0:
        return "empty file"
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return image_file_problem(path)
    try:
        if suffix == ".npy":
            np.load(path, mmap_mode="r", allow_pickle=False)  # header + size check, no data read
        elif suffix == ".npz":
            with zipfile.ZipFile(path) as archive:  # a truncated archive has no readable central directory
                archive.namelist()
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        return f"unreadable {suffix} file ({error})"
    return None


def _pose_problem(record: dict) -> str | None:
    bbox = np.asarray(record.get("bbox", ()), dtype=np.float64).reshape(-1)
    if bbox.shape != (4,) or not np.isfinite(bbox).all():
        return f"bbox must be 4 finite numbers (x, y, width, height), got {bbox.tolist()}"
    if bbox[2] <= 0 or bbox[3] <= 0:
        return f"zero-size bbox (width {bbox[2]:g}, height {bbox[3]:g})"
    keypoints = np.asarray(record.get("keypoints", ()), dtype=np.float64)
    if keypoints.ndim != 2 or keypoints.shape[1] < 2 or len(keypoints) == 0:
        return f"keypoints must be (num_keypoints, 3), got shape {keypoints.shape}"
    if not np.isfinite(keypoints).all():
        bad = np.flatnonzero(~np.isfinite(keypoints).all(axis=1))
        return f"non-finite keypoints (NaN or inf) at keypoint indices {bad[:10].tolist()}"
    if keypoints.shape[1] > 2 and not (keypoints[:, 2] > 0).any():
        return "no labelled keypoint (the sample would train at loss 0)"
    return None


def file_fields() -> tuple[str, ...]:
    """Record fields that hold file paths, in the order their problems are reported: every task's target file
    (`DataTaskSpec.file_key` of the data-layer registry, read at each call), then the mask."""
    return (*dict.fromkeys(spec.file_key for spec in DATA_TASKS.values() if spec.file_key), "mask")


def record_problem(record: dict, task: str) -> tuple[str | None, str] | None:
    """The first problem of one record as `(file, reason)`, or `None` when it passes.

    `file` is the record's image path (or the target file at fault), `None` for in-memory images.
    """
    image = record.get("image")
    image_file = str(image) if isinstance(image, (str, os.PathLike)) else None
    if image is None:
        return image_file, "no image"
    if image_file is not None:
        problem = image_file_problem(image_file)
        if problem is not None:
            return image_file, problem
    if is_top_down(task):  # one person per record: its box and keypoints
        problem = _pose_problem(record)
        if problem is not None:
            return image_file, problem
    for field in file_fields():
        value = record.get(field)
        if isinstance(value, (str, os.PathLike)):
            problem = _target_file_problem(Path(value))
            if problem is not None:
                return str(value), f"{field}: {problem}"
    return None


def validate_records(records: Sequence[dict], task: str, strict: bool = False,
                     split: str = "train") -> tuple[list[dict], list[SkippedSample]]:
    """Check every record (in the task transform's schema) of a `task` dataset: top-down records also get box and
    keypoint checks; `strict` raises `BadSampleError` on the first bad one; `split` names it in messages and entries.

    Returns `(good records in order, skipped: list[SkippedSample])`.
    """
    return _partition(records, lambda record: record_problem(record, task), strict, split, "record")


def validate_image_files(paths: Sequence[str | os.PathLike], strict: bool = False,
                         split: str = "pretrain") -> tuple[list[str], list[SkippedSample]]:
    """`validate_records` for a plain list of image files (pretraining)."""

    def problem_of(path):
        problem = image_file_problem(path)
        return None if problem is None else (str(path), problem)

    return _partition(paths, problem_of, strict, split, "image")


def _partition(items: Sequence, problem_of, strict: bool, split: str, noun: str) -> tuple[list, list[SkippedSample]]:
    """The items without a problem (`problem_of(item)` is `None` or `(file, reason)`) and the skipped ones."""
    kept, skipped = [], []
    for index in range(len(items)):
        problem = problem_of(items[index])
        if problem is None:
            kept.append(items[index])
            continue
        file, reason = problem
        if strict:
            raise BadSampleError(
                f"Bad {split} {noun} {index} ({file or 'in-memory image'}): {reason}. Fix or remove it, or run without "
                f"--strict to skip bad {noun}s (they are then listed in <output_dir>/skipped_samples.json)."
            )
        skipped.append(SkippedSample(index=index, file=file, reason=reason, split=split))
    return kept, skipped


def write_skipped_samples(output_dir: str | os.PathLike, skipped: Sequence[SkippedSample],
                          filename: str = "skipped_samples.json") -> Path:
    """Write `{"num_skipped": n, "skipped": [{index, file, reason, split}, ...]}` to `output_dir/filename`
    (atomically, `sapiens2_hf.utils.atomic_io`), so each run's file describes that run."""
    payload = {"num_skipped": len(skipped), "skipped": [asdict(sample) for sample in skipped]}
    return atomic_write_json(Path(output_dir) / filename, payload, indent=2, trailing_newline=True)


def describe_skipped(skipped: Sequence[SkippedSample], limit: int = 3) -> str:
    """One line for the log: the count and the first few reasons."""
    shown = "; ".join(f"{s.split} {s.index} ({s.file}): {s.reason}" for s in skipped[:limit])
    more = f"; and {len(skipped) - limit} more" if len(skipped) > limit else ""
    return f"{len(skipped)} bad sample(s) skipped: {shown}{more}"


def sample_file(record) -> str | None:
    """The file a record is read from (for error messages), if it names one."""
    if isinstance(record, dict):
        record = record.get("image", record.get("path"))
    return str(record) if isinstance(record, (str, os.PathLike)) else None


__all__ = ["BadSampleError", "NoUsableSamplesError", "SampleLoadError", "SkippedSample", "describe_skipped",
           "image_file_problem", "record_problem", "sample_file", "validate_image_files", "validate_records",
           "write_skipped_samples"]
