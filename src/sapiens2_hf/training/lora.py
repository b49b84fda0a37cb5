"""LoRA fine-tuning with peft: adapters on the backbone's attention (optionally MLP) projections, heads trained in
full, adapter save/load, merging, and several task adapters sharing one frozen backbone."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model, inject_adapter_in_model, set_peft_model_state_dict
from peft.tuners.lora import LoraLayer
from safetensors.torch import load_file
from torch import nn

from ..modeling import Sapiens2Config, Sapiens2Model, model_class_for_task


ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
HEAD_MODULES = ("decode_head", "scale_head")


def lora_target_pattern(include_mlp: bool = False) -> str:
    """Regex (peft full-match) selecting the backbone's attention projections, plus the SwiGLU projections when
    `include_mlp`; decode heads never match."""
    names = ATTENTION_PROJECTIONS + (MLP_PROJECTIONS if include_mlp else ())
    return rf"(.*\.)?layer\.\d+\.(attention|mlp)\.({'|'.join(names)})"


def lora_config(task: str, rank: int = 16, alpha: int | None = None, dropout: float = 0.0,
                include_mlp: bool = False) -> LoraConfig:
    """LoRA settings for a Sapiens2 task model: rank-`rank` adapters (scale `alpha / rank`, default alpha = 2 *
    rank) on `q/k/v/o_proj` (and `gate/up/down_proj` with `include_mlp`), the decode head (and the pointmap scale
    head) trained in full through `modules_to_save`."""
    heads = ["decode_head", "scale_head"] if task == "pointmap" else ["decode_head"]
    return LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else 2 * rank, lora_dropout=dropout,
                      target_modules=lora_target_pattern(include_mlp), modules_to_save=heads, bias="none")


def apply_lora(model: nn.Module, task: str, **kwargs) -> PeftModel:
    """Wrap a task model for LoRA training (backbone frozen, adapters + heads trainable); kwargs go to
    `lora_config`."""
    return get_peft_model(model, lora_config(task, **kwargs))


def save_lora_adapter(peft_model: PeftModel, output_dir: str | Path) -> None:
    """Save the adapter (peft format: `adapter_config.json`, `adapter_model.safetensors`, heads included) plus the
    task model's `config.json`, so `load_task_adapters` can rebuild the head without the original model."""
    output_dir = Path(output_dir)
    peft_model.save_pretrained(output_dir, safe_serialization=True)
    peft_model.get_base_model().config.save_pretrained(output_dir)


def set_lora_adapter(module: nn.Module, adapter_name: str) -> None:
    """Activate one adapter in every LoRA layer under `module`."""
    for layer in module.modules():
        if isinstance(layer, LoraLayer):
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
        peft_config = LoraConfig.from_pretrained(adapter_dir)
        task_model = model_class_for_task(config.task)(config)
        with warnings.catch_warnings():  # peft warns about a second adapter in one model: that is the point here
            warnings.filterwarnings("ignore", message=".*multiple adapters.*")
            inject_adapter_in_model(peft_config, self.backbone, adapter_name=name)
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
        heads = {k: v for k, v in head_weights.items() if k.split(".")[0] in HEAD_MODULES}
        incompatible = task_model.load_state_dict(heads, strict=False)
        head_missing = [k for k in incompatible.missing_keys if k.split(".")[0] in HEAD_MODULES]
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

