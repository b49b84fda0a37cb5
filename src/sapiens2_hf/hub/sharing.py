"""Saving and pushing Sapiens2 models, processors and adapters as complete, self-describing Hub repositories.

A repository written here holds the weights, config.json, preprocessor_config.json, a model card (README.md) and,
unless disabled, the sapiens2_hf modeling files with an `auto_map`, so that a user without sapiens2_hf can load it with
`trust_remote_code=True`. transformers' own Sapiens2 classes, named explicitly, also read the pose, seg, normal,
pointmap and matting checkpoints (same module and tensor names).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from huggingface_hub import HfApi, ModelCard
from transformers.dynamic_module_utils import get_relative_import_files

from ..utils.atomic_io import replace_into_folder, staging_folder
from ..utils.run_lock import refuse_filled_folder, run_folder_lock
from ..modeling import Sapiens2PreTrainedModel
from ..modeling import pipeline_sapiens2_hf as pipeline_module
from ..modeling.sapiens2_tasks import TASK_SPECS
from ..pipelines import PIPELINE_CLASSES
from ..processing import Sapiens2HFImageProcessor
from .model_card import render_model_card


logger = logging.getLogger(__name__)

def _auto_class_name(task: str | None) -> str:
    """The transformers Auto class a model of `task` registers under for remote code (the registry's `auto_class`;
    "AutoModel" for the backbone and for a task transformers has no Auto class for, such as albedo)."""
    return "AutoModel" if task is None else TASK_SPECS[task].auto_class


def enable_remote_code(model: Sapiens2PreTrainedModel, image_processor=None) -> None:
    """Makes `save_pretrained` ship our modeling (and processing) files with an `auto_map`, so that
    `AutoModel.from_pretrained(repo, trust_remote_code=True)` needs nothing of sapiens2_hf installed."""
    model.config.register_for_auto_class("AutoConfig")
    model.register_for_auto_class(_auto_class_name(model.config.task))
    auto_map = dict(getattr(model.config, "auto_map", None) or {})
    module = type(model).__module__.split(".")[-1]
    if model.config.task is not None and _auto_class_name(model.config.task) != "AutoModel":
        # Also reachable through AutoModel, the class users reach for first.
        auto_map["AutoModel"] = f"{module}.{type(model).__name__}"
    # Every checkpoint's backbone serves as a feature-map backbone inside other models (UperNet, DPT, ...).
    auto_map["AutoBackbone"] = f"{module}.Sapiens2Backbone"
    model.config.auto_map = auto_map
    if image_processor is not None and hasattr(image_processor, "register_for_auto_class"):
        image_processor.register_for_auto_class("AutoImageProcessor")


def ship_pipeline(folder: Path, task: str) -> None:
    """Adds the task's pipeline as remote code, so `pipeline(model=repo, trust_remote_code=True)` works without
    sapiens2_hf (the model resolved through `AutoModel`'s `auto_map`). The entry is `<pipeline task>-remote-code`:
    transformers prefers a config's custom pipeline to a registered one of the same name and then demands
    `trust_remote_code=True`, which would break `pipeline("sapiens2-pose", model=repo)` with sapiens2_hf installed."""
    pipeline_task = TASK_SPECS[task].pipeline_name
    # The pipeline file and its siblings from the one model folder, as transformers copies the model's own files.
    for path in (pipeline_module.__file__, *get_relative_import_files(pipeline_module.__file__)):
        shutil.copy(path, folder / Path(path).name)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["custom_pipelines"] = {
        f"{pipeline_task}-remote-code": {
            "impl": f"pipeline_sapiens2_hf.{PIPELINE_CLASSES[pipeline_task].__name__}",
            "pt": ["AutoModel"],
            "type": "image",
        }
    }
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


# The weight files transformers (and peft) load from a model folder. `save_for_hub` writes only model*.safetensors, and
# refuses (never deletes) any of these it would not replace: beside the new weights they would make the folder
# ambiguous (transformers prefers model.safetensors over an index, and an adapter_config.json over both).
WEIGHT_FILE_PATTERNS = (
    "model.safetensors",
    "model-?????-of-?????.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model-?????-of-?????.bin",
    "pytorch_model.bin.index.json",
)
ADAPTER_FILE_NAMES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def is_weight_file(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in WEIGHT_FILE_PATTERNS + ADAPTER_FILE_NAMES)


def _refuse_other_weights(folder: Path, written: set[str]) -> None:
    """Refuses `folder` when it holds weight files that this save does not replace."""
    if not folder.is_dir():
        return
    others = sorted(path.name for path in folder.iterdir()
                    if path.is_file() and path.name not in written and is_weight_file(path.name))
    if others:
        raise FileExistsError(
            f"{folder} holds weight files this save does not replace ({', '.join(others)}): a loader could take them "
            "instead of, or mixed with, the new weights. save_for_hub never deletes what it did not write: move them "
            "away, or save to another folder."
        )


_OVERWRITE_NOTE = (", which replaces only the files save_for_hub writes (weights, config.json, "
                   "preprocessor_config.json, README.md, modeling files) and keeps .git and every other file")


def _check_destination(folder: Path, overwrite: bool) -> None:
    """`save_for_hub`'s refusals before it takes the folder (and a warning about an interrupted save's leftover)."""
    refuse_filled_folder(folder, overwrite, _OVERWRITE_NOTE)
    leftover = folder.with_name(f".{folder.name}.old")
    if leftover.exists():
        logger.warning("%s is left over from an interrupted save; it is not used any more and can be deleted.",
                       leftover)


def _write_repository(staging: Path, model: Sapiens2PreTrainedModel, image_processor, card: ModelCard | None,
                      card_kwargs: dict | None, remote_code: bool) -> None:
    """The repository's files, in `staging`."""
    if image_processor is not None:
        # ours for the task: transformers' stock `Sapiens2ImageProcessor` (an official repo's) has no task policy and
        # no remote code, so a repo saved with it would not run in the pipelines without sapiens2_hf
        image_processor = Sapiens2HFImageProcessor.from_image_processor(image_processor, model.config.task)
    if remote_code:
        enable_remote_code(model, image_processor)
    model.save_pretrained(staging)
    if image_processor is not None:
        image_processor.save_pretrained(staging)
    if remote_code and model.config.task is not None:
        ship_pipeline(staging, model.config.task)
    if card is None:
        card = render_model_card(
            model.config, num_parameters=sum(p.numel() for p in model.parameters()), **(card_kwargs or {})
        )
    card.save(staging / "README.md")


