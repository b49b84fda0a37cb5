# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Image processors and pure pre/post-processing functions for Sapiens2 (layer 0)."""

from .image_processing_sapiens2_hf import (
    TASKS,
    Sapiens2HFImageProcessor,
    image_processor_for_task,
    load_image_rgb,
    validate_pose_boxes,
)
from .sapiens2_keypoints import FLIP_PAIRS_308, KEYPOINT_NAMES_308


__all__ = [
    "Sapiens2HFImageProcessor", "image_processor_for_task", "load_image_rgb", "validate_pose_boxes", "TASKS",
    "FLIP_PAIRS_308", "KEYPOINT_NAMES_308",
]
