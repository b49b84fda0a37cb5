"""`run_finetune`: everything `training_scripts/finetune.py` does, callable from Python and tests."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from huggingface_hub import HfApi
from PIL import Image
from torch.utils.data import DataLoader
from transformers import TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..data.datasets import Sapiens2TaskDataset
from ..data.dense import read_dense_folder
from ..data.hf_datasets import (
    SYNTHETIC,
    load_dataset_dict,
    resolve_columns,
    subsample,
    synthetic_dataset_dict,
    take_validation_split,
    task_records,
)
from ..data.keypoint_sets import KeypointSet
from ..data.pose import check_coco_images_found, read_coco_keypoints
from ..data.tasks import is_top_down
from ..data.validation import NoUsableSamplesError, describe_skipped, validate_records, write_skipped_samples
from ..hub.model_card import is_hub_id
from ..hub.sharing import ship_pipeline, enable_remote_code
from ..modeling import HEAD_PRESETS, VARIANTS, Sapiens2Config, Sapiens2Model, model_class_for_task, tiny_config
from ..modeling.sapiens2_tasks import task_of_architecture, task_spec
from ..processing import image_processor_for_task
from ..utils.atomic_io import atomic_write_json
from .arguments import DataArguments, ModelArguments
from .label_sets import (
    check_model_keypoints,
    class_set_kwargs,
    is_official,
    pose_transform,
    requested_class_names,
    requested_keypoint_set,
    seg_transform,
)
from .lora import apply_lora, save_lora_adapter, trainable_parameter_count
from .optim import OFFICIAL_LAYER_DECAY, freeze_backbone
from .run_setup import hold_output_dir, prepare_output_dir, seed_run, with_skipped_list
from .tasks import check_task, training_task
from .trainer import Sapiens2Trainer, card_metrics
from .warm_start import warm_start_head


logger = logging.getLogger(__name__)

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
    """The head layout for a new task model on `backbone_config`, and a note when it is not the backbone's own: the
    official head of an official size, else `"tiny"` below every official size, else the nearest size's."""
    presets = HEAD_PRESETS.get(task, {})
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
    valid = ["tiny", *sorted(HEAD_PRESETS.get(task, {}))]
    if value not in valid:
        raise ValueError(f"--head_preset {value!r} is not a {task} head layout; choose one of {valid} (or pass a JSON "
                         "head-config object).")
    return value


def build_model(model_args: ModelArguments, input_height: int | None = None, input_width: int | None = None,
                label_kwargs: dict | None = None):
    """The task model from `--model_name_or_path`, `--backbone_name_or_path` or `--preset` (exactly one), and its
    training input `(height, width)` (`choose_input_size`; a model new from a backbone is built for it). `label_kwargs`
    (a keypoint set's `config_kwargs`) label a new model's head; a loaded model keeps its own."""
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
        config = model_class._task_config_for_backbone(backbone.config, head_config)
        for key, value in (label_kwargs or {}).items():
            setattr(config, key, value)
        return model_class.from_backbone(backbone, config=config), input_size
    if model_args.model_name_or_path is not None:
        model = model_class.from_pretrained(model_args.model_name_or_path)
    elif model_args.preset == "tiny":
        model = model_class(tiny_config(task, **(label_kwargs or {})))
    else:
        model = model_class(Sapiens2Config.from_preset(model_args.preset, task=task, **(label_kwargs or {})))
    input_size, reason = choose_input_size(model.config, input_height, input_width)
    _log_input_size(input_size, reason)
    return model, input_size


def _log_input_size(input_size: tuple[int, int], reason: str | None) -> None:
    if reason is None:
        logger.info("Fine-tuning at %dx%d (height x width).", *input_size)
        return
    logger.warning("Fine-tuning at %dx%d (height x width): %s. Pass --input_height H --input_width W to change it.",
                   input_size[0], input_size[1], reason)


