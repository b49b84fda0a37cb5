"""Sapiens2 albedo metric for `evaluate`: MAE, RMSE, PSNR (dataset-global MSE), masked SSIM and gradient L1 over
foreground pixels (official ``AlbedoEvaluator``)."""

from sapiens2_hf.metrics import AlbedoMetric
from sapiens2_hf.metrics.evaluate_factory import evaluate_metric, feature, per_sample_maps


_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `(3, height, width)` float arrays): Predicted RGB albedo.
    references (`list` of `(3, height, width)` float arrays): Ground-truth albedo in [0, 1] or [0, 255].
    masks (`list` of `(height, width)` arrays): Valid pixels (non-zero).
Returns:
    `mae`, `rmse`, `psnr`, `ssim`, `grad_l1`.
"""

Sapiens2Albedo = evaluate_metric(
    "Sapiens2Albedo", __doc__, _KWARGS_DESCRIPTION,
    {"predictions": feature("float32", None, None, None), "references": feature("float32", None, None, None),
     "masks": feature("float32", None, None)},
    per_sample_maps(AlbedoMetric, "predictions", "references", "masks"),
)
