"""Pose metrics: OKS AP against pycocotools' COCOeval configured with the 308 Sapiens2 sigmas, PCK and the official
``acc_pose`` quirk against hand-computed values."""

import contextlib
import io

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from sapiens2_hf.data.label_tables import KEYPOINT_OKS_SIGMAS
from sapiens2_hf.metrics import KeypointOksAP, KeypointPCK, PoseHeatmapAccuracy


NUM_KPT = 308
SIGMAS = np.array(KEYPOINT_OKS_SIGMAS)


def _crafted_dataset(seed):
    """Four images: isolated, crowded (3 persons + a crowd region), a zero-keypoint GT, and an image with a false
    positive; small / medium / large areas; detections with graded noise, including misses and duplicates."""
    rng = np.random.default_rng(seed)
    images, annotations, detections = [], [], []
    ann_id = 1
    for image_id, (num_persons, crowd) in enumerate([(1, False), (3, True), (1, False), (2, False)], start=1):
        images.append({"id": image_id, "width": 640, "height": 480})
        for person in range(num_persons):
            area = float(rng.choice([600.0, 4000.0, 30000.0]))
            side = np.sqrt(area)
            x0, y0 = rng.uniform(0, 300, size=2)
            kpts = np.stack([x0 + rng.uniform(0, side, NUM_KPT), y0 + rng.uniform(0, side, NUM_KPT)], 1)
            vis = (rng.uniform(size=NUM_KPT) > 0.3).astype(float) * 2
            if image_id == 3:
                vis[:] = 0  # zero-keypoint annotation: ignored by COCO
            num_kpts = int((vis > 0).sum())
            gt_flat = np.concatenate([kpts, vis[:, None]], 1).reshape(-1)
            annotations.append({"id": ann_id, "image_id": image_id, "category_id": 1, "keypoints": gt_flat.tolist(),
                                "num_keypoints": num_kpts, "area": area, "bbox": [x0, y0, side, side], "iscrowd": 0})
            ann_id += 1
            for copy in range(1 if person != 1 else 2):  # person 1 gets a duplicate detection
                noise = rng.normal(0, side * rng.choice([0.005, 0.03, 0.1]), size=(NUM_KPT, 2))
                det = kpts + noise
                scores = rng.uniform(0.1, 1.0, NUM_KPT)
                detections.append({"image_id": image_id, "category_id": 1, "score": float(rng.uniform(0.2, 1.0)),
                                   "keypoints": np.concatenate([det, scores[:, None]], 1).reshape(-1).tolist()})
        if crowd:
            kpts = np.zeros((NUM_KPT, 3))
            annotations.append({"id": ann_id, "image_id": image_id, "category_id": 1, "keypoints": kpts.reshape(-1).tolist(),
                                "num_keypoints": 0, "area": 9000.0, "bbox": [350.0, 50.0, 90.0, 100.0], "iscrowd": 1})
            ann_id += 1
        if image_id == 4:  # a false positive far away from everybody
            det = np.stack([rng.uniform(500, 600, NUM_KPT), rng.uniform(400, 470, NUM_KPT)], 1)
            detections.append({"image_id": image_id, "category_id": 1, "score": 0.95,
                               "keypoints": np.concatenate([det, np.ones((NUM_KPT, 1))], 1).reshape(-1).tolist()})
    return {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "person"}]}, detections


def _pycocotools_stats(gt_dict, detections, sigmas):
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = gt_dict
        coco.createIndex()
        coco_dt = coco.loadRes([dict(d) for d in detections])
        evaluator = COCOeval(coco, coco_dt, "keypoints")
        evaluator.params.kpt_oks_sigmas = np.asarray(sigmas)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return evaluator.stats


def _ours(gt_dict, detections, sigmas=None):
    metric = KeypointOksAP(sigmas=sigmas, nms_threshold=None, rescore=False)
    for ann in gt_dict["annotations"]:
        kp = np.asarray(ann["keypoints"]).reshape(1, NUM_KPT, 3)
        metric.add_ground_truth([ann["image_id"]], kp, [ann["area"]], [ann["bbox"]], [ann["iscrowd"]], [ann["id"]])
    for det in detections:
        kp = np.asarray(det["keypoints"]).reshape(1, NUM_KPT, 3)
        metric.add_detections([det["image_id"]], kp[..., :2], kp[..., 2], [det["score"]])
    return metric.compute()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oks_ap_matches_pycocotools_with_308_sigmas(seed):
    gt_dict, detections = _crafted_dataset(seed)
    stats = _pycocotools_stats(gt_dict, detections, SIGMAS)
    ours = _ours(gt_dict, detections)
    assert 0.05 < stats[0] < 0.95  # a non-trivial case
    np.testing.assert_allclose(list(ours.values()), stats[:10], rtol=0, atol=1e-12)
    # Broken control: COCO-17-style sigmas (all 0.079) give a different AP than the 308 official ones.
    broken = _pycocotools_stats(gt_dict, detections, np.full(NUM_KPT, 0.079))
    assert abs(broken[0] - ours["oks_ap"]) > 1e-3