# ------------------------------------------------------------------------------------------------------- stages
@dataclass(frozen=True)
class Stages:
    """What a run does (`resolve_stages`). `eval_optional`: evaluation runs only when there is evaluation data (the
    default run), instead of being an error without it."""

    train: bool
    eval: bool
    predict: bool
    eval_optional: bool = False


def resolve_stages(training_args: TrainingArguments, default_stages: bool | None = None) -> Stages:
    """The run's stages from transformers' `--do_train` / `--do_eval` / `--do_predict`.

    With `default_stages` (`None`: when none of the three is set) the run trains, then evaluates when there is
    evaluation data. Otherwise the three are followed as given (transformers turns `do_eval` on by itself with an
    `--eval_strategy` other than `no`), and a run with none of them is an error.
    """
    flags = (bool(training_args.do_train), bool(training_args.do_eval), bool(training_args.do_predict))
    if default_stages is None:
        default_stages = not any(flags)
    if default_stages:
        return Stages(train=True, eval=True, predict=False, eval_optional=True)
    if not any(flags):
        raise ValueError("Nothing to do: --do_train, --do_eval and --do_predict are all false; pass at least one.")
    return Stages(*flags)


# --------------------------------------------------------------------------------------------------------- data
_SPLITS = ("train", "eval", "test")
# Seed offsets of the synthetic evaluation and test renders (the training renders use the run's data seed).
_SYNTHETIC_SEED_OFFSETS = {"train": 0, "eval": 1_000_003, "test": 2_000_006}


def datasets_source(data_args: DataArguments) -> str | None:
    """What the run reads through `datasets`: `--dataset_name`, `imagefolder` for `--train_dir` & co. without one (as
    transformers' scripts), `synthetic` for `--dataset synthetic`; `None` for the on-disk readers of `--dataset coco`
    / `folder`."""
    name = data_args.dataset_name
    if name is None and any(getattr(data_args, f"{split}_dir") for split in ("train", "validation", "test")):
        name = "imagefolder"
    if name is not None:
        if data_args.dataset != SYNTHETIC:
            raise ValueError(f"Pass either --dataset_name (or --train_dir) or --dataset {data_args.dataset}, not both.")
        return name
    if data_args.dataset not in (SYNTHETIC, "coco", "folder"):
        raise ValueError(f"Unknown --dataset {data_args.dataset!r}; use synthetic, coco or folder (or --dataset_name).")
    return SYNTHETIC if data_args.dataset == SYNTHETIC else None


def build_records(data_args: DataArguments, task: str, split: str, seed: int,
                  keypoint_layout: str | None = None) -> list[dict] | None:
    """On-disk records of one split (`train`, `eval` or `test`) of `--dataset coco` / `folder`, in the schema of the
    task transform; `None` when the split is not given."""
    images = getattr(data_args, f"{split}_images")
    targets = getattr(data_args, f"{split}_targets")
    masks = getattr(data_args, f"{split}_masks")
    if targets is None:
        return None
    # top-down tasks (pose) read one record per person from COCO keypoint files, the others one folder per role
    if data_args.dataset == "coco":
        if not is_top_down(task):
            raise ValueError("--dataset coco is for pose; use --dataset folder for the dense tasks.")
        layout = keypoint_layout or data_args.keypoint_layout
        records = read_coco_keypoints(targets, images, keypoint_layout=layout, skip_crowd=True)
        check_coco_images_found(targets, images, records, images_option=f"--{split}_images")
        return records
    if data_args.dataset == "folder":
        if images is None:
            raise ValueError(f"--dataset folder needs --{split}_images.")
        if is_top_down(task):
            raise ValueError("Pose data is read from COCO keypoint JSON: use --dataset coco.")
        return read_dense_folder(images, targets, task, masks)
    raise ValueError(f"Unknown --dataset {data_args.dataset!r}; use synthetic, coco or folder.")


