"""Sapiens2 surface-normal metric for `evaluate`: mean / median (0.5-degree histogram) / RMSE angular error and the
percentage of pixels within 5, 11.25, 22.5 and 30 degrees, pooled over all valid pixels (official
``NormalEvaluator``)."""

import datasets
import evaluate
import torch

from sapiens2_hf.metrics import NormalMetric


_DESCRIPTION = __doc__
_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `(3, height, width)` float arrays): Predicted normals (raw or unit), camera frame.
    references (`list` of `(3, height, width)` float arrays): Ground-truth normals.
    masks (`list` of `(height, width)` arrays): Valid pixels (non-zero).
Returns:
    `mean_angular_error_deg`, `median_angular_error_deg`, `rmse_angular_error_deg`, `within_<t>_deg` (percent).
"""


def _map(dims):
    feature = datasets.Value("float32")
    for _ in range(dims):
        feature = datasets.Sequence(feature)
    return feature


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Sapiens2Normal(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": _map(3), "references": _map(3), "masks": _map(2)}),
        )

    def _compute(self, predictions, references, masks):
        metric = NormalMetric()
        for prediction, reference, mask in zip(predictions, references, masks):
            metric.update(torch.as_tensor(prediction)[None], torch.as_tensor(reference)[None], torch.as_tensor(mask)[None])
        return metric.compute()
