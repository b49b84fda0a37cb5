"""Sapiens2's 308 keypoints in the layouts other tools read: COCO-17, COCO-WholeBody-133, OpenPose BODY_25 (layer 1).

Every target keypoint is defined by NAME from the 308 official names (`sapiens2_label_data.POSE_KEYPOINT_NAMES`), in
one of three ways:

* a copy of one 308 keypoint (same landmark, or the nearest sample of the same contour; see each entry's note);
* the mean of two 308 keypoints, with score = the smaller of the two (a mean is only as sure as its least sure
  part), e.g. BODY_25 `MidHip` = mean of the hips;
* missing: the 308 layout has no counterpart (the COCO-WholeBody jaw line, for instance).

Missing points follow the convention of the target ecosystems: COCO stores an unlabelled keypoint as `(0, 0)` with
visibility 0 and OpenPose writes `(0, 0)` with confidence 0, so missing points get coordinates `missing_value`
(default 0.0) and score 0. Which points are missing depends only on the format (`missing_keypoint_indices`), never on
the image, so a real keypoint whose heatmap maximum happens to be 0 is never mistaken for a missing one. Pass
`missing_value=float("nan")` to make missing points poison any arithmetic instead.

An explicit list of 308 names (`["left_wrist", "right_wrist"]`) is a format too: those keypoints, copied, in that
order. `source_keypoint_indices(target)` lists the 308 channels a format reads; `post_process_in_format` has the image
processor decode only those heatmap channels (17 of 308 for coco17), with the same results as decoding all 308 and
converting (`convert_keypoints(..., source_indices=...)` converts the decoded subset). The one conversion of results
(the processor's, the pipeline's people: `people_in_format`, the command line's files) from native keypoints.

A model fine-tuned to its own keypoint set (its config's `id2label`, e.g. COCO-17) converts from those keypoints:
`source_names=` names the model's keypoints in channel order, and every format point is made from them by name (a
COCO-17 model in `"coco17"` is the identity). A format that needs a keypoint the model does not have is refused,
naming the missing keypoints.

The tables and the reasoning behind each choice are rendered in docs/keypoint_formats.md by
scripts/generate_keypoint_format_docs.py.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
import torch

from ..modeling.sapiens2_label_data import NUM_POSE_KEYPOINTS, POSE_KEYPOINT_NAMES


POSE_KEYPOINT_NAMES_TUPLE = tuple(POSE_KEYPOINT_NAMES)


class KeypointSource(NamedTuple):
    """How one keypoint of a target format is made from the 308 Sapiens2 keypoints.

    Attributes:
        name (`str`): the keypoint's name in the target format's own spelling.
        sources (`tuple[str, ...]`): 308 names: one (copied), two (mean; score = min) or none (missing).
        note (`str`): why this choice, where it is not the same landmark under the same name.
    """

    name: str
    sources: tuple[str, ...]
    note: str = ""


def _same(names) -> tuple[KeypointSource, ...]:
    """Target points that are the 308 keypoints of the same name."""
    return tuple(KeypointSource(name, (name,)) for name in names)


_COCO17_NAMES = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
    "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle",
    "right_ankle",
)
_FEET = ("left_big_toe", "left_small_toe", "left_heel", "right_big_toe", "right_small_toe", "right_heel")
_FINGERS = ("thumb", "forefinger", "middle_finger", "ring_finger", "pinky_finger")

# -- OpenPose BODY_25 (names as OpenPose's poseParameters spells them) -----------------------------------------------
_NECK_NOTE = ("OpenPose made its Neck labels as the midpoint of the shoulders (COCO, its training data, has no neck); "
              "the 308 layout's own `neck` (69) is placed by its own, undocumented rule and is not used")
_MIDHIP_NOTE = "OpenPose's MidHip is the midpoint of the hips"
_BODY25 = (
    KeypointSource("Nose", ("nose",)),
    KeypointSource("Neck", ("left_shoulder", "right_shoulder"), _NECK_NOTE),
    KeypointSource("RShoulder", ("right_shoulder",)),
    KeypointSource("RElbow", ("right_elbow",)),
    KeypointSource("RWrist", ("right_wrist",)),
    KeypointSource("LShoulder", ("left_shoulder",)),
    KeypointSource("LElbow", ("left_elbow",)),
    KeypointSource("LWrist", ("left_wrist",)),
    KeypointSource("MidHip", ("left_hip", "right_hip"), _MIDHIP_NOTE),
    KeypointSource("RHip", ("right_hip",)),
    KeypointSource("RKnee", ("right_knee",)),
    KeypointSource("RAnkle", ("right_ankle",)),
    KeypointSource("LHip", ("left_hip",)),
    KeypointSource("LKnee", ("left_knee",)),
    KeypointSource("LAnkle", ("left_ankle",)),
    KeypointSource("REye", ("right_eye",)),
    KeypointSource("LEye", ("left_eye",)),
    KeypointSource("REar", ("right_ear",)),
    KeypointSource("LEar", ("left_ear",)),
    KeypointSource("LBigToe", ("left_big_toe",)),
    KeypointSource("LSmallToe", ("left_small_toe",)),
    KeypointSource("LHeel", ("left_heel",)),
    KeypointSource("RBigToe", ("right_big_toe",)),
    KeypointSource("RSmallToe", ("right_small_toe",)),
    KeypointSource("RHeel", ("right_heel",)),
)

# -- COCO-WholeBody face: the 68 points of the iBUG / 300-W layout ----------------------------------------------------
# iBUG-68 runs from the subject's right to the subject's left (image left to right for a person facing the camera).
# The 308 layout numbers the midpoints of a contour level by level (its centre, then the quarter points, then the
# eighth points), each level from the subject's right to the subject's left: the official listing of the right upper
# eyelid is outer end, 3, 1, 4, centre, 5, 2, 6 (spatial order), and the flip pairs (right 1 <-> left 2, right 3 <->
# left 6, eyebrow right 2 <-> left 3) agree. iBUG spaces points evenly between anchors (thirds on an eyelid, sixths
# on the outer lip, quarters on the inner lip and the eyebrow); where the 308 contour has no sample there, the nearest
# sample is used and the note says so.
_JAW_NOTE = "jaw contour: the 308 layout has no points on the jaw line"
_BROW_NOTE = "upper edge of the eyebrow (iBUG's eyebrow points trace it), quarter point"
_EYE_CORNER_NOTE = "eye corner: mean of the ends of the upper and lower lash lines"
_LID_NOTE = "nearest lash-line sample: iBUG puts it at {} of the lid, the 308 lash line has it at {}"
_LIP_NOTE = "nearest lip sample: iBUG puts it at {} of the lip, the 308 contour has it at {}"
_FACE68 = {
    **{i: ((), _JAW_NOTE) for i in (*range(0, 8), *range(9, 17))},
    8: (("tip_of_chin",), "bottom of the chin"),
    17: (("end_of_r_eyebrow",), "outer end of the right eyebrow"),
    18: (("upper_midpoint_2_of_r_eyebrow",), _BROW_NOTE),
    19: (("upper_midpoint_1_of_r_eyebrow",), "upper edge of the eyebrow, middle"),
    20: (("upper_midpoint_3_of_r_eyebrow",), _BROW_NOTE),
    21: (("upper_startpoint_of_r_eyebrow",), "inner end (the eyebrow's blunt head, where it has two start points)"),
    22: (("upper_startpoint_of_l_eyebrow",), "inner end (the eyebrow's blunt head, where it has two start points)"),
    23: (("upper_midpoint_2_of_l_eyebrow",), _BROW_NOTE),
    24: (("upper_midpoint_1_of_l_eyebrow",), "upper edge of the eyebrow, middle"),
    25: (("upper_midpoint_3_of_l_eyebrow",), _BROW_NOTE),
    26: (("end_of_l_eyebrow",), "outer end of the left eyebrow"),
    27: (("center_of_nose_root",), "top of the nose bridge (nasion)"),
    28: ((), "nose bridge at 1/3: the 308 bridge points (root, midpoints, tip of bridge) have no stated spacing"),
    29: ((), "nose bridge at 2/3: the 308 bridge points (root, midpoints, tip of bridge) have no stated spacing"),
    30: (("tip_of_nose",), ""),
    31: (("r_outer_corner_of_nose",), "outer corner of the nose wing"),
    32: ((), "lower nose outline between wing and centre: the 308 nostril corners lie on the nostril opening"),
    33: (("bottom_center_of_nose",), ""),
    34: ((), "lower nose outline between wing and centre: the 308 nostril corners lie on the nostril opening"),
    35: (("l_outer_corner_of_nose",), "outer corner of the nose wing"),
    36: (("r_outer_end_of_upper_lash_line", "r_outer_end_of_lower_lash_line"), _EYE_CORNER_NOTE),
    37: (("r_midpoint_4_of_upper_lash_line",), _LID_NOTE.format("1/3", "3/8")),
    38: (("r_midpoint_5_of_upper_lash_line",), _LID_NOTE.format("2/3", "5/8")),
    39: (("r_inner_end_of_upper_lash_line", "r_inner_end_of_lower_lash_line"), _EYE_CORNER_NOTE),
    40: (("r_midpoint_5_of_lower_lash_line",), _LID_NOTE.format("2/3", "5/8")),
    41: (("r_midpoint_4_of_lower_lash_line",), _LID_NOTE.format("1/3", "3/8")),
    42: (("l_inner_end_of_upper_lash_line", "l_inner_end_of_lower_lash_line"), _EYE_CORNER_NOTE),
    43: (("l_midpoint_4_of_upper_lash_line",), _LID_NOTE.format("1/3", "3/8")),
    44: (("l_midpoint_5_of_upper_lash_line",), _LID_NOTE.format("2/3", "5/8")),
    45: (("l_outer_end_of_upper_lash_line", "l_outer_end_of_lower_lash_line"), _EYE_CORNER_NOTE),
    46: (("l_midpoint_5_of_lower_lash_line",), _LID_NOTE.format("2/3", "5/8")),
    47: (("l_midpoint_4_of_lower_lash_line",), _LID_NOTE.format("1/3", "3/8")),
    48: (("r_outer_corner_of_mouth",), ""),
    49: (("midpoint_3_of_upper_outer_lip",), _LIP_NOTE.format("1/6", "1/8")),
    50: (("midpoint_4_of_upper_outer_lip",), _LIP_NOTE.format("1/3", "3/8")),
    51: (("center_of_cupid_bow",), "top centre of the upper lip"),
    52: (("midpoint_5_of_upper_outer_lip",), _LIP_NOTE.format("2/3", "5/8")),
    53: (("midpoint_6_of_upper_outer_lip",), _LIP_NOTE.format("5/6", "7/8")),
    54: (("l_outer_corner_of_mouth",), ""),
    55: (("midpoint_6_of_lower_outer_lip",), _LIP_NOTE.format("5/6", "7/8")),
    56: (("midpoint_5_of_lower_outer_lip",), _LIP_NOTE.format("2/3", "5/8")),
    57: (("center_of_lower_outer_lip",), ""),
    58: (("midpoint_4_of_lower_outer_lip",), _LIP_NOTE.format("1/3", "3/8")),
    59: (("midpoint_3_of_lower_outer_lip",), _LIP_NOTE.format("1/6", "1/8")),
    60: (("r_inner_corner_of_mouth",), ""),
    61: (("midpoint_1_of_upper_inner_lip",), "quarter point"),
    62: (("center_of_upper_inner_lip",), ""),
    63: (("midpoint_2_of_upper_inner_lip",), "quarter point"),
    64: (("l_inner_corner_of_mouth",), ""),
    65: (("midpoint_2_of_lower_inner_lip",), "quarter point"),
    66: (("center_of_lower_inner_lip",), ""),
    67: (("midpoint_1_of_lower_inner_lip",), "quarter point"),
}


def _hand(side: str) -> tuple[KeypointSource, ...]:
    """COCO-WholeBody hand (root, then four joints per finger from the knuckle to the tip) from the 308 names.

    The 308 layout calls the knuckle `*_third_joint` (third from the tip) and the tip `*4`: its skeleton links wrist ->
    third_joint -> 2 -> 3 -> 4, the same chain as COCO-WholeBody's root -> 1 -> 2 -> 3 -> 4.
    """
    points = [KeypointSource(f"{side}_hand_root", (f"{side}_wrist",), "COCO-WholeBody's hand root is the wrist")]
    for finger in _FINGERS:
        points.append(KeypointSource(f"{side}_{finger}1", (f"{side}_{finger}_third_joint",), "knuckle"))
        points += [KeypointSource(f"{side}_{finger}{joint}", (f"{side}_{finger}{joint}",)) for joint in (2, 3, 4)]
    return tuple(points)


_WHOLEBODY133 = (
    _same(_COCO17_NAMES)
    + _same(_FEET)
    + tuple(KeypointSource(f"face-{i}", *_FACE68[i]) for i in range(68))
    + _hand("left")
    + _hand("right")
)

#: Target format -> how each of its keypoints (in the format's official order) is made from the 308.
KEYPOINT_FORMAT_MAPPINGS: dict[str, tuple[KeypointSource, ...]] = {
    "coco17": _same(_COCO17_NAMES),
    "coco_wholebody133": _WHOLEBODY133,
    "body25": _BODY25,
}

#: Target format -> its keypoint names, in the format's official order.
KEYPOINT_FORMATS: dict[str, tuple[str, ...]] = {
    target: tuple(point.name for point in points) for target, points in KEYPOINT_FORMAT_MAPPINGS.items()
}


class _Plan(NamedTuple):
    """Index form of one mapping: out[k] = in[first[k]] or mean(in[first[k]], in[second[k]]) or missing."""

    first: np.ndarray  # (K,) int64 308-indices (0 for missing points)
    second: np.ndarray  # (K,) int64; equals `first` unless the point is a mean
    mean: np.ndarray  # (K,) bool
    missing: np.ndarray  # (K,) bool


def _source_names(source_names: Any) -> tuple[str, ...]:
    """The keypoints converted from, in channel order: the 308 official ones by default, else the model's own."""
    if source_names is None:
        return POSE_KEYPOINT_NAMES_TUPLE
    names = tuple(str(name) for name in source_names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"source_names must be the model's distinct keypoint names in channel order, got "
                         f"{list(names)[:10]}.")
    return names


