# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Sapiens2 models for sapiens2_hf: the pretrained-model base, the backbone classes and the task models.

Written on torch and transformers' public API only, so a repository shipped with these files as remote code does not
depend on the internals of any transformers version. Module names, parameter names and tensor layouts are those of
transformers' own Sapiens2 port, so checkpoints move freely between the two (tests/test_modeling_interop.py). Beyond
the port: RoPE in the official bfloat16 arithmetic (`config.rope_dtype`; transformers' float32 moves outputs by
0.2-0.4 %), token removal for masked pretraining (`patch_keep_indices`), the albedo task and the 4K windowed
tokenizer, the official fine-tuning losses (loss_sapiens2.py) returned with `labels`, and strict loading of every
layout. The building blocks are in layers_sapiens2_hf.py, the task outputs in outputs_sapiens2_hf.py.
"""

import copy

import torch
from torch import nn
from transformers import BackboneMixin, PreTrainedModel
from transformers.backbone_utils import filter_output_hidden_states
from transformers.modeling_outputs import (
    BackboneOutput,
    BaseModelOutput,
    BaseModelOutputWithPooling,
    ModelOutput,
    SemanticSegmenterOutput,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, logging
from transformers.utils.output_capturing import capture_outputs

from .configuration_sapiens2_hf import (
    TASKS,
    Sapiens2Config,
    as_sapiens2_config,
    pointmap_scale_features,
)
from .layers_sapiens2_hf import (
    ChannelRMSNorm,
    Sapiens2Attention,
    Sapiens2Embeddings,
    Sapiens2Head,
    Sapiens2Layer,
    Sapiens2LayerScale,
    Sapiens2PointmapScaleHead,
    Sapiens2RMSNorm,
    Sapiens2RopePositionEmbedding,
    Sapiens2WindowTokenizer,
    head_norm_layer,
    tokens_to_feature_map,
)
from .loading_sapiens2_hf import load_pretrained, quiet_progress_below
from .loss_sapiens2 import (
    AlbedoLoss,
    MattingLoss,
    NormalLoss,
    PointmapLoss,
    PoseHeatmapLoss,
    SEG_CE_CLASS_WEIGHTS,
    SegmentationLoss,
)
from .official_format_sapiens2_hf import register_original_format_conversions
from .outputs_sapiens2_hf import (
    Sapiens2AlbedoEstimatorOutput,
    Sapiens2ImageMattingOutput,
    Sapiens2NormalEstimatorOutput,
    Sapiens2PointmapEstimatorOutput,
    Sapiens2PoseEstimatorOutput,
)
from .sapiens2_tasks import BACKBONE_MODEL_CLASS, TASK_SPECS, TaskSpec, spec_of_class, task_spec


logger = logging.get_logger(__name__)


# The task heads' tensors, which the backbone classes ignore when they load a task checkpoint.
HEAD_KEY_PATTERNS = (r"^decode_head\.", r"^scale_head\.")


class ModuleLayoutSaveMixin:
    """`save_pretrained` writing our (= transformers' port's) module names by default (`save_original_format=True`:
    the original names, as Meta's Hub repos hold them): transformers' Trainer resumes a checkpoint with a plain
    `load_state_dict`, which would miss every backbone tensor saved under the original names."""

    def save_pretrained(self, save_directory, *args, save_original_format: bool = False, **kwargs):
        size = sum(tensor.numel() * tensor.element_size() for tensor in self.state_dict().values())
        with quiet_progress_below(size):
            return super().save_pretrained(save_directory, *args, save_original_format=save_original_format, **kwargs)


class Sapiens2PreTrainedModel(ModuleLayoutSaveMixin, PreTrainedModel):
    """Base of the sapiens2_hf models: weight initialisation, and strict loading from official files and HF folders."""

    config_class = Sapiens2Config
    config: Sapiens2Config
    base_model_prefix = "model"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["Sapiens2Embeddings", "Sapiens2Layer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    # What `output_hidden_states` / `output_attentions` record (transformers' `capture_outputs` on the encoder): each
    # layer's input and output, and each attention's weights (from backends that return them).
    _can_record_outputs = {"hidden_states": Sapiens2Layer, "attentions": Sapiens2Attention}
    # The task losses are means over the micro-batch, not sums over items: transformers' Trainer must pass no
    # `num_items_in_batch` and divide by the gradient-accumulation steps itself (else gradients grow with them).
    accepts_loss_kwargs = False
    _input_embed_layer = "patch_embeddings"
    # The RoPE periods are recomputed from the config, never loaded (some exported checkpoints carry them).
    _keys_to_ignore_on_load_unexpected = [r"periods"]
    # Loading is strict: nothing may be missing, except the masked-pretraining token, which a checkpoint saved without
    # `use_mask_token` lacks and which starts at zeros (the official init, `_init_weights`), never random.
    _keys_to_ignore_on_load_missing = [r"embeddings\.mask_token$"]
    # The task this class solves (None: the bare backbone).
    task: str | None = None

    def _init_weights(self, module) -> None:
        """The port's initialisation (on top of transformers' generic one), plus the RoPE periods and the 4K
        tokenizer's tokens; transformers skips the tensors it has already loaded."""
        super()._init_weights(module)
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.trunc_normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.ConvTranspose2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, Sapiens2Embeddings):
            nn.init.trunc_normal_(module.cls_token, mean=0.0, std=std)
            if module.register_tokens.shape[1] > 0:
                nn.init.trunc_normal_(module.register_tokens, mean=0.0, std=std)
            if module.mask_token is not None:
                nn.init.zeros_(module.mask_token)
        elif isinstance(module, Sapiens2LayerScale):
            nn.init.constant_(module.lambda1, self.config.layerscale_value)
        elif isinstance(module, Sapiens2RopePositionEmbedding):
            module.reset_periods()
        elif isinstance(module, (Sapiens2Head, Sapiens2PointmapScaleHead)):
            for head_module in module.modules():
                if isinstance(head_module, nn.Conv2d):
                    nn.init.kaiming_normal_(head_module.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(head_module, nn.Linear):
                    nn.init.kaiming_normal_(head_module.weight, mode="fan_in", nonlinearity="linear")
        elif isinstance(module, ChannelRMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, Sapiens2WindowTokenizer):
            nn.init.trunc_normal_(module.window_cls, std=std)
            nn.init.trunc_normal_(module.local_pos_embed, std=std)

    @classmethod
    def _check_task(cls, config: Sapiens2Config, source: str) -> None:
        if cls.task is None or config.task == cls.task:
            return
        if config.task is None and config.head_config is not None:
            return  # a head layout without a task (transformers' test configs): the class names it (`build_task_layers`)
        what = "a backbone-only" if config.task is None else f"a `{config.task}`"
        hint = (
            f"load it with {task_spec(config.task).model_class} (pipeline `{task_spec(config.task).pipeline_name}`)"
            if config.task is not None
            else f"start a new {cls.task} model from it with {cls.__name__}.from_backbone(...)"
        )
        raise ValueError(f"{source} is {what} checkpoint, not a `{cls.task}` one: {hint}.")

    @classmethod
    def _allowed_unexpected_keys(cls) -> tuple[str, ...]:
        """Prefixes of checkpoint tensors this class deliberately leaves out (see `Sapiens2Model`)."""
        return ()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path=None, *model_args, **kwargs):
        """transformers' `from_pretrained`, for every layout Sapiens2 checkpoints come in.

        Args:
            pretrained_model_name_or_path (`str` or `os.PathLike`, *optional*): one of
                - an official file such as `sapiens2_1b_pose.safetensors`, or a folder or Hub repo holding only such a
                  file (config.json optional): the architecture is read from the tensor shapes (and cross-checked
                  against the file name);
                - a folder or Hub repo with a config.json and model.safetensors (or a sharded index): saved by this
                  library, by transformers' Sapiens2 classes, or Meta's official repos (whose weights use the
                  original tensor names; the original file beside them is then not needed);
                - a LoRA adapter folder written by `sapiens2_hf.training` (base + adapter, merged);
                - `None`, with `state_dict=` (original names or ours) and, for our names, `config=`; `state_dict={}`
                  loads nothing and initialises every weight (`_init_weights`, as a fresh model from `config`).
            strict (`bool`, *optional*, defaults to `True`): a missing, unexpected or mis-shaped tensor, or one
                holding NaN or infinite values, raises a `ValueError` that names them. `False` is transformers'
                behaviour (reported, left as initialised; non-finite values are loaded with a warning).
            dtype: defaults to float32 whatever the storage (`"auto"`: the stored dtype, as in transformers).
            Everything else transformers' `from_pretrained` takes works as there: `device_map` (`"auto"`, dicts),
                `max_memory`, `offload_folder`, `key_mapping`, `quantization_config`, `attn_implementation`,
                `output_loading_info`, Hub arguments, and config overrides as keywords (`rope_dtype="float32"`,
                `image_size=[h, w]`, `output_hidden_states=True`, ...).

        Original-layout tensors are renamed by transformers' loader itself, through the weight conversions declared
        in `official_format_sapiens2_hf.py`. Integer or quantized tensors are refused by name. The config (read or
        overridden) is checked before anything is allocated: sizes in range (at most `MAX_NUM_PARAMETERS`,
        `image_size` sides in `[1, MAX_IMAGE_SIDE]` divisible by the feature stride), float fields finite.
        """
        return load_pretrained(cls, pretrained_model_name_or_path, model_args, kwargs, super().from_pretrained,
                               model_class_for_task)

    @classmethod
    def from_official_state_dict(cls, state_dict: dict[str, torch.Tensor], filename: str | None = None, **kwargs):
        """Builds the model from an official state dict already in memory: `from_pretrained(None, state_dict=...)`,
        with `filename` (an official file name, optional) cross-checked against the tensors."""
        return cls.from_pretrained(None, state_dict=state_dict, official_filename=filename, **kwargs)


