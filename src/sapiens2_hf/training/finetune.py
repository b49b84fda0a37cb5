"""`run_finetune`: everything `training_scripts/finetune.py` does, callable from Python and tests."""

from __future__ import annotations

import logging
from pathlib import Path

from transformers import TrainingArguments

from ..data.datasets import Sapiens2TaskDataset
from ..data.dense import (
    AlbedoTransform,
    NormalTransform,
    PointmapTransform,
    SegTransform,
    read_dense_folder,
    read_segmentation_folder,
)
from ..data.pose import PoseTransform, read_coco_keypoints
from ..modeling import Sapiens2Config, model_class_for_task, tiny_config
from .arguments import DataArguments, ModelArguments
from .lora import apply_lora, save_lora_adapter, trainable_parameter_count
from .optim import OFFICIAL_LAYER_DECAY, freeze_backbone
from .tasks import check_task
from .trainer import Sapiens2Trainer


logger = logging.getLogger(__name__)

TRANSFORMS = {"pose": PoseTransform, "seg": SegTransform, "normal": NormalTransform, "pointmap": PointmapTransform,
              "albedo": AlbedoTransform}


def build_model(model_args: ModelArguments):
    """The task model from `--model_name_or_path`, `--backbone_name_or_path` or `--preset` (exactly one)."""
    task = check_task(model_args.task)
    sources = [model_args.model_name_or_path, model_args.backbone_name_or_path, model_args.preset]
    if sum(source is not None for source in sources) != 1:
        raise ValueError("Pass exactly one of --model_name_or_path, --backbone_name_or_path or --preset.")
    model_class = model_class_for_task(task)
    if model_args.model_name_or_path is not None:
        return model_class.from_pretrained(model_args.model_name_or_path)
    if model_args.backbone_name_or_path is not None:
        return model_class.from_backbone(model_args.backbone_name_or_path, head_config=model_args.head_preset)
    if model_args.preset == "tiny":
        return model_class(tiny_config(task))
    return model_class(Sapiens2Config.from_preset(model_args.preset, task=task))


def build_records(data_args: DataArguments, task: str, split: str, seed: int) -> list[dict] | None:
    """Records of one split (`train` or `eval`) in the schema of the task transform."""
    images = getattr(data_args, f"{split}_images")
    targets = getattr(data_args, f"{split}_targets")
    masks = getattr(data_args, f"{split}_masks")
    if data_args.dataset == "synthetic":
        from ..data.synthetic_source import synthetic_records

        count = data_args.synthetic_train_samples if split == "train" else data_args.synthetic_eval_samples
        if count <= 0:
            return None
        return synthetic_records(task, count, seed=seed + (0 if split == "train" else 1_000_003),
                                 image_size=data_args.synthetic_image_size)
    if targets is None:
        if split == "train":
            raise ValueError(f"--dataset {data_args.dataset} needs --train_targets (and --train_images).")
        return None
    if data_args.dataset == "coco":
        if task != "pose":
            raise ValueError("--dataset coco is for pose; use --dataset folder for the dense tasks.")
        return read_coco_keypoints(targets, images, keypoint_layout=data_args.keypoint_layout, skip_crowd=True)
    if data_args.dataset == "folder":
        if images is None:
            raise ValueError(f"--dataset folder needs --{split}_images.")
        if task == "seg":
            return read_segmentation_folder(images, targets)
        if task == "pose":
            raise ValueError("Pose data is read from COCO keypoint JSON: use --dataset coco.")
        return read_dense_folder(images, targets, task, masks)
    raise ValueError(f"Unknown --dataset {data_args.dataset!r}; use synthetic, coco or folder.")


def run_finetune(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments):
    """Build the model, data, LoRA / freezing and the `Sapiens2Trainer`, train, evaluate and save.

    Returns:
        `tuple[Sapiens2Trainer, dict]`: the trainer and the final evaluation metrics (empty without eval data).
    """
    task = check_task(model_args.task)
    # Bounded-memory evaluation accumulates per-batch statistics; every batch key is needed.
    training_args.batch_eval_metrics = True
    training_args.remove_unused_columns = False
    model = build_model(model_args)
    config = model.config
    input_size = (data_args.input_height or config.image_size[0], data_args.input_width or config.image_size[1])
    layer_decay = model_args.layer_decay_rate
    if layer_decay is None:
        layer_decay = OFFICIAL_LAYER_DECAY.get(getattr(config, "variant", None) or "")
    if model_args.freeze_backbone or model_args.freeze_backbone_layers is not None:
        freeze_backbone(model, None if model_args.freeze_backbone else model_args.freeze_backbone_layers)
    if model_args.use_lora:
        model = apply_lora(model, task, rank=model_args.lora_rank, alpha=model_args.lora_alpha,
                           dropout=model_args.lora_dropout, include_mlp=model_args.lora_include_mlp)
    trainable, total = trainable_parameter_count(model)
    logger.info("Trainable parameters: %d of %d (%.2f %%)", trainable, total, 100 * trainable / total)

    seed = training_args.seed + data_args.data_seed_offset
    transform = TRANSFORMS[task]
    train_records = build_records(data_args, task, "train", seed)
    eval_records = build_records(data_args, task, "eval", seed)
    train_dataset = Sapiens2TaskDataset(train_records, transform(input_size, train=data_args.augment), seed=seed)
    eval_dataset = None
    if eval_records:
        eval_dataset = Sapiens2TaskDataset(eval_records, transform(input_size, train=False), seed=seed)
    trainer = Sapiens2Trainer(model=model, args=training_args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                              task=task, layer_decay_rate=layer_decay, official_schedule=model_args.official_schedule,
                              pose_flip_test=model_args.pose_flip_test)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    metrics = trainer.evaluate() if eval_dataset is not None else {}
    if trainer.is_world_process_zero():
        output_dir = Path(training_args.output_dir)
        if model_args.use_lora:
            save_lora_adapter(trainer.model, output_dir / "adapter")
        else:
            trainer.save_model(str(output_dir / "model"))
        if metrics:
            trainer.save_metrics("eval", metrics)
    return trainer, metrics