def load_hf_splits(data_args: DataArguments, source: str, task: str, seed: int,
                   wanted: Sequence[str]) -> tuple[dict, list[str]]:
    """The `datasets.Dataset` of each wanted split (`train`, `eval`, `test`) that the source has, and the names of
    all the source's splits (the synthetic humans: rendered with a seed per split; an evaluation split missing from
    another source is split off the training rows with `--train_val_split`)."""
    if source == SYNTHETIC:
        counts = {"train": data_args.synthetic_train_samples, "eval": data_args.synthetic_eval_samples,
                  "test": data_args.synthetic_test_samples}
        size = data_args.synthetic_image_size
        rendered = synthetic_dataset_dict(
            task, {split: (counts[split], seed + _SYNTHETIC_SEED_OFFSETS[split]) for split in wanted},
            height=size, width=int(round(size * 3 / 4)), cache_dir=data_args.cache_dir)
        return dict(rendered), list(rendered)
    loaded = load_dataset_dict(source, data_args.dataset_config_name, train_dir=data_args.train_dir,
                               validation_dir=data_args.validation_dir, test_dir=data_args.test_dir,
                               cache_dir=data_args.cache_dir)
    names = {"train": data_args.train_split_name, "eval": data_args.eval_split_name,
             "test": data_args.test_split_name}
    if "eval" in wanted:
        loaded = take_validation_split(loaded, names["eval"], names["train"], data_args.train_val_split, seed)
    return {split: loaded[names[split]] for split in wanted if names[split] in loaded}, list(loaded)


def _missing_split_error(data_args: DataArguments, source: str | None, split: str,
                         available: Sequence[str]) -> ValueError:
    stage = {"train": "--do_train", "eval": "--do_eval", "test": "--do_predict"}[split]
    what = {"train": "training", "eval": "evaluation", "test": "test"}[split]
    if source is not None:
        if source == SYNTHETIC:
            return ValueError(f"{stage} needs {what} data: set --synthetic_{split}_samples above 0.")
        flag = {"train": "--train_split_name", "eval": "--eval_split_name", "test": "--test_split_name"}[split]
        hint = " (or --train_val_split to split one off the training rows)" if split == "eval" else ""
        article = "an" if what == "evaluation" else "a"
        return ValueError(f"{stage} needs {article} {what} split, but {source} has only the splits "
                          f"{sorted(available)}: name one with {flag}{hint}.")
    return ValueError(f"{stage} needs {what} data: pass --{split}_targets (and --{split}_images).")


def build_task_datasets(data_args: DataArguments, task: str, input_size: tuple[int, int], seed: int,
                        stages: Stages, keypoint_set=None, config=None) -> tuple[dict[str, Sapiens2TaskDataset],
                                                                                list | None]:
    """The `Sapiens2TaskDataset` of each split the run's stages need, and the skipped records (`None` for the
    synthetic humans, valid by construction).

    Every source ends in the same records and task transform (the train split augmented unless `--augment false`), so
    `datasets` rows and the documented files give identical tensors. `--max_*_samples` keep a seeded subset. A pose
    model's `keypoint_set` (its config's) decides how keypoints are read (the official set: mapped into the 308 by
    `--keypoint_layout`; another: the data's own) and the transform's flips and body halves; a segmentation model's
    classes (its `config`) decide which classes swap under the flip, and `--do_reduce_labels` / `--ignore_index` apply.
    """
    wanted = [split for split, on in zip(_SPLITS, (stages.train, stages.eval, stages.predict)) if on]
    source = datasets_source(data_args)
    hf = source is not None
    splits, available = load_hf_splits(data_args, source, task, seed, wanted) if hf else ({}, [])
    limits = {"train": data_args.max_train_samples, "eval": data_args.max_eval_samples,
              "test": data_args.max_predict_samples}
    transform = training_task(task).transform
    layout, num_keypoints = data_args.keypoint_layout, None
    if is_top_down(task) and not is_official(keypoint_set):
        transform = pose_transform(transform, keypoint_set)
        layout, num_keypoints = "file", len(keypoint_set)
    elif training_task(task).prediction == "classes" and config is not None:
        transform = seg_transform(transform, config, data_args)
    built, skipped = {}, []
    for split in wanted:
        if hf and split in splits:
            rows = splits[split]
            records, bad = task_records(rows, task, _columns(data_args, task, rows), keypoint_layout=layout,
                                        strict=data_args.strict, split=split, num_keypoints=num_keypoints)
        else:
            records = None if hf else build_records(data_args, task, split, seed, keypoint_layout=layout)
            if records is None:
                if split == "eval" and stages.eval_optional:
                    continue
                raise _missing_split_error(data_args, source, split, available)
            records, bad = validate_records(records, task, strict=data_args.strict, split=split)
        skipped += bad
        if not len(records):
            detail = describe_skipped(bad) if bad else "the source is empty"
            raise NoUsableSamplesError(f"No usable {split} record: {detail}.", skipped)
        records = subsample(records, limits[split], seed)
        augment = split == "train" and data_args.augment
        built[split] = Sapiens2TaskDataset(records, transform(input_size, train=augment), seed=seed)
    return built, None if source == SYNTHETIC else skipped


