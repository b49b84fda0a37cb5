"""The one way the `evaluate` metric scripts (`evaluate_modules/sapiens2_<task>/`) are built: a description, inputs
and a compute function over the task's streaming accumulator, made into the `evaluate.Metric` class that
`evaluate.load(evaluate_module_path(task))` finds. Imported by those scripts only (the `train` extra).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..utils.extras import require


def feature(dtype: str, *lengths: int | None):
    """A `datasets` feature: a `dtype` value nested in one sequence per entry of `lengths` (outermost first; `None`
    for a variable length), e.g. `feature("float32", None, None, None)` for a list of `(3, H, W)` maps."""
    datasets = require("datasets", feature="the evaluate metrics")
    value = datasets.Value(dtype)
    for length in reversed(lengths):
        value = datasets.Sequence(value) if length is None else datasets.Sequence(value, length=length)
    return value


def evaluate_metric(class_name: str, description: str, inputs_description: str, features: dict,
                    compute: Callable[..., dict]) -> type:
    """An `evaluate.Metric` subclass named `class_name` that shows `description` and `inputs_description`, takes the
    `features` columns (name -> `feature(...)`) in `add_batch`, and whose `compute(**inputs)` is `compute(**inputs)`
    (the columns as lists, plus the metric's keyword options -> the figures)."""
    datasets, evaluate = require("datasets", "evaluate", feature="the evaluate metrics")

    def _info(self):
        return evaluate.MetricInfo(description=description, citation="", inputs_description=inputs_description,
                                   features=datasets.Features(features))

    def _compute(self, **inputs):
        return compute(**inputs)

    return type(class_name, (evaluate.Metric,), {"__doc__": description + inputs_description, "_info": _info,
                                                "_compute": _compute})


def per_sample_maps(accumulator: Callable[[], object], *columns: str) -> Callable[..., dict]:
    """A compute function that feeds each sample's maps (`columns`, in the accumulator's `update` order) to a fresh
    `accumulator()` as a batch of one, then returns its `compute()` (normal, pointmap, albedo)."""

    def compute(**inputs):
        metric = accumulator()
        for sample in zip(*(inputs[column] for column in columns)):
            metric.update(*(torch.as_tensor(value)[None] for value in sample))
        return metric.compute()

    return compute
