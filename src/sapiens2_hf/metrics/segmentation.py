"""Body-part segmentation metrics (mIoU, aAcc, mAcc) pooled over a whole dataset."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..data.label_tables import SEG_IGNORE_INDEX
from ..modeling.sapiens2_label_data import NUM_SEGMENTATION_CLASSES


class SegmentationMetric:
    """Streaming mIoU / aAcc / mAcc exactly as the official Sapiens2 ``SegEvaluator`` (``nan_to_num=0``).

    Dataset-level IoU (intersections, unions and areas summed over every pixel before any division); mIoU averages
    **all** classes including Background, a class absent from labels and predictions counting as IoU 0. Pixels
    labelled `ignore_index` are skipped. Values are unrounded percentages (0-100).

    Args:
        num_classes (`int`, *optional*, defaults to 29): Number of classes.
        ignore_index (`int`, *optional*, defaults to 255): Label value to skip.
        class_names (`Sequence[str]`, *optional*): Names used for the per-class entries of `compute(per_class=True)`.
        per_class (`bool`, *optional*, defaults to `False`): `compute()` also reports each class's IoU.
    """

    def __init__(
        self,
        num_classes: int = NUM_SEGMENTATION_CLASSES,
        ignore_index: int = SEG_IGNORE_INDEX,
        class_names: Sequence[str] | None = None,
        per_class: bool = False,
    ):
        self.num_classes = int(num_classes)
        self.ignore_index = int(ignore_index)
        self.class_names = list(class_names) if class_names is not None else [str(i) for i in range(num_classes)]
        self.per_class = per_class
        self.reset()

    @classmethod
    def from_config(cls, config) -> "SegmentationMetric":
        """The metric for a segmentation model's own classes (`id2label`, `semantic_loss_ignore_index`), with
        per-class IoU (`iou_<name>`)."""
        return cls(num_classes=config.num_labels, ignore_index=getattr(config, "semantic_loss_ignore_index", 255),
                   class_names=[config.id2label[i] for i in range(config.num_labels)], per_class=True)

    def reset(self) -> None:
        self.confusion = torch.zeros(self.num_classes, self.num_classes, dtype=torch.float64)  # (label, prediction)

    def statistics(self, predictions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Per-sample confusion matrices (fixed size; gather them across processes and `accumulate`).

        Args:
            predictions (`torch.Tensor`): class ids `(batch_size, height, width)` (int) at label resolution, or logits
                `(batch_size, num_classes, h, w)` (float), resized bilinearly (``align_corners=False``) to the label
                size before the arg-max, as the official evaluator does.
            labels (`torch.Tensor` of shape `(batch_size, [1,] height, width)`): class ids or `ignore_index`.

        Returns:
            `torch.Tensor` of shape `(batch_size, num_classes * num_classes)`, float64: row-major
            `(label, prediction)` pixel counts.
        """
        if labels.dim() == 4:
            labels = labels[:, 0]
        if predictions.is_floating_point():
            if predictions.dim() != 4 or predictions.shape[1] != self.num_classes:
                raise ValueError(
                    f"Float `predictions` must be logits (batch_size, {self.num_classes}, h, w), "
                    f"got {tuple(predictions.shape)}."
                )
            if predictions.shape[2:] != labels.shape[1:]:
                predictions = F.interpolate(
                    predictions.float(), size=labels.shape[1:], mode="bilinear", align_corners=False
                )
            predictions = predictions.argmax(dim=1)
        if predictions.shape != labels.shape:
            raise ValueError(
                f"`predictions` {tuple(predictions.shape)} and `labels` {tuple(labels.shape)} must match; resize the "
                "predictions to the ground-truth resolution first."
            )
        batch_size = labels.shape[0]
        labels = labels.long().reshape(batch_size, -1)
        predictions = predictions.long().reshape(batch_size, -1)
        keep = labels != self.ignore_index
        for name, values in (("labels", labels[keep]), ("predictions", predictions[keep])):
            if values.numel() and (values.min() < 0 or values.max() >= self.num_classes):
                raise ValueError(f"`{name}` hold class ids outside [0, {self.num_classes}) other than ignore_index.")
        cells = self.num_classes**2
        sample = torch.arange(batch_size, device=labels.device).unsqueeze(1).expand_as(labels)
        index = (sample * cells + labels * self.num_classes + predictions)[keep]
        counts = torch.bincount(index, minlength=batch_size * cells)
        return counts.reshape(batch_size, cells).to(torch.float64)

    def accumulate(self, statistics: torch.Tensor) -> None:
        """Add `statistics` from `statistics()` (any number of rows, from any process)."""
        total = statistics.to(torch.float64).sum(dim=0).cpu()
        self.confusion += total.reshape(self.num_classes, self.num_classes)

    def update(self, predictions: torch.Tensor, labels: torch.Tensor) -> None:
        """Accumulate one batch; arguments as in `statistics`."""
        self.accumulate(self.statistics(predictions, labels))

    def compute(self, per_class: bool | None = None) -> dict[str, float]:
        """Returns `dict[str, float]`: `miou`, `aacc`, `macc` in percent; with `per_class` (default: the metric's
        own) also `iou_<name>` and `acc_<name>` for every class."""
        per_class = self.per_class if per_class is None else per_class
        intersection = self.confusion.diag().numpy()
        area_label = self.confusion.sum(dim=1).numpy()
        area_pred = self.confusion.sum(dim=0).numpy()
        union = area_label + area_pred - intersection
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = np.nan_to_num(intersection / union, nan=0.0)
            acc = np.nan_to_num(intersection / area_label, nan=0.0)
            aacc = np.nan_to_num(intersection.sum() / area_label.sum(), nan=0.0)
        results = {"miou": float(iou.mean() * 100), "aacc": float(aacc * 100), "macc": float(acc.mean() * 100)}
        if per_class:
            for name, class_iou, class_acc in zip(self.class_names, iou, acc):
                results[f"iou_{name}"] = float(class_iou * 100)
                results[f"acc_{name}"] = float(class_acc * 100)
        return results
