"""Sapiens2 pretraining: masked pixel reconstruction + DINOv3-style student-teacher objective (layer 2).

The model and its parts (this namespace), the objectives (`.losses`), the trainer (`.trainer`) and the run function
(`.run`, behind `training_scripts/pretrain.py`); the last two are not imported here, so that using the model does not
import `transformers.Trainer`. docs/pretraining.md has the design, the defaults' sources and the measured evidence.
"""

from .configuration_pretraining import Sapiens2PreTrainingConfig, tiny_pretraining_config
from .ema import ema_update_, paired_parameters
from .heads import DinoProjectionHead
from .mae_decoder import Sapiens2MaeDecoder, sincos_position_embedding_2d
from .masking import num_kept_patches, random_patch_masks
from .meta_arch import LOSS_NAMES, Sapiens2ForPreTraining, Sapiens2PreTrainingOutput, prototype_usage_entropy
from .multicrop import MultiCropAugmentation, MultiCropCollator, PretrainingImageDataset, example_seed
from .schedules import cosine_schedule, ema_momentum, linear_warmup, teacher_temperature


__all__ = ["LOSS_NAMES", "DinoProjectionHead", "MultiCropAugmentation", "MultiCropCollator", "PretrainingImageDataset",
           "Sapiens2ForPreTraining", "Sapiens2MaeDecoder", "Sapiens2PreTrainingConfig", "Sapiens2PreTrainingOutput",
           "cosine_schedule", "ema_momentum", "ema_update_", "example_seed", "linear_warmup", "num_kept_patches",
           "paired_parameters", "prototype_usage_entropy", "random_patch_masks", "sincos_position_embedding_2d",
           "teacher_temperature", "tiny_pretraining_config"]
