"""Sapiens2 matting metric for `evaluate`: SAD, MSE, gradient and connectivity errors of alpha mattes (Rhemann et
al. 2009, as the standard matting benchmark computes them), averaged over images."""

import torch

from sapiens2_hf.metrics import MattingMetric
from sapiens2_hf.metrics.evaluate_factory import evaluate_metric, feature


_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `(height, width)` float arrays): Predicted alpha in [0, 1].
    references (`list` of `(height, width)` float arrays): Ground-truth alpha in [0, 1].
    masks (`list` of `(height, width)` arrays, *optional*): Evaluated pixels (non-zero), e.g. a trimap's unknown
        region; default all pixels.
Returns:
    `sad` (/1000), `mse`, `grad` (/1000), `conn` (/1000).
"""


def _compute(predictions, references, masks=None):
    metric = MattingMetric()
    masks = masks if masks is not None else [None] * len(predictions)
    if len(masks) != len(predictions):
        raise ValueError(f"{len(masks)} masks for {len(predictions)} predictions; pass one per prediction.")
    for prediction, reference, mask in zip(predictions, references, masks):
        region = None if mask is None else torch.as_tensor(mask)[None]
        metric.update(torch.as_tensor(prediction)[None], torch.as_tensor(reference)[None], region)
    return metric.compute()


Sapiens2Matting = evaluate_metric(
    "Sapiens2Matting", __doc__, _KWARGS_DESCRIPTION,
    {"predictions": feature("float32", None, None), "references": feature("float32", None, None)}, _compute,
)
