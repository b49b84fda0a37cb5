"""LoRA fine-tuning with peft: adapters on the backbone's attention (optionally MLP) projections, heads trained in
full, adapter save/load, merging, and several task adapters sharing one frozen backbone.

peft is an extra (`sapiens2_hf[train]`), imported by each function that uses it (`_peft`), so that the package and
its inference commands work without it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_file
from torch import nn

from ..modeling import Sapiens2Config, Sapiens2Model, model_class_for_task
from ..utils.extras import require
from ..utils.run_lock import folder_entries
from .tasks import head_modules, training_task


if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel


ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def _peft():
    """The peft module, or a one-line `MissingExtraError` naming `pip install 'sapiens2_hf[train]'`."""
    return require("peft", feature="LoRA")


def lora_target_pattern(include_mlp: bool = False) -> str:
    """Regex (peft full-match) selecting the backbone's attention projections, plus the SwiGLU projections when
    `include_mlp`; decode heads never match."""
    names = ATTENTION_PROJECTIONS + (MLP_PROJECTIONS if include_mlp else ())
    return rf"(.*\.)?layer\.\d+\.(attention|mlp)\.({'|'.join(names)})"


def lora_config(task: str, rank: int = 16, alpha: int | None = None, dropout: float = 0.0,
                include_mlp: bool = False) -> LoraConfig:
    """LoRA settings for a Sapiens2 task model: rank-`rank` adapters (scale `alpha / rank`, default alpha = 2 *
    rank) on `q/k/v/o_proj` (and `gate/up/down_proj` with `include_mlp`), the task's heads (the training registry's
    `head_modules`: the decode head, and the pointmap scale head) trained in full through `modules_to_save`."""
    heads = list(training_task(task).head_modules)
    return _peft().LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else 2 * rank, lora_dropout=dropout,
                      target_modules=lora_target_pattern(include_mlp), modules_to_save=heads, bias="none")


def apply_lora(model: nn.Module, task: str, **kwargs) -> PeftModel:
    """Wrap a task model for LoRA training (backbone frozen, adapters + heads trainable); kwargs go to
    `lora_config`."""
    peft = _peft()
    with warnings.catch_warnings():
        # peft (0.21) reads transformers' deprecated `is_gradient_checkpointing` alias while wrapping: a FutureWarning
        # on every LoRA run about peft's code, not the caller's. Only that warning is silenced, only here.
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return peft.get_peft_model(model, lora_config(task, **kwargs))


def save_lora_adapter(
    peft_model: PeftModel,
    output_dir: str | Path,
    base_model_name_or_path: str | None = None,
    image_processor=None,
    eval_results: dict[str, float] | None = None,
) -> None:
    """Save a self-describing adapter folder.

    It holds the peft adapter (`adapter_config.json` with `base_model_name_or_path`, `adapter_model.safetensors`
    with the LoRA weights and the heads in full), the task model's `config.json` (the head layout, labels, input
    size), the image processor's `preprocessor_config.json` when given, and a model card (README.md). With the base
    recorded, `Sapiens2For<Task>.from_pretrained(output_dir)`, `pipeline("sapiens2-<task>", model=output_dir)` and
    `merge_lora` rebuild base + adapter; `load_task_adapters` needs only the config.

    Args:
        peft_model (`PeftModel`): A model wrapped by `apply_lora`.
        output_dir (`str` or `Path`): The adapter folder.
        base_model_name_or_path (`str`, *optional*): What the adapter applies to: the backbone or task model the
            run started from (Hub id or path; a relative path is read relative to the adapter folder). Without it,
            peft records the base model's `name_or_path`, which is empty for a model built from a backbone, and
            nothing can load the adapter.
        image_processor (*optional*): Saved beside the adapter (the pipeline reads it).
        eval_results (`dict[str, float]`, *optional*): Metrics for the card.
    """
    from ..hub.model_card import render_model_card

    output_dir = Path(output_dir)
    base_model = peft_model.get_base_model()
    if base_model_name_or_path is not None:
        for adapter_config in peft_model.peft_config.values():
            adapter_config.base_model_name_or_path = str(base_model_name_or_path)
    peft_model.save_pretrained(output_dir, safe_serialization=True)
    config = base_model.config
    config.architectures = [type(base_model).__name__]
    config.save_pretrained(output_dir)
    if image_processor is not None:
        image_processor.save_pretrained(output_dir)
    base = peft_model.peft_config[peft_model.active_adapter].base_model_name_or_path
    num_parameters = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" not in n)
    card = render_model_card(
        config,
        num_parameters=num_parameters,
        source=f"LoRA fine-tuned with sapiens2_hf.training ({config.task})",
        eval_results=eval_results,
        eval_dataset="evaluation set" if eval_results else None,
        adapter_base=base or "unknown base (set base_model_name_or_path in adapter_config.json)",
    )
    card.save(output_dir / "README.md")  # replaces peft's placeholder card


_ADAPTER_FILES = ("the folder that training_scripts/finetune.py --use_lora writes: adapter_config.json, "
                  "adapter_model.safetensors and config.json")


def check_adapter_folder(adapter: str) -> None:
    """Refuses a local `adapter` that is not a LoRA adapter folder before the loaders see it: a model folder or a
    weights file would otherwise be taken for a Hub repo id and refused in the Hub client's words (`merge_lora`,
    `sapiens2-hf merge`)."""
    path = Path(adapter)
    if path.is_file():
        raise ValueError(f"{adapter} is a file, not an adapter folder; merge expects {_ADAPTER_FILES}.")
    if path.is_dir() and not (path / "adapter_config.json").is_file():
        what = " (a model folder, which loads as it is)" if (path / "config.json").is_file() else ""
        raise ValueError(f"{adapter} has no adapter_config.json{what}; merge expects {_ADAPTER_FILES}.")


def merge_lora(adapter: str | Path, out_dir: str | Path, overwrite: bool = False, remote_code: bool = True) -> Path:
    """Merge a LoRA adapter folder (or Hub repo) written by `save_lora_adapter` into a plain model folder.

    The base named in the adapter's `adapter_config.json` is loaded, the adapter applied and merged into its weights
    (the heads, trained in full, are kept), and the result saved with `sapiens2_hf.hub.save_for_hub`: weights,
    config, the adapter's image processor, a card and the remote-code files. The folder loads with
    `Sapiens2For<Task>.from_pretrained` and gives the outputs of base + adapter (up to float rounding of the merge).

    Args:
        adapter (`str` or `Path`): The adapter folder or Hub repo id.
        out_dir (`str` or `Path`): Destination; an existing non-empty folder needs `overwrite=True` (see
            `save_for_hub`: only the files it writes are replaced).
        overwrite (`bool`, *optional*, defaults to `False`): Replace our files in a non-empty `out_dir`.
        remote_code (`bool`, *optional*, defaults to `True`): Ship the modeling files (`trust_remote_code`).

    Returns:
        `Path`: `out_dir`.
    """
    from ..hub.sharing import save_for_hub
    from ..processing import Sapiens2HFImageProcessor, image_processor_for_task

    adapter = str(adapter)
    check_adapter_folder(adapter)
    peft = _peft()  # before the base loads: loading the adapter folder needs it too
    out_dir = Path(out_dir)
    if out_dir.exists() and folder_entries(out_dir) and not overwrite:  # fail before the (slow) load
        raise FileExistsError(f"{out_dir} exists and is not empty; choose another folder or pass overwrite=True "
                              "(--overwrite).")
    config = Sapiens2Config.from_pretrained(adapter)
    if config.task is None:
        raise ValueError(f"{adapter}: the adapter's config.json names no task.")
    model = model_class_for_task(config.task).from_pretrained(adapter)
    if isinstance(model, peft.PeftModel):
        raise ValueError(f"{adapter} did not load as a LoRA adapter folder (adapter_config.json + config.json).")
    try:
        processor = Sapiens2HFImageProcessor.from_pretrained(adapter)
    except OSError:  # adapters saved before the processor travelled with them
        height, width = config.image_size_hw
        processor = image_processor_for_task(config.task, size={"height": height, "width": width})
    return save_for_hub(model, out_dir, image_processor=processor, remote_code=remote_code, overwrite=overwrite,
                        card_kwargs=_merged_card(adapter))


def _merged_card(adapter: str) -> dict:
    """The model card's source line, and its `base_model` when the adapter's base is a Hub repo id."""
    from huggingface_hub import hf_hub_download

    adapter_config_file = Path(adapter) / "adapter_config.json"
    if not adapter_config_file.is_file():
        adapter_config_file = Path(hf_hub_download(adapter, "adapter_config.json"))
    base = json.loads(adapter_config_file.read_text()).get("base_model_name_or_path")
    card_kwargs = {"source": f"LoRA adapter {adapter} merged into {base} with sapiens2_hf.training.merge_lora"}
    if base and base.count("/") == 1 and not Path(base).exists():
        card_kwargs["base_model"] = base
    return card_kwargs


def set_lora_adapter(module: nn.Module, adapter_name: str) -> None:
    """Activate one adapter in every LoRA layer under `module`."""
    lora_layer = _peft().tuners.lora.LoraLayer
    for layer in module.modules():
        if isinstance(layer, lora_layer):
            layer.set_adapter(adapter_name)


class MultiTaskLoraModel(nn.Module):
    """One frozen backbone shared by several task models, each with its own LoRA adapter and head.

    `forward(pixel_values, task)` activates the task's adapter on the shared backbone and runs that task's head, so
    the outputs equal those of the single-task LoRA model the adapter was trained in.

    Build it with `load_task_adapters`.
    """

    def __init__(self, backbone: Sapiens2Model):
        super().__init__()
        self.backbone = backbone
        self.task_models = nn.ModuleDict()
        for parameter in self.backbone.parameters():
            parameter.requires_grad_(False)

    @property
    def tasks(self) -> list[str]:
        return list(self.task_models.keys())

    def add_task_adapter(self, adapter_dir: str | Path, name: str | None = None) -> str:
        """Add one adapter saved with `save_lora_adapter`; returns its name (default: the config's task)."""
        adapter_dir = Path(adapter_dir)
        config = Sapiens2Config.from_pretrained(adapter_dir)
        name = name or config.task
        if name in self.task_models:
            raise ValueError(f"An adapter named {name!r} is already loaded; pass another `name`.")
        peft = _peft()
        peft_config = peft.LoraConfig.from_pretrained(adapter_dir)
        task_model = model_class_for_task(config.task)(config)
        with warnings.catch_warnings():  # peft warns about a second adapter in one model: that is the point here
            warnings.filterwarnings("ignore", message=".*multiple adapters.*")
            peft.inject_adapter_in_model(peft_config, self.backbone, adapter_name=name)
        weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
        prefix = "base_model.model."
        lora_weights, head_weights = {}, {}
        for key, value in weights.items():
            key = key[len(prefix):] if key.startswith(prefix) else key
            if key.startswith("model."):
                lora_weights[key[len("model."):]] = value
            else:
                head_weights[key] = value
        lora_weights = {  # peft saves adapter weights without the adapter name; the injected layers carry it
            k.replace(".lora_A.weight", f".lora_A.{name}.weight").replace(".lora_B.weight", f".lora_B.{name}.weight"): v
            for k, v in lora_weights.items()
        }
        missing = [k for k in lora_weights if k not in dict(self.backbone.named_parameters())]
        if missing:
            raise ValueError(f"Adapter {adapter_dir} has weights the backbone cannot take, e.g. {missing[:3]}.")
        self.backbone.load_state_dict(lora_weights, strict=False)
        heads = {k: v for k, v in head_weights.items() if k.split(".")[0] in head_modules()}
        incompatible = task_model.load_state_dict(heads, strict=False)
        head_missing = [k for k in incompatible.missing_keys if k.split(".")[0] in head_modules()]
        if head_missing:
            raise ValueError(f"Adapter {adapter_dir} lacks head weights {head_missing[:3]}; save it with "
                             "`save_lora_adapter` from a model wrapped by `apply_lora`.")
        task_model.model = self.backbone  # share the one backbone (its own copy is dropped)
        for parameter in task_model.parameters():
            parameter.requires_grad_(False)
        self.task_models[name] = task_model
        for parameter in self.backbone.parameters():
            parameter.requires_grad_(False)
        return name

    def forward(self, pixel_values: torch.Tensor, task: str, **kwargs):
        if task not in self.task_models:
            raise ValueError(f"No adapter named {task!r}; loaded: {self.tasks}.")
        set_lora_adapter(self.backbone, task)
        return self.task_models[task](pixel_values=pixel_values, **kwargs)


def load_task_adapters(backbone: Sapiens2Model | str | Path, adapters: dict[str, str | Path]) -> MultiTaskLoraModel:
    """Build a `MultiTaskLoraModel` from a backbone (a `Sapiens2Model` or anything `Sapiens2Model.from_pretrained`
    reads) and `{name: adapter_dir}`."""
    if not isinstance(backbone, Sapiens2Model):
        backbone = Sapiens2Model.from_pretrained(backbone)
    model = MultiTaskLoraModel(backbone)
    for name, path in adapters.items():
        model.add_task_adapter(path, name=name)
    return model


def trainable_parameter_count(model: nn.Module) -> tuple[int, int]:
    """`(trainable, total)` parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())

