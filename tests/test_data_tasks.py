"""Task data: label tables, readers, UDP targets, the official flips (keypoint / class swaps, normal x negation,
principal point mirroring), determinism by seed and epoch, collation."""

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from transformers.models.sapiens2.image_processing_sapiens2 import generate_udp_gaussian_heatmaps

from sapiens2_hf.data import label_tables
from sapiens2_hf.data.collators import Sapiens2DataCollator
from sapiens2_hf.data.datasets import Sapiens2TaskDataset
from sapiens2_hf.data.dense import (
    AlbedoTransform,
    NormalTransform,
    PointmapTransform,
    SegTransform,
    read_dense_folder,
)
from sapiens2_hf.data.pose import PoseTransform, coco_wholebody_to_308, encode_udp_heatmaps, read_coco_keypoints
from sapiens2_hf.losses import PointmapLoss


SPEC = Path(__file__).parent / "fixtures" / "spec"
NO_AUG_POSE = {k: 0.0 for k in PoseTransform.DEFAULT_PROBABILITIES}


def test_label_tables_match_the_spec_files():
    kp = json.loads((SPEC / "keypoints308.json").read_text())
    seg = json.loads((SPEC / "seg29.json").read_text())
    assert label_tables.KEYPOINT_OKS_SIGMAS == tuple(kp["oks_sigmas"])
    assert label_tables.KEYPOINT_FLIP_INDICES == tuple(kp["flip_indices"])
    assert label_tables.COCO_WHOLEBODY_TO_308 == {int(k): v for k, v in kp["coco_wholebody_to_308"].items()}
    assert label_tables.UPPER_BODY_KEYPOINT_IDS == tuple(kp["upper_body_ids"])
    assert label_tables.LOWER_BODY_KEYPOINT_IDS == tuple(kp["lower_body_ids"])
    assert label_tables.SEG_CE_CLASS_WEIGHTS == tuple(seg["ce_class_weights"])
    assert label_tables.SEG_FLIP_SWAP_PAIRS == tuple(tuple(p) for p in seg["horizontal_flip_swap_pairs"])
    # flip indices are an involution that swaps exactly the listed pairs
    flip = np.array(label_tables.KEYPOINT_FLIP_INDICES)
    np.testing.assert_array_equal(flip[flip], np.arange(308))
    assert sorted(tuple(sorted((i, int(j)))) for i, j in enumerate(flip) if i < j) == sorted(map(tuple, kp["flip_pairs"]))


def _write_coco(tmp_path, annotations, name="ann.json"):
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((50, 40, 3), np.uint8))
    data = {"images": [{"id": 7, "file_name": "a.png", "width": 40, "height": 50}], "annotations": annotations,
            "categories": [{"id": 1, "name": "person"}]}
    (tmp_path / name).write_text(json.dumps(data))
    return tmp_path / name


def test_coco_readers_308_344_and_wholebody(tmp_path):
    kp308 = np.zeros((308, 3))
    kp308[5] = [10, 11, 2]
    kp344 = np.zeros((344, 3))
    kp344[219] = [1, 2, 2]  # last face point before the teeth
    kp344[256] = [3, 4, 1]  # first point after the teeth -> 308 index 220
    wholebody = {f: [0.0] * (n * 3) for f, n in (("keypoints", 17), ("foot_kpts", 6), ("face_kpts", 68),
                                                  ("lefthand_kpts", 21), ("righthand_kpts", 21))}
    wholebody["keypoints"][3 * 11 : 3 * 11 + 3] = [20, 21, 2]  # COCO left hip -> 308 index 9
    wholebody["righthand_kpts"][3 * 4 : 3 * 4 + 3] = [30, 31, 2]  # whole-body 116 (right thumb tip) -> 21
    anns = [
        {"id": 1, "image_id": 7, "bbox": [1, 2, 30, 40], "keypoints": kp308.reshape(-1).tolist(), "area": 900},
        {"id": 2, "image_id": 7, "bbox": [1, 2, 30, 40], "keypoints": kp344.reshape(-1).tolist()},
        {"id": 3, "image_id": 7, "bbox": [1, 2, 30, 40], **wholebody},
        {"id": 4, "image_id": 7, "bbox": [1, 2, 30, 40], "keypoints": kp308.reshape(-1).tolist(), "iscrowd": 1},
    ]
    records = read_coco_keypoints(_write_coco(tmp_path, anns))
    assert [r["instance_id"] for r in records] == [1, 2, 3]  # crowd skipped
    np.testing.assert_array_equal(records[0]["keypoints"][5], [10, 11, 2])
    assert records[0]["area"] == 900 and records[1]["area"] == 30 * 40
    np.testing.assert_array_equal(records[1]["keypoints"][219], [1, 2, 2])
    np.testing.assert_array_equal(records[1]["keypoints"][220], [3, 4, 1])
    np.testing.assert_array_equal(records[2]["keypoints"][9], [20, 21, 2])
    np.testing.assert_array_equal(records[2]["keypoints"][21], [30, 31, 2])
    assert (records[2]["keypoints"][:, 2] > 0).sum() == 2
    assert records[0]["image"].endswith("a.png")
    with pytest.raises(ValueError, match="keypoint_layout"):
        read_coco_keypoints(tmp_path / "ann.json", keypoint_layout="coco")
    mapped = coco_wholebody_to_308(np.arange(133 * 3, dtype=float).reshape(133, 3))
    assert mapped[10, 0] == 12 * 3  # COCO right hip (12) -> 308 index 10


