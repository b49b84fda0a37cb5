"""Batch collation for the task datasets."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class Sapiens2DataCollator:
    """Stack the per-sample tensors of the task transforms into a batch.

    Every key is stacked along a new first dimension. Segmentation `labels` kept at their original resolution
    (evaluation) may differ in size: they are padded bottom/right with `ignore_index` to the largest one, and
    `label_size` keeps each sample's true `(height, width)`.
    """

    def __init__(self, ignore_index: int = 255):
        self.ignore_index = ignore_index

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("Cannot collate an empty list of examples.")
        batch = {}
        for key in examples[0]:
            values = [torch.as_tensor(example[key]) for example in examples]
            shapes = {tuple(v.shape) for v in values}
            if len(shapes) > 1:
                if key != "labels" or any(v.dim() != 2 for v in values):
                    raise ValueError(f"Cannot stack `{key}` of different shapes {sorted(shapes)} in one batch.")
                height = max(v.shape[0] for v in values)
                width = max(v.shape[1] for v in values)
                values = [F.pad(v, (0, width - v.shape[1], 0, height - v.shape[0]), value=self.ignore_index)
                          for v in values]
            batch[key] = torch.stack(values)
        return batch
