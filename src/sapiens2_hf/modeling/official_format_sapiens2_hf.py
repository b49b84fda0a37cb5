# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The official Sapiens2 checkpoint format (facebookresearch/sapiens2 state-dict layout), read at run time.

Pretrain files hold the bare backbone state dict; task files prefix it with `backbone.` beside `decode_head.`. This
module infers the architecture from tensor shapes (official files carry no config) and declares the renaming to the
transformers layout our classes share with transformers' own Sapiens2 port, for `from_pretrained` and
`sapiens2-hf convert`.
"""

import math
import re

import torch

from .configuration_sapiens2_hf import (
    NATIVE_IMAGE_SIZES,
    VARIANTS,
    check_image_size,
    head_kwargs_for_task,
    pointmap_image_sizes,
    pointmap_scale_features,
    task_label_kwargs,
)
from .sapiens2_tasks import OFFICIAL_TASK_NAMES, PRETRAIN_TASK, task_spec


# Name of the last 1x1 conv of each official head (`decode_head.conv_<task>`), which tells the task of a checkpoint.
PREDICTOR_TASKS = {f"conv_{task}": task for task in OFFICIAL_TASK_NAMES}
# `sapiens2_<size>_<task>.safetensors`. The size token is free-form (`1b`, `1b_4k`, `custom_4k`, `tinyp`): files of
# sizes the table does not know are found and loaded like the others; known sizes are cross-checked with the tensors.
OFFICIAL_FILENAME_PATTERN = re.compile(
    r"^sapiens2_(?P<variant>[A-Za-z0-9.]+(?:[_-][A-Za-z0-9.]+)*?)_(?P<task>"
    + "|".join((PRETRAIN_TASK, *OFFICIAL_TASK_NAMES)) + r")\.safetensors$"
)
# Tensor names of the original layout: a bare backbone, or the `backbone.` / `decode_head.conv_<task>.` task layout.
ORIGINAL_NAME_PATTERN = re.compile(
    r"^(backbone\.|decode_head\.(" + "|".join(PREDICTOR_TASKS) + r")\.|cls_token$|storage_tokens$|blocks\.\d+\.)"
)
# The aspect ratio (height:width) of the official input size, 1024x768.
OFFICIAL_ASPECT = (4, 3)

# The original tensor names -> our module names (= transformers' port's): transformers' own `sapiens2` weight
# transforms (its loader renames while it streams tensors: memory-mapped, cast one by one, `device_map`/offload/shards
# intact), registered for our model type so that they apply to the bare backbone classes and, scoped under `model.`,
# to the task models' backbone; transformers reverses them when it saves a model in the original format.
def _backbone_conversions() -> list:
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    from transformers.core_model_loading import WeightRenaming

    # Why code: transformers' port has no 4K tokenizer, so its entry lacks these; they run first, before its
    # unanchored `blocks.N.` pattern could claim the tokenizer's blocks (encoder blocks without QK-norm, LayerScale).
    return [
        WeightRenaming(r"^tokenizer\.blocks\.(\d+)\.", r"tokenizer.layer.\1."),
        WeightRenaming(r"^tokenizer\.w_cls", r"tokenizer.window_cls"),
        *get_checkpoint_conversion_mapping("sapiens2"),
    ]


# Official heads number their `nn.Sequential` children (conv, norm, activation): layer i is child 3 * i. Heads are
# far shallower than this bound; a deeper one would leave tensors unconverted, which strict loading names.
_MAX_HEAD_LAYERS = 16


def compute_rope_periods(head_dim: int, base: float, dtype: torch.dtype) -> torch.Tensor:
    """RoPE periods `base ** (4 j / head_dim)` for `j < head_dim / 4`, computed in `dtype` itself.

    The official model builds its periods buffer in its RoPE dtype, so in bfloat16 the rounding happens inside the
    power, not after it (for head dim 12 this gives 21.625 where a float32 computation rounds to 21.5).

    Returns:
        `torch.Tensor` of shape `(head_dim // 4,)` and dtype `dtype`.
    """
    num_periods = head_dim // 4
    return base ** (2 * torch.arange(num_periods, dtype=dtype) / (head_dim // 2))


# Why code: transformers' port declares no albedo head, and these names are ambiguous, so not registered (below).
def pixel_shuffle_head_key_mapping(task: str) -> dict[str, str]:
    """transformers `key_mapping` (regex -> replacement) from the original names of a pixel-shuffle task checkpoint
    whose head transformers' port does not declare (albedo). Not registered: original names such as
    `conv_layers.1.norm.weight` (the norm of layer 0) are also valid names in our layout (the norm of layer 1), so
    they apply only to checkpoints known to use the original names. The `backbone.` prefix is dropped."""
    mapping = {
        **BACKBONE_PREFIX_KEY_MAPPING,
        r"^decode_head\.input_conv\.0\.": "decode_head.input_conv.convolution.",
        r"^decode_head\.input_conv\.1\.norm\.": "decode_head.input_conv.norm.",
        r"^decode_head\.upsample_blocks\.(\d+)\.0\.": r"decode_head.upsample_layers.\1.convolution.",
        r"^decode_head\.upsample_blocks\.(\d+)\.2\.norm\.": r"decode_head.upsample_layers.\1.norm.",
        rf"^decode_head\.conv_{task}\.": "decode_head.predictor.",
    }
    for index in range(_MAX_HEAD_LAYERS):
        mapping[rf"^decode_head\.conv_layers\.{3 * index}\.(weight|bias)$"] = rf"decode_head.conv_layers.{index}.convolution.\1"
        mapping[rf"^decode_head\.conv_layers\.{3 * index + 1}\.norm\."] = f"decode_head.conv_layers.{index}.norm."
    return mapping


# A task file's backbone under its `backbone.` prefix, read by a class whose transformers entry does not strip it
# (the backbone classes, albedo): the registered conversions then see the bare original names.
BACKBONE_PREFIX_KEY_MAPPING = {r"^backbone\.": ""}


def original_key_mapping(model_class) -> dict[str, str] | None:
    """The `key_mapping` an original-layout checkpoint of `model_class` needs besides the registered conversions:
    `None` when transformers' port declares the class's head (pose, seg, normal, pointmap, matting)."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    if model_class.task is None:
        return BACKBONE_PREFIX_KEY_MAPPING
    if get_checkpoint_conversion_mapping(model_class.__name__) is not None:
        return None
    return pixel_shuffle_head_key_mapping(model_class.task)


