"""Scenes: a pinhole camera, 1..N placed people, lights, a background and sensor noise.

Camera frame: X right, Y down, Z forward (metres), the frame of the official Sapiens2 pointmap targets. Pixel
centres sit at integer coordinates; the default principal point is the image centre ``((W - 1) / 2, (H - 1) / 2)``.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass, field, replace

import numpy as np

from .body import build_person
from .human import euler_matrices, mirror_person, sample_person


@dataclass
class Camera:
    """Pinhole intrinsics in pixels for an image of `height` x `width` (no distortion)."""

    fx: float
    fy: float
    cx: float
    cy: float
    height: int
    width: int

    @property
    def intrinsics(self) -> np.ndarray:
        """`(3, 3)` float64 matrix ``[[fx, 0, cx], [0, fy, cy], [0, 0, 1]]``."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])


@dataclass
class Scene:
    """One image's worth of world: everything `render_scene` needs, nothing random left.

    Attributes:
        camera (`Camera`): intrinsics and image size.
        people (`list[PersonParams]`): placed people (their ``rotation``/``translation`` map body to camera frame).
        light_directions, light_colors (`(num_lights, 3)`): unit vectors from the surface towards each directional
            light (camera frame) and its RGB intensity; ambient (`(3,)`): the RGB ambient term.
        background (`dict`): procedural background description (see `render._background`).
        noise_std, noise_seed: the additive Gaussian sensor noise's std on the [0, 1] RGB scale and its field's seed.
        mirrored (`bool`): whether the background and the noise field are evaluated mirrored (set by
            `mirror_scene`).
        geometry (`list | None`): cached `PersonGeometry` per person (not part of the scene's identity). Set it to
            ``None`` after editing ``people`` so that `render_scene` rebuilds the geometry.
    """

    camera: Camera
    people: list
    light_directions: np.ndarray
    light_colors: np.ndarray
    ambient: np.ndarray
    background: dict
    noise_std: float
    noise_seed: int
    mirrored: bool = False
    geometry: list | None = field(default=None, repr=False, compare=False)


_B2C = np.diag([1.0, -1.0, -1.0])  # body (x left, y up, z forward) -> camera, for a person facing the camera


def _rotation(rx=0.0, ry=0.0, rz=0.0):
    return euler_matrices(np.array([[rx, ry, rz]]))[0]


def _num_people(rng, num_people):
    if num_people is None:
        return int(rng.choice(4, p=[0.55, 0.25, 0.12, 0.08])) + 1
    if isinstance(num_people, (tuple, list)):
        lo, hi = num_people
        return int(rng.integers(lo, hi + 1))
    return int(num_people)


def _random_color(rng, value=(0.1, 0.95)):
    u = rng.random(3).tolist()
    return np.array(colorsys.hsv_to_rgb(u[0], 0.8 * u[1], value[0] + (value[1] - value[0]) * u[2]))


def _sample_background(rng, height, width):
    kinds = ("plain", "gradient", "stripes", "checker", "blobs", "wall_floor")
    kind = kinds[int(rng.choice(len(kinds), p=[0.12, 0.2, 0.15, 0.1, 0.28, 0.15]))]
    u = rng.random(8).tolist()
    return {
        "kind": kind,
        "color1": _random_color(rng),
        "color2": _random_color(rng),
        "angle": np.pi * u[0],
        "period": (0.04 + 0.26 * u[1]) * max(height, width),
        "horizon": 0.3 + 0.5 * u[2],
        "grid": rng.uniform(0.05, 0.95, size=(int(3 + 6 * u[3]), int(3 + 6 * u[4]), 3)),
        "gain": 0.75 + 0.35 * u[5],
        "vignette": 0.4 * u[6],
    }


def sample_scene(rng: np.random.Generator, config) -> Scene:
    """Sample a scene from ``rng``, its only source of randomness, and ``config`` (the fields of `SyntheticHumans`)."""
    height, width = int(config.height), int(config.width)
    camera, r_tilt = _sample_camera(rng, config, height, width)
    people, geometry = _sample_people(rng, config, camera, r_tilt)
    dirs, colors, ambient = _sample_lights(rng)
    noise_lo, noise_hi = config.noise_std
    noise_std = float(noise_lo + (noise_hi - noise_lo) * rng.random()) if rng.random() < 0.8 else 0.0
    return Scene(
        camera=camera, people=people, light_directions=dirs, light_colors=colors, ambient=ambient,
        background=_sample_background(rng, height, width), noise_std=noise_std,
        noise_seed=int(rng.integers(0, 2**62)), mirrored=False, geometry=geometry,
    )


