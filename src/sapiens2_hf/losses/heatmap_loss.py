"""Pose heatmap loss of the official Sapiens2 308-keypoint recipe."""

from __future__ import annotations

import torch
from torch import nn


class PoseHeatmapLoss(nn.Module):
    """Keypoint-weighted mean squared error between predicted and target heatmaps (official ``KeypointMSELoss`` with
    ``use_target_weight=True``, loss weight 10).

    The squared error of every heatmap pixel is multiplied by its keypoint's target weight and the product is
    averaged over all `batch_size * num_keypoints * height * width` elements, so keypoints with weight 0 still count
    in the divisor. This is the official normalisation, and it differs from transformers' stock pose loss
    (`F.mse_loss(..., weight=...)` on the raw model), which this library never uses.

    Reference: facebookresearch/sapiens2 ``sapiens/pose/src/models/losses/heatmap_loss.py`` and
    ``sapiens/pose/configs/keypoints308/*`` (``loss_weight=10.0``).

    Args:
        loss_weight (`float`, *optional*, defaults to 10.0): Multiplier of the mean.
        use_target_weight (`bool`, *optional*, defaults to `True`): Multiply by the per-keypoint target weights.

    Example:
        >>> loss_fn = PoseHeatmapLoss()
        >>> total, terms = loss_fn(heatmaps, target_heatmaps, target_weights)
        >>> sorted(terms)
        ['keypoint_mse_loss']
    """

    def __init__(self, loss_weight: float = 10.0, use_target_weight: bool = True):
        super().__init__()
        self.loss_weight = float(loss_weight)
        self.use_target_weight = bool(use_target_weight)

    def forward(
        self,
        heatmaps: torch.Tensor,
        target_heatmaps: torch.Tensor,
        target_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """
        Args:
            heatmaps (`torch.Tensor` of shape `(batch_size, num_keypoints, height, width)`):
                Raw head output (any float dtype; the loss is computed in float32).
            target_heatmaps (`torch.Tensor` of shape `(batch_size, num_keypoints, height, width)`):
                UDP Gaussian targets, peak 1.
            target_weights (`torch.Tensor` of shape `(batch_size, num_keypoints)` or
                `(batch_size, num_keypoints, 1, 1)`, *optional*):
                Per-keypoint weights (visibility times joint weight; 0 for absent keypoints). Required when
                `use_target_weight` is `True`.

        Returns:
            `tuple[torch.Tensor, dict[str, torch.Tensor]]`: the scalar total and `{"keypoint_mse_loss": total}`.
        """
        if heatmaps.dim() != 4 or heatmaps.shape != target_heatmaps.shape:
            raise ValueError(
                f"`heatmaps` {tuple(heatmaps.shape)} and `target_heatmaps` {tuple(target_heatmaps.shape)} must both "
                "have shape (batch_size, num_keypoints, height, width)."
            )
        squared_error = (heatmaps.float() - target_heatmaps.float()) ** 2  # (B, K, H, W)
        if self.use_target_weight:
            if target_weights is None:
                raise ValueError("`target_weights` is required when `use_target_weight=True`.")
            batch_size, num_keypoints = heatmaps.shape[:2]
            if target_weights.shape not in ((batch_size, num_keypoints), (batch_size, num_keypoints, 1, 1)):
                raise ValueError(
                    f"`target_weights` must have shape (batch_size, num_keypoints) = {(batch_size, num_keypoints)} "
                    f"or (batch_size, num_keypoints, 1, 1), got {tuple(target_weights.shape)}."
                )
            squared_error = squared_error * target_weights.float().reshape(batch_size, num_keypoints, 1, 1)
        loss = squared_error.mean() * self.loss_weight
        return loss, {"keypoint_mse_loss": loss}
