"""The MAE decoder of `Sapiens2ForPreTraining`: re-inserts mask tokens where patches were removed and predicts
their pixels and their teacher features.

The kept student tokens are projected to the decoder width and a learned mask token fills every removed position
[MAE]. The backbone encodes position only through RoPE inside attention, so the decoder adds a fixed 2-D sine-cosine
embedding to every patch token, recomputed for the actual grid (prefix tokens get none) [MAE]. Its blocks are
Sapiens2 blocks without RoPE [OURS]. Two read-outs at the masked positions: pixels (for `MaeLoss`) and the teacher's
patch token, which the student patch head scores (the iBOT term without showing the student the masked patches, as
in data2vec 2.0) [OURS]. docs/pretraining.md has the full design.
"""

import torch
from torch import nn

from ..modeling import Sapiens2Config
from ..modeling.modeling_sapiens2_hf import Sapiens2Encoder, Sapiens2RMSNorm


def sincos_position_embedding_2d(grid_h: int, grid_w: int, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """Fixed 2-D sine-cosine position embedding (MAE's `get_2d_sincos_pos_embed`, written for a non-square grid).

    The first half of the channels encodes the row, the second half the column; each half is
    `[sin(pos * omega), cos(pos * omega)]` with `omega_i = 1 / temperature^(i / (dim / 4))`, positions in patch
    units (0, 1, 2, ...).

    Returns:
        `torch.Tensor` of shape `(grid_h * grid_w, dim)`, float32, rows in row-major patch order.
    """
    if dim % 4:
        raise ValueError(f"The sin-cos embedding needs a width divisible by 4, got {dim}.")
    omega = 1.0 / temperature ** (torch.arange(dim // 4, dtype=torch.float64) / (dim // 4))  # (dim / 4,)
    rows, cols = torch.meshgrid(
        torch.arange(grid_h, dtype=torch.float64), torch.arange(grid_w, dtype=torch.float64), indexing="ij"
    )
    parts = []
    for coordinate in (rows.flatten(), cols.flatten()):
        angles = coordinate[:, None] * omega[None, :]  # (num_patches, dim / 4)
        parts.extend((torch.sin(angles), torch.cos(angles)))
    return torch.cat(parts, dim=1).float()


class Sapiens2MaeDecoder(nn.Module):
    """Lightweight transformer decoder for masked pretraining: blocks of the given sizes on the backbone's width,
    prefix tokens and patch size (`backbone_config`)."""

    def __init__(self, backbone_config: Sapiens2Config, hidden_size: int, num_hidden_layers: int,
                 num_attention_heads: int, intermediate_size: int):
        super().__init__()
        self.num_prefix_tokens = backbone_config.num_prefix_tokens
        patch_h, patch_w = backbone_config.patch_size_hw
        self.config = Sapiens2Config(
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_attention_heads=num_attention_heads,
            num_register_tokens=backbone_config.num_register_tokens,
            patch_size=backbone_config.patch_size,
            layerscale_value=1.0,
            rope_dtype="float32",
            initializer_range=backbone_config.initializer_range,
        )
        self.config._attn_implementation = backbone_config._attn_implementation
        self.embed = nn.Linear(backbone_config.hidden_size, hidden_size)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, hidden_size))
        nn.init.normal_(self.mask_token, std=0.02)
        self.blocks = Sapiens2Encoder(self.config)
        self.norm = Sapiens2RMSNorm(hidden_size, eps=self.config.rms_norm_eps)
        self.pixel_predictor = nn.Linear(hidden_size, patch_h * patch_w * backbone_config.num_channels)
        self.feature_predictor = nn.Linear(hidden_size, backbone_config.hidden_size)

    def forward(self, encoder_hidden_states: torch.Tensor, patch_keep_indices: torch.LongTensor,
                patch_mask_indices: torch.LongTensor, grid_size: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The student backbone's output for the masked views, `(batch_size, num_prefix + num_kept, backbone_hidden)`
        (CLS, registers, then the kept patches at the row-major `patch_keep_indices` `(batch_size, num_kept)` of the
        `(grid_h, grid_w)` grid) -> `(pixels, features)` at `patch_mask_indices` `(batch_size, num_masked)`, in that
        order: normalised per-patch pixels `(batch_size, num_masked, patch_h * patch_w * 3)` and predicted teacher
        patch tokens `(batch_size, num_masked, backbone_hidden)`."""
        batch_size = encoder_hidden_states.shape[0]
        num_patches = grid_size[0] * grid_size[1]
        tokens = self.embed(encoder_hidden_states)  # (batch, prefix + kept, dim)
        prefix, kept = tokens[:, : self.num_prefix_tokens], tokens[:, self.num_prefix_tokens :]
        dim = tokens.shape[-1]
        patches = self.mask_token.to(tokens.dtype).expand(batch_size, num_patches, dim)
        patches = patches.scatter(1, patch_keep_indices[..., None].expand(-1, -1, dim), kept)  # (batch, N, dim)
        position = sincos_position_embedding_2d(*grid_size, dim).to(device=tokens.device, dtype=tokens.dtype)
        hidden_states = torch.cat((prefix, patches + position), dim=1)
        hidden_states = self.blocks(hidden_states, position_embeddings=None).last_hidden_state
        hidden_states = self.norm(hidden_states[:, self.num_prefix_tokens :])  # (batch, N, dim)
        masked = hidden_states.gather(1, patch_mask_indices[..., None].expand(-1, -1, dim))  # (batch, M, dim)
        return self.pixel_predictor(masked), self.feature_predictor(masked)


def check_masks(patch_keep_indices: torch.Tensor, patch_mask_indices: torch.Tensor, num_patches: int) -> None:
    """Raises a ValueError unless the keep `(num_views, num_kept)` and mask `(num_views, num_masked)` indices
    partition `range(num_patches)` for every view."""
    if patch_keep_indices.shape[-1] + patch_mask_indices.shape[-1] != num_patches:
        raise ValueError(
            f"{patch_keep_indices.shape[-1]} kept + {patch_mask_indices.shape[-1]} masked patches do not make the "
            f"{num_patches} patches of the grid: build the masks for the global crop size (see MultiCropCollator)."
        )
    covered = torch.zeros(patch_keep_indices.shape[0], num_patches, dtype=torch.int32, device=patch_keep_indices.device)
    covered.scatter_add_(1, patch_keep_indices, torch.ones_like(patch_keep_indices, dtype=torch.int32))
    covered.scatter_add_(1, patch_mask_indices, torch.ones_like(patch_mask_indices, dtype=torch.int32))
    if not bool((covered == 1).all()):
        raise ValueError(
            "`patch_keep_indices` and `patch_mask_indices` must partition the patch grid (every patch exactly once, "
            "either kept or masked)."
        )


__all__ = ["Sapiens2MaeDecoder", "check_masks", "sincos_position_embedding_2d"]