def _key(target: Any, source_names: tuple[str, ...] | None = None) -> str | tuple[str, ...]:
    """A format name, or an explicit list of keypoint names (of the 308, or of `source_names`) as a (hashable)
    tuple; anything else refused."""
    if isinstance(target, str):
        if target not in KEYPOINT_FORMAT_MAPPINGS:
            raise ValueError(f"unknown keypoint format {target!r}; use one of {sorted(KEYPOINT_FORMAT_MAPPINGS)}, a "
                             "list of Sapiens2 keypoint names (or None to keep the 308 Sapiens2 keypoints).")
        return target
    if isinstance(target, (list, tuple)) and target and all(isinstance(name, str) for name in target):
        official = source_names in (None, POSE_KEYPOINT_NAMES_TUPLE)
        known = set(POSE_KEYPOINT_NAMES if official else source_names)
        unknown = [name for name in target if name not in known]
        if unknown:
            kind, where = (("Sapiens2 ", "sapiens2_label_data.POSE_KEYPOINT_NAMES (e.g. 'left_wrist')") if official
                           else ("", f"the model's keypoints ({list(source_names)[:5]}...)"))
            raise ValueError(f"unknown {kind}keypoint names {unknown[:5]}; an explicit keypoint list names keypoints "
                             f"of {where}.")
        return tuple(target)
    raise ValueError(f"keypoint format must be one of {sorted(KEYPOINT_FORMAT_MAPPINGS)} or a non-empty list of "
                     f"Sapiens2 keypoint names, got {target!r}.")


