"""Pointmap loss of the official Sapiens2 recipe (seven terms, all in the canonical camera)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._masked import as_valid_mask, check_same_shape, masked_l1, zero_like_graph


def multiscale_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, scale_factor: int = 2) -> torch.Tensor:
    """L1 after **upsampling** both maps by `scale_factor` (bilinear, ``align_corners=False``; the mask nearest).

    Despite its name the official "multiscale" term goes up, not down, in resolution.

    Args:
        pred, target (`torch.Tensor` of shape `(batch_size, 3, height, width)`): Maps to compare.
        mask (`torch.Tensor` of shape `(batch_size, 1, height, width)`): Float 0/1 validity.

    Returns:
        `torch.Tensor`: scalar, channel-summed error per valid upsampled pixel.
    """
    if mask.sum() == 0:
        return zero_like_graph(pred)
    pred_up = F.interpolate(pred, scale_factor=scale_factor, mode="bilinear", align_corners=False)
    target_up = F.interpolate(target, scale_factor=scale_factor, mode="bilinear", align_corners=False)
    mask_up = F.interpolate(mask, scale_factor=scale_factor, mode="nearest")
    return masked_l1(pred_up, target_up, mask_up)


def shift_invariant_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L1 after subtracting each map's masked centroid (per sample and channel; centroid divisor `count + 1e-6`).

    Returns:
        `torch.Tensor`: scalar, channel-summed error per valid pixel.
    """
    if mask.sum() == 0:
        return zero_like_graph(pred)
    count = mask.sum(dim=(2, 3)) + 1e-6  # (B, 1)
    pred_centroid = (pred * mask).sum(dim=(2, 3)) / count  # (B, 3)
    target_centroid = (target * mask).sum(dim=(2, 3)) / count
    return masked_l1(pred - pred_centroid[:, :, None, None], target - target_centroid[:, :, None, None], mask)


