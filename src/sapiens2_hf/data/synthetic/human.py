"""Procedural articulated human: skeleton, joint-limited pose prior, body shape, clothing, hair, hands, face.

Body frame (metres): x = the subject's left, y = up, z = the direction the subject faces. The pelvis joint is the
origin. Everything on the right side of the body is *defined* as the mirror image (x -> -x) of the left side, in the
local frame of the mirrored joint, and every right-side Euler angle uses the mirrored convention
``(rx, -ry, -rz)``. A person and its mirror image therefore share one code path: `mirror_person` swaps the left and
right parameters, and the builder produces the exact mirror geometry with the correct left/right labels. Right-side
keypoints are the mirror images of the left-side keypoint that ``flip_indices`` pairs them with, so the official
horizontal-flip permutation holds by construction (including the face contours whose numbering is not symmetric).

Joint rotations are ``Rz(rz) @ Rx(rx) @ Ry(ry)`` in the parent frame; at rest every bone runs along +-y, so ``ry`` is
the twist about the bone. Sign conventions (left side): hip/shoulder flexion (limb forward) is ``rx < 0``, knee
flexion ``rx > 0``, elbow flexion ``rx < 0``, abduction (limb outward) ``rz > 0``, finger flexion ``rz < 0``, spine and
neck forward bend ``rx > 0``.

Reference proportions are those of a 1.75 m adult and scale with the sampled height and shape factors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..label_tables import KEYPOINT_FLIP_INDICES
from ...modeling.sapiens2_label_data import NUM_POSE_KEYPOINTS, POSE_KEYPOINT_NAMES, SEGMENTATION_CLASS_NAMES


# ----------------------------------------------------------------------------------------------------------------
# Label ids
# ----------------------------------------------------------------------------------------------------------------

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

# ----------------------------------------------------------------------------------------------------------------
# Skeleton
# ----------------------------------------------------------------------------------------------------------------

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
    cx, cy, cz = np.cos(angles).T
    sx, sy, sz = np.sin(angles).T
    out = np.empty((len(angles), 3, 3))
    # Rx @ Ry first, then Rz on the left.
    m00, m01, m02 = cy, np.zeros_like(cy), sy
    m10, m11, m12 = sx * sy, cx, -sx * cy
    m20, m21, m22 = -cx * sy, sx, cx * cy
    out[:, 0, 0] = cz * m00 - sz * m10
    out[:, 0, 1] = cz * m01 - sz * m11
    out[:, 0, 2] = cz * m02 - sz * m12
    out[:, 1, 0] = sz * m00 + cz * m10
    out[:, 1, 1] = sz * m01 + cz * m11
    out[:, 1, 2] = sz * m02 + cz * m12
    out[:, 2, 0] = m20
    out[:, 2, 1] = m21
    out[:, 2, 2] = m22
    return out


def _rot_x(deg):
    a = np.deg2rad(deg)
    return np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])


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
    """Joint origins `(num_joints, 3)` and frames `(num_joints, 3, 3)` in the body frame.

    Args:
        shape (`dict`): body shape factors (see `sample_shape`).
        pose (`np.ndarray` of shape `(num_joints, 3)`): Euler angles (rx, ry, rz) in radians, left convention for
            both sides (the right side is mirrored here).
    """
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


# ----------------------------------------------------------------------------------------------------------------
# Face constants (head frame, relative to the head-ellipsoid centre, metres for head scale 1, LEFT side)
# ----------------------------------------------------------------------------------------------------------------

HEAD_RADII = np.array([0.078, 0.115, 0.100])
HEAD_CENTER = np.array([0.0, 0.09, 0.02])  # from the head joint
EYE_RADIUS = 0.0125


def _face_z(x, y):
    return HEAD_RADII[2] * np.sqrt(np.maximum(0.0, 1.0 - (x / HEAD_RADII[0]) ** 2 - (y / HEAD_RADII[1]) ** 2))


EYE_CENTER = np.array([0.031, 0.012, _face_z(0.031, 0.012) - 0.6 * EYE_RADIUS])
NOSE_CENTER = np.array([0.0, -0.02, _face_z(0.0, -0.02) - 0.003])
NOSE_RADII = np.array([0.012, 0.027, 0.018])
NOSE_AXES = _rot_x(-20.0)
UPPER_LIP_CENTER = np.array([0.0, -0.051, _face_z(0.0, -0.051) - 0.003])
UPPER_LIP_RADII = np.array([0.024, 0.0072, 0.011])
LOWER_LIP_CENTER = np.array([0.0, -0.0645, _face_z(0.0, -0.0645) - 0.004])
LOWER_LIP_RADII = np.array([0.022, 0.0078, 0.011])
EAR_CENTER = np.array([0.076, 0.0, -0.01])
EAR_RADII = np.array([0.012, 0.032, 0.02])
EAR_AXES = _rot_x(-12.0)
BROW_INNER = np.array([0.013, 0.038, _face_z(0.013, 0.038) + 0.0005])
BROW_OUTER = np.array([0.054, 0.036, _face_z(0.054, 0.036) + 0.0005])
BROW_RADIUS = 0.0035
HAIR_SPLIT_DIR = np.array([0.0, 0.75, -0.66]) / np.linalg.norm([0.0, 0.75, -0.66])


def _eye_opening_point(phi):
    """Point where the eyeball leaves the head ellipsoid at polar angle ``phi`` (0 = lateral, pi/2 = up)."""
    lo, hi = 0.0, np.pi

    def point(alpha):
        direction = np.array([np.sin(alpha) * np.cos(phi), np.sin(alpha) * np.sin(phi), np.cos(alpha)])
        return EYE_CENTER + EYE_RADIUS * direction

    for _ in range(48):
        mid = 0.5 * (lo + hi)
        if np.sum((point(mid) / HEAD_RADII) ** 2) > 1.0:
            lo = mid
        else:
            hi = mid
    return point(0.5 * (lo + hi))


# Lash lines: the rim of the visible eyeball cap (no eyelid geometry). Angles: 0 outer corner, 90 top, 180 inner.
_LASH = {
    "l_outer_end_of_upper_lash_line": 8.0, "l_centerpoint_of_upper_lash_line": 90.0,
    "l_inner_end_of_upper_lash_line": 172.0, "l_inner_end_of_lower_lash_line": 188.0,
    "l_centerpoint_of_lower_lash_line": 270.0, "l_outer_end_of_lower_lash_line": 352.0,
}
LASH_POINTS = {name: _eye_opening_point(np.deg2rad(deg)) for name, deg in _LASH.items()}


def _ellipsoid_point(center, axes, radii, direction):
    """Surface point of an ellipsoid at local unit-sphere direction ``direction``."""
    d = np.asarray(direction, dtype=np.float64)
    return center + axes @ (radii * d / np.linalg.norm(d))


def _ellipsoid_extreme(center, axes, radii, direction):
    """Surface point of an ellipsoid that lies furthest along ``direction``."""
    u = np.asarray(direction, dtype=np.float64)
    m = axes @ np.diag(radii**2) @ axes.T
    mu = m @ u
    return center + mu / np.sqrt(u @ mu)


# Face keypoints that do not depend on the gaze, head frame relative to the head centre. Each entry:
# (left-form keypoint name, position, owner part names, depth tolerance in metres).
_EYE = np.eye(3)
FACE_KEYPOINTS_CENTER = [
    ("nose", _ellipsoid_extreme(NOSE_CENTER, NOSE_AXES, NOSE_RADII, (0, 0, 1)), ("nose",), 0.004),
    ("tip_of_nose", _ellipsoid_extreme(NOSE_CENTER, NOSE_AXES, NOSE_RADII, (0, 0, 1)), ("nose",), 0.004),
    ("bottom_center_of_nose", _ellipsoid_extreme(NOSE_CENTER, NOSE_AXES, NOSE_RADII, (0, -1, 0.25)),
     ("nose", "head", "upper_lip"), 0.006),
    ("center_of_glabella", np.array([0.0, 0.033, _face_z(0.0, 0.033)]), ("head", "l_brow", "r_brow"), 0.006),
    ("center_of_nose_root", np.array([0.0, 0.012, _face_z(0.0, 0.012)]), ("head", "nose"), 0.006),
    ("center_of_labiomental_groove", np.array([0.0, -0.08, _face_z(0.0, -0.08)]), ("head", "lower_lip"), 0.006),
    ("tip_of_chin", np.array([0.0, -0.1, _face_z(0.0, -0.1)]), ("head",), 0.006),
    ("center_of_cupid_bow", _ellipsoid_point(UPPER_LIP_CENTER, _EYE, UPPER_LIP_RADII, (0, 0.8, 0.6)),
     ("upper_lip", "head", "nose"), 0.006),
    ("center_of_lower_outer_lip", _ellipsoid_point(LOWER_LIP_CENTER, _EYE, LOWER_LIP_RADII, (0, -0.8, 0.6)),
     ("lower_lip", "head"), 0.006),
    ("center_of_upper_inner_lip", _ellipsoid_point(UPPER_LIP_CENTER, _EYE, UPPER_LIP_RADII, (0, -0.8, 0.6)),
     ("upper_lip", "lower_lip"), 0.006),
    ("center_of_lower_inner_lip", _ellipsoid_point(LOWER_LIP_CENTER, _EYE, LOWER_LIP_RADII, (0, 0.8, 0.6)),
     ("upper_lip", "lower_lip"), 0.006),
]
FACE_KEYPOINTS_SIDE = [
    ("l_outer_corner_of_nose", _ellipsoid_extreme(NOSE_CENTER, NOSE_AXES, NOSE_RADII, (1, -0.4, 0.3)),
     ("nose", "head"), 0.006),
    ("l_outer_corner_of_mouth", _ellipsoid_point(UPPER_LIP_CENTER, _EYE, UPPER_LIP_RADII, (1, -0.15, 0.2)),
     ("upper_lip", "lower_lip", "head"), 0.008),
    ("l_inner_corner_of_mouth", _ellipsoid_point(UPPER_LIP_CENTER, _EYE, UPPER_LIP_RADII, (0.85, -0.5, 0.2)),
     ("upper_lip", "lower_lip", "head"), 0.008),
    ("upper_startpoint_of_l_eyebrow", BROW_INNER + BROW_RADIUS * np.array([0.0, 0.8, 0.5]), ("{t}_brow", "head"),
     0.006),
    ("lower_startpoint_of_l_eyebrow", BROW_INNER + BROW_RADIUS * np.array([0.0, -0.8, 0.5]), ("{t}_brow", "head"),
     0.006),
    ("end_of_l_eyebrow", BROW_OUTER + BROW_RADIUS * np.array([0.6, 0.0, 0.6]), ("{t}_brow", "head"), 0.006),
    ("left_ear", _ellipsoid_extreme(EAR_CENTER, EAR_AXES, EAR_RADII, (1, 0, 0)), ("{t}_ear",), EAR_RADII[2] + 0.004),
] + [(name, point, ("{t}_eye", "head"), 0.004) for name, point in LASH_POINTS.items()]

def gaze_direction(gaze):
    """Unit gaze vector in the head frame for (yaw, pitch) radians; yaw > 0 looks to the subject's left."""
    yaw, pitch = gaze
    return np.array([np.sin(yaw) * np.cos(pitch), np.sin(pitch), np.cos(yaw) * np.cos(pitch)])