def _sample_camera(rng, config, height, width):
    """A pinhole camera (random field of view, centred principal point) and its tilt (pitch, roll) rotation."""
    lo, hi = np.deg2rad(config.fov_deg)
    fov = lo + (hi - lo) * rng.random()
    f = 0.5 * height / np.tan(0.5 * fov)
    camera = Camera(f, f, 0.5 * (width - 1), 0.5 * (height - 1), height, width)
    pitch = np.deg2rad(config.max_tilt_deg) * (2.0 * rng.random() - 1.0)
    roll = np.deg2rad(config.max_roll_deg) * (2.0 * rng.random() - 1.0)
    return camera, _rotation(rx=pitch) @ _rotation(rz=roll)


def _sample_people(rng, config, camera, r_tilt):
    """People standing on one floor: the first framed in the image (sometimes a close-up or cut by the border),
    the others behind it without overlapping; a person with no free spot after 20 tries is skipped."""
    n = _num_people(rng, config.num_people)
    people, geometry, placed = [], [], []
    floor_y = first_depth = None
    for i in range(n):
        person = sample_person(rng)
        geom = build_person(person)
        u = rng.random(8).tolist()
        yaw = np.deg2rad(np.clip(35.0 * rng.standard_normal(), -90, 90)) if u[0] < 0.6 else np.pi * (2 * u[1] - 1)
        rotation = r_tilt @ _B2C @ _rotation(ry=yaw)
        if i == 0:
            level = _first_person_centre(u, config, camera, r_tilt, person.shape["height"], n)
            floor_y = level[1] + 0.5 * person.shape["height"]
            first_depth = level[2]
            base = np.array([level[0], floor_y, level[2]])
        else:
            base = _free_spot(rng, camera, first_depth, floor_y, placed)
            if base is None:
                continue
        person.rotation = rotation
        person.translation = r_tilt @ base - rotation @ np.array([0.0, geom.lowest_point(), 0.0])
        placed.append((base[0], base[2]))
        people.append(person)
        geometry.append(geom)
    return people, geometry


def _first_person_centre(u, config, camera, r_tilt, height_m, n):
    """The first person's centre in the level (untilted) camera frame, from its framing in the image."""
    height, width, f = camera.height, camera.width, camera.fx
    if u[2] < config.close_up_prob:
        frac = 1.3 + 1.1 * u[3]
        u_c, v_c = (0.3 + 0.4 * u[4]) * width, (0.06 + 0.04 * u[6] + 0.5 * frac) * height
    else:
        frac = (0.55 + 0.4 * u[3]) if n == 1 else (0.4 + 0.4 * u[3])
        if u[5] < 0.15:  # deliberately truncated at the border
            u_c, v_c = (0.05 + 0.9 * u[4]) * width, (0.3 + 0.4 * u[6]) * height
        else:
            u_c, v_c = (0.35 + 0.3 * u[4]) * width, (0.42 + 0.16 * u[6]) * height
    depth = f * height_m / (frac * height)
    center = depth * np.array([(u_c - camera.cx) / f, (v_c - camera.cy) / f, 1.0])
    return r_tilt.T @ center


def _free_spot(rng, camera, first_depth, floor_y, placed):
    """A floor position at least 0.55 m (in x or z) from everyone placed, or None after 20 tries."""
    f = camera.fx
    for _ in range(20):
        z = max(1.0, 0.6 * first_depth) + (2.2 * first_depth - max(1.0, 0.6 * first_depth)) * rng.random()
        x = ((-0.1 + 1.2 * rng.random()) * camera.width - camera.cx) / f * z
        if all(abs(x - px) > 0.55 or abs(z - pz) > 0.55 for px, pz in placed):
            return np.array([x, floor_y, z])
    return None


def _sample_lights(rng):
    """One to three directional lights (unit directions, RGB colours) and the ambient RGB."""
    num_lights = int(rng.integers(1, 4))
    dirs = np.stack([rng.uniform(-1.0, 1.0, num_lights), rng.uniform(-1.0, 0.2, num_lights),
                     rng.uniform(-1.3, -0.2, num_lights)], axis=1)
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    weights = rng.dirichlet(np.ones(num_lights)) * rng.uniform(0.55, 0.95)
    colors = weights[:, None] * np.clip(1.0 + rng.normal(0.0, 0.06, (num_lights, 3)), 0.8, 1.2)
    ambient = rng.uniform(0.15, 0.45) * np.clip(1.0 + rng.normal(0.0, 0.05, 3), 0.85, 1.15)
    return dirs, colors, ambient


def mirror_scene(scene: Scene) -> Scene:
    """The scene seen in a mirror: X -> -X in the camera frame, so that its rendering is the horizontal flip.

    Every person is replaced by `mirror_person` (left/right parameters swapped, *rebuilt* by the human model, so
    left/right labels come from the model, not from a label swap), lights are mirrored, the principal point
    becomes ``W - 1 - cx``, and the background and noise fields are evaluated mirrored.
    """
    cam = scene.camera
    return replace(
        scene,
        camera=replace(cam, cx=(cam.width - 1) - cam.cx),
        people=[mirror_person(p) for p in scene.people],
        light_directions=scene.light_directions * np.array([-1.0, 1.0, 1.0]),
        mirrored=not scene.mirrored,
        geometry=None,
    )
