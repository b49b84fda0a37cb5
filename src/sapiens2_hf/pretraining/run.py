"""Command-line pretraining: arguments and the run function behind `training_scripts/pretrain.py`.

It pretrains from a folder of images (`--image_folder`) or a `datasets` dataset (`--dataset_name`), a tiny model or a
real size (`--variant 0.4b`, optionally from `--init_backbone`), and writes the resumable pretraining checkpoint to
`output_dir` and the student backbone, a plain `Sapiens2Model` checkpoint, to `output_dir/backbone`
(docs/pretraining.md).
"""

import json
import os
import sys
from dataclasses import dataclass, field

from transformers import HfArgumentParser, TrainingArguments
from transformers.utils import logging

from ..data.hf_datasets import is_saved_to_disk
from ..data.validation import NoUsableSamplesError, describe_skipped, write_skipped_samples
from ..modeling import Sapiens2Config
from ..training.run_setup import (
    Sapiens2TrainingArguments,
    check_process_count,
    hold_output_dir,
    prepare_output_dir,
    seed_run,
    with_skipped_list,
)
from ..utils.extras import require
from .configuration_pretraining import Sapiens2PreTrainingConfig, tiny_pretraining_config
from .meta_arch import Sapiens2ForPreTraining
from .multicrop import MultiCropAugmentation, MultiCropCollator, PretrainingImageDataset
from .trainer import Sapiens2PreTrainingTrainer


logger = logging.get_logger(__name__)


@dataclass
class PretrainingArguments:
    """Data, model and objective arguments of the pretraining script (optimisation is in `TrainingArguments`)."""

    image_folder: str | None = field(default=None, metadata={"help": "Folder of images (searched recursively)."})
    dataset_name: str | None = field(
        default=None, metadata={"help": "A `datasets` dataset: Hub name, or a folder written by `save_to_disk`."}
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Configuration of `dataset_name`."})
    dataset_split: str = field(default="train", metadata={"help": "Split of `dataset_name`."})
    image_column: str = field(default="image", metadata={"help": "Image column of `dataset_name`."})
    variant: str = field(
        default="tiny", metadata={"help": "'tiny' (tests, CPU) or an official size: 0.1b, 0.4b, 0.8b, 1b, 5b."}
    )
    init_backbone: str | None = field(
        default=None,
        metadata={"help": "Continue pretraining from this backbone (official pretrain .safetensors or HF folder)."},
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": 'JSON dict of Sapiens2PreTrainingConfig fields, e.g. \'{"mask_ratio": 0.6}\'.'},
    )
    augmentation_overrides: str | None = field(
        default=None,
        metadata={"help": 'JSON dict of MultiCropAugmentation fields, e.g. \'{"num_local_crops": 4}\'.'},
    )
    export_dir: str | None = field(
        default=None, metadata={"help": "Where to export the backbone (default: <output_dir>/backbone)."}
    )
    export_which: str = field(default="student", metadata={"help": "Backbone to export: 'student' or 'teacher'."})
    strict: bool = field(
        default=False,
        metadata={"help": "Stop at start on the first missing, unreadable or truncated image of --image_folder. "
                          "Default: skip bad images and list them in <output_dir>/skipped_samples.json."},
    )


def _json_dict(text: str | None, name: str) -> dict:
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"`{name}` must be a JSON object, got {text!r}.")
    return value


def build_dataset(args: PretrainingArguments, seed: int) -> PretrainingImageDataset:
    """The training images of `args` (exactly one of `image_folder` and `dataset_name`)."""
    if (args.image_folder is None) == (args.dataset_name is None):
        raise ValueError("Pass exactly one of --image_folder and --dataset_name.")
    if args.image_folder is not None:
        return PretrainingImageDataset.from_folder(args.image_folder, seed=seed, strict=args.strict)
    datasets = require("datasets", feature="a Hugging Face dataset")

    if is_saved_to_disk(args.dataset_name):
        dataset = datasets.load_from_disk(args.dataset_name)
        if isinstance(dataset, datasets.DatasetDict):
            dataset = dataset[args.dataset_split]
    else:
        dataset = datasets.load_dataset(args.dataset_name, args.dataset_config_name, split=args.dataset_split)
    return PretrainingImageDataset(dataset, image_column=args.image_column, seed=seed)


def build_config(args: PretrainingArguments) -> Sapiens2PreTrainingConfig:
    """The variant's pretraining config with `--config_overrides`; a `global_crop_size` in
    `--augmentation_overrides` becomes the backbone's `image_size` (the resolution it is pretrained at)."""
    overrides = _json_dict(args.config_overrides, "config_overrides")
    crop = _augmentation_overrides(args).get("global_crop_size")
    backbone_overrides = {} if crop is None else {"image_size": list(crop)}
    if args.variant == "tiny":
        return tiny_pretraining_config(backbone_overrides, **overrides)
    return Sapiens2PreTrainingConfig(backbone_config=Sapiens2Config.from_preset(args.variant, **backbone_overrides),
                                     **overrides)


