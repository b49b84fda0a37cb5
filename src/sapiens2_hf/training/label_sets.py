"""The labels a fine-tuning run trains: for pose, the keypoint set (`data.keypoint_sets`) that the data, the model's
head, the transform's flips, the flip test and the metrics all follow.

`requested_keypoint_set` reads it before the model is built (the model's head has one channel per keypoint):
`--keypoint_set` names it, or `auto` reads it from the data: a COCO file's person category, else the keypoint count of
the first `datasets` row (a known count picks its preset). Data in the official layouts (308, the raw 344, COCO-
WholeBody mapped into 308 with `--keypoint_layout`) keeps training the official 308 set.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path

import numpy as np

from ..data.keypoint_sets import KEYPOINT_SET_PRESETS, KeypointSet, derive_flip_pairs, keypoint_set
from ..data.pose import load_coco_keypoint_file
from ..modeling.sapiens2_label_data import SEGMENTATION_CLASS_NAMES

logger = logging.getLogger(__name__)

OFFICIAL_SET = "sapiens308"
# keypoint counts of the layouts the data readers map into the official 308 (`--keypoint_layout`)
_OFFICIAL_COUNTS = (308, 344, 133)
# a count that picks a preset when the data names no keypoints
_PRESET_BY_COUNT = {len(s): name for name, s in KEYPOINT_SET_PRESETS.items() if len(s) not in _OFFICIAL_COUNTS}


def is_official(kset: KeypointSet | None) -> bool:
    return kset is None or kset.names == KEYPOINT_SET_PRESETS[OFFICIAL_SET].names


def _set_for_count(count: int, where: str) -> KeypointSet:
    if count in _OFFICIAL_COUNTS:
        return KEYPOINT_SET_PRESETS[OFFICIAL_SET]
    if count in _PRESET_BY_COUNT:
        name = _PRESET_BY_COUNT[count]
        logger.warning("%s has %d keypoints per person and names none: training the %s set (its names, flip pairs, "
                       "skeleton and sigmas). Pass --keypoint_set (a preset or a layout file) if they are others.",
                       where, count, name)
        return KEYPOINT_SET_PRESETS[name]
    logger.warning("%s has %d keypoints per person and names none: they are named keypoint_0 ... keypoint_%d, with no "
                   "flip pairs (so no flip augmentation) and no skeleton. Pass --keypoint_set with a layout file to "
                   "name them.", where, count, count - 1)
    return KeypointSet.build(f"{count} keypoints", [f"keypoint_{i}" for i in range(count)], flip_pairs=())


def _coco_file_set(path: Path, named: KeypointSet | None = None, source: str | None = None) -> KeypointSet:
    """The set a COCO file trains (`named`: the one `--keypoint_set` gave), checked against every annotation's
    keypoint count, so that a file whose people do not have the set's keypoints is refused before the model is built
    (not with an index error mid-training). `source` says where `named` came from (default: `--keypoint_set`)."""
    data = load_coco_keypoint_file(path)
    annotation = next(iter(data["annotations"]), None)
    official = annotation is not None and ("lefthand_kpts" in annotation
                                           or len(annotation["keypoints"]) // 3 in (308, 344))
    category = next((c for c in data.get("categories", []) if c.get("keypoints")), None)
    if named is not None:
        kset, source = named, source or f"--keypoint_set {named.name}"
    elif official:
        return KEYPOINT_SET_PRESETS[OFFICIAL_SET]
    elif category is not None:
        kset, source = KeypointSet.from_coco_category(category, name=path.name), "its person category"
    else:
        return _set_for_count(len(annotation["keypoints"]) // 3 if annotation is not None else 0, str(path))
    if not (official and is_official(kset)):  # the official layouts are mapped into the 308 by the readers
        _check_coco_counts(path, data["annotations"], len(kset), source)
    return kset


def _check_coco_counts(path: Path, annotations: list, expected: int, source: str) -> None:
    for annotation in annotations:
        values = annotation["keypoints"]
        count = len(values) // 3 if isinstance(values, list) else -1
        if count != expected or len(values) % 3:
            found = (f"{len(values)} numbers (not keypoint triples x, y, v)" if count >= 0 and len(values) % 3
                     else f"{count} keypoints" if count >= 0 else f"a {type(values).__name__}")
            raise ValueError(f"{path}: annotation id {annotation.get('id', '?')} has {found}, but {source} names "
                             f"{expected}. Every annotation needs {expected} x 3 numbers; fix the file, or pass "
                             "--keypoint_set with the data's own set (a preset or a JSON layout file).")


def _check_row_count(count: int, kset: KeypointSet) -> None:
    if count and count != len(kset) and not (count in _OFFICIAL_COUNTS and is_official(kset)):
        raise ValueError(f"The dataset has {count} keypoints per person but --keypoint_set {kset.name} names "
                         f"{len(kset)}; pass the data's own set (--keypoint_set auto reads it from the data).")


def _row_keypoint_count(rows, column: str, visibility_column: str | None) -> int:
    """Keypoints per person in the first row with a person: K x 3 numbers, or K x 2 beside a visibility column (a
    known count decides when both fit)."""
    for row in rows.select_columns([column]):
        flat = np.asarray(row[column], dtype=object)
        people = [np.asarray(p, dtype=np.float64).reshape(-1) for p in flat] if flat.dtype == object else None
        numbers = len(people[0]) if people else (np.asarray(row[column], dtype=np.float64)[0].size
                                                 if np.asarray(row[column]).ndim > 1 else 0)
        if numbers == 0:
            continue
        candidates = [numbers // c for c in ((2,) if visibility_column else (3, 2)) if numbers % c == 0]
        known = [k for k in candidates if k in _OFFICIAL_COUNTS or k in _PRESET_BY_COUNT]
        return (known or candidates or [numbers])[0]
    return 0


def requested_keypoint_set(data_args, rows=None, columns=None) -> KeypointSet | None:
    """The keypoint set the run's data asks for: `--keypoint_set`, else (auto) read from the data (a COCO file or the
    first `datasets` row); None when nothing says (synthetic humans, no data yet: the model's own set)."""
    named = None if data_args.keypoint_set == "auto" else keypoint_set(data_args.keypoint_set)
    synthetic = getattr(data_args, "dataset", None) == "synthetic" and getattr(data_args, "dataset_name", None) is None
    if synthetic and named is not None and not is_official(named):
        raise ValueError(f"--dataset synthetic generates the official {len(KEYPOINT_SET_PRESETS[OFFICIAL_SET])} "
                         f"keypoints, but --keypoint_set {named.name} names {len(named)}. Write synthetic humans in "
                         f"that set first (sapiens2_hf.data.synthetic.write_dataset(..., keypoint_set="
                         f"{named.name!r})) and train on that folder, or leave --keypoint_set out.")
    if data_args.dataset == "coco" and data_args.dataset_name is None:
        files = [Path(t) for t in (getattr(data_args, f"{split}_targets") for split in ("train", "eval", "test"))
                 if t is not None]
        if not files:
            return named
        kset = _coco_file_set(files[0], named)
        for other in files[1:]:  # every split's file is read with the first one's set
            _coco_file_set(other, kset, None if named is not None else f"the set of {files[0].name}")
        return kset
    count = 0
    if rows is not None and columns is not None and columns.keypoints is not None:
        count = _row_keypoint_count(rows, columns.keypoints, columns.keypoint_visibility)
    if named is not None:
        _check_row_count(count, named)
        return named
    return _set_for_count(count, "The dataset") if count else None


def check_model_keypoints(model_set: KeypointSet, wanted: KeypointSet | None) -> None:
    """A model fine-tuned as it is must already have the data's keypoints."""
    if wanted is None or model_set.names == wanted.names:
        return
    if len(model_set) == len(wanted):
        logger.warning("The model's %d keypoints are named differently from the data's (%s...); training them in the "
                       "data's order.", len(model_set), ", ".join(wanted.names[:3]))
        return
    raise ValueError(f"The model has {len(model_set)} keypoints but the data has {len(wanted)} ({wanted.name}). A new "
                     "keypoint set needs a new head: start from --backbone_name_or_path (or --preset), optionally "
                     "with --init_head_from MODEL to warm-start it from this model's head.")


def pose_transform(transform_class, kset: KeypointSet):
    """The pose transform class bound to the set's flips and body halves (the official tables for the 308 set); a set
    without flip pairs trains without the flip augmentation."""
    if is_official(kset):
        return transform_class
    flips = kset.flip_indices()
    upper, lower = kset.body_halves()
    kwargs = {"flip_indices": flips if flips is not None else list(range(len(kset))),
              "upper_body_ids": upper, "lower_body_ids": lower}
    if flips is None:
        logger.warning("The keypoint set %r has no left/right pairs: training without the flip augmentation (and no "
                       "flip test in evaluation).", kset.name)
        return _without_flip(transform_class, kwargs)
    return partial(transform_class, **kwargs)


def _without_flip(transform_class, kwargs):
    def build(input_size, train=True, augment_probabilities=None):
        probabilities = {**(augment_probabilities or {}), "flip": 0.0}
        return transform_class(input_size, train=train, augment_probabilities=probabilities, **kwargs)

    return build


# -- segmentation classes ---------------------------------------------------------------------------------------


def _names_from_file(path: str) -> list[str]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"--labels_file {path}: {error}") from None
    if isinstance(data, dict):
        try:
            ids = sorted(int(key) for key in data)
        except ValueError:
            raise ValueError(f"--labels_file {path}: an id2label object needs integer ids as keys.") from None
        if ids != list(range(len(ids))):
            raise ValueError(f"--labels_file {path}: the ids must be 0 ... {len(ids) - 1} with none missing.")
        return [str(data[str(i)] if str(i) in data else data[i]) for i in ids]
    if isinstance(data, list) and all(isinstance(name, str) for name in data):
        return data
    raise ValueError(f"--labels_file {path} must hold a list of class names or an id2label object.")


