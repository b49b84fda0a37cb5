# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""transformers pipelines for the Sapiens2 tasks. Registration: `register_pipelines()` (every task), `register_pipeline(task)` (one).

They live in the one model folder (`sapiens2_hf/modeling/pipeline_sapiens2_hf.py`), which ships to the Hub as it is;
this package is their public import path.
"""

from ..modeling.pipeline_sapiens2_hf import (
    DEFAULT_DETECTOR,
    PIPELINE_CLASSES,
    PIPELINE_TASKS,
    Sapiens2AlbedoPipeline,
    Sapiens2DenseMapPipeline,
    Sapiens2MattingPipeline,
    Sapiens2NormalPipeline,
    Sapiens2PointmapPipeline,
    Sapiens2PosePipeline,
    Sapiens2SegmentationPipeline,
    dense_map_pipeline_class,
    register_pipeline,
    register_pipelines,
    unregister_pipeline,
)


__all__ = [
    "DEFAULT_DETECTOR",
    "PIPELINE_CLASSES",
    "PIPELINE_TASKS",
    "Sapiens2AlbedoPipeline",
    "Sapiens2DenseMapPipeline",
    "Sapiens2MattingPipeline",
    "Sapiens2NormalPipeline",
    "Sapiens2PointmapPipeline",
    "Sapiens2PosePipeline",
    "Sapiens2SegmentationPipeline",
    "dense_map_pipeline_class",
    "register_pipeline",
    "register_pipelines",
    "unregister_pipeline",
]
