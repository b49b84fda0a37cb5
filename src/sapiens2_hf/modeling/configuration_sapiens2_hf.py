# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the sapiens2_hf models, in the shape of transformers' own (configuration_sapiens2.py).

`Sapiens2Config` and `Sapiens2HeadConfig` declare the fields, defaults and derived values of transformers' Sapiens2
configs, so a config.json written by either side reads on the other, plus what the official model needs and the port
lacks (RoPE dtype, task, head normalisation, the 4K tokenizer). Written here rather than subclassed from the port, so
that remote code works with any transformers whose public config API matches (tests/test_modeling_interop.py).
"""

import copy
import math
import operator
import os
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import StrictDataclassError
from transformers import BackboneConfigMixin, PreTrainedConfig

from .presets_sapiens2_hf import (  # noqa: F401 (the tables' import path beside the config)
    HEAD_PRESETS,
    NATIVE_IMAGE_SIZES,
    TASK_LABELS,
    TINY_HEAD_LAYOUTS,
    TINY_PRESET,
    VARIANTS,
    _TINY_HEAD_BY_UPSAMPLING,
)
from .sapiens2_tasks import TASK_NAMES, TASK_SPECS, task_of_architecture, task_spec


# transformers' own model types: config.json files of the tasks it supports are written with them, so that vanilla
# transformers loads our checkpoints; both are also read back as ours.
TRANSFORMERS_MODEL_TYPE = "sapiens2"
TRANSFORMERS_HEAD_MODEL_TYPE = "sapiens2_head"
# Derived from the task registry (sapiens2_tasks.py); kept under these names for their importers.
TASKS = TASK_NAMES
# Tasks whose checkpoints vanilla transformers can also load (None: the backbone; it has no albedo head).
TRANSFORMERS_COMPATIBLE_TASKS = (None, *(spec.name for spec in TASK_SPECS.values() if spec.in_transformers))
ROPE_DTYPES = ("bfloat16", "float32")


class InvalidConfigError(ValueError):
    """A config.json (or config dict) with a field that is not valid: names the file, the field, its value and the fix.
    The one error every reader of the config raises for a bad field (strict-dataclass errors and field checks)."""

    @classmethod
    def of(cls, error: Exception, source) -> "InvalidConfigError":
        cause = error.__cause__ if isinstance(error, StrictDataclassError) and error.__cause__ else error
        where = "the config" if source is None else _config_file(source)
        detail = str(cause).strip()
        detail += "" if detail.endswith(".") else "."
        if "register_task" in detail:  # an unregistered task: the detail says how to make it known
            return cls(f"{where}: {detail}")
        return cls(
            f"{where}: invalid field: {detail} Fix that field in the file (or re-save the model with "
            "save_pretrained from a valid config)."
        )


def _config_file(source) -> str:
    """The config.json a `from_pretrained` argument names: a folder's, a file itself, or a Hub repo's."""
    source = os.fspath(source)
    if os.path.isdir(source):
        return os.path.join(source, "config.json")
    return source if os.path.isfile(source) else f"{source} (config.json)"


def preset_names() -> list[str]:
    """The variant ids `Sapiens2Config.from_preset` accepts: the tiny preset, then the official sizes."""
    return [TINY_PRESET, *sorted(VARIANTS)]


# The head's fixed choices per upsampling kind: transposed 4x4 convolutions then 1x1 convs, or pixel shuffle with 3x3
# convolutions throughout.
_UPSAMPLING_KERNELS = {"deconv": (4, 1, False), "pixel_shuffle": (3, 3, True)}


def head_kwargs_for_task(task: str, head_channels: dict) -> dict:
    """Completes a head layout (`upsample_out_channels`, `conv_out_channels`, ...) with the task's fixed choices."""
    spec = task_spec(task)
    upsample_kernel, conv_kernel, use_pixel_shuffle = _UPSAMPLING_KERNELS[spec.head_upsampling]
    kwargs = dict(head_channels)
    kwargs.setdefault("upsample_kernel_sizes", [upsample_kernel] * len(kwargs["upsample_out_channels"]))
    kwargs.setdefault("conv_kernel_sizes", [conv_kernel] * len(kwargs.get("conv_out_channels") or []))
    kwargs["use_pixel_shuffle"] = use_pixel_shuffle
    kwargs["norm_type"] = spec.head_norm
    return kwargs


def task_label_kwargs(task: str | None) -> dict:
    """Label metadata that travels in config.json (`TASK_LABELS`, else the spec's `num_labels`), as a fresh dict."""
    if task in TASK_LABELS:
        return copy.deepcopy(TASK_LABELS[task])
    return {"num_labels": TASK_SPECS[task].num_labels} if task in TASK_SPECS else {}


