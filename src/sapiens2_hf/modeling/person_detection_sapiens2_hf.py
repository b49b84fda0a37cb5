# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Person boxes for top-down pose, as the official demo finds them: a detector passed in (a transformers
object-detection pipeline, or any callable with its output format), its person detections filtered by score and
de-duplicated by non-maximum suppression. The pose pipeline calls it for images given without boxes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .sapiens2_tasks import DEFAULT_DETECTOR  # noqa: F401 (the catalog's; re-exported for the pipelines)


def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> list[int]:
    """Greedy non-maximum suppression (highest score first, a box dropped when its IoU with a kept one is above
    `iou_threshold`); returns kept indices in score order, ties in input order.

    torchvision's C++ kernel does the work: about 200x faster than a Python loop at 10 boxes and 10,000x at 300
    (tests/test_library_backends.py). Its own score sort is not documented as stable, so the boxes are handed over
    already in stable score order with strictly decreasing stand-in scores: ties keep the input order everywhere.
    """
    from torchvision.ops import nms

    boxes = boxes.to(torch.float64 if boxes.dtype == torch.float64 else torch.float32)  # IoU in the boxes' precision
    order = torch.argsort(scores, descending=True, stable=True).to(boxes.device)
    rank = torch.arange(len(order), 0, -1, dtype=boxes.dtype, device=boxes.device)
    kept = nms(boxes[order], rank, float(iou_threshold))
    return order[kept].tolist()


def load_detector(name: str, device: Any = None):
    """A transformers object-detection pipeline for the model `name` (a folder or Hub id), or a one-line error that
    names `boxes=` and `detector=` as the ways around it."""
    from transformers import pipeline as make_pipeline

    try:
        return make_pipeline("object-detection", model=name, device=device)
    except (OSError, ValueError, ImportError) as error:
        # the loader's own words only as far as their first sentence: transformers' offline message runs
        # to several lines and a URL, which buried the fix
        reason = " ".join(str(error).split()).split(". ")[0][:160]
        message = (
            f"no person boxes were given and the person detector {name!r} could not be loaded "
            f"({type(error).__name__}: {reason}); pass boxes=[[x_min, y_min, x_max, y_max], ...] (CLI: "
            "--boxes FILE.json holding {\"photo.jpg\": [[x_min, y_min, x_max, y_max]]}, or --whole-image "
            "when the image is one person), or a detector available here (detector=<local folder or "
            "pipeline>; CLI: --detector FOLDER)."
        )
        raise (OSError(message) if isinstance(error, OSError) else ValueError(message)) from error


def detect_people(detector, image: np.ndarray, detector_threshold: float = 0.3, person_label: str = "person",
                  nms_threshold: float = 0.3, fallback_to_full_image: bool = True) -> tuple[list, list]:
    """One `(height, width, 3)` uint8 RGB image's person boxes `[x_min, y_min, x_max, y_max]` and scores, filtered
    as the official demo does: `person_label` detections above `detector_threshold`, usable boxes only, NMS at
    `nms_threshold`; none found, the whole image (score 0.0) when `fallback_to_full_image`, else no box."""
    from PIL import Image

    threshold = float(detector_threshold)
    person = str(person_label).lower()
    detections = detector(Image.fromarray(image), threshold=threshold)
    kept = [d for d in detections if str(d["label"]).lower() == person and float(d["score"]) > threshold]
    if kept:
        xyxy = torch.tensor([[d["box"]["xmin"], d["box"]["ymin"], d["box"]["xmax"], d["box"]["ymax"]]
                             for d in kept], dtype=torch.float32)
        score = torch.tensor([float(d["score"]) for d in kept], dtype=torch.float32)
        # a detector may return an empty (zero-width) box; it has no person to crop
        usable = (torch.isfinite(xyxy).all(dim=1) & (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
                  & (xyxy[:, 2] > 0) & (xyxy[:, 3] > 0) & (xyxy[:, 0] < image.shape[1])
                  & (xyxy[:, 1] < image.shape[0]))
        xyxy, score = xyxy[usable], score[usable]
        if len(xyxy):
            keep = _nms(xyxy, score, float(nms_threshold))
            return xyxy[keep].tolist(), score[keep].tolist()
    if fallback_to_full_image:
        return [[0.0, 0.0, float(image.shape[1]), float(image.shape[0])]], [0.0]
    return [], []