def _columns(data_args: DataArguments, task: str, rows):
    return resolve_columns(
        task, rows.column_names, image=data_args.image_column_name, label=data_args.label_column_name,
        mask=data_args.mask_column_name, intrinsics=data_args.intrinsics_column_name,
        keypoints=data_args.keypoints_column_name, bboxes=data_args.bboxes_column_name,
        keypoint_visibility=data_args.keypoint_visibility_column_name, bbox_format=data_args.bbox_format)


def data_labels(data_args: DataArguments, task: str, seed: int, stages: Stages) -> dict | None:
    """The config fields of the labels the data asks a new head for (a keypoint set other than the official 308, or
    segmentation classes), read before the model is built; None: the official labels, or the model's own."""
    is_classes = training_task(task).prediction == "classes"
    if not (is_top_down(task) or is_classes):
        return None
    source = datasets_source(data_args)
    rows = columns = None
    # pose reads the first rows also for a named set: their keypoint count is checked against it before training
    needs_rows = is_top_down(task) or (data_args.class_names is None and not data_args.labels_file)
    if source is not None and source != SYNTHETIC and needs_rows:
        wanted = [split for split, on in zip(_SPLITS, (stages.train, stages.eval, stages.predict)) if on]
        splits, _ = load_hf_splits(data_args, source, task, seed, wanted)
        if splits:
            rows = next(iter(splits.values()))
            columns = _columns(data_args, task, rows)
    if is_classes:
        names = requested_class_names(data_args, rows, columns)
        return None if names is None else class_set_kwargs(names, data_args)
    wanted = requested_keypoint_set(data_args, rows, columns)
    return None if is_official(wanted) else wanted.config_kwargs()


def lora_base_name_or_path(model_args: ModelArguments, output_dir: Path) -> str:
    """What a LoRA adapter of this run is applied to, for its `adapter_config.json`: the backbone or model it started
    from (a local path made absolute, so the adapter loads from any working directory), or, for a random `--preset`
    model, the copy saved to `<output_dir>/base_model`."""
    source = model_args.backbone_name_or_path or model_args.model_name_or_path
    if source is None:
        return str((output_dir / "base_model").resolve())
    return os.path.abspath(source) if os.path.exists(source) else source


def warm_start(model, model_args: ModelArguments, task: str) -> None:
    """`--init_head_from`: the new head starts from the source model's head."""
    kind = training_task(task).prediction
    if kind not in ("keypoints", "classes"):
        raise ValueError(f"--init_head_from warm-starts pose and segmentation heads, not {task}.")
    if model_args.model_name_or_path is not None:
        raise ValueError("--init_head_from starts a new head: use it with --backbone_name_or_path or --preset (with "
                         "--model_name_or_path the model's own head trains on).")
    known, saved = _saved_task(model_args.init_head_from)
    if known and saved != task:
        raise ValueError(
            f"--init_head_from {model_args.init_head_from} is a model of task {saved!r}, but this run trains a "
            f"{task!r} head: pass a {task!r} model (its head is copied, channel by channel, by label name)."
        )
    report = warm_start_head(model, model_args.init_head_from, kind, model_args.label_map)
    logger.warning("Head warm-started from %s: %s.", model_args.init_head_from, report.summary())


