"""The procedural synthetic humans (`sapiens2_hf.data.synthetic`) as a fine-tuning source.

A thin consumer of the synthetic schema and seed rule: record ``i`` of `SyntheticRecords(task, n, seed=s)` is built
from the typed row ``sample_to_row(SyntheticHumans(...).sample(sample_seed(s, i)), "all", i)`` (the columns of
`task_features`), the same render as row ``i`` of ``make_dataset(task, n, seed=s)`` and sample ``i`` of
``write_dataset(..., seed=s)`` at the same size and settings (a render that shows nobody is re-drawn with
``sample_seed(s, i, attempt)``, as `sample_seed` documents). It only renames and reshapes those columns into the record
each task transform reads (the schema of the on-disk readers in `sapiens2_hf.data.pose` / `sapiens2_hf.data.dense`),
lazily, one render per record.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .synthetic import SyntheticHumans, sample_seed, sample_to_row


def synthetic_record(task: str, row: dict) -> dict:
    """The task-transform record of one typed ``"all"`` row (`sample_to_row(sample, "all", index)`).

    Pose records hold the first person: ``bbox`` COCO ``(x, y, w, h)``, ``keypoints`` ``(308, 3)`` as ``(x, y,
    visibility)``, ``area`` its visible pixels. Dense records hold the target map and a uint8 ``mask``; pointmap
    records hold ``depth`` and the intrinsics ``K``, from which the transform builds the pointmap. Matting records
    hold the anti-aliased ``matting_image`` as their image, with ``alpha`` and ``foreground``.
    """
    index = int(row["sample_index"])
    if task == "pose":
        x0, y0, x1, y1 = (float(v) for v in row["boxes"][0])
        keypoints = np.concatenate([row["keypoints"][0], row["keypoint_visibility"][0, :, None]], axis=1)
        return {"image": row["image"], "bbox": np.array([x0, y0, x1 - x0, y1 - y0], np.float32),
                "keypoints": keypoints.astype(np.float32), "area": float((row["instance_map"] == 1).sum()),
                "image_id": index, "instance_id": index}
    mask = row["mask"].astype(np.uint8)
    if task == "seg":
        return {"image": row["image"], "label": row["segmentation"]}
    if task == "normal":
        return {"image": row["image"], "normal": row["normals"], "mask": mask}
    if task == "pointmap":
        return {"image": row["image"], "depth": row["depth"], "K": row["camera_intrinsics"], "mask": mask}
    if task == "albedo":
        return {"image": row["image"], "albedo": row["albedo"], "mask": mask}
    if task == "matting":
        # the anti-aliased render, consistent with the soft alpha (see sapiens2_hf.data.synthetic.matting)
        return {"image": row["matting_image"], "alpha": row["alpha"], "foreground": row["foreground"]}
    raise ValueError(f"Unknown task {task!r}; synthetic records exist for {', '.join(_RECORD_TASKS)}.")


_RECORD_TASKS = ("pose", "seg", "normal", "pointmap", "albedo", "matting")
# Re-draws of a render that shows nobody (`sample_seed`'s `attempt`); one is needed about once in 1000 samples.
_MAX_ATTEMPTS = 10


class SyntheticRecords(Sequence):
    """`num_samples` synthetic records of `task`, rendered on first access (and cached).

    Record ``i`` renders ``sample_seed(seed, i)`` (see `sapiens2_hf.data.synthetic.dataset`), re-drawn with
    ``sample_seed(seed, i, attempt)`` in the rare case it shows nobody; pose renders hold one person
    (``num_people=1``), the dense tasks the generator's default mix of 1-4 people.

    Args:
        task (`str`): `pose`, `seg`, `normal`, `pointmap`, `albedo` or `matting`.
        num_samples (`int`): Dataset length.
        seed (`int`, *optional*, defaults to 0): Dataset seed.
        height, width (`int`, *optional*, defaults to 256 x 192): Rendered image size.
        cache (`bool`, *optional*, defaults to `True`): Keep rendered records in memory.
    """

    def __init__(self, task: str, num_samples: int, seed: int = 0, height: int = 256, width: int = 192,
                 cache: bool = True):
        if task not in _RECORD_TASKS:
            raise ValueError(f"Unknown task {task!r}; synthetic records exist for {', '.join(_RECORD_TASKS)}.")
        self.task, self.num_samples, self.seed = task, int(num_samples), int(seed)
        self.height, self.width = int(height), int(width)
        self.humans = SyntheticHumans(height=self.height, width=self.width, num_people=1 if task == "pose" else None)
        self._cache: dict[int, dict] | None = {} if cache else None

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        if self._cache is not None and index in self._cache:
            return self._cache[index]
        for attempt in range(_MAX_ATTEMPTS):
            row = sample_to_row(self.humans.sample(sample_seed(self.seed, index, attempt)), "all", index)
            if int(row["num_people"]) > 0 and row["mask"].any():
                break
        else:
            raise RuntimeError(f"Synthetic sample {index} (seed {self.seed}, {self.height}x{self.width}) rendered no "
                               f"visible person in {_MAX_ATTEMPTS} tries; use another seed or a larger image size.")
        record = synthetic_record(self.task, row)
        if self._cache is not None:
            self._cache[index] = record
        return record


def synthetic_records(task: str, num_samples: int, seed: int = 0, image_size: int = 256) -> SyntheticRecords:
    """Synthetic records with a portrait 4:3 frame whose longer side is `image_size` pixels."""
    return SyntheticRecords(task, num_samples, seed=seed, height=image_size, width=int(round(image_size * 3 / 4)))
