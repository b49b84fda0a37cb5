"""The official Sapiens2 checkpoint format (facebookresearch/sapiens2 state-dict layout), read at run time.

Two layouts exist: pretrain files hold the bare backbone state dict with no prefix; task files hold the estimator state
dict with `backbone.` and `decode_head.` prefixes. This module infers the architecture from tensor shapes (official
files carry no config), checks the stored RoPE periods, and renames the tensors to the transformers layout that our
classes share with transformers' own Sapiens2 port. `from_pretrained` uses it directly on official files (see
loading_sapiens2_hf.py); `sapiens2-hf convert` (sapiens2_hf.hub.convert_official) writes the result as a folder.

Hub-shippable: imports only stdlib, torch and siblings of this folder.
"""

import math
import re

import torch

from .configuration_sapiens2_hf import (
    NATIVE_IMAGE_SIZES,
    VARIANTS,
    head_kwargs_for_task,
    pointmap_image_sizes,
    pointmap_scale_features,
    task_label_kwargs,
)
from .sapiens2_tasks import PRETRAIN_TASK, TASK_NAMES, task_spec


# Name of the last 1x1 conv of each official head (`decode_head.conv_<task>`), which tells the task of a checkpoint.
PREDICTOR_TASKS = {f"conv_{task}": task for task in TASK_NAMES}
# `sapiens2_<size>_<task>.safetensors`. The size token is free-form (`1b`, `1b_4k`, `custom_4k`, `tinyp`): files of
# sizes the table does not know are found and loaded like the others; known sizes are cross-checked with the tensors.
OFFICIAL_FILENAME_PATTERN = re.compile(
    r"^sapiens2_(?P<variant>[A-Za-z0-9.]+(?:[_-][A-Za-z0-9.]+)*?)_(?P<task>"
    + "|".join((PRETRAIN_TASK, *TASK_NAMES)) + r")\.safetensors$"
)
# Tensor names of the original layout: a bare backbone, or the `backbone.` / `decode_head.conv_<task>.` task layout.
ORIGINAL_NAME_PATTERN = re.compile(
    r"^(backbone\.|decode_head\.(" + "|".join(PREDICTOR_TASKS) + r")\.|cls_token$|storage_tokens$|blocks\.\d+\.)"
)
# The aspect ratio (height:width) of the official input size, 1024x768.
OFFICIAL_ASPECT = (4, 3)

_BACKBONE_RENAMES = (
    (re.compile(r"^cls_token$"), "embeddings.cls_token"),
    (re.compile(r"^storage_tokens$"), "embeddings.register_tokens"),
    (re.compile(r"^patch_embed\.projection\.(weight|bias)$"), r"embeddings.patch_embeddings.\1"),
    (re.compile(r"^ln1\.weight$"), "norm.weight"),
    (re.compile(r"^blocks\.(\d+)\.ln1\.weight$"), r"model.layer.\1.norm1.weight"),
    (re.compile(r"^blocks\.(\d+)\.ln2\.weight$"), r"model.layer.\1.norm2.weight"),
    (re.compile(r"^blocks\.(\d+)\.attn\.wq\.(weight|bias)$"), r"model.layer.\1.attention.q_proj.\2"),
    (re.compile(r"^blocks\.(\d+)\.attn\.wk\.(weight|bias)$"), r"model.layer.\1.attention.k_proj.\2"),
    (re.compile(r"^blocks\.(\d+)\.attn\.wv\.(weight|bias)$"), r"model.layer.\1.attention.v_proj.\2"),
    (re.compile(r"^blocks\.(\d+)\.attn\.proj\.(weight|bias)$"), r"model.layer.\1.attention.o_proj.\2"),
    (re.compile(r"^blocks\.(\d+)\.attn\.q_norm\.weight$"), r"model.layer.\1.attention.q_norm.weight"),
    (re.compile(r"^blocks\.(\d+)\.attn\.k_norm\.weight$"), r"model.layer.\1.attention.k_norm.weight"),
    (re.compile(r"^blocks\.(\d+)\.attn\.gamma\.weight$"), r"model.layer.\1.layer_scale1.lambda1"),
    (re.compile(r"^blocks\.(\d+)\.ffn\.w3\.(weight|bias)$"), r"model.layer.\1.mlp.down_proj.\2"),
)
# The fused SwiGLU input projection: the first half of its rows is the SiLU-gated branch.
_FUSED_GATE_UP = re.compile(r"^blocks\.(\d+)\.ffn\.w12\.(weight|bias)$")


def _deconv_head_renames():
    return (
        (re.compile(r"^deconv_layers\.(\d+)\.weight$"), lambda m: f"upsample_layers.{int(m[1]) // 3}.convolution.weight"),
        (re.compile(r"^conv_layers\.(\d+)\.(weight|bias)$"), lambda m: f"conv_layers.{int(m[1]) // 3}.convolution.{m[2]}"),
    )