def register_original_format_conversions() -> None:
    """Declares the backbone's original-layout conversions for our model type to transformers' loader (idempotent;
    an entry transformers already has is kept). The pose, seg, normal, pointmap and matting heads are declared by
    transformers' port under the class names we share; the albedo head goes through `pixel_shuffle_head_key_mapping`.
    """
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping

    if get_checkpoint_conversion_mapping("sapiens2_hf") is None:
        register_checkpoint_conversion_mapping("sapiens2_hf", _backbone_conversions())


class OfficialCheckpointError(ValueError):
    """An official checkpoint file that cannot be read as the requested model."""


def detect_official_kind(state_dict: dict[str, torch.Tensor]) -> str:
    """Returns `"pretrain"` for a bare backbone file, else the task of a task file (from its predictor's name)."""
    if any(key.startswith("backbone.") for key in state_dict):
        for key in state_dict:
            match = re.match(r"^decode_head\.(conv_[a-z]+)\.weight$", key)
            if match and match[1] in PREDICTOR_TASKS:
                return PREDICTOR_TASKS[match[1]]
        raise OfficialCheckpointError(
            f"The file has `backbone.*` keys but no known task predictor (decode_head.{' / '.join(PREDICTOR_TASKS)}); "
            "it is not an official Sapiens2 task checkpoint."
        )
    if "cls_token" in state_dict and "patch_embed.projection.weight" in state_dict:
        return "pretrain"
    raise OfficialCheckpointError(
        "The file holds neither an official Sapiens2 backbone (`cls_token`, `patch_embed.projection.weight`, "
        "`blocks.*`) nor a task checkpoint (`backbone.*`, `decode_head.*`)."
    )


def _require(state_dict, key, what):
    if key not in state_dict:
        raise OfficialCheckpointError(f"Missing tensor `{key}` ({what}); the file is incomplete or not a Sapiens2 one.")
    return state_dict[key]


