"""Geometry of a person: round cones, ellipsoids and the 308 keypoints in its body frame (`build_person`), the face
constants they are placed from, and the static keypoint tables (owners, depth tolerances, which keypoints exist).

Frames and the left/right mirroring convention are those of `sapiens2_hf.data.synthetic.human`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .human import (
    _FINGER_RADIUS, _FINGERS, _INF, _MIRROR, _PHALANGES, BAG, BOTTOM, BROW, EYE, FLIP, GLASSES, HAIR, HAT, IRIS_ANGLE,
    J, KP, LIP, PUPIL_ANGLE, SCARF, SEG, SHOE, SKIN, SOCK, TOP, PersonParams, _rot_x,
    forward_kinematics, sample_person,
)
from ...modeling.sapiens2_label_data import NUM_POSE_KEYPOINTS

# --------------- Face constants (head frame, relative to the head-ellipsoid centre, metres for head scale 1, LEFT side)

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


# ------------------------------------------------------------------------------------------------------------- Geometry

ELLIPSOID_CODE = 10_000
"""Keypoint owner codes: a round cone ``i`` is ``i``, an ellipsoid ``i`` is ``ELLIPSOID_CODE + i``."""


@dataclass
class PersonGeometry:
    """Primitives and keypoints of one person in the BODY frame (metres).

    Required primitives come first (same order for every person), optional ones (accessories, hair volumes, skirt)
    last, within each kind.

    Attributes:
        cone_a ... ellipsoid_radii: the round cones and ellipsoids, shaped as in `_raycast.Primitives`.
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
    up = np.array([-g[1] * g[0], 1.0 - g[1] * g[1], -g[1] * g[2]])
    up /= np.sqrt(up @ up)
    return np.stack([np.cross(up, g), up, g], axis=1)


def _attr(classes, materials, s1=_INF, s2=_INF):
    c = (classes,) * 3 if isinstance(classes, int) else classes
    m = (materials,) * 3 if isinstance(materials, int) else materials
    return (*c, *m, s1, s2)


_SPLIT_Y = (0.0, 1.0, 0.0)
JP, JS, JC, JN, JH = J["pelvis"], J["spine"], J["chest"], J["neck"], J["head"]
FN, HAIRC, LOW = SEG["Face_Neck"], SEG["Hair"], SEG["Lower_Clothing"]


@dataclass(frozen=True)
class _Size:
    """Length scales of one person: body ``s`` (height / 1.75 m), head ``hd``, hand ``hh``, foot ``fs``; girth ``g``
    and its damped torso form ``gt``; the neck radius (metres)."""

    s: float
    g: float
    gt: float
    hd: float
    hh: float
    fs: float
    neck_r: float

    @classmethod
    def of(cls, shape):
        s = shape["height"] / 1.75
        g = shape["girth"]
        return cls(s=s, g=g, gt=1.0 + 0.8 * (g - 1.0), hd=s * shape["head"], hh=s * shape["hand"],
                   fs=s * shape["foot"], neck_r=0.055 * s * shape["neck"] * (1.0 + 0.5 * (g - 1.0)))


class _Parts:
    """Rows of one person's primitives and keypoints in joint-local coordinates, in build order.

    A cone row is ``(joint_a, frame_a, a_xyz, joint_b, frame_b, b_xyz, radius_a, radius_b)`` (12 numbers), an
    ellipsoid row ``(joint, frame, centre_xyz, radii_xyz)`` (8), a keypoint row ``(keypoint, joint, frame, xyz)`` (6):
    each point is ``origin[joint] + frame_matrix[frame] @ xyz``.
    """

    def __init__(self, keypoint_rows=()):
        self.cones, self.cone_attrs, self.cone_names = [], [], []
        self.ells, self.ell_axes, self.ell_attrs, self.ell_names = [], [], [], []
        self.kp_rows = list(keypoint_rows)

    def cone(self, name, row, attr):
        self.cones.append(row)
        self.cone_attrs.append(attr)
        self.cone_names.append(name)

    def ellipsoid(self, name, row, axes, attr, split=_SPLIT_Y):
        self.ells.append(row)
        self.ell_axes.append(axes)
        self.ell_attrs.append(attr + split)
        self.ell_names.append(name)


