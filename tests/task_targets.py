"""Synthetic loss targets of every task, in the shapes the tiny task models (`sapiens2_hf.tiny_config(task)`, input
`INPUT_SIZE`) predict, keyed as their `forward` takes them (`labels` and the further loss keys of each task).

One smooth target per task and seed, the same for every sample of a batch: a tiny model can fit it from any input, so
a training run on it shows whether the loss the model returns falls.
"""

import torch
import torch.nn.functional as F

INPUT_SIZE = (64, 48)
NUM_KEYPOINTS = 308
NUM_SEG_CLASSES = 29
# The keys each task model's `forward` takes besides `pixel_values`, as `task_targets` returns them.
TARGET_KEYS = {
    "pose": ("labels", "label_weights"),
    "seg": ("labels",),
    "normal": ("labels", "mask"),
    "pointmap": ("labels", "target_scales", "mask", "intrinsics"),
    "albedo": ("labels", "mask"),
    "matting": ("labels", "mask", "foreground_labels"),
}


def _smooth(generator, channels, height, width, grid=(4, 3)):
    """A `(1, channels, height, width)` field in [0, 1]: a coarse random grid, upsampled bilinearly."""
    coarse = torch.rand(1, channels, *grid, generator=generator)
    return F.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)


def task_targets(task: str, batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """The loss inputs of `task` for a batch of `batch_size` (every sample the same target), float32 unless noted:

    - pose: `labels` `(B, 308, 16, 12)` Gaussian heatmaps (sigma 2, peak 1), `label_weights` `(B, 308)` in {0, 1};
    - seg: `labels` `(B, 64, 48)` int64 class ids, the top 4 rows 255 (ignored);
    - normal: `labels` `(B, 3, 64, 48)` unit normals, `mask` `(B, 1, 64, 48)` bool (top 4 rows invalid);
    - pointmap: `labels` canonical XYZ `(B, 3, 64, 48)` of a smooth surface 2-3 m away seen with focal 60 px,
      `target_scales` `(B, 1)` = 768 / 60, `mask`, `intrinsics` `(B, 3, 3)`;
    - albedo: `labels` `(B, 3, 64, 48)` RGB in [0, 1], `mask`;
    - matting: `labels` alpha `(B, 1, 64, 48)` in [0, 1], `mask`, `foreground_labels` `(B, 3, 64, 48)` = alpha x colour.
    """
    generator = torch.Generator().manual_seed(seed)
    height, width = INPUT_SIZE
    mask = torch.ones(1, 1, height, width, dtype=torch.bool)
    mask[..., :4, :] = False
    if task == "pose":
        map_h, map_w = height // 4, width // 4
        centre_y = torch.randint(0, map_h, (NUM_KEYPOINTS, 1, 1), generator=generator)
        centre_x = torch.randint(0, map_w, (NUM_KEYPOINTS, 1, 1), generator=generator)
        rows, cols = torch.arange(map_h)[:, None], torch.arange(map_w)[None, :]
        heatmaps = torch.exp(-((rows - centre_y) ** 2 + (cols - centre_x) ** 2) / (2 * 2.0**2))[None]
        weights = (torch.rand(1, NUM_KEYPOINTS, generator=generator) > 0.2).float()
        targets = {"labels": heatmaps, "label_weights": weights}
    elif task == "seg":
        labels = (_smooth(generator, 1, height, width)[:, 0] * NUM_SEG_CLASSES).long().clamp(max=NUM_SEG_CLASSES - 1)
        labels[:, :4] = 255
        targets = {"labels": labels}
    elif task == "normal":
        normals = _smooth(generator, 3, height, width) * 2 - 1
        normals[:, 2] = -normals[:, 2].abs() - 0.5  # facing the camera
        targets = {"labels": F.normalize(normals, dim=1), "mask": mask}
    elif task == "pointmap":
        focal = 60.0
        intrinsics = torch.tensor([[[focal, 0.0, width / 2], [0.0, focal, height / 2], [0.0, 0.0, 1.0]]])
        depth = 2.0 + _smooth(generator, 1, height, width)  # (1, 1, H, W) metres
        rows = torch.arange(height, dtype=torch.float32)[:, None].expand(height, width)
        cols = torch.arange(width, dtype=torch.float32)[None, :].expand(height, width)
        xyz = torch.cat(((cols - width / 2) * depth / focal, (rows - height / 2) * depth / focal, depth), dim=1)
        scale = 768.0 / focal
        targets = {"labels": xyz * scale, "target_scales": torch.tensor([[scale]]), "mask": mask,
                   "intrinsics": intrinsics}
    elif task == "albedo":
        targets = {"labels": _smooth(generator, 3, height, width), "mask": mask}
    elif task == "matting":
        alpha = _smooth(generator, 1, height, width)
        colour = _smooth(generator, 3, height, width)
        targets = {"labels": alpha, "mask": mask, "foreground_labels": alpha * colour}
    else:
        raise ValueError(f"no synthetic targets for task {task!r}")
    assert tuple(targets) == TARGET_KEYS[task]
    return {key: value.expand(batch_size, *value.shape[1:]).clone() for key, value in targets.items()}


def pixel_values(batch_size: int, seed: int = 0) -> torch.Tensor:
    """`(batch_size, 3, 64, 48)` standard-normal inputs (normalised-image statistics)."""
    return torch.randn(batch_size, 3, *INPUT_SIZE, generator=torch.Generator().manual_seed(seed))
