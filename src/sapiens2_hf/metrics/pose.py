"""Pose metrics: COCO-style OKS average precision with the 308 Sapiens2 sigmas, PCK, and the official training-log
heatmap accuracy ``acc_pose``, as streaming accumulators (`update` per batch, `compute` once). The OKS accumulator
keeps one `(num_keypoints, 3)` array per instance (about 3.7 kB for 308 keypoints), as any COCO evaluation must.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..data.label_tables import KEYPOINT_OKS_SIGMAS
from ..modeling.sapiens2_processing_ops import heatmap_argmax


def _to_numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().to(torch.float64).cpu().numpy()
    return np.asarray(value, dtype=np.float64)


class KeypointPCK:
    """Percentage of correct keypoints: a labelled keypoint is correct when its distance to the ground truth,
    divided per axis by a normalisation size, is below a threshold. As mmpose's ``keypoint_pck_accuracy`` (the
    official code's): the mean over keypoint channels labelled at least once of each channel's accuracy, with counts
    pooled over every `update` (the whole-dataset result).

    Args:
        thresholds (`Sequence[float]`, *optional*, defaults to `(0.05, 0.1, 0.2)`): Normalised distance thresholds.
        prefix (`str`, *optional*, defaults to `"pck"`): Metric name prefix (`pck_0_1` for threshold 0.1).
    """

    def __init__(self, thresholds: Sequence[float] = (0.05, 0.1, 0.2), prefix: str = "pck"):
        self.thresholds = tuple(float(t) for t in thresholds)
        self.prefix = prefix
        self.reset()

    def reset(self) -> None:
        self._hits = None  # (num_thresholds, num_keypoints)
        self._counts = None  # (num_keypoints,)

    def statistics(self, pred_keypoints, gt_keypoints, mask, normalize) -> torch.Tensor:
        """Per-instance hit indicators (fixed size; gather them across processes and `accumulate`).

        Args:
            pred_keypoints (`torch.Tensor` or array of shape `(num_instances, num_keypoints, 2)`): `(x, y)`.
            gt_keypoints (`torch.Tensor` or array of shape `(num_instances, num_keypoints, 2)`): `(x, y)`, same frame.
            mask (`torch.Tensor` or array of shape `(num_instances, num_keypoints)`, bool): Labelled keypoints.
            normalize (`torch.Tensor` or array of shape `(num_instances, 2)`): Per-axis normalisation sizes for
                `(x, y)`; an instance with a size <= 0 on any axis is skipped.

        Returns:
            `torch.Tensor` of shape `(num_instances, num_thresholds + 1, num_keypoints)`, float64: one row of hits per
            threshold, then the labelled indicator.
        """
        pred = _to_numpy(pred_keypoints)
        gt = _to_numpy(gt_keypoints)
        valid = _to_numpy(mask) > 0
        norm = _to_numpy(normalize).reshape(-1, 2)
        if pred.shape != gt.shape or pred.ndim != 3 or pred.shape[-1] != 2 or valid.shape != pred.shape[:2]:
            raise ValueError(
                "`pred_keypoints`/`gt_keypoints` must be (num_instances, num_keypoints, 2) and `mask` "
                f"(num_instances, num_keypoints); got {pred.shape}, {gt.shape}, {valid.shape}."
            )
        valid = valid & (norm > 0).all(axis=1, keepdims=True)
        safe_norm = np.where(norm > 0, norm, 1.0)
        distances = np.linalg.norm((pred - gt) / safe_norm[:, None, :], axis=-1)  # (N, K)
        rows = [(distances < threshold) & valid for threshold in self.thresholds] + [valid]
        return torch.from_numpy(np.stack(rows, axis=1).astype(np.float64))

    def accumulate(self, statistics: torch.Tensor) -> None:
        """Add rows from `statistics()` (any number, from any process)."""
        total = statistics.to(torch.float64).sum(dim=0).cpu().numpy()  # (T + 1, K)
        if self._counts is None:
            self._hits = np.zeros_like(total[:-1])
            self._counts = np.zeros_like(total[-1])
        self._hits += total[:-1]
        self._counts += total[-1]

    def update(self, *batch) -> None:
        """Accumulate one batch; arguments as in `statistics`."""
        self.accumulate(self.statistics(*batch))

    def compute(self) -> dict[str, float]:
        """Returns `{f"{prefix}_{threshold}": value}` with the threshold's `.` written `_`; values in [0, 1]."""
        results = {}
        for index, threshold in enumerate(self.thresholds):
            name = f"{self.prefix}_{threshold:g}".replace(".", "_")
            if self._counts is None or not (self._counts > 0).any():
                results[name] = 0.0
                continue
            labelled = self._counts > 0
            results[name] = float((self._hits[index][labelled] / self._counts[labelled]).mean())
        return results


