"""The procedural synthetic humans (`sapiens2_hf.data.synthetic`) as a first-class fine-tuning source: records in
the schema of each task transform, rendered lazily and deterministically from `(seed, index)`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .synthetic import render_sample


def synthetic_record(task: str, sample: dict, index: int) -> dict:
    """Convert one `render_sample` output into a task record (for pose: its first person)."""
    if task == "pose":
        x0, y0, x1, y1 = (float(v) for v in sample["boxes"][0])
        keypoints = np.concatenate([sample["keypoints"][0], sample["keypoint_visibility"][0, :, None]], axis=1)
        return {"image": sample["image"], "bbox": np.array([x0, y0, x1 - x0, y1 - y0], np.float32),
                "keypoints": keypoints.astype(np.float32), "area": float((sample["instance_map"] == 1).sum()),
                "image_id": index, "instance_id": index}
    mask = sample["mask"].astype(np.uint8)
    if task == "seg":
        return {"image": sample["image"], "label": sample["segmentation"].astype(np.uint8)}
    if task == "normal":
        return {"image": sample["image"], "normal": sample["normals"], "mask": mask}
    if task == "pointmap":
        return {"image": sample["image"], "depth": sample["depth"], "K": sample["camera_intrinsics"], "mask": mask}
    if task == "albedo":
        return {"image": sample["image"], "albedo": sample["albedo"], "mask": mask}
    raise ValueError(f"Unknown task {task!r}.")


class SyntheticRecords(Sequence):
    """`num_samples` synthetic records of `task`; record `i` is rendered from the seed `(seed, i)` (pose samples
    hold one person) and cached after the first access.

    Args:
        task (`str`): `pose`, `seg`, `normal`, `pointmap` or `albedo`.
        num_samples (`int`): Dataset length.
        seed (`int`, *optional*, defaults to 0): Dataset seed.
        height, width (`int`, *optional*, defaults to 256 x 192): Rendered image size.
        cache (`bool`, *optional*, defaults to `True`): Keep rendered records in memory.
    """

    def __init__(self, task: str, num_samples: int, seed: int = 0, height: int = 256, width: int = 192,
                 cache: bool = True):
        self.task, self.num_samples, self.seed = task, int(num_samples), int(seed)
        self.height, self.width = int(height), int(width)
        self._cache: dict[int, dict] | None = {} if cache else None

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        if self._cache is not None and index in self._cache:
            return self._cache[index]
        num_people = 1 if self.task == "pose" else None
        for attempt in range(10):
            sample = render_sample((self.seed, index, attempt), self.height, self.width, num_people=num_people)
            if sample["num_people"] > 0 and sample["mask"].any():
                break
        else:
            raise RuntimeError(f"Synthetic sample {index} (seed {self.seed}) rendered no visible person in 10 tries.")
        record = synthetic_record(self.task, sample, index)
        if self._cache is not None:
            self._cache[index] = record
        return record


def synthetic_records(task: str, num_samples: int, seed: int = 0, image_size: int = 256) -> SyntheticRecords:
    """Synthetic records with a portrait 4:3 frame whose longer side is `image_size` pixels."""
    return SyntheticRecords(task, num_samples, seed=seed, height=image_size, width=int(round(image_size * 3 / 4)))
