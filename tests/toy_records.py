"""Small procedural records for the training tests (learnable in seconds by a tiny model). A helper module, not a
test module: tests take them through the `toy_records` fixture (tests/conftest.py) or import them from here, and
subprocess workers import them after putting tests/ on `sys.path`. Their own checks live in test_data_tasks_toy.py.

Each image encodes its label in an easy, local way (coloured dots at keypoints, class-coloured rectangles,
colour-coded normals, brightness-coded depth, albedo x smooth shading), so a 2-layer model can learn the mapping
within a minute on CPU; the learning tests measure that the metrics move.
"""

import numpy as np


NUM_TOY_KEYPOINTS = 17  # the 17 COCO-style body keypoints; the other 291 of the 308 are absent
_KEYPOINT_COLOURS = (np.random.default_rng(123).uniform(40, 255, size=(NUM_TOY_KEYPOINTS, 3))).astype(np.uint8)
_CLASS_COLOURS = {1: (230, 40, 40), 3: (40, 230, 40), 4: (40, 40, 230), 13: (230, 230, 40), 22: (40, 230, 230)}


def toy_pose_records(count, seed=0, size=(96, 80)):
    """Coloured disks (one colour per keypoint) at 17 random keypoints inside a person box."""
    rng = np.random.default_rng(seed)
    records = []
    height, width = size
    for index in range(count):
        image = rng.integers(60, 100, size=(height, width, 3), dtype=np.uint8)
        x0, y0 = rng.uniform(4, 14), rng.uniform(4, 14)
        box_w, box_h = rng.uniform(0.6, 0.8) * width, rng.uniform(0.7, 0.85) * height
        keypoints = np.zeros((308, 3), np.float32)
        points = np.stack([rng.uniform(x0 + 3, x0 + box_w - 3, NUM_TOY_KEYPOINTS),
                           rng.uniform(y0 + 3, y0 + box_h - 3, NUM_TOY_KEYPOINTS)], 1)
        keypoints[:NUM_TOY_KEYPOINTS, :2] = points
        keypoints[:NUM_TOY_KEYPOINTS, 2] = 2
        yy, xx = np.mgrid[:height, :width]
        for k, (px, py) in enumerate(points):
            image[(xx - px) ** 2 + (yy - py) ** 2 <= 9] = _KEYPOINT_COLOURS[k]
        records.append({"image": image, "bbox": np.array([x0, y0, box_w, box_h], np.float32), "keypoints": keypoints,
                        "area": float(box_w * box_h), "image_id": index, "instance_id": index})
    return records


def toy_seg_records(count, seed=0, size=(32, 32)):
    """Two or three class-coloured rectangles on a grey background (classes 1, 3, 4, 13, 22)."""
    rng = np.random.default_rng(seed)
    classes = sorted(_CLASS_COLOURS)
    records = []
    for _ in range(count):
        image = np.full(size + (3,), 110, np.uint8) + rng.integers(0, 20, size + (3,), dtype=np.uint8)
        label = np.zeros(size, np.uint8)
        for _ in range(rng.integers(2, 4)):
            cls = classes[rng.integers(len(classes))]
            h, w = rng.integers(size[0] // 4, size[0] // 2 + 1), rng.integers(size[1] // 4, size[1] // 2 + 1)
            y, x = rng.integers(0, size[0] - h), rng.integers(0, size[1] - w)
            label[y : y + h, x : x + w] = cls
            image[y : y + h, x : x + w] = np.array(_CLASS_COLOURS[cls]) - rng.integers(0, 20, 3)
        records.append({"image": image, "label": label})
    return records


def _regions(rng, size, count):
    """A label map of `count` axis-aligned regions covering the centre of the image (0 = background border)."""
    region = np.zeros(size, np.int64)
    height, width = size
    top, left, bottom, right = height // 8, width // 8, height - height // 8, width - width // 8
    cuts = np.sort(rng.integers(left + 2, right - 2, count - 1))
    edges = [left, *cuts, right]
    for r in range(count):
        region[top:bottom, edges[r] : edges[r + 1]] = r + 1
    return region


def toy_normal_records(count, seed=0, size=(32, 32)):
    """Piecewise-constant unit normals (z towards the camera is negative) shown as colours `(n + 1) / 2 * 255`."""
    rng = np.random.default_rng(seed)
    records = []
    for _ in range(count):
        region = _regions(rng, size, 3)
        normals = np.zeros(size + (3,), np.float32)
        for r in range(1, 4):
            n = rng.normal(size=3)
            n[2] = -abs(n[2]) - 0.5
            normals[region == r] = n / np.linalg.norm(n)
        image = ((normals + 1) / 2 * 255).astype(np.uint8)
        image[region == 0] = 30
        records.append({"image": image, "normal": normals, "mask": (region > 0).astype(np.uint8)})
    return records


def toy_albedo_records(count, seed=0, size=(32, 32)):
    """Piecewise-constant albedo under a smooth random shading ramp: image = albedo x shading."""
    rng = np.random.default_rng(seed)
    records = []
    yy, xx = np.mgrid[: size[0], : size[1]] / max(size)
    for _ in range(count):
        region = _regions(rng, size, 3)
        albedo = np.zeros(size + (3,), np.float32)
        for r in range(1, 4):
            albedo[region == r] = rng.uniform(0.15, 0.95, 3)
        shading = 0.6 + 0.4 * (rng.uniform() * xx + rng.uniform() * yy) / 2
        image = np.clip(albedo * shading[..., None] * 255, 0, 255).astype(np.uint8)
        records.append({"image": image, "albedo": albedo, "mask": (region > 0).astype(np.uint8)})
    return records


TOY_INTRINSICS = np.array([[40.0, 0, 23.5], [0, 40.0, 31.5], [0, 0, 1]])


def toy_pointmap_records(count, seed=0, size=(64, 48)):
    """Fronto-parallel slabs at random depths (1.5-4 m) seen by a fixed camera; brightness encodes depth."""
    rng = np.random.default_rng(seed)
    records = []
    for _ in range(count):
        region = _regions(rng, size, 3)
        depth = np.zeros(size, np.float32)
        for r in range(1, 4):
            depth[region == r] = rng.uniform(1.5, 4.0)
        image = np.zeros(size + (3,), np.uint8)
        image[region > 0] = (255 - (depth[region > 0, None] - 1.0) * 70).astype(np.uint8)
        records.append({"image": image, "depth": depth, "K": TOY_INTRINSICS.copy(), "mask": (region > 0).astype(np.uint8)})
    return records


TOY_RECORDS = {"pose": toy_pose_records, "seg": toy_seg_records, "normal": toy_normal_records,
               "pointmap": toy_pointmap_records, "albedo": toy_albedo_records}
