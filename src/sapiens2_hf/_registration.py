"""The only place that changes transformers' registries (Auto classes, pipelines). Idempotent."""

_registered = False


def register() -> None:
    """Registers our model type with the Auto classes (without taking over transformers' own `sapiens2` type)."""
    global _registered
    if _registered:
        return
    from transformers import (
        AutoConfig,
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
    _registered = True