def token_grid_size(config: Sapiens2Config, pixel_values: torch.Tensor) -> tuple[int, int]:
    """`(grid_h, grid_w)`: encoder tokens along the height and width of a `(batch_size, 3, height, width)` input (one
    per `config.feature_stride` pixels); a clear error when the shape or size does not fit."""
    if pixel_values.ndim != 4 or pixel_values.shape[1] != config.num_channels:
        raise ValueError(
            f"`pixel_values` must have shape (batch_size, {config.num_channels}, height, width), got "
            f"{tuple(pixel_values.shape)}."
        )
    stride_h, stride_w = config.feature_stride
    height, width = pixel_values.shape[-2:]
    if height % stride_h or width % stride_w:
        what = "patch size" if not config.uses_tokenizer else "patch size x tokenizer window"
        raise ValueError(
            f"The input size {height}x{width} is not divisible by the {what} {stride_h}x{stride_w}; resize or "
            "pad the image (the image processors do this for you)."
        )
    return height // stride_h, width // stride_w


def embed_pixel_values(
    trunk: nn.Module, pixel_values: torch.Tensor, bool_masked_pos: torch.Tensor | None = None
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The encoder input of `trunk` (a `Sapiens2Model` or `Sapiens2Backbone`): `(hidden_states, (cos, sin))`, CLS +
    register + patch tokens (one per window with the 4K tokenizer) `(batch_size, num_prefix_tokens + grid_h * grid_w,
    hidden_size)` and their grid's RoPE, each `(grid_h * grid_w, head_dim)`."""
    grid_h, grid_w = token_grid_size(trunk.config, pixel_values)
    embeddings = trunk.embeddings
    pixel_values = pixel_values.to(embeddings.patch_embeddings.weight.dtype)
    if trunk.tokenizer is None:
        hidden_states = embeddings(pixel_values, bool_masked_pos=bool_masked_pos)
    else:
        if bool_masked_pos is not None:
            raise ValueError("`bool_masked_pos` is not supported with the 4K tokenizer; use `patch_keep_indices`.")
        window_tokens = trunk.tokenizer(pixel_values, embeddings.patch_embeddings)
        prefix = torch.cat((embeddings.cls_token, embeddings.register_tokens), dim=1)
        hidden_states = torch.cat((prefix.expand(window_tokens.shape[0], -1, -1), window_tokens), dim=1)
    return hidden_states, trunk.rope_embeddings(grid_h, grid_w)


class _Sapiens2Trunk:
    """What `Sapiens2Model` and `Sapiens2Backbone` share: the encoder's modules, under the same names so that both
    load the same files, and a backbone's loading rules (any checkpoint's backbone, its heads left out)."""

    # A task checkpoint loaded into a backbone class: its heads are deliberately left out (no load report).
    _keys_to_ignore_on_load_unexpected = [r"periods", *HEAD_KEY_PATTERNS]

    def _build_trunk(self, config: Sapiens2Config) -> None:
        self.embeddings = Sapiens2Embeddings(config)
        self.tokenizer = Sapiens2WindowTokenizer(config) if config.uses_tokenizer else None
        self.rope_embeddings = Sapiens2RopePositionEmbedding(config)
        self.model = Sapiens2Encoder(config)
        self.norm = Sapiens2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def get_input_embeddings(self) -> nn.Conv2d:
        return self.embeddings.patch_embeddings

    @classmethod
    def _allowed_unexpected_keys(cls) -> tuple[str, ...]:
        return ("decode_head.", "scale_head.")

    @classmethod
    def _check_task(cls, config, source) -> None:
        return None


class Sapiens2Model(_Sapiens2Trunk, Sapiens2PreTrainedModel):
    """The Sapiens2 backbone: patch embedding, CLS + register tokens, RoPE transformer blocks, final RMSNorm."""

    def __init__(self, config: Sapiens2Config):
        super().__init__(config)
        self._build_trunk(config)
        self.post_init()

    def _grid_size(self, pixel_values: torch.Tensor) -> tuple[int, int]:
        return token_grid_size(self.config, pixel_values)

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor,
        patch_keep_indices: torch.LongTensor | None = None,
        bool_masked_pos: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPooling:
        r"""
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, 3, height, width)`):
                Normalised RGB (ImageNet mean/std); height and width divisible by the patch size (16).
            patch_keep_indices (`torch.LongTensor` of shape `(batch_size, num_kept)`, *optional*):
                Row-major indices of the patch tokens to keep (masked pretraining by token removal); each kept token
                keeps its own RoPE position, the CLS and register tokens are always kept.
            bool_masked_pos (`torch.BoolTensor` of shape `(batch_size, num_patches)`, *optional*):
                Replaces the masked patch embeddings by a learned mask token (needs `config.use_mask_token`).
            kwargs: `return_dict`, `output_hidden_states`, `output_attentions`, attention-backend arguments.

        Returns:
            `BaseModelOutputWithPooling`: `last_hidden_state` `(batch_size, 1 + num_registers + num_patches_or_kept,
            hidden_size)` after the final RMSNorm; `pooler_output` the CLS token; `hidden_states`, `attentions` as
            recorded by the encoder.
        """
        hidden_states, (cos, sin) = embed_pixel_values(self, pixel_values, bool_masked_pos=bool_masked_pos)
        if patch_keep_indices is not None:
            num_prefix = self.config.num_prefix_tokens
            prefix, patches = hidden_states[:, :num_prefix], hidden_states[:, num_prefix:]
            index = patch_keep_indices.to(patches.device)
            patches = patches.gather(1, index[..., None].expand(-1, -1, patches.shape[-1]))  # (batch, kept, hidden)
            hidden_states = torch.cat((prefix, patches), dim=1)
            cos, sin = cos[index], sin[index]  # (batch, kept, head_dim)
        encoder_outputs = self.model(hidden_states, position_embeddings=(cos, sin), return_dict=True, **kwargs)
        sequence_output = self.norm(encoder_outputs.last_hidden_state)
        return BaseModelOutputWithPooling(
            last_hidden_state=sequence_output,
            pooler_output=sequence_output[:, 0],
            hidden_states=encoder_outputs.hidden_states,
            attentions=encoder_outputs.attentions,
        )

    def get_feature_map(self, pixel_values: torch.Tensor, **kwargs) -> torch.Tensor:
        """Patch tokens after the final norm on their grid: `(batch_size, hidden_size, height / 16, width / 16)`,
        the official `featmap` output that every task head reads."""
        grid = self._grid_size(pixel_values)
        outputs = self.forward(pixel_values, return_dict=True, **kwargs)
        return tokens_to_feature_map(outputs.last_hidden_state, self.config.num_prefix_tokens, grid)


class Sapiens2Encoder(Sapiens2PreTrainedModel):
    """The stack of Sapiens2 blocks, one per entry of `config.num_key_value_heads_per_layer`."""

    def __init__(self, config: Sapiens2Config):
        super().__init__(config)
        self.layer = nn.ModuleList(
            Sapiens2Layer(config, num_key_value_heads, use_qk_norm=config.use_qk_norm)
            for num_key_value_heads in config.num_key_value_heads_per_layer
        )
        self.post_init()

    # The last recorded hidden state stays the last layer's output: the final norm is applied by the model above.
    @capture_outputs(tie_last_hidden_states=False)
    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        """`(batch_size, seq_len, hidden_size)` prefix then patch tokens (RoPE `position_embeddings` of the patches)
        -> `BaseModelOutput`: `last_hidden_state` (no final norm); `hidden_states`: the input and each layer's output
        (`num_layers + 1` tensors, as transformers' port records them); `attentions`: each layer's weights, from
        backends that return them (empty with sdpa)."""
        for layer in self.layer:
            hidden_states = layer(hidden_states, position_embeddings=position_embeddings, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class Sapiens2Backbone(BackboneMixin, _Sapiens2Trunk, Sapiens2PreTrainedModel):
    """The Sapiens2 encoder as a transformers backbone (`AutoBackbone`, `load_backbone`): one feature map per stage
    named in `config.out_features` / `config.out_indices` (`"stem"`, the encoder input, then `"stage1"` ...
    `"stage{num_hidden_layers}"`), each `(batch_size, hidden_size, height / stride, width / stride)`, stride 16 (64
    for the 4K model). The final RMSNorm applies to every selected stage when `config.normalize_backbone_outputs`, as
    in transformers' own `Sapiens2Backbone`; the last stage is then exactly `Sapiens2Model.get_feature_map`. Loads the
    same files as `Sapiens2Model` strictly (a task checkpoint gives its backbone).
    """

    task = None

    def __init__(self, config: Sapiens2Config):
        config = as_sapiens2_config(config)
        super().__init__(config)
        self._build_trunk(config)
        self.num_features = [config.hidden_size] * (config.num_hidden_layers + 1)  # channels of every stage
        self.post_init()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, out_features=None, out_indices=None, **kwargs):
        """Loads the backbone of any Sapiens2 checkpoint (see `Sapiens2PreTrainedModel.from_pretrained`).

        Args:
            out_features (`list[str]`, *optional*), out_indices (`list[int]`, *optional*): the stages to return,
                replacing the checkpoint's (its last stage unless it was saved with others).
        """
        loaded = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        config = model.config
        if config.task is not None:
            # A task checkpoint's backbone: the head layout and labels are not part of it (as for official files).
            config.task, config.head_config, config.id2label, config.flip_pairs = None, None, None, None
        if out_features is not None or out_indices is not None:
            config.set_output_features_output_indices(out_features=out_features, out_indices=out_indices)
        return loaded

    # `filter_output_hidden_states` (transformers' backbones): every stage's tokens are always recorded, since the
    # selected stages are picked from them, and returned only when `output_hidden_states` asks for them.
    @can_return_tuple
    @filter_output_hidden_states
    def forward(self, pixel_values: torch.Tensor, **kwargs: Unpack[TransformersKwargs]) -> BackboneOutput:
        r"""Normalised RGB `pixel_values` `(batch_size, 3, height, width)`, sides divisible by the stride (16; 64 for
        the 4K model) -> `BackboneOutput`: `feature_maps`, one per selected stage in stage order (tokens `(batch_size,
        num_patches, hidden_size)` when `config.reshape_hidden_states` is False); `hidden_states` (when asked): every
        stage's tokens before the final norm, prefix tokens included; `attentions` (when asked).
        """
        config = self.config
        grid = token_grid_size(config, pixel_values)
        hidden_states, position_embeddings = embed_pixel_values(self, pixel_values)
        encoder_outputs = self.model(hidden_states, position_embeddings=position_embeddings, return_dict=True, **kwargs)
        feature_maps = []
        for stage_name, stage_states in zip(self.stage_names, encoder_outputs.hidden_states):
            if stage_name not in self.out_features:
                continue
            if config.normalize_backbone_outputs:
                stage_states = self.norm(stage_states)
            if config.reshape_hidden_states:
                feature_maps.append(tokens_to_feature_map(stage_states, config.num_prefix_tokens, grid).contiguous())
            else:
                feature_maps.append(stage_states[:, config.num_prefix_tokens :])
        return BackboneOutput(
            feature_maps=tuple(feature_maps),
            hidden_states=encoder_outputs.hidden_states,
            attentions=encoder_outputs.attentions,
        )


class Sapiens2TaskModel(Sapiens2PreTrainedModel):
    """Backbone + decode head: the base of every task model, official or registered (`sapiens2_hf.register_task`).

    A subclass sets `task` (its registry name), `loss_class`, `output_class` (its first field after `loss` holds the
    prediction) and, for a task added from outside the package, `spec` (a `TaskSpec` of what cannot be derived; see
    `sapiens2_tasks.spec_of_class`). `build_task_layers` builds backbone and head (a subclass extends it to check its
    config or add layers); `forward` returns `self.decode(pixel_values, labels=labels, loss_targets=(...))`.
    """

    # The official loss of the task (loss_sapiens2.py, official term weights), computed by `forward` from `labels`.
    loss_class: type[nn.Module]
    # The task's model output and, for a registered task, its layer-0 facts.
    output_class: type[ModelOutput] | None = None
    spec: TaskSpec | None = None

    def __init__(self, config: Sapiens2Config):
        super().__init__(config)
        self.build_task_layers(config)
        self.post_init()

    def post_init(self):
        super().post_init()
        # transformers merges the children's ignore patterns into the parent's: the backbone's (a task checkpoint's
        # heads) must not make a task model ignore unexpected head tensors.
        self._keys_to_ignore_on_load_unexpected -= set(HEAD_KEY_PATTERNS)

    def build_task_layers(self, config: Sapiens2Config) -> None:
        # Built once: `__init__` builds them, and a subclass written to the earlier recipe (its own `__init__` calling
        # this again) must not build the backbone a second time (twice the memory while a large model is built).
        if getattr(self, "_task_layers_built", False):
            return
        if config.head_config is None:
            raise ValueError(
                f"{type(self).__name__} needs `config.head_config` (the decode-head layout); build the config with "
                f"Sapiens2Config.from_preset(size, task={self.task!r})."
            )
        if config.task is None:
            # A head layout without a task (as transformers' model tests build configs): the class names the task, so
            # that the saved config.json records it and `from_pretrained` accepts the folder back into this class. On
            # this model's own copy: the caller's config may be shared with models of other tasks.
            self.config = config = copy.deepcopy(config)
            config.task = self.task
        self.num_labels = config.num_labels
        self.model = Sapiens2Model(config)
        self.decode_head = Sapiens2Head(config, norm_layer=head_norm_layer(config.head_config))
        self._task_layers_built = True

    # The image processor's geometry outputs: transformers' stock pipelines call `model(**processor_output)`, and
    # these are not model inputs, so they must not reach the attention backends as keyword arguments.
    _PROCESSOR_GEOMETRY_KEYS = ("original_sizes", "padding", "geometry_images")

    def _feature_map(self, pixel_values: torch.Tensor, **kwargs):
        for key in self._PROCESSOR_GEOMETRY_KEYS:
            kwargs.pop(key, None)
        grid = self.model._grid_size(pixel_values)
        outputs = self.model(pixel_values, return_dict=True, **kwargs)
        return tokens_to_feature_map(outputs.last_hidden_state, self.config.num_prefix_tokens, grid), outputs

    def decode(self, pixel_values: torch.Tensor, output_class=None, field: str | None = None, labels=None,
               loss_targets=(), **kwargs):
        """Backbone -> feature map -> decode head, wrapped in `output_class` (default: the class's) with the prediction
        under `field` (default: the spec's `output_field`) and the task loss against `labels`, then `loss_targets`,
        when `labels` is given. `return_dict=False` gives the tuple, so a registered task's `forward` needs no
        `can_return_tuple`."""
        if output_class is None or field is None:
            spec = spec_of_class(type(self))
            output_class, field = output_class or type(self).output_class, field or spec.output_field
        return_dict = kwargs.pop("return_dict", None)
        feature_map, outputs = self._feature_map(pixel_values, **kwargs)
        prediction = self.decode_head(feature_map)
        output = output_class(
            loss=self._task_loss(prediction, labels, *loss_targets) if labels is not None else None,
            **{field: prediction},
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return_dict = return_dict if return_dict is not None else getattr(self.config, "return_dict", True)
        return output if return_dict else output.to_tuple()

    def _loss_function(self) -> nn.Module:
        """The task loss with its official settings (a subclass adapts them to its config)."""
        return self.loss_class()

    def _task_loss(self, *loss_inputs) -> torch.Tensor:
        """The total of the task loss on `loss_inputs` (model outputs, then targets, in the loss's order): a scalar."""
        loss_fn = self._loss_function().to(loss_inputs[0].device)  # the seg class weights follow the logits
        total, _ = loss_fn(*loss_inputs)
        return total

    def _required_target(self, value: torch.Tensor | None, name: str, what: str) -> torch.Tensor:
        """`value`, or a ValueError naming the `forward` argument the task loss needs beside `labels`."""
        if value is None:
            raise ValueError(f"The {self.task} loss needs `{name}` ({what}) with `labels`; pass it to the model.")
        return value

    @classmethod
    def from_backbone(cls, pretrained_backbone, config: Sapiens2Config | None = None, head_config=None, **kwargs):
        """A new task model on a pretrained backbone (an official file, a folder or Hub repo loaded with `kwargs`, or a
        `Sapiens2Model` / `Sapiens2Backbone`), its decode head freshly initialised. The head is `config`'s (whose
        backbone fields must match) or `head_config`: an official size id (its head for this task; default: the
        backbone's own size), `"tiny"`, or a `Sapiens2HeadConfig` dict."""
        backbone = (
            pretrained_backbone
            if isinstance(pretrained_backbone, (Sapiens2Model, Sapiens2Backbone))  # same tensor names
            else Sapiens2Model.from_pretrained(pretrained_backbone, **kwargs)
        )
        if config is None:
            config = cls._task_config_for_backbone(backbone.config, head_config)
        model = cls(config)
        own, theirs = backbone.config.to_dict(), config.to_dict()
        keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads_per_layer",
                "intermediate_size", "num_register_tokens", "num_tokenizer_layers")
        for key in keys:
            if own[key] != theirs[key]:
                raise ValueError(f"The backbone has {key}={own[key]} but the config asks for {theirs[key]}.")
        model.model.load_state_dict(backbone.state_dict(), strict=True)
        return model

    @classmethod
    def _task_config_for_backbone(cls, backbone_config: Sapiens2Config, head_config) -> Sapiens2Config:
        from .configuration_sapiens2_hf import HEAD_PRESETS, head_kwargs_for_task, task_label_kwargs, tiny_config

        if head_config is None:
            head_config = backbone_config.variant
            if head_config is None:
                raise ValueError(
                    "The backbone is not an official size, so there is no default head layout: pass "
                    "`head_config` (an official size id such as '0.4b', 'tiny', or a head-config dict) or `config`."
                )
        if isinstance(head_config, str):
            if head_config == "tiny":
                head_kwargs = tiny_config(cls.task).head_config.to_dict()
            elif head_config in HEAD_PRESETS[cls.task]:
                head_kwargs = head_kwargs_for_task(cls.task, HEAD_PRESETS[cls.task][head_config])
            else:
                raise ValueError(f"No {cls.task} head preset {head_config!r}; choose 'tiny' or one of {sorted(HEAD_PRESETS[cls.task])}.")
        else:
            head_kwargs = dict(head_config if isinstance(head_config, dict) else head_config.to_dict())
        if cls.task == "pointmap" and head_kwargs.get("scale_conv_out_channels"):
            head_kwargs.pop("scale_final_input_size", None)  # recomputed for this backbone's input size
        dropped = ("model_type", "transformers_version", "id2label", "label2id", "num_labels", "flip_pairs")
        fields = {k: v for k, v in backbone_config.to_dict().items() if k not in dropped}
        fields.update(task=cls.task, head_config=head_kwargs, **task_label_kwargs(cls.task))
        return Sapiens2Config(**fields)


class Sapiens2ForPoseEstimation(Sapiens2TaskModel):
    """Sapiens2 with the official top-down heatmap head (308 keypoints at 1/4 of the input resolution)."""

    task = "pose"
    loss_class = PoseHeatmapLoss
    output_class = Sapiens2PoseEstimatorOutput

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        label_weights: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Sapiens2PoseEstimatorOutput:
        r"""
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, 3, height, width)`): normalised person crops.
            labels (`torch.Tensor` of shape `(batch_size, num_keypoints, height / 4, width / 4)`, *optional*):
                Target heatmaps (as the image processor's `keypoints=` builds them); with them, `loss` is the official
                `PoseHeatmapLoss` with `label_weights` (`(batch_size, num_keypoints)`, required with `labels`).
            kwargs: `output_hidden_states`, `output_attentions`, `return_dict`, attention-backend arguments.
        """
        if labels is not None:
            label_weights = self._required_target(label_weights, "label_weights", "per-keypoint weights")
        return self.decode(pixel_values, labels=labels, loss_targets=(label_weights,), **kwargs)


class Sapiens2ForSemanticSegmentation(Sapiens2TaskModel):
    """Sapiens2 with the official body-part segmentation head (29 classes at full input resolution)."""

    task = "seg"
    loss_class = SegmentationLoss
    output_class = SemanticSegmenterOutput

    def _loss_function(self) -> nn.Module:
        # The official class weights belong to the 29 body-part classes; another label set trains unweighted. The ignored
        # label is the config's (transformers' `semantic_loss_ignore_index`, 255 by default).
        official = self.config.num_labels == len(SEG_CE_CLASS_WEIGHTS)
        return self.loss_class(class_weights=None if official else (),
                               ignore_index=getattr(self.config, "semantic_loss_ignore_index", 255))

    @can_return_tuple
    def forward(
        self, pixel_values: torch.Tensor, labels: torch.LongTensor | None = None, **kwargs: Unpack[TransformersKwargs]
    ) -> SemanticSegmenterOutput:
        r"""
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, 3, height, width)`): normalised images.
            labels (`torch.LongTensor` of shape `(batch_size, height, width)`, *optional*): class ids, 255 ignored;
                with them, `loss` is the official `SegmentationLoss` (not transformers' plain cross-entropy).
            kwargs: `output_hidden_states`, `output_attentions`, `return_dict`, attention-backend arguments.
        """
        return self.decode(pixel_values, labels=labels, **kwargs)


class Sapiens2ForNormalEstimation(Sapiens2TaskModel):
    """Sapiens2 with the official pixel-shuffle surface-normal head."""

    task = "normal"
    loss_class = NormalLoss
    output_class = Sapiens2NormalEstimatorOutput

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Sapiens2NormalEstimatorOutput:
        r"""
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, 3, height, width)`): normalised images.
            labels (`torch.Tensor` of shape `(batch_size, 3, height, width)`, *optional*): unit camera-frame normals
                on the valid pixels of `mask` (bool or 0/1 `(batch_size, 1, height, width)`; default: all); with them,
                `loss` is the official `NormalLoss`.
            kwargs: `output_hidden_states`, `output_attentions`, `return_dict`, attention-backend arguments.
        """
        return self.decode(pixel_values, labels=labels, loss_targets=(mask,), **kwargs)


class Sapiens2ForPointmapEstimation(Sapiens2TaskModel):
    """Sapiens2 with the official pointmap head and its focal-scale branch."""

    task = "pointmap"
    loss_class = PointmapLoss

    def build_task_layers(self, config: Sapiens2Config) -> None:
        super().build_task_layers(config)
        has_scale = config.head_config.scale_conv_out_channels is not None
        self.scale_head = Sapiens2PointmapScaleHead(config) if has_scale else nn.Identity()

    def _check_scale_input(self, feature_map: torch.Tensor) -> None:
        head = self.config.head_config
        flat = pointmap_scale_features(feature_map.shape[-2:], head.scale_conv_kernel_sizes, head.scale_conv_out_channels)
        expected = self.config.head_config.scale_final_input_size
        if flat != expected:
            raise ValueError(
                f"The pointmap scale branch is tied to the input size it was trained at (its MLP takes {expected} "
                f"features), but this {tuple(feature_map.shape[-2:])} token grid gives {flat}. Resize the input to "
                f"the model's size {self.config.image_size} (the image processor does this)."
            )

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        target_scales: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        intrinsics: torch.Tensor | None = None,
        target_mean_depth: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Sapiens2PointmapEstimatorOutput:
        r"""
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, 3, height, width)`): normalised images.
            labels (`torch.Tensor` of shape `(batch_size, 3, height, width)`, *optional*): target canonical XYZ
                (metric XYZ x `768 / f_x`), any value off `mask`. With them, `loss` is the official `PointmapLoss`
                (see it for `target_scales`, `mask`, `intrinsics`, `target_mean_depth`); it needs the scale branch.
            kwargs: `output_hidden_states`, `output_attentions`, `return_dict`, attention-backend arguments.
        """
        feature_map, outputs = self._feature_map(pixel_values, **kwargs)
        scales = None
        if not isinstance(self.scale_head, nn.Identity):
            self._check_scale_input(feature_map)
            scales = self.scale_head(feature_map)
        pointmaps = self.decode_head(feature_map)
        loss = None
        if labels is not None:
            if scales is None:
                raise ValueError("The pointmap loss needs the scale branch (`scales`); this model's head has none.")
            target_scales = self._required_target(target_scales, "target_scales", "canonical scales 768 / f_x")
            intrinsics = self._required_target(intrinsics, "intrinsics", "(batch_size, 3, 3) pixel intrinsics")
            loss = self._task_loss(pointmaps, scales, labels, target_scales, mask, intrinsics, target_mean_depth)
        return Sapiens2PointmapEstimatorOutput(
            loss=loss,
            pointmaps=pointmaps,
            scales=scales,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class Sapiens2ForAlbedoEstimation(Sapiens2TaskModel):
    """Sapiens2 with the official albedo head (the normal head's layout with channel RMSNorms). Not in transformers."""

    task = "albedo"
    loss_class = AlbedoLoss
    output_class = Sapiens2AlbedoEstimatorOutput

    def build_task_layers(self, config: Sapiens2Config) -> None:
        if config.head_config is not None and config.head_config.norm_type != "rms_norm":
            raise ValueError("The albedo head uses channel RMSNorms: set `head_config.norm_type='rms_norm'`.")
        super().build_task_layers(config)

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Sapiens2AlbedoEstimatorOutput:
        r"""
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, 3, height, width)`): normalised images.
            labels (`torch.Tensor` of shape `(batch_size, 3, height, width)`, *optional*): target RGB albedo in
                `[0, 1]` on the valid pixels of `mask` (bool or 0/1 `(batch_size, 1, height, width)`; default: all);
                with them, `loss` is the official `AlbedoLoss`.
            kwargs: `output_hidden_states`, `output_attentions`, `return_dict`, attention-backend arguments.
        """
        return self.decode(pixel_values, labels=labels, loss_targets=(mask,), **kwargs)


class Sapiens2ForImageMatting(Sapiens2TaskModel):
    """Sapiens2 with the official matting head: the pixel-shuffle layout of the normal head with 4 outputs and a
    sigmoid, channels 0-2 the pre-multiplied RGB foreground and channel 3 the alpha matte."""

    task = "matting"
    loss_class = MattingLoss

    def build_task_layers(self, config: Sapiens2Config) -> None:
        if config.num_labels != 4:
            raise ValueError(
                f"The matting head predicts 4 channels (pre-multiplied RGB foreground + alpha), but the config has "
                f"num_labels={config.num_labels}; build it with Sapiens2Config.from_preset(size, task='matting')."
            )
        super().build_task_layers(config)

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        foreground_labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Sapiens2ImageMattingOutput:
        r"""
        Args:
            pixel_values (`torch.Tensor` of shape `(batch_size, 3, height, width)`): normalised images.
            labels (`torch.Tensor` of shape `(batch_size, 1, height, width)`, *optional*): target alpha in `[0, 1]`
                on the pixels of `mask` (bool or 0/1; default: all), with `foreground_labels` (pre-multiplied
                `alpha * F`; without it no foreground term): `loss` is `MattingLoss`.
            kwargs: `output_hidden_states`, `output_attentions`, `return_dict`, attention-backend arguments.
        """
        feature_map, outputs = self._feature_map(pixel_values, **kwargs)
        matting = self.decode_head(feature_map).sigmoid()
        alphas, foregrounds = matting[:, 3:], matting[:, :3]
        loss = None
        if labels is not None:
            loss = self._task_loss(alphas, foregrounds, labels, mask, foreground_labels)
        return Sapiens2ImageMattingOutput(
            loss=loss,
            alphas=alphas,
            foregrounds=foregrounds,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# Task -> model class (None: the backbone), from the class names of the task registry: a registry entry whose class is
# not defined in this file fails here, at import.
TASK_MODEL_CLASSES = {
    None: globals()[BACKBONE_MODEL_CLASS],
    **{spec.name: globals()[spec.model_class] for spec in TASK_SPECS.values()},
}


def model_class_for_task(task: str | None):
    """The model class of a task (`None`: the backbone)."""
    if task not in TASK_MODEL_CLASSES:
        raise ValueError(f"Unknown task {task!r}; choose one of {TASKS} or None for the backbone.")
    return TASK_MODEL_CLASSES[task]


register_original_format_conversions()
