"""`run_finetune`: everything `training_scripts/finetune.py` does, callable from Python and tests."""

from __future__ import annotations

import json
import logging
import os
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
from ..data.validation import describe_skipped, validate_records, write_skipped_samples
from ..modeling import HEAD_PRESETS, VARIANTS, Sapiens2Config, Sapiens2Model, model_class_for_task, tiny_config
from ..processing import image_processor_for_task
from .arguments import DataArguments, ModelArguments
from .lora import apply_lora, save_lora_adapter, trainable_parameter_count
from .optim import OFFICIAL_LAYER_DECAY, freeze_backbone
from .run_setup import resolve_resume_checkpoint, seed_run
from .tasks import check_task
from .trainer import Sapiens2Trainer


logger = logging.getLogger(__name__)

TRANSFORMS = {"pose": PoseTransform, "seg": SegTransform, "normal": NormalTransform, "pointmap": PointmapTransform,
              "albedo": AlbedoTransform}


# Models of no official size whose config holds only the native 1024x768 (an official-format file of a custom size
# carries no size entry, so its loader assumes the native one) train at 256x192 instead: the classic top-down crop,
# at which the official heatmap sigma is defined, and 16x fewer tokens. Official sizes keep their native size.
SMALL_MODEL_INPUT_SIZE = (256, 192)
_NATIVE_INPUT_SIZE = (1024, 768)


def choose_input_size(config: Sapiens2Config, input_height: int | None = None,
                      input_width: int | None = None) -> tuple[tuple[int, int], str | None]:
    """The training input `(height, width)` and, when it was not given, why this one (for the log).

    Default: the config's `image_size` (for a new model from a backbone: the backbone's), except that a model of no
    official size whose config holds only the native 1024x768 gets `SMALL_MODEL_INPUT_SIZE`.
    """
    config_size = tuple(config.image_size_hw)
    if input_height is not None and input_width is not None:
        return (int(input_height), int(input_width)), None
    if input_height is not None or input_width is not None:
        size = (input_height or config_size[0], input_width or config_size[1])
        return (int(size[0]), int(size[1])), f"the unset side from the model config's image_size {config_size}"
    if config.variant is None and config_size == _NATIVE_INPUT_SIZE:
        return SMALL_MODEL_INPUT_SIZE, (
            f"the model is not an official Sapiens2 size (hidden_size {config.hidden_size}, "
            f"{config.num_hidden_layers} layers) and its config only has the native {config_size[0]}x{config_size[1]}, "
            "which is slow and rarely what a custom size was trained at"
        )
    return config_size, f"the model config's image_size (variant {config.variant or 'custom'})"


def default_head_preset(task: str, backbone_config: Sapiens2Config) -> tuple[str, str | None]:
    """The head layout for a new task model on `backbone_config`, and a note when it is not the backbone's own.

    An official size with an official head for `task` gets that head. Anything else gets `"tiny"` when it is smaller
    than every official size (a tiny pretraining run), else the official head of the nearest hidden size.
    """
    presets = HEAD_PRESETS[task]
    if backbone_config.variant in presets:
        return backbone_config.variant, None
    hidden = backbone_config.hidden_size
    if hidden < min(arch["hidden_size"] for arch in VARIANTS.values()):
        preset = "tiny"
    else:
        sizes = {variant: VARIANTS[variant]["hidden_size"] for variant in presets if variant in VARIANTS}
        preset = min(sizes, key=lambda variant: (abs(sizes[variant] - hidden), len(variant), variant))
    note = (
        f"The backbone (variant {backbone_config.variant or 'custom'}, hidden_size {hidden}) has no official {task} "
        f"head: using the {preset!r} head layout. Choose another with --head_preset ('tiny' or one of "
        f"{sorted(presets)})."
    )
    return preset, note


def _head_config_from_flag(task: str, value: str):
    """`--head_preset` as what `from_backbone(head_config=...)` takes (a preset id, or a JSON head-config object)."""
    if value.lstrip().startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"--head_preset {value!r} is not valid JSON: {error}.") from error
    valid = ["tiny", *sorted(HEAD_PRESETS[task])]
    if value not in valid:
        raise ValueError(f"--head_preset {value!r} is not a {task} head layout; choose one of {valid} (or pass a JSON "
                         "head-config object).")
    return value


def build_model(model_args: ModelArguments, input_height: int | None = None, input_width: int | None = None):
    """The task model from `--model_name_or_path`, `--backbone_name_or_path` or `--preset` (exactly one), and its
    training input size (`choose_input_size`; a new model from a backbone is built for that size, so its saved
    config and processor describe it).

    Returns:
        `tuple[PreTrainedModel, tuple[int, int]]`: the model and the input `(height, width)`.
    """
    task = check_task(model_args.task)
    sources = [model_args.model_name_or_path, model_args.backbone_name_or_path, model_args.preset]
    if sum(source is not None for source in sources) != 1:
        raise ValueError("Pass exactly one of --model_name_or_path, --backbone_name_or_path or --preset.")
    if model_args.head_preset is not None and model_args.backbone_name_or_path is None:
        logger.warning("--head_preset only applies with --backbone_name_or_path; ignoring it.")
    model_class = model_class_for_task(task)
    if model_args.backbone_name_or_path is not None:
        backbone = Sapiens2Model.from_pretrained(model_args.backbone_name_or_path)
        input_size, reason = choose_input_size(backbone.config, input_height, input_width)
        _log_input_size(input_size, reason)
        backbone.config.image_size = list(input_size)  # the task config (and a pointmap scale branch) follow it
        if model_args.head_preset is not None:
            head_config = _head_config_from_flag(task, model_args.head_preset)
        else:
            head_config, note = default_head_preset(task, backbone.config)
            if note:
                logger.warning(note)
        return model_class.from_backbone(backbone, head_config=head_config), input_size
    if model_args.model_name_or_path is not None:
        model = model_class.from_pretrained(model_args.model_name_or_path)
    elif model_args.preset == "tiny":
        model = model_class(tiny_config(task))
    else:
        model = model_class(Sapiens2Config.from_preset(model_args.preset, task=task))
    input_size, reason = choose_input_size(model.config, input_height, input_width)
    _log_input_size(input_size, reason)
    return model, input_size