def run_identity(model_args: ModelArguments, use_lora: bool) -> dict:
    """The arguments that define a fine-tuning run's weights, recorded in its `--output_dir` (`prepare_output_dir`):
    resuming that folder with others is refused."""
    def source(value):
        return os.path.abspath(value) if value is not None and os.path.exists(value) else value

    identity = {"entry_point": "finetune", "task": model_args.task,
                "model_name_or_path": source(model_args.model_name_or_path),
                "backbone_name_or_path": source(model_args.backbone_name_or_path), "preset": model_args.preset,
                "head_preset": model_args.head_preset, "init_head_from": source(model_args.init_head_from),
                "label_map": model_args.label_map, "freeze_backbone": model_args.freeze_backbone,
                "freeze_backbone_layers": model_args.freeze_backbone_layers, "use_lora": use_lora}
    if use_lora:
        identity.update(lora_rank=model_args.lora_rank, lora_alpha=model_args.lora_alpha,
                        lora_include_mlp=model_args.lora_include_mlp)
    return identity


# ------------------------------------------------------------------------------------------------------ the run
def run_finetune(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments,
                 default_stages: bool | None = None):
    """Build the model, data, LoRA / freezing and the `Sapiens2Trainer`; train, evaluate and predict as
    `--do_train` / `--do_eval` / `--do_predict` say (`resolve_stages`); save the final model into `output_dir` and
    push it with `--push_to_hub`.

    `output_dir` ends as a model repository (`finalize_output_dir`) beside transformers' run files, which
    `pipeline(..., model=output_dir)` loads; a run that neither trains nor pushes saves nothing, one that saves follows
    the run-folder rule first (`prepare_output_dir`), and the run holds `output_dir` throughout (`hold_output_dir`).
    Returns `(trainer, metrics)`: the final `eval_*` and `predict_*` metrics, empty when neither ran.
    """
    task = check_task(model_args.task)
    stages = resolve_stages(training_args, default_stages)
    with hold_output_dir(training_args):
        return _run_finetune(model_args, data_args, training_args, task, stages)


def _saved_task(folder) -> tuple[bool, str | None]:
    """`(known, task)` of a local model folder: its config.json's `task`, else its architecture's; `known` is False
    without a readable config.json (an adapter checkpoint, a file, a Hub id: their loaders judge them)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False, None
    if not isinstance(config, dict):
        return False, None
    if "task" in config:
        return True, config["task"]
    return True, task_of_architecture((config.get("architectures") or [None])[0])


def check_resume_task(checkpoint: str | None, task: str) -> None:
    """Refuses, before anything is built, to resume a `task` run from a checkpoint of another task (its config.json's
    `task`, else its architecture's): its weights and optimizer state belong to another head."""
    if checkpoint is None:
        return
    known, saved = _saved_task(checkpoint)
    if known and saved != task:
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint} is a checkpoint of task {saved!r}, but this run trains task "
            f"{task!r}: resume from a checkpoint of a {task!r} run, or start a new {task!r} run (drop "
            "--resume_from_checkpoint; --init_head_from or --backbone_name_or_path start from another model)."
        )


