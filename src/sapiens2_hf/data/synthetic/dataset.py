"""The one schema of synthetic data (typed columns per task, `task_features`) and the one seed rule (`sample_seed`),
plus the `datasets.Dataset` / `IterableDataset` builder over them.

Every synthetic source follows the seed rule (`sample_seed`): `make_dataset`, `write_dataset` and the fine-tuning
records (`sapiens2_hf.data.synthetic_source.SyntheticRecords`, a thin consumer of the rows below).
"""

from __future__ import annotations

import numpy as np

from ...modeling.sapiens2_tasks import PRETRAIN_TASK
from ...utils.extras import require
from ..tasks import DATA_TASKS
from .generator import SyntheticHumans

GENERATOR_VERSION = "2"  # 2: the matting columns (alpha, foreground, matting_image)
"""Bumped whenever the renderer's output for a given seed changes (part of the datasets cache fingerprint)."""

# Each task's label columns and the render its ``image`` column holds come from the data-layer registry
# (`DataTaskSpec.synthetic_columns`, `DataTaskSpec.image_column`): the plain render, except for matting, whose soft
# alpha describes the render with anti-aliased person edges (``matting_image``, see `.matting`).
_IMAGE_SOURCE = {name: spec.image_column for name, spec in DATA_TASKS.items()}
_TASK_COLUMNS = {name: ("image", *spec.synthetic_columns) for name, spec in DATA_TASKS.items()}
_TASK_COLUMNS[PRETRAIN_TASK] = ("image",)
_TASK_COLUMNS["all"] = tuple(dict.fromkeys(
    sum((list(c) for c in _TASK_COLUMNS.values()), []) + ["instance_map", "keypoints_3d", "matting_image"]))

#: The registry tasks, then ``"pretrain"`` (images only) and ``"all"`` (every column).
TASKS = tuple(_TASK_COLUMNS)


def sample_seed(seed: int, index: int, attempt: int = 0) -> tuple[int, ...]:
    """The render seed of sample ``index`` of a synthetic dataset built with ``seed``: ``(seed, index)``.

    The sample is ``SyntheticHumans(...).sample(sample_seed(seed, index))`` whatever the dataset length, task, shard
    or worker. A render can show nobody (about 1 in 1000 at 64 x 48: the only person falls outside the image);
    `make_dataset` and `write_dataset` keep such rows (``num_people == 0``), a source that needs a person (the
    fine-tuning records) re-draws with the seeds ``(seed, index, attempt)``, ``attempt = 1, 2, ...``. (numpy pads seed
    entropy with zeros, so ``(seed, index, 0)`` is the same seed as ``(seed, index)``.)
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}.")
    return (int(seed), int(index)) if attempt == 0 else (int(seed), int(index), int(attempt))


def task_features(task: str, height: int, width: int):
    """The `datasets.Features` of a task's rows: ``sample_index`` (int64; row ``i`` renders ``sample_seed(seed, i)``)
    and the task's `render_sample` columns (per task: docs/synthetic_data.md, "Datasets"; types: `_column_features`),
    with ``image`` holding ``matting_image`` for ``"matting"``. Person arrays have one row per person (``None`` axis).
    Integer maps are stored as uint8; the numpy format `make_dataset` applies returns them as int64, ready for losses.
    """
    datasets = require("datasets", feature="a Hugging Face dataset")

    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
    columns = {"sample_index": datasets.Value("int64")}
    spec = _column_features(datasets, int(height), int(width))
    columns.update({name: spec[name] for name in _TASK_COLUMNS[task]})
    return datasets.Features(columns)


def _column_features(datasets, h, w) -> dict:
    """The feature of every column a task can have (`task_features`'s table)."""
    return {
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
        "matting_image": datasets.Image(),
        "alpha": datasets.Array2D((h, w), "float32"),
        "foreground": datasets.Array3D((h, w, 3), "float32"),
    }


def sample_to_row(sample: dict, task: str, index: int) -> dict:
    """Select and cast the columns of ``task`` from a `render_sample` dict (see `task_features`)."""
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
    row = {"sample_index": int(index)}
    for name in _TASK_COLUMNS[task]:
        value = sample[_IMAGE_SOURCE.get(task, "image")] if name == "image" else sample[name]
        if name in ("segmentation", "instance_map"):
            value = value.astype(np.uint8)
        row[name] = value
    return row


def _generate(shards, seed, task, config, version):
    cfg = SyntheticHumans(**config)
    for start, stop in shards:
        for index in range(start, stop):
            yield sample_to_row(cfg.sample(sample_seed(seed, index)), task, index)


def make_dataset(task: str, num_samples: int, height: int = 256, width: int = 192, seed: int = 0,
                 streaming: bool = False, num_people=None, samples_per_shard: int = 64, cache_dir=None,
                 split: str = "train", **config):
    """A Hugging Face dataset of synthetic humans for one task, formatted as numpy.

    ``task`` is one of `TASKS` (``"pretrain"``: images only; columns: `task_features`); row ``i`` renders
    ``sample_seed(seed, i)``. ``streaming=True`` returns an `IterableDataset` that renders on the fly, sharded in
    blocks of ``samples_per_shard`` so that DataLoader workers split the work; otherwise a materialised `Dataset`
    (Arrow cache in ``cache_dir``). ``split`` names the split (what `datasets` logs while generating it);
    ``num_people`` and ``**config`` are `SyntheticHumans` fields. Returned ``.with_format("numpy")`` (call
    ``.with_format("torch")`` for tensors).
    """
    datasets = require("datasets", feature="a Hugging Face dataset")

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
        ds = datasets.IterableDataset.from_generator(_generate, features=features, gen_kwargs=gen_kwargs,
                                                     split=datasets.NamedSplit(split))
    else:
        ds = datasets.Dataset.from_generator(_generate, features=features, gen_kwargs=gen_kwargs, cache_dir=cache_dir,
                                             split=datasets.NamedSplit(split))
    return ds.with_format("numpy")
