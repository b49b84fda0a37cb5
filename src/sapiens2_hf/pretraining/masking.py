"""Patch masks for pretraining by token removal."""

import torch


def num_kept_patches(num_patches: int, mask_ratio: float) -> int:
    """Patches kept out of `num_patches` at `mask_ratio`: `int(num_patches * (1 - mask_ratio))` as in MAE, at least
    one and at most `num_patches - 1` (every view keeps something and masks something)."""
    if not 0.0 < mask_ratio < 1.0:
        raise ValueError(f"`mask_ratio` must be in (0, 1), got {mask_ratio}.")
    if num_patches < 2:
        raise ValueError(f"Masking needs at least 2 patches per view, got {num_patches}: use a larger crop size.")
    return min(max(int(num_patches * (1.0 - mask_ratio)), 1), num_patches - 1)


def random_patch_masks(
    num_patches: int, mask_ratio: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniformly random patch mask of one view of `num_patches` (MAE's random masking), `mask_ratio` in (0, 1)
    removed; pass a `generator` for reproducible masks.

    Returns `(keep_indices, mask_indices)`: `torch.LongTensor`s of shapes `(num_kept,)` and `(num_patches - num_kept,)`,
    each sorted ascending (row-major grid positions); together they partition `range(num_patches)`.
    """
    num_kept = num_kept_patches(num_patches, mask_ratio)
    permutation = torch.randperm(num_patches, generator=generator)
    return permutation[:num_kept].sort().values, permutation[num_kept:].sort().values