def _mapping(key: str | tuple[str, ...]) -> tuple[KeypointSource, ...]:
    return KEYPOINT_FORMAT_MAPPINGS[key] if isinstance(key, str) else _same(key)


def format_keypoint_names(target: Any) -> tuple[str, ...]:
    """Keypoint names of a format (`KEYPOINT_FORMATS[target]`) or of an explicit list of 308 names (the list)."""
    return tuple(point.name for point in _mapping(_key(target)))


def source_keypoint_indices(target: Any, source_names: Any = None) -> tuple[int, ...]:
    """The 308 keypoints (heatmap channels, ascending) a format reads: every source of its copies and means.

    Decoding only these channels and converting (`convert_keypoints(..., source_indices=...)`) gives exactly the
    keypoints of decoding all 308 and converting: coco17 reads 17 channels, body25 23 (its Neck and MidHip are
    means of the shoulders and hips, which it copies anyway), coco_wholebody133 115 (18 of its points are missing).
    With `source_names` (the model's own keypoints, in channel order), the channels are of those keypoints; a format
    that needs one the model lacks is refused, naming it.
    """
    names = _source_names(source_names)
    plan = _plan(_key(target, names), names)
    used = np.concatenate([plan.first[~plan.missing], plan.second[~plan.missing]])
    return tuple(int(i) for i in np.unique(used))


