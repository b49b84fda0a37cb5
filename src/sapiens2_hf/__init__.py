"""sapiens2_hf: Sapiens2 human-centric vision models, first-class in the Hugging Face ecosystem.

Importing the package registers our model type (`sapiens2_hf`), its classes, image processor and pipelines with
transformers (`_registration.register`), and nothing else: no import hooks, and transformers' own `sapiens2` entries
stay as they are. Its public names (`__all__`) and sub-packages are imported on first use (PEP 562 module
`__getattr__`).

One exception keeps `sapiens2-hf --help` instant: while the console script (`sapiens2_hf_cli.py`, outside this
package) runs the program, registration (and the torch and transformers imports it needs) waits for the first use of a
public name or of the model code; the CLI's commands get it that way. The console script's module says so itself
(`DEFERS_REGISTRATION`), in this process only: no environment variable, so child processes register as usual.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

from .modeling.sapiens2_tasks import OFFICIAL_TASK_NAMES, TASK_SPECS

__version__ = "0.1.0"


def _task_public_names() -> dict[str, str]:
    """The package's per-task public names, each with the sub-module defining it: every official task's model class,
    its output class when it is ours (`Sapiens2*`; seg returns transformers' `SemanticSegmenterOutput`), and our Auto
    class of every registered task transformers has none for (`TaskSpec.own_auto_class`). Torch-free (the catalog). A
    registered task's model and output classes live in the user's own code."""
    names = {}
    for spec in TASK_SPECS.values():
        if spec.name in OFFICIAL_TASK_NAMES:
            names[spec.model_class] = "modeling"
            if spec.output_class.startswith("Sapiens2"):
                names[spec.output_class] = "modeling.modeling_sapiens2_hf"
        if spec.own_auto_class is not None:
            names[spec.own_auto_class] = "auto"
    return names


# Public name -> sub-module defining it. The generic names are listed here; the per-task ones (model and output
# classes, our Auto classes) are derived from the task registry, read without importing torch (`_task_public_names`).
_GENERIC_NAMES = {
    "HEAD_PRESETS": "modeling",
    "TASKS": "modeling",
    "VARIANTS": "modeling",
    "Sapiens2Backbone": "modeling",
    "Sapiens2Config": "modeling",
    "Sapiens2HeadConfig": "modeling",
    "Sapiens2Model": "modeling",
    "Sapiens2PreTrainedModel": "modeling",
    "Sapiens2TaskModel": "modeling",
    "model_class_for_task": "modeling",
    "tiny_config": "modeling",
    "pipeline": "pipeline_factory",
    "prepare_for_inference": "inference_recipe",
    "to_json_compatible": "serialization",
    "image_from_json": "serialization",
    "TaskSpec": "tasks",
    "load_installed_tasks": "tasks",
    "register_task": "tasks",
    "task_names": "tasks",
    "task_spec": "tasks",
    "unregister_task": "tasks",
    "DataTaskSpec": "data.tasks",
    "TrainingTaskSpec": "training.tasks",
    "LetterboxMapTransform": "data.dense",
}
_LAZY_NAMES = {**_GENERIC_NAMES, **_task_public_names()}

__all__ = [*_LAZY_NAMES, "__version__"]

# For type checkers and IDEs only (at run time these are resolved by `__getattr__`): static analysis cannot follow the
# derived names, so the per-task ones are spelled out here too; tests/test_task_registry.py checks that these imports
# are exactly `_LAZY_NAMES`, and names the ones a new task must add.
if TYPE_CHECKING:
    from .auto import AutoModelForAlbedoEstimation
    from .data.dense import LetterboxMapTransform
    from .data.tasks import DataTaskSpec
    from .inference_recipe import prepare_for_inference
    from .modeling import (
        HEAD_PRESETS,
        TASKS,
        VARIANTS,
        Sapiens2Backbone,
        Sapiens2Config,
        Sapiens2ForAlbedoEstimation,
        Sapiens2ForImageMatting,
        Sapiens2ForNormalEstimation,
        Sapiens2ForPointmapEstimation,
        Sapiens2ForPoseEstimation,
        Sapiens2ForSemanticSegmentation,
        Sapiens2HeadConfig,
        Sapiens2Model,
        Sapiens2PreTrainedModel,
        Sapiens2TaskModel,
        model_class_for_task,
        tiny_config,
    )
    from .modeling.modeling_sapiens2_hf import (
        Sapiens2AlbedoEstimatorOutput,
        Sapiens2ImageMattingOutput,
        Sapiens2NormalEstimatorOutput,
        Sapiens2PointmapEstimatorOutput,
        Sapiens2PoseEstimatorOutput,
    )
    from .pipeline_factory import pipeline
    from .serialization import image_from_json, to_json_compatible
    from .tasks import TaskSpec, load_installed_tasks, register_task, task_names, task_spec, unregister_task
    from .training.tasks import TrainingTaskSpec


def __getattr__(name: str):
    """Imports a public name (or a sub-package, as `sapiens2_hf.processing`) on first access and caches it."""
    if name.startswith("_"):  # dunder probes (copy, pickle, pytest, inspect) must not import anything
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # a task registered after import (`register_task`) adds its Auto class: the registry is read again
    module = _LAZY_NAMES.get(name) or _task_public_names().get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":  # the sub-module exists but something it imports is missing
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    _register()  # a no-op unless the CLI deferred it
    if name in _LAZY_NAMES or module is None:  # not a registered task's name, which unregister_task takes back
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _register() -> None:
    """Registers with transformers (idempotent), importing the model code: the one import of the face that is not at
    its top, because the console script's deferral below must keep `sapiens2-hf --help` free of torch. A public name
    used while `_registration` itself is being imported waits: the code importing it registers once it is done."""
    importing = sys.modules.get(f"{__name__}._registration")
    if importing is not None and not hasattr(importing, "register"):
        return
    from ._registration import register

    register()


# The console script (see the module docstring) is the program: registration waits for the first public name.
if not getattr(sys.modules.get("sapiens2_hf_cli"), "DEFERS_REGISTRATION", False):
    _register()