def _pixel_shuffle_head_renames():
    return (
        (re.compile(r"^input_conv\.0\.(weight|bias)$"), lambda m: f"input_conv.convolution.{m[1]}"),
        (re.compile(r"^input_conv\.1\.norm\.weight$"), lambda m: "input_conv.norm.weight"),
        (re.compile(r"^upsample_blocks\.(\d+)\.0\.(weight|bias)$"), lambda m: f"upsample_layers.{m[1]}.convolution.{m[2]}"),
        (re.compile(r"^upsample_blocks\.(\d+)\.2\.norm\.weight$"), lambda m: f"upsample_layers.{m[1]}.norm.weight"),
        (re.compile(r"^conv_layers\.(\d+)\.(weight|bias)$"), lambda m: f"conv_layers.{int(m[1]) // 3}.convolution.{m[2]}"),
        (re.compile(r"^conv_layers\.(\d+)\.norm\.weight$"), lambda m: f"conv_layers.{int(m[1]) // 3}.norm.weight"),
    )


_SCALE_HEAD_RENAMES = (
    (re.compile(r"^scale_conv_layers\.(\d+)\.(weight|bias)$"), lambda m: f"scale_head.conv_layers.{int(m[1]) // 3}.convolution.{m[2]}"),
    (re.compile(r"^scale_final_layer\.1\.(weight|bias)$"), lambda m: f"scale_head.predictor.block1.layers.0.{m[1]}"),
    (re.compile(r"^scale_final_layer\.3\.(weight|bias)$"), lambda m: f"scale_head.predictor.block2.layers.0.{m[1]}"),
    (re.compile(r"^scale_final_layer\.5\.(weight|bias)$"), lambda m: f"scale_head.predictor.proj.{m[1]}"),
)


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
    tokenizer_kwargs = {"num_tokenizer_layers": 0}
    if any(key.startswith("tokenizer.") for key in backbone_state):
        window_positions = _require(backbone_state, "tokenizer.local_pos_embed", "4K tokenizer position embedding").shape[1] - 1
        window = math.isqrt(window_positions)
        if window * window != window_positions:
            raise OfficialCheckpointError(f"The 4K tokenizer has {window_positions} local positions, not a square window.")
        tokenizer_layers = {int(m[1]) for key in backbone_state if (m := re.match(r"^tokenizer\.blocks\.(\d+)\.", key))}
        if "tokenizer.blocks.0.attn.q_norm.weight" in backbone_state or "tokenizer.blocks.0.attn.gamma.weight" in backbone_state:
            raise OfficialCheckpointError("The 4K tokenizer blocks have QK-norm or LayerScale weights; unsupported layout.")
        tokenizer_kwargs = {"num_tokenizer_layers": len(tokenizer_layers), "tokenizer_window_size": window}
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


def _indexed_weights(head_state, pattern):
    found = {}
    for key, tensor in head_state.items():
        match = re.match(pattern, key)
        if match:
            found[int(match[1])] = tensor
    return [found[index] for index in sorted(found)]


