"""Sapiens2 pointmap metric for `evaluate` on canonical pointmaps: mean L2 distance, per-axis MAE, RMSE, fractions
within 5/10/20 cm and 5x5-Sobel normal angular errors (fractions), pooled over valid pixels (official
``PointmapEvaluator``)."""

import datasets
import evaluate
import torch

from sapiens2_hf.metrics import PointmapMetric


_DESCRIPTION = __doc__
_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `(3, height, width)` float arrays): Predicted canonical XYZ.
    references (`list` of `(3, height, width)` float arrays): Canonical ground-truth XYZ.
    masks (`list` of `(height, width)` arrays): Valid pixels (non-zero).
Returns:
    `mean_l2_error`, `x_mae`, `y_mae`, `z_mae`, `rmse`, `within_<d>_cm`, `normal_*` (fractions).
"""


def _map(dims):
    feature = datasets.Value("float32")
    for _ in range(dims):
        feature = datasets.Sequence(feature)
    return feature


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Sapiens2Pointmap(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": _map(3), "references": _map(3), "masks": _map(2)}),
        )

    def _compute(self, predictions, references, masks):
        metric = PointmapMetric()
        for prediction, reference, mask in zip(predictions, references, masks):
            metric.update(torch.as_tensor(prediction)[None], torch.as_tensor(reference)[None], torch.as_tensor(mask)[None])
        return metric.compute()