@lru_cache(maxsize=64)
def _plan(target: str | tuple[str, ...], source_names: tuple[str, ...] = POSE_KEYPOINT_NAMES_TUPLE) -> _Plan:
    index = {name: i for i, name in enumerate(source_names)}
    if source_names != POSE_KEYPOINT_NAMES_TUPLE:
        lacking = sorted({name for point in _mapping(target) for name in point.sources if name not in index})
        if lacking:
            shown = f"{lacking[:12]}{' ...' if len(lacking) > 12 else ''}"
            raise ValueError(
                f"keypoint_format={target if isinstance(target, str) else list(target)!r} is made from keypoints "
                f"this model does not have: {len(lacking)} missing ({shown}) among its {len(source_names)} keypoints; "
                "use keypoint_format=None (the model's own keypoints) or a format made from them."
            )
    first, second, mean, missing = [], [], [], []
    for point in _mapping(target):
        unknown = [name for name in point.sources if name not in index]
        if unknown or len(point.sources) > 2:  # a table error; the tests build every plan
            raise ValueError(f"{target} keypoint {point.name!r}: sources {point.sources} must be at most two of the "
                             f"308 Sapiens2 names (unknown: {unknown}).")
        ids = [index[name] for name in point.sources] or [0]
        first.append(ids[0])
        second.append(ids[-1])
        mean.append(len(point.sources) == 2)
        missing.append(not point.sources)
    return _Plan(np.asarray(first, np.int64), np.asarray(second, np.int64), np.asarray(mean), np.asarray(missing))


