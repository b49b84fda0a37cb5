"""The only place that changes transformers' registries (Auto classes, pipelines). Idempotent."""

_registered = False


def _task_auto_class(spec):
    """The Auto class a task model registers with: transformers' (the registry's `auto_class`), or for a task
    transformers has none for (`auto_class` "AutoModel", e.g. albedo) ours of the same name pattern in
    `sapiens2_hf.auto` (`Sapiens2ForAlbedoEstimation` -> `AutoModelForAlbedoEstimation`)."""
    import transformers

    from . import auto

    if spec.auto_class != "AutoModel":
        return getattr(transformers, spec.auto_class)
    name = "AutoModelFor" + spec.model_class.removeprefix("Sapiens2For")
    if not hasattr(auto, name):
        raise ImportError(f"Task {spec.name!r} has no transformers Auto class; define `{name}` in sapiens2_hf/auto.py.")
    return getattr(auto, name)


# Hub `pipeline_tag` (the registry's) -> the Auto class transformers' stock pipeline of that name loads its model with.
# Those pipelines work with our task classes and image processor (which has the post-processing they call).
_STANDARD_PIPELINE_AUTO_CLASSES = {
    "image-segmentation": "AutoModelForSemanticSegmentation",
    "depth-estimation": "AutoModelForDepthEstimation",
}


def register() -> None:
    """Registers our model type with the Auto classes (without taking over transformers' own `sapiens2` type, except
    in `AutoBackbone` and the Auto classes of transformers' stock pipelines: see below)."""
    global _registered
    if _registered:
        return
    import transformers
    from transformers import AutoBackbone, AutoConfig, AutoImageProcessor, AutoModel, AutoModelForPreTraining
    from transformers import Sapiens2Config as TransformersSapiens2Config

    from .modeling import TASK_MODEL_CLASSES, Sapiens2Backbone, Sapiens2Config, Sapiens2Model
    from .modeling.sapiens2_tasks import TASK_SPECS

    AutoConfig.register(Sapiens2Config.model_type, Sapiens2Config, exist_ok=True)
    AutoModel.register(Sapiens2Config, Sapiens2Model, exist_ok=True)
    for spec in TASK_SPECS.values():
        _task_auto_class(spec).register(Sapiens2Config, TASK_MODEL_CLASSES[spec.name], exist_ok=True)
    # AutoBackbone, hence transformers' `load_backbone` (UperNet, DPT, ... given a Sapiens2 `backbone_config`), builds
    # our backbone for our config and also for transformers' own `sapiens2` one: a composite model saves its backbone
    # config with the `sapiens2` type (Sapiens2Config.to_dict), so without the second entry its reload would build
    # transformers' backbone (float32 RoPE, not the official numerics) instead of the one it was saved with.
    AutoBackbone.register(Sapiens2Config, Sapiens2Backbone, exist_ok=True)
    AutoBackbone.register(TransformersSapiens2Config, Sapiens2Backbone, exist_ok=True)
    # transformers' stock `pipeline("image-segmentation")` / `pipeline("depth-estimation")` build their model with
    # AutoModelForSemanticSegmentation / AutoModelForDepthEstimation from config.json, and our seg and pointmap
    # checkpoints are saved with transformers' `sapiens2` type (so that vanilla transformers loads them). Both Auto
    # classes therefore give our class for that type too: AutoModelForSemanticSegmentation then builds our seg class
    # (official bfloat16 RoPE) instead of transformers' for every `sapiens2` seg checkpoint, and
    # AutoModelForDepthEstimation (where transformers maps no `sapiens2` class) our pointmap class.
    for spec in TASK_SPECS.values():
        auto_name = _STANDARD_PIPELINE_AUTO_CLASSES.get(spec.pipeline_tag)
        if auto_name is None:
            continue
        auto_class = getattr(transformers, auto_name)
        for config_class in (Sapiens2Config, TransformersSapiens2Config) if spec.in_transformers else (Sapiens2Config,):
            auto_class.register(config_class, TASK_MODEL_CLASSES[spec.name], exist_ok=True)

    from .pipelines import register_pipelines
    from .processing import Sapiens2HFImageProcessor

    AutoImageProcessor.register(
        Sapiens2Config, image_processor_classes={"torchvision": Sapiens2HFImageProcessor}, exist_ok=True
    )
    # Pipelines load checkpoints with our classes (exact official numerics), never transformers' own Sapiens2 ones.
    register_pipelines({task: TASK_MODEL_CLASSES[task] for task in TASK_SPECS})

    from .pretraining import Sapiens2ForPreTraining, Sapiens2PreTrainingConfig

    AutoConfig.register(Sapiens2PreTrainingConfig.model_type, Sapiens2PreTrainingConfig, exist_ok=True)
    AutoModelForPreTraining.register(Sapiens2PreTrainingConfig, Sapiens2ForPreTraining, exist_ok=True)
    _registered = True
