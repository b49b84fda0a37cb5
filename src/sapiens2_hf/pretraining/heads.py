"""Projection heads of the student-teacher objective (DINO CLS head and iBOT patch head share this layout)."""

import torch
import torch.nn.functional as F
from torch import nn


class DinoProjectionHead(nn.Module):
    r"""MLP, L2 normalisation, then cosine scores against learnable prototypes.

    DINO describes it as "a 3-layer multi-layer perceptron (MLP) with hidden dimension 2048 followed by l2
    normalization and a weight normalized fully connected layer with K dimensions" (Caron et al. 2021, section 3.1);
    DINOv2 and DINOv3 keep it. The weight-normalised layer with its norm fixed to 1 (DINO's `norm_last_layer`) is
    written directly as a product with row-normalised prototypes.

    `in_features` is the backbone hidden size, `num_prototypes` K; the MLP has `num_layers` linear layers (GELU
    between them, none after the last) of width `hidden_size`, ending at `bottleneck_size`, the prototype space.
    """

    def __init__(self, in_features: int, num_prototypes: int, hidden_size: int = 2048, bottleneck_size: int = 256,
                 num_layers: int = 3):
        super().__init__()
        widths = [in_features] + [hidden_size] * (num_layers - 1) + [bottleneck_size]
        layers: list[nn.Module] = []
        for index, (width_in, width_out) in enumerate(zip(widths[:-1], widths[1:])):
            layers.append(nn.Linear(width_in, width_out))
            if index < num_layers - 1:
                layers.append(nn.GELU())
        self.mlp = nn.Sequential(*layers)
        self.prototypes = nn.Parameter(torch.empty(num_prototypes, bottleneck_size))
        nn.init.trunc_normal_(self.prototypes, std=0.02)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """`(..., in_features)` -> `(..., num_prototypes)`: cosine similarities in `[-1, 1]` between the projected
        features and the prototypes (the logits, before any temperature)."""
        projected = F.normalize(self.mlp(features), dim=-1, eps=1e-6)
        return F.linear(projected, F.normalize(self.prototypes, dim=-1, eps=1e-6))