def save_for_hub(
    model: Sapiens2PreTrainedModel,
    folder: str | os.PathLike,
    image_processor=None,
    card: ModelCard | None = None,
    remote_code: bool = True,
    card_kwargs: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Writes a complete repository folder: weights, config.json, preprocessor_config.json (with `image_processor`),
    README.md and, with `remote_code`, the modeling files.

    Files are staged beside `folder` and moved in with one atomic rename each; the save holds `folder` meanwhile
    (`utils.run_lock`). Nothing is ever deleted: a non-empty folder (a git clone of the Hub repo, an earlier save) is
    refused unless `overwrite=True`, which replaces only the files this save writes (`.git` and the rest stay).
    Weight files it would not replace (`WEIGHT_FILE_PATTERNS`, `ADAPTER_FILE_NAMES`: another format, an earlier
    save's shards, a LoRA adapter) would make the folder ambiguous: `FileExistsError` naming them, nothing written.

    Args:
        card: a ready model card; by default one is rendered from the config (`render_model_card(**card_kwargs)`).
        remote_code: ship the modeling files with an `auto_map` (see `enable_remote_code`).
    """
    folder = Path(folder)
    _check_destination(folder, overwrite)
    with run_folder_lock(folder), staging_folder(folder) as staging:
        refuse_filled_folder(folder, overwrite, _OVERWRITE_NOTE)  # again under the lock: a save may have finished
        _write_repository(staging, model, image_processor, card, card_kwargs, remote_code)
        _refuse_other_weights(folder, {path.name for path in staging.iterdir() if path.is_file()})
        replace_into_folder(staging, folder)
    return folder


def push_to_hub(
    model: Sapiens2PreTrainedModel,
    repo_id: str,
    image_processor=None,
    commit_message: str | None = None,
    private: bool | None = None,
    token: str | None = None,
    api: HfApi | None = None,
    remote_code: bool = True,
    card_kwargs: dict | None = None,
):
    """Creates (if needed) and uploads a complete repository in one commit. `api` defaults to `HfApi(token=token)`.

    Returns:
        What `api.upload_folder` returns (the commit info).
    """
    api = api if api is not None else HfApi(token=token)
    task = model.config.task or "backbone"
    commit_message = commit_message or f"Upload Sapiens2 {task} model with sapiens2_hf"
    card_kwargs = {"repo_id": repo_id, **(card_kwargs or {})}
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_for_hub(model, Path(tmp) / "repo", image_processor, remote_code=remote_code, card_kwargs=card_kwargs)
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        return api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=commit_message, repo_type="model")
