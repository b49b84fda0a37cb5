"""The only place that changes transformers' registries (Auto classes, pipelines; `register`, idempotent). It imports
the model code: the package face imports it when it registers (at import, or at the first public name when the console
script deferred that, see `sapiens2_hf/__init__.py`)."""

from __future__ import annotations

import transformers
from transformers import AutoBackbone, AutoConfig, AutoImageProcessor, AutoModel, AutoModelForPreTraining

from .auto import drop_auto_class, own_auto_class
from .modeling import TASK_MODEL_CLASSES, Sapiens2Backbone, Sapiens2Config, Sapiens2Model, loading_sapiens2_hf
from .modeling.sapiens2_tasks import OFFICIAL_TASK_NAMES, TASK_SPECS
from .pipelines import register_pipeline, unregister_pipeline
from .pose3d.pipeline import COMPOSED_PIPELINES
from .pretraining import Sapiens2ForPreTraining, Sapiens2PreTrainingConfig
from .processing import Sapiens2HFImageProcessor
from .adapters import load_adapter_model

_registered = False
_registering = False


def task_auto_class(spec):
    """The Auto class a task model registers with: transformers' (the registry's `auto_class`), or ours
    (`TaskSpec.own_auto_class`, in `sapiens2_hf/auto.py`; made there on first use for a registered task)."""
    name = spec.own_auto_class
    return getattr(transformers, spec.auto_class) if name is None else own_auto_class(name, spec.title)


# Hub `pipeline_tag` (the registry's) -> the Auto class transformers' stock pipeline of that name loads its model with.
# Those pipelines work with our task classes and image processor (which has the post-processing they call).
_STANDARD_PIPELINE_AUTO_CLASSES = {
    "image-segmentation": "AutoModelForSemanticSegmentation",
    "depth-estimation": "AutoModelForDepthEstimation",
}


def register() -> None:
    """Registers our model type (`sapiens2_hf`) with transformers: config, Auto classes (AutoBackbone included, for
    UperNet and the like), image processor, pipelines, and the pretraining model. Idempotent.

    transformers' own `sapiens2` type is never touched: its Auto classes keep building transformers' classes for
    Meta's checkpoints (float32 RoPE). Our classes load those checkpoints too, with the official numerics, when asked
    by name (`Sapiens2ForSemanticSegmentation.from_pretrained`, `pipeline("sapiens2-segmentation", ...)`).
    """
    global _registering
    if _registered or _registering:  # re-entered by a public-name access of a module imported here
        return
    _registering = True
    try:
        _register()
    finally:
        _registering = False


def _register() -> None:
    global _registered
    AutoConfig.register(Sapiens2Config.model_type, Sapiens2Config, exist_ok=True)
    AutoModel.register(Sapiens2Config, Sapiens2Model, exist_ok=True)
    AutoBackbone.register(Sapiens2Config, Sapiens2Backbone, exist_ok=True)
    AutoImageProcessor.register(
        Sapiens2Config, image_processor_classes={"torchvision": Sapiens2HFImageProcessor}, exist_ok=True
    )
    for spec in TASK_SPECS.values():
        register_task_model(spec)
    loading_sapiens2_hf.adapter_loader = load_adapter_model  # `from_pretrained` of a LoRA adapter folder

    AutoConfig.register(Sapiens2PreTrainingConfig.model_type, Sapiens2PreTrainingConfig, exist_ok=True)
    AutoModelForPreTraining.register(Sapiens2PreTrainingConfig, Sapiens2ForPreTraining, exist_ok=True)
    _registered = True


def register_task_model(spec) -> None:
    """Registers one task's model class (`TASK_MODEL_CLASSES`) with its Auto class and its pipeline
    (`PIPELINE_CLASSES`) with transformers' pipeline registry. Idempotent."""
    model_class = TASK_MODEL_CLASSES[spec.name]
    task_auto_class(spec).register(Sapiens2Config, model_class, exist_ok=True)
    # transformers' stock pipeline of an official task's Hub tag (image-segmentation, depth-estimation) builds its
    # model with its own Auto class: our checkpoints then run there too.
    stock_auto_class = _STANDARD_PIPELINE_AUTO_CLASSES.get(spec.pipeline_tag)
    if stock_auto_class is not None and spec.name in OFFICIAL_TASK_NAMES:
        getattr(transformers, stock_auto_class).register(Sapiens2Config, model_class, exist_ok=True)
    register_pipeline(spec.name, model_class, {name: pipeline_class for name, (base, pipeline_class)
                                              in COMPOSED_PIPELINES.items() if base == spec.name})


def unregister_task_model(spec) -> None:
    """Undoes `register_task_model` for a task registered from outside the package."""
    unregister_pipeline(spec.name)
    name = spec.own_auto_class
    if name is not None:
        drop_auto_class(name)
    else:  # transformers' Auto class: its mapping's registered extras are the only way back (no public API)
        task_auto_class(spec)._model_mapping._extra_content.pop(Sapiens2Config, None)
