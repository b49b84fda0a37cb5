# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The Sapiens2 task models' outputs: `ModelOutput` dataclasses in transformers' style (for pose, normal, pointmap and
matting with the fields of transformers' classes of the same name)."""

from dataclasses import dataclass

import torch
from transformers.modeling_outputs import ModelOutput


@dataclass
class Sapiens2PoseEstimatorOutput(ModelOutput):
    r"""
    Output of [`Sapiens2ForPoseEstimation`].

    Args:
        loss (`torch.Tensor` of shape `()`, *optional*): `PoseHeatmapLoss`, when `labels` and `label_weights` are given.
        heatmaps (`torch.Tensor` of shape `(batch_size, num_keypoints, height / 4, width / 4)`):
            Raw keypoint heatmaps (training targets peak at 1); decode them with the image processor.
        hidden_states (`tuple(torch.Tensor)`, *optional*, returned with `output_hidden_states=True`):
            The encoder input and each encoder layer's output, each `(batch_size, sequence_length, hidden_size)`.
        attentions (`tuple(torch.Tensor)`, *optional*, returned with `output_attentions=True`):
            Each layer's `(batch_size, num_heads, sequence_length, sequence_length)` attention weights; empty with
            backends that do not return them (sdpa).
    """

    loss: torch.Tensor | None = None
    heatmaps: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class Sapiens2NormalEstimatorOutput(ModelOutput):
    r"""
    Output of [`Sapiens2ForNormalEstimation`].

    Args:
        loss (`torch.Tensor` of shape `()`, *optional*): `NormalLoss`, when `labels` is given.
        normals (`torch.Tensor` of shape `(batch_size, 3, height, width)`):
            Camera-frame normal vectors (x right, y down, z forward), not unit length; post-processing normalises them.
        hidden_states, attentions: as in [`Sapiens2PoseEstimatorOutput`].
    """

    loss: torch.Tensor | None = None
    normals: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class Sapiens2PointmapEstimatorOutput(ModelOutput):
    r"""
    Output of [`Sapiens2ForPointmapEstimation`].

    Args:
        loss (`torch.Tensor` of shape `()`, *optional*): `PointmapLoss`, when `labels` is given.
        pointmaps (`torch.Tensor` of shape `(batch_size, 3, height, width)`):
            XYZ in the canonical camera (focal length 768 px; X right, Y down, Z forward).
        scales (`torch.Tensor` of shape `(batch_size, 1)`, *optional*): Canonical / actual focal length of the
            network input (metric XYZ = pointmaps / scales); `None` without a scale branch.
        hidden_states, attentions: as in [`Sapiens2PoseEstimatorOutput`].
    """

    loss: torch.Tensor | None = None
    pointmaps: torch.Tensor | None = None
    scales: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class Sapiens2AlbedoEstimatorOutput(ModelOutput):
    r"""
    Output of [`Sapiens2ForAlbedoEstimation`].

    Args:
        loss (`torch.Tensor` of shape `()`, *optional*): `AlbedoLoss`, when `labels` is given.
        albedos (`torch.Tensor` of shape `(batch_size, 3, height, width)`):
            Raw RGB albedo, no activation or clamp (values slightly outside `[0, 1]` occur; post-processing clamps).
        hidden_states, attentions: as in [`Sapiens2PoseEstimatorOutput`].
    """

    loss: torch.Tensor | None = None
    albedos: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class Sapiens2ImageMattingOutput(ModelOutput):
    r"""
    Output of [`Sapiens2ForImageMatting`] (fields in the order of transformers' class).

    Args:
        loss (`torch.Tensor` of shape `()`, *optional*): `MattingLoss`, when `labels` is given.
        alphas (`torch.Tensor` of shape `(batch_size, 1, height, width)`):
            Alpha matte in `[0, 1]` (the head's channel 3 after a sigmoid).
        hidden_states, attentions: as in [`Sapiens2PoseEstimatorOutput`].
        foregrounds (`torch.Tensor` of shape `(batch_size, 3, height, width)`):
            Pre-multiplied RGB foreground (`alpha * F`) in `[0, 1]` (the head's channels 0-2 after a sigmoid).
    """

    loss: torch.Tensor | None = None
    alphas: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    foregrounds: torch.Tensor | None = None
