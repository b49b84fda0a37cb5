"""Synthetic humans with exact labels for all six Sapiens2 tasks (pose, seg, normal, pointmap, albedo, matting).

Procedural articulated people (round cones and ellipsoids) are ray-cast analytically per pixel, so depth, normals,
part labels, albedo and keypoint visibility come from one geometry and agree exactly. See
``docs/synthetic_data.md``.

Entry points:

- `render_sample(seed, height, width, num_people=None)` -> dict of arrays (keys documented there).
- `SyntheticHumans(...)`: the generator config; ``.sample(seed)`` / ``.scene(seed)``.
- `make_dataset(task, num_samples, height, width, seed)` -> `datasets.Dataset` / `IterableDataset`; the columns of
  each task are `task_features(task, ...)`, the one schema of synthetic data.
- `sample_seed(seed, index)`: the one seed rule of every synthetic source (see `sapiens2_hf.data.synthetic.dataset`).
- `write_dataset(output_dir, num_samples, height, width, seed)` -> COCO JSON + PNG/NPY files.
- `mirror_scene(scene)`: the mirror-image scene (its rendering is the horizontal flip of the original).
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
