"""Masked-autoencoder pixel loss (the "L_MAE" term of the Sapiens2 objective).

Mean squared error between the decoder's pixel predictions and the pixels of the masked patches, each target patch
normalised by its own mean and variance (MAE, He et al. 2021, arXiv 2111.06377, `norm_pix_loss=True`, which the
paper reports gives better representations; reference implementation facebookresearch/mae `models_mae.py`).
Only masked patches count, as in MAE.
"""

import torch
from torch import nn


def patchify(pixel_values: torch.Tensor, patch_size: tuple[int, int]) -> torch.Tensor:
    """Cuts `(batch_size, num_channels, height, width)` images into non-overlapping `(patch_height, patch_width)`
    patches, row-major (the order of the backbone's patch tokens): `(batch_size, num_patches, patch_height *
    patch_width * num_channels)`, each patch's values ordered (row, column, channel), as in MAE."""
    batch_size, num_channels, height, width = pixel_values.shape
    patch_h, patch_w = patch_size
    if height % patch_h or width % patch_w:
        raise ValueError(f"The image size {height}x{width} is not divisible by the patch size {patch_h}x{patch_w}.")
    grid_h, grid_w = height // patch_h, width // patch_w
    patches = pixel_values.reshape(batch_size, num_channels, grid_h, patch_h, grid_w, patch_w)
    patches = patches.permute(0, 2, 4, 3, 5, 1)  # (batch, grid_h, grid_w, patch_h, patch_w, channels)
    return patches.reshape(batch_size, grid_h * grid_w, patch_h * patch_w * num_channels)


def unpatchify(patches: torch.Tensor, patch_size: tuple[int, int], grid_size: tuple[int, int]) -> torch.Tensor:
    """Inverse of `patchify`: `(batch_size, grid_h * grid_w, patch_h * patch_w * num_channels)` ->
    `(batch_size, num_channels, grid_h * patch_h, grid_w * patch_w)`."""
    batch_size = patches.shape[0]
    (patch_h, patch_w), (grid_h, grid_w) = patch_size, grid_size
    num_channels = patches.shape[-1] // (patch_h * patch_w)
    images = patches.reshape(batch_size, grid_h, grid_w, patch_h, patch_w, num_channels)
    images = images.permute(0, 5, 1, 3, 2, 4)  # (batch, channels, grid_h, patch_h, grid_w, patch_w)
    return images.reshape(batch_size, num_channels, grid_h * patch_h, grid_w * patch_w)


class MaeLoss(nn.Module):
    r"""MSE on the masked patches, with per-patch normalised targets.

    `target = (patch - mean(patch)) / sqrt(var(patch) + eps)` with MAE's unbiased variance, when
    `norm_pix_loss=True`; `loss = mean over masked patches and values of (prediction - target)^2`.

    `patch_size` is the backbone's; `norm_pix_loss=True` is MAE's recommended setting and `eps` (1e-6) its value.

    Example:
        >>> loss_fn = MaeLoss(patch_size=16)
        >>> loss = loss_fn(torch.randn(2, 6, 768), torch.randn(2, 3, 64, 48), torch.tensor([[0, 1, 2, 3, 4, 5]] * 2))
    """

    def __init__(self, patch_size: int | tuple[int, int], norm_pix_loss: bool = True, eps: float = 1e-6):
        super().__init__()
        self.patch_size = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
        self.norm_pix_loss = norm_pix_loss
        self.eps = eps

    def targets(self, pixel_values: torch.Tensor, mask_indices: torch.Tensor) -> torch.Tensor:
        """
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, 3, height, width)`): the student's input images
                (normalised RGB, the values the backbone saw before masking).
            mask_indices (`torch.LongTensor` of shape `(batch_size, num_masked)`): row-major masked patch indices.
        Returns:
            `torch.Tensor` of shape `(batch_size, num_masked, patch_h * patch_w * 3)`, float32.
        """
        patches = patchify(pixel_values.float(), self.patch_size)  # (batch, num_patches, patch_dim)
        patches = patches.gather(1, mask_indices[..., None].expand(-1, -1, patches.shape[-1]))
        if self.norm_pix_loss:
            mean = patches.mean(dim=-1, keepdim=True)
            var = patches.var(dim=-1, keepdim=True)
            patches = (patches - mean) / (var + self.eps) ** 0.5
        return patches

    def forward(self, predictions: torch.Tensor, pixel_values: torch.Tensor, mask_indices: torch.Tensor) -> torch.Tensor:
        """`()` float32 loss of `predictions` `(batch_size, num_masked, patch_h * patch_w * 3)` (decoder output at
        `mask_indices` `(batch_size, num_masked)`, values ordered as in `patchify`) against `pixel_values`."""
        targets = self.targets(pixel_values, mask_indices)
        if predictions.shape != targets.shape:
            raise ValueError(
                f"MAE predictions have shape {tuple(predictions.shape)} but the masked patches give targets of shape "
                f"{tuple(targets.shape)}."
            )
        return (predictions.float() - targets).pow(2).mean()
