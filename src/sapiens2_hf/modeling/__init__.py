# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Sapiens2 configurations and models (Hub-shippable: see the module docstrings)."""

from .configuration_sapiens2_hf import HEAD_PRESETS, TASKS, VARIANTS, Sapiens2Config, Sapiens2HeadConfig, tiny_config
from .modeling_sapiens2_hf import (
    TASK_MODEL_CLASSES,
    Sapiens2AlbedoEstimatorOutput,
    Sapiens2Backbone,
    Sapiens2ForAlbedoEstimation,
    Sapiens2ForImageMatting,
    Sapiens2ForNormalEstimation,
    Sapiens2ForPointmapEstimation,
    Sapiens2ForPoseEstimation,
    Sapiens2ForSemanticSegmentation,
    Sapiens2ImageMattingOutput,
    Sapiens2Model,
    Sapiens2PreTrainedModel,
    model_class_for_task,
)
from .loading_sapiens2_hf import ResolvedCheckpoint, resolve_checkpoint
