# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The Sapiens2 image processors and pre/post-processing functions.

They live in the one model folder, `sapiens2_hf/modeling/` (image_processing_sapiens2_hf.py,
image_loading_sapiens2_hf.py, sapiens2_processing_ops.py), which ships to the Hub as it is; this package is their
public import path.
"""

from ..modeling.image_loading_sapiens2_hf import load_image_rgb
from ..modeling.image_processing_sapiens2_hf import (
    Sapiens2HFImageProcessor,
    image_processor_for_task,
    processor_tasks,
    validate_pose_boxes,
)


__all__ = [
    "Sapiens2HFImageProcessor", "image_processor_for_task", "load_image_rgb", "validate_pose_boxes", "processor_tasks",
]
