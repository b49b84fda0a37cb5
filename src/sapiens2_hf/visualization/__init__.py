# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Visualisation of Sapiens2 predictions (layer 1): pure functions returning PIL images, plus atomic writers."""

from .drawing import (
    albedo_to_image,
    colorize_segmentation,
    depth_to_image,
    depth_to_rgb,
    draw_keypoints,
    enlarge,
    map_to_rgb,
    normals_to_rgb,
    overlay_segmentation,
    pointmap_to_depth_image,
    read_ply_header,
    save_ply,
    side_by_side,
)
from .io import save_image, save_json, save_npy
from .styles import (
    KEYPOINT_COLORS_RGB,
    SEGMENTATION_CLASS_NAMES,
    SEGMENTATION_PALETTE_RGB,
    SKELETON_LINK_COLORS_RGB,
    SKELETON_LINKS,
    class_palette,
)


__all__ = [
    "KEYPOINT_COLORS_RGB",
    "SEGMENTATION_CLASS_NAMES",
    "SEGMENTATION_PALETTE_RGB",
    "SKELETON_LINKS",
    "SKELETON_LINK_COLORS_RGB",
    "albedo_to_image",
    "class_palette",
    "colorize_segmentation",
    "depth_to_image",
    "depth_to_rgb",
    "draw_keypoints",
    "enlarge",
    "map_to_rgb",
    "normals_to_rgb",
    "overlay_segmentation",
    "pointmap_to_depth_image",
    "read_ply_header",
    "save_image",
    "save_json",
    "save_npy",
    "save_ply",
    "side_by_side",
]
