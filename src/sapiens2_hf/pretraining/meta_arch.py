"""`Sapiens2ForPreTraining`: the Sapiens2 pretraining objective `L = L_MAE + lambda * L_CL` as one model.

Student: the Sapiens2 backbone (`model`), the MAE decoder (`mae_decoder`), the DINO CLS head (`cls_head`) and the
iBOT patch head (`patch_head`). Teacher (`teacher`): a copy of backbone and heads, updated only by an exponential
moving average of the student (`update_teacher`), never by gradients. The losses own their state (running centres).
One forward (`compute_losses`) runs the teacher on the full global views, the student once on the global views with
the masked patches removed (that pass feeds every loss), and the student on the local crops; docs/pretraining.md
("The model: one student pass serves every loss") walks through it.

Only the student backbone is exported (`save_backbone`), as a plain `Sapiens2Model` checkpoint. The module never
calls backward and never owns the training loop; `sapiens2_hf.pretraining.trainer` applies it.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput

from ..modeling import Sapiens2Model
from ..modeling.modeling_sapiens2_hf import ModuleLayoutSaveMixin
from .configuration_pretraining import Sapiens2PreTrainingConfig
from .ema import ema_update_, paired_parameters
from .heads import DinoProjectionHead
from .losses import DinoClsLoss, IbotPatchLoss, KoLeoLoss, MaeLoss, TeacherCentering
from .mae_decoder import Sapiens2MaeDecoder, check_masks
from .schedules import teacher_temperature


LOSS_NAMES = ("mae_loss", "cls_loss", "patch_loss", "koleo_loss")


@dataclass
class Sapiens2PreTrainingOutput(ModelOutput):
    r"""
    Output of [`Sapiens2ForPreTraining`]. Loss terms are unweighted; `loss` is their weighted sum (see
    `Sapiens2PreTrainingConfig`). A term whose weight is 0 is not computed and is `None`.

    Args:
        loss, mae_loss, cls_loss, patch_loss, koleo_loss (`torch.Tensor` of shape `()`): the total; the MSE of the
            masked patches' normalised pixels; the DINO (CLS) and iBOT (masked patches) cross-entropies in nats; the
            KoLeo regulariser, summed over the global views (DINOv2).
        reconstruction (`torch.Tensor` of shape `(batch_size, num_global_crops, num_masked, patch_h * patch_w * 3)`):
            the decoder's pixel predictions at the masked positions, in the order of `patch_mask_indices`; per-patch
            normalised values when `norm_pix_loss` (see `sapiens2_hf.pretraining.losses.mae_loss.unpatchify`).
        teacher_prototype_entropy (`torch.Tensor` of shape `()`, *optional*): entropy (nats) of the batch-mean
            teacher CLS prototype distribution, from the raw logits (before centering) at the current teacher
            temperature; its maximum is `log(cls_num_prototypes)`, a collapsed teacher gives ~0. `None` without a
            teacher term.
        teacher_temperature (`torch.Tensor` of shape `()`): the teacher temperature used at this step.
    """

    loss: torch.Tensor | None = None
    mae_loss: torch.Tensor | None = None
    cls_loss: torch.Tensor | None = None
    patch_loss: torch.Tensor | None = None
    koleo_loss: torch.Tensor | None = None
    reconstruction: torch.Tensor | None = None
    teacher_prototype_entropy: torch.Tensor | None = None
    teacher_temperature: torch.Tensor | None = None


def prototype_usage_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy (nats) of `mean_over_samples(softmax(logits / temperature))`.

    Args:
        logits (`torch.Tensor` of shape `(num_samples, num_prototypes)`)
    Returns:
        `torch.Tensor` of shape `()`, float32, in `[0, log(num_prototypes)]`.
    """
    usage = torch.softmax(logits.float() / temperature, dim=-1).mean(dim=0)
    return -(usage * torch.log(usage.clamp_min(1e-12))).sum()


