"""Albedo loss of the official Sapiens2 recipe: L1 + finite-difference term + chromaticity L1."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._masked import as_valid_mask, check_same_shape, forward_difference_squared_error, masked_l1, zero_like_graph


def chromaticity(rgb: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-pixel chromaticity `rgb / (r + g + b + eps)`.

    Args:
        rgb (`torch.Tensor` of shape `(batch_size, 3, height, width)`): Linear or sRGB colour in [0, 1].

    Returns:
        `torch.Tensor` of shape `(batch_size, 3, height, width)`.
    """
    return rgb / (rgb.sum(dim=1, keepdim=True) + eps)


class AlbedoLoss(nn.Module):
    """Official Sapiens2 albedo loss: `2 * L1 + 2 * grad + 1 * chromaticity`.

    * L1: absolute error of the raw prediction, summed over channels, divided by the number of valid pixels;
    * grad: `0.5 * (dx + dy)` where dx (dy) is the squared error of horizontal (vertical) forward differences,
      channel-summed and averaged over valid neighbour pairs ("grad L1" in the official code);
    * chromaticity: L1 between `rgb / (r + g + b + 1e-6)` of the prediction **clamped to [0, 1]** and of the target,
      summed over channels, divided by the number of valid pixels.

    The official low-frequency L1 is commented out in every released config and is therefore not part of the
    default objective. Computed in float32; a smaller prediction is first resized bilinearly to the target size.

    Reference: facebookresearch/sapiens2 ``sapiens/dense/src/models/losses/albedo_loss.py``, ``l1_loss.py`` and
    ``sapiens/dense/configs/albedo/*`` (loss weights 2 / 2 / 1).

    Args:
        l1_weight (`float`, *optional*, defaults to 2.0): Weight of the L1 term.
        grad_weight (`float`, *optional*, defaults to 2.0): Weight of the finite-difference term.
        chromaticity_weight (`float`, *optional*, defaults to 1.0): Weight of the chromaticity term.

    Example:
        >>> total, terms = AlbedoLoss()(albedos, target_albedos, mask)
        >>> sorted(terms)
        ['chromaticity_loss', 'grad_loss', 'l1_loss']
    """

    def __init__(self, l1_weight: float = 2.0, grad_weight: float = 2.0, chromaticity_weight: float = 1.0):
        super().__init__()
        self.l1_weight = float(l1_weight)
        self.grad_weight = float(grad_weight)
        self.chromaticity_weight = float(chromaticity_weight)

    def forward(
        self, albedos: torch.Tensor, target_albedos: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """
        Args:
            albedos (`torch.Tensor` of shape `(batch_size, 3, height, width)`): Raw head output, RGB.
            target_albedos (`torch.Tensor` of shape `(batch_size, 3, height, width)`): Target RGB albedo in [0, 1].
            mask (`torch.Tensor` of shape `(batch_size, 1, height, width)` or `(batch_size, height, width)`,
                *optional*): Valid (foreground) pixels. Defaults to all pixels.

        Returns:
            `tuple[torch.Tensor, dict[str, torch.Tensor]]`: the scalar total and its weighted terms `l1_loss`,
            `grad_loss` and `chromaticity_loss`.
        """
        albedos = albedos.float()
        target_albedos = target_albedos.float()
        if albedos.dim() == 4 and albedos.shape[2:] != target_albedos.shape[2:]:
            albedos = F.interpolate(albedos, size=target_albedos.shape[2:], mode="bilinear", align_corners=False)
        check_same_shape(albedos, target_albedos, "albedos", "target_albedos")
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
