"""Albedo metrics of the official Sapiens2 ``AlbedoEvaluator``: MAE, RMSE, PSNR, masked SSIM, gradient L1."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._dense import SummedStatistics, dense_inputs


def gaussian_window(size: int = 11, sigma: float = 1.5, dtype=torch.float64) -> torch.Tensor:
    """Normalised 2-D Gaussian window of shape `(size, size)`."""
    axis = torch.arange(size, dtype=dtype) - (size - 1) / 2.0
    window = torch.exp(-(axis[None, :] ** 2 + axis[:, None] ** 2) / (2 * sigma * sigma))
    return window / window.sum()


def masked_ssim_sum(
    pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, data_range: float
) -> tuple[float, float]:
    """`(sum, count)` of the masked SSIM map of two `(3, height, width)` RGB images over the pixels whose window has
    more than 50 % support in the bool `(height, width)` `mask` (`G*m > 0.5`).

    Local statistics are mask-weighted Gaussian averages (11x11, sigma 1.5, zero padding): `mu = G*(x m) / G*m`,
    `sigma^2 = G*(x^2 m) / G*m - mu^2`, with `C1 = (0.01 R)^2`, `C2 = (0.03 R)^2` for `data_range` R (1 or 255); the
    SSIM map is averaged over the channels.
    """
    eps = 1e-8
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    x, y = pred.double().unsqueeze(0), target.double().unsqueeze(0)  # (1, C, H, W)
    m = mask.double()[None, None]
    window = gaussian_window().to(x.device)[None, None]  # (1, 1, 11, 11)

    def blur(z: torch.Tensor) -> torch.Tensor:
        return F.conv2d(z, window.expand(z.shape[1], 1, 11, 11), padding=5, groups=z.shape[1])

    support = blur(m).clamp(min=eps)  # (1, 1, H, W)
    mu_x, mu_y = blur(x * m) / support, blur(y * m) / support
    var_x = blur(x * x * m) / support - mu_x**2
    var_y = blur(y * y * m) / support - mu_y**2
    cov = blur(x * y * m) / support - mu_x * mu_y
    numerator = (2 * mu_x * mu_y + c1) * (2 * cov + c2)
    denominator = (mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2)
    ssim_map = (numerator / (denominator + eps)).mean(dim=1)[0]  # (H, W), channel mean of (1, C, H, W)
    counted = support[0, 0] > 0.5
    return float(ssim_map[counted].sum()), float(counted.sum())


class AlbedoMetric(SummedStatistics):
    """Streaming albedo metrics over foreground pixels, pooled over a dataset.

    * `mae`, `rmse`: per-pixel channel-mean absolute / squared error, averaged over all foreground pixels;
    * `psnr`: `10 log10(R^2 / MSE)` with the **dataset-global** MSE; R is fixed on the first batch: 255 when that
      batch's target maximum exceeds 1.5, else 1 (official rule);
    * `ssim`: masked SSIM (`masked_ssim_sum`), averaged over every counted window of the dataset;
    * `grad_l1`: channel-mean absolute difference of forward differences over valid neighbour pairs.

    Predictions are not clamped (nor are they officially).
    """

    def reset(self) -> None:
        self.data_range: float | None = None
        self.totals = torch.zeros(7, dtype=torch.float64)

    def statistics(self, predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None):
        """Per-sample sufficient statistics (fixed size; gather them across processes and `accumulate`) of predicted
        against target RGB albedo (in [0, 1] or [0, 255]) over the foreground (inputs as `dense_inputs` takes them).

        Returns:
            `torch.Tensor` of shape `(batch_size, 9)`, float64: sums of |error| and error^2 (channel means), pixel
            count, gradient-error sum and pair count, SSIM sums for R = 1 and R = 255, SSIM window count, and the
            sample's target maximum (used for the data-range rule).
        """
        predictions, valid = dense_inputs(predictions, targets, mask)  # valid: (B, H, W)
        pred, target = predictions.double(), targets.double()
        rows = []
        for b in range(pred.shape[0]):
            fg = valid[b]
            diff = pred[b] - target[b]  # (3, H, W)
            pairs_h = fg[:, 1:] & fg[:, :-1]
            pairs_v = fg[1:, :] & fg[:-1, :]
            grad_h = (diff[:, :, 1:] - diff[:, :, :-1]).abs().mean(dim=0)
            grad_v = (diff[:, 1:, :] - diff[:, :-1, :]).abs().mean(dim=0)
            ssim_1 = ssim_255 = count_ssim = 0.0
            if fg.any():
                # Both data ranges are kept: which one applies is only known from the dataset's first batch.
                ssim_1, count_ssim = masked_ssim_sum(pred[b], target[b], fg, 1.0)
                ssim_255, _ = masked_ssim_sum(pred[b], target[b], fg, 255.0)
            rows.append(torch.tensor([
                float(diff.abs().mean(dim=0)[fg].sum()), float((diff * diff).mean(dim=0)[fg].sum()), float(fg.sum()),
                float(grad_h[pairs_h].sum() + grad_v[pairs_v].sum()), float(pairs_h.sum() + pairs_v.sum()),
                ssim_1, ssim_255, count_ssim, float(target[b].max()),
            ], dtype=torch.float64))
        return torch.stack(rows)

    def accumulate(self, statistics: torch.Tensor) -> None:
        """Add rows from `statistics()`. The first call fixes the PSNR/SSIM data range from its rows' target maximum
        (official rule: the first evaluated batch decides)."""
        statistics = statistics.to(torch.float64).cpu()
        if self.data_range is None and len(statistics):
            self.data_range = 255.0 if float(statistics[:, 8].max()) > 1.5 else 1.0
        total = statistics.sum(dim=0)
        ssim = total[6] if self.data_range == 255.0 else total[5]
        self.totals += torch.stack([total[0], total[1], total[2], total[3], total[4], ssim, total[7]])

    def compute(self) -> dict[str, float]:
        """`mae`, `rmse`, `psnr` (dB), `ssim`, `grad_l1`; NaN when nothing was accumulated."""
        sum_abs, sum_sq, count, sum_grad, count_grad, sum_ssim, count_ssim = self.totals.tolist()
        if count == 0:
            return {name: float("nan") for name in ("mae", "rmse", "psnr", "ssim", "grad_l1")}
        mse = max(sum_sq / count, 1e-12)
        return {
            "mae": sum_abs / count,
            "rmse": math.sqrt(mse),
            "psnr": 10.0 * math.log10(self.data_range**2 / mse),
            "ssim": sum_ssim / max(count_ssim, 1.0),
            "grad_l1": sum_grad / max(count_grad, 1.0),
        }
