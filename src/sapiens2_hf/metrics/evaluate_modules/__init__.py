"""`evaluate`-compatible metric scripts, one folder per task, loadable offline from their local path:

    >>> import evaluate
    >>> from sapiens2_hf.metrics import evaluate_module_path
    >>> miou = evaluate.load(evaluate_module_path("seg"))
    >>> miou.compute(predictions=[pred_map], references=[label_map])

Each script wraps the streaming accumulator of the same task (`sapiens2_hf.metrics`), so both give identical
numbers. `evaluate` stores added batches in an Arrow cache on disk, not in memory.
"""

from __future__ import annotations

from pathlib import Path

from ...modeling.sapiens2_tasks import OFFICIAL_TASK_NAMES


#: Task -> folder (beside this file) of its metric script: `sapiens2_<task>` for every official task (a registered
#: task's metric runs in evaluation through its `TrainingTaskSpec.metrics`).
EVALUATE_MODULES = {task: f"sapiens2_{task}" for task in OFFICIAL_TASK_NAMES}


def evaluate_module_path(task: str) -> str:
    """Local folder of the `evaluate` metric script for `task` (a registry task: `pose`, `seg`, `normal`, `pointmap`,
    `albedo`); pass it to `evaluate.load`."""
    if task not in EVALUATE_MODULES:
        raise ValueError(f"Unknown task {task!r}; expected one of {sorted(EVALUATE_MODULES)}.")
    return str(Path(__file__).resolve().parent / EVALUATE_MODULES[task])
