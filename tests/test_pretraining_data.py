"""Multi-crop collator, masks, augmentations and the pretraining image dataset."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from sapiens2_hf.pretraining import (
    MultiCropAugmentation,
    MultiCropCollator,
    PretrainingImageDataset,
    example_seed,
    random_patch_masks,
)
from sapiens2_hf.pretraining.multicrop import augmented_view, color_jitter, normalize_image, sample_crop_box
from sapiens2_hf.pretraining.toy_data import make_toy_images


def test_collator_shapes_masks_and_determinism():
    images, _ = make_toy_images(3, 70, 50, seed=0)
    collator = MultiCropCollator(MultiCropAugmentation.tiny(), patch_size=16, mask_ratio=0.75)
    examples = [{"image": image, "seed": 10 + i} for i, image in enumerate(images)]
    batch = collator(examples)
    assert batch["pixel_values"].shape == (3, 2, 3, 64, 48)
    assert batch["local_pixel_values"].shape == (3, 2, 3, 32, 32)
    # 12 patches at 75 %: 3 kept (int(12 * 0.25)), 9 masked; sorted, and a partition of the grid.
    assert batch["patch_keep_indices"].shape == (3, 2, 3) and batch["patch_mask_indices"].shape == (3, 2, 9)
    union = torch.cat((batch["patch_keep_indices"], batch["patch_mask_indices"]), dim=-1).sort(dim=-1).values
    assert torch.equal(union, torch.arange(12).expand(3, 2, 12))
    assert torch.equal(batch["patch_keep_indices"], batch["patch_keep_indices"].sort(dim=-1).values)
    # Views are a function of the example seed only: same seeds, same batch; batch composition does not matter.
    again = collator(list(reversed(examples)))
    assert torch.equal(again["pixel_values"].flip(0), batch["pixel_values"])
    other = collator([{"image": images[0], "seed": 11}])
    assert not torch.equal(other["pixel_values"][0], batch["pixel_values"][0])


def test_view_without_augmentation_is_the_resized_normalised_image():
    image = torch.rand(3, 64, 48) * 255
    plain = MultiCropAugmentation.tiny(
        global_crop_scale=(1.0, 1.0), crop_aspect_jitter=(1.0, 1.0), flip_probability=0.0,
        color_jitter_probability=0.0, blur_probability=0.0,
    )
    view = augmented_view(image, (32, 24), (1.0, 1.0), plain, torch.Generator().manual_seed(0))
    expected = normalize_image(F.interpolate(image[None], size=(32, 24), mode="bilinear", antialias=True)[0].clamp(0, 255))
    assert (view - expected).abs().max().item() < 1e-5
    # The official constants: a mid-grey image maps to (128 - mean) / std.
    grey = normalize_image(torch.full((3, 1, 1), 128.0)).flatten()
    torch.testing.assert_close(grey, torch.tensor([(128 - 123.675) / 58.395, (128 - 116.28) / 57.12, (128 - 103.53) / 57.375]))


def test_color_jitter_keeps_the_colour():
    red = torch.tensor([200.0, 40.0, 30.0]).view(3, 1, 1).expand(3, 8, 8).clone()
    strongest = MultiCropAugmentation()
    for factors in [(1 - strongest.brightness, 1 - strongest.contrast, 1 - strongest.saturation), (1.2, 1.2, 1.1)]:
        jittered = color_jitter(red, *factors)
        assert jittered[0].mean() > 2 * jittered[1].mean() and jittered[0].mean() > 2 * jittered[2].mean()
    # Control: a full desaturation (what grayscale augmentation does) would remove the colour.
    grey = color_jitter(red, 1.0, 1.0, 0.0)
    assert (grey[0] - grey[1]).abs().max().item() < 1e-4


def test_crop_boxes_respect_bounds_and_scale():
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        top, left, height, width = sample_crop_box((100, 80), (64, 48), (0.2, 0.6), (3 / 4, 4 / 3), generator)
        assert 0 <= top and top + height <= 100 and 0 <= left and left + width <= 80
        assert 0.17 <= height * width / 8000 <= 0.63  # rounding of the side lengths


def test_random_patch_masks():
    keep, mask = random_patch_masks(20, 0.6, torch.Generator().manual_seed(0))
    assert keep.numel() == 8 and mask.numel() == 12
    assert torch.equal(torch.cat((keep, mask)).sort().values, torch.arange(20))
    with pytest.raises(ValueError, match="mask_ratio"):
        random_patch_masks(20, 1.0)
    with pytest.raises(ValueError, match="divisible"):
        MultiCropCollator(MultiCropAugmentation.tiny(global_crop_size=(60, 48)), patch_size=16, mask_ratio=0.5)


def test_example_seed_is_stable():
    # blake2b of "0/0/0" (8 bytes, little endian, shifted right by one): fixed across processes and versions.
    assert example_seed(0, 0, 0) == 4808561972376111626
    assert len({example_seed(0, epoch, index) for epoch in range(3) for index in range(50)}) == 150


def test_dataset_from_folder_and_datasets(tmp_path):
    images, _ = make_toy_images(3, 40, 30, seed=1)
    for i, image in enumerate(images):
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(tmp_path / f"img_{i}.png")
    (tmp_path / "notes.txt").write_text("not an image")
    dataset = PretrainingImageDataset.from_folder(tmp_path, seed=3)
    assert len(dataset) == 3
    item = dataset[1]
    assert item["image"].dtype == torch.uint8 and torch.equal(item["image"], images[1])
    assert item["seed"] == example_seed(3, 0, 1)
    dataset.set_epoch(2)
    assert dataset[1]["seed"] == example_seed(3, 2, 1)

    import datasets

    hf_dataset = datasets.Dataset.from_dict({"picture": [Image.fromarray(np.asarray(im.permute(1, 2, 0))) for im in images]})
    hf_dataset = hf_dataset.cast_column("picture", datasets.Image())
    wrapped = PretrainingImageDataset(hf_dataset, image_column="picture")
    assert torch.equal(wrapped[2]["image"], images[2])
    undecoded = PretrainingImageDataset(hf_dataset.cast_column("picture", datasets.Image(decode=False)), image_column="picture")
    assert torch.equal(undecoded[0]["image"], images[0])
    with pytest.raises(ValueError, match="no column"):
        PretrainingImageDataset(hf_dataset)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="No image files"):
        PretrainingImageDataset.from_folder(tmp_path / "empty")
    with pytest.raises(ValueError, match="not a folder"):
        PretrainingImageDataset.from_folder(tmp_path / "missing")