def build_person(person: PersonParams) -> PersonGeometry:
    """Primitives and keypoints of a person in its body frame (see `PersonGeometry`)."""
    shape, app = person.shape, person.appearance
    size = _Size.of(shape)
    required, optional = _Parts(_JOINT_KP_ROWS), _Parts()
    _add_trunk(required, size, shape, app)
    _add_head(required, size, app)
    gaze_head = gaze_direction(person.gaze)
    for side, tag, cls in ((1, "l", "Left"), (-1, "r", "Right")):
        _add_face_side(required, size, side, tag, gaze_head)
        _add_arm(required, size, app, side, tag, cls)
        _add_hand(required, size, side, tag, cls)
        _add_leg(required, size, app, side, tag, cls)
    _add_worn(optional, size, shape, app)
    _add_hair_and_hat(optional, size, app)
    if app["glasses"]:
        _add_glasses(optional, size)
    return _to_body_frame(required, optional, *forward_kinematics(shape, person.pose))


def _upper_clothing(app):
    """Segmentation class and material of the upper body: the top, or bare skin."""
    return (SEG["Upper_Clothing"], TOP) if app["top"] != "none" else (SEG["Torso"], SKIN)


def _add_trunk(parts, size, shape, app):
    s, gt = size.s, size.gt
    seg_up, mat_up = _upper_clothing(app)
    parts.ellipsoid("pelvis", (JP, JP, 0.0, -0.02 * s, -0.01 * s, 0.165 * shape["hip_width"] * s * gt, 0.14 * s,
                               0.11 * s * gt), _I3,
                    _attr((LOW, SEG["Upper_Clothing"], SEG["Upper_Clothing"]), (BOTTOM, TOP, TOP), app["tunic"],
                          app["tunic"]))
    parts.ellipsoid("abdomen", (JS, JS, 0.0, 0.085 * s, 0.005 * s, 0.148 * gt * s, 0.16 * s,
                                0.10 * gt * shape["belly"] * s), _I3,
                    _attr((SEG["Torso"], seg_up, seg_up), (SKIN, mat_up, mat_up), app["crop"], app["crop"]))
    parts.ellipsoid("chest", (JC, JC, 0.0, 0.06 * s, 0.005 * s, 0.165 * shape["shoulder_width"] * s * gt, 0.165 * s,
                              0.11 * s * gt), _I3, _attr(seg_up, mat_up))


def _add_head(parts, size, app):
    """Head (face and hair regions), nose, lips, neck and the centre-line face keypoints."""
    s, hd, neck_r = size.s, size.hd, size.neck_r
    line = _INF if app["hair_style"] == "bald" else app["hairline"]
    parts.ellipsoid("head", (JH, JH, *(_HC * hd), *(HEAD_RADII * hd)), _I3,
                    _attr((FN, HAIRC, HAIRC), (SKIN, HAIR, HAIR), line, line), split=_t(HAIR_SPLIT_DIR))
    for name, center, axes, radii, cls, mat in (
        ("nose", NOSE_CENTER, NOSE_AXES, NOSE_RADII, FN, SKIN),
        ("upper_lip", UPPER_LIP_CENTER, _I3, UPPER_LIP_RADII, SEG["Upper_Lip"], LIP),
        ("lower_lip", LOWER_LIP_CENTER, _I3, LOWER_LIP_RADII, SEG["Lower_Lip"], LIP),
    ):
        parts.ellipsoid(name, (JH, JH, *((_HC + center) * hd), *(radii * hd)), axes, _attr(cls, mat))
    parts.cone("neck", (JC, JC, 0.0, 0.17 * s, -0.01 * s, JH, JH, 0.0, 0.03 * s, 0.0, neck_r, 0.92 * neck_r),
               _attr(FN, SKIN))
    for k, pos in _FACE_CENTER_ROWS:
        parts.kp_rows.append((k, JH, JH, pos[0] * hd, pos[1] * hd, pos[2] * hd))


