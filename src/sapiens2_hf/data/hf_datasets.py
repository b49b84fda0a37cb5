"""Hugging Face `datasets` as a fine-tuning source: loading (Hub id, local folder, `imagefolder`, `save_to_disk`
folder, the synthetic humans), column resolution, and lazy adapters that turn rows into the records the task
transforms read (the schema of the on-disk readers in `sapiens2_hf.data.pose` / `sapiens2_hf.data.dense`), so a
sample from a `datasets` row and from the same files on disk goes through the same transform and gives the same
tensors.

Per-row schema (column names are resolved from the flags, else from the candidates in `DEFAULT_COLUMNS`):

| task | columns |
|---|---|
| all | `image`: `Image` (or path / array) |
| seg | `label`: `Image` or `(H, W)` array of class ids 0-28, 255 = ignore |
| normal | `normal`: `(H, W, 3)` float camera-frame normals; optional `mask` |
| pointmap | `depth`: `(H, W)` metric Z, or `pointmap`: `(H, W, 3)` metric XYZ; `intrinsics`: `(3, 3)` pixel K; |
| | optional `mask` |
| albedo | `albedo`: `(H, W, 3)` float in [0, 1] or an 8-bit RGB `Image`; optional `mask` |
| matting | `alpha`: `(H, W)` float in [0, 1] or an 8-bit grey `Image`; optional `foreground` `(H, W, 3)` and `mask`; |
| | the image column prefers `matting_image` (the synthetic humans' anti-aliased render) over `image` |
| pose | `bboxes`: per person a box (`(N, 4)`, or `(4,)` for one person), COCO `[x, y, width, height]` |
| | (`--bbox_format xyxy` for corners); `keypoints`: per person COCO's flat `[x1, y1, v1, x2, ...]`, or `(K, 3)`, or |
| | `(K, 2)` with an optional `keypoint_visibility` `(N, K)` column (without one every point counts as visible); |
| | K = 308 (official), 344 (raw, teeth dropped) or 133 (COCO-WholeBody, mapped); optional per-person `area` and |
| | `iscrowd`, and `image_id` |

A mask (any non-zero = valid) is an `Image` or an array; without one it is derived from the target as on disk. Each
non-crowd person of a pose row becomes one sample (a top-down crop); persons failing `sapiens2_hf.data.validation`'s
checks are skipped and reported like on-disk records. The synthetic humans' schema (`task_features`) is read as is.

Rows are read in the numpy format and adapted one at a time on access (pose indexes its people from the box and
keypoint columns only). `record_transform` is the same adaptation for `Dataset.with_transform`, which training does
not use: its Python-object rows cost about 30x the numpy format for array columns (0.46 s against 0.014 s for one
256 x 192 normal row with its mask).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch.utils.data import Subset

from ..modeling.sapiens2_label_data import NUM_POSE_KEYPOINTS
from ..utils.extras import require
from .images import load_image
from .pose import TEETH_INDICES_344, coco_wholebody_to_308
from .tasks import RECORD_ROLES, data_task, is_top_down
from .validation import SkippedSample, validate_records


#: Column-name candidates per role, tried in order when no name is given (a task's target: `DataTaskSpec.target_columns`
#: of the data-layer registry, read at each use).
DEFAULT_COLUMNS = {
    "image": ("image", "pixel_values", "img"),
    "mask": ("mask",),
    "foreground": ("foreground",),
    "intrinsics": ("intrinsics", "camera_intrinsics", "K"),
    "keypoints": ("keypoints",),
    "bboxes": ("bboxes", "bbox", "boxes"),
    "keypoint_visibility": ("keypoint_visibility",),
    "area": ("area",),
    "iscrowd": ("iscrowd",),
    "image_id": ("image_id",),
}
# The record roles beside the image and a dense target (`DataTaskSpec.roles`, and a top-down task's `_PERSON_ROLES`):
# what the missing-column error calls each, and its flag.
_ROLE_FLAGS = {"mask": ("mask", "mask_column_name"), "intrinsics": ("camera intrinsics", "intrinsics_column_name"),
               "foreground": ("foreground", ""), "keypoints": ("keypoints", "keypoints_column_name"),
               "bboxes": ("person box", "bboxes_column_name"), "area": ("area", ""), "iscrowd": ("iscrowd", ""),
               "keypoint_visibility": ("keypoint visibility", "keypoint_visibility_column_name"),
               "image_id": ("image_id", "")}
# The columns of a top-down task's rows, each with whether a dataset must have it.
_PERSON_ROLES = {"keypoints": True, "bboxes": True, "keypoint_visibility": False, "area": False, "iscrowd": False,
                 "image_id": False}
_KEYPOINT_LAYOUTS = {NUM_POSE_KEYPOINTS: "sapiens308", 344: "sapiens344", 133: "coco_wholebody"}
BBOX_FORMATS = ("xywh", "xyxy")
SYNTHETIC = "synthetic"


# ------------------------------------------------------------------------------------------------------- loading
def is_saved_to_disk(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder written by `Dataset.save_to_disk` or `DatasetDict.save_to_disk`."""
    path = Path(path)
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file())


