"""Training objectives, one per file.

Task losses (`PoseHeatmapLoss`, `SegmentationLoss`, `NormalLoss`, `PointmapLoss`, `AlbedoLoss`) return
`(total, {"<name>_loss": weighted term, ...})`; their defaults reproduce the official Sapiens2 fine-tuning recipes.
Pretraining losses (`MaeLoss`, `DinoClsLoss`, `IbotPatchLoss`, `KoLeoLoss`) return a scalar; the pretraining model
names and weights the terms. `TeacherCentering` / `sinkhorn_knopp_log` hold the teacher-target centring they share.
"""

from .albedo_loss import AlbedoLoss
from .centering import TeacherCentering, sinkhorn_knopp_log
from .dino_cls_loss import DinoClsLoss
from .heatmap_loss import PoseHeatmapLoss
from .ibot_patch_loss import IbotPatchLoss
from .koleo_loss import KoLeoLoss
from .mae_loss import MaeLoss
from .normal_loss import NormalLoss
from .pointmap_loss import PointmapLoss
from .seg_loss import SegmentationLoss


__all__ = [
    "AlbedoLoss",
    "DinoClsLoss",
    "IbotPatchLoss",
    "KoLeoLoss",
    "MaeLoss",
    "NormalLoss",
    "PointmapLoss",
    "PoseHeatmapLoss",
    "SegmentationLoss",
    "TeacherCentering",
    "sinkhorn_knopp_log",
]
