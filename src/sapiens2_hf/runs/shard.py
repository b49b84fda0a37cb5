"""Sharding over accelerate (layer 1): the one place that constructs accelerate's `PartialState`.

Under `accelerate launch` (or `torchrun`), which start N processes and set `WORLD_SIZE`, every process builds the
same ordered list of units (inputs, chunks) and takes its share: `Shard.split` (contiguous, accelerate's
`split_between_processes`) or `Shard.owns(k)` (round robin, for units known only while streaming). `Shard.wait` is
the barrier, `Shard.device` this process's device. A single-process run never imports accelerate. On a machine
without GPUs, `accelerate launch --multi_gpu --num_processes 2 ...` starts the processes (gloo on the CPU).
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Sequence

from ..utils.extras import require


def world_size() -> int:
    """Processes of this launch (`WORLD_SIZE`, set by accelerate launch / torchrun; 1 otherwise)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _cuda_available() -> bool:
    import torch  # heavy: only under a launch or for `auto`

    return torch.cuda.is_available()


class Shard:
    """This process's place in a launch: `index` of `count`, `is_main`, and how to split, wait and pick a device."""

    def __init__(self, device: str = "auto", feature: str = "multi-process runs"):
        self._state = None
        self.index, self.count, self.local_index = 0, 1, 0
        if world_size() > 1:
            PartialState = require("accelerate", feature=feature).PartialState
            cpu = device == "cpu" or (device == "auto" and not _cuda_available())
            # a long timeout: the processes meet only at the end, after shares that may take hours and differ in
            # length; a crashed process ends the launch through the launcher, not through this timeout
            self._state = PartialState(cpu=cpu, timeout=datetime.timedelta(days=7))
            self.index, self.count = self._state.process_index, self._state.num_processes
            self.local_index = self._state.local_process_index
        self.is_main = self.index == 0

    def split(self, units: Sequence[Any]) -> list[Any]:
        """This process's contiguous share of `units` (the same order on every process; no gaps, no overlap)."""
        if self._state is None:
            return list(units)
        with self._state.split_between_processes(list(units)) as share:
            return list(share)

    def owns(self, number: int) -> bool:
        """Whether unit `number` of a stream is this process's (round robin)."""
        return number % self.count == self.index

    def wait(self) -> None:
        if self._state is not None:
            self._state.wait_for_everyone()

    def device(self, requested: str) -> str:
        """The device of this process: `auto` is CUDA when available (this process's GPU under a launch), else the
        CPU; a bare `cuda` becomes this process's GPU."""
        if requested == "auto":
            requested = "cuda" if _cuda_available() else "cpu"
        if requested == "cuda" and self.count > 1:
            return f"cuda:{self.local_index}"
        return requested


__all__ = ["Shard", "world_size"]
