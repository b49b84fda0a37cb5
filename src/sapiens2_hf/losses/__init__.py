"""Fine-tuning task losses, one per file.

Each (`PoseHeatmapLoss`, `SegmentationLoss`, `NormalLoss`, `PointmapLoss`, `AlbedoLoss`, `MattingLoss`) returns
`(total, {"<name>_loss": weighted term, ...})`; their defaults reproduce the official Sapiens2 fine-tuning recipes.
The pretraining objectives live with the pretraining model, in `sapiens2_hf.pretraining.losses`.
"""

from .albedo_loss import AlbedoLoss
from .heatmap_loss import PoseHeatmapLoss
from .matting_loss import MattingLoss
from .normal_loss import NormalLoss
from .pointmap_loss import PointmapLoss
from .seg_loss import SegmentationLoss


__all__ = [
    "AlbedoLoss",
    "MattingLoss",
    "NormalLoss",
    "PointmapLoss",
    "PoseHeatmapLoss",
    "SegmentationLoss",
]
