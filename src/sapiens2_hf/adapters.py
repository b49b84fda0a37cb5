"""LoRA adapter folders as `from_pretrained` sources (registration hands `load_adapter_model` to the model loader).

A fine-tuning run with LoRA (sapiens2_hf.training) writes a peft adapter folder: adapter_config.json naming the base
(`base_model_name_or_path`: the backbone or task model the run started from), adapter_model.safetensors (the LoRA
weights and the fully trained heads, peft's `modules_to_save`), and the task's config.json and
preprocessor_config.json beside them. `load_adapter_model` rebuilds base + adapter from such a folder (or Hub repo)
and, by default, merges the adapter into a plain task model, so that `Sapiens2For<Task>.from_pretrained(folder)` and
`pipeline("sapiens2-<task>", model=folder)` work on it as on any checkpoint.

peft is imported when an adapter is actually loaded.
"""

import importlib
import json
import os
import warnings

import torch
from transformers.utils import logging
from transformers.utils.peft_utils import find_adapter_config_file

from .modeling.configuration_sapiens2_hf import Sapiens2Config


logger = logging.get_logger(__name__)

ADAPTER_CONFIG_NAME = "adapter_config.json"
_FULL_WEIGHTS_NAMES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# Heads a task model may have; an adapter trained by sapiens2_hf carries them in full (peft `modules_to_save`).
_HEAD_MODULES = ("decode_head", "scale_head")
# `from_pretrained` arguments that also apply to loading the base (not `revision` / `subfolder`: those name the
# adapter repository's commit and folder, not the base's).
_BASE_HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "proxies")


def find_adapter_folder(name_or_path, kwargs: dict) -> str | None:
    """The local folder holding an adapter's files when `name_or_path` is a LoRA adapter (local folder or Hub repo
    with adapter_config.json and no full model weights), else `None`."""
    path = os.fspath(name_or_path) if isinstance(name_or_path, os.PathLike) else name_or_path
    if not isinstance(path, str):
        return None
    subfolder = kwargs.get("subfolder") or ""
    if os.path.isdir(path):
        folder = os.path.join(path, subfolder)
        if not os.path.isfile(os.path.join(folder, ADAPTER_CONFIG_NAME)):
            return None
        full = [n for n in _FULL_WEIGHTS_NAMES if os.path.isfile(os.path.join(folder, n))]
        if full:
            # Both kinds in one folder: the full weights win (as on the Hub), said aloud, since the adapter may be the
            # newer of the two (a LoRA run written into an older run's folder by hand).
            logger.warning(
                "%s holds full model weights (%s) and a LoRA adapter (%s): loading the full weights. To load the "
                "adapter, keep it in a folder of its own.", folder, ", ".join(full), ADAPTER_CONFIG_NAME)
            return None
        return folder
    if os.path.exists(path) or path.count("/") != 1:
        return None  # a file (official checkpoint), or not a Hub repo id
    hub_kwargs = {key: kwargs[key] for key in ("cache_dir", "token", "revision", "local_files_only")
                  if kwargs.get(key) is not None}
    config_file = find_adapter_config_file(path, subfolder=subfolder, **hub_kwargs)
    if config_file is None:
        return None
    from transformers.utils import cached_file

    common = {"subfolder": subfolder, "_raise_exceptions_for_missing_entries": False, **hub_kwargs}
    if any(cached_file(path, name, **common) is not None for name in _FULL_WEIGHTS_NAMES[:1]):
        return None  # a full model that also ships an adapter: load the model
    for name in ("adapter_model.safetensors", "config.json", "preprocessor_config.json"):
        cached_file(path, name, **common)
    return os.path.dirname(config_file)


def _covered_heads(weight_names, heads) -> list:
    """Which of `heads` the adapter's weights hold."""
    return [head for head in heads if any(f".{head}." in f".{name}" for name in weight_names)]


