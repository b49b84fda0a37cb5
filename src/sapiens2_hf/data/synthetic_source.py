"""The procedural synthetic humans (`sapiens2_hf.data.synthetic`) as a fine-tuning source.

A thin consumer of the synthetic schema and seed rule: record ``i`` is the same render as row ``i`` of
``make_dataset(task, n, seed=s)`` and sample ``i`` of ``write_dataset(..., seed=s)`` at the same size and settings,
renamed and reshaped lazily into the record each task transform reads, as the task's entry of the data-layer registry
says (`sapiens2_hf.data.tasks.DATA_TASKS[task].synthetic_record`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .synthetic import SyntheticHumans, sample_seed, sample_to_row
from .tasks import DATA_TASKS, data_task, synthetic_record


# Re-draws of a render that shows nobody (`sample_seed`'s `attempt`); one is needed about once in 1000 samples.
_MAX_ATTEMPTS = 10


class SyntheticRecords(Sequence):
    """`num_samples` synthetic records of `task`, rendered on first access (and cached): record ``i`` renders
    ``sample_seed(seed, i)`` (re-drawn with an `attempt` when it shows nobody) with the task's
    `DataTaskSpec.synthetic_people` (pose: one, the dense tasks the generator's default mix of 1-4).

    `task` is one of `sapiens2_hf.data.tasks.DATA_TASKS`; `height` x `width` the rendered size; `cache=False` keeps
    no rendered record in memory.
    """

    def __init__(self, task: str, num_samples: int, seed: int = 0, height: int = 256, width: int = 192,
                 cache: bool = True):
        if task not in DATA_TASKS:
            raise ValueError(f"Unknown task {task!r}; synthetic records exist for {', '.join(DATA_TASKS)}.")
        self.task, self.num_samples, self.seed = task, int(num_samples), int(seed)
        self.height, self.width = int(height), int(width)
        self.humans = SyntheticHumans(height=self.height, width=self.width,
                                      num_people=data_task(task).synthetic_people)
        self._cache: dict[int, dict] | None = {} if cache else None

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        if self._cache is not None and index in self._cache:
            return self._cache[index]
        for attempt in range(_MAX_ATTEMPTS):
            row = sample_to_row(self.humans.sample(sample_seed(self.seed, index, attempt)), "all", index)
            if int(row["num_people"]) > 0 and row["mask"].any():
                break
        else:
            raise RuntimeError(f"Synthetic sample {index} (seed {self.seed}, {self.height}x{self.width}) rendered no "
                               f"visible person in {_MAX_ATTEMPTS} tries; use another seed or a larger image size.")
        record = synthetic_record(self.task, row)
        if self._cache is not None:
            self._cache[index] = record
        return record

