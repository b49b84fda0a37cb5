"""Adding a task from your own code: `register_task` puts a new head on the Sapiens2 backbone into every surface the
official tasks have (config presets, model and Auto classes, `pipeline(...)`, the command line on images and videos,
the web app, fine-tuning with `training_scripts/finetune.py` or stock `Trainer`, evaluation, ONNX export and Hub
sharing), because each of them reads its per-task tables from the task registries at call time.

    from sapiens2_hf import TaskSpec, register_task

    register_task(TaskSpec(name="uv", ...), Sapiens2ForUVEstimation, data=DataTaskSpec(...),
                  training=TrainingTaskSpec(...))

tests/test_custom_task.py is the worked example (a 2-channel UV regression, every surface) and docs/ARCHITECTURE.md
describes each argument. A registration lives in its process: run it before building models, parsers or apps (for
the command line, in a script of yours that then calls `sapiens2_hf.cli.main.main(argv)`).
"""

from __future__ import annotations

from typing import Any

from . import _registration
from .modeling.sapiens2_tasks import (
    OFFICIAL_TASK_NAMES,
    TASK_NAMES,
    TASK_SPECS,
    TaskSpec,
    add_task_spec,
    remove_task_spec,
    task_spec,
)


def task_names() -> tuple[str, ...]:
    """Every registered task, the six official ones first."""
    return tuple(TASK_NAMES)


def register_task(
    spec: TaskSpec,
    model_class: type,
    *,
    data: Any = None,
    training: Any = None,
    outputs: Any = None,
    head_presets: dict[str, dict] | None = None,
    pipeline_class: type | None = None,
) -> None:
    """Registers a new task everywhere.

    Args:
        spec (`TaskSpec`): the layer-0 facts (name, model and output class names, output field, label count,
            pipeline name, resize policy, head layout kind, post-processing method, ...). For a dense map,
            `post_process="post_process_dense_maps"` and `resize="letterbox"` or `"stretch"` need no processor code.
        model_class: a `Sapiens2TaskModel` subclass named `spec.model_class`, with `task = spec.name`.
        data (`DataTaskSpec`, *optional*): how `datasets` columns and on-disk folders fill the task's records; needed
            to fine-tune from them.
        training (`TrainingTaskSpec`, *optional*): loss, transform (`LetterboxMapTransform.for_key(...)` serves a
            dense map), metrics; needed to fine-tune.
        outputs (`TaskOutputs`, *optional*): what the command line and the app write; default
            (`cli.outputs.dense_map_outputs`): each result map as `.npy` and the first one in colour.
        head_presets (`dict[str, dict]`, *optional*): head layouts per official size (`Sapiens2Config.from_preset(
            "1b", task=...)`), e.g. `HEAD_PRESETS["normal"]`; the tiny preset always exists.
        pipeline_class (*optional*): the pipeline; default `dense_map_pipeline_class(spec.name)`.

    Raises:
        ValueError: the name, pipeline name or class name is taken, the model class does not match the spec, or
            the spec's Auto class is transformers' and another task already registers with it.
    """
    from .modeling import HEAD_PRESETS, TASK_MODEL_CLASSES
    from .modeling.modeling_sapiens2_hf import Sapiens2TaskModel

    if spec.name in TASK_SPECS:
        raise ValueError(f"Task {spec.name!r} is already registered; pick another name (or unregister_task first).")
    if not (isinstance(model_class, type) and issubclass(model_class, Sapiens2TaskModel)):
        raise TypeError(f"model_class must be a Sapiens2TaskModel subclass, got {model_class!r}.")
    if model_class.__name__ != spec.model_class:
        raise ValueError(f"The model class is named {model_class.__name__!r} but the spec's model_class is "
                         f"{spec.model_class!r}; make them equal (config.json's `architectures` records it).")
    if getattr(model_class, "task", None) != spec.name:
        raise ValueError(f"{model_class.__name__} has task = {getattr(model_class, 'task', None)!r}, but the spec "
                         f"registers {spec.name!r}; set task = {spec.name!r} on the class.")
    if _registration.own_auto_class_name(spec) is None:
        users = [other.name for other in TASK_SPECS.values() if other.auto_class == spec.auto_class]
        if users:
            raise ValueError(f"{spec.auto_class} already builds the {users[0]!r} model from a Sapiens2 config; give "
                             'the task auto_class="AutoModel" (it gets an Auto class of its own).')
    add_task_spec(spec)
    try:
        TASK_MODEL_CLASSES[spec.name] = model_class
        HEAD_PRESETS[spec.name] = dict(head_presets or {})
        _register_pipeline_class(spec, pipeline_class)
        if data is not None:
            from .data.tasks import DATA_TASKS

            DATA_TASKS[spec.name] = data
        if training is not None:
            from .training.tasks import TRAINING_TASKS

            TRAINING_TASKS[spec.name] = training
        from .cli.outputs import dense_map_outputs, register_task_outputs

        register_task_outputs(spec.name, outputs if outputs is not None else dense_map_outputs(spec.name))
        _registration.register_task_model(spec)
    except BaseException:
        unregister_task(spec.name)
        raise


def _register_pipeline_class(spec: TaskSpec, pipeline_class: type | None) -> None:
    from .pipelines import PIPELINE_CLASSES, dense_map_pipeline_class

    PIPELINE_CLASSES[spec.pipeline_name] = pipeline_class or dense_map_pipeline_class(spec.name)


def unregister_task(name: str) -> None:
    """Removes a task added by `register_task` from every registry (the official tasks stay)."""
    import sys

    if name in OFFICIAL_TASK_NAMES:
        raise ValueError(f"{name!r} is an official task; only tasks added with register_task are removed.")
    spec = task_spec(name)
    _registration.unregister_task_model(spec)
    from .cli.outputs import TASK_OUTPUTS
    from .modeling import HEAD_PRESETS, TASK_MODEL_CLASSES

    for table in (TASK_MODEL_CLASSES, HEAD_PRESETS, TASK_OUTPUTS):
        table.pop(name, None)
    for module, table in (("sapiens2_hf.data.tasks", "DATA_TASKS"), ("sapiens2_hf.training.tasks", "TRAINING_TASKS")):
        if module in sys.modules:
            getattr(sys.modules[module], table).pop(name, None)
    remove_task_spec(name)


__all__ = ["TaskSpec", "register_task", "task_names", "task_spec", "unregister_task"]