def infer_head_config_kwargs(task: str, head_state: dict[str, torch.Tensor]) -> dict:
    """Infers a task head's layout (channels and kernel sizes) from the shapes of its official `decode_head.*` state."""
    if task_spec(task).head_upsampling == "deconv":
        deconvs = _indexed_weights(head_state, r"^deconv_layers\.(\d+)\.weight$")  # (in, out, k, k) each
        convs = _indexed_weights(head_state, r"^conv_layers\.(\d+)\.weight$")  # (out, in, k, k) each
        head = {
            "upsample_out_channels": [w.shape[1] for w in deconvs],
            "upsample_kernel_sizes": [w.shape[-1] for w in deconvs],
            "conv_out_channels": [w.shape[0] for w in convs],
            "conv_kernel_sizes": [w.shape[-1] for w in convs],
        }
    else:
        _require(head_state, "input_conv.0.weight", "head input conv")
        upsamples = _indexed_weights(head_state, r"^upsample_blocks\.(\d+)\.0\.weight$")  # (4*out, in, k, k) each
        convs = _indexed_weights(head_state, r"^conv_layers\.(\d+)\.weight$")
        head = {
            # Pixel shuffle x2 turns 4*c conv channels into c output channels.
            "upsample_out_channels": [w.shape[0] // 4 for w in upsamples],
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


def _metadata_image_size(metadata: dict | None) -> list[int] | None:
    """`[height, width]` from a safetensors header's `image_size` entry (`"[1024, 768]"` or `"1024x768"`), if any."""
    value = (metadata or {}).get("image_size")
    if not value:
        return None
    numbers = [int(n) for n in re.findall(r"\d+", str(value))]
    if len(numbers) != 2:
        raise OfficialCheckpointError(f"The file's metadata image_size {value!r} is not `[height, width]`.")
    return numbers


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
    size = _metadata_image_size(metadata)
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
        match = OFFICIAL_FILENAME_PATTERN.match(filename)
        if match:
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


def _rename(key, renames):
    for pattern, target in renames:
        match = pattern.match(key)
        if match:
            return target(match) if callable(target) else match.expand(target)
    return None


def _rename_tokenizer_key(key: str) -> str | None:
    """4K tokenizer tensors: its blocks use the encoder block's names (without QK-norm and LayerScale)."""
    if key == "tokenizer.local_pos_embed":
        return "tokenizer.local_pos_embed"
    if key == "tokenizer.w_cls":
        return "tokenizer.window_cls"
    match = re.match(r"^tokenizer\.(blocks\..*)$", key)
    if not match:
        return None
    block_key = match[1]
    fused = _FUSED_GATE_UP.match(block_key)
    if fused:
        return None  # handled by the caller, which splits the fused projection
    new_key = _rename(block_key, _BACKBONE_RENAMES)
    return None if new_key is None else "tokenizer." + new_key[len("model."):]


def convert_backbone_state_dict(backbone_state: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """Renames an official backbone state dict to our (= transformers') layout. Drops the RoPE `periods` buffer,
    which our model recomputes exactly (see `Sapiens2RopePositionEmbedding`)."""
    converted, unknown = {}, []
    for key, tensor in backbone_state.items():
        if key == "rope_embed.periods":
            continue
        tokenizer_fused = re.match(r"^tokenizer\.blocks\.(\d+)\.ffn\.w12\.(weight|bias)$", key)
        if tokenizer_fused:
            gate, up = tensor.chunk(2, dim=0)
            converted[f"{prefix}tokenizer.layer.{tokenizer_fused[1]}.mlp.gate_proj.{tokenizer_fused[2]}"] = gate.contiguous()
            converted[f"{prefix}tokenizer.layer.{tokenizer_fused[1]}.mlp.up_proj.{tokenizer_fused[2]}"] = up.contiguous()
            continue
        if key.startswith("tokenizer."):
            new_key = _rename_tokenizer_key(key)
            if new_key is None:
                unknown.append(key)
            else:
                converted[prefix + new_key] = tensor
            continue
        fused = _FUSED_GATE_UP.match(key)
        if fused:
            gate, up = tensor.chunk(2, dim=0)
            converted[f"{prefix}model.layer.{fused[1]}.mlp.gate_proj.{fused[2]}"] = gate.contiguous()
            converted[f"{prefix}model.layer.{fused[1]}.mlp.up_proj.{fused[2]}"] = up.contiguous()
            continue
        new_key = _rename(key, _BACKBONE_RENAMES)
        if new_key is None:
            unknown.append(key)
        else:
            converted[prefix + new_key] = tensor
    if unknown:
        raise OfficialCheckpointError(f"Unknown backbone tensors in the official file: {sorted(unknown)[:20]}")
    return converted


def convert_official_state_dict(state_dict: dict[str, torch.Tensor], kind: str) -> dict[str, torch.Tensor]:
    """Converts a whole official file (pretrain or task) to the state dict of our backbone or task model."""
    if kind == "pretrain":
        return convert_backbone_state_dict(state_dict)
    backbone_state = {k[len("backbone."):]: v for k, v in state_dict.items() if k.startswith("backbone.")}
    converted = convert_backbone_state_dict(backbone_state, prefix="model.")
    head_renames = _deconv_head_renames() if task_spec(kind).head_upsampling == "deconv" else _pixel_shuffle_head_renames()
    predictor = f"conv_{kind}"
    unknown = []
    for key, tensor in state_dict.items():
        if key.startswith("backbone."):
            continue
        if not key.startswith("decode_head."):
            unknown.append(key)
            continue
        local = key[len("decode_head."):]
        if local.startswith(predictor + "."):
            converted["decode_head.predictor." + local[len(predictor) + 1:]] = tensor
            continue
        if kind == "pointmap" and local.startswith("scale_"):
            new_key = _rename(local, _SCALE_HEAD_RENAMES)
            if new_key is not None:
                converted[new_key] = tensor
                continue
        new_key = _rename(local, head_renames)
        if new_key is None:
            unknown.append(key)
        else:
            converted["decode_head." + new_key] = tensor
    if unknown:
        raise OfficialCheckpointError(f"Unknown tensors in the official {kind} file: {sorted(unknown)[:20]}")
    return converted
