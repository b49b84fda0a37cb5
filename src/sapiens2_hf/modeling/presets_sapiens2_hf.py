# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The Sapiens2 presets as data tables (Hub-shippable, the configuration's sibling): the official backbone sizes, the
official task heads per size, ours for the 4K backbone, and the tiny model's heads. `Sapiens2Config.from_preset` and
`tiny_config` read them; nothing here is code."""

from .sapiens2_label_data import POSE_FLIP_PAIRS, POSE_KEYPOINT_NAMES, SEGMENTATION_CLASS_NAMES


# Official backbone sizes (facebookresearch/sapiens2, sapiens/backbones/standalone/sapiens2.py). Every size uses
# 8 register tokens, patch 16, SwiGLU with hidden 4*d, QK-norm, LayerScale 1e-4 on the attention branch only, and
# grouped-query attention with heads/2 KV heads in all but the first 8 and last 8 blocks.
VARIANTS = {
    "0.1b": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "num_tokenizer_layers": 0},
    "0.4b": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "num_tokenizer_layers": 0},
    "0.8b": {"hidden_size": 1280, "num_hidden_layers": 32, "num_attention_heads": 16, "num_tokenizer_layers": 0},
    "1b": {"hidden_size": 1536, "num_hidden_layers": 40, "num_attention_heads": 24, "num_tokenizer_layers": 0},
    "5b": {"hidden_size": 2432, "num_hidden_layers": 56, "num_attention_heads": 32, "num_tokenizer_layers": 0},
    # The hierarchical 4K model: the 1b encoder behind a 4-layer windowed tokenizer, native input 4096x3072.
    "1b-4k": {"hidden_size": 1536, "num_hidden_layers": 40, "num_attention_heads": 24, "num_tokenizer_layers": 4},
}
NATIVE_IMAGE_SIZES = {"1b-4k": [4096, 3072]}
# Not an official size: the random tiny model (`tiny_config`) that `from_preset` also builds, for examples and tests.
TINY_PRESET = "tiny"


_POSE_HEAD_SMALL = {"upsample_out_channels": [1024, 768], "conv_out_channels": [512, 512, 256]}


_SEG_HEAD = {"upsample_out_channels": [512, 256, 128, 64], "conv_out_channels": [64, 64]}


_NORMAL_HEAD = {"upsample_out_channels": [768, 512, 256, 128], "conv_out_channels": [64, 32, 16]}


_POINTMAP_SCALE_BRANCH = {
    "scale_conv_out_channels": [1536, 512, 128],
    "scale_conv_kernel_sizes": [1, 1, 1],
    "scale_final_hidden_sizes": [512, 128],
}


_POINTMAP_HEAD = {
    "upsample_out_channels": [1536, 768, 512, 256],
    "conv_out_channels": [64, 32, 16],
    **_POINTMAP_SCALE_BRANCH,
}


# Official head layouts per task and size (the task configs of the official repo). Pose and seg heads use transposed
# convolutions (kernel 4, stride 2) followed by 1x1 convs; normal, pointmap and albedo heads use a 3x3 input conv,
# pixel-shuffle upsampling blocks with 3x3 convs, then 3x3 refinement convs.
OFFICIAL_HEAD_PRESETS = {
    "pose": {
        "0.4b": _POSE_HEAD_SMALL,
        "0.8b": _POSE_HEAD_SMALL,
        "1b": {"upsample_out_channels": [1536, 1024], "conv_out_channels": [768, 512, 256]},
        "5b": _POSE_HEAD_SMALL,
    },
    "seg": {size: _SEG_HEAD for size in ("0.4b", "0.8b", "1b", "5b")},
    "normal": {
        "0.4b": _NORMAL_HEAD,
        "0.8b": _NORMAL_HEAD,
        "1b": _NORMAL_HEAD,
        "5b": {"upsample_out_channels": [1536, 768, 512, 256], "conv_out_channels": [128, 64, 32]},
    },
    "pointmap": {
        "0.4b": _POINTMAP_HEAD,
        "0.8b": _POINTMAP_HEAD,
        "1b": _POINTMAP_HEAD,
        "5b": {
            "upsample_out_channels": [1536, 768, 768, 768],
            "conv_out_channels": [128, 64, 32],
            **_POINTMAP_SCALE_BRANCH,
        },
    },
    "albedo": {
        "0.4b": _NORMAL_HEAD,
        "0.8b": _NORMAL_HEAD,
        "1b": _NORMAL_HEAD,
        "5b": {"upsample_out_channels": [1536, 768, 512, 256], "conv_out_channels": [64, 32, 16]},
    },
    # Only a 1b matting model is released (facebook/sapiens2-matting-1b); its config's MattingHead has the normal
    # head's channels and 3x3 kernels, with 4 outputs.
    "matting": {"1b": _NORMAL_HEAD},
}


# Heads for the 4K backbone (ours: the official release has no 4K task heads). Its features have stride 64, so the
# dense heads get one more x2 block than the official 1K heads and decode to half the input resolution (the paper
# decodes 4K inputs to 2K outputs); the pose head reaches the usual 1/4-resolution heatmaps with 4 deconvolutions.
HEAD_PRESETS_4K = {
    "pose": {"upsample_out_channels": [1536, 1024, 512, 256], "conv_out_channels": [256, 256, 256]},
    "seg": {"upsample_out_channels": [512, 256, 128, 64, 64], "conv_out_channels": [64, 64]},
    "normal": {"upsample_out_channels": [768, 512, 256, 128, 64], "conv_out_channels": [64, 32, 16]},
    "pointmap": {
        "upsample_out_channels": [1536, 768, 512, 256, 128],
        "conv_out_channels": [64, 32, 16],
        **_POINTMAP_SCALE_BRANCH,
        "scale_final_input_size": 6144,  # the branch reads the 64x48 pooled grid, as at 1K: 8x6 x 128 features
    },
    "albedo": {"upsample_out_channels": [768, 512, 256, 128, 64], "conv_out_channels": [64, 32, 16]},
}

#: Every preset head, by task then size: the official ones and the 4K backbone's.
HEAD_PRESETS = {task: {**sizes, **({"1b-4k": HEAD_PRESETS_4K[task]} if task in HEAD_PRESETS_4K else {})}
                for task, sizes in OFFICIAL_HEAD_PRESETS.items()}


# The tiny model's head per task; a registered task without one gets the layout of its upsampling kind.
_TINY_DECONV_HEAD = {"upsample_out_channels": [16, 16, 8, 8], "conv_out_channels": [8, 8]}


_TINY_PIXEL_SHUFFLE_HEAD = {"upsample_out_channels": [16, 16, 8, 8], "conv_out_channels": [8, 8, 4]}


_TINY_HEAD_BY_UPSAMPLING = {"deconv": _TINY_DECONV_HEAD, "pixel_shuffle": _TINY_PIXEL_SHUFFLE_HEAD}


TINY_HEAD_LAYOUTS = {
    "pose": {"upsample_out_channels": [16, 16], "conv_out_channels": [16, 16, 16]},
    "seg": _TINY_DECONV_HEAD,
    **dict.fromkeys(("normal", "albedo", "matting"), _TINY_PIXEL_SHUFFLE_HEAD),
    # One stride-2 scale conv keeps a 2x2 map at 64x48 (InstanceNorm needs more than one pixel).
    "pointmap": {**_TINY_PIXEL_SHUFFLE_HEAD, "scale_conv_out_channels": [8], "scale_conv_kernel_sizes": [1],
                 "scale_final_hidden_sizes": [16, 8]},
}


# Label metadata that travels in config.json, per task with named labels (the others: `num_labels` of their spec).
TASK_LABELS = {
    "pose": {"id2label": dict(enumerate(POSE_KEYPOINT_NAMES)), "flip_pairs": [list(pair) for pair in POSE_FLIP_PAIRS]},
    "seg": {"id2label": dict(enumerate(SEGMENTATION_CLASS_NAMES))},
}
