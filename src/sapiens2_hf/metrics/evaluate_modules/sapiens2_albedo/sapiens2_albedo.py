"""Sapiens2 albedo metric for `evaluate`: MAE, RMSE, PSNR (dataset-global MSE), masked SSIM and gradient L1 over
foreground pixels (official ``AlbedoEvaluator``)."""

import datasets
import evaluate
import torch

from sapiens2_hf.metrics import AlbedoMetric


_DESCRIPTION = __doc__
_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `(3, height, width)` float arrays): Predicted RGB albedo.
    references (`list` of `(3, height, width)` float arrays): Ground-truth albedo in [0, 1] or [0, 255].
    masks (`list` of `(height, width)` arrays): Valid pixels (non-zero).
Returns:
    `mae`, `rmse`, `psnr`, `ssim`, `grad_l1`.
"""


def _map(dims):
    feature = datasets.Value("float32")
    for _ in range(dims):
        feature = datasets.Sequence(feature)
    return feature


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Sapiens2Albedo(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": _map(3), "references": _map(3), "masks": _map(2)}),
        )

    def _compute(self, predictions, references, masks):
        metric = AlbedoMetric()
        for prediction, reference, mask in zip(predictions, references, masks):
            metric.update(torch.as_tensor(prediction)[None], torch.as_tensor(reference)[None], torch.as_tensor(mask)[None])
        return metric.compute()