class PoseHeatmapAccuracy(KeypointPCK):
    """The official training-log metric ``acc_pose``: PCK@0.05 between the arg-max of the predicted and of the
    target heatmaps, over keypoints with a positive target weight.

    Official quirk (kept on purpose): the normalisation pairs x with the heatmap **height** and y with the heatmap
    **width** (mmpose ``pose_pck_accuracy`` passes `[[H, W]]` for `(x, y)`). Set `official_axis_order=False` for the
    conventional (width, height) pairing.

    Args:
        threshold (`float`, *optional*, defaults to 0.05): PCK threshold.
        official_axis_order (`bool`, *optional*, defaults to `True`): Keep the official (height, width) pairing.
    """

    def __init__(self, threshold: float = 0.05, official_axis_order: bool = True):
        super().__init__(thresholds=(threshold,), prefix="acc_pose")
        self.official_axis_order = official_axis_order

    def statistics(self, heatmaps: torch.Tensor, target_heatmaps: torch.Tensor, target_weights: torch.Tensor):
        """Per-sample hit indicators `(batch_size, 2, num_keypoints)` (see `KeypointPCK.statistics`).

        Args:
            heatmaps (`torch.Tensor` of shape `(batch_size, num_keypoints, height, width)`): Predictions.
            target_heatmaps (`torch.Tensor` of shape `(batch_size, num_keypoints, height, width)`): Targets.
            target_weights (`torch.Tensor` of shape `(batch_size, num_keypoints)`): Keypoint weights.
        """
        batch_size, _, height, width = heatmaps.shape
        pred, _ = heatmap_argmax(heatmaps.float())
        gt, _ = heatmap_argmax(target_heatmaps.float())
        size = (height, width) if self.official_axis_order else (width, height)
        normalize = torch.tensor(size, dtype=torch.float64).expand(batch_size, 2)
        return super().statistics(pred, gt, target_weights.reshape(batch_size, -1) > 0, normalize)

    def compute(self) -> dict[str, float]:
        """Returns `{"acc_pose": value}` with the value in [0, 1]."""
        return {"acc_pose": next(iter(super().compute().values()))}


@dataclass
class _Instance:
    keypoints: np.ndarray  # (K, 3): x, y, visibility (GT) or score (detection)
    area: float
    score: float = 0.0
    box: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # COCO (x, y, width, height)
    iscrowd: bool = False