# ----------------------------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------------------------

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


def _hsv_to_rgb(h, s, v):
    i = int(h * 6.0) % 6
    f = h * 6.0 - int(h * 6.0)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    return np.array([(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i])


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
    return _hsv_to_rgb(u[0], 0.9 * u[1], 0.12 + 0.83 * u[2])


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
    u = rng.random(10).tolist()

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
    v = rng.random(9).tolist()
    table = {key: np.array([m[key] for m in materials], dtype=np.int64 if key == "kind" else np.float64)
             for key in ("base", "second", "kind", "freq", "phase", "dir1", "dir2")}
    return {
        "top": top, "bottom": bottom, "sleeve": sleeve, "cuff": cuff, "thigh": thigh, "shin": shin,
        "sock": sock, "shoes": shoes,
        "crop": -0.4 + 0.5 * v[0] if (top != "none" and v[1] < 0.1) else -_INF,
        "tunic": -0.2 + 0.6 * v[2] if (top != "none" and v[3] < 0.2) else _INF,
        "skirt_length": 0.2 + 0.25 * v[4],
        "hair_style": hair_style, "hairline": 0.3 * v[5],
        "hat": "cap" if v[6] < 0.07 else "beanie" if v[6] < 0.12 else "none",
        "glasses": bool(v[7] < 0.15), "backpack": bool(v[8] < 0.08),
        "scarf": bool(u[9] < 0.05),
        "materials": table,
    }


@dataclass
class PersonParams:
    """Everything that defines one person; `build_person` turns it into geometry.

    Attributes:
        shape (`dict`): body-shape factors (`sample_shape`).
        pose (`np.ndarray` of shape `(num_joints, 3)`): Euler angles in radians (module docstring).
        gaze (`np.ndarray` of shape `(2,)`): eye yaw and pitch in radians, head frame.
        appearance (`dict`): clothing, hair, accessories and materials (`sample_appearance`).
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


# ----------------------------------------------------------------------------------------------------------------
# Geometry
# ----------------------------------------------------------------------------------------------------------------

ELLIPSOID_CODE = 10_000
"""Keypoint owner codes: a round cone ``i`` is ``i``, an ellipsoid ``i`` is ``ELLIPSOID_CODE + i``."""


@dataclass
class PersonGeometry:
    """Primitives and keypoints of one person in the BODY frame (metres).

    Required primitives come first (same order for every person), optional ones (accessories, hair volumes, skirt)
    last, within each kind.

    Attributes:
        cone_a, cone_b (`(num_cones, 3)`), cone_ra, cone_rb (`(num_cones,)`): round cones.
        ellipsoid_center (`(num_ellipsoids, 3)`), ellipsoid_axes (`(num_ellipsoids, 3, 3)`),
            ellipsoid_radii (`(num_ellipsoids, 3)`): ellipsoids.
        cone_attrs (`(num_cones, 8)`), ellipsoid_attrs (`(num_ellipsoids, 11)`): per primitive
            ``(class0, class1, class2, material0, material1, material2, s1, s2[, split_dir xyz])``; the region of a
            surface point is 0 below ``s1``, 1 between, 2 from ``s2`` on, where the split coordinate is the axial
            position in ``[0, 1]`` for cones and ``dot(q, split_dir)`` for ellipsoids (``q`` in unit-sphere
            coordinates).
        keypoints (`(308, 3)`): keypoint positions (zeros where not modelled).
        cone_names, ellipsoid_names (`list[str]`).
    """

    cone_a: np.ndarray
    cone_b: np.ndarray
    cone_ra: np.ndarray
    cone_rb: np.ndarray
    ellipsoid_center: np.ndarray
    ellipsoid_axes: np.ndarray
    ellipsoid_radii: np.ndarray
    cone_attrs: np.ndarray
    ellipsoid_attrs: np.ndarray
    keypoints: np.ndarray
    cone_names: list
    ellipsoid_names: list

    def lowest_point(self):
        """Smallest body-frame y of any primitive (the sole of the lowest foot when standing)."""
        low_c = np.min(np.minimum(self.cone_a[:, 1] - self.cone_ra, self.cone_b[:, 1] - self.cone_rb))
        half_y = np.sqrt(np.einsum("nj,nj->n", self.ellipsoid_axes[:, 1, :] ** 2, self.ellipsoid_radii**2))
        return float(min(low_c, np.min(self.ellipsoid_center[:, 1] - half_y)))


def _t(values):
    return tuple(float(v) for v in values)


# Pre-computed head-frame positions (head joint origin, reference head size), LEFT side, as plain tuples.
_HC = HEAD_CENTER
_FOOT_HEEL = np.array([0.0, -0.05, -0.06])
_FOOT_TOE = np.array([0.0, -0.06, 0.17])
_FOOT_Z = (_FOOT_TOE - _FOOT_HEEL) / np.linalg.norm(_FOOT_TOE - _FOOT_HEEL)
_FOOT_Y = np.array([0.0, 1.0, 0.0]) - _FOOT_Z[1] * _FOOT_Z
_FOOT_Y /= np.linalg.norm(_FOOT_Y)
FOOT_AXES = np.stack([np.cross(_FOOT_Y, _FOOT_Z), _FOOT_Y, _FOOT_Z], axis=1)
_FOOT_VARIANTS = {}
for _shoes in (False, True):
    _radii = np.array([0.047, 0.038, 0.135]) * (np.array([1.1, 1.12, 1.06]) if _shoes else 1.0)
    _center = 0.5 * (_FOOT_HEEL + _FOOT_TOE) + (np.array([0.0, -0.004, 0.004]) if _shoes else 0.0)
    _points = [
        (name, _t(_ellipsoid_point(_center, FOOT_AXES, _radii, d)))
        for name, d in (("left_big_toe", (-0.35, -0.2, 0.92)), ("left_small_toe", (0.75, -0.25, 0.6)),
                        ("left_heel", (0.0, -0.4, -0.92)))
    ]
    _FOOT_VARIANTS[_shoes] = (_t(_center), _t(_radii), _points)
_M3 = np.diag(_MIRROR)
_AXES_RIGHT = {id(a): _M3 @ a for a in (np.eye(3), EAR_AXES, FOOT_AXES)}
_BRIM_AXES = _rot_x(-8.0)
_I3 = np.eye(3)

_FACE_CENTER_ROWS = [(KP[name], _t(_HC + p)) for name, p, _owners, _tol in FACE_KEYPOINTS_CENTER]
_FACE_SIDE_ROWS = [(KP[name], int(FLIP[KP[name]]), _t(_HC + p)) for name, p, _owners, _tol in FACE_KEYPOINTS_SIDE]
_KP_FINGER = {"thumb": "thumb", "index": "forefinger", "middle": "middle_finger", "ring": "ring_finger",
              "pinky": "pinky_finger"}


def _side_index(name, side):
    k = KP[name]
    return int(FLIP[k]) if side < 0 else k


# Keypoints that sit exactly on a joint centre: rows (keypoint, joint) for both sides.
_JOINT_KEYPOINTS = [(KP["neck"], J["neck"])]
for _side, _tag in ((1, "l"), (-1, "r")):
    for _kp, _joint in (("left_shoulder", "shoulder"), ("left_elbow", "elbow"), ("left_wrist", "wrist"),
                        ("left_hip", "hip"), ("left_knee", "knee"), ("left_ankle", "ankle")):
        _JOINT_KEYPOINTS.append((_side_index(_kp, _side), J[f"{_tag}_{_joint}"]))
    for _finger, _name in _KP_FINGER.items():
        for _suffix, _lvl in (("_third_joint", 1), ("2", 2), ("3", 3)):
            _JOINT_KEYPOINTS.append((_side_index(f"left_{_name}{_suffix}", _side), J[f"{_tag}_{_finger}{_lvl}"]))
_JOINT_KP_ROWS = [(k, j, j, 0.0, 0.0, 0.0) for k, j in _JOINT_KEYPOINTS]

_EYE_CLOCK_NAMES = [f"l_border_of_{p}_{c}" for p in ("iris", "pupil") for c in ("12", "3", "6", "9")]
_EYE_CLOCK_ANGLES = np.array(
    [(a, np.deg2rad(th)) for a in (IRIS_ANGLE, PUPIL_ANGLE) for th in (0.0, 90.0, 180.0, 270.0)]
)  # (8, 2): (angle from the gaze axis, clock angle from 12 o'clock towards 3 o'clock)
_EYE_CENTER_NAMES = ("left_eye", "l_center_of_iris", "l_center_of_pupil")


def _eyeball_frame(g):
    """Columns (lateral, up, gaze) for a unit gaze vector ``g`` (head frame)."""
    ux, uy, uz = -g[1] * g[0], 1.0 - g[1] * g[1], -g[1] * g[2]
    n = (ux * ux + uy * uy + uz * uz) ** 0.5
    ux, uy, uz = ux / n, uy / n, uz / n
    lx, ly, lz = uy * g[2] - uz * g[1], uz * g[0] - ux * g[2], ux * g[1] - uy * g[0]
    return np.array([[lx, ux, g[0]], [ly, uy, g[1]], [lz, uz, g[2]]])


def _attr(classes, materials, s1=_INF, s2=_INF):
    c = (classes,) * 3 if isinstance(classes, int) else classes
    m = (materials,) * 3 if isinstance(materials, int) else materials
    return (*c, *m, s1, s2)


def build_person(person: PersonParams) -> PersonGeometry:
    """Primitives and keypoints of a person in its body frame (see `PersonGeometry`)."""
    shape, app = person.shape, person.appearance
    s = shape["height"] / 1.75
    g = shape["girth"]
    gt = 1.0 + 0.8 * (g - 1.0)
    hd = s * shape["head"]
    hh = s * shape["hand"]
    fs = s * shape["foot"]
    o, G = forward_kinematics(shape, person.pose)

    cones, cone_attrs, cone_names = [], [], []
    opt_cones, opt_cone_attrs, opt_cone_names = [], [], []
    ells, ell_axes, ell_attrs, ell_names = [], [], [], []
    opt_ells, opt_ell_axes, opt_ell_attrs, opt_ell_names = [], [], [], []
    kp_rows = list(_JOINT_KP_ROWS)

    JP, JS, JC, JN, JH = J["pelvis"], J["spine"], J["chest"], J["neck"], J["head"]
    SEG_UP = SEG["Upper_Clothing"] if app["top"] != "none" else SEG["Torso"]
    MAT_UP = TOP if app["top"] != "none" else SKIN
    FN, HAIRC, LOW = SEG["Face_Neck"], SEG["Hair"], SEG["Lower_Clothing"]
    split_y = (0.0, 1.0, 0.0)

    # ---- torso, neck, head (required) ---------------------------------------------------------------------------
    ells.append((JP, JP, 0.0, -0.02 * s, -0.01 * s, 0.165 * shape["hip_width"] * s * gt, 0.14 * s, 0.11 * s * gt))
    ell_axes.append(_I3)
    ell_attrs.append(_attr((LOW, SEG["Upper_Clothing"], SEG["Upper_Clothing"]), (BOTTOM, TOP, TOP),
                           app["tunic"], app["tunic"]) + split_y)
    ell_names.append("pelvis")
    ells.append((JS, JS, 0.0, 0.085 * s, 0.005 * s, 0.148 * gt * s, 0.16 * s, 0.10 * gt * shape["belly"] * s))
    ell_axes.append(_I3)
    ell_attrs.append(_attr((SEG["Torso"], SEG_UP, SEG_UP), (SKIN, MAT_UP, MAT_UP), app["crop"], app["crop"]) + split_y)
    ell_names.append("abdomen")
    ells.append((JC, JC, 0.0, 0.06 * s, 0.005 * s, 0.165 * shape["shoulder_width"] * s * gt, 0.165 * s,
                 0.11 * s * gt))
    ell_axes.append(_I3)
    ell_attrs.append(_attr(SEG_UP, MAT_UP) + split_y)
    ell_names.append("chest")

    bald = app["hair_style"] == "bald"
    line = _INF if bald else app["hairline"]
    ells.append((JH, JH, *(_HC * hd), *(HEAD_RADII * hd)))
    ell_axes.append(_I3)
    ell_attrs.append(_attr((FN, HAIRC, HAIRC), (SKIN, HAIR, HAIR), line, line) + _t(HAIR_SPLIT_DIR))
    ell_names.append("head")
    for name, center, axes, radii, cls, mat in (
        ("nose", NOSE_CENTER, NOSE_AXES, NOSE_RADII, FN, SKIN),
        ("upper_lip", UPPER_LIP_CENTER, _I3, UPPER_LIP_RADII, SEG["Upper_Lip"], LIP),
        ("lower_lip", LOWER_LIP_CENTER, _I3, LOWER_LIP_RADII, SEG["Lower_Lip"], LIP),
    ):
        ells.append((JH, JH, *((_HC + center) * hd), *(radii * hd)))
        ell_axes.append(axes)
        ell_attrs.append(_attr(cls, mat) + split_y)
        ell_names.append(name)

    neck_r = 0.055 * s * shape["neck"] * (1.0 + 0.5 * (g - 1.0))
    cones.append((JC, JC, 0.0, 0.17 * s, -0.01 * s, JH, JH, 0.0, 0.03 * s, 0.0, neck_r, 0.92 * neck_r))
    cone_attrs.append(_attr(FN, SKIN))
    cone_names.append("neck")

    for k, pos in _FACE_CENTER_ROWS:
        kp_rows.append((k, JH, JH, pos[0] * hd, pos[1] * hd, pos[2] * hd))

    gaze_head = gaze_direction(person.gaze)
    foot_center, foot_radii, foot_points = _FOOT_VARIANTS[app["shoes"]]

    # ---- both sides (required) ----------------------------------------------------------------------------------
    for side, tag, cls in ((1, "l", "Left"), (-1, "r", "Right")):
        k = 0 if side > 0 else 1
        sf = float(side)
        jsh, jel, jwr = J[f"{tag}_shoulder"], J[f"{tag}_elbow"], J[f"{tag}_wrist"]
        jhp, jkn, jan = J[f"{tag}_hip"], J[f"{tag}_knee"], J[f"{tag}_ankle"]

        # face parts (head frame)
        g_local = gaze_head * (sf, 1.0, 1.0)
        eye_axes = _eyeball_frame(g_local)
        ells.append((JH, JH, sf * (_HC[0] + EYE_CENTER[0]) * hd, (_HC[1] + EYE_CENTER[1]) * hd,
                     (_HC[2] + EYE_CENTER[2]) * hd, EYE_RADIUS * hd, EYE_RADIUS * hd, EYE_RADIUS * hd))
        ell_axes.append(_M3 @ eye_axes if side < 0 else eye_axes)
        ell_attrs.append(_attr(FN, EYE) + split_y)
        ell_names.append(f"{tag}_eye")
        ells.append((JH, JH, sf * (_HC[0] + EAR_CENTER[0]) * hd, (_HC[1] + EAR_CENTER[1]) * hd,
                     (_HC[2] + EAR_CENTER[2]) * hd, *(EAR_RADII * hd)))
        ell_axes.append(EAR_AXES if side > 0 else _AXES_RIGHT[id(EAR_AXES)])
        ell_attrs.append(_attr(FN, SKIN) + split_y)
        ell_names.append(f"{tag}_ear")
        bi = (_HC + BROW_INNER) * hd
        bo = (_HC + BROW_OUTER) * hd
        cones.append((JH, JH, sf * bi[0], bi[1], bi[2], JH, JH, sf * bo[0], bo[1], bo[2], BROW_RADIUS * hd,
                      0.8 * BROW_RADIUS * hd))
        cone_attrs.append(_attr(FN, BROW))
        cone_names.append(f"{tag}_brow")
        for k_left, k_right, pos in _FACE_SIDE_ROWS:
            kp_rows.append((k_left if side > 0 else k_right, JH, JH, sf * pos[0] * hd, pos[1] * hd, pos[2] * hd))
        # iris / pupil: centre and clock positions on the eyeball (left clock: 3 o'clock towards +x)
        alpha, theta = _EYE_CLOCK_ANGLES[:, 0], _EYE_CLOCK_ANGLES[:, 1]
        ring = np.cos(theta)[:, None] * eye_axes[:, 1] + np.sin(theta)[:, None] * eye_axes[:, 0]  # up, lateral
        dirs = np.cos(alpha)[:, None] * g_local + np.sin(alpha)[:, None] * ring
        pts = (_HC + EYE_CENTER + EYE_RADIUS * np.vstack([g_local[None], dirs])) * hd  # (9, 3) left canonical
        pts[:, 0] *= sf
        for name, p in zip(("left_eye",) + tuple(_EYE_CLOCK_NAMES), pts.tolist()):
            kp_rows.append((_side_index(name, side), JH, JH, *p))
        for name in _EYE_CENTER_NAMES[1:]:
            kp_rows.append((_side_index(name, side), JH, JH, *pts[0].tolist()))

        # arms
        r_sh, r_el, r_wr = 0.05 * s * g, 0.037 * s * g, 0.026 * s * (0.5 + 0.5 * g)
        cones.append((JC, JC, sf * 0.05 * s, 0.185 * s, -0.02 * s, jsh, jsh, 0.0, 0.0, 0.0,
                      0.055 * s * gt, 0.05 * s * gt))
        cone_attrs.append(_attr(SEG_UP, MAT_UP))
        cone_names.append(f"{tag}_trapezius")
        cones.append((jsh, jsh, 0.0, 0.0, 0.0, jel, jel, 0.0, 0.0, 0.0, r_sh, r_el))
        cone_attrs.append(_attr((SEG["Upper_Clothing"], SEG[f"{cls}_Upper_Arm"], SEG[f"{cls}_Upper_Arm"]),
                                (TOP, SKIN, SKIN), app["sleeve"][k], app["sleeve"][k]))
        cone_names.append(f"{tag}_upper_arm")
        cones.append((jel, jel, 0.0, 0.0, 0.0, jwr, jwr, 0.0, 0.0, 0.0, 1.02 * r_el, r_wr))
        cone_attrs.append(_attr((SEG["Upper_Clothing"], SEG[f"{cls}_Lower_Arm"], SEG[f"{cls}_Lower_Arm"]),
                                (TOP, SKIN, SKIN), app["cuff"][k], app["cuff"][k]))
        cone_names.append(f"{tag}_forearm")
        # olecranon / cubital fossa: on the elbow surface, behind / in front along the upper-arm frame's z axis
        kp_rows.append((_side_index("left_olecranon", side), jel, jsh, 0.0, 0.0, -r_el))
        kp_rows.append((_side_index("left_cubital_fossa", side), jel, jsh, 0.0, 0.0, 0.95 * r_el))
        kp_rows.append((_side_index("left_acromion", side), jsh, JC, 0.0, 0.95 * r_sh, 0.0))

        # hand
        pc = 0.7 + 0.3 * g
        ells.append((jwr, jwr, -0.003 * hh * sf, -0.048 * hh, 0.0, 0.014 * hh * pc, 0.05 * hh * pc, 0.043 * hh * pc))
        ell_axes.append(_I3 if side > 0 else _M3)
        ell_attrs.append(_attr(SEG[f"{cls}_Hand"], SKIN) + split_y)
        ell_names.append(f"{tag}_palm")
        hand_cls = SEG[f"{cls}_Hand"]
        for finger in _FINGERS:
            radius = _FINGER_RADIUS[finger] * hh
            j1, j2, j3 = (J[f"{tag}_{finger}{lvl}"] for lvl in (1, 2, 3))
            tip_y = -_PHALANGES[finger][2] * hh
            for seg, (ja, jb, by) in enumerate(((j1, j2, 0.0), (j2, j3, 0.0), (j3, j3, tip_y))):
                cones.append((ja, ja, 0.0, 0.0, 0.0, jb, jb, 0.0, by, 0.0, radius * 0.93**seg,
                              radius * 0.93 ** (seg + 1)))
                cone_attrs.append(_attr(hand_cls, SKIN))
                cone_names.append(f"{tag}_{finger}_{seg}")
            kp_rows.append((_side_index(f"left_{_KP_FINGER[finger]}4", side), j3, j3, 0.0, tip_y, 0.0))

        # legs
        cones.append((jhp, jhp, 0.0, 0.0, 0.0, jkn, jkn, 0.0, 0.0, 0.0, 0.085 * s * g, 0.055 * s * (0.5 + 0.5 * g)))
        cone_attrs.append(_attr((LOW, SEG[f"{cls}_Upper_Leg"], SEG[f"{cls}_Upper_Leg"]), (BOTTOM, SKIN, SKIN),
                                app["thigh"][k], app["thigh"][k]))
        cone_names.append(f"{tag}_thigh")
        sock_class = SEG[f"{cls}_Sock"] if app["shoes"] else SEG[f"{cls}_Lower_Leg"]
        cones.append((jkn, jkn, 0.0, 0.0, 0.0, jan, jan, 0.0, 0.0, 0.0, 0.055 * s * (0.5 + 0.5 * g),
                      0.035 * s * (0.6 + 0.4 * g)))
        cone_attrs.append(_attr((LOW, SEG[f"{cls}_Lower_Leg"], sock_class), (BOTTOM, SKIN, SOCK), app["shin"][k],
                                max(app["shin"][k], app["sock"][k])))
        cone_names.append(f"{tag}_shin")
        ells.append((jan, jan, sf * foot_center[0] * fs, foot_center[1] * fs, foot_center[2] * fs,
                     foot_radii[0] * fs, foot_radii[1] * fs, foot_radii[2] * fs))
        ell_axes.append(FOOT_AXES if side > 0 else _AXES_RIGHT[id(FOOT_AXES)])
        ell_attrs.append(_attr(SEG[f"{cls}_Shoe"] if app["shoes"] else SEG[f"{cls}_Foot"],
                               SHOE if app["shoes"] else SKIN) + split_y)
        ell_names.append(f"{tag}_foot")
        for name, p in foot_points:
            kp_rows.append((_side_index(name, side), jan, jan, sf * p[0] * fs, p[1] * fs, p[2] * fs))

    # ---- optional primitives --------------------------------------------------------------------------------------
    if app["bottom"] == "skirt":
        top_r = 0.172 * shape["hip_width"] * gt * s
        length = app["skirt_length"] * 1.75 * s
        opt_cones.append((JP, JP, 0.0, 0.02 * s, -0.005 * s, JP, JP, 0.0, -0.02 * s - length, 0.02 * s, top_r,
                          top_r + 0.16 * length))
        opt_cone_attrs.append(_attr(LOW, BOTTOM))
        opt_cone_names.append("skirt")
    if app["scarf"]:
        opt_cones.append((JN, JN, 0.0, 0.0, 0.0, JN, JN, 0.0, 0.06 * s, 0.012 * s, 1.45 * neck_r, 1.3 * neck_r))
        opt_cone_attrs.append(_attr(SEG["Apparel"], SCARF))
        opt_cone_names.append("scarf")
    if app["backpack"]:
        opt_ells.append((JC, JC, 0.0, 0.03 * s, -(0.11 * gt + 0.065) * s, 0.14 * s, 0.19 * s, 0.07 * s))
        opt_ell_axes.append(_I3)
        opt_ell_attrs.append(_attr(SEG["Apparel"], BAG) + split_y)
        opt_ell_names.append("backpack")
    hair_volume = {"long": ((0.0, -0.09, -0.055), (0.092, 0.17, 0.055)), "bun": ((0.0, 0.09, -0.085), (0.045,) * 3),
                   "volume": ((0.0, 0.02, -0.025), (0.088, 0.13, 0.112))}.get(app["hair_style"])
    if hair_volume is not None:
        opt_ells.append((JH, JH, *((_HC + hair_volume[0]) * hd), *(np.array(hair_volume[1]) * hd)))
        opt_ell_axes.append(_I3)
        opt_ell_attrs.append(_attr(HAIRC, HAIR) + split_y)
        opt_ell_names.append("hair_" + app["hair_style"])
    if app["hat"] != "none":
        opt_ells.append((JH, JH, *((_HC + (0.0, 0.07, -0.005)) * hd), *(np.array([0.086, 0.07, 0.107]) * hd)))
        opt_ell_axes.append(_I3)
        opt_ell_attrs.append(_attr(SEG["Apparel"], HAT) + split_y)
        opt_ell_names.append("hat")
        if app["hat"] == "cap":
            opt_ells.append((JH, JH, *((_HC + (0.0, 0.048, 0.095)) * hd), *(np.array([0.07, 0.007, 0.055]) * hd)))
            opt_ell_axes.append(_BRIM_AXES)
            opt_ell_attrs.append(_attr(SEG["Apparel"], HAT) + split_y)
            opt_ell_names.append("hat_brim")
    if app["glasses"]:
        lens_z = EYE_CENTER[2] + EYE_RADIUS + 0.010
        eg = SEG["Eyeglass"]
        a = (_HC + (-0.011, 0.014, lens_z)) * hd
        b = (_HC + (0.011, 0.014, lens_z)) * hd
        opt_cones.append((JH, JH, *a, JH, JH, *b, 0.0022 * hd, 0.0022 * hd))
        opt_cone_attrs.append(_attr(eg, GLASSES))
        opt_cone_names.append("glasses_bridge")
        for sf, tag in ((1.0, "l"), (-1.0, "r")):
            a = (_HC + (0.051, 0.016, lens_z - 0.004)) * hd
            b = (_HC + (0.077, 0.016, -0.005)) * hd
            opt_cones.append((JH, JH, sf * a[0], a[1], a[2], JH, JH, sf * b[0], b[1], b[2], 0.0022 * hd, 0.0022 * hd))
            opt_cone_attrs.append(_attr(eg, GLASSES))
            opt_cone_names.append(f"{tag}_temple")
            c = (_HC + (EYE_CENTER[0], 0.013, lens_z)) * hd
            opt_ells.append((JH, JH, sf * c[0], c[1], c[2], 0.021 * hd, 0.016 * hd, 0.0025 * hd))
            opt_ell_axes.append(_I3)
            opt_ell_attrs.append(_attr(eg, GLASSES) + split_y)
            opt_ell_names.append(f"{tag}_lens")

    # ---- to body-frame arrays ---------------------------------------------------------------------------------------
    crow = np.array(cones + opt_cones)  # (num_cones, 12)
    ja, fa, jb, fb = (crow[:, i].astype(np.int64) for i in (0, 1, 5, 6))
    cone_a = o[ja] + np.einsum("nij,nj->ni", G[fa], crow[:, 2:5])
    cone_b = o[jb] + np.einsum("nij,nj->ni", G[fb], crow[:, 7:10])
    erow = np.array(ells + opt_ells)  # (num_ellipsoids, 8)
    je, fe = erow[:, 0].astype(np.int64), erow[:, 1].astype(np.int64)
    ell_center = o[je] + np.einsum("nij,nj->ni", G[fe], erow[:, 2:5])
    ell_axes_body = np.matmul(G[fe], np.stack(ell_axes + opt_ell_axes))
    krow = np.array(kp_rows)  # (num_modelled, 6)
    kk, kj, kf = (krow[:, i].astype(np.int64) for i in range(3))
    keypoints = np.zeros((NUM_POSE_KEYPOINTS, 3))
    keypoints[kk] = o[kj] + np.einsum("nij,nj->ni", G[kf], krow[:, 3:6])
    return PersonGeometry(
        cone_a=cone_a, cone_b=cone_b, cone_ra=crow[:, 10].copy(), cone_rb=crow[:, 11].copy(),
        ellipsoid_center=ell_center, ellipsoid_axes=ell_axes_body, ellipsoid_radii=erow[:, 5:8].copy(),
        cone_attrs=np.array(cone_attrs + opt_cone_attrs), ellipsoid_attrs=np.array(ell_attrs + opt_ell_attrs),
        keypoints=keypoints, cone_names=cone_names + opt_cone_names, ellipsoid_names=ell_names + opt_ell_names,
    )


# ----------------------------------------------------------------------------------------------------------------
# Static keypoint tables (owners, tolerances, which keypoints exist)
# ----------------------------------------------------------------------------------------------------------------

def _keypoint_spec():
    """(left-form name, owner part names with ``{t}`` for the side tag, depth tolerance in metres)."""
    spec = [
        ("neck", ("neck", "chest", "l_trapezius", "r_trapezius"), _INF),
        ("left_shoulder", ("{t}_upper_arm", "{t}_trapezius", "chest"), _INF),
        ("left_elbow", ("{t}_upper_arm", "{t}_forearm"), _INF),
        ("left_wrist", ("{t}_forearm", "{t}_palm"), _INF),
        ("left_olecranon", ("{t}_upper_arm", "{t}_forearm"), 0.02),
        ("left_cubital_fossa", ("{t}_upper_arm", "{t}_forearm"), 0.02),
        ("left_acromion", ("{t}_upper_arm", "{t}_trapezius", "chest"), 0.025),
        ("left_hip", ("{t}_thigh", "pelvis"), _INF),
        ("left_knee", ("{t}_thigh", "{t}_shin"), _INF),
        ("left_ankle", ("{t}_shin", "{t}_foot"), _INF),
        ("left_big_toe", ("{t}_foot",), 0.02),
        ("left_small_toe", ("{t}_foot",), 0.02),
        ("left_heel", ("{t}_foot",), 0.02),
        ("left_eye", ("{t}_eye",), 0.004),
        ("l_center_of_iris", ("{t}_eye",), 0.004),
        ("l_center_of_pupil", ("{t}_eye",), 0.004),
    ]
    spec += [(name, ("{t}_eye",), 0.004) for name in _EYE_CLOCK_NAMES]
    for finger, name in _KP_FINGER.items():
        spec += [
            (f"left_{name}_third_joint", ("{t}_palm", f"{{t}}_{finger}_0"), _INF),
            (f"left_{name}2", (f"{{t}}_{finger}_0", f"{{t}}_{finger}_1"), _INF),
            (f"left_{name}3", (f"{{t}}_{finger}_1", f"{{t}}_{finger}_2"), _INF),
            (f"left_{name}4", (f"{{t}}_{finger}_2",), _INF),
        ]
    spec += [(name, owners, tol) for name, _p, owners, tol in FACE_KEYPOINTS_CENTER + FACE_KEYPOINTS_SIDE]
    return spec


def _static_tables():
    reference = build_person(sample_person(np.random.default_rng(0)))
    n_required_cones = 1 + 2 * (4 + 15 + 2)
    n_required_ells = 7 + 2 * 4
    code = {name: i for i, name in enumerate(reference.cone_names[:n_required_cones])}
    code.update({name: ELLIPSOID_CODE + i for i, name in enumerate(reference.ellipsoid_names[:n_required_ells])})
    owners = np.full((NUM_POSE_KEYPOINTS, 4), -1, dtype=np.int64)
    tol = np.full(NUM_POSE_KEYPOINTS, _INF)
    modeled = np.zeros(NUM_POSE_KEYPOINTS, dtype=bool)
    for name, owner_names, tolerance in _keypoint_spec():
        for side, tag in ((1, "l"), (-1, "r")):
            k = _side_index(name, side)
            ids = [code[o_.format(t=tag)] for o_ in owner_names]
            owners[k, : len(ids)] = ids
            tol[k] = tolerance
            modeled[k] = True
    return owners, tol, modeled, n_required_cones, n_required_ells, code


# Static keypoint tables (read-only): owner codes `(308, 4)` (-1 padded; see `ELLIPSOID_CODE`), depth tolerances
# `(308,)` in metres (``inf`` for interior points such as joint centres), which keypoints the model defines `(308,)`
# (124 of them), the number of required (always present) cones / ellipsoids, and the owner code of each required part.
(KEYPOINT_OWNERS, KEYPOINT_TOLERANCE, KEYPOINT_MODELED, NUM_REQUIRED_CONES, NUM_REQUIRED_ELLIPSOIDS,
 REQUIRED_PRIMITIVE_CODES) = _static_tables()
for _table in (KEYPOINT_OWNERS, KEYPOINT_TOLERANCE, KEYPOINT_MODELED):
    _table.flags.writeable = False
