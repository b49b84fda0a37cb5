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
        height (`int`, defaults to 256): image height in pixels.
        width (`int`, defaults to 192): image width in pixels.
        num_people (`int`, `(min, max)` or `None`): people sampled per image. ``None`` draws 1, 2, 3 or 4 with
            probabilities 0.55 / 0.25 / 0.12 / 0.08. People that end up with no visible pixel (fully occluded or
            outside the frame) are dropped, so a sample can hold fewer people than sampled.
        fov_deg (`(float, float)`, defaults to `(35, 65)`): range of the vertical field of view.
        noise_std (`(float, float)`, defaults to `(0, 0.03)`): range of the Gaussian sensor-noise standard
            deviation on the [0, 1] scale (80 % of images get noise).
        max_tilt_deg (`float`, defaults to 12): camera pitch is drawn from ``[-max, max]``.
        max_roll_deg (`float`, defaults to 6): camera roll is drawn from ``[-max, max]``.
        close_up_prob (`float`, defaults to 0.12): probability that the first person is framed as a close-up
            (upper body, truncated at the bottom border).
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
    ``Generator``) and arguments give the same sample. No global random state is used.

    Conventions: camera frame X right, Y down, Z forward (metres); pixel ``(row i, column j)`` has its centre at
    ``(x, y) = (j, i)``; "left" means the person's own left.

    Returns:
        `dict` with
        - ``image`` (`np.ndarray` `(height, width, 3)`, uint8): RGB.
        - ``segmentation`` (`(height, width)`, int64): class ids of ``seg29.json`` (0 background). Classes the model
          cannot produce (teeth, tongue) never appear.
        - ``mask`` (`(height, width)`, bool): foreground (``segmentation > 0``); validity mask of the dense maps.
        - ``instance_map`` (`(height, width)`, int32): 0 background, ``i + 1`` for person ``i``.
        - ``normals`` (`(height, width, 3)`, float32): unit surface normals in the camera frame, pointing towards
          the camera (``dot(normal, viewing ray) < 0``, so mostly ``z < 0``); zeros on background.
        - ``pointmap`` (`(height, width, 3)`, float32): camera-frame XYZ of the visible surface in metres; zeros on
          background. ``X = (u - cx) * Z / fx`` and ``Y = (v - cy) * Z / fy`` hold exactly.
        - ``depth`` (`(height, width)`, float32): Z in metres (``pointmap[..., 2]``); 0 on background.
        - ``albedo`` (`(height, width, 3)`, float32): reflectance in [0, 1]; zeros on background.
        - ``keypoints`` (`(num_people, 308, 2)`, float32): (x, y) pixels in the official 308 order. Keypoints the
          model does not define are (0, 0); modelled keypoints outside the image keep their projected position.
        - ``keypoint_visibility`` (`(num_people, 308)`, uint8): 2 visible, 1 inside the image but occluded
          (labelled, COCO ``v=1``), 0 absent (not modelled, outside the image, or behind the camera).
        - ``keypoints_3d`` (`(num_people, 308, 3)`, float32): camera-frame positions in metres (zeros if absent).
        - ``boxes`` (`(num_people, 4)`, float32): ``(x_min, y_min, x_max, y_max)`` around each person's visible
          pixels, in pixel-edge coordinates (a box covering pixel columns a..b has x_min = a, x_max = b + 1).
        - ``camera_intrinsics`` (`(3, 3)`, float32): ``[[fx, 0, cx], [0, fy, cy], [0, 0, 1]]`` in pixels.
        - ``num_people`` (`int`).
        - ``alpha`` (`(height, width)`, float32): the fraction of each pixel the people cover, in [0, 1]: 0/1 off the
          silhouette's edge, supersampled (16 rays) on it (see `sapiens2_hf.data.synthetic.matting`).
        - ``foreground`` (`(height, width, 3)`, float32): the people's noise-free colour in [0, 1] (not
          pre-multiplied; edge pixels whose centre misses take their person neighbours' mean); 0 where alpha is 0.
        - ``matting_image`` (`(height, width, 3)`, uint8): ``image`` with the edge pixels composited from ``alpha``,
          ``alpha * foreground + (1 - alpha) * background`` (plus the same noise); equal to ``image`` elsewhere.

        With ``return_intermediates=True`` also ``image_clean`` (float32 RGB before noise and quantisation, equal to
        ``scene_albedo * shading``), ``scene_albedo`` (albedo including the background), ``shading`` (float32
        `(height, width, 3)`, Lambert + ambient; background shading for background pixels), ``noise``,
        ``primitive_index`` (`(height, width)`, int64, -1 background), ``keypoint_owner_classes``
        (`(num_people, 308, 12)`, the seg classes a keypoint's own surface can carry, -1 padded) and
        ``person_index`` (index of each output person in the scene).
    """
    cfg = SyntheticHumans(height=height, width=width, num_people=num_people, **config)
    return cfg.sample(seed, return_intermediates=return_intermediates)
