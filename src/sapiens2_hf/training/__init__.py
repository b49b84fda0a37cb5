"""Fine-tuning with `transformers.Trainer`: task wiring, the official optimiser rules, LoRA, evaluation.

The package face is lazy (PEP 562): registration imports `adapter_loading` (LoRA folders as `from_pretrained`
sources) without `transformers.Trainer`; each public name below imports its module on first access.
"""

from __future__ import annotations

import importlib

# Public name -> the module defining it.
_PUBLIC_NAMES = {
    **dict.fromkeys(("TaskEvaluator", "flip_test_heatmaps"), "evaluation"),
    **dict.fromkeys(("MultiTaskLoraModel", "apply_lora", "load_task_adapters", "lora_config", "merge_lora",
                     "save_lora_adapter", "trainable_parameter_count"), "lora"),
    **dict.fromkeys(("OFFICIAL_LAYER_DECAY", "freeze_backbone", "layer_id", "official_schedule", "parameter_groups"),
                    "optim"),
    **dict.fromkeys(("TASKS", "TRAINING_TASKS", "TrainingTaskSpec", "default_loss", "task_loss"), "tasks"),
    "Sapiens2Trainer": "trainer",
}
__all__ = sorted(_PUBLIC_NAMES)


def __getattr__(name: str):
    module = _PUBLIC_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
