"""Per-task wiring between model outputs, batches and the official losses.

Batch keys (from `sapiens2_hf.data` transforms + `Sapiens2DataCollator`):

| task | model output | batch targets |
|---|---|---|
| pose | `heatmaps` | `labels` `(B, K, h, w)`, `label_weights` `(B, K)` |
| seg | `logits` | `labels` `(B, H, W)` int64 (255 = ignore) |
| normal | `normals` | `labels` `(B, 3, H, W)`, `mask` `(B, 1, H, W)` |
| pointmap | `pointmaps`, `scales` | `labels` `(B, 3, H, W)` canonical XYZ, `mask`, `target_scales` `(B, 1)`, |
| | | `intrinsics` `(B, 3, 3)`, `target_mean_depth` `(B,)` |
| albedo | `albedos` | `labels` `(B, 3, H, W)`, `mask` |

Only `pixel_values` reaches the model: the models never see targets, so transformers' stock pose loss can never run.
"""

from __future__ import annotations

from torch import nn

from ..losses import AlbedoLoss, NormalLoss, PointmapLoss, PoseHeatmapLoss, SegmentationLoss


TASKS = ("pose", "seg", "normal", "pointmap", "albedo")

_LOSSES = {
    "pose": PoseHeatmapLoss,
    "seg": SegmentationLoss,
    "normal": NormalLoss,
    "pointmap": PointmapLoss,
    "albedo": AlbedoLoss,
}

OUTPUT_FIELDS = {"pose": "heatmaps", "seg": "logits", "normal": "normals", "pointmap": "pointmaps", "albedo": "albedos"}


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
    return task


def default_loss(task: str) -> nn.Module:
    """The official loss module of `task` with its official weights."""
    return _LOSSES[check_task(task)]()


def task_loss(task: str, loss_fn: nn.Module, outputs, batch: dict):
    """Apply `loss_fn` to a model output and a collated batch.

    Returns:
        `tuple[torch.Tensor, dict[str, torch.Tensor]]`: the scalar total and the weighted named terms.
    """
    if task == "pose":
        return loss_fn(outputs.heatmaps, batch["labels"], batch["label_weights"])
    if task == "seg":
        return loss_fn(outputs.logits, batch["labels"])
    if task == "normal":
        return loss_fn(outputs.normals, batch["labels"], batch["mask"])
    if task == "albedo":
        return loss_fn(outputs.albedos, batch["labels"], batch["mask"])
    if task == "pointmap":
        if outputs.scales is None:
            raise ValueError("The pointmap loss needs the scale branch (`scales`); this model has none.")
        return loss_fn(outputs.pointmaps, outputs.scales, batch["labels"], batch["target_scales"], batch["mask"],
                       batch["intrinsics"], batch.get("target_mean_depth"))
    raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