def test_udp_heatmaps_match_transformers_encoder():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (200, 160, 3), dtype=np.uint8)
    keypoints = np.concatenate([rng.uniform([35, 45], [115, 155], (308, 2)), (rng.uniform(size=(308, 1)) > 0.3) * 2.0], 1)
    record = {"image": image, "bbox": [30.0, 40.0, 90.0, 120.0], "keypoints": keypoints.astype(np.float32)}
    # transformers rounds the 3-sigma window radius down to an integer first; the official encoder (and ours) truncate
    # `centre -/+ radius` instead. The two agree when 3 * sigma is an integer (as at the official sigma 6).
    for size, sigma in (((64, 48), 1.0), ((256, 192), 2.0)):
        transform = PoseTransform(size, train=False, sigma=sigma)
        out = transform(record)
        heatmaps, weights = generate_udp_gaussian_heatmaps([[[30, 40, 90, 120]]], [[keypoints.tolist()]], size, 4, transform.sigma)
        reference = heatmaps[0]
        torch.testing.assert_close(out["label_weights"], weights[0])
        # transformers works in float32, we follow the official float32 keypoint transform then float64: the 3-sigma
        # window may move by one pixel when a keypoint sits on a rounding boundary. Everything else agrees to 2e-5.
        mismatched = (out["labels"] - reference).abs() > 2e-5
        significant = torch.maximum(out["labels"], reference) > 1e-3
        assert mismatched.sum() <= 0.01 * significant.sum(), (int(mismatched.sum()), int(significant.sum()))
        assert significant.sum() > 100
    # Broken control: a half-pixel shift of the keypoints (non-UDP encoding) changes the targets.
    shifted = encode_udp_heatmaps(np.zeros((1, 2)) + 10.5, np.ones(1), (64, 48), (16, 12), 1.0)[0]
    plain = encode_udp_heatmaps(np.zeros((1, 2)) + 10.0, np.ones(1), (64, 48), (16, 12), 1.0)[0]
    assert np.abs(shifted - plain).max() > 0.01


def test_pose_flip_mirrors_the_crop_and_swaps_left_right_channels(toy_records):
    record = toy_records["pose"](1, seed=3)[0]
    plain = PoseTransform((64, 48), train=True, augment_probabilities=NO_AUG_POSE)(record, torch.Generator().manual_seed(0))
    flipped = PoseTransform((64, 48), train=True, augment_probabilities={**NO_AUG_POSE, "flip": 1.0})(
        record, torch.Generator().manual_seed(0))
    flip = list(label_tables.KEYPOINT_FLIP_INDICES)
    # float32 keypoint transforms: mirrored positions agree to ~1e-5 px, target values to 5e-4.
    torch.testing.assert_close(flipped["labels"], plain["labels"][flip].flip(-1), atol=5e-4, rtol=0)
    torch.testing.assert_close(flipped["label_weights"], plain["label_weights"][flip])
    # cv2.warpAffine's fixed-point interpolation is not exactly mirror-symmetric: a few grey levels at most.
    pixel_error = (flipped["pixel_values"] - plain["pixel_values"].flip(-1)).abs()
    assert pixel_error.max() < 0.1 and pixel_error.mean() < 0.005
    # Broken control: mirroring without the channel swap does not give the flipped targets.
    assert (flipped["labels"] - plain["labels"].flip(-1)).abs().max() > 0.5