def missing_keypoint_indices(target: Any) -> tuple[int, ...]:
    """Indices (in `KEYPOINT_FORMATS[target]`) of the points the 308 layout has no counterpart for."""
    return tuple(int(i) for i in np.flatnonzero(_plan(_key(target), POSE_KEYPOINT_NAMES_TUPLE).missing))


def convert_keypoints(keypoints: Any, scores: Any = None, target: Any = "coco17", *, missing_value: float = 0.0,
                      source_indices: Any = None, source_names: Any = None):
    r"""Convert Sapiens2 308-keypoint predictions (or labels) to another keypoint format.

    Works on numpy arrays and torch tensors (any device; differentiable), batched over any leading dimensions
    (people, images, frames).

    Args:
        keypoints (`np.ndarray` or `torch.Tensor` of shape `(..., 308, D)`, floating point): coordinates of the 308
            keypoints in heatmap-channel order, in any frame (usually `(x, y)` image pixels, `D = 2`).
        scores (same type as `keypoints`, shape `(..., 308)`, or `None`): per-keypoint scores (heatmap maxima,
            visibilities, ...). Copied points keep their score; a mean takes the smaller score of its two sources.
        target (`str` or list of `str`): `"coco17"`, `"coco_wholebody133"` or `"body25"` (names and order:
            `KEYPOINT_FORMATS`), or an explicit list of 308 keypoint names (those keypoints, in that order).
        missing_value (`float`, defaults to 0.0): coordinate written for points the 308 layout has no counterpart
            for (`missing_keypoint_indices(target)`); their score is 0. 0.0 is the COCO and OpenPose convention
            (`(0, 0)` with visibility / confidence 0); `float("nan")` makes them poison arithmetic instead.
        source_indices (sequence of `int`, *optional*): the keypoints hold only these 308 channels, in this order
            (shape `(..., len(source_indices), D)`): the output of decoding only `source_keypoint_indices(target)`.
            It must contain every source of the format.
        source_names (sequence of `str`, *optional*): the keypoints are the model's own set, these names in channel
            order (its config's `id2label`), instead of the 308: the format is made from them by name
            (`(..., len(source_names), D)`; `source_indices` then index into them). A format that needs a keypoint
            they lack is refused, naming it.

    Returns:
        `(keypoints, scores)`: keypoints of shape `(..., K, D)` and scores of shape `(..., K)` (`None` when `scores` is
        `None`), with `K = len(KEYPOINT_FORMATS[target])`, of the input's type, dtype and device.
    """
    names = _source_names(source_names)
    key = _key(target, names)
    is_torch = isinstance(keypoints, torch.Tensor)
    if not is_torch and not isinstance(keypoints, np.ndarray):
        raise TypeError(f"keypoints must be a numpy array or a torch tensor, got {type(keypoints).__name__}; wrap "
                        "lists with np.asarray(..., dtype=np.float64).")
    plan, expected = _plan_for_sources(key, source_indices, names)
    _check_keypoints_and_scores(keypoints, scores, expected, is_torch)
    if is_torch:
        return _convert_torch(plan, keypoints, scores, missing_value)
    a, b = keypoints[..., plan.first, :], keypoints[..., plan.second, :]
    out = np.where(plan.mean[:, None], (a + b) / 2, a).astype(keypoints.dtype, copy=False)
    out[..., plan.missing, :] = missing_value
    if scores is None:
        return out, None
    sa, sb = scores[..., plan.first], scores[..., plan.second]
    out_scores = np.where(plan.mean, np.minimum(sa, sb), sa).astype(scores.dtype, copy=False)
    out_scores[..., plan.missing] = 0
    return out, out_scores


