"""Input handling and accumulation shared by the dense-map metrics (normal, pointmap, albedo, matting)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def dense_inputs(
    predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Brings predictions to the target resolution and the mask to a boolean map.

    Args:
        predictions (`torch.Tensor` of shape `(batch_size, 3, h, w)`): resized bilinearly (the official evaluators'
            rule) when `(h, w)` differs from the targets'.
        targets (`torch.Tensor` of shape `(batch_size, 3, height, width)`)
        mask (`torch.Tensor` of shape `(batch_size, [1,] height, width)`, *optional*): valid pixels (default: all).

    Returns:
        `(predictions, valid)`: predictions of shape `(batch_size, 3, height, width)` and a bool map of shape
        `(batch_size, height, width)`.
    """
    if predictions.shape[2:] != targets.shape[2:]:
        predictions = F.interpolate(predictions.float(), size=targets.shape[2:], mode="bilinear", align_corners=False)
    if predictions.shape != targets.shape or predictions.shape[1] != 3:
        raise ValueError(
            f"`predictions` {tuple(predictions.shape)} and `targets` {tuple(targets.shape)} must both be "
            "(batch_size, 3, height, width)."
        )
    if mask is None:
        mask = torch.ones_like(targets[:, 0], dtype=torch.bool)
    return predictions, (mask[:, 0] if mask.dim() == 4 else mask) > 0


class SummedStatistics:
    """A metric whose state, `totals`, is the sum of its per-sample `statistics()` rows, so that rows computed in
    any number of processes add up to the same result."""

    def __init__(self):
        self.reset()

    def accumulate(self, statistics: torch.Tensor) -> None:
        """Add rows from `statistics()` (any number, from any process)."""
        self.totals += statistics.to(torch.float64).sum(dim=0).cpu()

    def update(self, predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Accumulate one batch; arguments as in `statistics`."""
        self.accumulate(self.statistics(predictions, targets, mask))
