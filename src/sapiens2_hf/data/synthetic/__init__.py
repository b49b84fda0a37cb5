"""Synthetic humans with exact labels for all six Sapiens2 tasks (pose, seg, normal, pointmap, albedo, matting).

Procedural articulated people (round cones and ellipsoids) are ray-cast analytically per pixel, so depth, normals,
part labels, albedo and keypoint visibility come from one geometry and agree exactly. See ``docs/synthetic_data.md``.
Entry points: `render_sample` (one sample's arrays), `SyntheticHumans` (the generator config), `make_dataset` (a
`datasets` dataset; columns: `task_features`, the one schema), `sample_seed` (the one seed rule), `write_dataset`
(COCO JSON + PNG/NPY files) and `mirror_scene` (the mirrored scene, rendering as the horizontal flip).
"""

from .dataset import TASKS, make_dataset, sample_seed, sample_to_row, task_features
from .generator import SyntheticHumans, render_sample
from .body import KEYPOINT_MODELED
from .render import render_scene
from .scene import Camera, Scene, mirror_scene, sample_scene
from .writer import read_written_sample, write_dataset

__all__ = ["KEYPOINT_MODELED", "TASKS", "Camera", "Scene", "SyntheticHumans", "make_dataset", "mirror_scene",
           "read_written_sample", "render_sample", "render_scene", "sample_scene", "sample_seed", "sample_to_row",
           "task_features", "write_dataset"]
