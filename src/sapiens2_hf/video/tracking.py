# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""People tracking for top-down pose on video: IoU matching of detections to tracks, boxes carried between
detections by the tracks' own keypoints.

The detector runs every N frames. On those frames each detection is matched to the track whose current box overlaps
it most (greedy on IoU, best pair first, pairs below `iou_threshold` never matched): matched tracks keep their id and
take the detected box, unmatched detections start new tracks, unmatched tracks end. Between detections a track's box
follows the person: it is rebuilt from the keypoints found in the previous frame (`box_from_keypoints`).

Greedy rather than Hungarian (SORT) or ByteTrack (`supervision`): with a pose video's few people they agree except
near ties, and ByteTrack's strengths (low-score detections, per-frame motion models) do not apply when the detector
runs every N frames and the boxes in between come from the pose; `supervision` would be a dependency for ~30 lines.

Limit: IoU alone cannot tell apart two people whose boxes coincide (same size, crossing at the same depth); their
ids may swap there. People passing with partly overlapping boxes keep theirs (tests/test_cli_video.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torchvision import ops


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix `(len(a), len(b))` of xyxy boxes `a` `(N, 4)` and `b` `(M, 4)`: `torchvision.ops.box_iou`, with 0
    for empty boxes (where it divides 0 by 0)."""
    a = torch.as_tensor(np.asarray(a, np.float64).reshape(-1, 4))
    b = torch.as_tensor(np.asarray(b, np.float64).reshape(-1, 4))
    return torch.nan_to_num(ops.box_iou(a, b), nan=0.0).numpy()


def box_from_keypoints(keypoints: np.ndarray, scores: np.ndarray, threshold: float, image_size: tuple[int, int],
                       margin: float = 0.1, min_points: int = 3) -> np.ndarray | None:
    """The person box of one pose result, for the next frame: the extent of its keypoints scored above `threshold`,
    widened by `margin` of its size on each side (joints lie inside the silhouette: the top of the head and the
    outline of the limbs are outside them), clipped to the image `(height, width)`.

    Returns:
        `(4,)` float64 xyxy, or None when fewer than `min_points` keypoints are confident or the box is empty (the
        caller then keeps the previous box).
    """
    keypoints = np.asarray(keypoints, np.float64)
    confident = (np.asarray(scores) > threshold) & np.isfinite(keypoints).all(axis=1)
    if int(confident.sum()) < min_points:
        return None
    points = keypoints[confident]
    (x0, y0), (x1, y1) = points.min(axis=0), points.max(axis=0)
    pad_x, pad_y = margin * (x1 - x0), margin * (y1 - y0)
    height, width = image_size
    box = np.array([max(0.0, x0 - pad_x), max(0.0, y0 - pad_y), min(float(width), x1 + pad_x),
                    min(float(height), y1 + pad_y)])
    return box if box[2] - box[0] >= 1 and box[3] - box[1] >= 1 else None


@dataclass
class Track:
    """One tracked person: its id (1, 2, ... in order of appearance), current box (xyxy) and detection score."""

    track_id: int
    box: np.ndarray
    score: float


class IouTracker:
    """Track ids for detections (see the module docstring).

    Args:
        iou_threshold (`float`, defaults to 0.3): the least IoU for a detection to continue a track.
    """

    def __init__(self, iou_threshold: float = 0.3):
        if not 0.0 <= iou_threshold <= 1.0:
            raise ValueError(f"iou_threshold must be in [0, 1], got {iou_threshold}.")
        self.iou_threshold = float(iou_threshold)
        self.tracks: list[Track] = []
        self._next_id = 1

    def update(self, boxes: Sequence[Sequence[float]], scores: Sequence[float] | None = None) -> list[Track]:
        """Match one frame's detections; returns their tracks in the detections' order (and makes them the tracks
        carried to the next frames)."""
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
        scores = [1.0] * len(boxes) if scores is None else [float(s) for s in scores]
        if len(scores) != len(boxes):
            raise ValueError(f"{len(boxes)} boxes but {len(scores)} scores.")
        assigned: list[Track | None] = [None] * len(boxes)
        if self.tracks and len(boxes):
            iou = box_iou(np.stack([t.box for t in self.tracks]), boxes)
            # best pairs first; each track and each detection used once
            order = np.argsort(-iou, axis=None, kind="stable")
            used_tracks: set[int] = set()
            for flat in order:
                t, d = divmod(int(flat), len(boxes))
                if iou[t, d] < self.iou_threshold or iou[t, d] <= 0:
                    break
                if t in used_tracks or assigned[d] is not None:
                    continue
                used_tracks.add(t)
                track = self.tracks[t]
                track.box, track.score = boxes[d].copy(), scores[d]
                assigned[d] = track
        for d in range(len(boxes)):
            if assigned[d] is None:
                assigned[d] = Track(self._next_id, boxes[d].copy(), scores[d])
                self._next_id += 1
        self.tracks = [track for track in assigned if track is not None]
        return list(self.tracks)


__all__ = ["IouTracker", "Track", "box_from_keypoints", "box_iou"]