def load_dataset_dict(name: str | None, config_name: str | None = None, train_dir: str | None = None,
                      validation_dir: str | None = None, test_dir: str | None = None, cache_dir: str | None = None):
    """A `datasets.DatasetDict` from what `--dataset_name` names, detected in this order:

    * a `save_to_disk` folder (`is_saved_to_disk`): `load_from_disk`, a single saved `Dataset` as the `train` split;
    * `imagefolder` (or no name) with `train_dir` / `validation_dir` / `test_dir`, as transformers' example scripts
      (a `metadata.jsonl` beside the images adds columns; a `label_file_name` column becomes an `Image` `label`);
    * any other local folder (its builder inferred from its files) or a Hub id: `load_dataset(name, config_name)`.
    """
    datasets = require("datasets", feature="a Hugging Face dataset")

    folders = {"train": train_dir, "validation": validation_dir, "test": test_dir}
    folders = {split: folder for split, folder in folders.items() if folder is not None}
    if name is not None and is_saved_to_disk(name):
        loaded = datasets.load_from_disk(name)
        return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})
    if name in (None, "imagefolder"):
        if not folders:
            raise ValueError("--dataset_name imagefolder reads --train_dir (and --validation_dir / --test_dir): pass "
                             "at least one, or pass a folder or Hub id as --dataset_name.")
        data_files = {split: os.path.join(folder, "**") for split, folder in folders.items()}
        return datasets.load_dataset("imagefolder", data_files=data_files, cache_dir=cache_dir)
    if folders:
        raise ValueError(f"--train_dir / --validation_dir / --test_dir go with --dataset_name imagefolder, not with "
                         f"--dataset_name {name!r}.")
    return datasets.load_dataset(name, config_name, cache_dir=cache_dir)


def synthetic_dataset_dict(task: str, splits: dict[str, tuple[int, int]], height: int, width: int,
                           cache_dir: str | None = None):
    """The synthetic humans (`make_dataset`'s typed columns and seed rule) as a `DatasetDict`: `splits` maps a split
    name to `(num_samples, seed)`; empty splits are left out.

    Renders hold the task's `DataTaskSpec.synthetic_people`. A render that shows nobody (about 1 in 1000 at 64 x 48)
    is dropped: pose indexes no person in it, and the dense tasks drop rows with an empty `mask` (no valid pixel).
    """
    datasets = require("datasets", feature="a Hugging Face dataset")

    from .synthetic import make_dataset

    out = {}
    for split, (count, seed) in splits.items():
        if count <= 0:
            continue
        dataset = make_dataset(task, count, height=height, width=width, seed=seed,
                               num_people=data_task(task).synthetic_people, cache_dir=cache_dir, split=split)
        if "mask" in dataset.column_names:
            masks = dataset.select_columns(["mask"]).with_format("numpy")
            keep = [index for index, row in enumerate(masks) if row["mask"].any()]
            if len(keep) < len(dataset):
                dataset = dataset.select(keep)
        out[split] = dataset.with_format(None)
    return datasets.DatasetDict(out)


def take_validation_split(dataset_dict, eval_split: str, train_split: str, fraction: float, seed: int):
    """Split `fraction` of the training rows off as `eval_split` when the dataset has none (transformers'
    `--train_val_split`, seeded). Rows are whole images, so the people of one image never straddle the split."""
    if eval_split in dataset_dict or not fraction or train_split not in dataset_dict:
        return dataset_dict
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--train_val_split must be in (0, 1), got {fraction}.")
    split = dataset_dict[train_split].train_test_split(test_size=fraction, seed=seed)
    dataset_dict[train_split], dataset_dict[eval_split] = split["train"], split["test"]
    return dataset_dict


