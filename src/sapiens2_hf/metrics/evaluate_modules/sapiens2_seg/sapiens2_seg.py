"""Sapiens2 body-part segmentation metric for `evaluate`: dataset-level mIoU / aAcc / mAcc (percent) over all
classes including Background, NaN IoUs counted as 0, label 255 ignored (official ``SegEvaluator``)."""

import torch

from sapiens2_hf.metrics import SegmentationMetric
from sapiens2_hf.metrics.evaluate_factory import evaluate_metric, feature


_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `(height, width)` int arrays): Predicted class maps at ground-truth resolution.
    references (`list` of `(height, width)` int arrays): Ground-truth class maps (255 = ignore).
    num_classes (`int`, defaults to 29), ignore_index (`int`, defaults to 255), per_class (`bool`, defaults to False).
Returns:
    `miou`, `aacc`, `macc` (percent); with `per_class=True` also `iou_<class>` and `acc_<class>`.
"""


def _compute(predictions, references, num_classes=29, ignore_index=255, per_class=False):
    metric = SegmentationMetric(num_classes=num_classes, ignore_index=ignore_index)
    for prediction, reference in zip(predictions, references):
        metric.update(torch.as_tensor(prediction)[None], torch.as_tensor(reference)[None])
    return metric.compute(per_class=per_class)


Sapiens2Seg = evaluate_metric(
    "Sapiens2Seg", __doc__, _KWARGS_DESCRIPTION,
    {"predictions": feature("int64", None, None), "references": feature("int64", None, None)}, _compute,
)