def _add_face_side(parts, size, side, tag, gaze_head):
    """One side's eye (turned to the gaze), ear and brow, and its face, iris and pupil keypoints (head frame)."""
    hd, sf = size.hd, float(side)
    g_local = gaze_head * (sf, 1.0, 1.0)
    eye_axes = _eyeball_frame(g_local)
    parts.ellipsoid(f"{tag}_eye", (JH, JH, sf * (_HC[0] + EYE_CENTER[0]) * hd, (_HC[1] + EYE_CENTER[1]) * hd,
                                   (_HC[2] + EYE_CENTER[2]) * hd, EYE_RADIUS * hd, EYE_RADIUS * hd, EYE_RADIUS * hd),
                    _M3 @ eye_axes if side < 0 else eye_axes, _attr(FN, EYE))
    parts.ellipsoid(f"{tag}_ear", (JH, JH, sf * (_HC[0] + EAR_CENTER[0]) * hd, (_HC[1] + EAR_CENTER[1]) * hd,
                                   (_HC[2] + EAR_CENTER[2]) * hd, *(EAR_RADII * hd)),
                    EAR_AXES if side > 0 else _AXES_RIGHT[id(EAR_AXES)], _attr(FN, SKIN))
    bi = (_HC + BROW_INNER) * hd
    bo = (_HC + BROW_OUTER) * hd
    parts.cone(f"{tag}_brow", (JH, JH, sf * bi[0], bi[1], bi[2], JH, JH, sf * bo[0], bo[1], bo[2], BROW_RADIUS * hd,
                               0.8 * BROW_RADIUS * hd), _attr(FN, BROW))
    for k_left, k_right, pos in _FACE_SIDE_ROWS:
        parts.kp_rows.append((k_left if side > 0 else k_right, JH, JH, sf * pos[0] * hd, pos[1] * hd, pos[2] * hd))
    # iris / pupil: centre and clock positions on the eyeball (left clock: 3 o'clock towards +x)
    alpha, theta = _EYE_CLOCK_ANGLES[:, 0], _EYE_CLOCK_ANGLES[:, 1]
    ring = np.cos(theta)[:, None] * eye_axes[:, 1] + np.sin(theta)[:, None] * eye_axes[:, 0]  # up, lateral
    dirs = np.cos(alpha)[:, None] * g_local + np.sin(alpha)[:, None] * ring
    pts = (_HC + EYE_CENTER + EYE_RADIUS * np.vstack([g_local[None], dirs])) * hd  # (9, 3) left canonical
    pts[:, 0] *= sf
    for name, p in zip(("left_eye",) + tuple(_EYE_CLOCK_NAMES), pts.tolist()):
        parts.kp_rows.append((_side_index(name, side), JH, JH, *p))
    for name in _EYE_CENTER_NAMES[1:]:
        parts.kp_rows.append((_side_index(name, side), JH, JH, *pts[0].tolist()))


def _add_arm(parts, size, app, side, tag, cls):
    """Trapezius, upper arm and forearm (sleeve and cuff splits), and the elbow and acromion keypoints."""
    s, g, gt, k, sf = size.s, size.g, size.gt, 0 if side > 0 else 1, float(side)
    jsh, jel, jwr = J[f"{tag}_shoulder"], J[f"{tag}_elbow"], J[f"{tag}_wrist"]
    seg_up, mat_up = _upper_clothing(app)
    r_sh, r_el, r_wr = 0.05 * s * g, 0.037 * s * g, 0.026 * s * (0.5 + 0.5 * g)
    parts.cone(f"{tag}_trapezius", (JC, JC, sf * 0.05 * s, 0.185 * s, -0.02 * s, jsh, jsh, 0.0, 0.0, 0.0,
                                    0.055 * s * gt, 0.05 * s * gt), _attr(seg_up, mat_up))
    parts.cone(f"{tag}_upper_arm", (jsh, jsh, 0.0, 0.0, 0.0, jel, jel, 0.0, 0.0, 0.0, r_sh, r_el),
               _attr((SEG["Upper_Clothing"], SEG[f"{cls}_Upper_Arm"], SEG[f"{cls}_Upper_Arm"]), (TOP, SKIN, SKIN),
                     app["sleeve"][k], app["sleeve"][k]))
    parts.cone(f"{tag}_forearm", (jel, jel, 0.0, 0.0, 0.0, jwr, jwr, 0.0, 0.0, 0.0, 1.02 * r_el, r_wr),
               _attr((SEG["Upper_Clothing"], SEG[f"{cls}_Lower_Arm"], SEG[f"{cls}_Lower_Arm"]), (TOP, SKIN, SKIN),
                     app["cuff"][k], app["cuff"][k]))
    # olecranon / cubital fossa: on the elbow surface, behind / in front along the upper-arm frame's z axis
    parts.kp_rows.append((_side_index("left_olecranon", side), jel, jsh, 0.0, 0.0, -r_el))
    parts.kp_rows.append((_side_index("left_cubital_fossa", side), jel, jsh, 0.0, 0.0, 0.95 * r_el))
    parts.kp_rows.append((_side_index("left_acromion", side), jsh, JC, 0.0, 0.95 * r_sh, 0.0))