def _log_input_size(input_size: tuple[int, int], reason: str | None) -> None:
    if reason is None:
        logger.info("Fine-tuning at %dx%d (height x width).", *input_size)
        return
    logger.warning("Fine-tuning at %dx%d (height x width): %s. Pass --input_height H --input_width W to change it.",
                   input_size[0], input_size[1], reason)


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


def build_dataset(records, task: str, transform, seed: int, strict: bool, split: str, synthetic: bool):
    """`Sapiens2TaskDataset` of the records that pass the up-front checks (`sapiens2_hf.data.validation`), and the
    skipped ones. Synthetic records are valid by construction (checking them would render them all)."""
    skipped = []
    if not synthetic:
        records, skipped = validate_records(records, task, strict=strict, split=split)
        if not records:
            raise ValueError(f"No usable {split} record: {describe_skipped(skipped)}.")
    return Sapiens2TaskDataset(records, transform, seed=seed), skipped


def lora_base_name_or_path(model_args: ModelArguments, output_dir: Path) -> str:
    """What a LoRA adapter of this run is applied to, for its `adapter_config.json`: the backbone or model it started
    from (a local path made absolute, so the adapter loads from any working directory), or, for a random `--preset`
    model, the copy saved to `<output_dir>/base_model`."""
    source = model_args.backbone_name_or_path or model_args.model_name_or_path
    if source is None:
        return str((output_dir / "base_model").resolve())
    return os.path.abspath(source) if os.path.exists(source) else source


def run_finetune(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments):
    """Build the model, data, LoRA / freezing and the `Sapiens2Trainer`, train, evaluate and save.

    Returns:
        `tuple[Sapiens2Trainer, dict]`: the trainer and the final evaluation metrics (empty without eval data).
    """
    task = check_task(model_args.task)
    seed_run(training_args)
    resume_from = resolve_resume_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)
    # Bounded-memory evaluation accumulates per-batch statistics; every batch key is needed.
    training_args.batch_eval_metrics = True
    training_args.remove_unused_columns = False
    output_dir = Path(training_args.output_dir)
    model, input_size = build_model(model_args, data_args.input_height, data_args.input_width)
    config = model.config
    layer_decay = model_args.layer_decay_rate
    if layer_decay is None:
        layer_decay = OFFICIAL_LAYER_DECAY.get(getattr(config, "variant", None) or "")
    if model_args.freeze_backbone or model_args.freeze_backbone_layers is not None:
        freeze_backbone(model, None if model_args.freeze_backbone else model_args.freeze_backbone_layers)
    if model_args.use_lora:
        if model_args.preset is not None and training_args.should_save:
            model.save_pretrained(output_dir / "base_model")  # the random base the adapter is trained on
        model = apply_lora(model, task, rank=model_args.lora_rank, alpha=model_args.lora_alpha,
                           dropout=model_args.lora_dropout, include_mlp=model_args.lora_include_mlp)
    trainable, total = trainable_parameter_count(model)
    logger.info("Trainable parameters: %d of %d (%.2f %%)", trainable, total, 100 * trainable / total)

    seed = training_args.seed + data_args.data_seed_offset
    transform = TRANSFORMS[task]
    synthetic = data_args.dataset == "synthetic"
    train_records = build_records(data_args, task, "train", seed)
    eval_records = build_records(data_args, task, "eval", seed)
    train_dataset, skipped = build_dataset(train_records, task, transform(input_size, train=data_args.augment), seed,
                                           data_args.strict, "train", synthetic)
    eval_dataset = None
    if eval_records:
        eval_dataset, eval_skipped = build_dataset(eval_records, task, transform(input_size, train=False), seed,
                                                   data_args.strict, "eval", synthetic)
        skipped += eval_skipped
    if not synthetic and training_args.should_save:
        path = write_skipped_samples(output_dir, skipped)
        if skipped:
            logger.warning("%s. The full list is in %s (pass --strict to stop at the first bad record instead).",
                           describe_skipped(skipped), path)
    trainer = Sapiens2Trainer(model=model, args=training_args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                              task=task, layer_decay_rate=layer_decay, official_schedule=model_args.official_schedule,
                              pose_flip_test=model_args.pose_flip_test)
    trainer.train(resume_from_checkpoint=resume_from)
    metrics = trainer.evaluate() if eval_dataset is not None else {}
    if trainer.is_world_process_zero():
        processor = image_processor_for_task(task, size={"height": input_size[0], "width": input_size[1]})
        if model_args.use_lora:
            save_lora_adapter(trainer.model, output_dir / "adapter",
                              base_model_name_or_path=lora_base_name_or_path(model_args, output_dir),
                              image_processor=processor, eval_results=_card_metrics(metrics))
        else:
            trainer.save_model(str(output_dir / "model"))
            processor.save_pretrained(output_dir / "model")
        if metrics:
            trainer.save_metrics("eval", metrics)
    return trainer, metrics


def _card_metrics(metrics: dict) -> dict[str, float] | None:
    skip = ("eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second", "epoch")
    found = {k[len("eval_"):]: float(v) for k, v in metrics.items()
             if k.startswith("eval_") and k not in skip and isinstance(v, (int, float))}
    return found or None
