"""Official optimiser and schedule rules: layer-wise learning-rate decay, the no-weight-decay set, and the
warm-up + linear decay schedule of the official fine-tuning configs (facebookresearch/sapiens2 `sapiens/pose/configs`,
`sapiens/dense/configs`)."""

from __future__ import annotations

import re

import torch
from torch import nn

from .tasks import head_modules


OFFICIAL_LAYER_DECAY = {"0.4b": 0.8, "0.8b": 0.85, "1b": 0.9, "5b": 0.94}

_EMBEDDING = re.compile(r"(^|\.)(embeddings|tokenizer)\.")
_LAYER = re.compile(r"(^|\.)layer\.(\d+)\.")


def layer_id(name: str, num_layers: int) -> int:
    """Official layer id of a parameter: embeddings (CLS, registers, patch embedding, mask token) and the 4K
    tokenizer -> 0; encoder block `i` -> `i + 1`; everything else (final norm, heads) -> `num_layers + 1`. LoRA
    weights inside a block take the block's id."""
    if _EMBEDDING.search(name):
        return 0
    match = _LAYER.search(name)
    if match:
        return int(match.group(2)) + 1
    return num_layers + 1


def uses_weight_decay(name: str, parameter: torch.Tensor) -> bool:
    """Official rule: no decay for 1-D tensors (norm weights, LayerScale, biases), names ending in `.bias` and names
    containing `pos_embed`; everything else, including the 3-D CLS/register tokens, is decayed."""
    return not (parameter.ndim <= 1 or name.endswith(".bias") or "pos_embed" in name)


def parameter_groups(model: nn.Module, learning_rate: float, weight_decay: float,
                     layer_decay_rate: float | None = None, num_layers: int | None = None) -> list[dict]:
    """AdamW parameter groups with the official per-layer learning-rate multipliers.

    With `L = num_layers`, a parameter of layer id `i` (see `layer_id`) gets `lr * rate ** (L + 1 - i)`: the head
    trains at the base rate, block `L - 1` at `rate`, ..., the patch embedding at `rate ** (L + 1)`. A rate of
    `None` or 1 disables the decay. Frozen parameters are left out. Each group has `params`, `lr`, `weight_decay`,
    and `param_names` / `lr_scale` for inspection.
    """
    decay = layer_decay_rate is not None and layer_decay_rate != 1.0
    if decay and num_layers is None:
        raise ValueError("`num_layers` (the backbone depth) is required for layer-wise learning-rate decay.")
    groups: dict[tuple[float, float], dict] = {}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        scale = layer_decay_rate ** (num_layers + 1 - layer_id(name, num_layers)) if decay else 1.0
        wd = weight_decay if uses_weight_decay(name, parameter) else 0.0
        group = groups.setdefault((scale, wd), {"params": [], "param_names": [], "lr": learning_rate * scale,
                                                "lr_scale": scale, "weight_decay": wd})
        group["params"].append(parameter)
        group["param_names"].append(name)
    return sorted(groups.values(), key=lambda g: (g["lr_scale"], g["weight_decay"]))


def official_schedule(optimizer: torch.optim.Optimizer, num_training_steps: int, warmup_steps: int = 500,
                      warmup_start_factor: float = 1e-3) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from `warmup_start_factor` x the base rate over `warmup_steps`, then linear decay to 0 at
    `num_training_steps` (official ``LinearLR`` + ``PolynomialLR(power=1)``, stepped once per optimiser step). Every
    group keeps its layer-decay multiplier."""
    warmup_steps = max(0, min(int(warmup_steps), int(num_training_steps)))

    def factor(step: int) -> float:
        if step < warmup_steps:
            return warmup_start_factor + (1.0 - warmup_start_factor) * step / warmup_steps
        remaining = max(1, num_training_steps - warmup_steps)
        return max(0.0, 1.0 - (step - warmup_steps) / remaining)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def freeze_backbone(model: nn.Module, num_frozen_layers: int | None = None, freeze_embeddings: bool = True) -> int:
    """Freeze the embeddings and the first `num_frozen_layers` encoder blocks (`None`: the whole backbone, final norm
    included). Heads stay trainable.

    Returns:
        `int`: the number of parameter tensors frozen.
    """
    frozen = 0
    for name, parameter in model.named_parameters():
        if any(name.startswith(f"{head}.") or f".{head}." in name for head in head_modules()):
            continue
        if num_frozen_layers is None:
            hit = True
        else:
            block = _LAYER.search(name)
            in_embeddings = freeze_embeddings and bool(_EMBEDDING.search(name))
            hit = in_embeddings or (block is not None and int(block.group(2)) < num_frozen_layers)
        if hit and parameter.requires_grad:
            parameter.requires_grad_(False)
            frozen += 1
    return frozen