# ------------------------------------------------------------------------------------------------------ columns
@dataclass(frozen=True)
class ColumnNames:
    """The columns one task reads (see the module docstring); `None` where the role is unused or absent."""

    image: str
    label: str | None = None
    mask: str | None = None
    intrinsics: str | None = None
    foreground: str | None = None
    keypoints: str | None = None
    bboxes: str | None = None
    keypoint_visibility: str | None = None
    area: str | None = None
    iscrowd: str | None = None
    image_id: str | None = None
    bbox_format: str = "xywh"

    def used(self) -> list[str]:
        return [value for field in dataclasses.fields(self) if field.name != "bbox_format"
                and (value := getattr(self, field.name)) is not None]


def is_synthetic_schema(column_names: Sequence[str]) -> bool:
    """Rows of `sapiens2_hf.data.synthetic.make_dataset` (their boxes are corners, not COCO `xywh`)."""
    return {"sample_index", "num_people", "boxes"} <= set(column_names)


def _pick(role: str, given: str | None, candidates: Sequence[str], columns: Sequence[str], required: bool,
          flag: str) -> str | None:
    if given is not None:
        if given not in columns:
            raise ValueError(f"--{flag} {given!r} is not a column of the dataset; its columns are {list(columns)}.")
        return given
    for name in candidates:
        if name in columns:
            return name
    if required:
        raise ValueError(f"No {role} column found (tried {list(candidates)}); the dataset's columns are "
                         f"{list(columns)}. Name it with --{flag}.")
    return None


def resolve_columns(task: str, column_names: Sequence[str], image: str | None = None, label: str | None = None,
                    mask: str | None = None, intrinsics: str | None = None, keypoints: str | None = None,
                    bboxes: str | None = None, keypoint_visibility: str | None = None,
                    bbox_format: str | None = None) -> ColumnNames:
    """The columns `task` reads from a dataset with `column_names`: each given name is checked, each missing one is
    the first present candidate of `DEFAULT_COLUMNS`. `bbox_format` defaults to COCO `xywh`, or `xyxy` for the
    synthetic schema."""
    columns = list(column_names)
    spec = data_task(task)
    image_candidates = tuple(dict.fromkeys((spec.image_column, *DEFAULT_COLUMNS["image"])))
    names = {"image": _pick("image", image, image_candidates, columns, True, "image_column_name")}
    top_down = is_top_down(task)
    if not top_down and not spec.target_columns:
        raise ValueError(f"Fine-tuning from `datasets` has no column adapter for task {task!r} yet; add its target "
                         "columns to sapiens2_hf.data.tasks.DATA_TASKS (`target_columns`, `array_key`).")
    if not top_down:
        names["label"] = _pick(f"{task} target", label, spec.target_columns, columns, True, "label_column_name")
    given = {"mask": mask, "intrinsics": intrinsics, "keypoints": keypoints, "bboxes": bboxes,
             "keypoint_visibility": keypoint_visibility}
    for role, required in (_PERSON_ROLES if top_down else spec.roles).items():
        description, flag = _ROLE_FLAGS[role]
        names[role] = _pick(description, given.get(role), DEFAULT_COLUMNS[role], columns, required, flag)
    if not top_down:
        return ColumnNames(**names)
    if bbox_format is None:
        bbox_format = "xyxy" if is_synthetic_schema(columns) else "xywh"
    if bbox_format not in BBOX_FORMATS:
        raise ValueError(f"--bbox_format must be one of {BBOX_FORMATS}, got {bbox_format!r}.")
    return ColumnNames(**names, bbox_format=bbox_format)


# ------------------------------------------------------------------------------------------------------ adapters
def _array(value, dtype=None) -> np.ndarray:
    """A column value as one numpy array (variable-length nested lists come as object arrays of arrays)."""
    array = np.asarray(value)
    if array.dtype == object:
        array = np.stack([_array(item) for item in array]) if len(array) else np.zeros((0,))
    return array.astype(dtype, copy=False) if dtype is not None else array


def _decoded(value):
    """An `Image` cell read with `decode=False` decoded by the house's decoder (`load_image`, as a file on disk); any
    other value (path, array) is left to the transform."""
    return load_image(value) if isinstance(value, dict) else value


def _numpy_rows(dataset, columns: ColumnNames, only: Sequence[str] | None = None):
    """`dataset` restricted to the used columns in the numpy format, with its image column left undecoded."""
    import datasets

    names = list(only) if only is not None else columns.used()
    dataset = dataset.select_columns(names)
    if columns.image in names and isinstance(dataset.features[columns.image], datasets.Image):
        dataset = dataset.cast_column(columns.image, datasets.Image(decode=False))
    return dataset.with_format("numpy")


