"""Official file -> Hub-ready HF folder (config.json, model.safetensors, preprocessor_config.json, README.md model card).

The key mapping and architecture inference live in `sapiens2_hf.modeling.convert_official_sapiens2` (they ship with
the models so that `from_pretrained` reads official files directly); this module adds the folder layout, the model
card, the atomic write and a numerical check that the folder reproduces the official file's outputs.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ..conversion import official_checkpoint_kind
from .model_card import render_model_card
from ..visualization.io import current_umask
from ..modeling import Sapiens2Config, model_class_for_task

logger = logging.getLogger(__name__)


def _verification_input(config: Sapiens2Config) -> torch.Tensor:
    """A small deterministic input: the model's own size for the size-locked pointmap scale branch, else 4x3 patches."""
    patch_h, patch_w = config.patch_size_hw
    if config.task == "pointmap" and config.head_config.scale_conv_out_channels is not None:
        height, width = config.image_size_hw
    else:
        height, width = 4 * patch_h, 3 * patch_w
    generator = torch.Generator().manual_seed(0)
    return torch.randn(1, config.num_channels, height, width, generator=generator)


def _save_image_processor(folder: Path, config: Sapiens2Config) -> None:
    from .. import processing

    factory = getattr(processing, "image_processor_for_task", None)
    if factory is None:
        logger.warning("No image processor available in this build; preprocessor_config.json not written.")
        return
    height, width = config.image_size_hw
    factory(config.task, size={"height": height, "width": width}).save_pretrained(folder)


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
    """Converts an official `sapiens2_<size>_<task>.safetensors` file into a folder that `from_pretrained` loads.

    Args:
        source: the official file.
        out_dir: the folder to create (written to a temporary folder first, then moved into place).
        task: `"auto"` (read from the file), `None`/`"pretrain"` for the backbone, or a task name, which must agree
            with the file.
        rope_dtype: RoPE dtype recorded in the config (`"bfloat16"`, official).
        image_size: `(height, width)` recorded in the config and the processor (default 1024x768).
        verify: reload the folder and check that it gives exactly the same outputs as the official file.
        overwrite: replace an existing non-empty `out_dir`.
        card_kwargs: extra arguments of `render_model_card` (repo id, base model, evaluation results).

    Returns:
        The output folder.
    """
    source, out_dir = Path(source), Path(out_dir)
    kind = official_checkpoint_kind(source)
    file_task = None if kind == "pretrain" else kind
    if task == "auto":
        task = file_task
    elif task == "pretrain":
        task = None
    if task != file_task and task is not None:
        raise ValueError(f"{source.name} is a `{kind}` checkpoint; --task {task} does not match it.")
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise FileExistsError(f"{out_dir} exists and is not empty; choose another folder or pass overwrite=True.")
    overrides = {"rope_dtype": rope_dtype}
    if image_size is not None:
        overrides["image_size"] = list(image_size)
    model = model_class_for_task(task).from_pretrained(source, **overrides)
    if task == "pointmap" and model.config.head_config.scale_conv_out_channels is not None:
        try:
            model._check_scale_input(torch.zeros(1, 1, *(s // p for s, p in zip(model.config.image_size_hw, model.config.feature_stride))))
        except ValueError as error:
            raise ValueError(
                f"{source.name}: the pointmap scale branch does not fit the input size {model.config.image_size_hw}; "
                "pass the size the model was trained at (--image-size HEIGHT WIDTH)."
            ) from error
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    staging.chmod(0o777 & ~current_umask())  # mkdtemp makes an owner-only folder; the result is a normal one
    try:
        model.save_pretrained(staging)
        _save_image_processor(staging, model.config)
        card = render_model_card(
            model.config,
            num_parameters=sum(p.numel() for p in model.parameters()),
            **{"source": f"converted from the official file `{source.name}` with `sapiens2-hf convert`", **(card_kwargs or {})},
        )
        card.save(staging / "README.md")
        if verify:
            reloaded = model_class_for_task(task).from_pretrained(staging)
            pixel_values = _verification_input(model.config)
            with torch.no_grad():
                expected, actual = model(pixel_values), reloaded(pixel_values)
            for name, value in expected.items():
                if isinstance(value, torch.Tensor) and not torch.equal(value, actual[name]):
                    raise RuntimeError(f"Conversion check failed: `{name}` differs after reloading {staging}.")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out_dir
