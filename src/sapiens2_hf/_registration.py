"""The only place that changes transformers' registries (Auto classes, pipelines). Idempotent."""

_registered = False


def register() -> None:
    """Registers our model type with the Auto classes (without taking over transformers' own `sapiens2` type)."""
    global _registered
    if _registered:
        return
    from transformers import (
        AutoConfig,
        AutoImageProcessor,
        AutoModelForPreTraining,
        AutoModel,
        AutoModelForNormalEstimation,
        AutoModelForPointmapEstimation,
        AutoModelForPoseEstimation,
        AutoModelForSemanticSegmentation,
    )

    from .modeling import (
        Sapiens2Config,
        Sapiens2ForNormalEstimation,
        Sapiens2ForPointmapEstimation,
        Sapiens2ForPoseEstimation,
        Sapiens2ForSemanticSegmentation,
        Sapiens2Model,
    )
    from .auto import AutoModelForAlbedoEstimation
    from .modeling import Sapiens2ForAlbedoEstimation

    AutoConfig.register(Sapiens2Config.model_type, Sapiens2Config, exist_ok=True)
    AutoModel.register(Sapiens2Config, Sapiens2Model, exist_ok=True)
    AutoModelForPoseEstimation.register(Sapiens2Config, Sapiens2ForPoseEstimation, exist_ok=True)
    AutoModelForSemanticSegmentation.register(Sapiens2Config, Sapiens2ForSemanticSegmentation, exist_ok=True)
    AutoModelForNormalEstimation.register(Sapiens2Config, Sapiens2ForNormalEstimation, exist_ok=True)
    AutoModelForPointmapEstimation.register(Sapiens2Config, Sapiens2ForPointmapEstimation, exist_ok=True)
    AutoModelForAlbedoEstimation.register(Sapiens2Config, Sapiens2ForAlbedoEstimation, exist_ok=True)

    from .pipelines import register_pipelines
    from .processing import Sapiens2HFImageProcessor

    AutoImageProcessor.register(
        Sapiens2Config, image_processor_classes={"torchvision": Sapiens2HFImageProcessor}, exist_ok=True
    )
    # Pipelines load checkpoints with our classes (exact official numerics), never transformers' own Sapiens2 ones.
    register_pipelines(
        {
            "pose": Sapiens2ForPoseEstimation,
            "seg": Sapiens2ForSemanticSegmentation,
            "normal": Sapiens2ForNormalEstimation,
            "pointmap": Sapiens2ForPointmapEstimation,
            "albedo": Sapiens2ForAlbedoEstimation,
        }
    )

    from .pretraining import Sapiens2ForPreTraining, Sapiens2PreTrainingConfig

    AutoConfig.register(Sapiens2PreTrainingConfig.model_type, Sapiens2PreTrainingConfig, exist_ok=True)
    AutoModelForPreTraining.register(Sapiens2PreTrainingConfig, Sapiens2ForPreTraining, exist_ok=True)
    _registered = True