def test_pose_keypoints_leaving_the_crop_lose_their_weight(toy_records):
    record = toy_records["pose"](1, seed=4)[0]
    record["keypoints"][0, :2] = [-500, -500]
    out = PoseTransform((64, 48), train=False)(record)
    assert out["label_weights"][0] == 0 and out["labels"][0].abs().max() == 0
    assert out["label_weights"][1:17].min() == 1


def test_seg_flip_swaps_left_and_right_classes():
    image = np.zeros((32, 32, 3), np.uint8)
    label = np.zeros((32, 32), np.uint8)
    label[:, :10] = 5  # Left_Foot, on the left
    label[:, 20:] = 3
    probs = {k: 0.0 for k in SegTransform.DEFAULT_PROBABILITIES}
    out = SegTransform((32, 32), train=True, augment_probabilities={**probs, "flip": 1.0})(
        {"image": image, "label": label}, torch.Generator().manual_seed(0))
    expected = label[:, ::-1].copy()
    expected[expected == 5] = 14  # Right_Foot, now on the right
    np.testing.assert_array_equal(out["labels"].numpy(), expected)
    plain = SegTransform((32, 32), train=True, augment_probabilities=probs)({"image": image, "label": label})
    np.testing.assert_array_equal(plain["labels"].numpy(), label)


def test_seg_eval_keeps_label_resolution_and_collator_pads(toy_records):
    records = toy_records["seg"](2, seed=1)
    records[1]["image"] = cv2.resize(records[1]["image"], (40, 36))
    records[1]["label"] = cv2.resize(records[1]["label"], (40, 36), interpolation=cv2.INTER_NEAREST)
    transform = SegTransform((32, 32), train=False)
    batch = Sapiens2DataCollator()([transform(r) for r in records])
    assert batch["pixel_values"].shape == (2, 3, 32, 32) and batch["labels"].shape == (2, 36, 40)
    assert batch["label_size"].tolist() == [[32, 32], [36, 40]]
    assert (batch["labels"][0, 32:] == 255).all() and (batch["labels"][0, :32, 32:] == 255).all()


def test_normal_flip_negates_x_and_mirrors(toy_records):
    record = toy_records["normal"](1, seed=2)[0]
    probs = {k: 0.0 for k in NormalTransform.DEFAULT_PROBABILITIES}
    plain = NormalTransform((32, 32), train=True, augment_probabilities=probs)(record)
    flipped = NormalTransform((32, 32), train=True, augment_probabilities={**probs, "flip": 1.0})(record)
    expected = plain["labels"].flip(-1)
    expected[0] = -expected[0]
    torch.testing.assert_close(flipped["labels"], expected)
    torch.testing.assert_close(flipped["mask"], plain["mask"].flip(-1))
    norms = plain["labels"].norm(dim=0)[plain["mask"][0]]
    torch.testing.assert_close(norms, torch.ones_like(norms), atol=1e-5, rtol=0)


@pytest.mark.parametrize("augment", ["none", "flip", "all"])
def test_pointmap_targets_are_consistent_with_the_returned_intrinsics(augment, toy_records):
    record = toy_records["pointmap"](1, seed=3, size=(80, 60))[0]
    probs = {k: 0.0 for k in PointmapTransform.DEFAULT_PROBABILITIES}
    if augment == "flip":
        probs["flip"] = 1.0
    elif augment == "all":
        probs = {k: 1.0 for k in probs}
    out = PointmapTransform((64, 48), train=True, augment_probabilities=probs)(record, torch.Generator().manual_seed(1))
    assert out is not None
    target = out["labels"][None]
    zero = torch.zeros(1, 1)
    _, terms = PointmapLoss()(target, out["target_scales"].view(1, 1), target, out["target_scales"].view(1, 1),
                              out["mask"][None], out["intrinsics"][None])
    # X = (u - cx) Z / fx holds exactly on the target with the pre-canonical intrinsics of the input grid.
    assert float(terms["intrinsics_consistency_loss"]) < 1e-4
    assert torch.allclose(out["target_scales"], 768.0 / out["intrinsics"][0, 0])
    z = target[0, 2][out["mask"][0]]
    assert torch.allclose(out["target_mean_depth"], z.mean()) and float(zero.sum()) == 0


