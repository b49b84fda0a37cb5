# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The building blocks of the Sapiens2 models: norms, MLPs, patch embeddings, RoPE in the official arithmetic,
attention through transformers' `ALL_ATTENTION_FUNCTIONS`, the transformer layer, the task heads and the 4K windowed
tokenizer, under the module and parameter names of transformers' Sapiens2 port."""

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn
from torchvision.ops import StochasticDepth
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .configuration_sapiens2_hf import Sapiens2Config, Sapiens2HeadConfig
from .official_format_sapiens2_hf import compute_rope_periods


_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


# ------------------------------------------------------------------------------------------------ small layers


# torch's own activations, not transformers' ACT2FN: those classes are hub-kernel layers that `kernels.kernelize`
# (transformers' `use_kernels`) may swap for other kernels, and the official numerics must not change under a flag.
_ACTIVATIONS = {"silu": nn.SiLU, "swish": nn.SiLU, "gelu": nn.GELU, "relu": nn.ReLU}


def activation_layer(name: str) -> nn.Module:
    if name not in _ACTIVATIONS:
        raise ValueError(f"Unsupported activation {name!r}; choose one of {sorted(_ACTIVATIONS)}.")
    return _ACTIVATIONS[name]()


class Sapiens2RMSNorm(nn.Module):
    """RMSNorm over the last dim, computed in float32 (T5 / Llama style: the weight multiplies after the cast back)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class ChannelRMSNorm(nn.Module):
    """RMSNorm over the channels of each pixel of a `(batch_size, channels, height, width)` map (official albedo head)."""

    def __init__(self, num_channels: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.float()
        hidden_states = hidden_states * torch.rsqrt(hidden_states.pow(2).mean(1, keepdim=True) + self.eps)
        return (self.weight[:, None, None] * hidden_states).to(input_dtype)


class Sapiens2LayerScale(nn.Module):
    """Learned per-channel scale of a residual branch (`lambda1`, initialised to `init_value`)."""

    def __init__(self, hidden_size: int, init_value: float):
        super().__init__()
        self.lambda1 = nn.Parameter(init_value * torch.ones(hidden_size))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states * self.lambda1


class Sapiens2MLP(nn.Module):
    """Two-layer MLP `down_proj(act(up_proj(x)))` (configs with `use_gated_mlp=False`)."""

    def __init__(self, config: Sapiens2Config):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.act_fn = activation_layer(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.up_proj(hidden_states)))


class Sapiens2GatedMLP(nn.Module):
    """SwiGLU MLP `down_proj(act(gate_proj(x)) * up_proj(x))` (the official models; the official checkpoints fuse
    `gate_proj` and `up_proj` into one `w12` projection, gate half first)."""

    def __init__(self, config: Sapiens2Config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.act_fn = activation_layer(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(hidden_states)) * self.up_proj(hidden_states))


# ------------------------------------------------------------------------------------------------- embeddings


class Sapiens2Embeddings(nn.Module):
    """Patch embedding (a `patch_size`-stride convolution) with the CLS and register tokens prepended and an optional
    learned mask token."""

    def __init__(self, config: Sapiens2Config):
        super().__init__()
        # Parameters in the port's order and with its constructors, so seeded models draw the same random numbers.
        self.cls_token = nn.Parameter(torch.randn(1, 1, config.hidden_size))
        self.mask_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size)) if config.use_mask_token else None
        self.register_tokens = nn.Parameter(torch.empty(1, config.num_register_tokens, config.hidden_size))
        self.patch_embeddings = nn.Conv2d(
            config.num_channels, config.hidden_size, kernel_size=config.patch_size, stride=config.patch_size
        )

    def forward(self, pixel_values: torch.Tensor, bool_masked_pos: torch.Tensor | None = None) -> torch.Tensor:
        """`(batch_size, num_channels, height, width)` -> `(batch_size, 1 + num_register_tokens + num_patches,
        hidden_size)`: CLS, registers, patch tokens in row-major order, those of `bool_masked_pos` replaced by the
        mask token."""
        if bool_masked_pos is not None and self.mask_token is None:
            raise ValueError("`bool_masked_pos` needs a mask token: build the model with `use_mask_token=True`.")
        batch_size = pixel_values.shape[0]
        patches = self.patch_embeddings(pixel_values.to(dtype=self.patch_embeddings.weight.dtype))
        patches = patches.flatten(2).transpose(1, 2)  # (batch, num_patches, hidden)
        if bool_masked_pos is not None:
            patches = torch.where(bool_masked_pos.unsqueeze(-1), self.mask_token.to(patches.dtype), patches)
        cls_token = self.cls_token.expand(batch_size, -1, -1)
        register_tokens = self.register_tokens.expand(batch_size, -1, -1)
        return torch.cat([cls_token, register_tokens, patches], dim=1)


def augment_patch_coordinates(
    coords: torch.Tensor, shift: float | None = None, jitter: float | None = None, rescale: float | None = None
) -> torch.Tensor:
    """Random RoPE coordinate augmentation of DINOv3 (training only), drawn from the global RNG like the official code,
    of `(num_patches, 2)` `(y, x)` patch centres in `[-1, 1]`: `shift` adds one uniform offset in `[-shift, shift]`
    per axis, `jitter` multiplies each axis by its own log-uniform factor in `[1 / jitter, jitter]`, `rescale` both
    axes by one in `[1 / rescale, rescale]`."""
    if shift is not None:
        coords = coords + torch.empty((1, 2), device=coords.device, dtype=coords.dtype).uniform_(-shift, shift)
    if jitter is not None:
        log_jitter = math.log(jitter)
        factor = torch.empty((1, 2), device=coords.device, dtype=coords.dtype).uniform_(-log_jitter, log_jitter)
        coords = coords * factor.exp()
    if rescale is not None:
        log_rescale = math.log(rescale)
        factor = torch.empty(1, device=coords.device, dtype=coords.dtype).uniform_(-log_rescale, log_rescale)
        coords = coords * factor.exp()
    return coords


class Sapiens2RopePositionEmbedding(nn.Module):
    """2-D rotary position embedding of the patch tokens, in the official arithmetic and dtype: patch centres
    normalised per axis to `[-1, 1]`, angles `2 pi coord / period` (row angles, then column angles, repeated twice).

    `(cos, sin)` are cached per grid (a plain dict: state dicts are unchanged), dropped when `periods` is replaced or
    changed in place, and bypassed while coordinates are augmented, `periods` needs a gradient, or under tracing,
    compiling and export (a cached tensor would be frozen into the graph). Callers must not modify them in place.
    """

    periods: torch.Tensor

    # Grids kept per module: a pipeline sees one or a few input sizes; varied sizes evict the least recently used
    # entry. 0 turns the cache off.
    max_cached_grids = 8

    def __init__(self, config: Sapiens2Config):
        super().__init__()
        self.config = config
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.rope_dtype = _TORCH_DTYPES[config.rope_dtype]
        self.register_buffer(
            "periods", compute_rope_periods(self.head_dim, config.rope_theta, self.rope_dtype), persistent=False
        )
        self._cos_sin_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        # What the cache was computed from: the periods tensor itself (held, so its address cannot be reused by a new
        # tensor), its in-place version counter and its data pointer (`periods.data = ...` keeps the object).
        self._cos_sin_cache_source: tuple | None = None

    def reset_periods(self) -> None:
        self.periods = compute_rope_periods(self.head_dim, self.config.rope_theta, self.rope_dtype).to(
            self.periods.device if self.periods.device.type != "meta" else "cpu"
        )
        self.clear_cos_sin_cache()

    def _apply(self, fn, recurse=True):
        # `.to(dtype)`, `.half()`, `.float()` and `.bfloat16()` cast every floating buffer, which would move the
        # periods out of `rope_dtype` and the cos/sin out of the official arithmetic (a bf16 -> fp32 round trip also
        # keeps the bf16 rounding). The periods follow the module's device but keep their own dtype, recomputed
        # rather than cast back so no precision is lost on the way.
        super()._apply(fn, recurse)
        if self.periods.dtype != self.rope_dtype:
            fresh = compute_rope_periods(self.head_dim, self.config.rope_theta, self.rope_dtype)
            self.periods = fresh.to(self.periods.device)
            self.clear_cos_sin_cache()
        return self

    def clear_cos_sin_cache(self) -> None:
        self._cos_sin_cache = {}
        self._cos_sin_cache_source = None

    def _augments_coordinates(self) -> bool:
        return self.training and any(
            value is not None
            for value in (self.config.pos_embed_shift, self.config.pos_embed_jitter, self.config.pos_embed_rescale)
        )

    def _cache_allowed(self) -> bool:
        if self.max_cached_grids <= 0 or self._augments_coordinates() or self.periods.device.type == "meta":
            return False
        if self.periods.requires_grad and torch.is_grad_enabled():
            return False
        if torch.jit.is_tracing() or torch.jit.is_scripting():
            return False
        compiler = getattr(torch, "compiler", None)
        for check in ("is_compiling", "is_exporting"):
            if compiler is not None and getattr(compiler, check, lambda: False)():
                return False
        # `torch.fx.symbolic_trace`; `is_fx_tracing` would also be true under export and warns on every call.
        fx_tracing = getattr(getattr(torch, "fx", None), "_symbolic_trace", None)
        is_tracing = getattr(fx_tracing, "is_fx_symbolic_tracing", None) or getattr(fx_tracing, "is_fx_tracing", None)
        return not (is_tracing is not None and is_tracing())

    def forward(self, num_patches_h: int, num_patches_w: int) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Returns:
            `(cos, sin)`, each `torch.Tensor` of shape `(num_patches_h * num_patches_w, head_dim)` in the RoPE dtype,
            rows in row-major patch order. Cached tensors may be returned: do not modify them in place.
        """
        if not self._cache_allowed():
            return self.compute_cos_sin(num_patches_h, num_patches_w)
        periods = self.periods
        # Inference tensors (a model built under `torch.inference_mode()`) have no version counter: their values are
        # compared instead (a few dozen numbers).
        version = periods.detach().clone() if periods.is_inference() else periods._version
        source = (periods, version, periods.data_ptr())
        cached_source = self._cos_sin_cache_source
        if (
            cached_source is None
            or cached_source[0] is not periods
            or cached_source[2] != source[2]
            or type(cached_source[1]) is not type(version)
            or not (torch.equal(cached_source[1], version) if periods.is_inference() else cached_source[1] == version)
        ):
            self._cos_sin_cache = {}
            self._cos_sin_cache_source = source
        # Inference-mode tensors cannot be saved for backward: a grid computed under `torch.inference_mode()` is cached
        # apart from the one used for training.
        inference = torch.is_inference_mode_enabled()
        key = (int(num_patches_h), int(num_patches_w), periods.device, self.rope_dtype, inference)
        cached = self._cos_sin_cache.pop(key, None)
        if cached is None:
            cached = self.compute_cos_sin(num_patches_h, num_patches_w)
            if len(self._cos_sin_cache) >= self.max_cached_grids:
                self._cos_sin_cache.pop(next(iter(self._cos_sin_cache)))
        self._cos_sin_cache[key] = cached  # re-inserted last: the dict is kept in least-recently-used order
        return cached

    def compute_cos_sin(self, num_patches_h: int, num_patches_w: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`(cos, sin)` computed afresh, without the cache (see `forward`)."""
        dtype, device = self.rope_dtype, self.periods.device
        coords_h = torch.arange(0.5, num_patches_h, dtype=dtype, device=device) / num_patches_h
        coords_w = torch.arange(0.5, num_patches_w, dtype=dtype, device=device) / num_patches_w
        coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"), dim=-1).flatten(0, 1)  # (N, 2)
        coords = 2.0 * coords - 1.0
        if self._augments_coordinates():
            coords = augment_patch_coordinates(
                coords,
                shift=self.config.pos_embed_shift,
                jitter=self.config.pos_embed_jitter,
                rescale=self.config.pos_embed_rescale,
            )
        angles = 2 * math.pi * coords[:, :, None] / self.periods[None, None, :]  # (N, 2, head_dim / 4)
        angles = angles.flatten(1, 2).tile(2)  # (N, head_dim)
        return torch.cos(angles), torch.sin(angles)


# -------------------------------------------------------------------------------------------------- attention


def rotate_half(hidden_states: torch.Tensor) -> torch.Tensor:
    """`(x1, x2) -> (-x2, x1)` over the two halves of the last dim (the "rotate-half" RoPE convention)."""
    first, second = hidden_states.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope_to_patch_tokens(
    query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotates the patch tokens of `query` and `key` `(batch_size, heads, num_prefix + num_patches, head_dim)`
    ("rotate-half"); prefix tokens are not rotated. `cos`, `sin`: `(num_patches, head_dim)`, or `(batch_size,
    num_patches, head_dim)` when each sample keeps its own patches. As in the official model, all of `query` and `key`
    is cast to the dtype of `cos` for the rotation and back, so in bfloat16 mode the prefix tokens are rounded too.
    """
    query_dtype, key_dtype = query.dtype, key.dtype
    if cos.ndim == 3:  # per-sample positions: (batch_size, 1, num_patches, head_dim) broadcasts over heads
        cos, sin = cos[:, None], sin[:, None]
    num_patches = cos.shape[-2]
    query, key = query.to(cos.dtype), key.to(cos.dtype)
    rotated = []
    for states in (query, key):
        prefix, patches = states.split((states.shape[-2] - num_patches, num_patches), dim=-2)
        patches = (patches * cos) + (rotate_half(patches) * sin)
        rotated.append(torch.cat((prefix, patches), dim=-2))
    return rotated[0].to(query_dtype), rotated[1].to(key_dtype)


def repeat_kv(hidden_states: torch.Tensor, num_groups: int) -> torch.Tensor:
    """`(batch, num_kv_heads, seq, head_dim)` -> `(batch, num_kv_heads * num_groups, seq, head_dim)`, each key/value
    head repeated for the `num_groups` query heads that share it."""
    if num_groups == 1:
        return hidden_states
    batch_size, num_kv_heads, seq_len, head_dim = hidden_states.shape
    hidden_states = hidden_states[:, :, None].expand(batch_size, num_kv_heads, num_groups, seq_len, head_dim)
    return hidden_states.reshape(batch_size, num_kv_heads * num_groups, seq_len, head_dim)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain softmax attention with the signature of transformers' attention registry: `query` `(batch_size,
    num_heads, seq_len, head_dim)`, `key` and `value` with `num_kv_heads`, an optional additive `attention_mask`.
    Returns `(output, weights)`: `(batch_size, seq_len, num_heads, head_dim)` and `(batch_size, num_heads, seq_len,
    seq_len)` (softmax in float32, cast back to the query dtype)."""
    scaling = module.head_dim**-0.5 if scaling is None else scaling
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


class Sapiens2Attention(nn.Module):
    """Multi-head attention with `num_key_value_heads` key/value heads (grouped when fewer than the query heads),
    optional QK-norm (RMSNorm on each head's queries and keys before RoPE) and the official RoPE application. The
    kernel comes from transformers' registry by `config._attn_implementation`."""

    def __init__(self, config: Sapiens2Config, num_key_value_heads: int, use_qk_norm: bool = True):
        super().__init__()
        self.config = config
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = False
        self.dropout = config.attention_dropout
        self.num_key_value_heads = num_key_value_heads
        self.num_key_value_groups = self.num_heads // num_key_value_heads
        # Built in the port's order (q, o, k, v), so seeded models draw the same random numbers.
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=config.query_bias)
        self.o_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=config.proj_bias)
        kv_dim = num_key_value_heads * self.head_dim
        self.k_proj = nn.Linear(self.embed_dim, kv_dim, bias=config.key_bias)
        self.v_proj = nn.Linear(self.embed_dim, kv_dim, bias=config.value_bias)
        self.q_norm = Sapiens2RMSNorm(self.head_dim, eps=config.rms_norm_eps) if use_qk_norm else nn.Identity()
        self.k_norm = Sapiens2RMSNorm(self.head_dim, eps=config.rms_norm_eps) if use_qk_norm else nn.Identity()

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`(batch_size, seq_len, hidden_size)` (prefix tokens, then patches; `position_embeddings` the patches' RoPE
        `(cos, sin)` or `None`) -> `(output, weights)`: the same shape, and `(batch_size, num_heads, seq_len, seq_len)`
        or `None` from backends that do not return them."""
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2))
        key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2))
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        if position_embeddings is not None:
            query_states, key_states = apply_rope_to_patch_tokens(query_states, key_states, *position_embeddings)
        # Looked up at every call, so `model.set_attn_implementation(...)` switches every layer at once: they all hold
        # the model's config object. transformers detects that a model can switch this way by finding this call.
        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.dropout,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = self.o_proj(attn_output.reshape(*input_shape, -1).contiguous())
        return attn_output, attn_weights


# ------------------------------------------------------------------------------------------- layer and encoder


class Sapiens2Layer(GradientCheckpointingLayer):
    """A Sapiens2 block: pre-RMSNorm attention and MLP residual branches, LayerScale on the attention branch only (as
    in the official model; `layer_scale2` is an identity kept for the port's layout). The 4K tokenizer's blocks have
    neither QK-norm (`use_qk_norm`) nor LayerScale (`use_layer_scale`)."""

    def __init__(
        self, config: Sapiens2Config, num_key_value_heads: int, use_qk_norm: bool = True, use_layer_scale: bool = True
    ):
        super().__init__()
        self.norm1 = Sapiens2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.attention = Sapiens2Attention(config, num_key_value_heads, use_qk_norm=use_qk_norm)
        self.layer_scale1 = (
            Sapiens2LayerScale(config.hidden_size, config.layerscale_value) if use_layer_scale else nn.Identity()
        )
        # stochastic depth: a sample's whole residual branch dropped, the kept ones scaled by 1 / (1 - p)
        self.drop_path = StochasticDepth(config.drop_path_rate, "row") if config.drop_path_rate > 0.0 else nn.Identity()
        self.norm2 = Sapiens2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = Sapiens2GatedMLP(config) if config.use_gated_mlp else Sapiens2MLP(config)
        self.layer_scale2 = nn.Identity()

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        """`(batch_size, seq_len, hidden_size)` -> `(batch_size, seq_len, hidden_size)`."""
        attention_output, _ = self.attention(
            self.norm1(hidden_states), attention_mask=attention_mask, position_embeddings=position_embeddings, **kwargs
        )
        hidden_states = self.drop_path(self.layer_scale1(attention_output)) + hidden_states
        mlp_output = self.layer_scale2(self.mlp(self.norm2(hidden_states)))
        return self.drop_path(mlp_output) + hidden_states


# ------------------------------------------------------------------------------------------------ decode heads


class Sapiens2ConvLayer(nn.Module):
    """Convolution (transposed with `transposed`), optional pixel shuffle, normalisation (`norm_layer(out_channels)`)
    and activation (`silu`, `gelu` or `relu`). With `pixel_shuffle` the convolution outputs `out_channels * scale_factor**2`
    channels, rearranged by `PixelShuffle(scale_factor)` into `out_channels` at `scale_factor` times the resolution.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 1,
        stride: int = 1,
        padding: int = 0,
        bias: bool = True,
        transposed: bool = False,
        pixel_shuffle: bool = False,
        scale_factor: int = 2,
        norm_layer: Callable[[int], nn.Module] = nn.InstanceNorm2d,
        activation: str = "silu",
    ):
        super().__init__()
        conv_channels = out_channels * scale_factor**2 if pixel_shuffle else out_channels
        conv_class = nn.ConvTranspose2d if transposed else nn.Conv2d
        self.convolution = conv_class(
            in_channels, conv_channels, kernel_size=kernel_size, stride=stride, padding=padding, bias=bias
        )
        self.norm = norm_layer(out_channels)
        self.act_fn = activation_layer(activation)
        self.pixel_shuffle = nn.PixelShuffle(scale_factor) if pixel_shuffle else nn.Identity()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """`(batch_size, in_channels, height, width)` -> `(batch_size, out_channels, height', width')`."""
        hidden_states = self.pixel_shuffle(self.convolution(hidden_states))
        return self.act_fn(self.norm(hidden_states))


def head_norm_layer(head_config: Sapiens2HeadConfig) -> Callable[[int], nn.Module]:
    """The normalisation factory of a decode head: InstanceNorm2d without affine parameters (official pose, seg,
    normal and pointmap heads) or a channel RMSNorm (official albedo head), by `head_config.norm_type`."""
    if head_config.norm_type == "rms_norm":
        return partial(ChannelRMSNorm, eps=head_config.norm_eps)
    return nn.InstanceNorm2d


class Sapiens2Head(nn.Module):
    """The dense decode head of every task, on the `(batch_size, hidden_size, grid_h, grid_w)` feature map.

    With `head_config.use_pixel_shuffle`: a 3x3 input conv, upsampling blocks (conv + `PixelShuffle(2)`), refinement
    convs with "same" padding (normal, pointmap and albedo heads). Otherwise: stride-2 transposed convolutions
    (padding 1, no bias), then refinement convs without padding (pose and seg heads). A 1x1 conv predicts
    `config.num_labels` channels; `norm_layer` (see `head_norm_layer`) follows each other conv.
    """

    def __init__(self, config: Sapiens2Config, norm_layer: Callable[[int], nn.Module] = nn.InstanceNorm2d):
        super().__init__()
        head = config.head_config
        pixel_shuffle = bool(head.use_pixel_shuffle)
        conv = partial(Sapiens2ConvLayer, norm_layer=norm_layer)
        self.input_conv = (
            conv(config.hidden_size, config.hidden_size, kernel_size=3, padding=1) if pixel_shuffle else nn.Identity()
        )
        upsample_channels = list(head.upsample_out_channels or [])
        conv_channels = list(head.conv_out_channels or [])
        self.upsample_layers = nn.ModuleList(
            conv(
                in_channels,
                out_channels,
                kernel_size=kernel_size,
                stride=1 if pixel_shuffle else 2,
                padding=(kernel_size - 1) // 2 if pixel_shuffle else 1,
                bias=pixel_shuffle,
                transposed=not pixel_shuffle,
                pixel_shuffle=pixel_shuffle,
            )
            for in_channels, out_channels, kernel_size in zip(
                [config.hidden_size] + upsample_channels[:-1], upsample_channels, head.upsample_kernel_sizes or []
            )
        )
        conv_inputs = [upsample_channels[-1] if upsample_channels else config.hidden_size] + conv_channels[:-1]
        self.conv_layers = nn.ModuleList(
            conv(
                in_channels, out_channels, kernel_size=kernel_size, padding=(kernel_size - 1) // 2 if pixel_shuffle else 0
            )
            for in_channels, out_channels, kernel_size in zip(conv_inputs, conv_channels, head.conv_kernel_sizes or [])
        )
        predictor_in = (conv_channels or upsample_channels or [config.hidden_size])[-1]
        self.predictor = nn.Conv2d(predictor_in, config.num_labels, kernel_size=1)

    def forward(self, feature_map: torch.Tensor) -> torch.Tensor:
        """`(batch_size, hidden_size, grid_h, grid_w)` -> `(batch_size, num_labels, height', width')`."""
        hidden_states = self.input_conv(feature_map)
        for layer in self.upsample_layers:
            hidden_states = layer(hidden_states)
        for layer in self.conv_layers:
            hidden_states = layer(hidden_states)
        return self.predictor(hidden_states)


class Sapiens2LinearActivation(nn.Module):
    """`act(linear(x))`, stored as `layers.0` (linear) and `layers.1` (activation) as in the official scale MLP."""

    def __init__(self, in_features: int, out_features: int, activation: str):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(in_features, out_features), activation_layer(activation))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.layers(hidden_states)


class Sapiens2PointmapScaleMLP(nn.Module):
    """Flatten, two linear + activation blocks and a linear read-out of one value per sample."""

    def __init__(self, in_features: int, hidden_sizes: list[int], activation: str):
        super().__init__()
        self.flatten = nn.Flatten()
        self.block1 = Sapiens2LinearActivation(in_features, hidden_sizes[0], activation)
        self.block2 = Sapiens2LinearActivation(hidden_sizes[0], hidden_sizes[1], activation)
        self.proj = nn.Linear(hidden_sizes[1], 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """`(batch_size, ...)` -> `(batch_size, 1)`."""
        return self.proj(self.block2(self.block1(self.flatten(hidden_states))))


class Sapiens2PointmapScaleHead(nn.Module):
    """The focal-scale branch of the pointmap model: stride-2 conv layers (InstanceNorm, SiLU) on the feature map,
    then an MLP on the flattened result. The MLP's input size ties the branch to the token grid it was trained on
    (`head_config.scale_final_input_size`)."""

    def __init__(self, config: Sapiens2Config):
        super().__init__()
        head = config.head_config
        channels = head.scale_conv_out_channels
        self.conv_layers = nn.ModuleList(
            Sapiens2ConvLayer(
                in_channels, out_channels, kernel_size=kernel_size, stride=2, padding=(kernel_size - 1) // 2
            )
            for in_channels, out_channels, kernel_size in zip(
                [config.hidden_size] + channels[:-1], channels, head.scale_conv_kernel_sizes
            )
        )
        self.predictor = Sapiens2PointmapScaleMLP(
            head.scale_final_input_size, head.scale_final_hidden_sizes, activation=config.hidden_act
        )

    def forward(self, feature_map: torch.Tensor) -> torch.Tensor:
        """`(batch_size, hidden_size, grid_h, grid_w)` -> `(batch_size, 1)`."""
        hidden_states = feature_map
        for layer in self.conv_layers:
            hidden_states = layer(hidden_states)
        return self.predictor(hidden_states)


# ------------------------------------------------------------------------------------------------ 4K tokenizer


class Sapiens2WindowTokenizer(nn.Module):
    """The windowed tokenizer of the hierarchical 4K model: one token per window of patches (see
    `Sapiens2Config.num_tokenizer_layers`; no final norm). Windows are embedded and pooled in chunks of at most
    `config.tokenizer_chunk_size`, so peak activation memory is bounded whatever the input size; chunking does not
    change the outputs."""

    def __init__(self, config: Sapiens2Config):
        super().__init__()
        window = config.tokenizer_window_size
        self.window_size = window
        self.chunk_size = config.tokenizer_chunk_size
        self.window_cls = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.local_pos_embed = nn.Parameter(torch.zeros(1, 1 + window * window, config.hidden_size))
        self.layer = nn.ModuleList(
            Sapiens2Layer(config, config.num_attention_heads, use_qk_norm=False, use_layer_scale=False)
            for _ in range(config.num_tokenizer_layers)
        )
        self.gradient_checkpointing = False

    def _pool_windows(self, patch_tokens: torch.Tensor) -> torch.Tensor:
        """(num_windows, window^2, hidden) patch tokens -> (num_windows, hidden) window tokens."""
        hidden_states = torch.cat((self.window_cls.expand(patch_tokens.shape[0], -1, -1), patch_tokens), dim=1)
        hidden_states = hidden_states + self.local_pos_embed
        for layer in self.layer:
            hidden_states = layer(hidden_states, position_embeddings=None)
        return hidden_states[:, 0]

    def forward(self, pixel_values: torch.Tensor, patch_embeddings: nn.Conv2d) -> torch.Tensor:
        """`(batch_size, 3, height, width)` -> `(batch_size, (height / stride) * (width / stride), hidden_size)`, one
        token per window in row-major order (stride = patch size x window size, which must divide the input sides);
        `patch_embeddings` is the backbone's patch-embedding convolution."""
        batch_size, _, height, width = pixel_values.shape
        window = self.window_size
        stride_h = patch_embeddings.stride[0] * window
        stride_w = patch_embeddings.stride[1] * window
        windows_h, windows_w = height // stride_h, width // stride_w
        # Chunks are bands of whole window rows of one image, so a chunk needs only its own pixel rows.
        rows_per_chunk = max(1, self.chunk_size // windows_w)
        pooled = []
        for sample in range(batch_size):
            for row_start in range(0, windows_h, rows_per_chunk):
                rows = min(rows_per_chunk, windows_h - row_start)
                band = pixel_values[sample : sample + 1, :, row_start * stride_h : (row_start + rows) * stride_h]
                if self.gradient_checkpointing and self.training:
                    tokens = torch.utils.checkpoint.checkpoint(
                        self._embed_and_pool, band, patch_embeddings, rows, windows_w, use_reentrant=False
                    )
                else:
                    tokens = self._embed_and_pool(band, patch_embeddings, rows, windows_w)
                pooled.append(tokens)
        return torch.cat(pooled, dim=0).reshape(batch_size, windows_h * windows_w, -1)

    def _embed_and_pool(self, band: torch.Tensor, patch_embeddings: nn.Conv2d, rows: int, windows_w: int) -> torch.Tensor:
        window = self.window_size
        features = patch_embeddings(band)  # (1, hidden, rows * window, windows_w * window)
        hidden = features.shape[1]
        features = features.reshape(hidden, rows, window, windows_w, window)
        patch_tokens = features.permute(1, 3, 2, 4, 0).reshape(rows * windows_w, window * window, hidden)
        return self._pool_windows(patch_tokens)  # (rows * windows_w, hidden)


def tokens_to_feature_map(hidden_states: torch.Tensor, num_prefix_tokens: int, grid_hw: tuple[int, int]) -> torch.Tensor:
    """`(batch_size, num_prefix_tokens + height * width, hidden_size)` tokens -> the patch tokens on their grid,
    `(batch_size, hidden_size, height, width)`."""
    batch_size, _, hidden_size = hidden_states.shape
    patch_tokens = hidden_states[:, num_prefix_tokens:]
    return patch_tokens.transpose(1, 2).reshape(batch_size, hidden_size, *grid_hw)