def infer_backbone_config_kwargs(backbone_state: dict[str, torch.Tensor]) -> dict:
    """Infers the backbone hyper-parameters from the tensor shapes of an official (unprefixed) backbone state dict."""
    hidden_size = _require(backbone_state, "cls_token", "CLS token").shape[-1]
    num_register_tokens = _require(backbone_state, "storage_tokens", "register tokens").shape[1]
    patch_weight = _require(backbone_state, "patch_embed.projection.weight", "patch embedding")
    layer_indices = sorted(
        {int(m[1]) for key in backbone_state if (m := re.match(r"^blocks\.(\d+)\.", key))}
    )
    if not layer_indices or layer_indices != list(range(len(layer_indices))):
        raise OfficialCheckpointError(f"Transformer blocks are missing or not numbered 0..N-1: {layer_indices}.")
    num_layers = len(layer_indices)
    use_qk_norm = "blocks.0.attn.q_norm.weight" in backbone_state
    if use_qk_norm:
        head_dim = backbone_state["blocks.0.attn.q_norm.weight"].shape[0]
    elif "rope_embed.periods" in backbone_state:
        head_dim = 4 * backbone_state["rope_embed.periods"].shape[0]
    else:
        raise OfficialCheckpointError("Cannot infer the head dim: the file has neither QK-norm weights nor RoPE periods.")
    if hidden_size % head_dim:
        raise OfficialCheckpointError(f"Hidden size {hidden_size} is not a multiple of the head dim {head_dim}.")
    num_heads = hidden_size // head_dim
    kv_heads = []
    for index in layer_indices:
        key_rows = _require(backbone_state, f"blocks.{index}.attn.wk.weight", "key projection").shape[0]
        if key_rows % head_dim:
            raise OfficialCheckpointError(f"blocks.{index}.attn.wk has {key_rows} rows, not a multiple of {head_dim}.")
        kv_heads.append(key_rows // head_dim)
    fused_rows = _require(backbone_state, "blocks.0.ffn.w12.weight", "SwiGLU input projection").shape[0]
    if "blocks.0.attn.gamma.weight" not in backbone_state:
        raise OfficialCheckpointError("The blocks have no attention LayerScale (`attn.gamma.weight`); unsupported layout.")
    tokenizer_kwargs = _tokenizer_config_kwargs(backbone_state)
    return {
        **tokenizer_kwargs,
        "hidden_size": hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads_per_layer": kv_heads,
        "intermediate_size": fused_rows // 2,
        "num_register_tokens": num_register_tokens,
        "patch_size": patch_weight.shape[-1] if patch_weight.shape[-1] == patch_weight.shape[-2] else list(patch_weight.shape[-2:]),
        "num_channels": patch_weight.shape[1],
        "use_qk_norm": use_qk_norm,
        "query_bias": "blocks.0.attn.wq.bias" in backbone_state,
        "key_bias": "blocks.0.attn.wk.bias" in backbone_state,
        "value_bias": "blocks.0.attn.wv.bias" in backbone_state,
        "proj_bias": "blocks.0.attn.proj.bias" in backbone_state,
        "mlp_bias": "blocks.0.ffn.w12.bias" in backbone_state,
        "use_gated_mlp": True,
    }


def _tokenizer_config_kwargs(backbone_state: dict[str, torch.Tensor]) -> dict:
    """The 4K tokenizer's hyper-parameters from an official backbone state dict (`num_tokenizer_layers` 0 without
    one)."""
    if not any(key.startswith("tokenizer.") for key in backbone_state):
        return {"num_tokenizer_layers": 0}
    positions = _require(backbone_state, "tokenizer.local_pos_embed", "4K tokenizer position embedding").shape[1] - 1
    window = math.isqrt(positions)
    if window * window != positions:
        raise OfficialCheckpointError(f"The 4K tokenizer has {positions} local positions, not a square window.")
    tokenizer_layers = {int(m[1]) for key in backbone_state if (m := re.match(r"^tokenizer\.blocks\.(\d+)\.", key))}
    if "tokenizer.blocks.0.attn.q_norm.weight" in backbone_state or "tokenizer.blocks.0.attn.gamma.weight" in backbone_state:
        raise OfficialCheckpointError("The 4K tokenizer blocks have QK-norm or LayerScale weights; unsupported layout.")
    return {"num_tokenizer_layers": len(tokenizer_layers), "tokenizer_window_size": window}


def _indexed_weights(head_state, pattern):
    found = {int(match[1]): tensor for key, tensor in head_state.items() if (match := re.match(pattern, key))}
    return [found[index] for index in sorted(found)]


def infer_head_config_kwargs(task: str, head_state: dict[str, torch.Tensor]) -> dict:
    """Infers a task head's layout (channels and kernel sizes) from the shapes of its official `decode_head.*` state."""
    if task_spec(task).head_upsampling == "deconv":  # transposed convs: (in, out, k, k) each
        upsamples, out_axis, factor = _indexed_weights(head_state, r"^deconv_layers\.(\d+)\.weight$"), 1, 1
    else:  # conv + pixel shuffle x2, which turns 4*c conv channels into c: (4*out, in, k, k) each
        _require(head_state, "input_conv.0.weight", "head input conv")
        upsamples, out_axis, factor = _indexed_weights(head_state, r"^upsample_blocks\.(\d+)\.0\.weight$"), 0, 4
    convs = _indexed_weights(head_state, r"^conv_layers\.(\d+)\.weight$")  # (out, in, k, k) each
    head = {
        "upsample_out_channels": [w.shape[out_axis] // factor for w in upsamples],
        "upsample_kernel_sizes": [w.shape[-1] for w in upsamples],
        "conv_out_channels": [w.shape[0] for w in convs],
        "conv_kernel_sizes": [w.shape[-1] for w in convs],
    }
    if not head["upsample_out_channels"]:
        raise OfficialCheckpointError(f"The {task} head has no upsampling layers; unsupported layout.")
    head = head_kwargs_for_task(task, head)
    if task == "pointmap" and "scale_conv_layers.0.weight" in head_state:
        scale_convs = _indexed_weights(head_state, r"^scale_conv_layers\.(\d+)\.weight$")
        mlp = _indexed_weights(head_state, r"^scale_final_layer\.(\d+)\.weight$")  # Linear (out, in) each
        if len(mlp) != 3 or mlp[-1].shape[0] != 1:
            raise OfficialCheckpointError(
                f"The pointmap scale MLP has {len(mlp)} linear layers; the supported layout is 3 ending in 1 output."
            )
        head.update(
            scale_conv_out_channels=[w.shape[0] for w in scale_convs],
            scale_conv_kernel_sizes=[w.shape[-1] for w in scale_convs],
            scale_final_input_size=mlp[0].shape[1],
            scale_final_hidden_sizes=[mlp[0].shape[0], mlp[1].shape[0]],
        )
    return head


def match_variant(backbone_kwargs: dict) -> str | None:
    """The official size whose hyper-parameters equal the inferred ones, if any."""
    for variant, arch in VARIANTS.items():
        if all(backbone_kwargs[key] == value for key, value in arch.items()):
            return variant
    return None


def _metadata_image_size(metadata: dict | None, stride: tuple[int, int]) -> list[int] | None:
    """`[height, width]` from a safetensors header's `image_size` entry (`"[1024, 768]"` or `"1024x768"`), if any;
    refused (one line) unless both sides are in `[1, MAX_IMAGE_SIDE]` and divisible by the feature `stride`."""
    value = (metadata or {}).get("image_size")
    if not value:
        return None
    numbers = [int(n) for n in re.findall(r"-?\d+", str(value))]
    if len(numbers) != 2:
        raise OfficialCheckpointError(f"The file's metadata image_size {value!r} is not `[height, width]`.")
    try:
        return list(check_image_size(numbers, stride, name="image_size (in the file's metadata)"))
    except ValueError as error:
        raise OfficialCheckpointError(f"{error} Fix the metadata, or pass `image_size=[height, width]`.") from None


def infer_image_size(kwargs: dict, metadata: dict | None = None) -> list[int]:
    """The input size `[height, width]` a checkpoint is meant for.

    The native size (1024x768, or 4096x3072 for the 4K model) unless the file says otherwise: an `image_size` entry
    in the safetensors metadata wins; a pointmap scale branch that does not fit the native size (its MLP is tied to
    the token grid) gets the size of the official aspect ratio that it fits.
    """
    stride = (kwargs["patch_size"] if isinstance(kwargs["patch_size"], list) else [kwargs["patch_size"]] * 2)
    window = kwargs.get("tokenizer_window_size", 4) if kwargs["num_tokenizer_layers"] else 1
    stride = (stride[0] * window, stride[1] * window)
    native = NATIVE_IMAGE_SIZES.get(kwargs.get("variant"), [4096, 3072] if kwargs["num_tokenizer_layers"] else [1024, 768])
    size = _metadata_image_size(metadata, stride)
    if size is not None:
        return size
    head = kwargs.get("head_config") or {}
    if not head.get("scale_conv_out_channels"):
        return native
    grid = (native[0] // stride[0], native[1] // stride[1])
    if pointmap_scale_features(grid, head["scale_conv_kernel_sizes"], head["scale_conv_out_channels"]) == head["scale_final_input_size"]:
        return native
    fitting = pointmap_image_sizes(head, stride, OFFICIAL_ASPECT)
    if not fitting:
        raise OfficialCheckpointError(
            f"The pointmap scale branch (MLP input {head['scale_final_input_size']}) fits no input size of the "
            f"official {OFFICIAL_ASPECT[0]}:{OFFICIAL_ASPECT[1]} aspect; pass the size it was trained at "
            "(`image_size=[height, width]`, or `--image-size HEIGHT WIDTH` on the command line)."
        )
    return fitting[-1]


def _check_filename(filename: str, kind: str, variant: str | None, kwargs: dict) -> None:
    """An official file's name `sapiens2_<size>_<task>.safetensors`, when it names a known size or task, must agree
    with what its tensors are (`kind`, the `variant` matched from the inferred `kwargs`)."""
    match = OFFICIAL_FILENAME_PATTERN.match(filename)
    if not match:
        return
    named_variant, named_task = match["variant"].replace("_", "-"), match["task"]
    if named_task != kind:
        raise OfficialCheckpointError(
            f"The file name {filename} says `{named_task}` but its tensors are a `{kind}` checkpoint."
        )
    if named_variant in VARIANTS and named_variant != variant:
        arch = VARIANTS[named_variant]
        raise OfficialCheckpointError(
            f"The file name {filename} says Sapiens2-{named_variant} (hidden {arch['hidden_size']}, "
            f"{arch['num_hidden_layers']} layers, {arch['num_attention_heads']} heads, "
            f"{arch['num_tokenizer_layers']} tokenizer layers) but its tensors have hidden "
            f"{kwargs['hidden_size']}, {kwargs['num_hidden_layers']} layers, {kwargs['num_attention_heads']} "
            f"heads, {kwargs['num_tokenizer_layers']} tokenizer layers."
        )


# Why code: official files carry no config; transformers cannot size a model from tensor shapes.
def infer_config_kwargs(
    state_dict: dict[str, torch.Tensor],
    filename: str | None = None,
    metadata: dict | None = None,
    image_size: list[int] | None = None,
) -> tuple[str, dict]:
    """Returns `(kind, config_kwargs)` for an official state dict; `kind` is `"pretrain"` or the task.

    When `filename` follows the official pattern `sapiens2_<size>_<task>.safetensors` and names a known size or
    task, the inferred architecture is cross-checked against it. `metadata` (the safetensors header) may carry the
    input size (see `infer_image_size`); an explicit `image_size` overrides both.
    """
    kind = detect_official_kind(state_dict)
    backbone_state = (
        state_dict if kind == "pretrain" else {k[len("backbone."):]: v for k, v in state_dict.items() if k.startswith("backbone.")}
    )
    kwargs = infer_backbone_config_kwargs(backbone_state)
    variant = match_variant(kwargs)
    if filename is not None:
        _check_filename(filename, kind, variant, kwargs)
    kwargs["variant"] = variant
    if kind != "pretrain":
        head_state = {k[len("decode_head."):]: v for k, v in state_dict.items() if k.startswith("decode_head.")}
        kwargs["head_config"] = infer_head_config_kwargs(kind, head_state)
        kwargs["task"] = kind
        label_kwargs = task_label_kwargs(kind)
        predictor = next(v for k, v in head_state.items() if re.match(r"^conv_[a-z]+\.weight$", k))
        num_outputs = predictor.shape[0]
        if "id2label" in label_kwargs and len(label_kwargs["id2label"]) != num_outputs:
            label_kwargs = {"num_labels": num_outputs}
        elif "id2label" not in label_kwargs:
            label_kwargs["num_labels"] = num_outputs
        kwargs.update(label_kwargs)
    # The input size the processors resize to (and the pointmap scale branch is tied to).
    kwargs["image_size"] = list(image_size) if image_size is not None else infer_image_size(kwargs, metadata)
    return kind, kwargs
