"""Map-style datasets that apply a task transform on the fly with a per-sample `torch.Generator`.

A sample's augmentation is a pure function of `(seed, epoch, index)`, so two runs with the same seed see identical
data, a run resumed from a checkpoint sees the same augmentations as an uninterrupted one, and data-loader workers
need no shared RNG state. The Trainer (through accelerate) calls `set_epoch` at the start of every epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from .validation import SampleLoadError, sample_file


def sample_generator(seed: int, epoch: int, index: int, attempt: int = 0) -> torch.Generator:
    """A `torch.Generator` seeded from `(seed, epoch, index, attempt)` through numpy's `SeedSequence` (well mixed,
    platform independent)."""
    state = np.random.SeedSequence([int(seed), int(epoch), int(index), int(attempt)]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


class Sapiens2TaskDataset(Dataset):
    """Records (a list of dicts, a `datasets.Dataset`, or any indexable of dicts) plus a task transform.

    Args:
        source (`Sequence[dict]` or `datasets.Dataset`): One record per example, in the schema the transform reads
            (see `sapiens2_hf.data.pose`, `sapiens2_hf.data.dense` and `sapiens2_hf.data.synthetic_source`).
        transform (`Callable[[dict, torch.Generator], dict | None]`): Task transform; `None` means "drop this
            sample" (official rules such as too little foreground); another record is then drawn deterministically.
        seed, max_attempts: the per-sample generators' base seed; the draws before giving up on an index.
    """

    def __init__(self, source: Sequence[dict], transform: Callable, seed: int = 0, max_attempts: int = 20):
        self.source = source
        self.transform = transform
        self.seed = int(seed)
        self.epoch = 0
        self.max_attempts = int(max_attempts)

    def __len__(self) -> int:
        return len(self.source)

    def set_epoch(self, epoch: int) -> None:
        """Select the augmentation stream of `epoch` (called by accelerate's data loader each epoch)."""
        self.epoch = int(epoch)

    def __getitem__(self, index: int) -> dict:
        record_index = int(index)
        for attempt in range(self.max_attempts):
            generator = sample_generator(self.seed, self.epoch, index, attempt)
            record = self.source[record_index]
            try:
                example = self.transform(dict(record), generator)
            except Exception as error:
                # Decoders and transforms rarely say which file they were given; the message must, or one corrupt
                # file among millions cannot be found.
                raise SampleLoadError(
                    f"Could not load sample {record_index} ({sample_file(record) or 'in-memory record'}): "
                    f"{type(error).__name__}: {error}"
                ) from error
            if example is not None:
                return example
            record_index = int(torch.randint(len(self.source), (), generator=generator))
        raise RuntimeError(
            f"{self.max_attempts} consecutive samples starting at index {index} were rejected by "
            f"{type(self.transform).__name__} (e.g. too little foreground); check the data or the transform settings."
        )
