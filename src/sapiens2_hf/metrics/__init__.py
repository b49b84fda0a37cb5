"""Streaming evaluation metrics (update per batch, compute once) reproducing the official Sapiens2 evaluators, in
bounded memory (dataset-level sums; for OKS AP one small array per instance). `evaluate`-compatible wrappers of the
same accumulators: `evaluate_module_path`.
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
