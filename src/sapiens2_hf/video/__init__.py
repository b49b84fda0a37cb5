# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Video building blocks (layer 2): PyAV streaming reader and atomic mp4 writer, IoU people tracking, temporal
filters in one home (`smoothing`: One-Euro for keypoints, flow-guided One-Euro for dense maps). `sapiens2-hf <task>
video.mp4` (sapiens2_hf.predict.video) puts them together."""

from .io import DEFAULT_FPS, Frame, VideoReader, VideoWriter, h264_available, write_video
from .smoothing import (
    DEFAULT_BETA,
    DEFAULT_D_CUTOFF,
    DEFAULT_MIN_CUTOFF,
    DenseResultFilter,
    FlowGuidedFilter,
    OneEuroFilter,
    trajectory_errors,
)
from .tracking import IouTracker, Track, box_from_keypoints, box_iou


__all__ = [
    "DEFAULT_BETA", "DEFAULT_D_CUTOFF", "DEFAULT_FPS", "DEFAULT_MIN_CUTOFF", "DenseResultFilter", "FlowGuidedFilter",
    "Frame", "IouTracker", "OneEuroFilter", "Track", "VideoReader", "VideoWriter", "box_from_keypoints", "box_iou",
    "h264_available", "trajectory_errors", "write_video",
]