def _plan_for_sources(key, source_indices, names: tuple[str, ...]):
    """`(plan, number of input keypoints)`: the format's plan over the channels of `names`, or over
    `source_indices`."""
    plan = _plan(key, names)
    if source_indices is None:
        return plan, len(names)
    position = {int(c): k for k, c in enumerate(source_indices)}
    needed = source_keypoint_indices(key, names)
    if len(position) != len(source_indices) or not set(needed) <= set(position):
        raise ValueError(f"source_indices must be distinct and hold every 308 channel the format reads "
                         f"(source_keypoint_indices: {list(needed)}), got {list(source_indices)}.")

    def remap(indices: np.ndarray) -> np.ndarray:  # missing points keep a dummy 0
        return np.asarray([position.get(int(c), 0) for c in indices], np.int64)

    return plan._replace(first=remap(plan.first), second=remap(plan.second)), len(position)


def _check_keypoints_and_scores(keypoints, scores, expected: int, is_torch: bool) -> None:
    """`(..., expected, D)` floating keypoints, and scores of the same type and shape without the coordinates."""
    if keypoints.ndim < 2 or keypoints.shape[-2] != expected:
        raise ValueError(f"keypoints must have shape (..., {expected}, D) (the Sapiens2 keypoints in "
                         f"channel order, coordinates last), got {tuple(keypoints.shape)}; a model with its own "
                         "keypoint set converts from them with source_names=<its keypoint names>.")
    floating = keypoints.is_floating_point() if is_torch else np.issubdtype(keypoints.dtype, np.floating)
    if not floating:
        raise TypeError(f"keypoints must be floating point (means of two points are fractional), got "
                        f"{keypoints.dtype}; convert them first, e.g. keypoints.astype(np.float64) or .double().")
    if scores is None:
        return
    if isinstance(scores, torch.Tensor) != is_torch or not (is_torch or isinstance(scores, np.ndarray)):
        raise TypeError(f"scores must be of the same type as keypoints ({type(keypoints).__name__}), got "
                        f"{type(scores).__name__}.")
    if tuple(scores.shape) != tuple(keypoints.shape[:-1]):
        raise ValueError(f"scores must have shape {tuple(keypoints.shape[:-1])} (the keypoints' shape without "
                         f"the coordinate axis), got {tuple(scores.shape)}.")


def _convert_torch(plan, keypoints: torch.Tensor, scores, missing_value: float):
    """`convert_keypoints` on tensors, on their device."""
    device = keypoints.device
    first, second = torch.from_numpy(plan.first).to(device), torch.from_numpy(plan.second).to(device)
    mean, missing = torch.from_numpy(plan.mean).to(device), torch.from_numpy(plan.missing).to(device)
    a, b = keypoints.index_select(-2, first), keypoints.index_select(-2, second)
    # `where`, not a weight matrix: a NaN anywhere in the 308 must not leak into unrelated target points
    out = torch.where(mean[:, None], (a + b) / 2, a).masked_fill(missing[:, None], missing_value)
    if scores is None:
        return out, None
    sa, sb = scores.index_select(-1, first), scores.index_select(-1, second)
    return out, torch.where(mean, torch.minimum(sa, sb), sa).masked_fill(missing, 0)


