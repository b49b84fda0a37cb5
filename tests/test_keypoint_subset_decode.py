"""Decode only what is asked (issue 22 item 3): a keypoint format or an explicit list of names decodes only the
heatmap channels it reads, with exactly the keypoints and scores of a full 308 decode followed by conversion."""

import numpy as np
import pytest
import torch
from model_folders import tiny_pose_pipeline

from sapiens2_hf.data.keypoint_formats import (
    KEYPOINT_FORMATS,
    convert_keypoints,
    format_keypoint_names,
    people_in_format,
    post_process_in_format,
    source_keypoint_indices,
)
from sapiens2_hf.modeling.post_processing_sapiens2_hf import FlippedCropOutputs
from sapiens2_hf.modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES
from sapiens2_hf.modeling.sapiens2_processing_ops import decode_udp_heatmaps, keypoint_subset_maps
from sapiens2_hf.processing import Sapiens2HFImageProcessor

TARGETS = ("coco17", "body25", "coco_wholebody133")
HANDS = [name for name in POSE_KEYPOINT_NAMES if name.startswith(("left_thumb", "right_pinky"))] + ["left_wrist"]


def _heatmaps(seed: int, num_crops: int = 3, height: int = 16, width: int = 12) -> torch.Tensor:
    """Peaked maps (one Gaussian per channel at a random place) plus noise, and a few channels all <= 0 (the
    official refinement then reads the previous channel's map)."""
    g = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    cy = torch.rand(num_crops, 308, 1, 1, generator=g) * height
    cx = torch.rand(num_crops, 308, 1, 1, generator=g) * width
    sigma = 0.8 + 3 * torch.rand(num_crops, 308, 1, 1, generator=g)
    maps = torch.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * sigma**2))
    maps = maps + 0.05 * torch.rand(num_crops, 308, height, width, generator=g)
    maps[0, [0, 5, 11, 100]] = -torch.rand(4, height, width, generator=g)  # maxima <= 0 in subset channels
    return maps


def _geometry():
    return {"bbox_center": torch.tensor([[30.0, 40.0], [60.0, 50.0], [20.0, 25.0]]),
            "bbox_scale": torch.tensor([[45.0, 60.0], [30.0, 40.0], [24.0, 32.0]]),
            "image_index": torch.tensor([0, 0, 1])}


def test_source_indices_of_each_format():
    coco17 = tuple(sorted(POSE_KEYPOINT_NAMES.index(name) for name in KEYPOINT_FORMATS["coco17"]))
    assert coco17[-2:] == (41, 62) and source_keypoint_indices("coco17") == coco17
    assert len(source_keypoint_indices("body25")) == 23  # Neck and MidHip: means of points it copies anyway
    assert len(source_keypoint_indices("coco_wholebody133")) == 115  # 18 face points missing
    names = ["right_wrist", "nose", "left_wrist"]
    assert source_keypoint_indices(names) == tuple(sorted(POSE_KEYPOINT_NAMES.index(n) for n in names))
    assert format_keypoint_names(names) == tuple(names)
    with pytest.raises(ValueError, match="unknown Sapiens2 keypoint names"):
        source_keypoint_indices(["nose", "tail"])


