"""Masked reductions shared by the dense-task losses (normal, pointmap, albedo).

Every function here reproduces one reduction rule of the official Sapiens2 dense losses
(facebookresearch/sapiens2 ``sapiens/dense/src/models/losses``): sums run over channels *and* valid pixels, and the
divisor is the number of valid pixels (not pixels x channels). Masked-out pixels are excluded with ``torch.where``
rather than by multiplying with the mask, so a non-finite background value in a target (the official normal targets
use -1000, some datasets use NaN) can never leak into the result. For finite inputs the two are identical.

Letter legend used in shape comments: B batch, C channels, H height, W width.
"""

from __future__ import annotations

import torch


def as_valid_mask(mask: torch.Tensor | None, reference: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """Validate a validity mask and return it as a float `(batch_size, 1, height, width)` tensor of 0/1.

    Args:
        mask (`torch.Tensor` of shape `(batch_size, 1, height, width)` or `(batch_size, height, width)`, *optional*):
            Bool or numeric mask; a pixel is valid where it is non-zero. `None` means every pixel is valid.
        reference (`torch.Tensor` of shape `(batch_size, channels, height, width)`):
            Tensor whose batch and spatial sizes the mask must match.
        name (`str`): Argument name used in error messages.
    """
    batch_size, _, height, width = reference.shape
    if mask is None:
        return reference.new_ones(batch_size, 1, height, width, dtype=torch.float32)
    if mask.dim() == 3:
        mask = mask.unsqueeze(1)
    if mask.dim() != 4 or mask.shape[1] != 1 or tuple(mask.shape[2:]) != (height, width) or mask.shape[0] != batch_size:
        raise ValueError(
            f"`{name}` must have shape (batch_size, 1, height, width) = {(batch_size, 1, height, width)} "
            f"or (batch_size, height, width), got {tuple(mask.shape)}."
        )
    return (mask > 0).to(torch.float32)


def zero_like_graph(pred: torch.Tensor) -> torch.Tensor:
    """A scalar zero that stays connected to `pred`'s graph (the official losses return `0 * pred.sum()` when no
    pixel is valid, so a distributed step still sees a gradient for every parameter)."""
    return pred.sum() * 0.0


def masked_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of absolute errors over channels and valid pixels divided by the number of valid pixels.

    Args:
        pred (`torch.Tensor` of shape `(batch_size, channels, height, width)`): Prediction.
        target (`torch.Tensor` of shape `(batch_size, channels, height, width)`): Target.
        mask (`torch.Tensor` of shape `(batch_size, 1, height, width)`): Float 0/1 validity (see `as_valid_mask`).

    Returns:
        `torch.Tensor`: scalar.
    """
    num_valid = mask.sum()
    if num_valid == 0:
        return zero_like_graph(pred)
    valid = mask.bool().expand_as(pred)
    error = torch.where(valid, (pred - target).abs(), torch.zeros_like(pred))
    return torch.nan_to_num(error.sum() / num_valid.clamp(min=1), nan=0.0, posinf=0.0, neginf=0.0)


def forward_difference_squared_error(
    pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared error between forward differences of `pred` and `target` ("grad L1" in the official code, which is in
    fact a squared error).

    The horizontal term sums `(dx_pred - dx_target)^2` over channels and over neighbour pairs whose two pixels are
    both valid, divided by the number of such pairs; the vertical term likewise. Both are returned separately; the
    normal loss adds them, the albedo loss averages them.

    Args:
        pred (`torch.Tensor` of shape `(batch_size, channels, height, width)`): Prediction.
        target (`torch.Tensor` of shape `(batch_size, channels, height, width)`): Target.
        mask (`torch.Tensor` of shape `(batch_size, 1, height, width)`): Float 0/1 validity.

    Returns:
        `tuple[torch.Tensor, torch.Tensor]`: the horizontal and the vertical term (scalars).
    """
    pred_dx = pred[:, :, :, 1:] - pred[:, :, :, :-1]  # (B, C, H, W-1)
    pred_dy = pred[:, :, 1:, :] - pred[:, :, :-1, :]  # (B, C, H-1, W)
    target_dx = target[:, :, :, 1:] - target[:, :, :, :-1]
    target_dy = target[:, :, 1:, :] - target[:, :, :-1, :]
    pairs_dx = mask[:, :, :, 1:] * mask[:, :, :, :-1]  # (B, 1, H, W-1)
    pairs_dy = mask[:, :, 1:, :] * mask[:, :, :-1, :]  # (B, 1, H-1, W)
    error_dx = torch.where(pairs_dx.bool().expand_as(pred_dx), (pred_dx - target_dx) ** 2, torch.zeros_like(pred_dx))
    error_dy = torch.where(pairs_dy.bool().expand_as(pred_dy), (pred_dy - target_dy) ** 2, torch.zeros_like(pred_dy))
    loss_dx = error_dx.sum() / pairs_dx.sum().clamp(min=1)
    loss_dy = error_dy.sum() / pairs_dy.sum().clamp(min=1)
    return loss_dx, loss_dy


def check_same_shape(pred: torch.Tensor, target: torch.Tensor, pred_name: str, target_name: str) -> None:
    """Raise a ValueError naming both arguments when two `(batch_size, channels, height, width)` tensors differ."""
    if pred.dim() != 4:
        raise ValueError(f"`{pred_name}` must be 4-D (batch_size, channels, height, width), got {tuple(pred.shape)}.")
    if pred.shape != target.shape:
        raise ValueError(
            f"`{pred_name}` {tuple(pred.shape)} and `{target_name}` {tuple(target.shape)} must have the same shape; "
            f"resize the prediction to the target size first (bilinear, align_corners=False, as the official heads do)."
        )