def dense_record(task: str, row: dict, columns: ColumnNames) -> dict:
    """The task-transform record of one dense row (keys as the on-disk readers give them; the target's key is the
    task's `DataTaskSpec.array_key`, the other roles' `RECORD_ROLES`)."""
    record = {"image": _decoded(row[columns.image])}
    target = _array(row[columns.label])
    key = data_task(task).array_key
    if not isinstance(key, str):  # picked by the number of dimensions
        if target.ndim not in key:
            expected = " or ".join(f"{ndim} dimensions ({name})" for ndim, name in sorted(key.items()))
            raise ValueError(f"The {task} target column {columns.label!r} must hold {expected}, got shape "
                             f"{target.shape}.")
        key = key[target.ndim]
    record[key] = target
    if columns.intrinsics is not None:  # required: `resolve_columns` found the column
        record[RECORD_ROLES["intrinsics"]] = _array(row[columns.intrinsics], np.float64).reshape(3, 3)
    for role in ("mask", "foreground"):
        name = getattr(columns, role)
        if name is not None and row.get(name) is not None:
            record[RECORD_ROLES[role]] = _array(row[name])
    return record


def _keypoints_to_308(keypoints: np.ndarray, layout: str) -> np.ndarray:
    if layout == "file":  # the model's own keypoint set: the data's keypoints as they are
        return keypoints
    count = keypoints.shape[1]
    detected = _KEYPOINT_LAYOUTS.get(count)
    if layout == "auto":
        layout = detected
    if layout is None or detected != layout:
        raise ValueError(f"Keypoints have {count} points per person, which is not the {layout or 'any known'} layout; "
                         "use 308 (official order), 344 (raw, teeth dropped) or 133 (COCO-WholeBody) with "
                         "--keypoint_layout auto / sapiens308 / sapiens344 / coco_wholebody.")
    if layout == "sapiens344":
        return np.delete(keypoints, TEETH_INDICES_344, axis=1)
    if layout == "coco_wholebody":
        return coco_wholebody_to_308(keypoints)
    return keypoints


