"""Fine-tuning task losses.

`PoseHeatmapLoss`, `SegmentationLoss`, `NormalLoss`, `PointmapLoss`, `AlbedoLoss` and `MattingLoss` each return `(total,
{"<name>_loss": weighted term, ...})`; their defaults reproduce the official Sapiens2 fine-tuning recipes. They are
implemented in the Hub-shippable modeling folder (`sapiens2_hf.modeling.loss_sapiens2`), where the task models use them
to compute `loss` from `labels`; this package is their public import path. The pretraining objectives live with the
pretraining model, in `sapiens2_hf.pretraining.losses`.
"""

from ..modeling.loss_sapiens2 import (
    AlbedoLoss,
    MattingLoss,
    NormalLoss,
    PointmapLoss,
    PoseHeatmapLoss,
    SegmentationLoss,
)


__all__ = [
    "AlbedoLoss",
    "MattingLoss",
    "NormalLoss",
    "PointmapLoss",
    "PoseHeatmapLoss",
    "SegmentationLoss",
]
