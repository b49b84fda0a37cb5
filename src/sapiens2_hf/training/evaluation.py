"""Bounded-memory evaluation inside `transformers.Trainer`.

`TaskEvaluator.batch_statistics` turns a batch of outputs into fixed-size per-sample statistics (the packed vectors
the official evaluators gather across GPUs); the Trainer gathers them, and `TaskEvaluator.compute_metrics` (for
`batch_eval_metrics=True`) accumulates them and returns the metrics on the last batch: nothing proportional to the
dataset's pixels or heatmaps is kept.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import torch

from ..data.label_tables import KEYPOINT_FLIP_INDICES
from ..modeling.sapiens2_tasks import task_spec
from ..modeling.sapiens2_processing_ops import crop_to_image, decode_udp_heatmaps, flip_test_average
from .tasks import check_task, training_task


# The unit of each metric `TaskEvaluator` returns, by name without the `eval_` / `predict_` prefix (fnmatch patterns,
# first match wins). The names are public API (logs, model cards, *_results.json) and the scales follow the reference
# evaluators (mmseg prints percentages, COCO keypoint AP is a fraction), so the unit travels beside the value instead
# of in a renamed key.
METRIC_UNITS = (
    ("acc_pose", "fraction in [0, 1]"),
    ("pck_*", "fraction in [0, 1]"),
    ("oks_a[pr]*", "fraction in [0, 1]; -1: no ground truth in that area range"),
    ("miou", "percent"), ("aacc", "percent"), ("macc", "percent"), ("iou_*", "percent"), ("acc_*", "percent"),
    ("within_*_deg", "percent of pixels"),  # normal
    ("normal_within_*_deg", "fraction of pixels"),  # pointmap's normals
    ("*_deg", "degrees"),
    ("within_*_cm", "fraction of pixels"),
    ("mean_l2_error", "metres"), ("[xyz]_mae", "metres"),
    ("psnr", "dB"),
    ("*_runtime", "seconds"),
)


def metric_unit(name: str) -> str | None:
    """The unit of the metric `name` (`eval_miou` -> "percent"; see `METRIC_UNITS`), None when it has none."""
    for prefix in ("eval_", "predict_", "test_"):
        name = name.removeprefix(prefix)
    return next((unit for pattern, unit in METRIC_UNITS if fnmatchcase(name, pattern)), None)


def flip_test_heatmaps(model, pixel_values: torch.Tensor, heatmaps: torch.Tensor, flip_indices=KEYPOINT_FLIP_INDICES):
    """Official pose flip test: average the heatmaps with those of the horizontally flipped crop, flipped back and
    re-ordered with `flip_indices` (no pixel shift, UDP); the processor's own `flip_test_average` does the averaging,
    so evaluation and inference decode the same heatmaps."""
    return flip_test_average(heatmaps, model(pixel_values=pixel_values.flip(-1)).heatmaps, flip_indices)


class TaskEvaluator:
    """Streaming task metrics for the Trainer (see the module docstring).

    Metrics per task (the accumulators are the training registry's `TRAINING_TASKS[task].metrics`):
    * pose: `acc_pose` (official training-log PCK@0.05 on heatmap arg-max), `pck_0_05` / `pck_0_1` / `pck_0_2`
      (DARK-UDP decoded keypoints in image pixels, normalised by the larger side of the ground-truth box) and the
      COCO OKS AP/AR family with the 308 sigmas (`oks_ap`, ...), one detection per ground-truth box as in the
      official validation (crowd regions of the annotation file are not part of the crop dataset);
    * seg: `miou`, `aacc`, `macc` (percent) at the label's resolution;
    * normal: angular errors (`mean_angular_error_deg`, ...);
    * pointmap: canonical distance and normal metrics;
    * albedo: `mae`, `rmse`, `psnr`, `ssim`, `grad_l1`.

    The statistics follow the training registry's `prediction` kind: `"keypoints"` (pose) and `"classes"` (seg) have
    their own below; a `"map"` task (the default: a dense regression) has each metric take the task's prediction (its
    layer-0 `output_field`), `labels` and `mask`, so a new task of that kind needs no change here.

    `input_size` is the pose crop `(height, width)` that keypoints decode from (default: the batch's
    `pixel_values`); `oks` computes pose OKS AP (needs `PoseTransform`'s metadata); with the model's `config`, an
    accumulator with a `from_config` constructor is built for the model's own labels (OKS with its set's sigmas).
    """

    def __init__(self, task: str, input_size: tuple[int, int] | None = None, oks: bool = True, config=None):
        self.task = check_task(task)
        self.input_size = input_size
        self.oks = oks
        self.config = config
        self.reset()

    def reset(self) -> None:
        def build(metric):
            return metric.from_config(self.config) if self.config is not None and hasattr(metric, "from_config") \
                else metric()

        self.metrics = {name: build(metric) for name, metric in training_task(self.task).metrics.items()}

    @torch.no_grad()
    def batch_statistics(self, outputs, batch: dict, heatmaps: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Fixed-size per-sample statistics of one batch (every value has the batch as its first dimension).

        `heatmaps`, when given, are evaluated instead of `outputs.heatmaps` (e.g. the flip-test average).
        """
        kind = training_task(self.task).prediction
        prediction = getattr(outputs, task_spec(self.task).output_field)
        if kind == "keypoints":
            heatmaps = (prediction if heatmaps is None else heatmaps).float()
            stats = {"acc_pose": self.metrics["acc_pose"].statistics(heatmaps, batch["labels"], batch["label_weights"])}
            if "gt_keypoints" not in batch:
                return stats
            input_size = self.input_size or tuple(batch["pixel_values"].shape[-2:])
            decoded = decode_udp_heatmaps(heatmaps, input_size)
            keypoints = crop_to_image(decoded["keypoints_input"], batch["crop_center"], batch["crop_scale"], input_size)
            gt = batch["gt_keypoints"].double()
            side = batch["gt_bbox"][:, 2:].double().amax(dim=1, keepdim=True).expand(-1, 2)
            stats["pck"] = self.metrics["pck"].statistics(keypoints, gt[..., :2], gt[..., 2] > 0, side)
            stats.update(pred_keypoints=keypoints, pred_scores=decoded["scores"].double(), gt_keypoints=gt,
                         gt_area=batch["gt_area"].double(), gt_bbox=batch["gt_bbox"].double(),
                         image_id=batch["image_id"], instance_id=batch["instance_id"])
            return {name: value.to(heatmaps.device) for name, value in stats.items()}
        prediction = prediction.float()
        if kind == "classes":
            labels, sizes = batch["labels"], batch.get("label_size")
            if sizes is None or bool((sizes == torch.tensor(labels.shape[1:], device=sizes.device)).all()):
                return {name: metric.statistics(prediction, labels) for name, metric in self.metrics.items()}
            statistics = {}
            for name, metric in self.metrics.items():
                rows = []
                for b in range(len(labels)):  # padded original-resolution labels: resize logits to each true size
                    height, width = (int(v) for v in sizes[b])
                    rows.append(metric.statistics(prediction[b : b + 1], labels[b : b + 1, :height, :width]))
                statistics[name] = torch.cat(rows)
            return statistics
        labels, mask = batch["labels"], batch["mask"]
        return {name: metric.statistics(prediction, labels, mask) for name, metric in self.metrics.items()}

    def accumulate(self, statistics: dict[str, torch.Tensor]) -> None:
        """Add (gathered) statistics from `batch_statistics`."""
        for name, metric in self.metrics.items():
            if name == "oks":
                if "pred_keypoints" not in statistics:
                    continue
                s = {k: v.detach().cpu() for k, v in statistics.items()}
                metric.update(s["pred_keypoints"].numpy(), s["pred_scores"].numpy(), s["gt_keypoints"].numpy(),
                              s["gt_area"].numpy(), s["gt_bbox"].numpy(), s["image_id"].numpy(),
                              instance_ids=s["instance_id"].tolist())
            elif name in statistics:
                metric.accumulate(statistics[name])

    def compute(self) -> dict[str, float]:
        results = {}
        for name, metric in self.metrics.items():
            if name == "oks" and not (self.oks and metric._gts):
                continue
            if name == "pck" and metric._counts is None:
                continue
            results.update(metric.compute())
        return results

    def compute_metrics(self, eval_prediction, compute_result: bool = False) -> dict[str, float]:
        """`compute_metrics` for `Trainer(args=TrainingArguments(batch_eval_metrics=True))`: accumulates the
        gathered statistics of each batch (`eval_prediction.predictions`) and returns the metrics (and resets) when
        `compute_result` is true."""
        self.accumulate(eval_prediction.predictions)
        if not compute_result:
            return {}
        results = self.compute()
        self.reset()
        return results

