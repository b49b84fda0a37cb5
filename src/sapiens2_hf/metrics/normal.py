"""Surface-normal angular error metrics pooled over a dataset."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ._dense import SummedStatistics, dense_inputs


def _threshold_name(threshold: float) -> str:
    return f"{threshold:g}".replace(".", "_")


def angular_error_deg(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Angle in degrees between two vector fields after unit-normalising both (`x / max(|x|, eps)`).

    Args:
        pred, target (`torch.Tensor` of shape `(..., 3)`): Vectors.

    Returns:
        `torch.Tensor` of shape `(...)`, float64, in [0, 180].
    """
    pred = pred.double() / pred.double().norm(dim=-1, keepdim=True).clamp_min(eps)
    target = target.double() / target.double().norm(dim=-1, keepdim=True).clamp_min(eps)
    return torch.rad2deg(torch.acos((pred * target).sum(dim=-1).clamp(-1.0, 1.0)))


class NormalMetric(SummedStatistics):
    """Streaming surface-normal metrics of the official Sapiens2 ``NormalEvaluator``.

    Every valid pixel of the dataset contributes the angle between unit-normalised prediction and target: mean, RMSE,
    the median as the centre of the histogram bin holding the 50 % quantile (official), and percent under thresholds.

    Args:
        thresholds_deg (`Sequence[float]`, *optional*, defaults to `(5, 11.25, 22.5, 30)`): Angle thresholds.
        bin_size_deg (`float`, *optional*, defaults to 0.5): Histogram bin width for the median.
    """

    def __init__(self, thresholds_deg: Sequence[float] = (5.0, 11.25, 22.5, 30.0), bin_size_deg: float = 0.5):
        self.thresholds_deg = tuple(float(t) for t in thresholds_deg)
        self.bin_size_deg = float(bin_size_deg)
        self.num_bins = int(math.ceil(180.0 / self.bin_size_deg))
        self.reset()

    def reset(self) -> None:
        self.totals = torch.zeros(3 + len(self.thresholds_deg) + self.num_bins, dtype=torch.float64)

    def statistics(self, predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None):
        """Per-sample sufficient statistics (fixed size; gather them across processes and `accumulate`) of raw or
        unit camera-frame normals against target normals, over the valid pixels (inputs as `dense_inputs` takes them).

        Returns:
            `torch.Tensor` of shape `(batch_size, 3 + num_thresholds + num_bins)`, float64: sum of angles, sum of
            squared angles, pixel count, counts below each threshold, angle histogram.
        """
        predictions, valid = dense_inputs(predictions, targets, mask)  # valid: (B, H, W)
        rows = []
        for b in range(targets.shape[0]):
            angles = angular_error_deg(predictions[b].permute(1, 2, 0)[valid[b]], targets[b].permute(1, 2, 0)[valid[b]])
            below = [(angles < t).sum() for t in self.thresholds_deg]
            bins = torch.floor(angles / self.bin_size_deg).long().clamp_(0, self.num_bins - 1)
            histogram = torch.bincount(bins, minlength=self.num_bins).to(torch.float64)
            count = torch.tensor(float(angles.numel()), dtype=torch.float64, device=angles.device)
            head = torch.stack([angles.sum(), (angles**2).sum(), count, *below]).to(torch.float64)
            rows.append(torch.cat([head, histogram]))
        return torch.stack(rows)

    def compute(self) -> dict[str, float]:
        """Returns `dict[str, float]`: `mean_angular_error_deg`, `median_angular_error_deg`, `rmse_angular_error_deg`
        and `within_<t>_deg` (percent, e.g. `within_11_25_deg`). NaN when nothing was accumulated."""
        count = float(self.totals[2])
        num_thresholds = len(self.thresholds_deg)
        histogram = self.totals[3 + num_thresholds :]
        if count == 0:
            nan = float("nan")
            results = {"mean_angular_error_deg": nan, "median_angular_error_deg": nan, "rmse_angular_error_deg": nan}
            results.update({f"within_{_threshold_name(t)}_deg": nan for t in self.thresholds_deg})
            return results
        cumulative = torch.cumsum(histogram, dim=0)
        median_bin = int(torch.searchsorted(cumulative, torch.tensor([0.5 * count], dtype=torch.float64)))
        median_bin = min(median_bin, self.num_bins - 1)
        results = {
            "mean_angular_error_deg": float(self.totals[0]) / count,
            "median_angular_error_deg": (median_bin + 0.5) * self.bin_size_deg,
            "rmse_angular_error_deg": math.sqrt(float(self.totals[1]) / count),
        }
        for index, threshold in enumerate(self.thresholds_deg):
            results[f"within_{_threshold_name(threshold)}_deg"] = 100.0 * float(self.totals[3 + index]) / count
        return results
