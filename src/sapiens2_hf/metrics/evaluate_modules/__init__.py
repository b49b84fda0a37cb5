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


EVALUATE_MODULES = {
    "pose": "sapiens2_pose",
    "seg": "sapiens2_seg",
    "normal": "sapiens2_normal",
    "pointmap": "sapiens2_pointmap",
    "albedo": "sapiens2_albedo",
}


def evaluate_module_path(task: str) -> str:
    """Local folder of the `evaluate` metric script for `task` (one of `pose`, `seg`, `normal`, `pointmap`,
    `albedo`); pass it to `evaluate.load`."""
    if task not in EVALUATE_MODULES:
        raise ValueError(f"Unknown task {task!r}; expected one of {sorted(EVALUATE_MODULES)}.")
    return str(Path(__file__).resolve().parent / EVALUATE_MODULES[task])
