"""Configuration of `Sapiens2ForPreTraining`: a backbone `Sapiens2Config` plus the pretraining fields.

The official pretraining recipe is not released; only the objective's form `L = L_MAE + L_CL` is (project page), so
every default names its source: [MAE] He et al. 2021, [DINO] Caron et al. 2021, [DINOv2] Oquab et al. 2023 and its
`ssl_default_config.yaml` (DINOv3 keeps these unless noted), [PAGE] the Sapiens2 project page, [OURS] our choice
with its reason. docs/pretraining.md ("Defaults and their sources") has the full table.
"""

from huggingface_hub.dataclasses import strict
from transformers.configuration_utils import PreTrainedConfig

from ..modeling import Sapiens2Config, tiny_config
from .losses.centering import CENTERING_MODES


@strict
class Sapiens2PreTrainingConfig(PreTrainedConfig):
    r"""
    Configuration of [`Sapiens2ForPreTraining`]: the student backbone, MAE decoder, DINO CLS head, iBOT patch head,
    EMA teacher and loss weights. The total loss is

        loss = mae_loss_weight * mae_loss
               + contrastive_loss_weight * (cls_loss_weight * cls_loss + patch_loss_weight * patch_loss
                                            + koleo_loss_weight * koleo_loss)

    backbone_config (`Sapiens2Config`): the student (and teacher) backbone, `task=None`. Default: the 0.4b backbone.
    mask_ratio (0.75): fraction of each global view's patches removed before the student [MAE]; used by the collator.
    decoder_hidden_size, decoder_num_hidden_layers, decoder_num_attention_heads (512, 8, 16): the MAE decoder [MAE];
        decoder_intermediate_size: its SwiGLU size, default `4 * decoder_hidden_size` (the backbone's ratio) [OURS].
    norm_pix_loss (True): per-patch normalised pixel targets [MAE].
    head_hidden_size, head_bottleneck_size, head_num_layers (2048, 256, 3): the projection MLP of both heads;
        cls_num_prototypes, patch_num_prototypes (65536 each; separate heads) [DINOv2].
    student_temp (0.1), teacher_temp (0.07), warmup_teacher_temp (0.04 at step 0), teacher_temp_warmup_steps (37500
        optimizer steps, linear: DINOv2's 30 "epochs" of 1250 iterations) [DINO, DINOv2].
    centering (`"sinkhorn_knopp"` [DINOv2 large, DINOv3], `"centering"`: running centre [DINO], or `"none"`: collapses,
        for controls), center_momentum (0.9) [DINO], sinkhorn_iterations (3) [DINOv2, SwAV].
    ema_momentum (0.992 at the first optimizer step) to ema_momentum_end (1.0 at the last), cosine [DINO, DINOv2].
    mae_loss_weight (1.0), contrastive_loss_weight (lambda, 1.0: "L_mae + L_cl"; the paper's value is unknown) [PAGE];
        cls_loss_weight (1.0), patch_loss_weight (1.0), koleo_loss_weight (0.1) inside L_CL [DINOv2].
    freeze_prototypes_steps (1250): optimizer steps with the prototypes frozen, DINOv2's first "epoch"; the trainer
        applies it [DINOv2].
    initializer_range (0.02): std of the truncated-normal init of heads and decoder [MAE, DINO].

    A term whose weight is 0 is not computed (its parameters get no gradient: with DDP set
    `ddp_find_unused_parameters=True`); with `contrastive_loss_weight=0` the model is a plain MAE.
    """

    model_type = "sapiens2_hf_pretraining"

    backbone_config: Sapiens2Config | dict | None = None
    mask_ratio: float = 0.75
    decoder_hidden_size: int = 512
    decoder_num_hidden_layers: int = 8
    decoder_num_attention_heads: int = 16
    decoder_intermediate_size: int | None = None
    norm_pix_loss: bool = True
    head_hidden_size: int = 2048
    head_bottleneck_size: int = 256
    head_num_layers: int = 3
    cls_num_prototypes: int = 65536
    patch_num_prototypes: int = 65536
    student_temp: float = 0.1
    teacher_temp: float = 0.07
    warmup_teacher_temp: float = 0.04
    teacher_temp_warmup_steps: int = 37500
    centering: str = "sinkhorn_knopp"
    center_momentum: float = 0.9
    sinkhorn_iterations: int = 3
    ema_momentum: float = 0.992
    ema_momentum_end: float = 1.0
    mae_loss_weight: float = 1.0
    contrastive_loss_weight: float = 1.0
    cls_loss_weight: float = 1.0
    patch_loss_weight: float = 1.0
    koleo_loss_weight: float = 0.1
    freeze_prototypes_steps: int = 1250
    initializer_range: float = 0.02

    def __post_init__(self, **kwargs):
        # transformers resolves a dict `backbone_config` through its Auto mapping by `model_type`, which would give
        # its own Sapiens2Config (our backbone configs are written with transformers' model type); build ours here.
        if self.backbone_config is None:
            self.backbone_config = Sapiens2Config.from_preset("0.4b")
        elif isinstance(self.backbone_config, dict):
            self.backbone_config = Sapiens2Config.from_dict(self.backbone_config)
        if self.decoder_intermediate_size is None:
            self.decoder_intermediate_size = 4 * self.decoder_hidden_size
        super().__post_init__(**kwargs)
        # Checked here rather than in a `validate_*` method so that users get a plain ValueError.
        self._check_pretraining_fields()

    def _check_pretraining_fields(self):
        if not isinstance(self.backbone_config, Sapiens2Config):
            raise ValueError(
                f"`backbone_config` must be a sapiens2_hf Sapiens2Config, got {type(self.backbone_config).__name__}."
            )
        if self.backbone_config.task is not None:
            raise ValueError(
                f"The pretraining backbone must have task=None, got task={self.backbone_config.task!r}; pass the "
                "backbone's config (e.g. Sapiens2Config.from_preset(size))."
            )
        if not 0.0 < self.mask_ratio < 1.0:
            raise ValueError(f"`mask_ratio` must be in (0, 1), got {self.mask_ratio}.")
        if self.centering not in CENTERING_MODES:
            raise ValueError(f"`centering` must be one of {CENTERING_MODES}, got {self.centering!r}.")
        if self.decoder_hidden_size % self.decoder_num_attention_heads:
            raise ValueError(
                f"`decoder_hidden_size` ({self.decoder_hidden_size}) must be a multiple of "
                f"`decoder_num_attention_heads` ({self.decoder_num_attention_heads})."
            )
        if not 0.0 <= self.ema_momentum <= self.ema_momentum_end <= 1.0:
            raise ValueError(
                f"Need 0 <= ema_momentum ({self.ema_momentum}) <= ema_momentum_end ({self.ema_momentum_end}) <= 1."
            )
        if min(self.student_temp, self.teacher_temp, self.warmup_teacher_temp) <= 0:
            raise ValueError("Temperatures (student_temp, teacher_temp, warmup_teacher_temp) must be positive.")
        if self.head_num_layers < 1:
            raise ValueError(f"`head_num_layers` must be at least 1, got {self.head_num_layers}.")
        weights = ("mae_loss_weight", "contrastive_loss_weight", "cls_loss_weight", "patch_loss_weight", "koleo_loss_weight")
        for name in weights:
            if getattr(self, name) < 0:
                raise ValueError(f"`{name}` must be >= 0, got {getattr(self, name)}.")

    @property
    def uses_teacher(self) -> bool:
        """Whether any student-teacher term is computed (else the model is a plain MAE)."""
        return self.contrastive_loss_weight > 0 and (self.cls_loss_weight > 0 or self.patch_loss_weight > 0)

    @classmethod
    def from_preset(cls, variant: str, **kwargs) -> "Sapiens2PreTrainingConfig":
        """Real-scale pretraining configuration for an official backbone size (`"0.1b"`, `"0.4b"`, `"0.8b"`, `"1b"`,
        `"5b"`), with the defaults of this class, or `"tiny"` (`tiny_pretraining_config`); `kwargs` override
        pretraining fields."""
        if variant == "tiny":
            return tiny_pretraining_config(**kwargs)
        return cls(backbone_config=Sapiens2Config.from_preset(variant), **kwargs)


def tiny_pretraining_config(backbone_overrides: dict | None = None, **overrides) -> Sapiens2PreTrainingConfig:
    """A tiny configuration for tests and CPU smoke runs (`tiny_config`'s backbone, the sizes below);
    `backbone_overrides` go to `tiny_config`, `overrides` to this config."""
    backbone = tiny_config(**(backbone_overrides or {}))
    kwargs = {
        "backbone_config": backbone,
        "mask_ratio": 0.5,
        "decoder_hidden_size": 32,
        "decoder_num_hidden_layers": 1,
        "decoder_num_attention_heads": 4,
        "head_hidden_size": 64,
        "head_bottleneck_size": 32,
        "cls_num_prototypes": 32,
        "patch_num_prototypes": 32,
        "teacher_temp_warmup_steps": 10,
        "freeze_prototypes_steps": 0,
    }
    kwargs.update(overrides)
    return Sapiens2PreTrainingConfig(**kwargs)
