"""The training task registry: per task, the official loss, the data transform, the evaluation metrics and how a model
output and a collated batch feed the loss.

Keyed by the layer-0 task names (`sapiens2_hf.modeling.sapiens2_tasks.TASK_NAMES`; a test asserts the key sets are
equal, and importing this module fails when one is missing); the model-output field of a task's prediction comes from
there too. Adding a task means one entry here, one in the layer-0 registry, one in the data registry
(`sapiens2_hf.data.tasks.DATA_TASKS`), and the task's own modules (see docs/ARCHITECTURE.md).

A loss takes the task's prediction, its `loss_output_fields`, then the collated batch's `loss_batch_keys` and
`loss_optional_batch_keys` in that order (shapes: the task transforms' docstrings in `sapiens2_hf.data`).
`Sapiens2Trainer` passes only `pixel_values` to the model and applies the loss here, to log its terms. The task
models take the same batch keys as `forward` arguments and return the same official loss as `loss` (what
transformers' stock `Trainer` trains with); transformers' own stock losses (e.g. its unweighted pose MSE) never run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torch import nn

from ..data.dense import (AlbedoTransform, LetterboxMapTransform, MattingTransform, NormalTransform, PointmapTransform,
                          SegTransform)
from ..data.pose import PoseTransform
from ..losses import AlbedoLoss, MattingLoss, NormalLoss, PointmapLoss, PoseHeatmapLoss, SegmentationLoss
from ..metrics import (
    AlbedoMetric,
    KeypointOksAP,
    KeypointPCK,
    MattingMetric,
    NormalMetric,
    PointmapMetric,
    PoseHeatmapAccuracy,
    SegmentationMetric,
)
from ..modeling.sapiens2_tasks import OFFICIAL_TASK_NAMES, TASK_NAMES, task_spec


#: The kinds of `TrainingTaskSpec.prediction`.
PREDICTIONS = ("map", "classes", "keypoints")


@dataclass(frozen=True)
class TrainingTaskSpec:
    """What the training layer knows of one task (its layer-0 facts, e.g. the output field, are in `TASK_SPECS`).

    Attributes:
        loss (`type[nn.Module]`): the official loss; `loss()` has the official term weights.
        transform (`type`): the data transform; `transform(input_size, train=...)` turns records into samples.
        metrics (`Mapping[str, type]`): the streaming metric accumulators of `TaskEvaluator`, by statistics name.
        loss_output_fields, loss_batch_keys, loss_optional_batch_keys: what the loss takes after the task's
            prediction, in order: extra model-output fields (each with what produces it, for the error when a model
            has none), batch keys, then batch keys passed as `None` when a batch lacks them.
        prediction (`str`): what the prediction is, for evaluation (`TaskEvaluator`) and `--do_predict` files:
            `"map"` (default: a dense map compared with `labels` within `mask` by each metric, written as `.npz`),
            `"classes"` (per-pixel class logits, compared and written as class ids at each label's own size) or
            `"keypoints"` (heatmaps, decoded to keypoints in image pixels, written as COCO keypoint results).
        flip_test (`bool`): the official flip test applies (heatmaps averaged with those of the mirrored input,
            keypoints swapped left/right; `Sapiens2Trainer(pose_flip_test=...)` turns it off).
        head_modules (`tuple[str, ...]`): the model's head sub-modules, trained in full under LoRA
            (`modules_to_save`) and given the head learning rate.
    """

    loss: type[nn.Module]
    transform: type
    metrics: Mapping[str, type]
    loss_batch_keys: tuple[str, ...]
    loss_optional_batch_keys: tuple[str, ...] = ()
    loss_output_fields: tuple[tuple[str, str], ...] = ()
    prediction: str = "map"
    flip_test: bool = False
    head_modules: tuple[str, ...] = ("decode_head",)

    @classmethod
    def dense_map(cls, task: str, loss: type[nn.Module], metric: type | None = None) -> "TrainingTaskSpec":
        """The default of a registered dense-map task: `loss(prediction, labels, mask)`, the letterbox transform of
        the record key named after the task, and `metric` (if any) as the task's one statistics."""
        return cls(loss=loss, transform=LetterboxMapTransform.for_key(task), metrics={task: metric} if metric else {},
                   loss_batch_keys=("labels", "mask"))

    def __post_init__(self):
        if self.prediction not in PREDICTIONS:
            raise ValueError(f"TrainingTaskSpec.prediction must be one of {PREDICTIONS}, got {self.prediction!r}.")


TRAINING_TASKS: dict[str, TrainingTaskSpec] = {
    "pose": TrainingTaskSpec(
        loss=PoseHeatmapLoss, transform=PoseTransform,
        metrics={"acc_pose": PoseHeatmapAccuracy, "pck": KeypointPCK, "oks": KeypointOksAP},
        loss_batch_keys=("labels", "label_weights"), prediction="keypoints", flip_test=True,
    ),
    "seg": TrainingTaskSpec(
        loss=SegmentationLoss, transform=SegTransform, metrics={"seg": SegmentationMetric},
        loss_batch_keys=("labels",), prediction="classes",
    ),
    "normal": TrainingTaskSpec(
        loss=NormalLoss, transform=NormalTransform, metrics={"normal": NormalMetric},
        loss_batch_keys=("labels", "mask"),
    ),
    "pointmap": TrainingTaskSpec(
        loss=PointmapLoss, transform=PointmapTransform, metrics={"pointmap": PointmapMetric},
        loss_batch_keys=("labels", "target_scales", "mask", "intrinsics"),
        loss_optional_batch_keys=("target_mean_depth",),
        loss_output_fields=(("scales", "the scale branch"),), head_modules=("decode_head", "scale_head"),
    ),
    "albedo": TrainingTaskSpec(
        loss=AlbedoLoss, transform=AlbedoTransform, metrics={"albedo": AlbedoMetric},
        loss_batch_keys=("labels", "mask"),
    ),
    "matting": TrainingTaskSpec(
        loss=MattingLoss, transform=MattingTransform, metrics={"matting": MattingMetric},
        loss_batch_keys=("labels", "mask"),
        loss_optional_batch_keys=("foreground_labels",),
        loss_output_fields=(("foregrounds", "the matting head's foreground channels"),),
    ),
}

_missing = [name for name in OFFICIAL_TASK_NAMES if name not in TRAINING_TASKS]
if _missing:  # fail at import, naming the fix, rather than deep inside a training run
    raise ImportError(f"The training registry has no entry for task(s) {_missing}: add them to "
                      "sapiens2_hf.training.tasks.TRAINING_TASKS.")


def head_modules() -> tuple[str, ...]:
    """Every head sub-module name of the task models (`head_modules`, in registry order)."""
    return tuple(dict.fromkeys(name for spec in TRAINING_TASKS.values() for name in spec.head_modules))


def check_task(task: str) -> str:
    if task not in TRAINING_TASKS:
        if task in TASK_NAMES:
            raise ValueError(f"Task {task!r} has no training entry: pass `training=TrainingTaskSpec(...)` to "
                             "sapiens2_hf.register_task to fine-tune it.")
        raise ValueError(f"Unknown task {task!r}; choose one of {TASK_NAMES}.")
    return task


def training_task(task: str) -> TrainingTaskSpec:
    """The training registry entry of `task`, or a ValueError naming the known tasks."""
    return TRAINING_TASKS[check_task(task)]


def default_loss(task: str) -> nn.Module:
    """The official loss module of `task` with its official weights."""
    return training_task(task).loss()


def task_loss(task: str, loss_fn: nn.Module, outputs, batch: dict):
    """Apply `loss_fn` to a model output and a collated batch: the task's prediction (`TASK_SPECS[task].output_field`),
    its extra output fields, the batch keys, then the optional batch keys (see `TrainingTaskSpec`).

    Returns:
        `tuple[torch.Tensor, dict[str, torch.Tensor]]`: the scalar total and the weighted named terms.
    """
    training = training_task(task)
    arguments = [getattr(outputs, task_spec(task).output_field)]
    for field, producer in training.loss_output_fields:
        value = getattr(outputs, field, None)
        if value is None:
            raise ValueError(f"The {task} loss needs {producer} (`{field}`); this model has none.")
        arguments.append(value)
    arguments += [batch[key] for key in training.loss_batch_keys]
    arguments += [batch.get(key) for key in training.loss_optional_batch_keys]
    return loss_fn(*arguments)