def _many_images_dataset(seed, num_images=40):
    """Many images with 1-5 persons each, 0-90 % of the keypoints unlabelled (missing), missed persons, duplicate and
    far-off detections, crowd regions, zero-keypoint annotations, areas from small to large."""
    rng = np.random.default_rng(seed)
    images, annotations, detections = [], [], []
    ann_id = 1
    for image_id in range(1, num_images + 1):
        images.append({"id": image_id, "width": 640, "height": 480})
        for _ in range(int(rng.integers(1, 6))):
            area = float(rng.uniform(300.0, 40000.0))
            side = np.sqrt(area)
            x0, y0 = rng.uniform(0, 400, size=2)
            kpts = np.stack([x0 + rng.uniform(0, side, NUM_KPT), y0 + rng.uniform(0, side, NUM_KPT)], 1)
            vis = (rng.uniform(size=NUM_KPT) > rng.uniform(0.0, 0.9)).astype(float) * 2
            if rng.uniform() < 0.05:
                vis[:] = 0
            annotations.append({"id": ann_id, "image_id": image_id, "category_id": 1, "area": area,
                                "keypoints": np.concatenate([kpts, vis[:, None]], 1).reshape(-1).tolist(),
                                "num_keypoints": int((vis > 0).sum()), "bbox": [x0, y0, side, side], "iscrowd": 0})
            ann_id += 1
            for _ in range(int(rng.integers(0, 3))):  # 0: a missed person, 2: a duplicate
                det = kpts + rng.normal(0, side * rng.choice([0.01, 0.05, 0.2]), size=(NUM_KPT, 2))
                det[vis == 0] += rng.normal(0, side * 0.5, size=(int((vis == 0).sum()), 2))  # unlabelled: far off
                detections.append({"image_id": image_id, "category_id": 1, "score": float(rng.uniform(0.1, 1.0)),
                                   "keypoints": np.concatenate([det, rng.uniform(0, 1, (NUM_KPT, 1))], 1)
                                   .reshape(-1).tolist()})
        if rng.uniform() < 0.2:
            annotations.append({"id": ann_id, "image_id": image_id, "category_id": 1, "area": 9000.0,
                                "keypoints": [0.0] * (3 * NUM_KPT), "num_keypoints": 0,
                                "bbox": [350.0, 50.0, 90.0, 100.0], "iscrowd": 1})
            ann_id += 1
        if rng.uniform() < 0.3:
            det = np.stack([rng.uniform(500, 600, NUM_KPT), rng.uniform(400, 470, NUM_KPT)], 1)
            detections.append({"image_id": image_id, "category_id": 1, "score": float(rng.uniform(0.5, 1.0)),
                               "keypoints": np.concatenate([det, np.ones((NUM_KPT, 1))], 1).reshape(-1).tolist()})
    return {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "person"}]}, detections


def test_oks_ap_matches_pycocotools_on_many_images():
    gt_dict, detections = _many_images_dataset(seed=7)
    assert len(gt_dict["annotations"]) > 100 and len(detections) > 100
    stats = _pycocotools_stats(gt_dict, detections, SIGMAS)
    ours = _ours(gt_dict, detections)
    assert all(0.01 < value < 0.99 for value in stats[:10])  # every figure non-trivial
    np.testing.assert_allclose(list(ours.values()), stats[:10], rtol=0, atol=1e-12)
    # Broken control: treating the missing keypoints as labelled (a slip in the visibility handling) moves the AP
    # (the detections are far off exactly there, as a model's guesses for unlabelled points can be).
    labelled_everywhere = {**gt_dict, "annotations": [
        {**ann, "keypoints": np.concatenate([np.asarray(ann["keypoints"]).reshape(NUM_KPT, 3)[:, :2],
                                             np.full((NUM_KPT, 1), 2.0)], 1).reshape(-1).tolist()}
        if not ann["iscrowd"] and ann["num_keypoints"] else ann for ann in gt_dict["annotations"]]}
    assert np.abs(np.asarray(list(_ours(labelled_everywhere, detections).values())) - stats[:10]).max() > 1e-3


