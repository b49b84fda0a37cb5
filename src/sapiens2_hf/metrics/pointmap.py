"""Pointmap metrics of the official Sapiens2 ``PointmapEvaluator``, pooled over a dataset."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ._dense import SummedStatistics, dense_inputs
from .normal import _threshold_name, angular_error_deg


# OpenCV's 5x5 Sobel kernels (ksize=5): smoothing [1, 4, 6, 4, 1] across, derivative [-1, -2, 0, 2, 1] along.
_SMOOTH = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0], dtype=torch.float64)
_DERIV = torch.tensor([-1.0, -2.0, 0.0, 2.0, 1.0], dtype=torch.float64)
SOBEL5_X = torch.outer(_SMOOTH, _DERIV)  # d/dx, rows = y
SOBEL5_Y = torch.outer(_DERIV, _SMOOTH)  # d/dy


def sobel5_normals(pointmap: torch.Tensor) -> torch.Tensor:
    """Surface normals `cross(d/dx, d/dy) / (|.| + 1e-6)` of a `(batch_size, 3, height, width)` XYZ map (height and
    width >= 3), float64, same shape: the official evaluator's ``cv2.Sobel(points, CV_32F, 1, 0, ksize=5)`` /
    ``(0, 1)`` with OpenCV's default border (``BORDER_REFLECT_101``, torch's ``"reflect"`` padding), then ``np.cross``.
    """
    batch_size, channels, height, width = pointmap.shape
    if height < 3 or width < 3:
        raise ValueError(f"Sobel normals need maps of at least 3x3 pixels, got {height}x{width}.")
    x = pointmap.double().reshape(batch_size * channels, 1, height, width)
    padded = F.pad(x, (2, 2, 2, 2), mode="reflect")  # reflect-101, OpenCV's default border
    kernels = torch.stack([SOBEL5_X, SOBEL5_Y]).unsqueeze(1).to(x.device)  # (2, 1, 5, 5)
    grads = F.conv2d(padded, kernels).reshape(batch_size, channels, 2, height, width)
    grad_x, grad_y = grads[:, :, 0], grads[:, :, 1]  # (B, 3, H, W) each
    normals = torch.cross(grad_x, grad_y, dim=1)
    return normals / (normals.norm(dim=1, keepdim=True) + 1e-6)


class PointmapMetric(SummedStatistics):
    """Streaming pointmap metrics on **canonical** pointmaps (prediction vs canonicalised target; the predicted
    scale is not evaluated), pooled over all valid pixels of the dataset, as the official ``PointmapEvaluator``:
    distances in canonical metres (the official "within 5/10/20 cm" names), normals from `sobel5_normals` of the
    full maps, threshold results as **fractions in [0, 1]**.

    Official quirk, kept: the reflect-101 Sobel derivative across the border is 0, so valid pixels on the outermost
    row and column always count as 90-degree normal errors (negligible at 1024x768, large on tiny maps).

    Args:
        distance_thresholds (`Sequence[float]`, *optional*, defaults to `(0.05, 0.10, 0.20)`): Distance thresholds.
        angle_thresholds_deg (`Sequence[float]`, *optional*, defaults to `(5, 11.25, 22.5, 30)`): Angle thresholds.
    """

    def __init__(
        self,
        distance_thresholds: Sequence[float] = (0.05, 0.10, 0.20),
        angle_thresholds_deg: Sequence[float] = (5.0, 11.25, 22.5, 30.0),
    ):
        self.distance_thresholds = tuple(float(t) for t in distance_thresholds)
        self.angle_thresholds_deg = tuple(float(t) for t in angle_thresholds_deg)
        self.reset()

    def reset(self) -> None:
        self.totals = torch.zeros(8 + len(self.distance_thresholds) + len(self.angle_thresholds_deg), dtype=torch.float64)

    def statistics(self, predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None):
        """Per-sample sufficient statistics (fixed size; gather them across processes and `accumulate`) of predicted
        against target canonical XYZ, over the valid pixels (inputs as `dense_inputs` takes them).

        Returns:
            `torch.Tensor` of shape `(batch_size, 8 + num_distance_thresholds + num_angle_thresholds)`, float64: sums
            of distance, |dx|, |dy|, |dz|, squared distance, angle, squared angle, the pixel count, then the counts
            below each threshold.
        """
        predictions, valid = dense_inputs(predictions, targets, mask)  # valid: (B, H, W)
        pred, target = predictions.double(), targets.double()
        pred_normals = sobel5_normals(pred).permute(0, 2, 3, 1)
        target_normals = sobel5_normals(target).permute(0, 2, 3, 1)
        rows = []
        for b in range(pred.shape[0]):
            diff = pred[b].permute(1, 2, 0)[valid[b]] - target[b].permute(1, 2, 0)[valid[b]]  # (N, 3)
            distances = diff.norm(dim=-1)
            angles = angular_error_deg(pred_normals[b][valid[b]], target_normals[b][valid[b]])
            values = [distances.sum(), diff[:, 0].abs().sum(), diff[:, 1].abs().sum(), diff[:, 2].abs().sum(),
                      (distances**2).sum(), angles.sum(), (angles**2).sum(), distances.new_tensor(float(distances.numel()))]
            values += [(distances < t).sum() for t in self.distance_thresholds]
            values += [(angles < t).sum() for t in self.angle_thresholds_deg]
            rows.append(torch.stack([v.to(torch.float64) for v in values]))
        return torch.stack(rows)

    def compute(self) -> dict[str, float]:
        """Returns `dict[str, float]`: `mean_l2_error`, `x_mae`, `y_mae`, `z_mae`, `rmse`, `within_<5|10|20>_cm`,
        `normal_mean_angular_error_deg`, `normal_rmse_angular_error_deg` and `normal_within_<t>_deg` (fractions). NaN
        when nothing was accumulated."""
        t = self.totals.tolist()
        n = t[7]
        nan = float("nan")

        def ratio(value):
            return value / n if n else nan

        results = {"mean_l2_error": ratio(t[0]), "x_mae": ratio(t[1]), "y_mae": ratio(t[2]), "z_mae": ratio(t[3]),
                   "rmse": math.sqrt(t[4] / n) if n else nan}
        offset = 8
        for index, threshold in enumerate(self.distance_thresholds):
            results[f"within_{round(threshold * 100):d}_cm"] = ratio(t[offset + index])
        offset += len(self.distance_thresholds)
        results["normal_mean_angular_error_deg"] = ratio(t[5])
        results["normal_rmse_angular_error_deg"] = math.sqrt(t[6] / n) if n else nan
        for index, threshold in enumerate(self.angle_thresholds_deg):
            results[f"normal_within_{_threshold_name(threshold)}_deg"] = ratio(t[offset + index])
        return results
