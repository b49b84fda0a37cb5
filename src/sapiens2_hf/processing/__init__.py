# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The Sapiens2 image processors and pre/post-processing functions.

They live in the one model folder, `sapiens2_hf/modeling/` (image_processing_sapiens2_hf.py,
sapiens2_processing_ops.py, sapiens2_keypoint_formats.py), which ships to the Hub as it is; this package is their
public import path.
"""

from ..modeling.image_processing_sapiens2_hf import (
    TASKS,
    Sapiens2HFImageProcessor,
    image_processor_for_task,
    load_image_rgb,
    validate_pose_boxes,
)
# The official 308-keypoint fallbacks under their historical names.
from ..modeling.sapiens2_label_data import NUM_POSE_KEYPOINTS as NUM_KEYPOINTS_308
from ..modeling.sapiens2_label_data import POSE_FLIP_PAIRS as FLIP_PAIRS_308
from ..modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES as KEYPOINT_NAMES_308


__all__ = [
    "Sapiens2HFImageProcessor", "image_processor_for_task", "load_image_rgb", "validate_pose_boxes", "TASKS",
    "FLIP_PAIRS_308", "KEYPOINT_NAMES_308", "NUM_KEYPOINTS_308",
]
