"""The conversion: official checkpoint -> Hub-ready HF folder (config.json, model.safetensors,
preprocessor_config.json, README.md model card), the one entry point of `sapiens2-hf convert` and the zoo publisher.

Reading the official format is loading (`modeling.official_format_sapiens2_hf`, shipped with the models so that
`from_pretrained` reads official files); this module adds the folder layout, the model card, the atomic write and a
numerical check that the folder reproduces the official file's outputs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from ..modeling.configuration_sapiens2_hf import pointmap_image_sizes
from ..modeling.loading_sapiens2_hf import official_checkpoint_kind, resolve_checkpoint
from ..modeling.official_format_sapiens2_hf import OFFICIAL_ASPECT
from .model_card import render_model_card
from ..utils.atomic_io import replace_into_folder, staging_folder
from ..utils.run_lock import check_run_folder_free, refuse_filled_folder, run_folder_lock
from ..modeling import Sapiens2Config, model_class_for_task
from ..processing import image_processor_for_task

logger = logging.getLogger(__name__)


def _verification_input(config: Sapiens2Config) -> torch.Tensor:
    """A small deterministic input the model accepts: 4x3 encoder tokens (the feature stride: the patch, or the
    patch times the tokenizer window for 4K models); for a pointmap scale branch, the smallest official-aspect size
    it fits (else the configured size)."""
    stride_h, stride_w = config.feature_stride
    height, width = 4 * stride_h, 3 * stride_w
    head = config.head_config
    if head is not None and head.scale_conv_out_channels is not None:  # the pointmap's scale head
        fitting = pointmap_image_sizes(head.to_dict(), config.feature_stride, OFFICIAL_ASPECT)
        height, width = fitting[0] if fitting else config.image_size_hw
    generator = torch.Generator().manual_seed(0)
    return torch.randn(1, config.num_channels, height, width, generator=generator)


# A reloaded model's outputs may differ by float rounding (kernels pick code paths by memory layout: seen 1 ulp in
# pointmap `scales` with identical state dicts, which can flip a bf16 RoPE rounding); a conversion bug moves them O(1).
VERIFY_REL_L2 = 1e-3


# Bookkeeping fields that saving rewrites (versions, paths, the storage dtype) and that do not change the model.
_BOOKKEEPING_CONFIG_FIELDS = {"transformers_version", "_name_or_path", "architectures", "auto_map", "custom_pipelines", "dtype"}


def _comparable_config(config_dict: dict) -> dict:
    return {
        key: _comparable_config(value) if isinstance(value, dict) else value
        for key, value in config_dict.items()
        if key not in _BOOKKEEPING_CONFIG_FIELDS
    }


class ConversionCheckError(RuntimeError):
    """A converted folder that does not reproduce its source model."""


def verify_reload(model, reloaded, source: str) -> dict[str, float]:
    """Checks that `reloaded` is `model`: every tensor bit-identical, the same config, and outputs on a fixed input
    within float rounding (relative L2 <= `VERIFY_REL_L2`). Returns the relative L2 distance per output field.

    Raises:
        ConversionCheckError: naming the tensor, config field or output that differs.
    """
    theirs = reloaded.state_dict()
    for name, tensor in model.state_dict().items():
        if name not in theirs or theirs[name].dtype != tensor.dtype or not torch.equal(theirs[name], tensor):
            raise ConversionCheckError(f"Conversion check failed: tensor `{name}` differs after reloading {source}.")
    ours, reread = _comparable_config(model.config.to_dict()), _comparable_config(reloaded.config.to_dict())
    for key in sorted(set(ours) | set(reread)):
        if ours.get(key) != reread.get(key):
            raise ConversionCheckError(
                f"Conversion check failed: config field `{key}` is {reread.get(key)!r} after reloading {source}, "
                f"not {ours.get(key)!r}."
            )
    pixel_values = _verification_input(model.config)
    with torch.no_grad():
        expected, actual = model(pixel_values), reloaded(pixel_values)
    distances = {}
    for name, value in expected.items():
        if not isinstance(value, torch.Tensor):
            continue
        other = actual[name]
        distance = ((other.double() - value.double()).norm() / value.double().norm().clamp_min(1e-30)).item()
        if not torch.isfinite(other).all() or not distance <= VERIFY_REL_L2:
            raise ConversionCheckError(
                f"Conversion check failed: output `{name}` of {source} differs from the source model's (relative "
                f"L2 {distance:.3g} > {VERIFY_REL_L2})."
            )
        distances[name] = distance
    return distances


def _save_image_processor(folder: Path, config: Sapiens2Config) -> None:
    height, width = config.image_size_hw
    image_processor_for_task(config.task, size={"height": height, "width": width}).save_pretrained(folder)


def checkpoint_task(source: str) -> tuple[str | None, str]:
    """`(task, description)` of any `from_pretrained` source: an official file, or a folder or Hub repo in any of the
    layouts `resolve_checkpoint` reads (Meta's official repos included)."""
    resolved = resolve_checkpoint(source)
    if resolved.kind == "official":
        kind = official_checkpoint_kind(resolved.location)
        return (None if kind == "pretrain" else kind), f"the official file `{Path(resolved.location).name}`"
    return Sapiens2Config.from_pretrained(resolved.location).task, f"`{source}`"


def convert_official_checkpoint(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    task: str | None = "auto",
    rope_dtype: str = "bfloat16",
    image_size: tuple[int, int] | None = None,
    verify: bool = True,
    overwrite: bool = False,
    card_kwargs: dict | None = None,
) -> Path:
    """Converts an official Sapiens2 checkpoint into a folder that `from_pretrained` and the pipelines load.

    Args:
        source: an official `sapiens2_<size>_<task>.safetensors` file, or a folder or Hub repo holding one (Meta's
            official repos, with or without transformers-format files beside it).
        out_dir: the folder to create (staged, then moved in file by file; other files in it stay).
        task: `"auto"` (from the checkpoint), `None`/`"pretrain"` for the backbone, or a task agreeing with it.
        rope_dtype: RoPE dtype recorded in the config (`"bfloat16"`, official).
        image_size: `(height, width)` recorded in the config and the processor; by default the checkpoint's own
            (1024x768, 4096x3072 for 4K, or what a pointmap scale branch fits, see `infer_image_size`).
        verify: reload the folder and check it with `verify_reload`.
        overwrite: replace the conversion's files in an existing non-empty `out_dir`.
        card_kwargs: extra arguments of `render_model_card` (repo id, base model, evaluation results).
    """
    source_name = os.fspath(source)
    out_dir = Path(out_dir)
    saved_task, description = checkpoint_task(source_name)
    task = _requested_task(task, saved_task, source_name)
    refuse_filled_folder(out_dir, overwrite)
    check_run_folder_free(out_dir)  # refused now rather than after the load; the lock is taken to publish
    overrides = {"rope_dtype": rope_dtype}
    if image_size is not None:
        overrides["image_size"] = list(image_size)
    model = model_class_for_task(task).from_pretrained(source_name, **overrides)
    _check_input_size(model, source_name)
    with run_folder_lock(out_dir), staging_folder(out_dir) as staging:
        refuse_filled_folder(out_dir, overwrite)  # written by another conversion meanwhile
        _write_model_folder(staging, model, description, card_kwargs)
        if verify:
            verify_reload(model, model_class_for_task(task).from_pretrained(staging), str(out_dir))
        replace_into_folder(staging, out_dir)
    return out_dir


def _requested_task(task: str | None, checkpoint_task: str | None, source_name: str) -> str | None:
    """`convert_official_checkpoint`'s `task` resolved against the checkpoint's own (None: the backbone)."""
    if task == "auto":
        task = checkpoint_task
    elif task == "pretrain":
        task = None
    if task is not None and task != checkpoint_task:
        what = "backbone" if checkpoint_task is None else f"`{checkpoint_task}`"
        raise ValueError(f"{source_name} is a {what} checkpoint; --task {task} does not match it.")
    return task


def _check_input_size(model, source_name: str) -> None:
    """The recorded input size fits the model: a multiple of its feature stride, and of the pointmap scale head."""
    stride = model.config.feature_stride
    if any(size % step for size, step in zip(model.config.image_size_hw, stride)):
        raise ValueError(
            f"--image-size {model.config.image_size_hw[0]} {model.config.image_size_hw[1]} is not a multiple of the "
            f"model's feature stride {stride[0]}x{stride[1]} (patch size{' x tokenizer window' if model.config.uses_tokenizer else ''})."
        )
    if getattr(model.config.head_config, "scale_conv_out_channels", None) is not None:  # the pointmap's scale head
        try:
            model._check_scale_input(torch.zeros(1, 1, *(s // p for s, p in zip(model.config.image_size_hw, model.config.feature_stride))))
        except ValueError as error:
            raise ValueError(
                f"{source_name}: the pointmap scale branch does not fit the input size {model.config.image_size_hw}; "
                "pass the size the model was trained at (--image-size HEIGHT WIDTH)."
            ) from error


def _write_model_folder(folder: Path, model, description: str, card_kwargs: dict | None) -> None:
    """The weights, config, image processor and model card."""
    model.save_pretrained(folder)
    _save_image_processor(folder, model.config)
    card = render_model_card(
        model.config,
        num_parameters=sum(p.numel() for p in model.parameters()),
        **{"source": f"converted from {description} with `sapiens2-hf convert`", **(card_kwargs or {})},
    )
    card.save(folder / "README.md")