def pointmap_scale_features(grid_hw: tuple[int, int], kernel_sizes, out_channels) -> int:
    """Features the pointmap scale MLP receives for a `grid_hw` token grid: the branch flattens the output of
    stride-2 convolutions (padding `(k - 1) // 2`), so its MLP is tied to the token grid it was trained on."""
    height, width = grid_hw
    for kernel_size in kernel_sizes:
        padding = (kernel_size - 1) // 2
        height = (height + 2 * padding - kernel_size) // 2 + 1
        width = (width + 2 * padding - kernel_size) // 2 + 1
    return height * width * out_channels[-1]


def pointmap_image_sizes(head: dict, feature_stride: tuple[int, int], aspect=(4, 3), max_scale: int = 512) -> list:
    """Input sizes `[height, width]` of aspect `aspect` whose token grid fits the pointmap scale branch of the
    head-config dict `head`, smallest first: a contiguous range, whose largest divides evenly through every stride-2
    conv (as the official 1024x768 models were trained)."""
    sizes = []
    for scale in range(1, max_scale + 1):
        grid = (aspect[0] * scale, aspect[1] * scale)
        features = pointmap_scale_features(grid, head["scale_conv_kernel_sizes"], head["scale_conv_out_channels"])
        if features == head["scale_final_input_size"]:
            sizes.append([grid[0] * feature_stride[0], grid[1] * feature_stride[1]])
        elif features > head["scale_final_input_size"]:
            break
    return sizes


# Bounds that refuse a corrupt or hostile config, checkpoint metadata or processor size before anything is allocated.
#: Largest input side in pixels: twice the 4K model's native height (activation memory grows with the token count^2).
MAX_IMAGE_SIDE = 8192
#: Largest model a config may describe (an upper-bound estimate from its sizes): about ten times the 5b model.
MAX_NUM_PARAMETERS = 50_000_000_000


def check_image_size(size, stride: tuple[int, int] = (1, 1), name: str = "image_size") -> tuple[int, int]:
    """`size` (an int, `[height, width]` or `{"height": h, "width": w}`) as `(height, width)`; a one-line `ValueError`
    naming `name` unless both sides are whole numbers in `[1, MAX_IMAGE_SIDE]` divisible by the feature `stride`."""
    try:
        if isinstance(size, dict):
            sides = (size["height"], size["width"])
        elif isinstance(size, (list, tuple)):
            sides = tuple(size)
        else:
            sides = (size, size)
        if len(sides) != 2 or any(isinstance(side, bool) for side in sides):
            raise TypeError
        height, width = (operator.index(side) for side in sides)
    except (TypeError, KeyError):
        raise ValueError(f"`{name}` must be an int or [height, width] of ints, got {size!r}.") from None
    if not (0 < height <= MAX_IMAGE_SIDE and 0 < width <= MAX_IMAGE_SIDE):
        raise ValueError(f"`{name}` {height}x{width} is outside [1, {MAX_IMAGE_SIDE}] pixels per side (the bound is "
                         "twice the 4K model's native 4096x3072).")
    if height % stride[0] or width % stride[1]:
        raise ValueError(f"`{name}` {height}x{width} is not divisible by the model's feature stride "
                         f"{stride[0]}x{stride[1]} (patch size, times the tokenizer window with a tokenizer).")
    return height, width


