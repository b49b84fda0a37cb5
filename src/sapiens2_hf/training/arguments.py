"""Argument dataclasses of `training_scripts/finetune.py` (parsed with `transformers.HfArgumentParser` together
with `transformers.TrainingArguments`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelArguments:
    """Which model to fine-tune and how."""

    task: str = field(metadata={"help": "pose, seg, normal, pointmap or albedo."})
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


@dataclass
class DataArguments:
    """Where the training and evaluation data come from."""

    dataset: str = field(
        default="synthetic",
        metadata={"help": "`synthetic` (procedural humans, no download), `coco` (pose: COCO keypoint JSON) or "
                          "`folder` (seg label PNGs / normal, pointmap, albedo arrays; see sapiens2_hf.data.dense)."},
    )
    train_images: str | None = field(default=None, metadata={"help": "Training image folder."})
    train_targets: str | None = field(
        default=None, metadata={"help": "Training annotation JSON (pose) or target folder (dense tasks)."}
    )
    train_masks: str | None = field(default=None, metadata={"help": "Optional foreground-mask folder (dense)."})
    eval_images: str | None = field(default=None, metadata={"help": "Evaluation image folder."})
    eval_targets: str | None = field(default=None, metadata={"help": "Evaluation annotation JSON / target folder."})
    eval_masks: str | None = field(default=None, metadata={"help": "Optional evaluation mask folder."})
    keypoint_layout: str = field(
        default="auto", metadata={"help": "COCO keypoint layout: auto, sapiens308, sapiens344 or coco_wholebody."}
    )
    synthetic_train_samples: int = field(default=64, metadata={"help": "Synthetic training set size."})
    synthetic_eval_samples: int = field(default=16, metadata={"help": "Synthetic evaluation set size."})
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