def _add_hand(parts, size, side, tag, cls):
    """Palm, three phalanges per finger, and the fingertip keypoints."""
    hh, sf, jwr = size.hh, float(side), J[f"{tag}_wrist"]
    pc = 0.7 + 0.3 * size.g
    hand_cls = SEG[f"{cls}_Hand"]
    parts.ellipsoid(f"{tag}_palm", (jwr, jwr, -0.003 * hh * sf, -0.048 * hh, 0.0, 0.014 * hh * pc, 0.05 * hh * pc,
                                    0.043 * hh * pc), _I3 if side > 0 else _M3, _attr(hand_cls, SKIN))
    for finger in _FINGERS:
        radius = _FINGER_RADIUS[finger] * hh
        j1, j2, j3 = (J[f"{tag}_{finger}{lvl}"] for lvl in (1, 2, 3))
        tip_y = -_PHALANGES[finger][2] * hh
        for seg, (ja, jb, by) in enumerate(((j1, j2, 0.0), (j2, j3, 0.0), (j3, j3, tip_y))):
            parts.cone(f"{tag}_{finger}_{seg}", (ja, ja, 0.0, 0.0, 0.0, jb, jb, 0.0, by, 0.0, radius * 0.93**seg,
                                                 radius * 0.93 ** (seg + 1)), _attr(hand_cls, SKIN))
        parts.kp_rows.append((_side_index(f"left_{_KP_FINGER[finger]}4", side), j3, j3, 0.0, tip_y, 0.0))


def _add_leg(parts, size, app, side, tag, cls):
    """Thigh and shin (trouser, sock splits), the foot or shoe, and the foot keypoints."""
    s, g, fs, k, sf = size.s, size.g, size.fs, 0 if side > 0 else 1, float(side)
    jhp, jkn, jan = J[f"{tag}_hip"], J[f"{tag}_knee"], J[f"{tag}_ankle"]
    foot_center, foot_radii, foot_points = _FOOT_VARIANTS[app["shoes"]]
    parts.cone(f"{tag}_thigh", (jhp, jhp, 0.0, 0.0, 0.0, jkn, jkn, 0.0, 0.0, 0.0, 0.085 * s * g,
                                0.055 * s * (0.5 + 0.5 * g)),
               _attr((LOW, SEG[f"{cls}_Upper_Leg"], SEG[f"{cls}_Upper_Leg"]), (BOTTOM, SKIN, SKIN), app["thigh"][k],
                     app["thigh"][k]))
    sock_class = SEG[f"{cls}_Sock"] if app["shoes"] else SEG[f"{cls}_Lower_Leg"]
    parts.cone(f"{tag}_shin", (jkn, jkn, 0.0, 0.0, 0.0, jan, jan, 0.0, 0.0, 0.0, 0.055 * s * (0.5 + 0.5 * g),
                               0.035 * s * (0.6 + 0.4 * g)),
               _attr((LOW, SEG[f"{cls}_Lower_Leg"], sock_class), (BOTTOM, SKIN, SOCK), app["shin"][k],
                     max(app["shin"][k], app["sock"][k])))
    parts.ellipsoid(f"{tag}_foot", (jan, jan, sf * foot_center[0] * fs, foot_center[1] * fs, foot_center[2] * fs,
                                    foot_radii[0] * fs, foot_radii[1] * fs, foot_radii[2] * fs),
                    FOOT_AXES if side > 0 else _AXES_RIGHT[id(FOOT_AXES)],
                    _attr(SEG[f"{cls}_Shoe"] if app["shoes"] else SEG[f"{cls}_Foot"], SHOE if app["shoes"] else SKIN))
    for name, p in foot_points:
        parts.kp_rows.append((_side_index(name, side), jan, jan, sf * p[0] * fs, p[1] * fs, p[2] * fs))


def _add_worn(parts, size, shape, app):
    """The optional skirt, scarf and backpack."""
    s, neck_r = size.s, size.neck_r
    if app["bottom"] == "skirt":
        top_r = 0.172 * shape["hip_width"] * size.gt * s
        length = app["skirt_length"] * 1.75 * s
        parts.cone("skirt", (JP, JP, 0.0, 0.02 * s, -0.005 * s, JP, JP, 0.0, -0.02 * s - length, 0.02 * s, top_r,
                             top_r + 0.16 * length), _attr(LOW, BOTTOM))
    if app["scarf"]:
        parts.cone("scarf", (JN, JN, 0.0, 0.0, 0.0, JN, JN, 0.0, 0.06 * s, 0.012 * s, 1.45 * neck_r, 1.3 * neck_r),
                   _attr(SEG["Apparel"], SCARF))
    if app["backpack"]:
        parts.ellipsoid("backpack", (JC, JC, 0.0, 0.03 * s, -(0.11 * size.gt + 0.065) * s, 0.14 * s, 0.19 * s,
                                     0.07 * s), _I3, _attr(SEG["Apparel"], BAG))


_HAIR_VOLUMES = {"long": ((0.0, -0.09, -0.055), (0.092, 0.17, 0.055)), "bun": ((0.0, 0.09, -0.085), (0.045,) * 3),
                 "volume": ((0.0, 0.02, -0.025), (0.088, 0.13, 0.112))}


