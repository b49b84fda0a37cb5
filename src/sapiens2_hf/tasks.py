"""Adding a task from your own code: one task model class (a `Sapiens2TaskModel` subclass carrying its name, loss,
output class and `TaskSpec`) registered with `register_task` gets every surface the official tasks have (config
presets, model and Auto classes, `pipeline(...)`, the command line on images and videos, the web app, fine-tuning
with `training_scripts/finetune.py` or stock `Trainer`, evaluation, ONNX export and Hub sharing), because each of them
reads its per-task tables from the task registries at call time.

    class Sapiens2ForUVEstimation(Sapiens2TaskModel):
        task = "uv"
        loss_class = UVLoss
        output_class = Sapiens2UVEstimatorOutput
        spec = TaskSpec(num_labels=2, foreground_fill=0.0)
        ...

    register_task(Sapiens2ForUVEstimation, metric=UVMetric)

Each layer keeps its own facet of the task, keyed by its name, with defaults for a dense map: the data layer's
`DataTaskSpec`, the training layer's `TrainingTaskSpec`, the command line's and app's `predict.outputs.TaskOutputs`.
tests/test_custom_task.py is the worked example and docs/ARCHITECTURE.md describes each facet.

A package makes its tasks known without any code of the user's: it declares each in the entry-point group
`sapiens2_hf.tasks` (`uv = my_package.tasks:Sapiens2ForUVEstimation`, or a function that calls `register_task`), and
`sapiens2-hf`, the web app and `training_scripts/finetune.py` register them at start (`load_installed_tasks`).
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

from torch import nn
from transformers import Pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import ModelOutput

from ._registration import register_task_model, unregister_task_model
from .data.tasks import DATA_TASKS, DataTaskSpec
from .modeling import HEAD_PRESETS, TASK_MODEL_CLASSES
from .modeling.modeling_sapiens2_hf import Sapiens2TaskModel
from .modeling.sapiens2_tasks import (
    ENTRY_POINT_GROUP,
    OFFICIAL_TASK_NAMES,
    TASK_NAMES,
    TASK_SPECS,
    TaskSpec,
    add_task_spec,
    remove_task_spec,
    spec_of_class,
    task_spec,
)
from .pipelines import PIPELINE_CLASSES, dense_map_pipeline_class
from .pose3d.pipeline import COMPOSED_PIPELINES
from .processing import Sapiens2HFImageProcessor
from .training.tasks import TRAINING_TASKS, TrainingTaskSpec


def task_names() -> tuple[str, ...]:
    """Every registered task, the six official ones first."""
    return tuple(TASK_NAMES)


def register_task(
    model_class: type,
    *,
    metric: type | None = None,
    spec: TaskSpec | None = None,
    data: DataTaskSpec | None = None,
    training: TrainingTaskSpec | None = None,
    head_presets: dict[str, dict] | None = None,
    pipeline_class: type | None = None,
) -> None:
    """Registers a new task everywhere.

    Args:
        model_class: a `Sapiens2TaskModel` subclass with `task = "<name>"`, `loss_class`, `output_class` and a
            `spec` (`TaskSpec`) of the layer-0 facts that cannot be derived (`spec_of_class`).
        metric (*optional*): the task's streaming metric accumulator (`statistics`, `accumulate`, `compute`), for
            evaluation in fine-tuning; used by the default training facet.
        spec (`TaskSpec`, *optional*): the complete layer-0 facts instead of the class's (checked against it).
        data (`DataTaskSpec`, *optional*): how `datasets` columns and on-disk folders fill the task's records;
            default for a dense map `DataTaskSpec.dense_map(name)` (the column named after the task, a `mask`).
        training (`TrainingTaskSpec`, *optional*): loss, transform, metrics; default for a dense map
            `TrainingTaskSpec.dense_map(name, model_class.loss_class, metric)`.
        head_presets (`dict[str, dict]`, *optional*): head layouts per official size (`Sapiens2Config.from_preset(
            "1b", task=...)`), e.g. `HEAD_PRESETS["normal"]`; the tiny preset always exists.
        pipeline_class (*optional*): the pipeline; default `dense_map_pipeline_class(name)`.

    The command line's and app's outputs default to `predict.outputs.dense_map_outputs` (each result map as `.npy` and
    the first one in colour); `predict.outputs.register_task_outputs` sets others.

    Raises:
        ValueError: the name, pipeline name or class name is taken (a task, a `sapiens2-hf` command, a transformers
            or composed pipeline), the spec does not match the class, the spec's Auto class is transformers' and
            another task already registers with it, or the spec's post-processing method is not the processor's.
        TypeError: the loss, output, metric or pipeline class is not of its kind.
    """
    spec = _checked_spec(model_class, spec)
    _check_parts(spec, model_class, metric, pipeline_class)
    add_task_spec(spec)
    try:
        _fill_task_tables(spec, model_class, metric, data, training, head_presets, pipeline_class)
        register_task_model(spec)
    except BaseException:
        unregister_task(spec.name)
        raise


def _checked_spec(model_class: type, spec: TaskSpec | None) -> TaskSpec:
    """The task's spec (given, or the class's), after the checks against the class and the registered tasks."""
    if not (isinstance(model_class, type) and issubclass(model_class, Sapiens2TaskModel)):
        raise TypeError(f"model_class must be a Sapiens2TaskModel subclass, got {model_class!r}.")
    name = getattr(model_class, "task", None)
    if name in TASK_SPECS:
        raise ValueError(f"Task {name!r} is already registered; pick another name (or unregister_task first).")
    spec = spec or spec_of_class(model_class)
    if model_class.__name__ != spec.model_class:
        raise ValueError(f"The model class is named {model_class.__name__!r} but the spec's model_class is "
                         f"{spec.model_class!r}; make them equal (config.json's `architectures` records it).")
    if name != spec.name:
        raise ValueError(f"{model_class.__name__} has task = {name!r}, but the spec registers {spec.name!r}; set "
                         f"task = {spec.name!r} on the class.")
    if spec.own_auto_class is None:
        users = [other.name for other in TASK_SPECS.values() if other.auto_class == spec.auto_class]
        if users:
            raise ValueError(f"{spec.auto_class} already builds the {users[0]!r} model from a Sapiens2 config; give "
                             'the task auto_class="AutoModel" (it gets an Auto class of its own).')
    return spec


def _fill_task_tables(spec: TaskSpec, model_class: type, metric, data: DataTaskSpec | None,
                      training: TrainingTaskSpec | None, head_presets: dict[str, dict] | None,
                      pipeline_class: type | None) -> None:
    """The task's entries in the model, head-preset, pipeline, data and training tables."""
    TASK_MODEL_CLASSES[spec.name] = model_class
    HEAD_PRESETS[spec.name] = dict(head_presets or {})
    PIPELINE_CLASSES[spec.pipeline_name] = pipeline_class or dense_map_pipeline_class(spec.name)
    dense = spec.post_process == "post_process_dense_maps"
    if data is not None or dense:
        DATA_TASKS[spec.name] = data or DataTaskSpec.dense_map(spec.name)
    if training is not None or dense:
        TRAINING_TASKS[spec.name] = training or TrainingTaskSpec.dense_map(spec.name, model_class.loss_class, metric)