def _run_finetune(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments, task: str,
                  stages: Stages):
    seed_run(training_args)
    use_lora = model_args.use_lora and stages.train
    resume_from = None
    if stages.train or training_args.push_to_hub:  # the runs that write a model into output_dir
        resume_from = prepare_output_dir(
            training_args, run_identity(model_args, use_lora), kind="adapter" if use_lora else "model",
            resume_from_checkpoint=training_args.resume_from_checkpoint if stages.train else None,
            outputs=[name for name, used in (("base_model", use_lora and model_args.preset is not None),
                                             ("predictions", stages.predict)) if used])
        check_resume_task(resume_from, task)
    # Bounded-memory evaluation accumulates per-batch statistics; every batch key is needed.
    training_args.batch_eval_metrics = True
    training_args.remove_unused_columns = False
    output_dir = Path(training_args.output_dir)
    seed = training_args.seed + data_args.data_seed_offset
    model, input_size = _checked_model(model_args, data_args, task, seed, stages)
    config = model.config
    layer_decay = model_args.layer_decay_rate
    if layer_decay is None:
        layer_decay = OFFICIAL_LAYER_DECAY.get(getattr(config, "variant", None) or "")
    processor = image_processor_for_task(task, size={"height": input_size[0], "width": input_size[1]})
    model = _trainable_model(model, processor, model_args, training_args, task, stages, use_lora)
    keypoint_set = KeypointSet.from_config(config) if is_top_down(task) else None
    task_datasets = _run_datasets(data_args, training_args, task, input_size, seed, stages, keypoint_set, config)
    trainer = Sapiens2Trainer(model=model, args=training_args, train_dataset=task_datasets.get("train"),
                              eval_dataset=task_datasets.get("eval"), processing_class=processor, task=task,
                              layer_decay_rate=layer_decay, official_schedule=model_args.official_schedule,
                              pose_flip_test=model_args.pose_flip_test)
    if stages.train:
        result = trainer.train(resume_from_checkpoint=resume_from)
        trainer.log_metrics("train", result.metrics)
        trainer.save_metrics("train", result.metrics)
        trainer.save_state()
    metrics = {}
    if "eval" in task_datasets:
        metrics = trainer.evaluate()  # printed once, with units, by the caller (training_scripts/finetune.py)
        trainer.save_metrics("eval", metrics)
    if "test" in task_datasets:
        metrics.update(predict(trainer, task_datasets["test"], task, output_dir / "predictions"))
    finalize_output_dir(trainer, model_args, data_args, task, processor, stages, use_lora, metrics)
    return trainer, metrics


def _checked_model(model_args: ModelArguments, data_args: DataArguments, task: str, seed: int, stages: Stages):
    """`build_model` with the data's labels (warm-started with `--init_head_from`); a loaded model's labels must
    match the data's."""
    # the head has one channel per keypoint or class: the data's labels are known before the model is built
    wanted_labels = data_labels(data_args, task, seed, stages)
    fresh_labels = None if model_args.model_name_or_path else wanted_labels
    model, input_size = build_model(model_args, data_args.input_height, data_args.input_width, fresh_labels)
    if model_args.init_head_from is not None:
        warm_start(model, model_args, task)
    elif model_args.label_map is not None:
        raise ValueError("--label_map says how new classes start from a source head: pass --init_head_from too.")
    config = model.config
    if not model_args.model_name_or_path or wanted_labels is None:
        return model, input_size
    if is_top_down(task):
        check_model_keypoints(KeypointSet.from_config(config),
                              KeypointSet.build("data", wanted_labels["id2label"].values()))
    elif config.num_labels != len(wanted_labels["id2label"]):
        raise ValueError(f"The model has {config.num_labels} classes but the data {len(wanted_labels['id2label'])}. "
                         "New classes need a new head: start from --backbone_name_or_path (or --preset), "
                         "optionally with --init_head_from MODEL.")
    return model, input_size