def test_oks_ap_perfect_and_official_rescoring_and_nms():
    rng = np.random.default_rng(3)
    kpts = rng.uniform(0, 200, size=(2, NUM_KPT, 2))
    vis = np.full((2, NUM_KPT, 1), 2.0)
    gt = np.concatenate([kpts, vis], -1)
    metric = KeypointOksAP()
    metric.update(kpts, np.ones((2, NUM_KPT)), gt, [20000.0, 20000.0], [[0, 0, 200, 200]] * 2, [7, 8])
    results = metric.compute()
    assert results["oks_ap"] == pytest.approx(1.0) and results["oks_ar"] == pytest.approx(1.0)
    assert results["oks_ap_medium"] == -1.0  # no medium ground truth, as pycocotools reports

    # Score rule: box score x mean of the keypoint scores > 0.2 (0 when none passes).
    metric = KeypointOksAP(nms_threshold=None)
    scores = np.full((1, NUM_KPT), 0.1)
    scores[0, :10] = 0.5
    scores[0, 10:20] = 0.9
    metric.add_detections([1], kpts[:1], scores, [0.8])
    assert next(iter(metric._dts[1].values())).score == pytest.approx(0.8 * 0.7)
    metric.add_detections([2], kpts[:1], np.full((1, NUM_KPT), 0.2), [1.0])
    assert next(iter(metric._dts[2].values())).score == 0.0

    # OKS-NMS at 0.9 drops a near-duplicate of a higher-scored detection, keeps a distinct person.
    metric = KeypointOksAP()
    metric.add_ground_truth([1, 1], gt, [20000.0, 20000.0], [[0, 0, 200, 200]] * 2)
    duplicate = kpts[0] + 0.01
    metric.add_detections([1, 1, 1], np.stack([kpts[0], duplicate, kpts[1]]), np.ones((3, NUM_KPT)), [1.0, 0.9, 0.8])
    with_nms = metric.compute()
    metric.nms_threshold = None
    without_nms = metric.compute()
    assert with_nms["oks_ap"] == pytest.approx(1.0)
    assert without_nms["oks_ap"] < with_nms["oks_ap"]  # the duplicate is a false positive without NMS


def test_oks_ap_rejects_wrong_keypoint_count():
    with pytest.raises(ValueError, match="308"):
        KeypointOksAP().add_detections([1], np.zeros((1, 17, 2)), np.ones((1, 17)))


def test_pck_matches_hand_values():
    pred = np.array([[[0.0, 0.0], [5.0, 0.0], [0.0, 30.0]], [[1.0, 1.0], [0.0, 0.0], [10.0, 0.0]]])
    gt = np.zeros((2, 3, 2))
    mask = np.array([[True, True, True], [True, False, True]])
    norm = np.array([[100.0, 100.0], [50.0, 50.0]])
    metric = KeypointPCK(thresholds=(0.1, 0.5))
    metric.update(pred[:1], gt[:1], mask[:1], norm[:1])  # streamed in two batches
    metric.update(pred[1:], gt[1:], mask[1:], norm[1:])
    results = metric.compute()
    # Distances / norm: kpt0: 0, 0.028; kpt1: 0.05 (kpt1 of instance 1 masked); kpt2: 0.3, 0.2.
    # @0.1: kpt0 2/2, kpt1 1/1, kpt2 0/2 -> mean(1, 1, 0); @0.5: all correct.
    assert results == {"pck_0_1": pytest.approx(2 / 3), "pck_0_5": pytest.approx(1.0)}


def test_acc_pose_keeps_the_official_axis_quirk():
    # Heatmaps 40 (H) x 10 (W): x errors of 1 px are normalised by H=40 (official) instead of W=10.
    heat = torch.zeros(1, 2, 40, 10)
    target = torch.zeros(1, 2, 40, 10)
    target[0, 0, 20, 5] = 1.0
    heat[0, 0, 20, 6] = 1.0  # x off by 1 -> 1/40 = 0.025 (official, correct) vs 1/10 = 0.1 (conventional, wrong)
    target[0, 1, 10, 3] = 1.0
    heat[0, 1, 30, 3] = 1.0  # y off by 20 -> 20/10 = 2 (official) vs 20/40 = 0.5: wrong either way
    weights = torch.tensor([[1.0, 1.0]])
    official = PoseHeatmapAccuracy()
    official.update(heat, target, weights)
    conventional = PoseHeatmapAccuracy(official_axis_order=False)
    conventional.update(heat, target, weights)
    assert official.compute() == {"acc_pose": 0.5}
    assert conventional.compute() == {"acc_pose": 0.0}
    # A keypoint whose prediction has no positive maximum counts at location -1 (a miss); weight 0 -> skipped.
    metric = PoseHeatmapAccuracy()
    metric.update(torch.zeros(1, 2, 40, 10) - 1, target, torch.tensor([[1.0, 0.0]]))
    assert metric.compute() == {"acc_pose": 0.0}
