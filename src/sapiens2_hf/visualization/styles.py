# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Official Sapiens2 drawing styles: keypoint / skeleton colours (308 keypoints) and the 29-class palette.

Generated from the project spec files `keypoints308.json` (official `sapiens/pose/configs/_base_/keypoints308.py`) and
`seg29.json` (official `DOME_CLASSES_29`), facebookresearch/sapiens2 @ 3098c14. Colours are RGB.
"""

from __future__ import annotations

import colorsys

# Class names have one home, the generated label data beside the models; re-exported here for drawing code.
from ..modeling.sapiens2_label_data import SEGMENTATION_CLASS_NAMES


def _runs(*runs: tuple[tuple[int, int, int], int]) -> tuple[tuple[int, int, int], ...]:
    """A colour table written as `(colour, count)` runs."""
    return tuple(colour for colour, count in runs for _ in range(count))


#: RGB colour of each of the 308 keypoints (channel order).
KEYPOINT_COLORS_RGB = _runs(
    ((51, 153, 255), 70), ((255, 255, 255), 26), ((192, 64, 128), 24), ((64, 32, 192), 24), ((64, 192, 128), 17),
    ((64, 192, 32), 17), ((0, 192, 0), 10), ((192, 0, 0), 16), ((0, 192, 192), 16), ((200, 200, 0), 26),
    ((0, 200, 200), 26), ((128, 192, 64), 9), ((192, 32, 64), 9), ((192, 128, 64), 9), ((32, 192, 192), 9),
)

#: Skeleton links as (keypoint index, keypoint index).
SKELETON_LINKS = (
    (13, 11), (11, 9), (14, 12), (12, 10), (9, 10), (5, 9), (6, 10), (5, 6), (5, 7), (6, 8), (7, 62), (8, 41), (1,
    2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6), (13, 15), (13, 16), (13, 17), (14, 18), (14, 19), (14, 20),
    (62, 45), (45, 44), (44, 43), (43, 42), (62, 49), (49, 48), (48, 47), (47, 46), (62, 53), (53, 52), (52, 51),
    (51, 50), (62, 57), (57, 56), (56, 55), (55, 54), (62, 61), (61, 60), (60, 59), (59, 58), (41, 24), (24, 23),
    (23, 22), (22, 21), (41, 28), (28, 27), (27, 26), (26, 25), (41, 32), (32, 31), (31, 30), (30, 29), (41, 36),
    (36, 35), (35, 34), (34, 33), (41, 40), (40, 39), (39, 38), (38, 37),
)

#: RGB colour of each skeleton link.
SKELETON_LINK_COLORS_RGB = _runs(
    ((0, 255, 0), 2), ((255, 128, 0), 2), ((51, 153, 255), 4), ((0, 255, 0), 1), ((255, 128, 0), 1), ((0, 255, 0), 1),
    ((255, 128, 0), 1), ((51, 153, 255), 7), ((0, 255, 0), 3), ((255, 128, 0), 7), ((255, 153, 255), 4),
    ((102, 178, 255), 4), ((255, 51, 51), 4), ((0, 255, 0), 4), ((255, 128, 0), 4), ((255, 153, 255), 4),
    ((102, 178, 255), 4), ((255, 51, 51), 4), ((0, 255, 0), 4),
)

#: RGB palette of the 29 classes.
SEGMENTATION_PALETTE_RGB = (
    (50, 50, 50), (255, 218, 0), (14, 204, 182), (128, 200, 255), (255, 0, 109), (189, 0, 204), (255, 0, 218), (0,
    160, 204), (0, 255, 145), (204, 0, 131), (182, 0, 255), (255, 109, 0), (0, 255, 255), (72, 0, 255), (204, 131,
    0), (255, 0, 0), (72, 255, 0), (189, 204, 0), (182, 255, 0), (102, 0, 204), (32, 72, 204), (0, 145, 255), (14,
    204, 0), (0, 128, 72), (235, 205, 119), (115, 227, 112), (157, 113, 143), (132, 93, 50), (82, 21, 114),
)


def class_palette(class_names) -> tuple[tuple[int, int, int], ...]:
    """A colour per class of a segmentation model's own classes: a class named like one of the 29 official ones
    (case and `-`/space/`_` ignored) keeps its official colour; the others get distinct hues (golden-ratio steps
    around the colour wheel, full saturation, bright), none of them black (which marks unknown ids)."""
    def key(name):
        return str(name).lower().replace("-", "_").replace(" ", "_")

    official = {key(name): colour for name, colour in zip(SEGMENTATION_CLASS_NAMES, SEGMENTATION_PALETTE_RGB)}
    palette, hue = [], 0.0
    for name in class_names:
        colour = official.get(key(name))
        if colour is None:
            hue = (hue + 0.618033988749895) % 1.0
            colour = tuple(int(round(c * 255)) for c in colorsys.hsv_to_rgb(hue, 0.85, 0.95))
        palette.append(tuple(colour))
    return tuple(palette)

