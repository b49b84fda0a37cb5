"""Write synthetic samples to the on-disk formats the fine-tuning readers consume (atomic writes).

The layout of ``output_dir`` (``images/<stem>.png``, ``person_keypoints.json`` in COCO form, ``seg/``, ``mask/``,
``instances/``, ``normal/``, ``pointmap/``, ``albedo/``, ``matting_image/``, ``alpha/``, ``foreground/`` and
``meta.json``; stems ``000000``, ...) is tabled in docs/synthetic_data.md ("Files on disk"). With ``class_map``
``seg/`` holds the ids of its classes (255: in none of them) and ``labels.json`` maps id -> class name (what
finetune.py's --labels_file reads); ``keypoint_set`` writes another keypoint set than the official 308. Keypoints
with visibility 0 are written as ``[0, 0, 0]`` (COCO). Every file is written to a temporary name in its folder and
renamed into place, and ``meta.json`` is written last, so a reader never sees partial files.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from ...modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES, SEGMENTATION_CLASS_NAMES
from ...modeling.sapiens2_tasks import OFFICIAL_TASK_NAMES
from ...utils.atomic_io import atomic_write_bytes
from .dataset import GENERATOR_VERSION, sample_seed
from .generator import SyntheticHumans

# Every official task: each has its folder layout in `write_dataset` (a new task needs one there too).
WRITER_TASKS = OFFICIAL_TASK_NAMES


def _atomic_write(path: Path, data: bytes) -> None:
    """Atomic for readers (the old file or the whole new one, never a part), without an fsync per file: not durable
    across a power cut, but thousands of small files would otherwise be bound by disk flushes."""
    atomic_write_bytes(path, data, durable=False)


def _encoded(save, *args, **kwargs) -> bytes:
    """What ``save(buffer, *args, **kwargs)`` writes to an in-memory buffer."""
    buffer = io.BytesIO()
    save(buffer, *args, **kwargs)
    return buffer.getvalue()


def _png(array: np.ndarray) -> bytes:
    return _encoded(Image.fromarray(array).save, format="PNG", compress_level=1)


def _to_uint8(array: np.ndarray) -> np.ndarray:
    """[0, 1] floats -> uint8, rounded (the 8-bit alpha / colour files of matting datasets)."""
    return np.clip(np.rint(np.asarray(array, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)


def write_dataset(output_dir, num_samples: int, height: int = 256, width: int = 192, seed: int = 0,
                  tasks=WRITER_TASKS, num_people=None, image_format: str = "png", overwrite: bool = False,
                  keypoint_set=None, class_map=None, **config) -> Path:
    """Render ``num_samples`` samples (sample ``i``: ``sample_seed(seed, i)``) and write them into ``output_dir``
    (created) in the layout of the module docstring; returns its `Path`.

    Args:
        tasks: subset of ``("pose", "seg", "normal", "pointmap", "albedo", "matting")``; images are always written,
            ``mask`` with any dense task, ``instances`` with pose or seg.
        image_format (`str`): ``"png"`` (lossless) or ``"jpg"`` (quality 95).
        overwrite (`bool`): allow writing into a folder that already holds a ``meta.json``.
        keypoint_set: write the keypoints in another set than the 308 (a preset name such as ``"coco17"``, a layout
            file or a `KeypointSet` whose points name their 308 sources): humans labelled as your data is.
        class_map (`dict[str, list[str]]`): write segmentation in your own classes, each the union of the official
            classes listed (in order: ids 0, 1, ...), and their names to ``labels.json``.
    """
    tasks = tuple(tasks)
    root = Path(output_dir)
    _check_arguments(tasks, image_format, num_samples, root, overwrite)
    kset = None if keypoint_set is None else _keypoint_set(keypoint_set)
    class_names, class_table = _class_table(class_map) if class_map is not None else (SEGMENTATION_CLASS_NAMES, None)
    cfg = SyntheticHumans(height=height, width=width, num_people=num_people, **config)
    folders = _make_folders(root, tasks)

    images, annotations = [], []
    for index in range(int(num_samples)):
        sample = cfg.sample(sample_seed(seed, index))
        image_name = _write_sample(root, f"{index:06d}", sample, tasks, folders, image_format, class_table)
        images.append({"id": index, "file_name": image_name, "height": int(height), "width": int(width),
                       "camera_intrinsics": sample["camera_intrinsics"].astype(float).tolist()})
        annotations += _annotations(sample, index, kset, first_id=len(annotations) + 1)
    if "pose" in tasks:
        _atomic_write(root / "person_keypoints.json", json.dumps(_coco(seed, images, annotations, kset)).encode())
    if class_map is not None and "seg" in tasks:
        _atomic_write(root / "labels.json", json.dumps(dict(enumerate(class_names)), indent=1).encode())
    meta = {
        "generator_version": GENERATOR_VERSION, "seed": int(seed), "num_samples": int(num_samples),
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.to_dict().items()},
        "tasks": list(tasks), "image_format": image_format, "folders": folders,
        "conventions": _CONVENTIONS, "segmentation_classes": list(class_names),
        "keypoint_names": list(kset.names if kset else POSE_KEYPOINT_NAMES),
    }
    _atomic_write(root / "meta.json", json.dumps(meta, indent=1).encode())
    return root


def _coco(seed, images, annotations, kset) -> dict:
    """The COCO keypoints file: images, annotations and the person category with its keypoint names."""
    return {
        "info": {"description": "sapiens2_hf synthetic humans", "generator_version": GENERATOR_VERSION,
                 "seed": int(seed), "keypoint_convention": "pixel centres at integer coordinates"},
        "images": images, "annotations": annotations,
        "categories": [{"id": 1, "name": "person", "supercategory": "person",
                        "keypoints": list(kset.names if kset else POSE_KEYPOINT_NAMES),
                        # COCO's skeleton counts keypoints from 1
                        "skeleton": [[a + 1, b + 1] for a, b in kset.skeleton] if kset else []}],
    }


_CONVENTIONS = {
    "camera_frame": "X right, Y down, Z forward (metres)",
    "normals": "unit, camera frame, pointing towards the camera (dot(n, view ray) < 0)",
    "pixels": "pixel (row i, column j) has its centre at (x, y) = (j, i)",
    "boxes": "COCO bbox [x, y, w, h] in pixel-edge coordinates around the visible pixels",
    "keypoint_visibility": "2 visible, 1 occluded inside the image, 0 absent",
}


def _check_arguments(tasks, image_format, num_samples, root: Path, overwrite: bool) -> None:
    unknown = [t for t in tasks if t not in WRITER_TASKS]
    if unknown:
        raise ValueError(f"Unknown task(s) {unknown}; write_dataset handles {WRITER_TASKS}.")
    if image_format not in ("png", "jpg"):
        raise ValueError(f"image_format must be 'png' or 'jpg', got {image_format!r}.")
    if int(num_samples) < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
    if (root / "meta.json").exists() and not overwrite:
        raise ValueError(f"{root} already holds a dataset (meta.json); pass overwrite=True or choose another folder.")


def _make_folders(root: Path, tasks) -> list:
    """Create the folders the tasks write (module docstring); returns their names in a fixed order."""
    folders = ["images"]
    if "pose" in tasks or "seg" in tasks:
        folders.append("instances")
    if "seg" in tasks:
        folders.append("seg")
    if any(t in tasks for t in ("normal", "pointmap", "albedo")):
        folders.append("mask")
    folders += [t for t in ("normal", "pointmap", "albedo") if t in tasks]
    if "matting" in tasks:
        folders += ["matting_image", "alpha", "foreground"]
    for folder in folders:
        (root / folder).mkdir(parents=True, exist_ok=True)
    return folders


def _write_sample(root: Path, stem: str, sample: dict, tasks, folders, image_format, class_table) -> str:
    """Write one sample's image and label files; returns the image's name relative to ``root``."""
    image_name = f"images/{stem}.{image_format}"
    jpeg = _encoded(Image.fromarray(sample["image"]).save, format="JPEG", quality=95) if image_format == "jpg" else None
    _atomic_write(root / image_name, _png(sample["image"]) if jpeg is None else jpeg)
    mask = sample["mask"]
    if "instances" in folders:
        _atomic_write(root / "instances" / f"{stem}.png", _png(sample["instance_map"].astype(np.uint8)))
    if "seg" in tasks:
        classes = sample["segmentation"].astype(np.uint8)
        _atomic_write(root / "seg" / f"{stem}.png", _png(classes if class_table is None else class_table[classes]))
    if "mask" in folders:
        _atomic_write(root / "mask" / f"{stem}.png", _png(mask.astype(np.uint8) * 255))
    if "normal" in tasks:
        _atomic_write(root / "normal" / f"{stem}.npy", _encoded(np.save, sample["normals"], allow_pickle=False))
    if "pointmap" in tasks:
        _atomic_write(root / "pointmap" / f"{stem}.npz",
                      _encoded(np.savez, pointmap=sample["pointmap"], depth=sample["depth"],
                               K=sample["camera_intrinsics"].astype(np.float64), mask=mask))
    if "albedo" in tasks:
        _atomic_write(root / "albedo" / f"{stem}.npy", _encoded(np.save, sample["albedo"], allow_pickle=False))
    if "matting" in tasks:
        _atomic_write(root / "matting_image" / f"{stem}.png", _png(sample["matting_image"]))
        _atomic_write(root / "alpha" / f"{stem}.png", _png(_to_uint8(sample["alpha"])))
        _atomic_write(root / "foreground" / f"{stem}.png", _png(_to_uint8(sample["foreground"])))
    return image_name


def _annotations(sample: dict, image_id: int, kset, first_id: int) -> list:
    """The COCO person annotations of one sample (ids from ``first_id``), keypoints in ``kset`` or the 308."""
    annotations = []
    counts = np.bincount(sample["instance_map"].ravel(), minlength=sample["num_people"] + 1)
    for person in range(sample["num_people"]):
        vis = sample["keypoint_visibility"][person]
        kp = np.where(vis[:, None] > 0, sample["keypoints"][person], 0.0)
        points = np.concatenate([kp, vis[:, None].astype(np.float32)], axis=1)
        if kset is not None:
            points = kset.from_308(points)
        x0, y0, x1, y1 = (float(v) for v in sample["boxes"][person])
        annotations.append({
            "id": first_id + person, "image_id": image_id, "category_id": 1,
            "bbox": [x0, y0, x1 - x0, y1 - y0], "area": float(counts[person + 1]), "iscrowd": 0,
            "keypoints": points.ravel().round(3).tolist(), "num_keypoints": int((points[:, 2] > 0).sum()),
        })
    return annotations


def _keypoint_set(value):
    from ..keypoint_sets import keypoint_set

    kset = keypoint_set(value)
    if kset.sources is None:
        raise ValueError(f"keypoint_set {kset.name!r} names no 308 source for its points, so synthetic humans cannot "
                         "be labelled with it; give each point its `sources` in the layout file.")
    return kset


def _class_table(class_map) -> tuple[list[str], np.ndarray]:
    """Your class names and the lookup table official id -> your id (255: in none of your classes)."""
    names = list(class_map)
    table = np.full(256, 255, np.uint8)
    for new_id, name in enumerate(names):
        members = class_map[name]
        members = [members] if isinstance(members, str) else list(members)
        unknown = [member for member in members if member not in SEGMENTATION_CLASS_NAMES]
        if unknown:
            raise ValueError(f"class_map[{name!r}] names {unknown}, which are not official classes; they are "
                             f"{', '.join(SEGMENTATION_CLASS_NAMES)}.")
        for member in members:
            old = SEGMENTATION_CLASS_NAMES.index(member)
            if table[old] != 255:
                raise ValueError(f"class_map puts {member!r} in both {names[table[old]]!r} and {name!r}.")
            table[old] = new_id
    if not 2 <= len(names) <= 255:
        raise ValueError(f"class_map needs 2 to 255 classes, got {len(names)}.")
    return names, table


def read_written_sample(output_dir, index: int) -> dict:
    """Read sample ``index`` of a `write_dataset` folder back into `render_sample`-style arrays.

    Returns the keys that were written among ``image``, ``segmentation`` (int64), ``instance_map`` (int32),
    ``mask``, ``normals``, ``pointmap``, ``depth``, ``camera_intrinsics``, ``albedo``, ``matting_image``, ``alpha``
    and ``foreground`` (float32 in [0, 1], 8-bit precision), and from the COCO file
    ``keypoints`` `(num_people, 308, 2)`, ``keypoint_visibility`` (uint8) and ``boxes`` (xyxy).
    """
    root = Path(output_dir)
    meta = json.loads((root / "meta.json").read_text())
    stem = f"{int(index):06d}"
    out = {"image": np.asarray(Image.open(root / "images" / f"{stem}.{meta['image_format']}").convert("RGB"))}
    png = {"seg": ("segmentation", lambda a: a.astype(np.int64)), "mask": ("mask", lambda a: a > 0),
           "instances": ("instance_map", lambda a: a.astype(np.int32)),
           "alpha": ("alpha", lambda a: a.astype(np.float32) / 255.0),
           "matting_image": ("matting_image", lambda a: a[..., :3]),
           "foreground": ("foreground", lambda a: a.astype(np.float32) / 255.0)}
    for folder, (key, convert) in png.items():
        if (root / folder / f"{stem}.png").exists():
            out[key] = convert(np.asarray(Image.open(root / folder / f"{stem}.png")))
    for folder, key in (("normal", "normals"), ("albedo", "albedo")):
        if (root / folder / f"{stem}.npy").exists():
            out[key] = np.load(root / folder / f"{stem}.npy", allow_pickle=False)
    if (root / "pointmap" / f"{stem}.npz").exists():
        with np.load(root / "pointmap" / f"{stem}.npz", allow_pickle=False) as data:
            out["pointmap"], out["depth"], out["camera_intrinsics"] = data["pointmap"], data["depth"], data["K"]
    if (root / "person_keypoints.json").exists():
        coco = json.loads((root / "person_keypoints.json").read_text())
        anns = [a for a in coco["annotations"] if a["image_id"] == int(index)]
        count = len(meta["keypoint_names"])
        kps = np.array([a["keypoints"] for a in anns], dtype=np.float32).reshape(len(anns), count, 3)
        out["keypoints"] = kps[..., :2]
        out["keypoint_visibility"] = kps[..., 2].astype(np.uint8)
        out["boxes"] = np.array([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]]
                                 for a in anns], dtype=np.float32).reshape(len(anns), 4)
    return out
