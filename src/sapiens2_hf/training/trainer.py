"""`Sapiens2Trainer`: `transformers.Trainer` with the official task losses, per-term loss logging, correct gradient
accumulation, layer-wise learning-rate decay, the official schedule and bounded-memory evaluation."""

from __future__ import annotations

import os

import torch
from torch import nn
from transformers import Trainer

from ..data.collators import Sapiens2DataCollator
from ..data.keypoint_sets import KeypointSet
from ..data.label_tables import KEYPOINT_FLIP_INDICES
from ..hub.model_card import render_model_card
from .evaluation import TaskEvaluator, flip_test_heatmaps
from .loss_logging import LossTermsLoggingMixin
from .optim import official_schedule, parameter_groups
from .tasks import check_task, default_loss, task_loss, training_task


class Sapiens2Trainer(LossTermsLoggingMixin, Trainer):
    """Trainer for one Sapiens2 task.

    * **Loss**: the official task loss (`sapiens2_hf.losses`) on the model output; only `pixel_values` is passed to
      the model and the loss is applied here (the models' own `loss` from targets is the same one), so that each
      weighted term is logged next to `loss` (mean over the micro-batches since the last log, averaged across
      processes; `LossTermsLoggingMixin`). `loss_fn` replaces it.
    * **Gradient accumulation**: the task losses are per-micro-batch means, so the Trainer divides them by the number
      of accumulation steps (`loss_is_scaled_for_ga = False`). Without this, transformers treats any custom loss as
      already normalised over the accumulated batch and the gradients grow with the accumulation count.
    * **Optimiser**: AdamW groups with the official no-decay rule and, with `layer_decay_rate`, the official per-layer
      learning-rate multipliers; `official_schedule=True` uses the official warm-up (from 1e-3 x) and linear decay
      (warm-up length = `args.warmup_steps`).
    * **Evaluation**: `evaluator` (default `TaskEvaluator(task)`) turns every batch into fixed-size statistics that
      are gathered and accumulated (`args.batch_eval_metrics` must be true); for a task with the registry's
      `flip_test` (pose), `pose_flip_test` averages the heatmaps of the flipped crop, as the official validation does.

    `task` is a task of the training registry (`TRAINING_TASKS`); `layer_decay_rate` the official 0.8 / 0.85 / 0.9 /
    0.94 for 0.4b / 0.8b / 1b / 5b, `None` for none; `official_schedule=True` replaces `args.lr_scheduler_type`. Other
    arguments are those of `transformers.Trainer` (`data_collator` defaults to `Sapiens2DataCollator`).
    """

    def __init__(self, *args, task: str, loss_fn: nn.Module | None = None, evaluator: TaskEvaluator | None = None,
                 layer_decay_rate: float | None = None, official_schedule: bool = False, pose_flip_test: bool = True,
                 **kwargs):
        self.task = check_task(task)
        model = kwargs.get("model", args[0] if args else None)
        config = getattr(model, "config", None)
        self.loss_fn = loss_fn if loss_fn is not None else _model_loss(model, task)
        self.evaluator = evaluator if evaluator is not None else TaskEvaluator(task, config=config)
        # the flip test mirrors the model's own keypoint set; one without left/right pairs is not flip-tested
        self.flip_indices = KEYPOINT_FLIP_INDICES
        if training_task(task).flip_test and config is not None and getattr(config, "num_labels", None):
            self.flip_indices = KeypointSet.from_config(config).flip_indices()
        self.layer_decay_rate = layer_decay_rate
        self.use_official_schedule = official_schedule
        self.pose_flip_test = pose_flip_test
        kwargs.setdefault("data_collator", Sapiens2DataCollator())
        if kwargs.get("compute_metrics") is None:
            kwargs["compute_metrics"] = self.evaluator.compute_metrics
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if training_args is not None and kwargs["compute_metrics"] == self.evaluator.compute_metrics:
            if not training_args.batch_eval_metrics:
                raise ValueError(
                    "Sapiens2Trainer evaluates in bounded memory by accumulating per-batch statistics: set "
                    "`TrainingArguments(batch_eval_metrics=True)` (or pass your own `compute_metrics`)."
                )
        super().__init__(*args, **kwargs)
        self.loss_is_scaled_for_ga = False
        self.model_accepts_loss_kwargs = False  # no token counting: our losses are per-batch means

    # Every batch key is needed (targets and evaluation metadata): never drop "unused" columns.
    def _remove_unused_columns(self, dataset, description=None):
        return dataset

    def _get_collator_with_removed_columns(self, data_collator, description=None):
        return data_collator

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(pixel_values=inputs["pixel_values"])
        loss, terms = task_loss(self.task, self.loss_fn, outputs, inputs)
        if model.training:
            self.record_loss_terms(terms)
        return (loss, outputs) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss, outputs = self.compute_loss(model, inputs, return_outputs=True)
            heatmaps = None
            if training_task(self.task).flip_test and self.pose_flip_test and self.flip_indices is not None \
                    and not prediction_loss_only:
                heatmaps = flip_test_heatmaps(model, inputs["pixel_values"], outputs.heatmaps, self.flip_indices)
        loss = loss.detach()
        if prediction_loss_only:
            return loss, None, None
        statistics = self.evaluator.batch_statistics(outputs, inputs, heatmaps=heatmaps)
        # The statistics are the "predictions"; a per-sample placeholder stands in for the labels so that the
        # Trainer calls compute_metrics (the targets already went into the statistics).
        placeholder = torch.zeros(inputs["pixel_values"].shape[0], device=inputs["pixel_values"].device)
        return loss, statistics, placeholder

    def create_optimizer(self, model=None):
        if self.optimizer is not None:
            return self.optimizer
        opt_model = self.model if model is None else model
        num_layers = getattr(getattr(opt_model, "config", None), "num_hidden_layers", None)
        if num_layers is None and hasattr(opt_model, "get_base_model"):
            num_layers = opt_model.get_base_model().config.num_hidden_layers
        groups = parameter_groups(opt_model, self.args.learning_rate, self.args.weight_decay,
                                  self.layer_decay_rate, num_layers)
        for group in groups:
            group.pop("param_names")
            group.pop("lr_scale")
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
        optimizer_kwargs.pop("lr", None)
        self.optimizer = optimizer_cls(groups, lr=self.args.learning_rate, **optimizer_kwargs)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if not self.use_official_schedule:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            self.lr_scheduler = official_schedule(
                self.optimizer if optimizer is None else optimizer, num_training_steps,
                self.args.get_warmup_steps(num_training_steps),
            )
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def create_model_card(self, model_name: str | None = None, dataset: str | list[str] | None = None, **kwargs):
        """Writes the sapiens2_hf model card (task, labels, usage, the last evaluation metrics in the YAML
        model-index) to `output_dir/README.md`; `push_to_hub` uploads it with the weights."""
        if not self.is_world_process_zero():
            return
        model = self.model
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "rope_dtype"):  # e.g. a PEFT wrapper: its base model carries it
            config = model.get_base_model().config
        metrics = next(filter(None, map(card_metrics, reversed(self.state.log_history))), None)
        repo_id = self.args.hub_model_id or model_name or os.path.basename(os.path.abspath(self.args.output_dir))
        card = render_model_card(
            config,
            repo_id=repo_id if "/" in repo_id else f"<your-namespace>/{repo_id}",
            num_parameters=sum(p.numel() for p in model.parameters()),
            source=f"fine-tuned with sapiens2_hf.training.Sapiens2Trainer ({self.task})",
            datasets=[dataset] if isinstance(dataset, str) else dataset,
            eval_results=metrics,
            eval_dataset=(dataset if isinstance(dataset, str) else None) or "evaluation set",
        )
        card.save(os.path.join(self.args.output_dir, "README.md"))


def card_metrics(metrics: dict) -> dict[str, float] | None:
    """The `eval_*` figures of a metrics dict as a model card shows them (no loss or speed), or `None`."""
    skip = ("eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second")
    found = {k[len("eval_"):]: float(v) for k, v in metrics.items()
             if k.startswith("eval_") and k not in skip and isinstance(v, (int, float))}
    return found or None


def _model_loss(model, task: str) -> nn.Module:
    """The loss the model itself trains with from `labels` (its labels' settings: a segmentation model of other
    classes than the official 29 is unweighted, with its config's ignored label), else the task's official loss."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a LoRA (peft) wrapper
    if hasattr(base, "_loss_function"):
        return base._loss_function()
    return default_loss(task)
