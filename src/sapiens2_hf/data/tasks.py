"""The data-layer task registry: per task, the record the task transform reads and how each fine-tuning source (the
synthetic humans, a `datasets` dataset, the on-disk folders) fills it.

Keyed by the layer-0 task names (tests/test_task_registry.py asserts the key sets are equal). Every per-task table of
the data sources (synthetic schema and records, `datasets` columns and adapters, folder reader, up-front file checks)
is derived from `DATA_TASKS`, so a dense task is one entry here (docs/ARCHITECTURE.md). What stays structural is the
top-down branch (one record per person), taken for the tasks whose layer-0 `TaskSpec.top_down` is true.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..modeling.sapiens2_tasks import OFFICIAL_TASK_NAMES, TASK_SPECS

#: The record fields a task may read beside `image` and its target, with the `datasets` column that fills each
#: (candidates in `hf_datasets.DEFAULT_COLUMNS[role]`): valid pixels, pixel intrinsics, the matting foreground.
RECORD_ROLES = {"mask": "mask", "intrinsics": "K", "foreground": "foreground"}


@dataclass(frozen=True)
class DataTaskSpec:
    """What the data layer knows of one task.

    Attributes:
        synthetic_columns (`tuple[str, ...]`): the task's label columns in the synthetic schema
            (`sapiens2_hf.data.synthetic.task_features`; the task's rows hold `image` and these).
        synthetic_record (`Mapping[str, str]` or `Callable[[dict], dict]`): how a typed `"all"` synthetic row
            becomes the task-transform record: record key -> synthetic column (a `mask` cast to uint8), or a function
            of the row where the record is not a renaming (pose: the first person's box and keypoints).
        image_column (`str`): the synthetic render that is the task's input image, also tried first among the image
            columns of a `datasets` source (matting: `matting_image`, the anti-aliased render its alpha describes).
        synthetic_people (`int` or `None`): people per synthetic render; `None` for the generator's mix (1-4), 1 for
            pose, whose synthetic record is the render's one person.
        target_columns (`tuple[str, ...]`): `datasets` column candidates of the target, tried in order (dense tasks).
        array_key (`str`, `Mapping[int, str]` or `None`): the record key of a target array read from `datasets`; a
            mapping picks it by the array's number of dimensions (pointmap: 2 `depth`, 3 `pointmap`).
        roles (`Mapping[str, bool]`): further record fields (`RECORD_ROLES`) the task reads, each with whether a
            `datasets` source must have its column. A task with `mask` also reads masks from `--train_masks` folders.
        file_key, file_suffixes: the record key of the on-disk target file (`read_dense_folder`; a field the up-front
            checks open) and its suffixes, tried in order for each image stem.
    """

    synthetic_columns: tuple[str, ...] = ()
    synthetic_record: Mapping[str, str] | Callable[[dict], dict] = field(default_factory=dict)
    image_column: str = "image"
    synthetic_people: int | None = None
    target_columns: tuple[str, ...] = ()
    array_key: str | Mapping[int, str] | None = None
    roles: Mapping[str, bool] = field(default_factory=dict)
    file_key: str | None = None
    file_suffixes: tuple[str, ...] = ()

    @classmethod
    def dense_map(cls, task: str) -> "DataTaskSpec":
        """The default of a registered dense-map task: its target is the `datasets` column named after the task (a
        `.npy` file of that name on disk), under the record key of that name, with an optional person `mask`; no
        synthetic columns."""
        return cls(target_columns=(task,), array_key=task, roles={"mask": False}, file_key=task,
                   file_suffixes=(".npy",))


def _pose_record(row: dict) -> dict:
    """The first person of a synthetic row: `bbox` COCO `(x, y, w, h)`, `keypoints` `(308, 3)` as `(x, y,
    visibility)`, `area` its visible pixels."""
    index = int(row["sample_index"])
    x0, y0, x1, y1 = (float(v) for v in row["boxes"][0])
    keypoints = np.concatenate([row["keypoints"][0], row["keypoint_visibility"][0, :, None]], axis=1)
    return {"image": row["image"], "bbox": np.array([x0, y0, x1 - x0, y1 - y0], np.float32),
            "keypoints": keypoints.astype(np.float32), "area": float((row["instance_map"] == 1).sum()),
            "image_id": index, "instance_id": index}


DATA_TASKS: dict[str, DataTaskSpec] = {
    "pose": DataTaskSpec(
        synthetic_columns=("boxes", "keypoints", "keypoint_visibility", "camera_intrinsics", "num_people"),
        synthetic_record=_pose_record, synthetic_people=1,
    ),
    "seg": DataTaskSpec(
        synthetic_columns=("segmentation",), synthetic_record={"label": "segmentation"},
        target_columns=("label", "segmentation", "annotation", "semantic_map"), array_key="label",
        file_key="label", file_suffixes=(".png",),
    ),
    "normal": DataTaskSpec(
        synthetic_columns=("normals", "mask"), synthetic_record={"normal": "normals", "mask": "mask"},
        target_columns=("normal", "normals", "label"), array_key="normal", roles={"mask": False},
        file_key="normal", file_suffixes=(".npy",),
    ),
    "pointmap": DataTaskSpec(
        synthetic_columns=("pointmap", "depth", "mask", "camera_intrinsics"),
        synthetic_record={"depth": "depth", "K": "camera_intrinsics", "mask": "mask"},
        target_columns=("depth", "pointmap", "label"), array_key={2: "depth", 3: "pointmap"},
        roles={"mask": False, "intrinsics": True}, file_key="pointmap_file", file_suffixes=(".npz",),
    ),
    "albedo": DataTaskSpec(
        synthetic_columns=("albedo", "mask"), synthetic_record={"albedo": "albedo", "mask": "mask"},
        target_columns=("albedo", "label"), array_key="albedo", roles={"mask": False},
        file_key="albedo", file_suffixes=(".npy", ".png"),
    ),
    "matting": DataTaskSpec(
        synthetic_columns=("alpha", "foreground"), synthetic_record={"alpha": "alpha", "foreground": "foreground"},
        image_column="matting_image",
        target_columns=("alpha", "matte", "label"), array_key="alpha", roles={"mask": False, "foreground": False},
        file_key="alpha", file_suffixes=(".png", ".npy"),
    ),
}

_missing = [name for name in OFFICIAL_TASK_NAMES if name not in DATA_TASKS]
if _missing:  # fail at import, naming the fix, rather than deep inside a training run
    raise ImportError(f"The data-layer registry has no entry for task(s) {_missing}: add them to "
                      "sapiens2_hf.data.tasks.DATA_TASKS.")


def data_task(task: str) -> DataTaskSpec:
    """The data registry entry of `task`, or a ValueError naming the known tasks (or, for a task registered without
    one, the fix)."""
    if task not in DATA_TASKS:
        if task in TASK_SPECS:
            raise ValueError(f"Task {task!r} has no data entry: pass `data=DataTaskSpec(...)` to "
                             "sapiens2_hf.register_task to train it from files or `datasets`.")
        raise ValueError(f"Unknown task {task!r}; choose one of {tuple(DATA_TASKS)}.")
    return DATA_TASKS[task]


def is_top_down(task: str) -> bool:
    """Whether `task` trains on one record per person (layer-0 `TaskSpec.top_down`; False for unknown names)."""
    spec = TASK_SPECS.get(task)
    return spec is not None and spec.top_down


def synthetic_record(task: str, row: dict) -> dict:
    """The task-transform record of one typed synthetic row (`"all"` columns), by `DataTaskSpec.synthetic_record`."""
    spec = data_task(task)
    if callable(spec.synthetic_record):
        return spec.synthetic_record(row)
    record = {"image": row[spec.image_column]}
    for key, column in spec.synthetic_record.items():
        record[key] = row[column].astype(np.uint8) if key == "mask" else row[column]
    return record