class Sapiens2PreTrainingTeacher(nn.Module):
    """The EMA teacher: backbone and the two heads, same layout and parameter names as the student's."""

    def __init__(self, config: Sapiens2PreTrainingConfig):
        super().__init__()
        self.model = Sapiens2Model(config.backbone_config)
        self.cls_head = _build_head(config, config.cls_num_prototypes)
        self.patch_head = _build_head(config, config.patch_num_prototypes)


def _build_head(config: Sapiens2PreTrainingConfig, num_prototypes: int) -> DinoProjectionHead:
    return DinoProjectionHead(
        config.backbone_config.hidden_size,
        num_prototypes,
        hidden_size=config.head_hidden_size,
        bottleneck_size=config.head_bottleneck_size,
        num_layers=config.head_num_layers,
    )


def _view_major(tensor: torch.Tensor) -> torch.Tensor:
    """`(batch_size, num_views, ...)` -> `(num_views * batch_size, ...)`, view-major (all images of view 0 first)."""
    return tensor.transpose(0, 1).flatten(0, 1)


class Sapiens2ForPreTraining(ModuleLayoutSaveMixin, PreTrainedModel):
    """Sapiens2 backbone with the MAE + student-teacher pretraining objective (see the module docstring)."""

    config_class = Sapiens2PreTrainingConfig
    config: Sapiens2PreTrainingConfig
    base_model_prefix = "model"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_attention_backend = True
    _no_split_modules = ["Sapiens2Layer"]

    def __init__(self, config: Sapiens2PreTrainingConfig):
        super().__init__(config)
        backbone_config = config.backbone_config
        self.model = Sapiens2Model(backbone_config)
        self.mae_decoder = Sapiens2MaeDecoder(
            backbone_config,
            hidden_size=config.decoder_hidden_size,
            num_hidden_layers=config.decoder_num_hidden_layers,
            num_attention_heads=config.decoder_num_attention_heads,
            intermediate_size=config.decoder_intermediate_size,
        )
        self.cls_head = _build_head(config, config.cls_num_prototypes)
        self.patch_head = _build_head(config, config.patch_num_prototypes)
        self.teacher = Sapiens2PreTrainingTeacher(config)

        self.mae_loss = MaeLoss(backbone_config.patch_size_hw, norm_pix_loss=config.norm_pix_loss)
        centering = {
            "student_temp": config.student_temp,
            "centering": config.centering,
            "center_momentum": config.center_momentum,
            "sinkhorn_iterations": config.sinkhorn_iterations,
        }
        self.dino_cls_loss = DinoClsLoss(config.cls_num_prototypes, **centering)
        self.ibot_patch_loss = IbotPatchLoss(config.patch_num_prototypes, **centering)
        self.koleo_loss = KoLeoLoss()
        self.post_init()
        self.copy_student_to_teacher()
        self.freeze_teacher()

    def _init_weights(self, module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.trunc_normal_(module.weight, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, DinoProjectionHead):
            init.trunc_normal_(module.prototypes, std=std)
        elif isinstance(module, Sapiens2MaeDecoder):
            init.normal_(module.mask_token, std=std)
        elif isinstance(module, TeacherCentering):
            init.zeros_(module.center)
        elif "RMSNorm" in type(module).__name__:
            init.ones_(module.weight)

    # ---------------------------------------------------------------------------------------------------------- Teacher

    def _student_modules(self) -> nn.ModuleDict:
        """The student modules that have a teacher copy, under the teacher's names."""
        return nn.ModuleDict({"model": self.model, "cls_head": self.cls_head, "patch_head": self.patch_head})

    @torch.no_grad()
    def copy_student_to_teacher(self) -> None:
        """Sets the teacher to the student's current weights (the initial state of the EMA)."""
        student, teacher = paired_parameters(self._student_modules(), self.teacher)
        for student_param, teacher_param in zip(student, teacher):
            teacher_param.copy_(student_param)

    @torch.no_grad()
    def update_teacher(self, momentum: float) -> None:
        """One EMA step: `teacher <- momentum * teacher + (1 - momentum) * student` for the backbone and both heads.
        Call it once per optimizer step, after `optimizer.step()` (the pretraining trainer's callback does)."""
        student, teacher = paired_parameters(self._student_modules(), self.teacher)
        ema_update_(teacher, student, momentum)

    def freeze_teacher(self) -> None:
        """Teacher parameters never require gradients and the teacher always runs in eval mode (no RoPE coordinate
        augmentation, no drop-path). Re-applied after loading (transformers' loader builds fresh parameters) and
        on every `train()` call."""
        self.teacher.requires_grad_(False)
        self.teacher.eval()

    def train(self, mode: bool = True):
        super().train(mode)
        self.freeze_teacher()
        return self

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, then `freeze_teacher()`: the loader's fresh parameters would otherwise
        require gradients and an optimizer built from the loaded model would train the teacher."""
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        model.freeze_teacher()
        return loaded

    # ----------------------------------------------------------------------------------------------------------- Export

    def get_backbone(self, which: str = "student") -> Sapiens2Model:
        """The student backbone (default) or the teacher's (the EMA weights, which DINO reports as slightly better)."""
        if which not in ("student", "teacher"):
            raise ValueError(f"`which` must be 'student' or 'teacher', got {which!r}.")
        return self.model if which == "student" else self.teacher.model

    def save_backbone(self, save_directory, which: str = "student", **kwargs) -> None:
        """Saves one backbone as a plain `Sapiens2Model` checkpoint, which `Sapiens2Model.from_pretrained` and every
        task class' `from_backbone(save_directory, config=...)` load directly; `kwargs` go to `save_pretrained`."""
        self.get_backbone(which).save_pretrained(save_directory, **kwargs)

    @classmethod
    def from_backbone(cls, pretrained_backbone, config: Sapiens2PreTrainingConfig | None = None, **kwargs):
        """Starts (continued) pretraining from a backbone: an official pretrain file, an HF folder, or a
        `Sapiens2Model`. Student and teacher backbones get its weights; decoder and heads are new. `config` defaults
        to the real-scale defaults around the backbone's own config; `kwargs` go to `Sapiens2Model.from_pretrained`.
        """
        backbone = (
            pretrained_backbone
            if isinstance(pretrained_backbone, Sapiens2Model)
            else Sapiens2Model.from_pretrained(pretrained_backbone, **kwargs)
        )
        if config is None:
            config = Sapiens2PreTrainingConfig(backbone_config=backbone.config)
        own, theirs = backbone.config.to_dict(), config.backbone_config.to_dict()
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads_per_layer", "patch_size"):
            if own[key] != theirs[key]:
                raise ValueError(f"The backbone has {key}={own[key]} but the pretraining config asks for {theirs[key]}.")
        model = cls(config)
        model.model.load_state_dict(backbone.state_dict(), strict=True)
        model.copy_student_to_teacher()
        return model

    # ---------------------------------------------------------------------------------------------------------- Forward

    def _check_inputs(self, pixel_values, patch_keep_indices, patch_mask_indices, local_pixel_values) -> None:
        if pixel_values.ndim != 5:
            raise ValueError(
                "`pixel_values` must have shape (batch_size, num_global_crops, 3, height, width), got "
                f"{tuple(pixel_values.shape)}; MultiCropCollator builds it."
            )
        for name, indices in (("patch_keep_indices", patch_keep_indices), ("patch_mask_indices", patch_mask_indices)):
            if indices.ndim != 3 or indices.shape[:2] != pixel_values.shape[:2]:
                raise ValueError(
                    f"`{name}` must have shape (batch_size, num_global_crops, num) = ({pixel_values.shape[0]}, "
                    f"{pixel_values.shape[1]}, num), got {tuple(indices.shape)}."
                )
        if local_pixel_values is not None and (
            local_pixel_values.ndim != 5 or local_pixel_values.shape[0] != pixel_values.shape[0]
        ):
            raise ValueError(
                "`local_pixel_values` must have shape (batch_size, num_local_crops, 3, height, width) with the batch "
                f"size of `pixel_values`, got {tuple(local_pixel_values.shape)}."
            )

    def compute_losses(
        self,
        pixel_values: torch.Tensor,
        patch_keep_indices: torch.LongTensor,
        patch_mask_indices: torch.LongTensor,
        local_pixel_values: torch.Tensor | None = None,
        schedule_step: int | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The whole objective. Arguments as in `forward`.

        Returns:
            `(total, terms, extras)`: `total` of shape `()`; `terms` maps each computed name of `LOSS_NAMES` to its
            unweighted value of shape `()`; `extras` holds `reconstruction`, `teacher_temperature` and, with a
            teacher, `teacher_prototype_entropy` (see `Sapiens2PreTrainingOutput`).
        """
        # Legend: B batch, G global crops, L local crops, K kept / M masked patches per view, N = K + M,
        # P prefix tokens (CLS + registers), C backbone width, Kc / Kp prototypes (in the helpers too).
        self._check_inputs(pixel_values, patch_keep_indices, patch_mask_indices, local_pixel_values)
        config = self.config
        batch_size, num_global = pixel_values.shape[:2]
        grid_size = self.model._grid_size(pixel_values[:, 0])
        global_views = _view_major(pixel_values)  # (G*B, 3, H, W)
        keep = _view_major(patch_keep_indices).to(global_views.device)  # (G*B, K)
        mask = _view_major(patch_mask_indices).to(global_views.device)  # (G*B, M)
        check_masks(keep, mask, grid_size[0] * grid_size[1])
        temperature = teacher_temperature(0 if schedule_step is None else int(schedule_step), config)

        student_tokens = self.model(global_views, patch_keep_indices=keep).last_hidden_state  # (G*B, P+K, C)
        pixels, predicted_features = self.mae_decoder(student_tokens, keep, mask, grid_size)  # (G*B, M, ·)
        terms: dict[str, torch.Tensor] = {}
        extras: dict[str, torch.Tensor] = {
            "reconstruction": pixels.view(num_global, batch_size, *pixels.shape[1:]).transpose(0, 1),
            "teacher_temperature": torch.tensor(temperature, device=pixels.device),
        }
        if config.mae_loss_weight > 0:
            terms["mae_loss"] = self.mae_loss(pixels, global_views, mask)

        if config.uses_teacher:
            teacher_tokens, teacher_cls_logits = self._teacher_outputs(global_views)
            extras["teacher_prototype_entropy"] = prototype_usage_entropy(teacher_cls_logits, temperature)

            if config.cls_loss_weight > 0:
                terms["cls_loss"] = self._cls_loss(student_tokens, teacher_cls_logits, local_pixel_values, temperature,
                                                   num_global)
            if config.patch_loss_weight > 0:
                terms["patch_loss"] = self._patch_loss(teacher_tokens, predicted_features, mask, temperature)
            if config.koleo_loss_weight > 0:
                per_view_cls = student_tokens[:, 0].view(num_global, batch_size, -1)  # (G, B, C)
                terms["koleo_loss"] = torch.stack([self.koleo_loss(view) for view in per_view_cls]).sum()
        return self._weighted_total(terms), terms, extras

    @torch.no_grad()
    def _teacher_outputs(self, global_views):
        """The teacher's tokens `(G*B, P+N, C)` of the unmasked global views and its CLS logits `(G*B, Kc)`."""
        teacher_tokens = self.teacher.model(global_views).last_hidden_state
        return teacher_tokens, self.teacher.cls_head(teacher_tokens[:, 0])

    def _cls_loss(self, student_tokens, teacher_cls_logits, local_pixel_values, temperature, num_global):
        """DINO loss between the student's CLS of every view (masked globals, then locals) and the teacher's CLS of
        the global views; ``student_tokens`` `(G*B, P+K, C)`, ``teacher_cls_logits`` `(G*B, Kc)`."""
        batch_size = student_tokens.shape[0] // num_global
        student_cls = [student_tokens[:, 0]]  # (G*B, C): CLS of the masked global views
        num_local = 0
        if local_pixel_values is not None and local_pixel_values.shape[1] > 0:
            num_local = local_pixel_values.shape[1]
            student_cls.append(self.model(_view_major(local_pixel_values)).pooler_output)  # (L*B, C)
        student_cls_logits = self.cls_head(torch.cat(student_cls))  # ((G+L)*B, Kc)
        return self.dino_cls_loss(
            student_cls_logits.view(num_global + num_local, batch_size, -1),
            teacher_cls_logits.view(num_global, batch_size, -1),
            temperature,
        )

    def _patch_loss(self, teacher_tokens, predicted_features, mask, temperature):
        """iBOT loss between the student's predicted features and the teacher's tokens at the masked patches
        ``mask`` `(G*B, M)`; ``teacher_tokens`` `(G*B, P+N, C)`."""
        num_prefix = self.config.backbone_config.num_prefix_tokens
        with torch.no_grad():
            teacher_patches = teacher_tokens[:, num_prefix:].gather(
                1, mask[..., None].expand(-1, -1, teacher_tokens.shape[-1])
            )  # (G*B, M, C)
            teacher_patch_logits = self.teacher.patch_head(teacher_patches)  # (G*B, M, Kp)
        student_patch_logits = self.patch_head(predicted_features)  # (G*B, M, Kp)
        return self.ibot_patch_loss(student_patch_logits.flatten(0, 1), teacher_patch_logits.flatten(0, 1), temperature)

    def _weighted_total(self, terms: dict) -> torch.Tensor:
        """``mae_loss_weight * mae + contrastive_loss_weight * (the weighted cls, patch and KoLeo terms)``."""
        config = self.config
        contrastive = sum(
            getattr(config, f"{name}_weight") * terms[name]
            for name in ("cls_loss", "patch_loss", "koleo_loss")
            if name in terms
        )
        total = config.mae_loss_weight * terms.get("mae_loss", 0.0) + config.contrastive_loss_weight * contrastive
        if not isinstance(total, torch.Tensor):
            raise ValueError("Every loss weight is 0: nothing to train. Set mae_loss_weight or the contrastive weights.")
        return total

    def forward(self, pixel_values: torch.Tensor, patch_keep_indices: torch.LongTensor,
                patch_mask_indices: torch.LongTensor, local_pixel_values: torch.Tensor | None = None,
                schedule_step: int | None = None) -> Sapiens2PreTrainingOutput:
        r"""
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, num_global_crops, 3, height, width)`):
                normalised global views (official mean/std); height and width divisible by the patch size.
            patch_keep_indices (`torch.LongTensor` of shape `(batch_size, num_global_crops, num_kept)`):
                row-major indices of the patches the student sees in each global view.
            patch_mask_indices (`torch.LongTensor` of shape `(batch_size, num_global_crops, num_masked)`):
                the removed patches (MAE and iBOT targets); with `patch_keep_indices` a partition of the grid.
            local_pixel_values (`torch.Tensor` of shape `(batch_size, num_local_crops, 3, local_h, local_w)`, *optional*):
                normalised local crops (student only, DINO term only).
            schedule_step (`int`, *optional*): optimizer steps taken so far, for the teacher temperature warm-up;
                the pretraining trainer passes it. Default 0 (start of the warm-up).

        Returns:
            [`Sapiens2PreTrainingOutput`].
        """
        total, terms, extras = self.compute_losses(
            pixel_values, patch_keep_indices, patch_mask_indices, local_pixel_values, schedule_step
        )
        return Sapiens2PreTrainingOutput(loss=total, **terms, **extras)


__all__ = ["LOSS_NAMES", "Sapiens2ForPreTraining", "Sapiens2PreTrainingOutput", "prototype_usage_entropy"]