def _format_channels(keypoint_format: Any, num_channels: int, keypoint_names: Any = None) -> list[int]:
    """The heatmap channels `keypoint_format` reads checked against the heatmaps; with
    `keypoint_names` (the model's own keypoints, one per channel) the format is made from those."""
    if isinstance(keypoint_format, str) and keypoint_format not in KEYPOINT_FORMATS:
        raise ValueError(f"keypoint_format={keypoint_format!r} is not known; use one of "
                         f"{sorted(KEYPOINT_FORMATS)}, a list of Sapiens2 keypoint names or None (the model's own "
                         "keypoints).")
    if keypoint_names is not None:
        if len(keypoint_names) != num_channels:
            raise ValueError(f"keypoint_names has {len(keypoint_names)} names for {num_channels} heatmap channels; "
                             "pass the model's keypoint names (its config's id2label), one per channel.")
        return list(source_keypoint_indices(keypoint_format, keypoint_names))  # refuses a format they cannot make
    channels = list(source_keypoint_indices(keypoint_format))  # validates a list of names too
    if num_channels != NUM_POSE_KEYPOINTS:
        raise ValueError(f"keypoint_format converts the {NUM_POSE_KEYPOINTS} Sapiens2 keypoints, but the heatmaps "
                         f"hold {num_channels}; use keypoint_format=None for this model.")
    return channels


def post_process_in_format(processor, outputs, keypoint_format: Any, *, keypoint_names: Any = None,
                           threshold: float | None = None, **kwargs) -> list[list[dict[str, Any]]]:
    """`processor.post_process_pose_estimation(outputs, **kwargs)` in `keypoint_format`: only the heatmap channels the
    format reads are decoded (`keypoint_indices`), converted from `keypoint_names` (the model's, by channel; default
    the 308), then `threshold` applies (a mean needs both sources). `labels` index the format's keypoints (names:
    `format_keypoint_names`); missing points are `(0, 0)` with score 0."""
    heatmaps = outputs.heatmaps if hasattr(outputs, "heatmaps") else outputs
    channels = _format_channels(keypoint_format, heatmaps.shape[1], keypoint_names)
    results = processor.post_process_pose_estimation(outputs, keypoint_indices=channels, **kwargs)
    for person in (person for people in results for person in people):
        keypoints, scores = convert_keypoints(person["keypoints"], person["scores"], keypoint_format,
                                              source_indices=channels, source_names=keypoint_names)
        labels = torch.arange(keypoints.shape[0], device=person["labels"].device)
        keep = torch.ones_like(labels, dtype=torch.bool) if threshold is None else scores > threshold
        person.update(keypoints=keypoints[keep.to(keypoints.device)], scores=scores[keep], labels=labels[keep])
    return results


def people_in_format(people: list[dict[str, Any]], keypoint_format: Any) -> list[dict[str, Any]]:
    """One image's `sapiens2-pose` people with `keypoints`, `scores` and `labels` (names) in `keypoint_format`, made by
    name from each person's own keypoints (its `labels`; a format they cannot make is refused, naming what lacks)."""
    converted = []
    for person in people:
        sources = tuple(str(name) for name in person["labels"])
        keypoints, scores = convert_keypoints(np.asarray(person["keypoints"]), np.asarray(person["scores"]),
                                              keypoint_format, source_names=sources)
        names = [point.name for point in _mapping(_key(keypoint_format, sources))]
        converted.append({**person, "keypoints": keypoints, "scores": scores, "labels": names})
    return converted


def describe_sources(target: str) -> list[dict[str, Any]]:
    """One row per keypoint of `target`: `{"index", "name", "sources", "source_indices", "kind", "note"}`, where
    kind is `"copy"`, `"mean"` or `"missing"` (for tables such as docs/keypoint_formats.md)."""
    key = _key(target)
    index = {name: i for i, name in enumerate(POSE_KEYPOINT_NAMES)}
    kinds = {0: "missing", 1: "copy", 2: "mean"}
    return [{"index": k, "name": point.name, "sources": point.sources,
             "source_indices": tuple(index[name] for name in point.sources), "kind": kinds[len(point.sources)],
             "note": point.note}
            for k, point in enumerate(_mapping(key))]


__all__ = ["KEYPOINT_FORMATS", "KEYPOINT_FORMAT_MAPPINGS", "KeypointSource", "convert_keypoints", "describe_sources",
           "format_keypoint_names", "missing_keypoint_indices", "people_in_format", "post_process_in_format",
           "source_keypoint_indices"]