def silog(pred_depth: torch.Tensor, target_depth: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scale-invariant log error of depth, per image then averaged over the batch.

    With `d = log(max(z_gt, 1e-4)) - log(max(z_pred, 1e-4))` over an image's valid pixels:
    `sqrt(mean(d^2) - 0.5 * mean(d)^2)`. Images with no valid pixel contribute 0 (and no gradient); the mean over
    the batch includes them, as the official loss does.

    Args:
        pred_depth, target_depth (`torch.Tensor` of shape `(batch_size, 1, height, width)`): Depth (canonical Z).
        mask (`torch.Tensor` of shape `(batch_size, 1, height, width)`): Float 0/1 validity.

    Returns:
        `torch.Tensor`: scalar.
    """
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
    """`|X - (u - c_x) Z / f_x| + |Y - (v - c_y) Z / f_y|` over valid pixels, divided by their number.

    `u`, `v` are integer pixel indices (0 .. width-1, 0 .. height-1) of the map; `intrinsics` are those of the same
    pixel grid **before** canonicalisation (the ratios X/Z and Y/Z do not depend on the canonical rescaling).

    Args:
        pointmap (`torch.Tensor` of shape `(batch_size, 3, height, width)`): Predicted XYZ.
        mask (`torch.Tensor` of shape `(batch_size, 1, height, width)`): Float 0/1 validity.
        intrinsics (`torch.Tensor` of shape `(batch_size, 3, 3)`): Pixel-unit camera matrices.

    Returns:
        `torch.Tensor`: scalar.
    """
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
    """Unit normals from the cross product of right and down differences of a reflect-padded pointmap.

    Args:
        pointmap (`torch.Tensor` of shape `(batch_size, 3, height, width)`): Metric XYZ.
        mask (`torch.Tensor` of shape `(batch_size, 1, height, width)`): Float 0/1 validity.
        amplification (`float`): Factor applied to the differences before the cross product (official 100; it only
            moves the 1e-6 degeneracy threshold).

    Returns:
        `tuple`: normals (`(batch_size, 3, height, width)`, zero where invalid) and the bool validity
        `(batch_size, 1, height, width)` (mask and a non-degenerate cross product). A valid pixel whose right and down
        neighbours are both off the mask (zero) gets two parallel difference vectors; whether float32 rounding lifts
        their cross product over 1e-6 decides its validity, exactly as in the official code.
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
    metric maps (canonical map divided by the target scale).

    Returns:
        `torch.Tensor`: scalar.
    """
    if mask.sum() == 0:
        return zero_like_graph(pointmap)
    scale = target_scale.to(pointmap.dtype).view(-1, 1, 1, 1)
    pred_normals, _ = pointmap_normals(pointmap / scale, mask)
    target_normals, target_valid = pointmap_normals(target_pointmap / scale, mask)
    cosine = (pred_normals * target_normals).sum(dim=1, keepdim=True).clamp(-1.0, 1.0)
    per_pixel = (1.0 - cosine) + (pred_normals - target_normals).abs().mean(dim=1, keepdim=True)
    per_pixel = torch.where(target_valid, per_pixel, torch.zeros_like(per_pixel))
    return per_pixel.sum() / target_valid.sum().clamp(min=1)


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
    clamp at 4 applies to the *weighted* term, exactly as the official head clamps the value its loss module returns.

    Reference: facebookresearch/sapiens2 ``sapiens/dense/src/models/heads/pointmap_head.py`` (``loss``),
    ``sapiens/dense/src/models/losses/{pointmap_loss,l1_loss,silog_loss}.py`` and
    ``sapiens/dense/configs/pointmap/*``.

    Args:
        l1_weight, multiscale_weight, silog_weight, intrinsics_weight, shift_invariant_weight, normal_weight,
        scale_weight (`float`): Term weights (defaults 2, 1, 1, 1, 1, 2, 4).
        clamp_max (`float`, *optional*, defaults to 4.0): Upper bound of the three depth-normalised L1 terms.

    Example:
        >>> total, terms = PointmapLoss()(pointmaps, scales, target_pointmaps, target_scales, mask, intrinsics)
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
            pointmaps (`torch.Tensor` of shape `(batch_size, 3, height, width)`):
                Predicted canonical XYZ (camera frame: X right, Y down, Z forward; canonical focal length 768 px).
            scales (`torch.Tensor` of shape `(batch_size, 1)`): Predicted canonical scale `768 / f_x`.
            target_pointmaps (`torch.Tensor` of shape `(batch_size, 3, height, width)`):
                Target canonical XYZ (metric XYZ times `768 / f_x`); any value off the mask.
            target_scales (`torch.Tensor` of shape `(batch_size, 1)` or `(batch_size,)`): Target `768 / f_x`.
            mask (`torch.Tensor` of shape `(batch_size, 1, height, width)` or `(batch_size, height, width)`):
                Valid (foreground) pixels.
            intrinsics (`torch.Tensor` of shape `(batch_size, 3, 3)`):
                Pixel intrinsics of the map's grid before canonicalisation (`f_x` there gives `768 / f_x`).
            target_mean_depth (`torch.Tensor` of shape `(batch_size,)`, *optional*):
                Mean canonical target Z over valid pixels; computed from the target when omitted.

        Returns:
            `tuple[torch.Tensor, dict[str, torch.Tensor]]`: the scalar total and the seven weighted terms.
        """
        pointmaps = pointmaps.float()
        target_pointmaps = target_pointmaps.float()
        if pointmaps.dim() == 4 and pointmaps.shape[2:] != target_pointmaps.shape[2:]:
            pointmaps = F.interpolate(pointmaps, size=target_pointmaps.shape[2:], mode="bilinear", align_corners=False)
        check_same_shape(pointmaps, target_pointmaps, "pointmaps", "target_pointmaps")
        batch_size = pointmaps.shape[0]
        if intrinsics.shape != (batch_size, 3, 3):
            raise ValueError(f"`intrinsics` must have shape {(batch_size, 3, 3)}, got {tuple(intrinsics.shape)}.")
        scales = scales.float().reshape(batch_size, -1)
        target_scales = target_scales.float().reshape(batch_size, -1)
        if scales.shape[1] != 1 or target_scales.shape[1] != 1:
            raise ValueError("`scales` and `target_scales` must hold one value per sample, shape (batch_size, 1).")
        valid = as_valid_mask(mask, target_pointmaps)
        target_pointmaps = torch.where(valid.bool(), target_pointmaps, torch.zeros_like(target_pointmaps))

        if target_mean_depth is None:
            target_mean_depth = (target_pointmaps[:, 2:3] * valid).sum(dim=(1, 2, 3)) / valid.sum(dim=(1, 2, 3)).clamp(
                min=1
            )
        mean_depth = target_mean_depth.float().reshape(batch_size, 1, 1, 1)
        pred_normalised = pointmaps / mean_depth
        target_normalised = target_pointmaps / mean_depth

        terms = {
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
        return sum(terms.values()), terms
