"""Training and evaluation label tables of the official Sapiens2 tasks.

Keypoint names, flip pairs, class names and their counts have one source and one import path,
`sapiens2_hf.modeling.sapiens2_label_data` (generated from the project spec files by scripts/generate_label_data.py);
`KEYPOINT_FLIP_INDICES` is derived from it here. The seg loss's ignore label and class weights (`SEG_IGNORE_INDEX`,
`SEG_CE_CLASS_WEIGHTS`) come from the losses in the modeling folder (`sapiens2_hf.modeling.loss_sapiens2`), which the
task models use. The other tables below are needed only by training and evaluation, so they stay out of the Hub-shipped
modeling files. All values come from the same spec files ``keypoints308.json`` and ``seg29.json`` (extracted from
facebookresearch/sapiens2 commit 3098c14: ``sapiens/pose/configs/_base_/keypoints308.py`` and the seg configs'
``CLASS_WEIGHT``). ``tests/test_label_tables.py`` checks every table against copies of those files.
"""

from ..modeling.sapiens2_label_data import NUM_POSE_KEYPOINTS, POSE_FLIP_PAIRS
from ..modeling.loss_sapiens2 import SEG_CE_CLASS_WEIGHTS, SEG_IGNORE_INDEX  # noqa: F401  (re-exported)
from ..modeling.sapiens2_processing_ops import flip_pairs_to_indices


# flip_indices[k] is the channel keypoint k becomes under a horizontal flip (identity on the centre line).
KEYPOINT_FLIP_INDICES = tuple(flip_pairs_to_indices(POSE_FLIP_PAIRS, NUM_POSE_KEYPOINTS))

# Per-keypoint OKS sigmas (the official evaluator and OKS-NMS use them; COCO's k = 2 * sigma): body, feet, hands and
# the extra points, then 0.01 for each of the 238 face points.
KEYPOINT_OKS_SIGMAS = (0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072, 0.107, 0.107, 0.087, 0.087,
    0.089, 0.089, 0.068, 0.066, 0.066, 0.092, 0.094, 0.094, 0.047, 0.037, 0.035, 0.022, 0.035, 0.024, 0.025, 0.026,
    0.026, 0.022, 0.024, 0.018, 0.032, 0.021, 0.021, 0.017, 0.031, 0.022, 0.019, 0.02, 0.062, 0.047, 0.037, 0.035,
    0.022, 0.035, 0.024, 0.025, 0.026, 0.026, 0.022, 0.024, 0.018, 0.032, 0.021, 0.021, 0.017, 0.031, 0.022, 0.019,
    0.02, 0.062, 0.072, 0.072, 0.072, 0.072, 0.079, 0.079, 0.079) + (0.01,) * 238

KEYPOINT_JOINT_WEIGHTS = (1.0,) * NUM_POSE_KEYPOINTS

UPPER_BODY_KEYPOINT_IDS = tuple(range(0, 9)) + tuple(range(21, 63))

LOWER_BODY_KEYPOINT_IDS = tuple(range(9, 21))

# Keypoint groups of the official part-wise COCO evaluations (body 17, foot 6, face 238, hands 20 + 20, extra 7).
KEYPOINT_GROUPS = {
    "body": (0, 1, 2, 3, 4, 5, 6, 7, 8, 62, 41, 9, 10, 11, 12, 13, 14),
    "extra": (69, 63, 64, 65, 66, 67, 68),
    "face": tuple(range(70, 308)),
    "foot": tuple(range(15, 21)),
    "left_hand": tuple(range(42, 62)),
    "right_hand": tuple(range(21, 41)),
}

# COCO-WholeBody (133 keypoints) index -> 308 index, for the 53 keypoints with identical names.
COCO_WHOLEBODY_TO_308 = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8, 9: 62, 10: 41, 11: 9, 12: 10, 13: 11,
    14: 12, 15: 13, 16: 14, 17: 15, 18: 16, 19: 17, 20: 18, 21: 19, 22: 20, 93: 44, 94: 43, 95: 42, 97: 48, 98: 47,
    99: 46, 101: 52, 102: 51, 103: 50, 105: 56, 106: 55, 107: 54, 109: 60, 110: 59, 111: 58, 114: 23, 115: 22,
    116: 21, 118: 27, 119: 26, 120: 25, 122: 31, 123: 30, 124: 29, 126: 35, 127: 34, 128: 33, 130: 39, 131: 38,
    132: 37}

SEG_BACKGROUND_INDEX = 0

# Left/right class pairs swapped by the training-time horizontal flip.
SEG_FLIP_SWAP_PAIRS = ((5, 14), (6, 15), (7, 16), (8, 17), (9, 18), (10, 19), (11, 20), (12, 21))

# `min_visible_keypoints` of the official keypoints308 dataset info (the half-body augmentation separately needs >= 9).
MIN_VISIBLE_KEYPOINTS = 8
