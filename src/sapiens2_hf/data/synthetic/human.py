"""Procedural articulated human: skeleton, joint-limited pose prior, body shape, clothing, hair, hands, face.

Body frame (metres): x = the subject's left, y = up, z = the direction the subject faces. The pelvis joint is the
origin. The right side is *defined* as the mirror image (x -> -x) of the left, in the mirrored joint's local frame,
with right-side Euler angles in the mirrored convention ``(rx, -ry, -rz)``: a person and its mirror share one code
path (`mirror_person` swaps the left and right parameters; the builder gives the exact mirror geometry with correct
labels). Right-side keypoints mirror the left-side keypoint ``flip_indices`` pairs them with, so the official flip
permutation holds by construction (also for the face contours, whose numbering is not symmetric).

Joint rotations are ``Rz(rz) @ Rx(rx) @ Ry(ry)`` in the parent frame; at rest every bone runs along +-y, so ``ry`` is
the twist about the bone. Sign conventions (left side): hip/shoulder flexion (limb forward) is ``rx < 0``, knee
flexion ``rx > 0``, elbow flexion ``rx < 0``, abduction (limb outward) ``rz > 0``, finger flexion ``rz < 0``, spine and
neck forward bend ``rx > 0``.

Reference proportions are those of a 1.75 m adult and scale with the sampled height and shape factors.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass, field

import numpy as np

from ..label_tables import KEYPOINT_FLIP_INDICES
from ...modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES, SEGMENTATION_CLASS_NAMES


# ------------------------------------------------------------------------------------------------------------ Label ids

SEG = {name: index for index, name in enumerate(SEGMENTATION_CLASS_NAMES)}
KP = {name: index for index, name in enumerate(POSE_KEYPOINT_NAMES)}
FLIP = np.asarray(KEYPOINT_FLIP_INDICES, dtype=np.int64)

# Material slots of a person (rows of its material table).
SKIN, HAIR, TOP, BOTTOM, SHOE, SOCK, LIP, EYE, BROW, HAT, GLASSES, BAG, SCARF = range(13)
NUM_MATERIALS = 13

# Texture kinds.
PLAIN, STRIPES, CHECKS, BLOTCH, EYEBALL = range(5)

IRIS_ANGLE = 0.55
"""Angular radius (rad) of the iris on the eyeball, around the gaze axis."""
PUPIL_ANGLE = 0.22
"""Angular radius (rad) of the pupil on the eyeball."""

_INF = np.inf

# ------------------------------------------------------------------------------------------------------------- Skeleton

_CENTER_JOINTS = ("pelvis", "spine", "chest", "neck", "head")
_FINGERS = ("thumb", "index", "middle", "ring", "pinky")
_SIDE_JOINTS = ("shoulder", "elbow", "wrist", "hip", "knee", "ankle") + tuple(
    f"{finger}{level}" for finger in _FINGERS for level in (1, 2, 3)
)
_BASE_PARENT = {
    "spine": "pelvis", "chest": "spine", "neck": "chest", "head": "neck",
    "shoulder": "chest", "elbow": "shoulder", "wrist": "elbow", "hip": "pelvis", "knee": "hip", "ankle": "knee",
}
for _finger in _FINGERS:
    _BASE_PARENT[f"{_finger}1"] = "wrist"
    _BASE_PARENT[f"{_finger}2"] = f"{_finger}1"
    _BASE_PARENT[f"{_finger}3"] = f"{_finger}2"

JOINT_NAMES = _CENTER_JOINTS + tuple(f"{s}_{j}" for s in ("l", "r") for j in _SIDE_JOINTS)
J = {name: index for index, name in enumerate(JOINT_NAMES)}
NUM_JOINTS = len(JOINT_NAMES)


def _base(name):
    return name[2:] if name[:2] in ("l_", "r_") else name


JOINT_SIDE = np.array([1 if n.startswith("l_") else -1 if n.startswith("r_") else 0 for n in JOINT_NAMES])
JOINT_PARENT = np.array(
    [-1 if n == "pelvis" else J[(n[:2] if n[:2] in ("l_", "r_") and _BASE_PARENT[_base(n)] in _SIDE_JOINTS else "")
                                + _BASE_PARENT[_base(n)]] for n in JOINT_NAMES]
)
MIRROR_JOINT = np.array(
    [J["r_" + n[2:]] if n.startswith("l_") else J["l_" + n[2:]] if n.startswith("r_") else J[n] for n in JOINT_NAMES]
)

# Joint limits in degrees, ((rx_lo, rx_hi), (ry_lo, ry_hi), (rz_lo, rz_hi)), left-side convention.
_LIMITS_DEG = {
    "pelvis": ((-10, 10), (-10, 10), (-6, 6)),
    "spine": ((-20, 45), (-30, 30), (-20, 20)),
    "chest": ((-15, 30), (-25, 25), (-15, 15)),
    "neck": ((-25, 35), (-35, 35), (-20, 20)),
    "head": ((-25, 30), (-45, 45), (-20, 20)),
    "shoulder": ((-170, 60), (-80, 90), (-20, 175)),
    "elbow": ((-150, 0), (-80, 80), (0, 0)),
    "wrist": ((-30, 25), (0, 0), (-70, 70)),
    "hip": ((-120, 30), (-35, 35), (-15, 50)),
    "knee": ((0, 145), (0, 0), (0, 0)),
    "ankle": ((-25, 45), (-10, 10), (-15, 15)),
    "thumb1": ((-30, 30), (-20, 20), (-45, 20)),
    "thumb2": ((0, 0), (0, 0), (-60, 5)),
    "thumb3": ((0, 0), (0, 0), (-80, 10)),
}
for _finger in _FINGERS[1:]:
    _LIMITS_DEG[f"{_finger}1"] = ((-20, 20), (0, 0), (-90, 10))
    _LIMITS_DEG[f"{_finger}2"] = ((0, 0), (0, 0), (-105, 0))
    _LIMITS_DEG[f"{_finger}3"] = ((0, 0), (0, 0), (-80, 0))

JOINT_LIMITS = np.deg2rad(np.array([_LIMITS_DEG[_base(n)] for n in JOINT_NAMES], dtype=np.float64))
"""`(num_joints, 3, 2)` lower/upper limits in radians of (rx, ry, rz)."""

_NOISE_DEG = {
    "pelvis": (3, 3, 2), "spine": (6, 8, 5), "chest": (5, 6, 4), "neck": (8, 12, 6), "head": (8, 15, 6),
    "shoulder": (14, 20, 12), "elbow": (14, 20, 0), "wrist": (12, 0, 18), "hip": (10, 8, 5),
    "knee": (10, 0, 0), "ankle": (8, 4, 4),
}

# Pose templates, degrees. A key without side prefix applies to both sides.
_TEMPLATES = {
    "stand": {"shoulder": (5, 0, 10), "elbow": (-12, 0, 0), "hip": (0, 0, 4), "knee": (4, 0, 0)},
    "walk": {"l_hip": (-25, 0, 3), "r_hip": (18, 0, 3), "l_knee": (12, 0, 0), "r_knee": (40, 0, 0),
             "l_ankle": (-10, 0, 0), "r_ankle": (20, 0, 0), "l_shoulder": (22, 0, 8), "r_shoulder": (-25, 0, 8),
             "elbow": (-30, 0, 0)},
    "t_pose": {"shoulder": (0, 0, 88), "elbow": (-5, 0, 0)},
    "arms_up": {"shoulder": (-10, 0, 150), "elbow": (-20, 0, 0)},
    "reach": {"l_shoulder": (-85, 0, 12), "l_elbow": (-10, 0, 0), "r_shoulder": (8, 0, 10), "r_elbow": (-15, 0, 0)},
    "hold": {"shoulder": (-30, 35, 12), "elbow": (-95, 0, 0)},
    "wave": {"r_shoulder": (0, 85, 95), "r_elbow": (-110, 0, 0), "l_shoulder": (5, 0, 8), "l_elbow": (-10, 0, 0)},
    "akimbo": {"shoulder": (8, -30, 40), "elbow": (-100, 0, 0)},
    "sit": {"hip": (-88, 0, 8), "knee": (92, 0, 0), "shoulder": (-20, 0, 8), "elbow": (-55, 0, 0), "spine": (8, 0, 0)},
    "squat": {"hip": (-110, 0, 22), "knee": (128, 0, 0), "ankle": (-22, 0, 0), "spine": (28, 0, 0),
              "shoulder": (-70, 0, 12), "elbow": (-20, 0, 0)},
    "lunge": {"l_hip": (-80, 0, 5), "l_knee": (85, 0, 0), "r_hip": (25, 0, 5), "r_knee": (35, 0, 0),
              "shoulder": (0, 0, 20)},
    "kick": {"l_hip": (-70, 0, 8), "l_knee": (15, 0, 0), "shoulder": (-10, 0, 45), "elbow": (-30, 0, 0)},
}
_TEMPLATE_NAMES = tuple(_TEMPLATES) + ("random",)
_TEMPLATE_PROBS = np.array([0.22, 0.17, 0.04, 0.06, 0.07, 0.08, 0.07, 0.05, 0.07, 0.04, 0.04, 0.04, 0.05])
_TEMPLATE_PROBS = _TEMPLATE_PROBS / _TEMPLATE_PROBS.sum()


def _template_array(template):
    out = np.zeros((NUM_JOINTS, 3))
    for key, value in template.items():
        names = [key] if key[:2] in ("l_", "r_") or key in _CENTER_JOINTS else ["l_" + key, "r_" + key]
        for name in names:
            out[J[name]] = value
    return np.deg2rad(out)


_TEMPLATE_ARRAYS = {name: _template_array(t) for name, t in _TEMPLATES.items()}
_NOISE = np.deg2rad(np.array([_NOISE_DEG.get(_base(n), (0, 0, 0)) for n in JOINT_NAMES], dtype=np.float64))


def mirror_pose(pose):
    """Pose of the mirror-image person: left/right rows swapped, centre joints ``(rx, -ry, -rz)``."""
    out = pose[MIRROR_JOINT].copy()
    center = JOINT_SIDE == 0
    out[center, 1:] *= -1.0
    return out


def euler_matrices(angles):
    """``Rz(rz) @ Rx(rx) @ Ry(ry)`` for `(n, 3)` angles (rx, ry, rz) in radians -> `(n, 3, 3)`."""
    (cx, cy, cz), (sx, sy, sz) = np.cos(angles).T, np.sin(angles).T
    zero, one = np.zeros_like(cx), np.ones_like(cx)
    rx = np.stack([one, zero, zero, zero, cx, -sx, zero, sx, cx], axis=-1).reshape(-1, 3, 3)
    ry = np.stack([cy, zero, sy, zero, one, zero, -sy, zero, cy], axis=-1).reshape(-1, 3, 3)
    rz = np.stack([cz, -sz, zero, sz, cz, zero, zero, zero, one], axis=-1).reshape(-1, 3, 3)
    return rz @ rx @ ry


def _rot_x(deg):
    return euler_matrices(np.deg2rad([[deg, 0.0, 0.0]]))[0]


def _rotation_between(src, dst):
    """Rotation matrix taking unit vector ``src`` to unit vector ``dst`` (Rodrigues)."""
    src = src / np.linalg.norm(src)
    dst = dst / np.linalg.norm(dst)
    v = np.cross(src, dst)
    c = float(np.dot(src, dst))
    vx = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + vx + vx @ vx / (1.0 + c)


_MIRROR = np.array([-1.0, 1.0, 1.0])

# Hand layout of the LEFT hand in the wrist frame at rest (arm hanging, palm facing the body, i.e. -x; thumb
# forward, +z; fingers pointing down, -y). Metres for hand scale 1.
_MCP = {"index": (-0.002, -0.093, 0.031), "middle": (-0.002, -0.095, 0.011), "ring": (-0.002, -0.092, -0.009),
        "pinky": (-0.002, -0.086, -0.027), "thumb": (-0.012, -0.022, 0.026)}
_PHALANGES = {"thumb": (0.046, 0.033, 0.027), "index": (0.043, 0.025, 0.021), "middle": (0.047, 0.029, 0.023),
              "ring": (0.044, 0.027, 0.022), "pinky": (0.034, 0.020, 0.019)}
_FINGER_RADIUS = {"thumb": 0.0115, "index": 0.0095, "middle": 0.0098, "ring": 0.0091, "pinky": 0.0081}
_THUMB_REST = _rotation_between(np.array([0.0, -1.0, 0.0]), np.array([-0.35, -0.65, 0.68]))

_REST = np.tile(np.eye(3), (NUM_JOINTS, 1, 1))
_REST[J["l_thumb1"]] = _THUMB_REST
_REST[J["r_thumb1"]] = _THUMB_REST * _MIRROR[:, None] * _MIRROR[None, :]


# Rest offsets of a 1.75 m reference (left side; the right side is mirrored) and the shape factors that scale them.
_LEFT_OFFSETS = {
    "spine": ((0.0, 0.11, -0.01), "torso"), "chest": ((0.0, 0.16, 0.0), "torso"), "neck": ((0.0, 0.20, -0.01), "torso"),
    "head": ((0.0, 0.12, 0.01), "head"), "shoulder": ((0.175, 0.17, -0.015), "shoulder"),
    "elbow": ((0.0, -0.29, 0.0), "arm"), "wrist": ((0.0, -0.255, 0.0), "arm"), "hip": ((0.085, -0.07, 0.0), "hip"),
    "knee": ((0.0, -0.43, 0.0), "leg"), "ankle": ((0.0, -0.40, 0.0), "leg"),
}
_GROUPS = ("none", "torso", "head", "shoulder", "arm", "hip", "leg", "hand")
_BASE_OFFSETS = np.zeros((NUM_JOINTS, 3))
_OFFSET_GROUP = np.zeros(NUM_JOINTS, dtype=np.int64)
for _j, _name in enumerate(JOINT_NAMES):
    _b = _base(_name)
    if _b in _LEFT_OFFSETS:
        _off, _group = _LEFT_OFFSETS[_b]
    elif _b.endswith("1"):
        _off, _group = _MCP[_b[:-1]], "hand"
    elif _b != "pelvis":
        _off, _group = (0.0, -_PHALANGES[_b[:-1]][int(_b[-1]) - 2], 0.0), "hand"
    else:
        _off, _group = (0.0, 0.0, 0.0), "none"
    _BASE_OFFSETS[_j] = np.array(_off) * (_MIRROR if JOINT_SIDE[_j] < 0 else 1.0)
    _OFFSET_GROUP[_j] = _GROUPS.index(_group)
_EULER_SIGN = np.where((JOINT_SIDE < 0)[:, None], np.array([1.0, -1.0, -1.0]), 1.0)
_DEPTH = np.zeros(NUM_JOINTS, dtype=np.int64)
for _j in range(1, NUM_JOINTS):
    _DEPTH[_j] = _DEPTH[JOINT_PARENT[_j]] + 1
_LEVELS = [np.nonzero(_DEPTH == d)[0] for d in range(1, int(_DEPTH.max()) + 1)]


def joint_offsets(shape):
    """Rest offsets `(num_joints, 3)` of every joint from its parent, in the parent frame (metres)."""
    ts, la, ll, hh = shape["torso_length"], shape["arm_length"], shape["leg_length"], shape["hand"]
    factors = np.array([
        (1.0, 1.0, 1.0), (1.0, ts, 1.0), (1.0, shape["neck"], 1.0), (shape["shoulder_width"], ts, 1.0),
        (1.0, la, 1.0), (shape["hip_width"], 1.0, 1.0), (1.0, ll, 1.0), (hh, hh, hh),
    ])
    return _BASE_OFFSETS * factors[_OFFSET_GROUP] * (shape["height"] / 1.75)


def forward_kinematics(shape, pose):
    """Joint origins `(num_joints, 3)` and frames `(num_joints, 3, 3)` in the body frame, from the `sample_shape`
    factors and `pose` `(num_joints, 3)`: Euler angles (rx, ry, rz) in radians, left convention for both sides (the
    right side is mirrored here)."""
    local = np.matmul(_REST, euler_matrices(pose * _EULER_SIGN))
    offsets = joint_offsets(shape)
    origins = np.zeros((NUM_JOINTS, 3))
    frames = np.empty((NUM_JOINTS, 3, 3))
    frames[0] = local[0]
    for idx in _LEVELS:  # one batched step per tree depth
        parent_frames = frames[JOINT_PARENT[idx]]
        frames[idx] = np.matmul(parent_frames, local[idx])
        origins[idx] = origins[JOINT_PARENT[idx]] + np.einsum("nij,nj->ni", parent_frames, offsets[idx])
    return origins, frames


# ------------------------------------------------------------------------------------------------------------- Sampling

def sample_shape(rng):
    """Body-shape factors of one person (dict of floats); height in metres, the rest relative to 1."""
    u = rng.random(13).tolist()
    child = u[0] < 0.06
    height = 1.05 + 0.4 * u[1] if child else float(np.clip(1.71 + 0.09 * rng.standard_normal(), 1.48, 1.98))
    return {
        "height": height,
        "girth": 0.85 + 0.2 * u[2] if child else 0.82 + 0.48 * u[2],
        "torso_length": 0.94 + 0.12 * u[3],
        "arm_length": 0.94 + 0.12 * u[4],
        "leg_length": (0.94 + 0.12 * u[5]) * (0.92 if child else 1.0),
        "shoulder_width": 0.88 + 0.24 * u[6],
        "hip_width": 0.9 + 0.25 * u[7],
        "head": (0.93 + 0.14 * u[8]) * (1.25 if child else 1.0),
        "hand": 0.9 + 0.2 * u[9],
        "foot": 0.92 + 0.16 * u[10],
        "belly": 0.9 + 0.45 * u[11],
        "neck": 0.9 + 0.2 * u[12],
    }


_SPREAD_DEG = {"index": -8.0, "middle": 0.0, "ring": 6.0, "pinky": 12.0}
_HAND_ROWS = {side: {f: [J[f"{side}_{f}{lvl}"] for lvl in (1, 2, 3)] for f in _FINGERS} for side in ("l", "r")}


def _set_hand_pose(rng, pose, side):
    """Fill the finger Euler angles of one hand in place (grip: open, relaxed, fist or pointing)."""
    grip = rng.choice(4, p=[0.3, 0.45, 0.15, 0.1])
    u = rng.random(3).tolist()
    base = (0.15 * u[0], 0.2 + 0.35 * u[0], 0.8 + 0.2 * u[0], 0.9)[grip]
    spread_scale = 0.3 + 0.9 * u[1]
    jitter = rng.normal(0.0, 0.08, 5).tolist()
    for i, finger in enumerate(_FINGERS):
        rows = _HAND_ROWS[side][finger]
        curl = 0.0 if (grip == 3 and finger == "index") else base
        curl = min(max(curl + jitter[i], 0.0), 1.0)
        if finger == "thumb":
            pose[rows[0]] = (np.deg2rad(20.0 * (u[2] - 0.5)), 0.0, -np.deg2rad(35.0 * curl))
            pose[rows[1], 2] = -np.deg2rad(45.0 * curl)
            pose[rows[2], 2] = -np.deg2rad(60.0 * curl)
        else:
            pose[rows[0]] = (np.deg2rad(_SPREAD_DEG[finger] * (1 - curl) * spread_scale), 0.0, -np.deg2rad(80.0 * curl))
            pose[rows[1], 2] = -np.deg2rad(100.0 * curl)
            pose[rows[2], 2] = -np.deg2rad(70.0 * curl)


def sample_pose(rng):
    """Joint-limited pose `(num_joints, 3)` (radians): a template plus Gaussian noise, clipped to the limits."""
    name = _TEMPLATE_NAMES[rng.choice(len(_TEMPLATE_NAMES), p=_TEMPLATE_PROBS)]
    if name == "random":
        pose = rng.uniform(JOINT_LIMITS[..., 0], JOINT_LIMITS[..., 1]) * 0.6
    else:
        pose = _TEMPLATE_ARRAYS[name] + rng.standard_normal((NUM_JOINTS, 3)) * _NOISE
        if rng.random() < 0.5:
            pose = mirror_pose(pose)
    _set_hand_pose(rng, pose, "l")
    _set_hand_pose(rng, pose, "r")
    return np.clip(pose, JOINT_LIMITS[..., 0], JOINT_LIMITS[..., 1])


_SKIN_TONES = np.array([[0.30, 0.18, 0.12], [0.52, 0.34, 0.23], [0.74, 0.54, 0.41], [0.93, 0.78, 0.67]])
_HAIR_COLORS = np.array([[0.05, 0.04, 0.035], [0.18, 0.11, 0.06], [0.38, 0.24, 0.13], [0.78, 0.63, 0.38],
                         [0.55, 0.22, 0.10], [0.62, 0.62, 0.62]])
_IRIS_COLORS = np.array([[0.30, 0.17, 0.08], [0.20, 0.35, 0.55], [0.25, 0.40, 0.22], [0.45, 0.33, 0.15]])
_TEXTURE_CHOICES = (PLAIN, STRIPES, CHECKS, BLOTCH)
_TEXTURE_CUMPROB = (0.5, 0.7, 0.82, 1.0)


def _unit(x, y, z):
    n = (x * x + y * y + z * z) ** 0.5
    return (x / n, y / n, z / n)


def _material(rng, base, textured):
    """One material: base/second colour in [0, 1], texture kind, frequency (cycles per metre), phase, directions.

    Texture coordinates are body-frame points, so the pattern is a solid texture of the person.
    """
    u = rng.random(14)
    base = np.clip(np.asarray(base, dtype=np.float64), 0.0, 1.0)
    second = base * (0.35 + 0.45 * u[0]) if u[1] < 0.5 else 0.05 + 0.9 * u[2:5]
    kind = PLAIN
    if textured:
        kind = next(k for k, c in zip(_TEXTURE_CHOICES, _TEXTURE_CUMPROB) if u[5] <= c)
    return {
        "base": base, "second": np.clip(second, 0.0, 1.0), "kind": kind, "freq": 4.0 + 18.0 * u[6],
        "phase": float(u[7]),
        "dir1": _unit(0.7 * (u[8] - 0.5), 1.0 + 0.7 * (u[9] - 0.5), 0.7 * (u[10] - 0.5)),
        "dir2": _unit(1.0 + 0.7 * (u[11] - 0.5), 0.7 * (u[12] - 0.5), 0.7 * (u[13] - 0.5)),
    }


def _cloth_color(rng):
    u = rng.random(3).tolist()
    return np.array(colorsys.hsv_to_rgb(u[0], 0.9 * u[1], 0.12 + 0.83 * u[2]))


def sample_appearance(rng):
    """Clothing layout, hair, accessories and the 13-row material table of one person.

    ``materials`` is a dict of arrays with one row per material slot (`SKIN` ... `SCARF`): ``base`` and ``second``
    `(13, 3)` RGB in [0, 1], ``kind`` `(13,)` texture kind, ``freq`` (cycles per metre), ``phase``, and the texture
    directions ``dir1``/``dir2`` `(13, 3)` in the body frame.

    Split thresholds refer to the split coordinate of the primitive they apply to (0 at the proximal end of a limb,
    1 at the distal end). Per-side entries are `(left, right)` tuples so that mirroring swaps them.
    """
    t = 3.0 * rng.random()
    i = min(int(t), 2)
    skin = _SKIN_TONES[i] + (t - i) * (_SKIN_TONES[i + 1] - _SKIN_TONES[i]) + rng.normal(0.0, 0.02, 3)
    hair = _HAIR_COLORS[rng.integers(len(_HAIR_COLORS))] * (0.85 + 0.3 * rng.random())
    layout, hair_style = _clothing_layout(rng)
    u = rng.random(10).tolist()
    table = _sample_materials(rng, skin, hair, u)
    v = rng.random(9).tolist()
    top = layout["top"]
    return {
        **layout,
        "crop": -0.4 + 0.5 * v[0] if (top != "none" and v[1] < 0.1) else -_INF,
        "tunic": -0.2 + 0.6 * v[2] if (top != "none" and v[3] < 0.2) else _INF,
        "skirt_length": 0.2 + 0.25 * v[4],
        "hair_style": hair_style, "hairline": 0.3 * v[5],
        "hat": "cap" if v[6] < 0.07 else "beanie" if v[6] < 0.12 else "none",
        "glasses": bool(v[7] < 0.15), "backpack": bool(v[8] < 0.08),
        "scarf": bool(u[9] < 0.05),
        "materials": table,
    }


def _clothing_layout(rng):
    """Top and bottom kinds, the per-side sleeve, cuff, thigh, shin and sock splits and shoes; and the hair style."""

    def per_side(sampler):
        first = sampler()
        return (first, sampler()) if rng.random() < 0.1 else (first, first)

    top = ("none", "tank", "short", "long")[rng.choice(4, p=[0.05, 0.15, 0.4, 0.4])]
    bottom = ("shorts", "knee", "long", "skirt")[rng.choice(4, p=[0.2, 0.1, 0.55, 0.15])]
    sleeve = per_side(lambda: {"none": -_INF, "tank": -_INF, "short": rng.uniform(0.3, 0.75), "long": _INF}[top])
    cuff = per_side(lambda: rng.uniform(0.75, 1.02) if top == "long" else -_INF)
    thigh = per_side(lambda: {"shorts": rng.uniform(0.2, 0.6), "knee": _INF, "long": _INF, "skirt": -_INF}[bottom])
    shin = per_side(lambda: {"shorts": -_INF, "knee": rng.uniform(0.05, 0.3), "long": rng.uniform(0.85, 1.05),
                             "skirt": -_INF}[bottom])
    shoes = bool(rng.random() < 0.9)
    sock = per_side(lambda: 1.0 - rng.uniform(0.08, 0.5) if shoes and rng.random() < 0.5 else _INF)
    hair_style = ("bald", "short", "long", "bun", "volume")[rng.choice(5, p=[0.07, 0.43, 0.25, 0.1, 0.15])]
    return {"top": top, "bottom": bottom, "sleeve": sleeve, "cuff": cuff, "thigh": thigh, "shin": shin,
            "sock": sock, "shoes": shoes}, hair_style


def _sample_materials(rng, skin, hair, u):
    """The material table (dict of per-slot arrays) from the skin and hair colours and the uniforms ``u``."""
    materials = [None] * NUM_MATERIALS
    materials[SKIN] = _material(rng, skin, textured=False)
    materials[HAIR] = _material(rng, hair, textured=False)
    materials[HAIR].update(kind=BLOTCH if u[0] < 0.5 else PLAIN, second=np.clip(hair * 0.7, 0, 1),
                           freq=15.0 + 25.0 * u[1])
    materials[TOP] = _material(rng, _cloth_color(rng), textured=True)
    materials[BOTTOM] = _material(rng, _cloth_color(rng), textured=True)
    materials[SHOE] = _material(rng, _cloth_color(rng) * (0.3 + 0.7 * u[2]), textured=False)
    materials[SOCK] = _material(rng, _cloth_color(rng), textured=u[3] < 0.3)
    materials[LIP] = _material(rng, skin * np.array([0.85, 0.6, 0.6]) * (0.8 + 0.2 * u[4]), textured=False)
    materials[EYE] = _material(rng, np.array([0.92, 0.9, 0.87]) * (0.85 + 0.15 * u[5]), textured=False)
    materials[EYE].update(kind=EYEBALL, second=np.clip(_IRIS_COLORS[int(4 * u[6])] * (0.8 + 0.4 * u[7]), 0, 1))
    materials[BROW] = _material(rng, hair * 0.8, textured=False)
    materials[HAT] = _material(rng, _cloth_color(rng), textured=True)
    materials[GLASSES] = _material(rng, np.full(3, 0.03 + 0.17 * u[8]), textured=False)
    materials[BAG] = _material(rng, _cloth_color(rng), textured=True)
    materials[SCARF] = _material(rng, _cloth_color(rng), textured=True)
    return {key: np.array([m[key] for m in materials], dtype=np.int64 if key == "kind" else np.float64)
            for key in ("base", "second", "kind", "freq", "phase", "dir1", "dir2")}


@dataclass
class PersonParams:
    """Everything that defines one person; `build_person` turns it into geometry.

    Attributes:
        shape, appearance (`dict`): `sample_shape`'s body-shape factors; `sample_appearance`'s clothing, hair,
            accessories and materials.
        pose (`(num_joints, 3)`), gaze (`(2,)`): Euler angles (module docstring); eye yaw and pitch (head frame);
            radians.
        rotation (`np.ndarray` of shape `(3, 3)`): body frame -> camera frame (a proper rotation).
        translation (`np.ndarray` of shape `(3,)`): camera-frame position of the body-frame origin, metres.
        texture_sign (`float`): +1, or -1 for a mirrored person (solid textures use ``x * texture_sign``).
    """

    shape: dict
    pose: np.ndarray
    gaze: np.ndarray
    appearance: dict
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))
    translation: np.ndarray = field(default_factory=lambda: np.zeros(3))
    texture_sign: float = 1.0


def sample_person(rng):
    """Random shape, pose, gaze and appearance (placement is left to the scene sampler)."""
    u = rng.random(2).tolist()
    return PersonParams(
        shape=sample_shape(rng),
        pose=sample_pose(rng),
        gaze=np.deg2rad(np.array([50.0 * u[0] - 25.0, 25.0 * u[1] - 15.0])),
        appearance=sample_appearance(rng),
    )


_CAMERA_MIRROR = np.diag([-1.0, 1.0, 1.0])


def mirror_person(person: PersonParams) -> PersonParams:
    """The mirror image of a person under the camera-frame reflection X -> -X.

    Left and right pose rows and per-side clothing are swapped, centre joints and the gaze yaw change sign, the
    placement becomes ``M R M`` / ``M t``, and the solid-texture sign flips.
    """
    appearance = dict(person.appearance)
    for key, value in person.appearance.items():
        if isinstance(value, tuple) and len(value) == 2:
            appearance[key] = (value[1], value[0])
    return PersonParams(
        shape=dict(person.shape),
        pose=mirror_pose(person.pose),
        gaze=np.array([-person.gaze[0], person.gaze[1]]),
        appearance=appearance,
        rotation=_CAMERA_MIRROR @ person.rotation @ _CAMERA_MIRROR,
        translation=_CAMERA_MIRROR @ person.translation,
        texture_sign=-person.texture_sign,
    )
