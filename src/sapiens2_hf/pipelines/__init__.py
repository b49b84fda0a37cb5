# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""transformers pipelines for the Sapiens2 tasks (layer 0). Registration: `register_pipelines()`."""

from .pipeline_sapiens2_hf import (
    DEFAULT_DETECTOR,
    PIPELINE_CLASSES,
    PIPELINE_TASKS,
    Sapiens2AlbedoPipeline,
    Sapiens2MattingPipeline,
    Sapiens2NormalPipeline,
    Sapiens2PointmapPipeline,
    Sapiens2PosePipeline,
    Sapiens2SegmentationPipeline,
    register_pipelines,
)


__all__ = [
    "DEFAULT_DETECTOR",
    "PIPELINE_CLASSES",
    "PIPELINE_TASKS",
    "Sapiens2AlbedoPipeline",
    "Sapiens2MattingPipeline",
    "Sapiens2NormalPipeline",
    "Sapiens2PointmapPipeline",
    "Sapiens2PosePipeline",
    "Sapiens2SegmentationPipeline",
    "register_pipelines",
]
