# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Sapiens2 configurations and models (Hub-shippable: see the module docstrings).

The package face is lazy (PEP 562): importing `sapiens2_hf.modeling`, or its stdlib-only task registry
`sapiens2_hf.modeling.sapiens2_tasks`, imports neither torch nor transformers (so `sapiens2-hf --help` and the CLI's
task tables read the one registry module); each public name below imports its sub-module on first access.
"""

from __future__ import annotations

import importlib

from .sapiens2_tasks import OFFICIAL_TASK_NAMES, TASK_SPECS

# Public name -> the sub-module defining it (its one import path besides that sub-module); the official task model
# classes are read from the task registry.
_PUBLIC_NAMES = {
    **dict.fromkeys(("HEAD_PRESETS", "TASKS", "VARIANTS", "Sapiens2Config", "Sapiens2HeadConfig", "tiny_config"),
                    "configuration_sapiens2_hf"),
    **dict.fromkeys(("TASK_MODEL_CLASSES", "Sapiens2Backbone", "Sapiens2ImageMattingOutput", "Sapiens2Model",
                     "Sapiens2PreTrainedModel", "Sapiens2TaskModel", "model_class_for_task",
                     *(TASK_SPECS[name].model_class for name in OFFICIAL_TASK_NAMES)),
                    "modeling_sapiens2_hf"),
    "resolve_checkpoint": "loading_sapiens2_hf",
}
__all__ = sorted(_PUBLIC_NAMES)


def __getattr__(name: str):
    module = _PUBLIC_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