def oks_matrix(
    det_keypoints: np.ndarray, gt: Sequence[_Instance], variances: np.ndarray
) -> np.ndarray:
    """COCO OKS `(num_detections, num_ground_truths)` between detected `(x, y)` `(num_detections, num_keypoints, 2)`
    and ground-truth instances, with `variances` `(2 * sigma)^2` (pycocotools ``computeOks`` semantics).

    For a ground truth with labelled keypoints (visibility > 0): mean over them of
    `exp(-d^2 / (2 * area * (2 sigma)^2))`. For one without, the distance of each detected keypoint to the ground
    truth's box enlarged to three times its size (zero inside), averaged over all keypoints.
    """
    det_keypoints = np.asarray(det_keypoints, dtype=np.float64)
    ious = np.zeros((len(det_keypoints), len(gt)))
    if not len(det_keypoints):
        return ious
    # All detections against one ground truth at once: `(num_detections, num_keypoints)` arrays, each row reduced
    # exactly as pycocotools reduces one detection (the same element-wise operations, then a row sum).
    xd, yd = det_keypoints[..., 0], det_keypoints[..., 1]
    for j, instance in enumerate(gt):
        xg, yg, vg = instance.keypoints[:, 0], instance.keypoints[:, 1], instance.keypoints[:, 2]
        labelled = vg > 0
        if labelled.any():
            dx, dy = xd - xg, yd - yg
        else:
            bx, by, bw, bh = instance.box
            x0, x1, y0, y1 = bx - bw, bx + 2 * bw, by - bh, by + 2 * bh
            dx = np.maximum(0.0, x0 - xd) + np.maximum(0.0, xd - x1)
            dy = np.maximum(0.0, y0 - yd) + np.maximum(0.0, yd - y1)
        e = (dx**2 + dy**2) / variances / (instance.area + np.spacing(1)) / 2
        if labelled.any():
            e = e[:, labelled]
        ious[:, j] = np.exp(-e).sum(axis=1) / e.shape[1]
    return ious


def oks_nms(instances: Sequence[_Instance], threshold: float, sigmas: np.ndarray) -> list[int]:
    """Greedy OKS non-maximum suppression of one image's detections (mmpose ``oks_nms``, no visibility threshold):
    the area of a pair is the mean of the two keypoint-extent areas.

    Returns:
        `list[int]`: indices of the kept instances, highest score first.
    """
    if not instances:
        return []
    variances = (2 * sigmas) ** 2
    scores = np.array([inst.score for inst in instances])
    keypoints = np.stack([inst.keypoints[:, :2] for inst in instances])
    areas = np.array([inst.area for inst in instances])
    order = scores.argsort()[::-1]
    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(int(i))
        rest = order[1:]
        dx = keypoints[rest, :, 0] - keypoints[i, :, 0]
        dy = keypoints[rest, :, 1] - keypoints[i, :, 1]
        e = (dx**2 + dy**2) / variances / ((areas[i] + areas[rest])[:, None] / 2 + np.spacing(1)) / 2
        overlap = np.exp(-e).mean(axis=1) if e.shape[1] else np.zeros(len(rest))
        order = rest[overlap <= threshold]
    return keep


def keypoint_extent_area(keypoints: np.ndarray) -> float:
    """Area of the axis-aligned box around all keypoints (pycocotools ``loadRes`` and the official evaluator)."""
    return float((keypoints[:, 0].max() - keypoints[:, 0].min()) * (keypoints[:, 1].max() - keypoints[:, 1].min()))


