# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The official Sapiens2 fine-tuning losses, one per task, self-contained (torch only).

`PoseHeatmapLoss`, `SegmentationLoss`, `NormalLoss`, `PointmapLoss`, `AlbedoLoss` and `MattingLoss` each return
`(total, {"<name>_loss": weighted term, ...})`; their defaults reproduce the official fine-tuning recipes. The task
models compute `loss` with them when `labels` is given (so transformers' stock `Trainer` trains every task).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


# ----------------------------------------------- masked reductions of the dense-task losses (normal, pointmap, albedo)

# The official dense losses' reduction rule (facebookresearch/sapiens2 ``sapiens/dense/src/models/losses``): sums run
# over channels *and* valid pixels, divided by the number of valid pixels. Masked-out pixels are excluded with
# ``torch.where``, not by multiplying with the mask, so a non-finite background target (-1000, NaN) never leaks in.
# Maps are `(B, C, H, W)`, masks float 0/1 `(B, 1, H, W)` (`as_valid_mask`); each reduction returns a scalar.


def as_valid_mask(mask: torch.Tensor | None, reference: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """A bool or numeric validity `mask` `(batch_size[, 1], height, width)` (valid where non-zero; `None`: all) as a
    float 0/1 `(batch_size, 1, height, width)` tensor, checked against the batch and spatial sizes of `reference`
    (a ValueError naming `name` otherwise)."""
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
    """Sum of absolute errors over channels and valid pixels divided by the number of valid pixels."""
    num_valid = mask.sum()
    if num_valid == 0:
        return zero_like_graph(pred)
    valid = mask.bool().expand_as(pred)
    error = torch.where(valid, (pred - target).abs(), torch.zeros_like(pred))
    return torch.nan_to_num(error.sum() / num_valid.clamp(min=1), nan=0.0, posinf=0.0, neginf=0.0)


def forward_difference_squared_error(
    pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Squared error of the forward differences of `pred` and `target` ("grad L1" in the official code), summed over
    channels and neighbour pairs of valid pixels, divided by the number of pairs: `(dx, dy)` scalars.
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


def on_target_grid(pred: torch.Tensor, target: torch.Tensor, pred_name: str, target_name: str):
    """`(pred, target)` in float32, a `(batch, channels, height, width)` prediction resized bilinearly to the target's
    grid; a ValueError naming both when their shapes still differ."""
    pred, target = pred.float(), target.float()
    if pred.dim() != 4:
        raise ValueError(f"`{pred_name}` must be 4-D (batch_size, channels, height, width), got {tuple(pred.shape)}.")
    if pred.shape[2:] != target.shape[2:]:
        pred = F.interpolate(pred, size=target.shape[2:], mode="bilinear", align_corners=False)
    if pred.shape != target.shape:
        raise ValueError(
            f"`{pred_name}` {tuple(pred.shape)} and `{target_name}` {tuple(target.shape)} must have the same shape; "
            f"resize the prediction to the target size first (bilinear, align_corners=False, as the official heads do)."
        )
    return pred, target


# ---------------------------------------------------------------------------------------------------------------- pose

class PoseHeatmapLoss(nn.Module):
    """Keypoint-weighted mean squared error of heatmaps (official ``KeypointMSELoss``, ``use_target_weight=True``,
    `loss_weight` 10; facebookresearch/sapiens2 ``sapiens/pose/src/models/losses/heatmap_loss.py``).

    Each pixel's squared error times its keypoint's target weight is averaged over all `batch_size * num_keypoints *
    height * width` elements, so keypoints with weight 0 still count in the divisor: the official normalisation, not
    transformers' stock pose loss (`F.mse_loss(..., weight=...)`).
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
        """`heatmaps` (raw head output, any float dtype; computed in float32) and `target_heatmaps` (UDP Gaussians,
        peak 1), both `(batch_size, num_keypoints, height, width)`; `target_weights` `(batch_size, num_keypoints)` or
        `(batch_size, num_keypoints, 1, 1)` (visibility times joint weight; required with `use_target_weight`).
        Returns the scalar total and `{"keypoint_mse_loss": total}`.
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


# ---------------------------------------------------------------------------------------------- body-part segmentation

# The label value both seg terms ignore, and the cross-entropy class weights of every official seg config
# (background 0.1); from the project spec file seg29.json (facebookresearch/sapiens2 commit 3098c14, the seg configs'
# `CLASS_WEIGHT`). `sapiens2_hf.data.label_tables` re-exports both.
SEG_IGNORE_INDEX = 255
SEG_CE_CLASS_WEIGHTS = (
    0.1, 10.0, 10.0, 3.0, 2.0, 4.0, 4.0, 2.0, 2.0, 6.0, 10.0, 3.0, 3.0, 1.0, 4.0,
    4.0, 2.0, 2.0, 6.0, 10.0, 3.0, 3.0, 1.0, 1.0, 10.0, 10.0, 10.0, 10.0, 10.0,
)


def dice_loss(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int, eps: float = 1e-3) -> torch.Tensor:
    """Softmax Dice loss without background, macro-averaged over the classes present in each sample.

    Per sample and foreground class c, with p the softmax probability and g the one-hot label, both zeroed on ignored
    pixels: `dice_c = (2 * sum(p * g) + eps) / (sum(p^2) + sum(g^2) + eps)`; a sample's loss is `1 - mean(dice_c)`
    over its present classes. As the official runner does, the mean runs over the *whole* batch, samples without a
    labelled foreground class contributing 0.

    Reference: facebookresearch/sapiens2 ``sapiens/dense/src/models/losses/seg_loss.py`` (``DiceLoss``,
    ``naive_dice=False``, ``include_background=False``). `logits` `(B, C, H, W)`, `labels` int64 `(B, H, W)`.
    """
    num_classes = logits.shape[1]
    probabilities = logits.softmax(dim=1)
    valid = (labels != ignore_index).unsqueeze(1)  # (B, 1, H, W)
    safe_labels = torch.where(labels == ignore_index, torch.zeros_like(labels), labels).clamp(0, num_classes - 1)
    one_hot = F.one_hot(safe_labels, num_classes).permute(0, 3, 1, 2).to(probabilities.dtype)  # (B, C, H, W)
    pred = (probabilities * valid)[:, 1:]  # background excluded -> (B, C-1, H, W)
    gt = (one_hot * valid)[:, 1:]
    intersection = (pred * gt).sum(dim=(2, 3))  # (B, C-1)
    pred_sq = (pred * pred).sum(dim=(2, 3))
    gt_sq = (gt * gt).sum(dim=(2, 3))
    dice_per_class = (2 * intersection + eps) / (pred_sq + gt_sq + eps)
    present = (gt.sum(dim=(2, 3)) > 0).to(pred.dtype)  # (B, C-1)
    dice_per_sample = (dice_per_class * present).sum(dim=1) / present.sum(dim=1).clamp(min=1)
    sample_counts = present.any(dim=1) & valid.flatten(1).any(dim=1)  # (B,)
    return ((1.0 - dice_per_sample) * sample_counts.to(pred.dtype)).mean()


class SegmentationLoss(nn.Module):
    """Official Sapiens2 body-part segmentation loss: class-weighted cross-entropy (x1) + Dice (x1), on logits first
    resized bilinearly (``align_corners=False``) to the label size when smaller, as the official head does.

    Reference: facebookresearch/sapiens2 ``sapiens/dense/src/models/losses/seg_loss.py`` and the seg configs.

    Args:
        class_weights (`Sequence[float]`, *optional*): Cross-entropy class weights; defaults to the official 29
            weights (`SEG_CE_CLASS_WEIGHTS`, background 0.1). Pass `()` for an unweighted cross-entropy.
        ignore_index (`int`, defaults to 255): Label value excluded from both terms.
    """

    def __init__(
        self,
        class_weights: Sequence[float] | None = None,
        ignore_index: int = SEG_IGNORE_INDEX,
        cross_entropy_weight: float = 1.0,
        dice_weight: float = 1.0,
        dice_eps: float = 1e-3,
    ):
        super().__init__()
        weights = SEG_CE_CLASS_WEIGHTS if class_weights is None else tuple(class_weights)
        self.register_buffer(
            "class_weights", torch.tensor(weights, dtype=torch.float32) if weights else None, persistent=False
        )
        self.ignore_index = int(ignore_index)
        self.cross_entropy_weight = float(cross_entropy_weight)
        self.dice_weight = float(dice_weight)
        self.dice_eps = float(dice_eps)

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Raw `logits` `(batch_size, num_classes, height, width)` (computed in float32) against int `labels`
        `(batch_size[, 1], height, width)`, class ids in `[0, num_classes)` or `ignore_index`. Returns the scalar total
        and its weighted terms `cross_entropy_loss` and `dice_loss`.
        """
        if labels.dim() == 4 and labels.shape[1] == 1:
            labels = labels[:, 0]
        if logits.dim() != 4 or labels.dim() != 3 or logits.shape[0] != labels.shape[0]:
            raise ValueError(
                f"`logits` must be (batch_size, num_classes, height, width) and `labels` (batch_size, height, width); "
                f"got {tuple(logits.shape)} and {tuple(labels.shape)}."
            )
        num_classes = logits.shape[1]
        if self.class_weights is not None and self.class_weights.numel() != num_classes:
            raise ValueError(
                f"{self.class_weights.numel()} class weights for {num_classes} logit channels; pass `class_weights` "
                "with one weight per class."
            )
        labels = labels.long()
        bad = (labels != self.ignore_index) & ((labels < 0) | (labels >= num_classes))
        if bad.any():
            raise ValueError(
                f"`labels` contain values outside [0, {num_classes}) that are not ignore_index={self.ignore_index}: "
                f"{labels[bad].unique().tolist()[:8]}."
            )
        logits = logits.float()
        if logits.shape[2:] != labels.shape[1:]:
            logits = F.interpolate(logits, size=labels.shape[1:], mode="bilinear", align_corners=False)
        # The official runner takes the plain mean of the per-pixel map: ignored pixels count in the divisor, unlike
        # F.cross_entropy(reduction="mean"), which divides by the class weights of the labelled pixels.
        cross_entropy = self.cross_entropy_weight * F.cross_entropy(
            logits, labels, weight=self.class_weights, reduction="none", ignore_index=self.ignore_index
        ).mean()
        dice = self.dice_weight * dice_loss(logits, labels, self.ignore_index, self.dice_eps)
        terms = {"cross_entropy_loss": cross_entropy, "dice_loss": dice}
        return cross_entropy + dice, terms


# ----------------------------------------------------------------------------------------------------- surface normals

class NormalLoss(nn.Module):
    """Official Sapiens2 surface-normal loss: `10 * cosine + 1 * L1 + 10 * grad`, in float32, each term NaN/inf-guarded
    to 0 as in the official code; a smaller prediction is first resized bilinearly (``align_corners=False``).

    * cosine: mean over valid pixels of `1 - cos(pred, target)` after unit-normalising both (eps 1e-6);
    * L1: `masked_l1` of the *raw* (not normalised) prediction against the unit target;
    * grad: `forward_difference_squared_error` of the raw prediction and the target, both terms added.

    Reference: facebookresearch/sapiens2 ``sapiens/dense/src/models/losses/normal_loss.py`` and the normal configs.
    """

    def __init__(self, cosine_weight: float = 10.0, l1_weight: float = 1.0, grad_weight: float = 10.0):
        super().__init__()
        self.cosine_weight = float(cosine_weight)
        self.l1_weight = float(l1_weight)
        self.grad_weight = float(grad_weight)

    def forward(
        self, normals: torch.Tensor, target_normals: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Raw camera-frame `normals` (not unit length) against unit `target_normals` (any value, -1000 or NaN, off
        the valid pixels of `mask`, as `as_valid_mask` takes it), both `(batch_size, 3, height, width)`. Returns the
        scalar total and its weighted terms `cosine_loss`, `l1_loss` and `grad_loss`.
        """
        normals, target_normals = on_target_grid(normals, target_normals, "normals", "target_normals")
        valid = as_valid_mask(mask, target_normals)
        target_normals = torch.where(valid.bool(), target_normals, torch.zeros_like(target_normals))

        if valid.sum() == 0:
            zero = zero_like_graph(normals)
            return zero, {"cosine_loss": zero, "l1_loss": zero, "grad_loss": zero}

        cosine = (F.normalize(normals, dim=1, eps=1e-6) * F.normalize(target_normals, dim=1, eps=1e-6)).sum(1, True)
        cosine_error = torch.where(valid.bool(), 1.0 - cosine, torch.zeros_like(cosine))  # (B, 1, H, W)
        cosine_loss = torch.nan_to_num(cosine_error.sum() / valid.sum(), nan=0.0, posinf=0.0, neginf=0.0)

        l1_loss = masked_l1(normals, target_normals, valid)

        loss_dx, loss_dy = forward_difference_squared_error(normals, target_normals, valid)
        grad_loss = torch.nan_to_num(loss_dx + loss_dy, nan=0.0, posinf=0.0, neginf=0.0)

        terms = {
            "cosine_loss": self.cosine_weight * cosine_loss,
            "l1_loss": self.l1_weight * l1_loss,
            "grad_loss": self.grad_weight * grad_loss,
        }
        return sum(terms.values()), terms


# ------------------------------------------------------------------------------------------------------------ pointmap

def multiscale_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, scale_factor: int = 2) -> torch.Tensor:
    """L1 after **upsampling** both maps by `scale_factor` (bilinear; the mask nearest): despite its name the
    official "multiscale" term goes up, not down, in resolution."""
    if mask.sum() == 0:
        return zero_like_graph(pred)
    pred_up = F.interpolate(pred, scale_factor=scale_factor, mode="bilinear", align_corners=False)
    target_up = F.interpolate(target, scale_factor=scale_factor, mode="bilinear", align_corners=False)
    mask_up = F.interpolate(mask, scale_factor=scale_factor, mode="nearest")
    return masked_l1(pred_up, target_up, mask_up)


def shift_invariant_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L1 after subtracting each map's masked centroid (per sample and channel; centroid divisor `count + 1e-6`)."""
    if mask.sum() == 0:
        return zero_like_graph(pred)
    count = mask.sum(dim=(2, 3)) + 1e-6  # (B, 1)
    pred_centroid = (pred * mask).sum(dim=(2, 3)) / count  # (B, 3)
    target_centroid = (target * mask).sum(dim=(2, 3)) / count
    return masked_l1(pred - pred_centroid[:, :, None, None], target - target_centroid[:, :, None, None], mask)


def silog(pred_depth: torch.Tensor, target_depth: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scale-invariant log error of canonical depth `(batch_size, 1, height, width)`: per image, with
    `d = log(max(z_gt, 1e-4)) - log(max(z_pred, 1e-4))` over valid pixels, `sqrt(mean(d^2) - 0.5 * mean(d)^2)`;
    averaged over the batch, images without valid pixels counting 0, as officially."""
    diff = torch.log(target_depth.clamp(min=1e-4)) - torch.log(pred_depth.clamp(min=1e-4))
    valid = (mask > 0) & ~torch.isnan(diff)
    diff = torch.where(valid, diff, torch.zeros_like(diff)).flatten(1)  # (B, H*W)
    count = valid.flatten(1).to(diff.dtype).sum(dim=1)  # (B,)
    denominator = count.clamp(min=1e-4)
    variance = (diff**2).sum(dim=1) / denominator - 0.5 * ((diff.sum(dim=1) / denominator) ** 2)
    # sqrt only where the variance is positive: same value as the official loss, but a zero (not NaN) gradient for
    # images without valid pixels or with a perfect prediction.
    positive = (count > 0) & (variance > 0)
    per_image = torch.where(positive, torch.sqrt(torch.where(positive, variance, torch.ones_like(variance))), 0.0)
    return per_image.mean()


def intrinsics_consistency(pointmap: torch.Tensor, mask: torch.Tensor, intrinsics: torch.Tensor) -> torch.Tensor:
    """`|X - (u - c_x) Z / f_x| + |Y - (v - c_y) Z / f_y|` over valid pixels, divided by their number; `u`, `v`
    integer pixel indices, `intrinsics` `(batch_size, 3, 3)` of the same grid **before** canonicalisation (X/Z and
    Y/Z do not depend on it)."""
    if mask.sum() == 0:
        return zero_like_graph(pointmap)
    batch_size, _, height, width = pointmap.shape
    intrinsics = intrinsics.to(pointmap.dtype)
    cols = torch.arange(width, device=pointmap.device, dtype=pointmap.dtype).view(1, 1, width)
    rows = torch.arange(height, device=pointmap.device, dtype=pointmap.dtype).view(1, height, 1)
    fx, fy = intrinsics[:, 0, 0].view(-1, 1, 1), intrinsics[:, 1, 1].view(-1, 1, 1)
    cx, cy = intrinsics[:, 0, 2].view(-1, 1, 1), intrinsics[:, 1, 2].view(-1, 1, 1)
    x, y, z = pointmap[:, 0], pointmap[:, 1], pointmap[:, 2]  # (B, H, W) each
    error = (x - (cols - cx) * z / fx).abs() + (y - (rows - cy) * z / fy).abs()
    valid = mask[:, 0].bool()
    error = torch.where(valid, error, torch.zeros_like(error))
    return torch.nan_to_num(error.sum() / mask.sum(), nan=0.0)


def pointmap_normals(pointmap: torch.Tensor, mask: torch.Tensor, amplification: float = 100.0):
    """Unit normals `(batch_size, 3, height, width)` (zero where invalid) from the cross product of right and down
    differences of a reflect-padded metric pointmap, and their bool validity `(batch_size, 1, height, width)` (mask
    and a cross product over 1e-6, after `amplification`: official 100). Float32 rounding decides the validity of a
    pixel whose two neighbours are off the mask, exactly as in the official code.
    """
    padded = F.pad(pointmap, (1, 1, 1, 1), mode="reflect")
    center = padded[:, :, 1:-1, 1:-1]
    right = (padded[:, :, 1:-1, 2:] - center) * amplification
    down = (padded[:, :, 2:, 1:-1] - center) * amplification
    normal = torch.cross(right, down, dim=1)  # (B, 3, H, W)
    magnitude = normal.norm(dim=1, keepdim=True)
    valid = (magnitude > 1e-6) & (mask > 0)
    normal = normal / magnitude.clamp(min=1e-6) * valid.to(normal.dtype)
    return normal, valid


def pointmap_normal_loss(
    pointmap: torch.Tensor, target_pointmap: torch.Tensor, mask: torch.Tensor, target_scale: torch.Tensor
) -> torch.Tensor:
    """`(1 - cos) + mean_c |n_pred - n_gt|` over pixels where the target normal is valid, with normals computed on
    metric maps (canonical map divided by the target scale)."""
    if mask.sum() == 0:
        return zero_like_graph(pointmap)
    scale = target_scale.to(pointmap.dtype).view(-1, 1, 1, 1)
    pred_normals, _ = pointmap_normals(pointmap / scale, mask)
    target_normals, target_valid = pointmap_normals(target_pointmap / scale, mask)
    cosine = (pred_normals * target_normals).sum(dim=1, keepdim=True).clamp(-1.0, 1.0)
    per_pixel = (1.0 - cosine) + (pred_normals - target_normals).abs().mean(dim=1, keepdim=True)
    per_pixel = torch.where(target_valid, per_pixel, torch.zeros_like(per_pixel))
    return per_pixel.sum() / target_valid.sum().clamp(min=1)


def _pointmap_loss_inputs(pointmaps, scales, target_pointmaps, target_scales, mask, intrinsics):
    """`PointmapLoss`'s inputs in float32, checked: the prediction resized to the target's grid, one scale per
    sample, `(batch_size, 3, 3)` intrinsics; the target zeroed off the valid mask, returned with that mask."""
    pointmaps, target_pointmaps = on_target_grid(pointmaps, target_pointmaps, "pointmaps", "target_pointmaps")
    batch_size = pointmaps.shape[0]
    if intrinsics.shape != (batch_size, 3, 3):
        raise ValueError(f"`intrinsics` must have shape {(batch_size, 3, 3)}, got {tuple(intrinsics.shape)}.")
    scales = scales.float().reshape(batch_size, -1)
    target_scales = target_scales.float().reshape(batch_size, -1)
    if scales.shape[1] != 1 or target_scales.shape[1] != 1:
        raise ValueError("`scales` and `target_scales` must hold one value per sample, shape (batch_size, 1).")
    valid = as_valid_mask(mask, target_pointmaps)
    target_pointmaps = torch.where(valid.bool(), target_pointmaps, torch.zeros_like(target_pointmaps))
    return pointmaps, scales, target_pointmaps, target_scales, valid


class PointmapLoss(nn.Module):
    """Official Sapiens2 pointmap loss, seven terms in the canonical camera (focal length 768 px):

    | term (key) | weight | on |
    |---|---|---|
    | `l1_loss` | 2 | pred / m, target / m; weighted value clamped at 4 |
    | `multiscale_l1_loss` | 1 | same, after 2x bilinear upsampling; clamped at 4 |
    | `silog_loss` | 1 | canonical Z |
    | `intrinsics_consistency_loss` | 1 | canonical prediction vs the pre-canonical intrinsics |
    | `shift_invariant_l1_loss` | 1 | pred / m, target / m, centroids removed; clamped at 4 |
    | `normal_loss` | 2 | normals of pred / s_gt and target / s_gt (metric) |
    | `scale_l1_loss` | 4 | `|s_pred - s_gt|`, batch mean |

    m is each sample's mean canonical target depth over its valid pixels, s the canonical scale `768 / f_x`. The
    clamp (`clamp_max`) applies to the *weighted* term, as the official head clamps its loss module's value.
    Reference: facebookresearch/sapiens2 ``sapiens/dense/src/models/heads/pointmap_head.py`` (``loss``).
    """

    def __init__(
        self,
        l1_weight: float = 2.0,
        multiscale_weight: float = 1.0,
        silog_weight: float = 1.0,
        intrinsics_weight: float = 1.0,
        shift_invariant_weight: float = 1.0,
        normal_weight: float = 2.0,
        scale_weight: float = 4.0,
        clamp_max: float = 4.0,
    ):
        super().__init__()
        self.l1_weight = float(l1_weight)
        self.multiscale_weight = float(multiscale_weight)
        self.silog_weight = float(silog_weight)
        self.intrinsics_weight = float(intrinsics_weight)
        self.shift_invariant_weight = float(shift_invariant_weight)
        self.normal_weight = float(normal_weight)
        self.scale_weight = float(scale_weight)
        self.clamp_max = float(clamp_max)

    def forward(
        self,
        pointmaps: torch.Tensor,
        scales: torch.Tensor,
        target_pointmaps: torch.Tensor,
        target_scales: torch.Tensor,
        mask: torch.Tensor | None,
        intrinsics: torch.Tensor,
        target_mean_depth: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """
        Args:
            pointmaps, target_pointmaps (`torch.Tensor` of shape `(batch_size, 3, height, width)`): canonical XYZ
                (camera frame: X right, Y down, Z forward; metric XYZ times `768 / f_x`); the target any value off
                `mask` (valid pixels, as `as_valid_mask` takes them).
            scales, target_scales (`torch.Tensor` of shape `(batch_size, 1)` or `(batch_size,)`): `768 / f_x`.
            intrinsics (`torch.Tensor` of shape `(batch_size, 3, 3)`): pixel intrinsics of the map's grid before
                canonicalisation.
            target_mean_depth (`torch.Tensor` of shape `(batch_size,)`, *optional*): mean canonical target Z over
                valid pixels; computed from the target when omitted.

        Returns the scalar total and the seven weighted terms.
        """
        pointmaps, scales, target_pointmaps, target_scales, valid = _pointmap_loss_inputs(
            pointmaps, scales, target_pointmaps, target_scales, mask, intrinsics)
        if target_mean_depth is None:
            target_mean_depth = (target_pointmaps[:, 2:3] * valid).sum(dim=(1, 2, 3)) / valid.sum(dim=(1, 2, 3)).clamp(
                min=1
            )
        mean_depth = target_mean_depth.float().reshape(pointmaps.shape[0], 1, 1, 1)
        terms = self._terms(pointmaps, scales, target_pointmaps, target_scales, valid, intrinsics, mean_depth)
        return sum(terms.values()), terms

    def _terms(self, pointmaps, scales, target_pointmaps, target_scales, valid, intrinsics,
               mean_depth) -> dict[str, torch.Tensor]:
        """The seven weighted terms (the class docstring's table); `mean_depth` `(batch_size, 1, 1, 1)` is m."""
        pred_normalised = pointmaps / mean_depth
        target_normalised = target_pointmaps / mean_depth
        return {
            "l1_loss": (self.l1_weight * masked_l1(pred_normalised, target_normalised, valid)).clamp(
                max=self.clamp_max
            ),
            "multiscale_l1_loss": (
                self.multiscale_weight * multiscale_l1(pred_normalised, target_normalised, valid)
            ).clamp(max=self.clamp_max),
            "silog_loss": self.silog_weight * silog(pointmaps[:, 2:3], target_pointmaps[:, 2:3], valid),
            "intrinsics_consistency_loss": self.intrinsics_weight
            * intrinsics_consistency(pointmaps, valid, intrinsics.float()),
            "shift_invariant_l1_loss": (
                self.shift_invariant_weight * shift_invariant_l1(pred_normalised, target_normalised, valid)
            ).clamp(max=self.clamp_max),
            "normal_loss": self.normal_weight
            * pointmap_normal_loss(pointmaps, target_pointmaps, valid, target_scales),
            "scale_l1_loss": self.scale_weight * (scales - target_scales).abs().mean(),
        }


# -------------------------------------------------------------------------------------------------------------- albedo

def chromaticity(rgb: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-pixel chromaticity `rgb / (r + g + b + eps)` of `(batch_size, 3, height, width)` colours in [0, 1]."""
    return rgb / (rgb.sum(dim=1, keepdim=True) + eps)


class AlbedoLoss(nn.Module):
    """Official Sapiens2 albedo loss: `2 * L1 + 2 * grad + 1 * chromaticity`, in float32, on the target's grid.

    * L1: `masked_l1` of the raw prediction;
    * grad: `0.5 * (dx + dy)` of `forward_difference_squared_error` ("grad L1" in the official code);
    * chromaticity: L1 between `rgb / (r + g + b + 1e-6)` of the prediction **clamped to [0, 1]** and of the target,
      summed over channels, divided by the number of valid pixels.

    The official low-frequency L1 is commented out in every released config, so it is not part of the objective.
    Reference: facebookresearch/sapiens2 ``sapiens/dense/src/models/losses/albedo_loss.py`` and the albedo configs.
    """

    def __init__(self, l1_weight: float = 2.0, grad_weight: float = 2.0, chromaticity_weight: float = 1.0):
        super().__init__()
        self.l1_weight = float(l1_weight)
        self.grad_weight = float(grad_weight)
        self.chromaticity_weight = float(chromaticity_weight)

    def forward(
        self, albedos: torch.Tensor, target_albedos: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Raw RGB `albedos` against `target_albedos` in [0, 1], both `(batch_size, 3, height, width)`, on the valid
        pixels of `mask` (as `as_valid_mask` takes it). Returns the scalar total and its weighted terms `l1_loss`,
        `grad_loss` and `chromaticity_loss`.
        """
        albedos, target_albedos = on_target_grid(albedos, target_albedos, "albedos", "target_albedos")
        if albedos.shape[1] != 3:
            raise ValueError(f"`albedos` must have 3 (RGB) channels, got {albedos.shape[1]}.")
        valid = as_valid_mask(mask, target_albedos)
        target_albedos = torch.where(valid.bool(), target_albedos, torch.zeros_like(target_albedos))
        if valid.sum() == 0:
            zero = zero_like_graph(albedos)
            return zero, {"l1_loss": zero, "grad_loss": zero, "chromaticity_loss": zero}

        l1_loss = masked_l1(albedos, target_albedos, valid)
        loss_dx, loss_dy = forward_difference_squared_error(albedos, target_albedos, valid)
        grad_loss = torch.nan_to_num(0.5 * (loss_dx + loss_dy), nan=0.0, posinf=0.0, neginf=0.0)
        chroma_error = (chromaticity(albedos.clamp(0, 1)) - chromaticity(target_albedos)).abs()
        chroma_error = torch.where(valid.bool().expand_as(chroma_error), chroma_error, torch.zeros_like(chroma_error))
        chroma_loss = torch.nan_to_num(chroma_error.sum() / valid.sum(), nan=0.0, posinf=0.0, neginf=0.0)
        terms = {
            "l1_loss": self.l1_weight * l1_loss,
            "grad_loss": self.grad_weight * grad_loss,
            "chromaticity_loss": self.chromaticity_weight * chroma_loss,
        }
        return sum(terms.values()), terms


# ------------------------------------------------------------------------------------------------------------- matting

# The official recipe trains with L1, gradient and Laplacian losses of weight 1 each; its loss code is not in the
# mirrored official commit, so the terms follow the matting literature: alpha L1 (Xu et al., CVPR 2017), L1 of the
# alpha's finite differences over valid pairs (Zhang et al., CVPR 2019), L1 of 5-level Laplacian pyramids (level `i`
# weighted `2**i`; Hou and Liu, ICCV 2019), and L1 of the pre-multiplied foreground (`alpha * F`, what the head
# predicts). The composition loss is left out: it needs background plates, which human matting datasets rarely have.


_BINOMIAL_5 = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0


def _gaussian_blur5(image: torch.Tensor) -> torch.Tensor:
    """Separable 5x5 binomial blur with reflection padding, per channel; `(B, C, H, W)` (H, W >= 3)."""
    channels = image.shape[1]
    kernel = _BINOMIAL_5.to(image)
    horizontal = kernel.view(1, 1, 1, 5).expand(channels, 1, 1, 5)
    vertical = kernel.view(1, 1, 5, 1).expand(channels, 1, 5, 1)
    image = F.conv2d(F.pad(image, (2, 2, 0, 0), mode="reflect"), horizontal, groups=channels)
    return F.conv2d(F.pad(image, (0, 0, 2, 2), mode="reflect"), vertical, groups=channels)


def laplacian_pyramid(image: torch.Tensor, levels: int = 5) -> list[torch.Tensor]:
    """Laplacian pyramid of `(B, C, H, W)` images: `levels - 1` band-pass levels then the low-pass residual.

    Each level is the image minus its blurred, 2x-downsampled and bilinearly re-upsampled self; the next level is the
    blurred, downsampled image. Stops early once a side would drop below 3 pixels.
    """
    pyramid = []
    current = image
    for _ in range(levels - 1):
        if min(current.shape[-2:]) < 6:
            break
        down = _gaussian_blur5(current)[..., ::2, ::2]
        up = F.interpolate(down, size=current.shape[-2:], mode="bilinear", align_corners=False)
        pyramid.append(current - up)
        current = down
    pyramid.append(current)
    return pyramid


def _masked_mean_abs(error: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean of `|error|` over valid entries (`valid` broadcastable to `error`), 0 (graph-connected) when none."""
    valid = valid.expand_as(error)
    count = valid.sum()
    if count == 0:
        return zero_like_graph(error)
    return torch.where(valid, error.abs(), torch.zeros_like(error)).sum() / count


def _alpha_gradient_l1(error: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean absolute horizontal and vertical differences of the matte error, over pairs of valid pixels."""
    pairs_x = valid[..., :, 1:] & valid[..., :, :-1]
    pairs_y = valid[..., 1:, :] & valid[..., :-1, :]
    return 0.5 * (_masked_mean_abs(error[..., :, 1:] - error[..., :, :-1], pairs_x)
                  + _masked_mean_abs(error[..., 1:, :] - error[..., :-1, :], pairs_y))


def _foreground_l1(foregrounds, target_foregrounds, valid: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
    """Masked L1 of the foreground colours (resized to the target's grid); zero (on the graph) without them."""
    if foregrounds is None or target_foregrounds is None:
        return zero_like_graph(alphas)
    foregrounds, target_foregrounds = on_target_grid(foregrounds, target_foregrounds, "foregrounds",
                                                     "target_foregrounds")
    return _masked_mean_abs(foregrounds - target_foregrounds, valid)


def _laplacian_l1(prediction: torch.Tensor, target: torch.Tensor, levels: int) -> torch.Tensor:
    """L1 between the Laplacian pyramids of `prediction` and `target`, level `i` weighted `2**i`."""
    pyramids = zip(laplacian_pyramid(prediction, levels), laplacian_pyramid(target, levels))
    return sum((2.0**level) * (pred - tgt).abs().mean() for level, (pred, tgt) in enumerate(pyramids))


def _matting_loss_inputs(alphas: torch.Tensor, target_alphas: torch.Tensor, mask: torch.Tensor | None):
    """`(alphas, target_alphas, valid)` in float32 `(B, 1, H, W)` (valid bool), the prediction resized to the
    target's grid, the shapes checked."""
    if target_alphas.dim() == 3:
        target_alphas = target_alphas.unsqueeze(1)
    alphas, target_alphas = on_target_grid(alphas, target_alphas, "alphas", "target_alphas")
    if alphas.shape[1] != 1:
        raise ValueError(f"`alphas` must have 1 channel, got {alphas.shape[1]}.")
    return alphas, target_alphas, as_valid_mask(mask, target_alphas).bool()


class MattingLoss(nn.Module):
    """Matting loss (see the section comment above): `l1 + gradient + laplacian` on alpha, plus `foreground` L1.

    Every term weighs 1, as the official recipe weighs its three terms; `laplacian_levels` defaults to 5.
    """

    def __init__(self, l1_weight: float = 1.0, gradient_weight: float = 1.0, laplacian_weight: float = 1.0,
                 foreground_weight: float = 1.0, laplacian_levels: int = 5):
        super().__init__()
        self.l1_weight = float(l1_weight)
        self.gradient_weight = float(gradient_weight)
        self.laplacian_weight = float(laplacian_weight)
        self.foreground_weight = float(foreground_weight)
        self.laplacian_levels = int(laplacian_levels)

    def forward(
        self,
        alphas: torch.Tensor,
        foregrounds: torch.Tensor | None,
        target_alphas: torch.Tensor,
        mask: torch.Tensor | None = None,
        target_foregrounds: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Predicted `alphas` `(batch_size, 1, height, width)` (resized bilinearly to the target size when smaller)
        and pre-multiplied RGB `foregrounds` `(batch_size, 3, height, width)`, in [0, 1], against `target_alphas`
        `(batch_size[, 1], height, width)` and `target_foregrounds` (`alpha * F`; without it the foreground term is
        0), on the pixels of `mask` (as `as_valid_mask` takes it). Returns the scalar total and its weighted terms
        `alpha_l1_loss`, `alpha_gradient_loss`, `alpha_laplacian_loss` and `foreground_l1_loss`.
        """
        alphas, target_alphas, valid = _matting_loss_inputs(alphas, target_alphas, mask)
        if not valid.any():
            zero = zero_like_graph(alphas)
            return zero, {name: zero for name in ("alpha_l1_loss", "alpha_gradient_loss", "alpha_laplacian_loss",
                                                  "foreground_l1_loss")}
        target_alphas = torch.where(valid, target_alphas, torch.zeros_like(target_alphas))

        l1 = _masked_mean_abs(alphas - target_alphas, valid)
        gradient = _alpha_gradient_l1(alphas - target_alphas, valid)
        # Masked-out pixels take the target's value so that they add no error to any pyramid level.
        filled = torch.where(valid, alphas, target_alphas)
        laplacian = _laplacian_l1(filled, target_alphas, self.laplacian_levels)
        foreground = _foreground_l1(foregrounds, target_foregrounds, valid, alphas)
        terms = {
            "alpha_l1_loss": self.l1_weight * l1,
            "alpha_gradient_loss": self.gradient_weight * gradient,
            "alpha_laplacian_loss": self.laplacian_weight * laplacian,
            "foreground_l1_loss": self.foreground_weight * foreground,
        }
        return sum(terms.values()), terms
