"""Sapiens2 308-keypoint pose metric for `evaluate`: COCO OKS AP/AR with the official 308 sigmas (instance score =
box score x mean keypoint score above 0.2, OKS-NMS 0.9 per image, as the official evaluator) and PCK normalised by
the larger side of the ground-truth box."""

import numpy as np

from sapiens2_hf.metrics import KeypointOksAP, KeypointPCK
from sapiens2_hf.metrics.evaluate_factory import evaluate_metric, feature


_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `(num_keypoints, 3)` arrays): Predicted `(x, y, score)` per keypoint, image pixels.
    references (`list` of `(num_keypoints, 3)` arrays): Ground-truth `(x, y, visibility)`.
    areas (`list` of float): Ground-truth annotation areas.
    boxes (`list` of 4 floats): Ground-truth COCO boxes `(x, y, width, height)`.
    image_ids (`list` of int): Image of each instance (instances of one image are matched together).
    box_scores (`list` of float): Detection box scores (1 for ground-truth boxes).
    sigmas (optional list of floats): OKS sigmas; default the official 308.
    nms_threshold (`float` or None, defaults to 0.9), pck_thresholds (defaults to (0.05, 0.1, 0.2)).
Returns:
    `oks_ap`, `oks_ap50`, `oks_ap75`, `oks_ap_medium`, `oks_ap_large`, `oks_ar*`, `pck_*` (all in [0, 1]).
"""


def _compute(predictions, references, areas, boxes, image_ids, box_scores, sigmas=None, nms_threshold=0.9,
             pck_thresholds=(0.05, 0.1, 0.2)):
    predictions, references = np.asarray(predictions, float), np.asarray(references, float)
    boxes = np.asarray(boxes, float)
    oks = KeypointOksAP(sigmas=sigmas, nms_threshold=nms_threshold)
    oks.update(predictions[..., :2], predictions[..., 2], references, areas, boxes, image_ids,
               instance_ids=list(range(len(predictions))), box_scores=box_scores)
    pck = KeypointPCK(pck_thresholds)
    side = boxes[:, 2:].max(axis=1, keepdims=True).repeat(2, axis=1)
    pck.update(predictions[..., :2], references[..., :2], references[..., 2] > 0, side)
    return {**oks.compute(), **pck.compute()}


Sapiens2Pose = evaluate_metric(
    "Sapiens2Pose", __doc__, _KWARGS_DESCRIPTION,
    {"predictions": feature("float64", None, 3), "references": feature("float64", None, 3),
     "areas": feature("float64"), "boxes": feature("float64", 4), "image_ids": feature("int64"),
     "box_scores": feature("float64")},
    _compute,
)
