"""`Sapiens2PreTrainingTrainer`: transformers' Trainer for `Sapiens2ForPreTraining`, and its EMA callback.

What it adds to `transformers.Trainer`: `schedule_step` (the optimizer step, for the teacher temperature),
per-micro-batch mean terms (`loss_is_scaled_for_ga = False`), the teacher EMA and early prototype freezing per
optimizer step (`EmaTeacherCallback`), every term, the prototype entropy, temperature and momentum in the logs,
`set_epoch` per epoch (a resumed run sees the same views), `save_backbone`, and a default collator at the config's
`image_size`.

The teacher is part of the model's state dict, so checkpoints carry it and a resume restores it; its parameters
never require gradients (re-applied at load and on every `train()` call), so the optimizer never holds them.
"""

import math

import torch
from transformers import Trainer, TrainerCallback

from ..training.loss_logging import LossTermsLoggingMixin
from .meta_arch import LOSS_NAMES, Sapiens2ForPreTraining
from .multicrop import MultiCropCollator, check_crops_fit_config
from .schedules import ema_momentum, teacher_temperature


_LOGGED_EXTRAS = ("teacher_prototype_entropy",)


def _unwrap(model) -> Sapiens2ForPreTraining:
    while not isinstance(model, Sapiens2ForPreTraining) and hasattr(model, "module"):
        model = model.module
    if not isinstance(model, Sapiens2ForPreTraining):
        raise ValueError(f"Expected a Sapiens2ForPreTraining model, got {type(model).__name__}.")
    return model


class EmaTeacherCallback(TrainerCallback):
    """Applies the teacher EMA once per optimizer step and freezes the prototypes early in training.

    After optimizer step `k` (0-based, i.e. `state.global_step == k + 1` in `on_step_end`) the teacher moves by
    `teacher <- m_k * teacher + (1 - m_k) * student` with `m_k = ema_momentum(k, state.max_steps, config)`.

    `last_momentum` is the latest update's momentum, `num_updates` the updates this callback applied in this process.
    """

    def __init__(self):
        self.last_momentum: float | None = None
        self.num_updates = 0

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        pretraining_model = _unwrap(model)
        if state.global_step < pretraining_model.config.freeze_prototypes_steps:
            # DINO freezes the last layer early on, which stabilises training; a parameter without gradient is left
            # untouched by the optimizer (weight decay included).
            pretraining_model.cls_head.prototypes.grad = None
            pretraining_model.patch_head.prototypes.grad = None

    def on_step_end(self, args, state, control, model=None, **kwargs):
        pretraining_model = _unwrap(model)
        momentum = ema_momentum(state.global_step - 1, max(state.max_steps, 1), pretraining_model.config)
        pretraining_model.update_teacher(momentum)
        self.last_momentum = momentum
        self.num_updates += 1


class _DatasetEpochCallback(TrainerCallback):
    """Calls `train_dataset.set_epoch(epoch)` at each epoch start (accelerate does not reliably forward it to a
    map-style dataset)."""

    def __init__(self, trainer: "Sapiens2PreTrainingTrainer"):
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        dataset = self.trainer.train_dataset
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(math.floor(state.epoch + 1e-9))


class Sapiens2PreTrainingTrainer(LossTermsLoggingMixin, Trainer):
    """Trainer for [`Sapiens2ForPreTraining`] (see the module docstring), used like `transformers.Trainer` with a
    `PretrainingImageDataset`; `data_collator` defaults to `MultiCropCollator.from_config(model.config,
    seed=args.seed)`, and `remove_unused_columns` is off (the collator, not the model, consumes the columns).
    """

    def __init__(self, model=None, args=None, data_collator=None, *more, callbacks=None, **kwargs):
        config = _unwrap(model).config
        if data_collator is None:
            data_collator = MultiCropCollator.from_config(config, seed=getattr(args, "seed", 0))
        elif isinstance(data_collator, MultiCropCollator):
            check_crops_fit_config(data_collator.augmentation, config)
        self.ema_callback = EmaTeacherCallback()
        callbacks = [*(callbacks or []), self.ema_callback]
        super().__init__(model, args, data_collator, *more, callbacks=callbacks, **kwargs)
        # The dataloader is built at train time, so switching this off here is enough.
        self.args.remove_unused_columns = False
        self.add_callback(_DatasetEpochCallback(self))
        _unwrap(self.model).freeze_teacher()
        # Each term is a mean over its micro-batch: the Trainer must divide by the accumulation steps.
        self.loss_is_scaled_for_ga = False
        self.model_accepts_loss_kwargs = False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs, schedule_step=self.state.global_step)
        if model.training:
            self.record_loss_terms({name: getattr(outputs, name) for name in (*LOSS_NAMES, *_LOGGED_EXTRAS)})
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def extra_loss_logs(self) -> dict[str, float]:
        """The teacher temperature of the current step and the momentum of the latest EMA update."""
        extras = {"teacher_temperature": teacher_temperature(self.state.global_step, _unwrap(self.model).config)}
        if self.ema_callback.last_momentum is not None:
            extras["ema_momentum"] = self.ema_callback.last_momentum
        return extras

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """Evaluation returns the total loss only (no labels, no predictions)."""
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def save_backbone(self, output_dir: str, which: str = "student") -> None:
        """Exports the student (default) or teacher backbone as a plain `Sapiens2Model` checkpoint in `output_dir`.

        Collective under distributed training (the full state dict is gathered from every process), so call it on
        every process; only the main process writes.
        """
        model = _unwrap(self.model)
        prefix = "model." if which == "student" else "teacher.model."
        model.get_backbone(which)  # validates `which`
        state_dict = self.accelerator.get_state_dict(self.model)
        if self.args.should_save:
            backbone_state = {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}
            model.get_backbone(which).save_pretrained(output_dir, state_dict=backbone_state)
