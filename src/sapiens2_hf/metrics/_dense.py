"""Input handling shared by the dense-map metrics (normal, pointmap, albedo)."""

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