def _trainable_model(model, processor, model_args: ModelArguments, training_args: TrainingArguments, task: str,
                     stages: Stages, use_lora: bool):
    """The model as it trains: frozen layers, remote code, or a LoRA wrapper."""
    if model_args.use_lora and not stages.train:
        logger.warning("--use_lora only applies to training; this run evaluates / predicts with the model as loaded.")
    if stages.train and (model_args.freeze_backbone or model_args.freeze_backbone_layers is not None):
        freeze_backbone(model, None if model_args.freeze_backbone else model_args.freeze_backbone_layers)
    if model_args.remote_code and not use_lora:
        # Before any save, so that checkpoints and the final folder carry the modeling files and the auto_map.
        enable_remote_code(model, processor)
    if use_lora:
        if model_args.preset is not None and training_args.should_save:
            # the random base the adapter is trained on
            model.save_pretrained(Path(training_args.output_dir) / "base_model")
        model = apply_lora(model, task, rank=model_args.lora_rank, alpha=model_args.lora_alpha,
                           dropout=model_args.lora_dropout, include_mlp=model_args.lora_include_mlp)
    trainable, total = trainable_parameter_count(model)
    logger.info("Trainable parameters: %d of %d (%.2f %%)", trainable, total, 100 * trainable / total)
    return model


def _run_datasets(data_args: DataArguments, training_args: TrainingArguments, task: str, input_size, seed: int,
                  stages: Stages, keypoint_set, config) -> dict[str, Sapiens2TaskDataset]:
    """`build_task_datasets`, loaded by the main process first, the skipped records written beside the run."""
    # The main process first downloads, prepares or renders into the `datasets` cache; the others then read it.
    with training_args.main_process_first(desc="dataset loading"):
        try:
            task_datasets, skipped = build_task_datasets(data_args, task, input_size, seed, stages, keypoint_set,
                                                         config)
        except NoUsableSamplesError as error:
            raise with_skipped_list(error, training_args) from None
    if skipped is not None and training_args.should_save:
        path = write_skipped_samples(training_args.output_dir, skipped)
        if skipped:
            logger.warning("%s. The full list is in %s (pass --strict to stop at the first bad record instead).",
                           describe_skipped(skipped), path)
    return task_datasets


# ------------------------------------------------------------------------------------------------- predictions
def predict(trainer: Sapiens2Trainer, dataset: Sapiens2TaskDataset, task: str, folder: Path) -> dict[str, float]:
    """`--do_predict`: the test metrics (`trainer.predict`; written to `predict_results.json`) and the predictions,
    written to `folder` by the main process, by the task's `prediction` kind:

    * `"keypoints"` (pose): `keypoints.json`, COCO keypoint results (`image_id`, `category_id` 1, `keypoints` as 308
      flat `[x, y, score]` in image pixels, `score` the mean keypoint score, `bbox` the person box it was cropped
      from, `instance_id`), flip-tested like the evaluation;
    * `"classes"` (seg): `<index>.png`, class ids at the label's resolution (the evaluation's upsampling and arg-max);
    * `"map"` (the other tasks): `<index>.npz`, the output maps as `(height, width, channels)` float32 on the network
      input grid (the evaluation letterbox) and the other per-sample outputs (pointmap: `scales`).

    `<index>` is the sample's position in the test split, zero-padded to 6 digits. Under FSDP the dense files are not
    written (they need the whole model on one process).
    """
    output = trainer.predict(dataset, metric_key_prefix="predict")
    trainer.save_metrics("predict", output.metrics)
    # keypoints are written from the evaluation statistics; the other kinds re-run the model on the test split
    keypoints = training_task(task).prediction == "keypoints"
    if not keypoints and trainer.is_fsdp_enabled:
        logger.warning("--do_predict under FSDP writes the test metrics only, not the dense prediction files.")
    elif trainer.is_world_process_zero():
        folder.mkdir(parents=True, exist_ok=True)
        if keypoints:
            _write_pose_predictions(output.predictions, folder / "keypoints.json")
        else:
            _write_dense_predictions(trainer, dataset, task, folder)
    trainer.accelerator.wait_for_everyone()
    return output.metrics


