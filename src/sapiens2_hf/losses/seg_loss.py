"""Body-part segmentation loss of the official Sapiens2 recipe: weighted cross-entropy + Dice."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..data.label_tables import SEG_CE_CLASS_WEIGHTS, SEG_IGNORE_INDEX


def weighted_cross_entropy_loss(
    logits: torch.Tensor, labels: torch.Tensor, class_weights: torch.Tensor | None, ignore_index: int
) -> torch.Tensor:
    """Class-weighted cross-entropy averaged over *all* pixels.

    The official config sets ``reduction="none"`` and the runner then takes the plain mean of the per-pixel map, so
    the divisor is `batch_size * height * width` (ignored pixels contribute 0 but are counted), not the sum of the
    class weights of the labelled pixels that `F.cross_entropy(reduction="mean")` would use.

    Args:
        logits (`torch.Tensor` of shape `(batch_size, num_classes, height, width)`): Raw logits.
        labels (`torch.Tensor` of shape `(batch_size, height, width)`, int64): Class ids or `ignore_index`.
        class_weights (`torch.Tensor` of shape `(num_classes,)`, *optional*): Per-class weights.
        ignore_index (`int`): Label value excluded from the loss.

    Returns:
        `torch.Tensor`: scalar.
    """
    per_pixel = F.cross_entropy(logits, labels, weight=class_weights, reduction="none", ignore_index=ignore_index)
    return per_pixel.mean()


def dice_loss(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int, eps: float = 1e-3) -> torch.Tensor:
    """Softmax Dice loss without background, macro-averaged over the classes present in each sample.

    Per sample and foreground class c (background, class 0, is excluded), with p the softmax probability and g the
    one-hot label, both zeroed on ignored pixels:
    `dice_c = (2 * sum(p * g) + eps) / (sum(p^2) + sum(g^2) + eps)`. A sample's Dice is the mean of `dice_c` over the
    classes present in its labels, and its loss is `1 - dice`. The official config uses ``reduction="none"`` and the
    runner averages the per-sample vector over the *whole* batch, where samples with no labelled foreground class
    (or no labelled pixel) contribute 0; this function reproduces that.

    Reference: facebookresearch/sapiens2 ``sapiens/dense/src/models/losses/seg_loss.py`` (``DiceLoss``,
    ``naive_dice=False``, ``include_background=False``).

    Args:
        logits (`torch.Tensor` of shape `(batch_size, num_classes, height, width)`): Raw logits.
        labels (`torch.Tensor` of shape `(batch_size, height, width)`, int64): Class ids or `ignore_index`.
        ignore_index (`int`): Label value excluded from the loss.
        eps (`float`, *optional*, defaults to 1e-3): Smoothing term.

    Returns:
        `torch.Tensor`: scalar.
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
    """Official Sapiens2 body-part segmentation loss: class-weighted cross-entropy (x1) + Dice (x1).

    If the logits are smaller than the labels (a head at reduced resolution), they are first resized bilinearly
    (``align_corners=False``) to the label size, as the official head does.

    Reference: facebookresearch/sapiens2 ``sapiens/dense/configs/seg/shutterstock_goliath/*`` (``loss_decode``) and
    ``sapiens/dense/src/models/losses/seg_loss.py``.

    Args:
        class_weights (`Sequence[float]`, *optional*): Cross-entropy class weights; defaults to the official 29
            weights (`SEG_CE_CLASS_WEIGHTS`, background 0.1). Pass `()` for an unweighted cross-entropy.
        ignore_index (`int`, *optional*, defaults to 255): Label value excluded from both terms.
        cross_entropy_weight (`float`, *optional*, defaults to 1.0): Weight of the cross-entropy term.
        dice_weight (`float`, *optional*, defaults to 1.0): Weight of the Dice term.
        dice_eps (`float`, *optional*, defaults to 1e-3): Dice smoothing term.

    Example:
        >>> total, terms = SegmentationLoss()(logits, labels)
        >>> sorted(terms)
        ['cross_entropy_loss', 'dice_loss']
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
        """
        Args:
            logits (`torch.Tensor` of shape `(batch_size, num_classes, height, width)`):
                Raw logits (computed in float32 whatever the input dtype).
            labels (`torch.Tensor` of shape `(batch_size, height, width)` or `(batch_size, 1, height, width)`, int):
                Class ids in `[0, num_classes)` or `ignore_index`.

        Returns:
            `tuple[torch.Tensor, dict[str, torch.Tensor]]`: the scalar total and its weighted terms
            `cross_entropy_loss` and `dice_loss`.
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
        cross_entropy = self.cross_entropy_weight * weighted_cross_entropy_loss(
            logits, labels, self.class_weights, self.ignore_index
        )
        dice = self.dice_weight * dice_loss(logits, labels, self.ignore_index, self.dice_eps)
        terms = {"cross_entropy_loss": cross_entropy, "dice_loss": dice}
        return cross_entropy + dice, terms
