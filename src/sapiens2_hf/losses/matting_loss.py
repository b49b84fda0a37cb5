"""Matting loss: alpha L1 + alpha gradient L1 + alpha Laplacian-pyramid L1 + pre-multiplied foreground L1.

The official Sapiens2 matting recipe trains with an L1, a gradient and a Laplacian loss of weight 1 each, applied to
the alpha and (where a foreground target exists) to the foreground; its loss code is not in the mirrored official
commit, so the terms here are written from their definitions in the matting literature:

* **alpha L1**: mean absolute alpha error over valid pixels (the basic term of every matting method since Xu et al.,
  "Deep Image Matting", CVPR 2017, whose "alpha-prediction loss" is this L1 made differentiable);
* **gradient L1**: mean absolute difference of the horizontal and vertical finite differences of the predicted and
  target alpha (valid neighbour pairs), which penalises blurred or jagged edges that a pixel L1 barely sees (the
  gradient term of e.g. Zhang et al., "A Late Fusion CNN for Digital Matting", CVPR 2019);
* **Laplacian L1**: L1 between the Laplacian pyramids of prediction and target (5 levels, 5x5 binomial kernel,
  level `i` weighted `2**i`), which weighs errors at every scale (Hou and Liu, "Context-Aware Image Matting", ICCV
  2019; also used by the Robust Video Matting family the official recipe follows);
* **foreground L1**: mean absolute error of the pre-multiplied foreground (`alpha * F`, what the head predicts)
  over valid pixels, only when a foreground target is given.

The composition loss of Deep Image Matting (`|alpha F + (1 - alpha) B - I|`) is not included: it needs the
background plate of each training image, which human matting datasets rarely have; the pre-multiplied foreground L1
constrains the same colours where a foreground target exists.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._masked import as_valid_mask, check_same_shape, zero_like_graph


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


class MattingLoss(nn.Module):
    """Matting loss (see the module docstring): `l1 + gradient + laplacian` on alpha, plus `foreground` L1.

    Args:
        l1_weight, gradient_weight, laplacian_weight (`float`, *optional*, default to 1.0): weights of the alpha
            terms (1 each, as the official recipe weighs its three terms).
        foreground_weight (`float`, *optional*, defaults to 1.0): weight of the pre-multiplied foreground L1.
        laplacian_levels (`int`, *optional*, defaults to 5): levels of the Laplacian pyramid.

    Example:
        >>> total, terms = MattingLoss()(alphas, foregrounds, target_alphas, mask, target_foregrounds)
        >>> sorted(terms)
        ['alpha_gradient_loss', 'alpha_l1_loss', 'alpha_laplacian_loss', 'foreground_l1_loss']
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
        """
        Args:
            alphas (`torch.Tensor` of shape `(batch_size, 1, height, width)`): predicted alpha in [0, 1]; resized
                bilinearly to the target size when smaller.
            foregrounds (`torch.Tensor` of shape `(batch_size, 3, height, width)`, *optional*): predicted
                pre-multiplied RGB foreground in [0, 1].
            target_alphas (`torch.Tensor` of shape `(batch_size, 1, height, width)` or `(batch_size, height,
                width)`): target alpha in [0, 1].
            mask (`torch.Tensor` of shape `(batch_size, 1, height, width)` or `(batch_size, height, width)`,
                *optional*): pixels with a valid label (e.g. not padding). Defaults to all.
            target_foregrounds (`torch.Tensor` of shape `(batch_size, 3, height, width)`, *optional*): target
                pre-multiplied foreground (`alpha * F`); without it the foreground term is 0.

        Returns:
            `tuple[torch.Tensor, dict[str, torch.Tensor]]`: the scalar total and its weighted terms
            `alpha_l1_loss`, `alpha_gradient_loss`, `alpha_laplacian_loss` and `foreground_l1_loss`.
        """
        target_alphas = target_alphas.float()
        if target_alphas.dim() == 3:
            target_alphas = target_alphas.unsqueeze(1)
        alphas = alphas.float()
        if alphas.dim() == 4 and alphas.shape[2:] != target_alphas.shape[2:]:
            alphas = F.interpolate(alphas, size=target_alphas.shape[2:], mode="bilinear", align_corners=False)
        check_same_shape(alphas, target_alphas, "alphas", "target_alphas")
        if alphas.shape[1] != 1:
            raise ValueError(f"`alphas` must have 1 channel, got {alphas.shape[1]}.")
        valid = as_valid_mask(mask, target_alphas).bool()  # (B, 1, H, W)
        if not valid.any():
            zero = zero_like_graph(alphas)
            return zero, {name: zero for name in ("alpha_l1_loss", "alpha_gradient_loss", "alpha_laplacian_loss",
                                                  "foreground_l1_loss")}
        target_alphas = torch.where(valid, target_alphas, torch.zeros_like(target_alphas))

        l1 = _masked_mean_abs(alphas - target_alphas, valid)
        error = alphas - target_alphas
        pairs_x = valid[..., :, 1:] & valid[..., :, :-1]
        pairs_y = valid[..., 1:, :] & valid[..., :-1, :]
        gradient = 0.5 * (_masked_mean_abs(error[..., :, 1:] - error[..., :, :-1], pairs_x)
                          + _masked_mean_abs(error[..., 1:, :] - error[..., :-1, :], pairs_y))
        # Masked-out pixels take the target's value so that they add no error to any pyramid level.
        filled = torch.where(valid, alphas, target_alphas)
        laplacian = sum(
            (2.0**level) * (pred - target).abs().mean()
            for level, (pred, target) in enumerate(zip(laplacian_pyramid(filled, self.laplacian_levels),
                                                       laplacian_pyramid(target_alphas, self.laplacian_levels)))
        )
        if foregrounds is not None and target_foregrounds is not None:
            foregrounds = foregrounds.float()
            target_foregrounds = target_foregrounds.float()
            if foregrounds.shape[2:] != target_foregrounds.shape[2:]:
                foregrounds = F.interpolate(foregrounds, size=target_foregrounds.shape[2:], mode="bilinear",
                                            align_corners=False)
            check_same_shape(foregrounds, target_foregrounds, "foregrounds", "target_foregrounds")
            foreground = _masked_mean_abs(foregrounds - target_foregrounds, valid)
        else:
            foreground = zero_like_graph(alphas)
        terms = {
            "alpha_l1_loss": self.l1_weight * l1,
            "alpha_gradient_loss": self.gradient_weight * gradient,
            "alpha_laplacian_loss": self.laplacian_weight * laplacian,
            "foreground_l1_loss": self.foreground_weight * foreground,
        }
        return sum(terms.values()), terms
