"""Pose heatmap loss of the official Sapiens2 308-keypoint recipe.

Kept import path: implemented in `sapiens2_hf.modeling.loss_sapiens2`.
"""

from ..modeling.loss_sapiens2 import PoseHeatmapLoss  # noqa: F401
