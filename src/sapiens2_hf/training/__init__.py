"""Fine-tuning with `transformers.Trainer`: task wiring, the official optimiser rules, LoRA, evaluation."""

from .evaluation import TaskEvaluator, flip_test_heatmaps
from .lora import (
    MultiTaskLoraModel,
    apply_lora,
    load_task_adapters,
    lora_config,
    merge_lora,
    save_lora_adapter,
    trainable_parameter_count,
)
from .optim import OFFICIAL_LAYER_DECAY, freeze_backbone, layer_id, official_schedule, parameter_groups
from .tasks import TRAINING_TASKS, TrainingTaskSpec, default_loss, task_loss
from .trainer import Sapiens2Trainer


__all__ = [
    "OFFICIAL_LAYER_DECAY",
    "TRAINING_TASKS",
    "MultiTaskLoraModel",
    "Sapiens2Trainer",
    "TaskEvaluator",
    "TrainingTaskSpec",
    "apply_lora",
    "default_loss",
    "flip_test_heatmaps",
    "freeze_backbone",
    "layer_id",
    "load_task_adapters",
    "lora_config",
    "merge_lora",
    "official_schedule",
    "parameter_groups",
    "save_lora_adapter",
    "task_loss",
    "trainable_parameter_count",
]
