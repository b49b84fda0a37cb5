"""sapiens2_hf: Sapiens2 human-centric vision models, first-class in the Hugging Face ecosystem."""

from . import _registration
from .auto import AutoModelForAlbedoEstimation
from .modeling import (
    HEAD_PRESETS,
    TASKS,
    VARIANTS,
    Sapiens2AlbedoEstimatorOutput,
    Sapiens2Config,
    Sapiens2ForAlbedoEstimation,
    Sapiens2ForNormalEstimation,
    Sapiens2ForPointmapEstimation,
    Sapiens2ForPoseEstimation,
    Sapiens2ForSemanticSegmentation,
    Sapiens2HeadConfig,
    Sapiens2Model,
    Sapiens2PreTrainedModel,
    model_class_for_task,
    tiny_config,
)

from .pipeline_factory import pipeline

__version__ = "0.1.0"

_registration.register()
