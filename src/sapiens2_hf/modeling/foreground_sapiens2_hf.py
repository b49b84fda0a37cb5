# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Person-foreground masking of dense results by a segmenter passed in: the foreground is a `sapiens2-segmentation`
result's non-background labels (label > 0), as the official demos mask normals, pointmaps and albedo
(`processor.apply_foreground_mask(result["normals"], foreground_from_segmenter(segmenter, image),
channels_last=True)`); the normal, pointmap and albedo pipelines take `segmenter=` and run it on their own batches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


#: Prefix of the segmenter's own model inputs and outputs inside the dense pipelines' rows.
SEGMENTER_PREFIX = "segmenter."


def segmenter_part(row: dict) -> dict:
    """The segmenter's entries of a dense pipeline's row, under their own names."""
    return {key[len(SEGMENTER_PREFIX):]: value for key, value in row.items() if key.startswith(SEGMENTER_PREFIX)}


def foreground_from_segmenter(segmenter, image: Any) -> np.ndarray:
    """The `(height, width)` bool person foreground of `image` by a `sapiens2-segmentation` pipeline."""
    segmentation = np.asarray(segmenter(image)["segmentation"])
    return segmentation > 0


def load_segmenter(segmenter: Any, device: Any, pipeline_class: type, register=None):
    """A `sapiens2-segmentation` pipeline (`pipeline_class`) for `segmenter`: such a pipeline as it is, a Sapiens2
    segmentation model, or its folder / Hub id (loaded with transformers' `pipeline`, after `register()` when that
    task is not registered yet); a one-line error otherwise."""
    if isinstance(segmenter, pipeline_class):
        return segmenter
    if isinstance(segmenter, str) or hasattr(segmenter, "__fspath__"):
        from transformers import pipeline as make_pipeline
        from transformers.pipelines import PIPELINE_REGISTRY

        key = str(segmenter)
        if "sapiens2-segmentation" not in PIPELINE_REGISTRY.supported_tasks and register is not None:
            register()
        try:
            loaded = make_pipeline("sapiens2-segmentation", model=key, device=device)
        except (OSError, ValueError) as error:
            kind = OSError if isinstance(error, OSError) else ValueError
            raise kind(f"could not load the segmenter {key!r} as a sapiens2-segmentation model "
                       f"({type(error).__name__}: {error}); pass a Sapiens2 segmentation folder or Hub id, "
                       "model or pipeline.") from error
    elif isinstance(segmenter, torch.nn.Module) and hasattr(segmenter, "config"):
        key, loaded = id(segmenter), pipeline_class(model=segmenter, device=device)
    else:
        raise ValueError(f"segmenter of type {type(segmenter).__name__} is not usable; pass a "
                         "sapiens2-segmentation pipeline, a Sapiens2 segmentation model, or its folder / Hub id.")
    if not isinstance(loaded, pipeline_class):
        raise ValueError(f"the segmenter {key!r} loaded as a {type(loaded).__name__}, not a sapiens2-segmentation "
                         "pipeline.")
    return loaded
