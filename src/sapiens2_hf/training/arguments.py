"""Argument dataclasses of `training_scripts/finetune.py` (parsed with `transformers.HfArgumentParser` together
with `transformers.TrainingArguments`, as in transformers' example scripts: `--dataset_name`, the column names,
`--train_val_split`, `--max_train_samples`, ... follow `run_semantic_segmentation.py` and its siblings)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..modeling.sapiens2_tasks import TASK_NAMES


# Range checks run in `__post_init__`, so that `HfArgumentParser` refuses a value at parse time, in one line naming
# the flag, instead of a run ignoring it (a split fraction of 1.5 never used) or failing hours later.
def _check_positive(flag: str, value, fix: str) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{flag} {value} is not positive; {fix}.")


def _check_non_negative(flag: str, value, fix: str) -> None:
    if value is not None and not value >= 0:
        raise ValueError(f"{flag} {value} is negative; {fix}.")


@dataclass
class ModelArguments:
    """Which model to fine-tune and how."""

    task: str = field(metadata={"help": "The task to train.", "choices": TASK_NAMES})
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A task checkpoint to continue from: HF folder, official `.safetensors` file or Hub id."},
    )
    backbone_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Pretrained backbone (official pretrain file or HF folder); the head starts from scratch "
                          "(the official recipe)."},
    )
    preset: str | None = field(
        default=None,
        metadata={"help": "Random initialisation of an official size (0.4b, 0.8b, 1b, 5b) or `tiny` (tests, demos)."},
    )
    head_preset: str | None = field(
        default=None,
        metadata={"help": "With --backbone_name_or_path: the head layout (`tiny`, an official size id, or a JSON "
                          "head-config object); default the official head of the backbone's own size, and for a "
                          "backbone of no official size `tiny` (smaller than every official size) or the head of the "
                          "nearest official size (logged)."},
    )
    init_head_from: str | None = field(
        default=None,
        metadata={"help": "Pose / segmentation: start the new head from this model's head (a 308-keypoint or 29-class "
                          "checkpoint, folder or Hub id): its layers copied, each new keypoint or class from the "
                          "channel(s) it corresponds to (names, the keypoint-format tables, --label_map); the rest "
                          "fresh. With --backbone_name_or_path or --preset, and a head of the same layout."},
    )
    label_map: str | None = field(
        default=None,
        metadata={"help": "With --init_head_from: a JSON object (inline or a file) {new class: [source classes]} for "
                          "classes that are unions of the source's (e.g. {\"skin\": [\"Left_Hand\", \"Torso\"]})."},
    )
    layer_decay_rate: float | None = field(
        default=None,
        metadata={"help": "Layer-wise LR decay; default the official rate of the model's size (0.8 / 0.85 / 0.9 / "
                          "0.94), none for other sizes. Pass 1.0 to disable."},
    )
    official_schedule: bool = field(
        default=True, metadata={"help": "Official warm-up from 1e-3x (length --warmup_steps) + linear decay to 0."}
    )
    freeze_backbone: bool = field(default=False, metadata={"help": "Train the head(s) only."})
    freeze_backbone_layers: int | None = field(
        default=None, metadata={"help": "Freeze the embeddings and this many first encoder blocks."}
    )
    use_lora: bool = field(default=False, metadata={"help": "LoRA on the backbone's attention projections; heads in full."})
    lora_rank: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int | None = field(default=None, metadata={"help": "LoRA alpha (default 2 x rank)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    lora_include_mlp: bool = field(default=False, metadata={"help": "Also adapt the SwiGLU MLP projections."})
    pose_flip_test: bool = field(default=True, metadata={"help": "Flip-test averaging in pose evaluation."})
    remote_code: bool = field(
        default=True,
        metadata={"help": "Ship the sapiens2_hf modeling, processing and pipeline files with the saved model (an "
                          "`auto_map`), so that it also loads with `trust_remote_code=True` where sapiens2_hf is not "
                          "installed (as `sapiens2_hf.hub.save_for_hub` does)."},
    )

    def __post_init__(self):
        rate = self.layer_decay_rate
        if rate is not None and not 0 < rate <= 1:
            raise ValueError(f"--layer_decay_rate {rate} is not in (0, 1]; pass e.g. 0.85, or 1.0 for no layer-wise "
                             "decay.")
        _check_non_negative("--freeze_backbone_layers", self.freeze_backbone_layers,
                            "pass 0 (the embeddings only) or more blocks, or --freeze_backbone for all of them")
        _check_positive("--lora_rank", self.lora_rank, "pass e.g. 16")
        _check_positive("--lora_alpha", self.lora_alpha, "pass e.g. 32, or leave it out for 2 x --lora_rank")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"--lora_dropout {self.lora_dropout} is not a probability in [0, 1); pass e.g. 0.05, "
                             "or 0 for none (1 would drop every LoRA output).")


@dataclass
class DataArguments:
    """Where the training and evaluation data come from."""

    dataset: str = field(
        default="synthetic",
        metadata={"help": "`synthetic` (procedural humans, no download; read through `datasets` like --dataset_name "
                          "synthetic), `coco` (pose: COCO keypoint JSON) or `folder` (seg label PNGs / normal, "
                          "pointmap, albedo arrays; see sapiens2_hf.data.dense). With --dataset_name leave it at its "
                          "default."},
    )
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "A `datasets` source: a Hub dataset id, a local folder (a `save_to_disk` folder is detected "
                          "and read with `load_from_disk`; any other folder with `load_dataset`), `imagefolder` (with "
                          "--train_dir / --validation_dir / --test_dir), or `synthetic`. Row schema per task: "
                          "sapiens2_hf.data.hf_datasets."},
    )
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "The configuration name of the dataset (`load_dataset(name, config)`)."}
    )
    train_dir: str | None = field(default=None, metadata={"help": "imagefolder: the training folder."})
    validation_dir: str | None = field(default=None, metadata={"help": "imagefolder: the validation folder."})
    test_dir: str | None = field(default=None, metadata={"help": "imagefolder: the test folder (--do_predict)."})
    cache_dir: str | None = field(
        default=None, metadata={"help": "Where `datasets` caches downloads and prepared (or rendered) data."}
    )
    train_split_name: str = field(default="train", metadata={"help": "The training split of --dataset_name."})
    eval_split_name: str = field(default="validation", metadata={"help": "The evaluation split of --dataset_name."})
    test_split_name: str = field(default="test", metadata={"help": "The split --do_predict runs on."})
    train_val_split: float | None = field(
        default=0.15,
        metadata={"help": "Fraction of the training rows, in (0, 1), split off (seeded with --seed) for evaluation "
                          "when the dataset has no evaluation split and evaluation is asked for; 0 or None: never."},
    )
    max_train_samples: int | None = field(
        default=None,
        metadata={"help": "Train on at most this many examples (a seeded random subset; pose: person crops)."},
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Evaluate on at most this many examples (a seeded random subset)."}
    )
    max_predict_samples: int | None = field(
        default=None, metadata={"help": "Predict on at most this many test examples (a seeded random subset)."}
    )
    image_column_name: str | None = field(
        default=None, metadata={"help": "The image column (default: the first of image, pixel_values, img)."}
    )
    label_column_name: str | None = field(
        default=None,
        metadata={"help": "The dense target column: seg class ids (default label, segmentation, annotation), normals "
                          "(normal, normals), pointmap depth or XYZ (depth, pointmap), albedo (albedo), matting alpha "
                          "(alpha, matte); then label."},
    )
    mask_column_name: str | None = field(
        default=None,
        metadata={"help": "Optional valid-pixel mask column of normal / pointmap / albedo / matting (default mask)."},
    )
    intrinsics_column_name: str | None = field(
        default=None,
        metadata={"help": "Pointmap: the (3, 3) pixel intrinsics column (default intrinsics, camera_intrinsics, K)."},
    )
    keypoints_column_name: str | None = field(
        default=None,
        metadata={"help": "Pose: per person COCO flat [x, y, v, ...] or (K, 3) / (K, 2) keypoints (default "
                          "keypoints)."},
    )
    bboxes_column_name: str | None = field(
        default=None,
        metadata={"help": "Pose: per person box, COCO [x, y, width, height] (default bboxes, bbox, boxes)."},
    )
    keypoint_visibility_column_name: str | None = field(
        default=None,
        metadata={"help": "Pose: per person (K,) visibility for (K, 2) keypoints (default keypoint_visibility; "
                          "without it every point counts as visible)."},
    )
    bbox_format: str | None = field(
        default=None,
        metadata={"help": "Pose boxes of --dataset_name: xywh (COCO) or xyxy (corners); default xywh, xyxy for the "
                          "synthetic schema.", "choices": ["xywh", "xyxy"]},
    )
    train_images: str | None = field(default=None, metadata={"help": "Training image folder."})
    train_targets: str | None = field(
        default=None, metadata={"help": "Training annotation JSON (pose) or target folder (dense tasks)."}
    )
    train_masks: str | None = field(default=None, metadata={"help": "Optional foreground-mask folder (dense)."})
    eval_images: str | None = field(default=None, metadata={"help": "Evaluation image folder."})
    eval_targets: str | None = field(default=None, metadata={"help": "Evaluation annotation JSON / target folder."})
    eval_masks: str | None = field(default=None, metadata={"help": "Optional evaluation mask folder."})
    test_images: str | None = field(default=None, metadata={"help": "Test image folder (--do_predict)."})
    test_targets: str | None = field(default=None, metadata={"help": "Test annotation JSON / target folder."})
    test_masks: str | None = field(default=None, metadata={"help": "Optional test mask folder."})
    keypoint_layout: str = field(
        default="auto", metadata={"help": "How the data's keypoints map to the official 308: auto, sapiens308, "
                                          "sapiens344 or coco_wholebody (for a 308-keypoint model)."}
    )
    keypoint_set: str = field(
        default="auto", metadata={"help": "The pose model's keypoints: auto (a COCO file's person category, else by "
                                          "the data's keypoint count: 308/344/WholeBody -> sapiens308, 17 -> coco17, "
                                          "16 -> mpii16, 14 -> crowdpose14, 21 -> hand21, 68 -> face68), a preset "
                                          "(coco17, mpii16, crowdpose14, hand21, face68, wholebody133, sapiens308) or "
                                          "a JSON layout file {keypoints, skeleton, flip_pairs?, sigmas?}."}
    )
    class_names: str | None = field(
        default=None, metadata={"help": "Segmentation: the classes to train, comma-separated in id order "
                                        "(background first); default: the dataset's ClassLabel names, else the 29 "
                                        "official body parts."})
    labels_file: str | None = field(
        default=None, metadata={"help": "Segmentation: a JSON file of the class names, a list in id order or an "
                                        "id2label object {\"0\": \"background\", ...}."})
    do_reduce_labels: bool = field(
        default=False, metadata={"help": "Segmentation: label 0 is 'unlabelled' (ignored) and every other id is "
                                         "shifted down by one, as transformers' segmentation example does."})
    ignore_index: int = field(default=255, metadata={"help": "Segmentation: the label value that is not trained."})
    synthetic_train_samples: int = field(default=64, metadata={"help": "Synthetic training set size."})
    synthetic_eval_samples: int = field(default=16, metadata={"help": "Synthetic evaluation set size."})
    synthetic_test_samples: int = field(default=16, metadata={"help": "Synthetic test set size (--do_predict)."})
    synthetic_image_size: int = field(
        default=256, metadata={"help": "Longer side of the rendered synthetic images (pixels)."}
    )
    input_height: int | None = field(
        default=None,
        metadata={"help": "Network input height (default: the model's / backbone's config image_size; 256 for a model "
                          "of no official size whose config only has the native 1024x768)."},
    )
    input_width: int | None = field(
        default=None, metadata={"help": "Network input width (default: see --input_height)."}
    )
    augment: bool = field(default=True, metadata={"help": "Official training augmentations."})
    data_seed_offset: int = field(default=0, metadata={"help": "Added to --seed for the augmentation streams."})
    strict: bool = field(
        default=False,
        metadata={"help": "Stop at start on the first bad record (zero-size box, non-finite keypoints, missing or "
                          "truncated file). Default: skip bad records and list them in "
                          "<output_dir>/skipped_samples.json."},
    )

    def __post_init__(self):
        split = self.train_val_split
        if split is not None and split != 0 and not 0 < split < 1:
            raise ValueError(f"--train_val_split {split} is not a fraction in (0, 1); pass the share of the training "
                             "rows to split off for evaluation (e.g. 0.15), or 0 to never split.")
        for name in ("max_train_samples", "max_eval_samples", "max_predict_samples"):
            _check_positive(f"--{name}", getattr(self, name), "pass 1 or more, or leave it out for every example")
        for name in ("synthetic_train_samples", "synthetic_eval_samples", "synthetic_test_samples"):
            _check_non_negative(f"--{name}", getattr(self, name), "pass 0 (none) or more samples")
        _check_positive("--synthetic_image_size", self.synthetic_image_size, "pass a size in pixels, e.g. 256")
        for name in ("input_height", "input_width"):
            _check_positive(f"--{name}", getattr(self, name),
                            "pass a size in pixels, or leave it out for the model's own")