def pose_people(row: dict, columns: ColumnNames, keypoint_layout: str = "auto",
                num_keypoints: int | None = None) -> list[dict]:
    """The people of one pose row, each `{bbox (4,) COCO xywh, keypoints (K, 3), area, iscrowd}` (no image): K = 308
    (mapped to the official layout), or with `keypoint_layout="file"` the data's own `num_keypoints` (a model of
    another keypoint set), given per person as K x 3 or K x 2 numbers."""
    boxes = _array(row[columns.bboxes], np.float64)
    if boxes.size == 0:
        return []
    if boxes.shape[-1] != 4:
        raise ValueError(f"Column {columns.bboxes!r} must hold 4 numbers per person, got shape {boxes.shape}.")
    boxes = boxes.reshape(-1, 4)
    if columns.bbox_format == "xyxy":
        boxes = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
    count = len(boxes)
    flat = _array(row[columns.keypoints], np.float32).reshape(count, -1)
    per_person = flat.shape[1]
    counts = _KEYPOINT_LAYOUTS if keypoint_layout != "file" else (num_keypoints,)
    channels = next((c for c in (3, 2) if per_person % c == 0 and per_person // c in counts), None)
    if channels is None and keypoint_layout == "file":
        raise ValueError(f"Column {columns.keypoints!r} holds {per_person} numbers per person for {count} box(es), "
                         f"not {num_keypoints} keypoints x 3 (x, y, visibility) or x 2: the model's keypoint set has "
                         f"{num_keypoints} keypoints (--keypoint_set).")
    if channels is None:
        raise ValueError(f"Column {columns.keypoints!r} holds {per_person} numbers per person for {count} box(es); "
                         f"expected K x 3 (x, y, visibility) or K x 2 with K in {sorted(_KEYPOINT_LAYOUTS)}.")
    keypoints = flat.reshape(count, per_person // channels, channels)
    if channels == 2:
        visibility = np.full(keypoints.shape[:2], 2.0, np.float32)
        if columns.keypoint_visibility is not None:
            visibility = _array(row[columns.keypoint_visibility], np.float32).reshape(keypoints.shape[:2])
        keypoints = np.concatenate([keypoints, visibility[..., None]], axis=-1)
    keypoints = _keypoints_to_308(keypoints, keypoint_layout)
    area = boxes[:, 2] * boxes[:, 3]
    if columns.area is not None:
        area = _array(row[columns.area], np.float64).reshape(count)
    iscrowd = np.zeros(count, np.int64)
    if columns.iscrowd is not None:
        iscrowd = _array(row[columns.iscrowd], np.int64).reshape(count)
    return [{"bbox": boxes[p].astype(np.float32), "keypoints": keypoints[p].astype(np.float32),
             "area": float(area[p]), "iscrowd": int(iscrowd[p])} for p in range(count)]


class DenseRecords(Sequence):
    """Dense-task records of a `datasets.Dataset`, one per row, adapted when accessed (`dense_record`)."""

    def __init__(self, dataset, task: str, columns: ColumnNames):
        self.task, self.columns = task, columns
        self.rows = _numpy_rows(dataset, columns)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < len(self):
            raise IndexError(index)
        return dense_record(self.task, self.rows[int(index)], self.columns)


class PoseRecords(Sequence):
    """One record per person of a pose `datasets.Dataset`, its image read from the row when accessed; `people` holds
    per person its `row`, the fields of `pose_people`, `image_id` and `instance_id`."""

    def __init__(self, dataset, columns: ColumnNames, people: list[dict]):
        self.columns, self.people = columns, people
        self.images = _numpy_rows(dataset, columns, only=[columns.image])

    def __len__(self) -> int:
        return len(self.people)

    def __getitem__(self, index: int) -> dict:
        person = self.people[int(index)]
        record = {key: value for key, value in person.items() if key != "row"}
        record["image"] = _decoded(self.images[person["row"]][self.columns.image])
        return record


def subsample(records: Sequence, max_samples: int | None, seed: int) -> Sequence:
    """At most `max_samples` records, a seeded random subset in their original order (transformers'
    `--max_train_samples` / `--max_eval_samples`; for pose the samples are people)."""
    if max_samples is None or max_samples >= len(records):
        return records
    if max_samples <= 0:
        raise ValueError(f"--max_*_samples must be positive, got {max_samples}.")
    chosen = np.sort(np.random.default_rng(seed).permutation(len(records))[:max_samples])
    return Subset(records, chosen.tolist())


def task_records(dataset, task: str, columns: ColumnNames, keypoint_layout: str = "auto", strict: bool = False,
                 split: str = "train", num_keypoints: int | None = None) -> tuple[Sequence[dict], list[SkippedSample]]:
    """The task-transform records of one split of a `datasets.Dataset`, and the skipped ones.

    Dense tasks: one record per row (no up-front check: `datasets` wrote the rows' arrays). Pose: the people of every
    row, indexed up front from the box and keypoint columns alone, crowd people left out, the others checked as
    on-disk records (`validate_records`, `strict`); a skipped entry's `index` is its person, its `file` names the row.
    """
    if not is_top_down(task):
        return DenseRecords(dataset, task, columns), []
    people = []
    light = [name for name in columns.used() if name != columns.image]
    for row_index, row in enumerate(_numpy_rows(dataset, columns, only=light)):
        image_id = int(row[columns.image_id]) if columns.image_id is not None else row_index
        for person in pose_people(row, columns, keypoint_layout, num_keypoints):
            if person["iscrowd"]:
                continue
            # `image` stands in for the not yet decoded picture (the checks need one, and a non-path skips file checks)
            people.append({"row": row_index, "image": row_index, **person, "image_id": image_id,
                           "instance_id": len(people)})
    kept, skipped = validate_records(people, task, strict=strict, split=split)
    skipped = [dataclasses.replace(entry, file=f"{split} row {people[entry.index]['row']}") for entry in skipped]
    for person in kept:
        del person["image"]
    return PoseRecords(dataset, columns, kept), skipped


def record_transform(task: str, columns: ColumnNames) -> Callable[[dict], dict]:
    """`DenseRecords`' row-to-record adaptation of a dense task as a batch function for `Dataset.with_transform`, for
    use outside `finetune.py` (the module docstring says why training reads the numpy format instead)."""
    if is_top_down(task):
        raise ValueError(f"{task} rows hold several people (one record each); use task_records, which indexes them.")
    def transform(batch: dict) -> dict:
        names = list(batch)
        rows = [dict(zip(names, values)) for values in zip(*(batch[name] for name in names))]
        records = [dense_record(task, row, columns) for row in rows]
        return {key: [record.get(key) for record in records] for key in records[0]} if records else {}

    return transform
