"""Alpha-matting metrics of the standard benchmark: SAD, MSE, gradient and connectivity errors.

Definitions of Rhemann et al. (CVPR 2009) as alphamatting.com and the Deep Image Matting code (Xu et al., CVPR 2017)
compute them, per image at the target's resolution and averaged over images, alpha on [0, 1] as given (MATLAB's
`mat2gray` before the gradient is the identity for a matte spanning 0 to 1), over a mask region (a trimap's unknown
region, or all pixels for trimap-free human matting):

* **SAD**: sum of absolute alpha errors over the region, divided by 1000;
* **MSE**: mean squared alpha error over the region;
* **Grad**: sum over the region of `(|grad pred| - |grad target|)**2`, divided by 1000, where `grad` is the
  first-order Gaussian derivative with sigma 1.4 (kernel half-size `ceil(sigma * sqrt(-2 ln(sqrt(2 pi) sigma
  0.01)))` = 4, the derivative-of-Gaussian kernel normalised to unit L2 norm, replicated borders);
* **Conn**: for thresholds `t_i = 0.1, 0.2, ..., 1`, the largest 4-connected component of `(pred >= t_i) &
  (target >= t_i)`; a pixel's level `l` is `t_{i-1}` for the first `t_i` whose component does not hold it (1 if all
  do); with `d = alpha - l` and `phi = 1 - d * (d >= 0.15)` (for prediction and target alike), the error is the sum
  over the region of `|phi_pred - phi_target|`, divided by 1000 (4-connectivity, as the Deep Image Matting code).
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from ._dense import SummedStatistics


_NAMES = ("sad", "mse", "grad", "conn")
GRADIENT_SIGMA = 1.4
CONNECTIVITY_STEP = 0.1
CONNECTIVITY_THETA = 0.15


def gaussian_derivative_kernels(sigma: float = GRADIENT_SIGMA, epsilon: float = 1e-2) -> tuple[np.ndarray, np.ndarray]:
    """The `(x, y)` first-derivative-of-Gaussian kernels of the gradient error (unit L2 norm each)."""
    half = int(math.ceil(sigma * math.sqrt(-2.0 * math.log(math.sqrt(2.0 * math.pi) * sigma * epsilon))))
    axis = np.arange(-half, half + 1, dtype=np.float64)
    gauss = np.exp(-axis**2 / (2 * sigma**2)) / (sigma * math.sqrt(2 * math.pi))
    derivative = -axis * gauss / sigma**2
    kernel_x = gauss[:, None] * derivative[None, :]  # varies along x (columns), smooth along y (rows)
    kernel_x /= math.sqrt((kernel_x**2).sum())
    return kernel_x, kernel_x.T.copy()


def gradient_magnitude(alpha: np.ndarray, sigma: float = GRADIENT_SIGMA) -> np.ndarray:
    """`|grad alpha|` with the Gaussian-derivative kernels (convolution, replicated borders); `(H, W)` float64."""
    kernel_x, kernel_y = gaussian_derivative_kernels(sigma)
    # cv2.filter2D correlates; flipping the kernels makes it a convolution
    gx = cv2.filter2D(alpha, cv2.CV_64F, kernel_x[::-1, ::-1].copy(), borderType=cv2.BORDER_REPLICATE)
    gy = cv2.filter2D(alpha, cv2.CV_64F, kernel_y[::-1, ::-1].copy(), borderType=cv2.BORDER_REPLICATE)
    return np.sqrt(gx**2 + gy**2)


def connectivity_levels(prediction: np.ndarray, target: np.ndarray, step: float = CONNECTIVITY_STEP) -> np.ndarray:
    """Per pixel, the threshold before the first one at which the pixel leaves the largest 4-connected component of
    `(pred >= t) & (target >= t)` (1 when it never does); `(H, W)` float64."""
    levels = np.full(prediction.shape, -1.0)
    thresholds = np.arange(0.0, 1.0 + step / 2, step)
    for previous, threshold in zip(thresholds[:-1], thresholds[1:]):
        joint = ((prediction >= threshold) & (target >= threshold)).astype(np.uint8)
        count, labels, stats, _ = cv2.connectedComponentsWithStats(joint, connectivity=4)
        if count > 1:
            kept = labels == 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
        else:
            kept = np.zeros(prediction.shape, dtype=bool)
        levels[(levels == -1) & ~kept] = previous
    levels[levels == -1] = 1.0
    return levels


def matting_errors(prediction: np.ndarray, target: np.ndarray, region: np.ndarray | None = None) -> dict[str, float]:
    """SAD, MSE, gradient and connectivity errors of one alpha matte (see the module docstring).

    Args:
        prediction, target (`np.ndarray` of shape `(height, width)`): alpha in [0, 1].
        region (`np.ndarray` of shape `(height, width)`, bool, *optional*): evaluated pixels (default: all).

    Returns:
        `dict` with `sad`, `mse`, `grad`, `conn` and `pixels` (the region's size).
    """
    prediction = np.asarray(prediction, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    region = np.ones(target.shape, dtype=bool) if region is None else np.asarray(region, dtype=bool)
    pixels = int(region.sum())
    error = prediction - target
    grad = (gradient_magnitude(prediction) - gradient_magnitude(target)) ** 2
    levels = connectivity_levels(prediction, target)
    d_pred, d_target = prediction - levels, target - levels
    phi_pred = 1.0 - d_pred * (d_pred >= CONNECTIVITY_THETA)
    phi_target = 1.0 - d_target * (d_target >= CONNECTIVITY_THETA)
    return {
        "sad": float(np.abs(error)[region].sum()) / 1000.0,
        "mse": float((error**2)[region].sum()) / max(pixels, 1),
        "grad": float(grad[region].sum()) / 1000.0,
        "conn": float(np.abs(phi_pred - phi_target)[region].sum()) / 1000.0,
        "pixels": pixels,
    }


class MattingMetric(SummedStatistics):
    """Streaming SAD / MSE / Grad / Conn, averaged over images (see the module docstring); five sums are kept."""

    def reset(self) -> None:
        self.totals = torch.zeros(len(_NAMES) + 1, dtype=torch.float64)  # the four sums, then the image count

    def statistics(self, predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None):
        """Per-image errors of predicted against target alpha in [0, 1], `(batch_size, [1,] height, width)`; a
        prediction of another size is resized bilinearly (`align_corners=False`), then clamped to [0, 1]. `mask`
        (same layout, optional): evaluated pixels (non-zero), default all.

        Returns:
            `torch.Tensor` of shape `(batch_size, 5)`, float64: `sad`, `mse`, `grad`, `conn`, and 1 for an image
            with a non-empty region (0 otherwise: it is not counted).
        """
        targets = targets if targets.dim() == 4 else targets.unsqueeze(1)
        predictions = predictions if predictions.dim() == 4 else predictions.unsqueeze(1)
        if predictions.shape[1] != 1 or targets.shape[1] != 1:
            raise ValueError(f"`predictions` {tuple(predictions.shape)} and `targets` {tuple(targets.shape)} must "
                             "be single-channel alpha mattes (batch_size, 1, height, width).")
        if predictions.shape[2:] != targets.shape[2:]:
            predictions = F.interpolate(predictions.float(), size=targets.shape[2:], mode="bilinear",
                                        align_corners=False)
        predictions = predictions.float().clamp(0.0, 1.0)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        rows = []
        for index in range(targets.shape[0]):
            region = None if mask is None else (mask[index, 0] > 0).cpu().numpy()
            errors = matting_errors(predictions[index, 0].detach().cpu().numpy(), targets[index, 0].cpu().numpy(),
                                    region)
            counted = float(errors["pixels"] > 0)
            rows.append([errors[name] * counted for name in _NAMES] + [counted])
        return torch.tensor(rows, dtype=torch.float64).reshape(-1, len(_NAMES) + 1)

    def compute(self) -> dict[str, float]:
        """`sad`, `mse`, `grad`, `conn` averaged over images; NaN when nothing was accumulated."""
        count = float(self.totals[-1])
        if count == 0:
            return {name: float("nan") for name in _NAMES}
        return {name: float(self.totals[index]) / count for index, name in enumerate(_NAMES)}