def _check_float(name: str, value, low: float, *, inclusive: bool = True, high: float = math.inf) -> None:
    """One-line `ValueError` unless `value` is a finite number in `[low, high]` (`(low, high]` if not inclusive)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value > high or (value < low if inclusive else value <= low):
        bound = f"{'>=' if inclusive else '>'} {low}" + ("" if high == math.inf else f" and <= {high}")
        raise ValueError(f"`{name}` must be a finite number {bound}, got {value!r}.")


def _check_counts(owner: str, **counts: tuple) -> None:
    """One-line `ValueError` unless every count is an int >= its minimum (`name=(value, minimum)`)."""
    for name, (value, minimum) in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{owner}`{name}` must be an int >= {minimum}, got {value!r}.")


def _head_field(head, name: str):
    return head.get(name) if isinstance(head, dict) else getattr(head, name, None)


def _head_num_parameters(head, hidden_size: int) -> int:
    """Upper-bound parameter count of a decode head (`Sapiens2Head` and the pointmap scale branch) from its layout."""
    if head is None:
        return 0
    pixel_shuffle = bool(_head_field(head, "use_pixel_shuffle"))
    total, channels = (hidden_size * hidden_size * 9 if pixel_shuffle else 0), hidden_size
    for kinds, kernel, factor in (("upsample", 4, 4 if pixel_shuffle else 1), ("conv", 1, 1)):
        out_channels = list(_head_field(head, f"{kinds}_out_channels") or [])
        kernels = _head_field(head, f"{kinds}_kernel_sizes") or [_head_field(head, f"{kinds}_kernel_size") or kernel]
        for index, out in enumerate(out_channels):
            size = kernels[min(index, len(kernels) - 1)]
            total += channels * out * factor * size * size + out * factor
            channels = out
    scale_channels, previous = list(_head_field(head, "scale_conv_out_channels") or []), hidden_size
    scale_kernels = _head_field(head, "scale_conv_kernel_sizes") or [_head_field(head, "scale_conv_kernel_size") or 1]
    for index, out in enumerate(scale_channels):
        size = scale_kernels[min(index, len(scale_kernels) - 1)]
        total += previous * out * size * size + out
        previous = out
    hidden_sizes = list(_head_field(head, "scale_final_hidden_sizes") or [])
    features = _head_field(head, "scale_final_input_size") or 0
    for out in hidden_sizes + [1]:
        total += features * out + out
        features = out
    return total + channels * 1024  # the predictor, for up to 1024 labels


def estimate_num_parameters(config) -> int:
    """Upper bound of the parameter count `config` describes (every block counted with full multi-head attention),
    from its sizes alone: what `MAX_NUM_PARAMETERS` is checked against before a model is built."""
    hidden, intermediate = config.hidden_size, config.intermediate_size
    patch_h, patch_w = _pair(config.patch_size)
    block = 4 * hidden * hidden + (3 if config.use_gated_mlp else 2) * hidden * intermediate + 8 * hidden
    window = config.tokenizer_window_size if config.num_tokenizer_layers else 0
    return (
        (config.num_hidden_layers + config.num_tokenizer_layers) * block
        + config.num_channels * patch_h * patch_w * hidden
        + (2 + config.num_register_tokens + window * window) * hidden
        + _head_num_parameters(config.head_config, hidden)
    )


@strict
class Sapiens2HeadConfig(PreTrainedConfig):
    r"""
    Decode-head configuration: the fields of transformers' `Sapiens2HeadConfig`, plus the head normalisation.

    upsample_out_channels, conv_out_channels, scale_conv_out_channels (`list[int]`, *optional*):
        Output channels of the upsampling blocks (the first takes `hidden_size` channels), of the refinement
        convolutions after them, and of the stride-2 convolutions of the pointmap scale branch (`None`: none).
    upsample_kernel_sizes, conv_kernel_sizes, scale_conv_kernel_sizes (`list[int]`, *optional*):
        One kernel size per channel entry; `None`: `upsample_kernel_size`, `conv_kernel_size`, `scale_conv_kernel_size`
        (`int`, default to 4, 1 and 1) for each.
    use_pixel_shuffle (`bool`, *optional*):
        Pixel-shuffle upsampling (3x3 input conv, conv + `PixelShuffle(2)` blocks: normal, pointmap, albedo heads);
        `None`/`False`: stride-2 transposed convolutions (pose and seg heads).
    scale_final_input_size (`int`, *optional*), scale_final_hidden_sizes (`list[int]`, *optional*):
        Features the scale MLP takes (`None`: inferred by `Sapiens2Config` from `image_size` and `patch_size`), and
        its two hidden sizes.
    norm_type (`str`, defaults to `"instance_norm"`), norm_eps (`float`, defaults to 1e-6):
        Normalisation after each head convolution: `"instance_norm"` (no affine parameters; official pose, seg,
        normal, pointmap heads) or `"rms_norm"` (channel RMSNorm with a learnable weight and `norm_eps`; albedo).
    """

    # transformers' head model type, so that vanilla transformers reads our config.json unchanged.
    model_type = TRANSFORMERS_HEAD_MODEL_TYPE
    base_config_key = "head_config"

    upsample_out_channels: list[int] | None = None
    upsample_kernel_sizes: list[int] | None = None
    upsample_kernel_size: int = 4
    use_pixel_shuffle: bool | None = None
    conv_out_channels: list[int] | None = None
    conv_kernel_sizes: list[int] | None = None
    conv_kernel_size: int = 1
    scale_conv_out_channels: list[int] | None = None
    scale_conv_kernel_sizes: list[int] | None = None
    scale_conv_kernel_size: int = 1
    scale_final_input_size: int | None = None
    scale_final_hidden_sizes: list[int] | None = None
    norm_type: Literal["instance_norm", "rms_norm"] = "instance_norm"
    norm_eps: float = 1e-6

    def __post_init__(self, **kwargs):
        self.validate_head_numbers()  # before the kernel lists are sized from the channel lists
        for layers in ("upsample", "conv", "scale_conv"):
            channels = getattr(self, f"{layers}_out_channels")
            if channels is not None and getattr(self, f"{layers}_kernel_sizes") is None:
                setattr(self, f"{layers}_kernel_sizes", [getattr(self, f"{layers}_kernel_size")] * len(channels))
        super().__post_init__(**kwargs)

    def validate_head_numbers(self):
        """Channels and kernel sizes are ints >= 1, `norm_eps` a finite number > 0."""
        _check_float("head_config.norm_eps", self.norm_eps, 0.0, inclusive=False)
        for name in ("upsample_out_channels", "upsample_kernel_sizes", "conv_out_channels", "conv_kernel_sizes",
                     "scale_conv_out_channels", "scale_conv_kernel_sizes", "scale_final_hidden_sizes"):
            for value in getattr(self, name) or []:
                _check_counts("head_config.", **{name: (value, 1)})
        _check_counts("head_config.", upsample_kernel_size=(self.upsample_kernel_size, 1),
                      conv_kernel_size=(self.conv_kernel_size, 1),
                      scale_conv_kernel_size=(self.scale_conv_kernel_size, 1))
        if self.scale_final_input_size is not None:
            _check_counts("head_config.", scale_final_input_size=(self.scale_final_input_size, 1))

    def infer_scale_final_input_size(self, image_size, patch_size) -> None:
        """Sets `scale_final_input_size` (when unset) to what the scale branch gives for an `image_size` input."""
        if self.scale_final_input_size is not None or not self.scale_conv_out_channels:
            return
        image_h, image_w = _pair(image_size)
        patch_h, patch_w = _pair(patch_size)
        self.scale_final_input_size = pointmap_scale_features(
            (image_h // patch_h, image_w // patch_w), self.scale_conv_kernel_sizes, self.scale_conv_out_channels
        )


def _pair(size) -> tuple[int, int]:
    """`16` -> `(16, 16)`; `[1024, 768]` -> `(1024, 768)`."""
    return (size, size) if isinstance(size, int) else (size[0], size[1])


@strict
class Sapiens2Config(BackboneConfigMixin, PreTrainedConfig):
    r"""
    Configuration of the Sapiens2 backbone and task models: every field of transformers' `Sapiens2Config`, same
    meaning and default except `layerscale_value` and `pos_embed_rescale`, plus what the official models need.

    patch_size (`int` or `list[int]`, defaults to 16), num_channels (`int`, defaults to 3):
        Side (or `[height, width]`) of the patches of the patch embedding, and input channels.
    hidden_size (`int`, defaults to 1024), intermediate_size (`int`, *optional*):
        Width of the tokens and blocks, and hidden width of the MLPs (`None`: `4 * hidden_size`).
    num_hidden_layers (`int`, defaults to 24), num_attention_heads (`int`, defaults to 16):
        Encoder blocks (not counting the 4K tokenizer's), and query heads per block; the head dim must be divisible
        by 4 (2-D RoPE).
    hidden_act (`str`, defaults to `"silu"`):
        Activation (`silu`, `gelu` or `relu`) of the MLPs, the decode heads and the pointmap scale MLP.
    attention_dropout, drop_path_rate (`float`, default to 0.0):
        Dropout on the attention weights, and stochastic-depth probability of every residual branch, in training.
    initializer_range (`float`, defaults to 0.02), rope_theta (`float`, defaults to 100.0):
        Std of the truncated-normal initialisation, and base of the RoPE periods `rope_theta ** (4 j / head_dim)`.
    image_size (`int` or `list[int]`, defaults to 224):
        `[height, width]` the model is meant for; the pointmap scale branch is sized from it.
    query_bias, key_bias, value_bias, proj_bias, mlp_bias (`bool`, default to `True`):
        Biases of the query, key, value and output projections and of the MLP linears.
    layerscale_value (`float`, defaults to 1e-4):
        Initial LayerScale on the attention branch (transformers' default is 1.0).
    use_gated_mlp (`bool`, defaults to `True`), num_register_tokens (`int`, defaults to 8):
        SwiGLU MLP instead of a plain two-layer one, and register tokens between the CLS and the patch tokens.
    pos_embed_shift, pos_embed_jitter, pos_embed_rescale (`float`, *optional*):
        Training-time RoPE coordinate augmentation: shift in `[-shift, shift]`, log-uniform per-axis scaling in
        `[1/jitter, jitter]` and rescaling in `[1/rescale, rescale]`. Rescaling is off by default, as in the official
        fine-tuning code (transformers' port defaults to 2.0).
    reshape_hidden_states (`bool`, defaults to `True`):
        `Sapiens2Backbone` returns `(batch_size, hidden_size, grid_h, grid_w)` maps; `False`: the patch tokens.
    normalize_backbone_outputs (`bool`, defaults to `True`):
        `Sapiens2Backbone` applies the final RMSNorm to every stage it returns (`False`: to none).
    use_mask_token (`bool`, defaults to `False`):
        A learned mask token that replaces the patch embeddings selected by `bool_masked_pos`.
    rms_norm_eps (`float`, defaults to 1e-6), use_qk_norm (`bool`, defaults to `True`):
        Epsilon of the backbone's RMSNorms, and RMSNorm on each head's queries and keys before RoPE.
    num_key_value_heads_per_layer (`list[int]`, *optional*):
        Key/value heads of each block; `None`: `num_attention_heads` in the first `num_first_full_attention_layers`
        and last `num_last_full_attention_layers` blocks (default to 8), `num_key_value_attention_heads` (`None`:
        `num_attention_heads // 2`) in the others (grouped-query attention).
    semantic_loss_ignore_index (`int`, defaults to 255):
        Label ignored by the segmentation loss (transformers' field of that name).
    flip_pairs, skeleton (`list[list[int]]`, *optional*), oks_sigmas (`list[float]`, *optional*):
        A pose model's keypoint set: `[left, right]` index pairs that swap under a horizontal flip, 0-based links
        drawn, per-keypoint OKS sigmas; `None` with 308 keypoints: the official ones (`sapiens2_hf.data.keypoint_sets`).
    head_config (`Sapiens2HeadConfig` or `dict`, *optional*):
        The decode-head layout.
    out_features (`list[str]`, *optional*), out_indices (`list[int]`, *optional*):
        Stages `Sapiens2Backbone` returns, by name or index in `stage_names` (`"stem"`, `"stage1"` ...); default to
        the last one. Set one or both (they must agree).
    rope_dtype (`str`, defaults to `"bfloat16"`):
        Dtype of all RoPE arithmetic (periods, coordinates, angles, sin/cos, the rotation of queries and keys). The
        official model always runs RoPE in bfloat16; `"float32"` matches the official fp32 build and transformers.
    task (`str`, *optional*):
        The registered task (`"pose"`, `"seg"`, ...; `None`: the bare backbone): it picks the model class and head
        layout, and a checkpoint of one task refuses to load into the class of another.
    variant (`str`, *optional*):
        The official size this configuration follows (`"0.1b"`, `"0.4b"`, `"0.8b"`, `"1b"`, `"1b-4k"`, `"5b"`).
    num_tokenizer_layers (`int`, defaults to 0), tokenizer_window_size (`int`, defaults to 4):
        The windowed tokenizer of the hierarchical 4K model (0 layers: none). Each `window^2`-patch window, with a
        shared window-CLS token and a learned local position embedding, runs through these layers (full attention,
        no QK-norm, LayerScale or RoPE) and is pooled into one encoder token (stride 16 x window size).
    tokenizer_chunk_size (`int`, defaults to 1024):
        Most windows the tokenizer processes at once: bounds its peak memory without changing the outputs.
    """

    model_type = "sapiens2_hf"
    sub_configs_defaults = {"head_config": Sapiens2HeadConfig}

    # The fields of transformers' Sapiens2Config, in its order and with its defaults (except the two noted).
    patch_size: int | list[int] | tuple[int, int] = 16
    hidden_size: int = 1024
    intermediate_size: int | None = None  # derived: 4 * hidden_size (transformers: 4096, the same at its default)
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    hidden_act: str = "silu"
    attention_dropout: float | int = 0.0
    initializer_range: float = 0.02
    rope_theta: float = 100.0
    image_size: int | list[int] | tuple[int, int] = 224
    num_channels: int = 3
    query_bias: bool = True
    key_bias: bool = True
    value_bias: bool = True
    proj_bias: bool = True
    mlp_bias: bool = True
    layerscale_value: float = 1e-4  # transformers: 1.0; the official models use 1e-4
    drop_path_rate: float | int = 0.0
    use_gated_mlp: bool = True
    num_register_tokens: int = 8
    pos_embed_shift: float | None = None
    pos_embed_jitter: float | None = None
    pos_embed_rescale: float | None = None  # transformers: 2.0; the official fine-tuning code never rescales
    # Stored by `BackboneConfigMixin`; written to config.json as `out_features` and `out_indices`.
    _out_features: list[str] | None = None
    _out_indices: list[int] | None = None
    reshape_hidden_states: bool = True
    use_mask_token: bool = False
    rms_norm_eps: float = 1e-6
    normalize_backbone_outputs: bool = True
    use_qk_norm: bool = True
    num_key_value_heads_per_layer: list[int] | None = None
    num_key_value_attention_heads: int | None = None  # derived: num_attention_heads // 2 (transformers: 8, the same)
    num_first_full_attention_layers: int = 8
    num_last_full_attention_layers: int = 8
    semantic_loss_ignore_index: int = 255
    flip_pairs: list[list[int]] | None = None
    head_config: Sapiens2HeadConfig | dict | None = None
    # Ours.
    skeleton: list[list[int]] | None = None
    oks_sigmas: list[float] | None = None
    rope_dtype: str = "bfloat16"
    task: str | None = None
    variant: str | None = None
    num_tokenizer_layers: int = 0
    tokenizer_window_size: int = 4
    tokenizer_chunk_size: int = 1024

    #: A check of the weights files beside a config that transformers' Auto classes or pipeline factory read
    #: (`from_dict(..., name_or_path=...)`), set by the loader (loading_sapiens2_hf.py, which imports this module): a corrupt file is its one error.
    check_weights_beside: ClassVar[Callable[[Any], None] | None] = None

    def __post_init__(self, **kwargs):
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.hidden_size
        if self.num_key_value_attention_heads is None:
            self.num_key_value_attention_heads = max(self.num_attention_heads // 2, 1)
        # Before anything is sized from the fields (the stage names and per-layer lists below, then the model): a
        # config.json with `num_hidden_layers: 1e9` must fail here, not allocate.
        self.validate_sizes_and_values()
        self.stage_names = ["stem"] + [f"stage{index}" for index in range(1, self.num_hidden_layers + 1)]
        self.set_output_features_output_indices(
            out_indices=kwargs.pop("out_indices", None), out_features=kwargs.pop("out_features", None)
        )
        super().__post_init__(**kwargs)  # also turns a `head_config` dict into a Sapiens2HeadConfig
        if self.num_key_value_heads_per_layer is None:
            self.num_key_value_heads_per_layer = [
                self.num_attention_heads
                if index < self.num_first_full_attention_layers
                or index >= self.num_hidden_layers - self.num_last_full_attention_layers
                else self.num_key_value_attention_heads
                for index in range(self.num_hidden_layers)
            ]
        if self.head_config is not None:
            self.head_config.infer_scale_final_input_size(self.image_size, self.patch_size)

    def validate_sizes_and_values(self):
        """A one-line `ValueError` naming the field unless sizes and counts are ints in range, floats finite and in
        range, `image_size` valid (`check_image_size`) and the model at most `MAX_NUM_PARAMETERS`. Runs before anything
        is sized from these fields, and again with every `validate()`."""
        _check_counts(
            "", hidden_size=(self.hidden_size, 1), intermediate_size=(self.intermediate_size, 1),
            num_hidden_layers=(self.num_hidden_layers, 1), num_attention_heads=(self.num_attention_heads, 1),
            num_channels=(self.num_channels, 1), num_register_tokens=(self.num_register_tokens, 0),
            num_key_value_attention_heads=(self.num_key_value_attention_heads, 1),
            num_first_full_attention_layers=(self.num_first_full_attention_layers, 0),
            num_last_full_attention_layers=(self.num_last_full_attention_layers, 0),
            num_tokenizer_layers=(self.num_tokenizer_layers, 0), tokenizer_window_size=(self.tokenizer_window_size, 1),
            tokenizer_chunk_size=(self.tokenizer_chunk_size, 1),
        )
        for side in (self.patch_size,) if isinstance(self.patch_size, int) else tuple(self.patch_size):
            _check_counts("", patch_size=(side, 1))
        if not isinstance(self.patch_size, int) and len(self.patch_size) != 2:
            raise ValueError(f"`patch_size` must be an int or [height, width], got {self.patch_size!r}.")
        _check_float("rms_norm_eps", self.rms_norm_eps, 0.0, inclusive=False)
        _check_float("rope_theta", self.rope_theta, 0.0, inclusive=False)
        _check_float("initializer_range", self.initializer_range, 0.0)
        _check_float("layerscale_value", self.layerscale_value, -math.inf)
        _check_float("attention_dropout", self.attention_dropout, 0.0, high=1.0)
        _check_float("drop_path_rate", self.drop_path_rate, 0.0, high=1.0)
        if self.pos_embed_shift is not None:
            _check_float("pos_embed_shift", self.pos_embed_shift, 0.0)
        for name in ("pos_embed_jitter", "pos_embed_rescale"):  # log-uniform factors in [1 / value, value]
            if getattr(self, name) is not None:
                _check_float(name, getattr(self, name), 1.0)
        check_image_size(self.image_size, self.feature_stride)
        num_parameters = estimate_num_parameters(self)
        if num_parameters > MAX_NUM_PARAMETERS:
            raise ValueError(
                f"The config describes a model of about {num_parameters:.3g} parameters (hidden_size "
                f"{self.hidden_size}, intermediate_size {self.intermediate_size}, {self.num_hidden_layers} layers), "
                f"over the {MAX_NUM_PARAMETERS:.0e} this library builds; the config.json is corrupt or not a Sapiens2 "
                "one."
            )

    def validate_sapiens2_hf_fields(self):
        if self.rope_dtype not in ROPE_DTYPES:
            raise ValueError(f"`rope_dtype` must be one of {ROPE_DTYPES}, got {self.rope_dtype!r}.")
        if self.task is not None and self.task not in TASKS:
            architecture = (self.architectures or [None])[0]
            raise ValueError(
                f"`task` is {self.task!r}{f' (architecture {architecture})' if architecture else ''}, which is not a "
                f"registered task here (registered: {tuple(TASKS)}). If a package provides it, install that package "
                f"(it declares the task in the entry-point group `sapiens2_hf.tasks`) or call "
                f"`sapiens2_hf.register_task(<its model class>)` before loading; otherwise set `task` to one of the "
                "registered tasks or null (the backbone)."
            )
        head_dim, remainder = divmod(self.hidden_size, self.num_attention_heads)
        if remainder or head_dim % 4:
            raise ValueError(
                f"`hidden_size` ({self.hidden_size}) must be a multiple of `num_attention_heads` "
                f"({self.num_attention_heads}) with a head dim divisible by 4 (2-D RoPE uses head_dim / 4 periods)."
            )
        if len(self.num_key_value_heads_per_layer) != self.num_hidden_layers:
            raise ValueError(
                f"`num_key_value_heads_per_layer` has {len(self.num_key_value_heads_per_layer)} entries for "
                f"{self.num_hidden_layers} layers."
            )
        for layer_index, num_kv_heads in enumerate(self.num_key_value_heads_per_layer):
            if num_kv_heads <= 0 or self.num_attention_heads % num_kv_heads:
                raise ValueError(
                    f"Layer {layer_index} has {num_kv_heads} key/value heads, which does not divide "
                    f"{self.num_attention_heads} attention heads."
                )

    @property
    def uses_tokenizer(self) -> bool:
        return self.num_tokenizer_layers > 0

    @property
    def feature_stride(self) -> tuple[int, int]:
        """Input pixels per encoder token along (height, width): the patch size, times the window with a tokenizer."""
        patch_h, patch_w = self.patch_size_hw
        window = self.tokenizer_window_size if self.uses_tokenizer else 1
        return patch_h * window, patch_w * window

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_prefix_tokens(self) -> int:
        """CLS token plus register tokens, which precede the patch tokens in the sequence."""
        return 1 + self.num_register_tokens

    @property
    def patch_size_hw(self) -> tuple[int, int]:
        return _pair(self.patch_size)

    @property
    def image_size_hw(self) -> tuple[int, int]:
        return _pair(self.image_size)

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        """Reads our config (`model_type` `sapiens2_hf`) or transformers' (`sapiens2`, without our `rope_dtype`
        field: its RoPE rescale default 2.0, which the official models never used, is dropped). A config without a
        `task` (transformers' has none) takes the task of its `architectures`."""
        config_dict = dict(config_dict)
        model_type = config_dict.pop("model_type", cls.model_type)
        if model_type == TRANSFORMERS_MODEL_TYPE and "rope_dtype" not in config_dict:
            config_dict.pop("pos_embed_rescale", None)
        source = kwargs.pop("_config_source", None)
        if source is None and kwargs.get("name_or_path") is not None:
            # read by transformers' Auto classes or pipeline factory (which pass `name_or_path`); the factory tries
            # its classes one after another and meets a corrupt weights file in safetensors' reader (with
            # transformers' own class, after ours refused it): the weights beside the config are checked here, first
            source = kwargs["name_or_path"]
            if cls.check_weights_beside is not None:
                cls.check_weights_beside(source)
        if "task" not in config_dict:
            config_dict["task"] = task_of_architecture((config_dict.get("architectures") or [None])[0])
        try:
            return super().from_dict(config_dict, **kwargs)
        except InvalidConfigError:
            raise
        except (StrictDataclassError, ValueError, TypeError) as error:
            raise InvalidConfigError.of(error, source) from None

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        config_dict, kwargs = cls.get_config_dict(pretrained_model_name_or_path, **kwargs)
        kwargs["_config_source"] = pretrained_model_name_or_path
        model_type = config_dict.get("model_type")
        if model_type not in (None, cls.model_type, TRANSFORMERS_MODEL_TYPE):
            raise ValueError(
                f"{pretrained_model_name_or_path} holds a `{model_type}` config (config.json model_type), not a "
                f"Sapiens2 one (model_type `{cls.model_type}`, or transformers' `{TRANSFORMERS_MODEL_TYPE}`); load it "
                "with the class of its model type, or point to a Sapiens2 checkpoint."
            )
        return cls.from_dict(config_dict, **kwargs)

    @classmethod
    def from_preset(cls, variant: str, task: str | None = None, **kwargs) -> "Sapiens2Config":
        """The configuration of an official model: `variant` one of `"0.1b"`, `"0.4b"`, `"0.8b"`, `"1b"`, `"5b"`,
        `"1b-4k"` (ids as on the Hub) or `"tiny"` (`tiny_config`, no weights); `task` a registered task or `None` (the
        backbone; 0.1b has no official task heads, matting only a 1b one); `kwargs` override any field."""
        _check_task(task)
        if variant == TINY_PRESET:
            return tiny_config(task, **kwargs)
        if variant not in VARIANTS:
            raise ValueError(f"Unknown Sapiens2 variant {variant!r}; choose one of {preset_names()}.")
        if task is not None and variant not in HEAD_PRESETS.get(task, {}):
            raise ValueError(
                f"There is no official {task} head for Sapiens2-{variant}; sizes with one: "
                f"{sorted(HEAD_PRESETS.get(task, {}))}."
            )
        arch = VARIANTS[variant]
        config_kwargs = {
            **arch,
            "image_size": NATIVE_IMAGE_SIZES.get(variant, [1024, 768]),
            "variant": variant,
            "task": task,
        }
        if task is not None:
            config_kwargs["head_config"] = head_kwargs_for_task(task, HEAD_PRESETS[task][variant])
            config_kwargs.update(task_label_kwargs(task))
        config_kwargs.update(kwargs)
        return cls(**config_kwargs)


# Why code: transformers' pipeline factory reads config.json with its own `sapiens2` config class.
def as_sapiens2_config(config):
    """`config` as our `Sapiens2Config` (`None` stays `None`): transformers' own is re-read from its dict, keeping our
    fields it carries along (RoPE dtype, tokenizer, task); a config of another model is refused."""
    if config is None or isinstance(config, Sapiens2Config):
        return config
    if getattr(config, "model_type", None) not in (Sapiens2Config.model_type, TRANSFORMERS_MODEL_TYPE):
        raise ValueError(
            f"Sapiens2 models need a Sapiens2 config, got a `{getattr(config, 'model_type', type(config).__name__)}` "
            "one; build it with sapiens2_hf.Sapiens2Config (e.g. `Sapiens2Config.from_preset`)."
        )
    converted = Sapiens2Config.from_dict(config.to_dict())
    if config._attn_implementation is not None:  # not part of to_dict; set by the parent model or the pipeline
        converted._attn_implementation = config._attn_implementation
    return converted


def _check_task(task: str | None) -> None:
    """A ValueError naming the registered tasks (and None, the backbone) for an unknown task."""
    if task is not None and task not in TASK_SPECS:
        raise ValueError(f"Unknown task {task!r}; choose one of {TASKS} or None for the backbone.")


def tiny_config(task: str | None = None, **overrides) -> Sapiens2Config:
    """A tiny configuration for tests and examples: hidden 32, 2 layers, 4 heads of dim 8, input 64x48 (256x192 with
    a 4K tokenizer), the tiny heads of presets_sapiens2_hf.py."""
    kwargs = {
        "hidden_size": 32,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_attention_heads": 2,
        "image_size": [64, 48],
        "task": task,
        "variant": None,
    }
    if task is not None:
        layout = TINY_HEAD_LAYOUTS.get(task) or _TINY_HEAD_BY_UPSAMPLING[task_spec(task).head_upsampling]
        kwargs["head_config"] = head_kwargs_for_task(task, layout)
        kwargs.update(task_label_kwargs(task))
    if overrides.get("num_tokenizer_layers"):
        # the stride-64 features of a tokenizer need a multiple of 64: 4x3 windows
        kwargs["image_size"] = [256, 192]
    kwargs.update(overrides)
    return Sapiens2Config(**kwargs)
