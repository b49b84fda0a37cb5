"""Public generator: `SyntheticHumans` (config) and `render_sample` (one labelled sample per seed)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence, Union

import numpy as np

from .render import render_scene
from .scene import Scene, sample_scene

SeedLike = Union[int, Sequence[int], np.random.Generator]


@dataclass(frozen=True)
class SyntheticHumans:
    """Configuration of the synthetic-human generator.

    Args:
        height, width (`int`, defaults to 256 x 192): image size in pixels.
        num_people (`int`, `(min, max)` or `None`): people sampled per image. ``None`` draws 1, 2, 3 or 4 with
            probabilities 0.55 / 0.25 / 0.12 / 0.08. People that end up with no visible pixel (fully occluded or
            outside the frame) are dropped, so a sample can hold fewer people than sampled.
        fov_deg: range of the vertical field of view in degrees; noise_std: range of the Gaussian sensor-noise
            standard deviation on the [0, 1] scale (80 % of images get noise).
        max_tilt_deg, max_roll_deg: camera pitch and roll are drawn from ``[-max, max]``.
        close_up_prob: probability that the first person is framed as a close-up (upper body, cut at the bottom).
    """

    height: int = 256
    width: int = 192
    num_people: Union[int, tuple, None] = None
    fov_deg: tuple = (35.0, 65.0)
    noise_std: tuple = (0.0, 0.03)
    max_tilt_deg: float = 12.0
    max_roll_deg: float = 6.0
    close_up_prob: float = 0.12

    def __post_init__(self):
        if self.height < 8 or self.width < 8:
            raise ValueError(f"height and width must be >= 8 pixels, got {self.height}x{self.width}.")
        n = self.num_people
        if isinstance(n, (tuple, list)):
            if len(n) != 2 or not 1 <= n[0] <= n[1]:
                raise ValueError(f"num_people as a range must be (min, max) with 1 <= min <= max, got {n!r}.")
        elif n is not None and (not isinstance(n, (int, np.integer)) or n < 1):
            raise ValueError(f"num_people must be a positive int, a (min, max) tuple or None, got {n!r}.")
        if not 0 < self.fov_deg[0] <= self.fov_deg[1] < 180:
            raise ValueError(f"fov_deg must be (lo, hi) with 0 < lo <= hi < 180, got {self.fov_deg!r}.")

    def to_dict(self) -> dict:
        return asdict(self)

    def scene(self, seed: SeedLike) -> Scene:
        """The `Scene` of a seed (camera, people, lights, background, noise), before rendering."""
        return sample_scene(_generator(seed), self)

    def sample(self, seed: SeedLike, return_intermediates: bool = False) -> dict:
        """Render the sample of a seed; see `render_sample` for the keys."""
        return render_scene(self.scene(seed), return_intermediates=return_intermediates)


def _generator(seed: SeedLike) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (bool, float)) or seed is None:
        raise ValueError(f"seed must be an int, a sequence of ints or a numpy Generator, got {seed!r}.")
    return np.random.default_rng(seed)


def render_sample(seed: SeedLike, height: int = 256, width: int = 192, num_people=None,
                  return_intermediates: bool = False, **config) -> dict:
    """Render one synthetic sample with exact labels for all six Sapiens2 tasks.

    Deterministic: the same ``seed`` (an int, a sequence of ints such as ``(dataset_seed, index)``, or a numpy
    ``Generator``) and arguments give the same sample; no global random state is used. Conventions (camera frame X
    right, Y down, Z forward in metres; pixel ``(row i, column j)`` centred at ``(x, y) = (j, i)``; "left" is the
    person's own left) and the keys' full description: docs/synthetic_data.md.

    Returns:
        `dict` of arrays, H x W = ``height`` x ``width``, P = ``num_people`` (people with no visible pixel dropped):
        ``image`` (H, W, 3) uint8 RGB; ``segmentation`` (H, W) int64 ``seg29.json`` ids (0 background; teeth and
        tongue never appear); ``mask`` (H, W) bool, ``segmentation > 0``; ``instance_map`` (H, W) int32, ``i + 1``
        for person ``i``; ``normals`` (H, W, 3) float32, unit, camera frame, towards the camera
        (``dot(normal, ray) < 0``); ``pointmap`` (H, W, 3) float32 camera-frame XYZ in metres, with
        ``X = (u - cx) * Z / fx``, ``Y = (v - cy) * Z / fy`` exact; ``depth`` (H, W) float32, ``pointmap[..., 2]``;
        ``albedo`` (H, W, 3) float32 in [0, 1] (dense maps are 0 on background); ``keypoints`` (P, 308, 2) float32
        (x, y) in the official order, (0, 0) where not modelled; ``keypoint_visibility`` (P, 308) uint8: 2 visible,
        1 inside the image but occluded, 0 absent; ``keypoints_3d`` (P, 308, 3) float32 metres; ``boxes`` (P, 4)
        float32 xyxy in pixel-edge coordinates around the visible pixels; ``camera_intrinsics`` (3, 3) float32 K in
        pixels; ``num_people`` int; ``alpha`` (H, W) float32 person coverage in [0, 1], supersampled (16 rays) on the
        silhouette's edge; ``foreground`` (H, W, 3) float32 the people's noise-free colour, not pre-multiplied, 0
        where alpha is 0; ``matting_image`` (H, W, 3) uint8: ``image`` with the edge pixels composited from alpha.

        With ``return_intermediates=True`` also ``image_clean`` (float32 RGB before noise, ``scene_albedo *
        shading``), ``scene_albedo``, ``shading``, ``noise``, ``primitive_index`` ((H, W) int64, -1 background),
        ``keypoint_owner_classes`` ((P, 308, 12), -1 padded) and ``person_index``.
    """
    cfg = SyntheticHumans(height=height, width=width, num_people=num_people, **config)
    return cfg.sample(seed, return_intermediates=return_intermediates)
