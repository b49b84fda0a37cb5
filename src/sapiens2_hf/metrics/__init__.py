"""Streaming evaluation metrics (update per batch, compute once) reproducing the official Sapiens2 evaluators.

Each accumulator keeps only dataset-level sums (or, for OKS AP, one small keypoint array per instance), so a
whole validation set can be evaluated in bounded memory. `evaluate`-compatible wrappers of the same accumulators
live in `sapiens2_hf/metrics/evaluate_modules/` (see `evaluate_module_path`).
"""

from .albedo import AlbedoMetric
from .evaluate_modules import EVALUATE_MODULES, evaluate_module_path
from .matting import MattingMetric
from .normal import NormalMetric
from .pointmap import PointmapMetric, sobel5_normals
from .pose import KeypointOksAP, KeypointPCK, PoseHeatmapAccuracy
from .segmentation import SegmentationMetric


__all__ = [
    "EVALUATE_MODULES",
    "AlbedoMetric",
    "KeypointOksAP",
    "KeypointPCK",
    "MattingMetric",
    "NormalMetric",
    "PointmapMetric",
    "PoseHeatmapAccuracy",
    "SegmentationMetric",
    "evaluate_module_path",
    "sobel5_normals",
]
