"""Procedural labelled toy images for pretraining smoke runs, probes and benchmarks (no download needed).

Two families (`kind`):

- `"shapes"`: a light shape on a dark background at a random position and size, with slight random tints. The
  class is the shape: 0 disc, 1 square, 2 triangle, 3 plus sign, 4 ring. Position and size are nuisances that random
  crops remove, and the tints vary too little to tell images apart, so a self-distilled model must encode the shape,
  while random features mostly encode where the light pixels are.
- `"stripes"`: a two-colour pattern with random colours, period and phase; the class is the pattern: 0 horizontal
  stripes, 1 vertical stripes, 2 checkerboard, 3 disc, 4 diagonal stripes.
"""

import math

import torch


TOY_CLASS_NAMES = {
    "shapes": ("disc", "square", "triangle", "plus", "ring"),
    "stripes": ("horizontal_stripes", "vertical_stripes", "checkerboard", "disc", "diagonal_stripes"),
}


def _shape_mask(label: int, rows: torch.Tensor, cols: torch.Tensor, draw: torch.Tensor, height: int, width: int):
    size = min(height, width) * (0.18 + 0.14 * float(draw[0]))  # half-extent in pixels
    center_y = size + (height - 2 * size) * float(draw[1])
    center_x = size + (width - 2 * size) * float(draw[2])
    dy, dx = rows - center_y, cols - center_x
    if label == 0:
        return dy**2 + dx**2 < size**2
    if label == 1:
        return (dy.abs() < 0.85 * size) & (dx.abs() < 0.85 * size)
    if label == 2:
        return (dy < size) & (dy > -size) & (dx.abs() < (dy + size) / 2)
    if label == 3:
        arm = 0.3 * size
        return ((dy.abs() < arm) & (dx.abs() < size)) | ((dx.abs() < arm) & (dy.abs() < size))
    radius = (dy**2 + dx**2).sqrt()
    return (radius < size) & (radius > 0.55 * size)


def _stripes_mask(label, rows, cols, draw, height, width):
    """Foreground of a `"stripes"` image: horizontal, vertical or crossed stripes, a disc, or diagonal stripes."""
    period = 4.0 + 8.0 * float(draw[0])
    phase = 2 * math.pi * float(draw[1])
    if label == 0:
        return torch.sin(2 * math.pi * rows / period + phase) > 0
    if label == 1:
        return torch.sin(2 * math.pi * cols / period + phase) > 0
    if label == 2:
        return (torch.sin(2 * math.pi * rows / period + phase) > 0) ^ (torch.sin(2 * math.pi * cols / period) > 0)
    if label == 3:
        center_y, center_x = height * (0.3 + 0.4 * float(draw[2])), width * (0.3 + 0.4 * float(draw[3]))
        radius = min(height, width) * (0.2 + 0.2 * float(draw[4]))
        return (rows - center_y) ** 2 + (cols - center_x) ** 2 < radius**2
    return torch.sin(2 * math.pi * (rows + cols) / (period * math.sqrt(2)) + phase) > 0


def make_toy_images(num_images: int, height: int, width: int, seed: int = 0, num_classes: int = 4,
                    noise_std: float = 8.0, kind: str = "shapes") -> tuple[torch.Tensor, torch.Tensor]:
    """Draws `num_images` toy images, classes balanced in round-robin order.

    `seed` seeds a private `torch.Generator`; the classes are the first `num_classes` (at most 5) of
    `TOY_CLASS_NAMES[kind]` (`"shapes"` or `"stripes"`); `noise_std` is Gaussian pixel noise on the 0-255 scale.

    Returns:
        `(images, labels)`: `images` of shape `(num_images, 3, height, width)`, uint8 RGB in `[0, 255]`; `labels` of
        shape `(num_images,)`, int64 in `[0, num_classes)`.
    """
    if kind not in TOY_CLASS_NAMES:
        raise ValueError(f"Unknown toy image kind {kind!r}; choose one of {sorted(TOY_CLASS_NAMES)}.")
    if not 1 <= num_classes <= len(TOY_CLASS_NAMES[kind]):
        raise ValueError(f"`num_classes` must be in [1, {len(TOY_CLASS_NAMES[kind])}], got {num_classes}.")
    generator = torch.Generator().manual_seed(seed)
    rows = torch.arange(height, dtype=torch.float32)[:, None].expand(height, width)
    cols = torch.arange(width, dtype=torch.float32)[None, :].expand(height, width)
    images, labels = [], []
    for index in range(num_images):
        label = index % num_classes
        draw = torch.rand(6, generator=generator)
        if kind == "shapes":
            pattern = _shape_mask(label, rows, cols, draw, height, width)
            background = 30 + 20 * torch.rand(3, generator=generator)
            foreground = 190 + 40 * torch.rand(3, generator=generator)
        else:
            pattern = _stripes_mask(label, rows, cols, draw, height, width)
            background, foreground = torch.rand(2, 3, generator=generator) * 255
        image = torch.where(pattern[None], foreground.view(3, 1, 1), background.view(3, 1, 1))
        image = image + noise_std * torch.randn(3, height, width, generator=generator)
        images.append(image.round().clamp(0, 255).to(torch.uint8))
        labels.append(label)
    return torch.stack(images), torch.tensor(labels, dtype=torch.int64)