def _write_pose_predictions(statistics: dict, path: Path) -> None:
    keypoints, scores = statistics["pred_keypoints"], statistics["pred_scores"]
    results = []
    for index in range(len(keypoints)):
        points = np.concatenate([keypoints[index], scores[index][:, None]], axis=1)
        results.append({
            "image_id": int(statistics["image_id"][index]), "category_id": 1,
            "keypoints": [round(float(v), 3) for v in points.reshape(-1)],
            "score": float(scores[index].mean()), "bbox": [float(v) for v in statistics["gt_bbox"][index]],
            "instance_id": int(statistics["instance_id"][index]),
        })
    atomic_write_json(path, results)


@torch.no_grad()
def _write_dense_predictions(trainer: Sapiens2Trainer, dataset: Sapiens2TaskDataset, task: str, folder: Path) -> None:
    model = trainer.model.eval()
    loader = DataLoader(dataset, batch_size=trainer.args.per_device_eval_batch_size, collate_fn=trainer.data_collator,
                        num_workers=trainer.args.dataloader_num_workers)
    index = 0
    for batch in loader:
        with trainer.compute_loss_context_manager():
            outputs = model(pixel_values=batch["pixel_values"].to(trainer.args.device))
        for b in range(len(batch["pixel_values"])):
            name = f"{index:06d}"
            if training_task(task).prediction == "classes":
                height, width = (int(v) for v in batch["label_size"][b])
                logits = getattr(outputs, task_spec(task).output_field)[b : b + 1].float()
                logits = F.interpolate(logits, size=(height, width), mode="bilinear", align_corners=False)
                Image.fromarray(logits.argmax(dim=1)[0].to(torch.uint8).cpu().numpy()).save(folder / f"{name}.png")
            else:
                arrays = {}
                for key, value in outputs.items():
                    if isinstance(value, torch.Tensor) and value.shape[0] == len(batch["pixel_values"]):
                        value = value[b].float().cpu()
                        arrays[key] = (value.permute(1, 2, 0) if value.dim() == 3 else value).numpy()
                np.savez(folder / f"{name}.npz", **arrays)
            index += 1


# ------------------------------------------------------------------------------------------------- output_dir
def finalize_output_dir(trainer: Sapiens2Trainer, model_args: ModelArguments, data_args: DataArguments, task: str,
                        processor, stages: Stages, use_lora: bool, metrics: dict) -> None:
    """Make `output_dir` the model repository of the run and push it with `--push_to_hub`.

    Full models: `trainer.save_model` (FSDP-safe; with `--remote_code` the modeling files and pipeline too) and the
    model card with the evaluation metrics; LoRA runs: the adapter folder (`save_lora_adapter`). The push uploads
    `output_dir` in one commit (skipping `checkpoint-*` and `_*`, as transformers does), after any checkpoint push
    still in flight.
    """
    output_dir = Path(trainer.args.output_dir)
    push = trainer.args.push_to_hub
    if use_lora:
        if trainer.is_world_process_zero():
            save_lora_adapter(trainer.model, output_dir,
                              base_model_name_or_path=lora_base_name_or_path(model_args, output_dir),
                              image_processor=processor, eval_results=card_metrics(metrics))
    elif stages.train or push:
        # `_internal_call`: the push below uploads the complete folder once; save_model would push the bare weights.
        trainer.save_model(str(output_dir), _internal_call=True)
        if trainer.is_world_process_zero():
            if model_args.remote_code:
                ship_pipeline(output_dir, task)
            dataset = data_args.dataset_name
            trainer.create_model_card(dataset=dataset if dataset and is_hub_id(dataset) else None)
    else:
        return
    if push and trainer.is_world_process_zero():
        in_flight = getattr(trainer, "push_in_progress", None)
        if in_flight is not None and not in_flight.is_done():
            in_flight.wait_until_done()
        HfApi(token=trainer.args.hub_token).upload_folder(
            repo_id=trainer.hub_model_id, folder_path=str(output_dir), commit_message="End of training",
            revision=trainer.args.hub_revision,
            ignore_patterns=["_*", f"{PREFIX_CHECKPOINT_DIR}-*"])
    trainer.accelerator.wait_for_everyone()