def _check_parts(spec: TaskSpec, model_class: type, metric, pipeline_class) -> None:
    """`register_task`'s checks of the pieces, before it registers anything."""
    taken = set(PIPELINE_REGISTRY.get_supported_tasks()) | set(COMPOSED_PIPELINES)
    if spec.pipeline_name in taken and spec.pipeline_name not in {other.pipeline_name for other in TASK_SPECS.values()}:
        raise ValueError(f"The pipeline name {spec.pipeline_name!r} of task {spec.name!r} is already a pipeline; "
                         "rename the task (or give its spec another pipeline_name).")
    if not callable(getattr(Sapiens2HFImageProcessor, spec.post_process, None)):
        methods = sorted(name for name in dir(Sapiens2HFImageProcessor) if name.startswith("post_process_"))
        raise ValueError(f"TaskSpec.post_process {spec.post_process!r} is no method of the image processor; one of "
                         f"{methods}.")
    loss_class = getattr(model_class, "loss_class", None)
    if not (isinstance(loss_class, type) and issubclass(loss_class, nn.Module)):
        raise TypeError(f"{model_class.__name__}.loss_class must be a torch.nn.Module subclass, got {loss_class!r}.")
    output_class = getattr(model_class, "output_class", None)
    if output_class is not None and not (isinstance(output_class, type) and issubclass(output_class, ModelOutput)):
        raise TypeError(f"{model_class.__name__}.output_class must be a transformers ModelOutput subclass, got "
                        f"{output_class!r}.")
    missing = [name for name in ("statistics", "accumulate", "compute") if not callable(getattr(metric, name, None))]
    if metric is not None and (not isinstance(metric, type) or missing):
        raise TypeError(f"metric must be a class with statistics, accumulate and compute methods, got {metric!r}"
                        + (f" (it lacks {', '.join(missing)})." if missing else "."))
    if pipeline_class is not None and not (isinstance(pipeline_class, type) and issubclass(pipeline_class, Pipeline)):
        raise TypeError(f"pipeline_class must be a transformers Pipeline subclass, got {pipeline_class!r}.")


def unregister_task(name: str) -> None:
    """Removes a task added by `register_task` from every registry (the official tasks stay)."""
    if name in OFFICIAL_TASK_NAMES:
        raise ValueError(f"{name!r} is an official task; only tasks added with register_task are removed.")
    spec = task_spec(name)
    unregister_task_model(spec)
    for table in (TASK_MODEL_CLASSES, HEAD_PRESETS, DATA_TASKS, TRAINING_TASKS):
        table.pop(name, None)
    PIPELINE_CLASSES.pop(spec.pipeline_name, None)
    outputs = sys.modules.get("sapiens2_hf.predict.outputs")  # the command line's facet, set there if at all
    if outputs is not None:
        outputs.TASK_OUTPUTS.pop(name, None)
    remove_task_spec(name)


_loaded_entry_points: set[str] = set()


def load_installed_tasks() -> list[str]:
    """Registers the tasks that installed packages declare in the entry-point group `sapiens2_hf.tasks`, once per
    process: each entry point names a task model class (registered with the defaults of `register_task`) or a
    function that registers its task(s) itself. Returns the names of the entry points loaded now.

    Raises:
        ValueError: an entry point names a class whose `task` is not the entry point's name.
    """
    loaded = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.value in _loaded_entry_points:
            continue
        target = point.load()
        if isinstance(target, type):
            if getattr(target, "task", None) != point.name:
                raise ValueError(f"The entry point {point.name} = {point.value} of group {ENTRY_POINT_GROUP!r} names "
                                 f"a class with task = {getattr(target, 'task', None)!r}; name the entry point "
                                 "after the task.")
            if point.name not in TASK_SPECS:
                register_task(target)
        else:
            target()
        _loaded_entry_points.add(point.value)
        loaded.append(point.name)
    return loaded


__all__ = ["TaskSpec", "load_installed_tasks", "register_task", "task_names", "task_spec", "unregister_task"]