def _add_hair_and_hat(parts, size, app):
    """The hair volume of long, bun and voluminous styles, and a hat (a cap adds a brim)."""
    hd = size.hd
    hair_volume = _HAIR_VOLUMES.get(app["hair_style"])
    if hair_volume is not None:
        parts.ellipsoid("hair_" + app["hair_style"], (JH, JH, *((_HC + hair_volume[0]) * hd),
                                                       *(np.array(hair_volume[1]) * hd)), _I3, _attr(HAIRC, HAIR))
    if app["hat"] != "none":
        parts.ellipsoid("hat", (JH, JH, *((_HC + (0.0, 0.07, -0.005)) * hd), *(np.array([0.086, 0.07, 0.107]) * hd)),
                        _I3, _attr(SEG["Apparel"], HAT))
        if app["hat"] == "cap":
            parts.ellipsoid("hat_brim", (JH, JH, *((_HC + (0.0, 0.048, 0.095)) * hd),
                                         *(np.array([0.07, 0.007, 0.055]) * hd)), _BRIM_AXES, _attr(SEG["Apparel"], HAT))


def _add_glasses(parts, size):
    """Bridge, temples and lenses of a pair of glasses."""
    hd, eg = size.hd, SEG["Eyeglass"]
    lens_z = EYE_CENTER[2] + EYE_RADIUS + 0.010
    a = (_HC + (-0.011, 0.014, lens_z)) * hd
    b = (_HC + (0.011, 0.014, lens_z)) * hd
    parts.cone("glasses_bridge", (JH, JH, *a, JH, JH, *b, 0.0022 * hd, 0.0022 * hd), _attr(eg, GLASSES))
    for sf, tag in ((1.0, "l"), (-1.0, "r")):
        a = (_HC + (0.051, 0.016, lens_z - 0.004)) * hd
        b = (_HC + (0.077, 0.016, -0.005)) * hd
        parts.cone(f"{tag}_temple", (JH, JH, sf * a[0], a[1], a[2], JH, JH, sf * b[0], b[1], b[2], 0.0022 * hd,
                                     0.0022 * hd), _attr(eg, GLASSES))
        c = (_HC + (EYE_CENTER[0], 0.013, lens_z)) * hd
        parts.ellipsoid(f"{tag}_lens", (JH, JH, sf * c[0], c[1], c[2], 0.021 * hd, 0.016 * hd, 0.0025 * hd), _I3,
                        _attr(eg, GLASSES))


def _to_body_frame(required, optional, o, G):
    """Required then optional rows, posed by the joint origins ``o`` and frames ``G`` into a `PersonGeometry`."""
    crow = np.array(required.cones + optional.cones)  # (num_cones, 12)
    ja, fa, jb, fb = (crow[:, i].astype(np.int64) for i in (0, 1, 5, 6))
    cone_a = o[ja] + np.einsum("nij,nj->ni", G[fa], crow[:, 2:5])
    cone_b = o[jb] + np.einsum("nij,nj->ni", G[fb], crow[:, 7:10])
    erow = np.array(required.ells + optional.ells)  # (num_ellipsoids, 8)
    je, fe = erow[:, 0].astype(np.int64), erow[:, 1].astype(np.int64)
    ell_center = o[je] + np.einsum("nij,nj->ni", G[fe], erow[:, 2:5])
    ell_axes_body = np.matmul(G[fe], np.stack(required.ell_axes + optional.ell_axes))
    krow = np.array(required.kp_rows)  # (num_modelled, 6)
    kk, kj, kf = (krow[:, i].astype(np.int64) for i in range(3))
    keypoints = np.zeros((NUM_POSE_KEYPOINTS, 3))
    keypoints[kk] = o[kj] + np.einsum("nij,nj->ni", G[kf], krow[:, 3:6])
    return PersonGeometry(
        cone_a=cone_a, cone_b=cone_b, cone_ra=crow[:, 10].copy(), cone_rb=crow[:, 11].copy(),
        ellipsoid_center=ell_center, ellipsoid_axes=ell_axes_body, ellipsoid_radii=erow[:, 5:8].copy(),
        cone_attrs=np.array(required.cone_attrs + optional.cone_attrs),
        ellipsoid_attrs=np.array(required.ell_attrs + optional.ell_attrs), keypoints=keypoints,
        cone_names=required.cone_names + optional.cone_names,
        ellipsoid_names=required.ell_names + optional.ell_names,
    )


# --------------------------------------------------- Static keypoint tables (owners, tolerances, which keypoints exist)

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