class KeypointOksAP:
    """COCO keypoint average precision and recall over OKS thresholds 0.50:0.05:0.95, with the 308 Sapiens2 sigmas.

    Reproduces pycocotools ``COCOeval(iouType="keypoints")`` (max 20 detections per image, area ranges all / medium
    32^2-96^2 / large > 96^2, 101-point interpolated precision, crowd and zero-keypoint ground truths ignored), plus
    the official result preparation: instance score = box score x mean of the keypoint scores above 0.2, then OKS-NMS
    at 0.9 per image. Not pycocotools itself: the same ten figures to the last bit (tests/test_metrics_pose.py) about
    2.5x faster (benchmarks/bench_metrics_pose.py), accumulated across processes and batches, no extra dependency.

    Register each image's ground truth (all annotated persons, crowd regions included) with `add_ground_truth` and
    the detections with `add_detections`, in any order and batching; `update` does both for top-down crops.

    Args:
        sigmas (`Sequence[float]`, *optional*): Per-keypoint OKS sigmas; defaults to the 308 official ones.
        keypoint_score_threshold (`float`, *optional*, defaults to 0.2): Keypoint scores above it enter the mean.
        nms_threshold (`float`, *optional*, defaults to 0.9): OKS-NMS threshold; `None` disables NMS.
        max_detections (`int`, *optional*, defaults to 20): Detections kept per image (highest scores).
        rescore (`bool`, *optional*, defaults to `True`): Apply the box x keypoint score rule; if `False` the
            detection score passed in is used as is.
    """

    AREA_RANGES = {"": (0.0, 1e10), "_medium": (32.0**2, 96.0**2), "_large": (96.0**2, 1e10)}

    def __init__(
        self,
        sigmas: Sequence[float] | None = None,
        keypoint_score_threshold: float = 0.2,
        nms_threshold: float | None = 0.9,
        max_detections: int = 20,
        rescore: bool = True,
    ):
        self.sigmas = np.asarray(KEYPOINT_OKS_SIGMAS if sigmas is None else sigmas, dtype=np.float64)
        self.keypoint_score_threshold = float(keypoint_score_threshold)
        self.nms_threshold = nms_threshold
        self.max_detections = int(max_detections)
        self.rescore = rescore
        self.iou_thresholds = np.linspace(0.5, 0.95, 10)
        self.recall_thresholds = np.linspace(0.0, 1.0, 101)
        self.reset()

    @classmethod
    def from_config(cls, config, **kwargs) -> "KeypointOksAP":
        """The metric for a pose model's own keypoint set: its config's `oks_sigmas` (the set's, written by
        fine-tuning on it), the official 308 sigmas for the official set, else 0.05 per keypoint (a set nobody gave
        sigmas for, and none of whose names is one of the 308)."""
        from ..data.keypoint_sets import KeypointSet

        sigmas = KeypointSet.from_config(config).sigmas
        return cls(sigmas=sigmas if sigmas is not None else [0.05] * config.num_labels, **kwargs)

    def reset(self) -> None:
        self._gts: dict[int, dict[object, _Instance]] = defaultdict(dict)
        self._dts: dict[int, dict[object, _Instance]] = defaultdict(dict)

    def _check(self, keypoints: np.ndarray, columns: int, name: str) -> np.ndarray:
        if keypoints.ndim != 3 or keypoints.shape[1] != len(self.sigmas) or keypoints.shape[2] < columns:
            raise ValueError(
                f"`{name}` must be (num_instances, {len(self.sigmas)}, >={columns}) to match the {len(self.sigmas)} "
                f"OKS sigmas, got {keypoints.shape}; pass `sigmas` for another keypoint layout."
            )
        return keypoints

    def add_ground_truth(self, image_ids, keypoints, areas, boxes, iscrowd=None, instance_ids=None) -> None:
        """
        Args:
            image_ids (`Sequence[int]` of length `num_instances`): Image of each annotation.
            keypoints (array of shape `(num_instances, num_keypoints, 3)`): `(x, y, visibility)`, visibility > 0
                for labelled keypoints, image pixels.
            areas (array of shape `(num_instances,)`): Annotation areas (COCO `area`, pixels^2).
            boxes (array of shape `(num_instances, 4)`): COCO `(x, y, width, height)` boxes.
            iscrowd (array of shape `(num_instances,)`, *optional*): Crowd flags.
            instance_ids (`Sequence`, *optional*): Unique annotation ids; a repeated id replaces the earlier entry.
        """
        keypoints = self._check(_to_numpy(keypoints), 3, "keypoints")
        areas, boxes = _to_numpy(areas).reshape(-1), _to_numpy(boxes).reshape(-1, 4)
        crowd = np.zeros(len(keypoints), bool) if iscrowd is None else _to_numpy(iscrowd).reshape(-1) > 0
        for n, image_id in enumerate(_to_numpy(image_ids).astype(np.int64).reshape(-1).tolist()):
            key = instance_ids[n] if instance_ids is not None else len(self._gts[image_id])
            self._gts[image_id][key] = _Instance(keypoints[n, :, :3].copy(), float(areas[n]), 0.0,
                                                 tuple(boxes[n].tolist()), bool(crowd[n]))

    def add_detections(self, image_ids, keypoints, keypoint_scores, scores=None, instance_ids=None) -> None:
        """
        Args:
            image_ids (`Sequence[int]` of length `num_instances`): Image of each detection.
            keypoints (array of shape `(num_instances, num_keypoints, 2)`): Predicted `(x, y)`, image pixels.
            keypoint_scores (array of shape `(num_instances, num_keypoints)`): Per-keypoint confidences.
            scores (array of shape `(num_instances,)`, *optional*): Box scores (1 for ground-truth boxes).
            instance_ids (`Sequence`, *optional*): Unique detection ids; a repeated id replaces the earlier one (the
                official evaluator de-duplicates by id).
        """
        keypoints = self._check(_to_numpy(keypoints), 2, "keypoints")
        keypoint_scores = _to_numpy(keypoint_scores).reshape(len(keypoints), -1)
        box_scores = np.ones(len(keypoints)) if scores is None else _to_numpy(scores).reshape(-1)
        for n, image_id in enumerate(_to_numpy(image_ids).astype(np.int64).reshape(-1).tolist()):
            kpt_scores = keypoint_scores[n]
            if self.rescore:
                confident = kpt_scores[kpt_scores > self.keypoint_score_threshold]
                score = float(box_scores[n] * (confident.mean() if confident.size else 0.0))
            else:
                score = float(box_scores[n])
            data = np.concatenate([keypoints[n, :, :2], kpt_scores[:, None]], axis=1)
            key = instance_ids[n] if instance_ids is not None else len(self._dts[image_id])
            self._dts[image_id][key] = _Instance(data, keypoint_extent_area(data), score)

    def update(self, pred_keypoints, pred_keypoint_scores, gt_keypoints, gt_areas, gt_boxes, image_ids,
               instance_ids=None, box_scores=None) -> None:
        """Top-down shortcut: one detection per ground-truth person (GT boxes, as in the official validation).
        `gt_*` are `add_ground_truth`'s arguments, `pred_*` and `box_scores` `add_detections`'; `instance_ids` serve
        both."""
        self.add_ground_truth(image_ids, gt_keypoints, gt_areas, gt_boxes, instance_ids=instance_ids)
        self.add_detections(image_ids, pred_keypoints, pred_keypoint_scores, box_scores, instance_ids=instance_ids)

    def _prepare_image(self, gts, dts):
        """Detections sorted by score (stable, as numpy's mergesort) and cut to `max_detections`, and their OKS
        against every ground truth: computed once per image, shared by the area ranges (as pycocotools does)."""
        dts = sorted(dts, key=lambda d: -d.score)[: self.max_detections]
        if gts and dts:
            ious = oks_matrix(np.stack([d.keypoints[:, :2] for d in dts]), gts, (2 * self.sigmas) ** 2)
        else:
            ious = np.zeros((len(dts), len(gts)))
        return gts, dts, ious

    def _evaluate_image(self, gts, dts, ious, area_range):
        lo, hi = area_range
        ignore = np.array(
            [g.iscrowd or not (g.keypoints[:, 2] > 0).any() or g.area < lo or g.area > hi for g in gts], dtype=bool
        )
        gt_order = np.argsort(ignore, kind="mergesort")
        gts = [gts[i] for i in gt_order]
        ignore = ignore[gt_order]
        num_thresholds = len(self.iou_thresholds)
        dt_matched = np.zeros((num_thresholds, len(dts)), bool)
        dt_ignore = np.zeros((num_thresholds, len(dts)), bool)
        if gts and dts:
            # Plain Python floats and lists in the greedy loop (the same values: float64 -> float is exact); numpy
            # scalars there cost most of the evaluation time.
            oks = ious[:, gt_order].tolist()
            ignored = ignore.tolist()
            crowd = [g.iscrowd for g in gts]
            for t, threshold in enumerate(self.iou_thresholds.tolist()):
                taken = [False] * len(gts)
                for d, row in enumerate(oks):
                    best, match = min(threshold, 1 - 1e-10), -1
                    for g, value in enumerate(row):
                        if taken[g] and not crowd[g]:
                            continue
                        if match > -1 and not ignored[match] and ignored[g]:
                            break
                        if value < best:
                            continue
                        best, match = value, g
                    if match == -1:
                        continue
                    dt_ignore[t, d] = ignored[match]
                    dt_matched[t, d] = True
                    taken[match] = True
        outside = np.array([d.area < lo or d.area > hi for d in dts], dtype=bool)
        dt_ignore |= ~dt_matched & outside[None, :]
        return np.array([d.score for d in dts]), dt_matched, dt_ignore, ignore

    def _accumulate(self, per_image):
        per_image = [e for e in per_image if e is not None]
        num_thresholds = len(self.iou_thresholds)
        if not per_image:
            return None, None
        scores = np.concatenate([e[0] for e in per_image])
        order = np.argsort(-scores, kind="mergesort")
        matched = np.concatenate([e[1] for e in per_image], axis=1)[:, order]
        dt_ignore = np.concatenate([e[2] for e in per_image], axis=1)[:, order]
        gt_ignore = np.concatenate([e[3] for e in per_image])
        num_gt = int((~gt_ignore).sum())
        if num_gt == 0:
            return None, None
        tp = np.cumsum(matched & ~dt_ignore, axis=1).astype(float)
        fp = np.cumsum(~matched & ~dt_ignore, axis=1).astype(float)
        precision = np.zeros((num_thresholds, len(self.recall_thresholds)))
        recall = np.zeros(num_thresholds)
        for t in range(num_thresholds):
            rc = tp[t] / num_gt
            pr = tp[t] / (fp[t] + tp[t] + np.spacing(1))
            recall[t] = rc[-1] if len(rc) else 0.0
            pr = np.maximum.accumulate(pr[::-1])[::-1]  # make precision monotonically non-increasing
            idx = np.searchsorted(rc, self.recall_thresholds, side="left")
            valid = idx < len(pr)
            precision[t, valid] = pr[idx[valid]]
        return precision, recall

    def compute(self) -> dict[str, float]:
        """NMS, matching and accumulation over everything added so far: `oks_ap`, `oks_ap50`, `oks_ap75`,
        `oks_ap_medium`, `oks_ap_large`, `oks_ar`, `oks_ar50`, `oks_ar75`, `oks_ar_medium`, `oks_ar_large` in [0, 1]
        (pycocotools ``stats[0:10]``); -1 where no ground truth falls in the range, as pycocotools reports."""
        image_ids = sorted(set(self._gts) | set(self._dts))
        if set(self._dts) - set(self._gts):
            raise ValueError("Detections were added for images without any ground truth; add their ground truth too.")
        dets = {}
        for image_id in image_ids:
            instances = list(self._dts.get(image_id, {}).values())
            if self.nms_threshold is not None:
                instances = [instances[k] for k in oks_nms(instances, self.nms_threshold, self.sigmas)]
            dets[image_id] = instances
        prepared = {}
        for image_id in image_ids:
            gts = list(self._gts.get(image_id, {}).values())
            prepared[image_id] = self._prepare_image(gts, dets[image_id]) if gts or dets[image_id] else None
        results = {}
        for suffix, area_range in self.AREA_RANGES.items():
            per_image = [
                None if prepared[image_id] is None else self._evaluate_image(*prepared[image_id], area_range)
                for image_id in image_ids
            ]
            precision, recall = self._accumulate(per_image)
            if precision is None:
                results[f"oks_ap{suffix}"], results[f"oks_ar{suffix}"] = -1.0, -1.0
                if suffix == "":
                    for name in ("oks_ap50", "oks_ap75", "oks_ar50", "oks_ar75"):
                        results[name] = -1.0
                continue
            results[f"oks_ap{suffix}"] = float(precision.mean())
            results[f"oks_ar{suffix}"] = float(recall.mean())
            if suffix == "":
                results["oks_ap50"], results["oks_ap75"] = float(precision[0].mean()), float(precision[5].mean())
                results["oks_ar50"], results["oks_ar75"] = float(recall[0]), float(recall[5])
        order = ["oks_ap", "oks_ap50", "oks_ap75", "oks_ap_medium", "oks_ap_large",
                 "oks_ar", "oks_ar50", "oks_ar75", "oks_ar_medium", "oks_ar_large"]
        return {name: results[name] for name in order}