def test_albedo_transform_and_dense_folder_readers(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "tgt").mkdir()
    (tmp_path / "msk").mkdir()
    rng = np.random.default_rng(0)
    albedo = rng.uniform(0.1, 0.9, (20, 16, 3)).astype(np.float32)
    cv2.imwrite(str(tmp_path / "img" / "s1.png"), (albedo * 200).astype(np.uint8))
    cv2.imwrite(str(tmp_path / "img" / "s2.png"), (albedo * 200).astype(np.uint8))  # no target: skipped
    np.save(tmp_path / "tgt" / "s1.npy", albedo)
    mask = np.zeros((20, 16), np.uint8)
    mask[2:18, 3:13] = 255
    cv2.imwrite(str(tmp_path / "msk" / "s1.png"), mask)
    records = read_dense_folder(tmp_path / "img", tmp_path / "tgt", "albedo", tmp_path / "msk")
    assert len(records) == 1 and records[0]["mask"].endswith("s1.png")
    out = AlbedoTransform((40, 32), train=False)(records[0])
    assert out["labels"].shape == (3, 40, 32) and out["mask"].sum() == (mask > 0).sum() * 4
    assert float(out["labels"][:, ~out["mask"][0]].abs().max()) == 0.0
    with pytest.raises(ValueError, match="matching"):
        read_dense_folder(tmp_path / "img", tmp_path / "tgt", "seg")


def test_dataset_is_deterministic_per_seed_epoch_and_index(toy_records):
    records = toy_records["pose"](4, seed=0)
    dataset = Sapiens2TaskDataset(records, PoseTransform((64, 48), train=True), seed=3)
    first = dataset[1]
    again = dataset[1]
    torch.testing.assert_close(first["pixel_values"], again["pixel_values"])
    dataset.set_epoch(1)
    other_epoch = dataset[1]
    assert not torch.equal(first["pixel_values"], other_epoch["pixel_values"])
    dataset.set_epoch(0)
    torch.testing.assert_close(dataset[1]["labels"], first["labels"])
    other_seed = Sapiens2TaskDataset(records, PoseTransform((64, 48), train=True), seed=4)[1]
    assert not torch.equal(first["pixel_values"], other_seed["pixel_values"])


def test_rejected_samples_are_redrawn_deterministically():
    calls = []

    def transform(record, generator):
        calls.append(record["i"])
        return None if record["i"] == 0 else {"value": torch.tensor(record["i"])}

    dataset = Sapiens2TaskDataset([{"i": 0}, {"i": 1}, {"i": 2}], transform, seed=0)
    assert dataset[0]["value"] == dataset[0]["value"] and int(dataset[0]["value"]) in (1, 2)
    never = Sapiens2TaskDataset([{"i": 0}], transform, seed=0, max_attempts=3)
    with pytest.raises(RuntimeError, match="rejected"):
        never[0]


def test_hf_datasets_source_with_on_the_fly_transform(toy_records):
    import datasets
    from PIL import Image

    records = toy_records["seg"](3, seed=9)
    hf = datasets.Dataset.from_dict(
        {"image": [Image.fromarray(r["image"]) for r in records], "label": [Image.fromarray(r["label"]) for r in records]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.Image()}),
    )
    transform = SegTransform((32, 32), train=False)
    from_hf = Sapiens2TaskDataset(hf, transform)
    from_list = Sapiens2TaskDataset(records, transform)
    for index in range(3):
        torch.testing.assert_close(from_hf[index]["pixel_values"], from_list[index]["pixel_values"])
        torch.testing.assert_close(from_hf[index]["labels"], from_list[index]["labels"])
