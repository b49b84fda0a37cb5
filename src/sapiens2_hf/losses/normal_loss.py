"""Surface-normal loss of the official Sapiens2 recipe: cosine + L1 + finite-difference ("grad") term."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._masked import as_valid_mask, check_same_shape, forward_difference_squared_error, masked_l1, zero_like_graph


class NormalLoss(nn.Module):
    """Official Sapiens2 surface-normal loss: `10 * cosine + 1 * L1 + 10 * grad`.

    * cosine: mean over valid pixels of `1 - cos(pred, target)` after unit-normalising both (eps 1e-6);
    * L1: absolute error of the *raw* (not normalised) prediction against the unit target, summed over channels and
      divided by the number of valid pixels;
    * grad: despite the official name "grad L1", the **squared** error between horizontal and between vertical
      forward differences of the raw prediction and the target, each averaged over neighbour pairs whose two pixels
      are valid (channel-summed), then added.

    Each term is NaN/inf-guarded to 0 as in the official code, and the loss is computed in float32. If the
    prediction is smaller than the target it is first resized bilinearly (``align_corners=False``).

    Reference: facebookresearch/sapiens2 ``sapiens/dense/src/models/losses/normal_loss.py``, ``l1_loss.py`` and
    ``sapiens/dense/configs/normal/*`` (loss weights 10 / 1 / 10).

    Args:
        cosine_weight (`float`, *optional*, defaults to 10.0): Weight of the cosine term.
        l1_weight (`float`, *optional*, defaults to 1.0): Weight of the L1 term.
        grad_weight (`float`, *optional*, defaults to 10.0): Weight of the finite-difference term.

    Example:
        >>> total, terms = NormalLoss()(normals, target_normals, mask)
        >>> sorted(terms)
        ['cosine_loss', 'grad_loss', 'l1_loss']
    """

    def __init__(self, cosine_weight: float = 10.0, l1_weight: float = 1.0, grad_weight: float = 10.0):
        super().__init__()
        self.cosine_weight = float(cosine_weight)
        self.l1_weight = float(l1_weight)
        self.grad_weight = float(grad_weight)

    def forward(
        self, normals: torch.Tensor, target_normals: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """
        Args:
            normals (`torch.Tensor` of shape `(batch_size, 3, height, width)`):
                Raw head output (not unit length), camera frame.
            target_normals (`torch.Tensor` of shape `(batch_size, 3, height, width)`):
                Unit normals in the camera frame on valid pixels; any value (-1000, NaN) elsewhere.
            mask (`torch.Tensor` of shape `(batch_size, 1, height, width)` or `(batch_size, height, width)`,
                *optional*): Valid (foreground) pixels, bool or 0/1. Defaults to all pixels.

        Returns:
            `tuple[torch.Tensor, dict[str, torch.Tensor]]`: the scalar total and its weighted terms `cosine_loss`,
            `l1_loss` and `grad_loss`.
        """
        normals = normals.float()
        target_normals = target_normals.float()
        if normals.dim() == 4 and normals.shape[2:] != target_normals.shape[2:]:
            normals = F.interpolate(normals, size=target_normals.shape[2:], mode="bilinear", align_corners=False)
        check_same_shape(normals, target_normals, "normals", "target_normals")
        valid = as_valid_mask(mask, target_normals)
        target_normals = torch.where(valid.bool(), target_normals, torch.zeros_like(target_normals))

        if valid.sum() == 0:
            zero = zero_like_graph(normals)
            terms = {"cosine_loss": zero, "l1_loss": zero, "grad_loss": zero}
            return zero, terms

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