def load_adapter_model(cls, name_or_path, kwargs: dict, class_for_task):
    """`cls.from_pretrained(name_or_path, **kwargs)` for a LoRA adapter folder or repo, or `None` for anything else.

    The base named in adapter_config.json is loaded (a relative local path is read relative to the adapter folder),
    the task model is built from the config.json beside the adapter, the adapter is applied, and, unless
    `merge_adapter=False` is passed (then the `peft.PeftModel` is returned, e.g. to continue training), merged into a
    plain model of the task class. `Sapiens2Model` (the backbone class) returns the merged model's backbone.
    `class_for_task` gives the model class of a task (`None`: the backbone class), `model_class_for_task`.
    """
    folder = find_adapter_folder(name_or_path, kwargs)
    if folder is None:
        return None
    source = str(name_or_path)
    try:
        # peft is optional (`sapiens2_hf[train]`): imported when an adapter is loaded, its one-line error kept
        peft = importlib.import_module("peft")
        load_peft_weights = importlib.import_module("peft.utils").load_peft_weights
    except ImportError as error:
        raise ImportError(f"{source} is a LoRA adapter; loading it needs peft (`pip install peft`).") from error
    base = _adapter_base(folder, source)
    config = _adapter_task_config(folder, source)
    task_class = class_for_task(config.task)
    if cls.task is not None and cls.task != config.task:
        raise ValueError(f"{source} is a `{config.task}` adapter, not a `{cls.task}` one: load it with "
                         f"{task_class.__name__}.")
    merge = kwargs.pop("merge_adapter", True)
    dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
    base_kwargs = {key: kwargs[key] for key in _BASE_HUB_KWARGS if kwargs.get(key) is not None}
    weight_names = list(load_peft_weights(folder))
    backbone = class_for_task(None).from_pretrained(base, **base_kwargs)
    model = _model_under_adapter(task_class, config, backbone, weight_names, base, base_kwargs, source)
    with warnings.catch_warnings():
        # peft reads transformers' deprecated `is_gradient_checkpointing` alias while wrapping (transformers >= 5.25):
        # a FutureWarning about peft's code on every adapter load, not the caller's. Only that one is silenced.
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        peft_model = peft.PeftModel.from_pretrained(model, folder)
    peft_model.eval()
    if not merge:
        return peft_model
    merged = peft_model.merge_and_unload().eval()
    if isinstance(dtype, torch.dtype):
        merged = merged.to(dtype)
    return merged.model if cls.task is None else merged


def _adapter_base(folder: str, source: str) -> str:
    """The model the adapter in `folder` applies to: adapter_config.json's `base_model_name_or_path`, a relative
    local path read relative to the adapter folder."""
    with open(os.path.join(folder, ADAPTER_CONFIG_NAME), encoding="utf-8") as handle:
        adapter_config = json.load(handle)
    base = adapter_config.get("base_model_name_or_path")
    if not base:
        raise ValueError(
            f"{source} is a LoRA adapter whose adapter_config.json names no base model (`base_model_name_or_path` "
            "is empty), so there is nothing to apply it to. Set it to the backbone or model the adapter was trained "
            "from (adapters written by sapiens2_hf.training record it)."
        )
    if not os.path.isabs(base) and os.path.exists(os.path.join(folder, base)):
        base = os.path.join(folder, base)
    return base


def _adapter_task_config(folder: str, source: str) -> Sapiens2Config:
    """The task model's config saved beside the adapter: its task and head layout."""
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise ValueError(
            f"{source} is a LoRA adapter without the task's config.json beside it, so the head layout is unknown; "
            "save adapters with sapiens2_hf.training.save_lora_adapter."
        )
    config = Sapiens2Config.from_pretrained(folder)
    if config.task is None:
        raise ValueError(f"{source}: the adapter's config.json names no task; it must be a task model's config.")
    return config


def _model_under_adapter(task_class, config, backbone, weight_names, base, base_kwargs: dict, source: str):
    """The task model the adapter is applied to: the base backbone with a fresh head when the adapter's weights
    (`weight_names`) hold every head, else the base task checkpoint (an adapter without trained heads)."""
    model = task_class.from_backbone(backbone, config=config)
    heads = [head for head in _HEAD_MODULES if isinstance(getattr(model, head, None), torch.nn.Module)]
    missing_heads = sorted(set(heads) - set(_covered_heads(weight_names, heads)))
    if not missing_heads:
        return model
    try:
        return task_class.from_pretrained(base, **base_kwargs)
    except ValueError as error:
        raise ValueError(
            f"{source} holds no weights for {missing_heads} and its base {base} is not a {config.task} "
            "checkpoint, so the head would stay randomly initialised."
        ) from error
