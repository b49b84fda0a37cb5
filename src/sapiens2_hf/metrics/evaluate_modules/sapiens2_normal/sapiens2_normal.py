"""Sapiens2 surface-normal metric for `evaluate`: mean / median (0.5-degree histogram) / RMSE angular error and the
percentage of pixels within 5, 11.25, 22.5 and 30 degrees, pooled over all valid pixels (official
``NormalEvaluator``)."""

from sapiens2_hf.metrics import NormalMetric
from sapiens2_hf.metrics.evaluate_factory import evaluate_metric, feature, per_sample_maps


_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `(3, height, width)` float arrays): Predicted normals (raw or unit), camera frame.
    references (`list` of `(3, height, width)` float arrays): Ground-truth normals.
    masks (`list` of `(height, width)` arrays): Valid pixels (non-zero).
Returns:
    `mean_angular_error_deg`, `median_angular_error_deg`, `rmse_angular_error_deg`, `within_<t>_deg` (percent).
"""

Sapiens2Normal = evaluate_metric(
    "Sapiens2Normal", __doc__, _KWARGS_DESCRIPTION,
    {"predictions": feature("float32", None, None, None), "references": feature("float32", None, None, None),
     "masks": feature("float32", None, None)},
    per_sample_maps(NormalMetric, "predictions", "references", "masks"),
)
