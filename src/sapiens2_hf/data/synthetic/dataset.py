"""`datasets.Dataset` / `IterableDataset` builders over the synthetic generator, one documented schema per task.

Sample ``i`` of a dataset with seed ``s`` is ``render_sample((s, i), height, width, ...)``: it does not depend on
the number of samples, the shard or the worker that produces it.
"""

from __future__ import annotations

import numpy as np

from .generator import SyntheticHumans

TASKS = ("pose", "seg", "normal", "pointmap", "albedo", "pretrain", "all")

GENERATOR_VERSION = "1"
"""Bumped whenever the renderer's output for a given seed changes (part of the datasets cache fingerprint)."""

_TASK_COLUMNS = {
    "pretrain": ("image",),
    "pose": ("image", "boxes", "keypoints", "keypoint_visibility", "camera_intrinsics", "num_people"),
    "seg": ("image", "segmentation"),
    "normal": ("image", "normals", "mask"),
    "pointmap": ("image", "pointmap", "depth", "mask", "camera_intrinsics"),
    "albedo": ("image", "albedo", "mask"),
}
_TASK_COLUMNS["all"] = tuple(dict.fromkeys(
    sum((list(c) for c in _TASK_COLUMNS.values()), []) + ["instance_map", "keypoints_3d"]))


def task_features(task: str, height: int, width: int):
    """The `datasets.Features` of a task's rows.

    | column | feature | content |
    |---|---|---|
    | ``image`` | `Image` | RGB uint8 `(height, width, 3)` (numpy format) |
    | ``sample_index`` | int64 | index ``i`` (the sample is ``render_sample((seed, i), ...)``) |
    | ``boxes`` | `Array2D((None, 4), float32)` | per person ``(x_min, y_min, x_max, y_max)``, pixel edges |
    | ``keypoints`` | `Array3D((None, 308, 2), float32)` | per person ``(x, y)``, pixel centres at integers |
    | ``keypoint_visibility`` | `Array2D((None, 308), uint8)` | 2 visible, 1 occluded in image, 0 absent |
    | ``keypoints_3d`` | `Array3D((None, 308, 3), float32)` | camera-frame metres ("all" only) |
    | ``num_people`` | int32 | number of people (rows of the arrays above) |
    | ``camera_intrinsics`` | `Array2D((3, 3), float32)` | pixel K |
    | ``segmentation`` | `Array2D((H, W), uint8)` | seg29 class ids |
    | ``instance_map`` | `Array2D((H, W), uint8)` | 0 background, ``i + 1`` person ``i`` ("all" only) |
    | ``normals`` | `Array3D((H, W, 3), float32)` | unit, camera frame, towards the camera; 0 on background |
    | ``pointmap`` | `Array3D((H, W, 3), float32)` | camera-frame XYZ metres; 0 on background |
    | ``depth`` | `Array2D((H, W), float32)` | Z metres; 0 on background |
    | ``albedo`` | `Array3D((H, W, 3), float32)` | [0, 1]; 0 on background |
    | ``mask`` | `Array2D((H, W), bool)` | foreground = valid pixels of the dense maps |

    Integer columns are stored compactly (uint8) but the numpy formatter that `make_dataset` applies returns them as
    int64 (``segmentation``, ``instance_map``, ``keypoint_visibility``), ready for losses.
    """
    import datasets

    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
    h, w = int(height), int(width)
    spec = {
        "image": datasets.Image(),
        "boxes": datasets.Array2D((None, 4), "float32"),
        "keypoints": datasets.Array3D((None, 308, 2), "float32"),
        "keypoint_visibility": datasets.Array2D((None, 308), "uint8"),
        "keypoints_3d": datasets.Array3D((None, 308, 3), "float32"),
        "num_people": datasets.Value("int32"),
        "camera_intrinsics": datasets.Array2D((3, 3), "float32"),
        "segmentation": datasets.Array2D((h, w), "uint8"),
        "instance_map": datasets.Array2D((h, w), "uint8"),
        "normals": datasets.Array3D((h, w, 3), "float32"),
        "pointmap": datasets.Array3D((h, w, 3), "float32"),
        "depth": datasets.Array2D((h, w), "float32"),
        "albedo": datasets.Array3D((h, w, 3), "float32"),
        "mask": datasets.Array2D((h, w), "bool"),
    }
    columns = {"sample_index": datasets.Value("int64")}
    columns.update({name: spec[name] for name in _TASK_COLUMNS[task]})
    return datasets.Features(columns)


def sample_to_row(sample: dict, task: str, index: int) -> dict:
    """Select and cast the columns of ``task`` from a `render_sample` dict (see `task_features`)."""
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
    row = {"sample_index": int(index)}
    for name in _TASK_COLUMNS[task]:
        value = sample[name]
        if name in ("segmentation", "instance_map"):
            value = value.astype(np.uint8)
        row[name] = value
    return row


def _generate(shards, seed, task, config, version):
    cfg = SyntheticHumans(**config)
    for start, stop in shards:
        for index in range(start, stop):
            yield sample_to_row(cfg.sample((seed, index)), task, index)


def make_dataset(task: str, num_samples: int, height: int = 256, width: int = 192, seed: int = 0,
                 streaming: bool = False, num_people=None, samples_per_shard: int = 64, cache_dir=None, **config):
    """A Hugging Face dataset of synthetic humans for one task, formatted as numpy.

    Args:
        task (`str`): ``"pose"``, ``"seg"``, ``"normal"``, ``"pointmap"``, ``"albedo"``, ``"pretrain"`` (images
            only) or ``"all"``; columns in `task_features`.
        num_samples (`int`): number of rows.
        height, width (`int`): image size in pixels.
        seed (`int`): dataset seed; row ``i`` is ``render_sample((seed, i), height, width, num_people, **config)``.
        streaming (`bool`): return an `IterableDataset` that renders on the fly (sharded in blocks of
            ``samples_per_shard`` so that DataLoader workers split the work), instead of a materialised `Dataset`.
        num_people: see `SyntheticHumans`.
        cache_dir: where `datasets` writes the Arrow cache of a materialised dataset.
        **config: other `SyntheticHumans` fields (``fov_deg``, ``noise_std`` ...).

    Returns:
        `datasets.Dataset` or `datasets.IterableDataset` with ``.with_format("numpy")`` applied (call
        ``.with_format("torch")`` for tensors).
    """
    import datasets

    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
    if int(num_samples) < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
    cfg = SyntheticHumans(height=height, width=width, num_people=num_people, **config)
    step = max(1, int(samples_per_shard))
    shards = [(start, min(start + step, int(num_samples))) for start in range(0, int(num_samples), step)]
    gen_kwargs = {"shards": shards, "seed": int(seed), "task": task, "config": cfg.to_dict(),
                  "version": GENERATOR_VERSION}
    features = task_features(task, height, width)
    if streaming:
        ds = datasets.IterableDataset.from_generator(_generate, features=features, gen_kwargs=gen_kwargs)
    else:
        ds = datasets.Dataset.from_generator(_generate, features=features, gen_kwargs=gen_kwargs, cache_dir=cache_dir)
    return ds.with_format("numpy")
