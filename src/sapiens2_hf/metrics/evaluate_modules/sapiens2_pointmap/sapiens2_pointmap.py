"""Sapiens2 pointmap metric for `evaluate` on canonical pointmaps: mean L2 distance, per-axis MAE, RMSE, fractions
within 5/10/20 cm and 5x5-Sobel normal angular errors (fractions), pooled over valid pixels (official
``PointmapEvaluator``)."""

from sapiens2_hf.metrics import PointmapMetric
from sapiens2_hf.metrics.evaluate_factory import evaluate_metric, feature, per_sample_maps


_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `(3, height, width)` float arrays): Predicted canonical XYZ.
    references (`list` of `(3, height, width)` float arrays): Canonical ground-truth XYZ.
    masks (`list` of `(height, width)` arrays): Valid pixels (non-zero).
Returns:
    `mean_l2_error`, `x_mae`, `y_mae`, `z_mae`, `rmse`, `within_<d>_cm`, `normal_*` (fractions).
"""

Sapiens2Pointmap = evaluate_metric(
    "Sapiens2Pointmap", __doc__, _KWARGS_DESCRIPTION,
    {"predictions": feature("float32", None, None, None), "references": feature("float32", None, None, None),
     "masks": feature("float32", None, None)},
    per_sample_maps(PointmapMetric, "predictions", "references", "masks"),
)