def _augmentation_overrides(args: PretrainingArguments) -> dict:
    overrides = _json_dict(args.augmentation_overrides, "augmentation_overrides")
    for key in ("global_crop_size", "local_crop_size", "global_crop_scale", "local_crop_scale", "crop_aspect_jitter", "blur_sigma"):
        if key in overrides:
            overrides[key] = tuple(overrides[key])
    return overrides


def build_augmentation(args: PretrainingArguments, config: Sapiens2PreTrainingConfig) -> MultiCropAugmentation:
    """The crops of `config` (`MultiCropAugmentation.from_config`; the tiny variant takes 2 local crops, as
    `MultiCropAugmentation.tiny`) with `--augmentation_overrides`."""
    defaults = {"num_local_crops": 2} if args.variant == "tiny" else {}
    return MultiCropAugmentation.from_config(config, **{**defaults, **_augmentation_overrides(args)})


def run_identity(args: PretrainingArguments) -> dict:
    """The arguments that define a pretraining run's weights, recorded in its `--output_dir` (`prepare_output_dir`):
    resuming that folder with others is refused."""
    init = args.init_backbone
    return {"entry_point": "pretrain", "variant": args.variant,
            "init_backbone": os.path.abspath(init) if init is not None and os.path.exists(init) else init,
            "config_overrides": _json_dict(args.config_overrides, "config_overrides")}


def run_pretraining(args: PretrainingArguments, training_args: TrainingArguments) -> Sapiens2PreTrainingTrainer:
    """Builds model, data and trainer from the arguments, trains, saves the checkpoint and exports the backbone.

    `output_dir` follows the run-folder rule (`sapiens2_hf.training.run_setup.prepare_output_dir`): a folder holding
    another run is refused unless `--overwrite_output_dir` clears it or `--resume_from_checkpoint` continues it. The
    run holds `output_dir` throughout (`hold_output_dir`): a second run started into it meanwhile is refused.
    """
    if args.export_which not in ("student", "teacher"):
        raise ValueError(f"--export_which must be 'student' or 'teacher', got {args.export_which!r}.")
    with hold_output_dir(training_args):
        return _run_pretraining(args, training_args)


def _run_pretraining(args: PretrainingArguments, training_args: TrainingArguments) -> Sapiens2PreTrainingTrainer:
    """`run_pretraining` once `output_dir` is held."""
    seed_run(training_args)
    export_dir = args.export_dir or os.path.join(training_args.output_dir, "backbone")
    inside = os.path.dirname(os.path.abspath(export_dir)) == os.path.abspath(training_args.output_dir)
    resume_from = prepare_output_dir(
        training_args, run_identity(args), kind="model", resume_from_checkpoint=training_args.resume_from_checkpoint,
        outputs=[os.path.basename(os.path.abspath(export_dir))] if inside else [])
    config = build_config(args)
    if args.init_backbone is not None:
        model = Sapiens2ForPreTraining.from_backbone(args.init_backbone, config=config)
    else:
        model = Sapiens2ForPreTraining(config)
    try:
        dataset = build_dataset(args, seed=training_args.seed)
    except NoUsableSamplesError as error:
        raise with_skipped_list(error, training_args) from None
    if args.image_folder is not None and training_args.should_save:
        path = write_skipped_samples(training_args.output_dir, dataset.skipped)
        if dataset.skipped:
            logger.warning("%s. The full list is in %s (pass --strict to stop at the first bad image instead).",
                           describe_skipped(dataset.skipped), path)
    collator = MultiCropCollator.from_config(config, build_augmentation(args, config), seed=training_args.seed)
    trainer = Sapiens2PreTrainingTrainer(
        model=model, args=training_args, train_dataset=dataset, data_collator=collator
    )
    trainer.train(resume_from_checkpoint=resume_from)
    trainer.save_model()
    trainer.save_backbone(export_dir, which=args.export_which)
    logger.info("Exported the %s backbone to %s", args.export_which, export_dir)
    return trainer


def main(argv: list[str] | None = None) -> Sapiens2PreTrainingTrainer:
    """Entry point: parses `PretrainingArguments` and `Sapiens2TrainingArguments` (transformers' `TrainingArguments`
    plus `--overwrite_output_dir`), or one JSON file holding both."""
    require("accelerate", feature="training")  # before TrainingArguments, whose own error names transformers' pip extra
    check_process_count()
    parser = HfArgumentParser((PretrainingArguments, Sapiens2TrainingArguments))
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].endswith(".json"):
        args, training_args = parser.parse_json_file(os.path.abspath(argv[0]))
    else:
        args, training_args = parser.parse_args_into_dataclasses(args=argv)
    return run_pretraining(args, training_args)