def requested_class_names(data_args, rows=None, columns=None) -> list[str] | None:
    """The segmentation classes the run trains: `--class_names`, `--labels_file`, else the `datasets` label column's
    `ClassLabel` names; None: the model's own (the 29 official body parts for a new one)."""
    if data_args.class_names is not None and data_args.labels_file:
        raise ValueError("Pass either --class_names or --labels_file, not both.")
    names = None
    if data_args.class_names is not None:  # an empty --class_names is a mistake to name, not "no classes given"
        names = [name.strip() for name in data_args.class_names.split(",")]
        if len(names) < 2 or len(set(names)) != len(names) or not all(names):
            raise ValueError(f"--class_names {data_args.class_names!r} gives {names}: the class names must be at "
                             "least two, unique and non-empty, comma-separated in id order (background first); or "
                             "leave --class_names out.")
    elif data_args.labels_file:
        names = _names_from_file(data_args.labels_file)
    elif rows is not None and columns is not None and columns.label is not None:
        feature = getattr(rows, "features", {}).get(columns.label)
        names = list(getattr(feature, "names", None) or []) or None
    if names is not None:
        if len(names) < 2 or len(set(names)) != len(names) or not all(names):
            raise ValueError(f"The class names {names} must be at least two, unique and non-empty.")
    return names


def class_set_kwargs(names: list[str], data_args) -> dict:
    """What a new segmentation model's config stores of its classes."""
    return {"id2label": dict(enumerate(names)), "semantic_loss_ignore_index": int(data_args.ignore_index)}


def seg_transform(transform_class, config, data_args):
    """The segmentation transform for the model's own classes: left/right classes (by name) swap under the flip, and
    the ignored label and `--do_reduce_labels` apply. The official 29 classes keep the official transform."""
    names = [config.id2label[i] for i in range(config.num_labels)]
    official = config.num_labels == 29 and not data_args.do_reduce_labels and data_args.ignore_index == 255
    if official and names == list(SEGMENTATION_CLASS_NAMES):
        return transform_class
    return partial(transform_class, swap_pairs=derive_flip_pairs(names), ignore_index=int(data_args.ignore_index),
                   reduce_labels=bool(data_args.do_reduce_labels))