@pytest.mark.parametrize("seed", [0, 1])
def test_ops_subset_decode_equals_full_decode(seed):
    heatmaps = _heatmaps(seed)
    full = decode_udp_heatmaps(heatmaps, (64, 48))
    assert not bool((full["scores"][0, [0, 5, 11, 100]] > 0).any())  # the quirk is exercised
    for channels in ([0, 5, 11, 100], list(range(17)), list(range(300, 308)) + [0]):
        maps, positions, previous_map = keypoint_subset_maps(channels, 308, with_previous=True)
        sub = decode_udp_heatmaps(heatmaps[:, maps], (64, 48), previous_map=previous_map)
        for key in ("keypoints_heatmap", "keypoints_input", "scores"):
            assert torch.equal(sub[key][:, positions], full[key][:, channels]), (key, channels)
    # control: a subset without the previous channels differs where a maximum is <= 0 (the quirk reads the wrong
    # map), and a subset with a wrong channel index differs everywhere it is read
    naive = decode_udp_heatmaps(heatmaps[:, [0, 5, 11, 100]], (64, 48))
    assert not torch.equal(naive["keypoints_input"], full["keypoints_input"][:, [0, 5, 11, 100]])
    wrong = decode_udp_heatmaps(heatmaps[:, [1, 2, 3]], (64, 48))
    assert not torch.equal(wrong["keypoints_input"][1:], full["keypoints_input"][1:, [0, 2, 3]])


@pytest.mark.parametrize("flip", ["none", "raw", "flipped_back"])
def test_processor_subset_equals_full_decode_then_conversion(flip):
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48})
    heatmaps = _heatmaps(2)
    extra = {}
    if flip == "raw":
        extra["outputs_flipped"] = FlippedCropOutputs(_heatmaps(3))
    elif flip == "flipped_back":
        extra["outputs_flipped"] = _heatmaps(4)
    native = processor.post_process_pose_estimation(heatmaps, crops=_geometry(), **extra)
    for target in (*TARGETS, HANDS):
        converted = post_process_in_format(processor, heatmaps, target, crops=_geometry(), **extra)
        for people, native_people in zip(converted, native):
            for person, reference in zip(people, native_people):
                keypoints, scores = convert_keypoints(reference["keypoints"], reference["scores"], target)
                assert torch.equal(person["keypoints"], keypoints), target
                assert torch.equal(person["scores"], scores), target
    assert list(format_keypoint_names(HANDS)) == HANDS


def test_processor_decodes_only_the_needed_channels(monkeypatch):
    """The decoder sees 17 channels for coco17; 20 for a crop chunk with a maximum <= 0 (the channels before 0, 41
    and 62 too, which the official refinement may read)."""
    from sapiens2_hf.modeling import post_processing_sapiens2_hf as module

    seen = []
    real = module.decode_udp_heatmaps

    def spy(heatmaps, *args, **kwargs):
        seen.append(heatmaps.shape[1])
        return real(heatmaps, *args, **kwargs)

    monkeypatch.setattr(module, "decode_udp_heatmaps", spy)
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48})
    heatmaps = _heatmaps(5)
    geometry = _geometry()
    post_process_in_format(processor, heatmaps[1:], "coco17", crops={
        "bbox_center": geometry["bbox_center"][1:], "bbox_scale": geometry["bbox_scale"][1:]})
    assert seen == [17]
    seen.clear()
    post_process_in_format(processor, heatmaps, "coco17", crops=_geometry())
    assert seen == [17, 20]
    seen.clear()
    processor.post_process_pose_estimation(heatmaps, crops=_geometry())
    assert seen == [308]


def test_pipeline_keypoint_format_equals_conversion_of_the_308():
    pipe = tiny_pose_pipeline()
    image = np.random.default_rng(0).integers(0, 256, (80, 60, 3), dtype=np.uint8)
    boxes = [[5.0, 5.0, 40.0, 70.0], [20.0, 10.0, 55.0, 75.0]]
    full = pipe(image, boxes=boxes)  # with the flip test
    for target in ("coco17", "body25", HANDS):
        people = people_in_format(pipe(image, boxes=boxes), target)
        assert len(people) == 2
        for person, reference in zip(people, full):
            keypoints, scores = convert_keypoints(reference["keypoints"], reference["scores"], target)
            np.testing.assert_array_equal(person["keypoints"], keypoints)
            np.testing.assert_array_equal(person["scores"], scores)
            assert person["labels"] == list(format_keypoint_names(target))
    assert len(people[0]["labels"]) == len(HANDS) and len(KEYPOINT_FORMATS["coco17"]) == 17
