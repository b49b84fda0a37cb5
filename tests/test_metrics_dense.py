"""Segmentation, normal, pointmap and albedo metrics against hand-made cases, OpenCV and explicit loops; and the
`evaluate` modules loaded offline from their local folders."""

import math

import cv2
import evaluate
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sapiens2_hf.metrics import (
    AlbedoMetric,
    NormalMetric,
    PointmapMetric,
    SegmentationMetric,
    evaluate_module_path,
    sobel5_normals,
)
from sapiens2_hf.metrics.albedo import masked_ssim_sum

pytestmark = pytest.mark.compat


# -------------------------------------------------------------------------------------------------- segmentation
def test_segmentation_metric_pools_counts_and_includes_background():
    labels = torch.tensor([[[0, 0, 1, 1], [2, 2, 255, 255]], [[0, 1, 1, 1], [3, 3, 3, 255]]])
    preds = torch.tensor([[[0, 1, 1, 1], [2, 0, 0, 1]], [[0, 1, 1, 2], [3, 3, 0, 3]]])
    metric = SegmentationMetric(num_classes=5)
    metric.update(preds[:1], labels[:1])
    metric.update(preds[1:], labels[1:])
    # Pooled counts over the 13 labelled pixels (class: intersection / union / label area):
    # (label, pred) pairs: (0,0) (0,1) (1,1) (1,1) (2,2) (2,0) | (0,0) (1,1) (1,1) (1,2) (3,3) (3,3) (3,0).
    # 0: 2 / (3 + 4 - 2) = 2/5 ; 1: 4 / (5 + 5 - 4) = 2/3 ; 2: 1 / (2 + 2 - 1) = 1/3 ; 3: 2 / (3 + 2 - 2) = 2/3 ;
    # 4: never present -> NaN -> 0 (official nan_to_num=0, still averaged).
    # Label areas: 3, 5, 2, 3 -> accuracies 2/3, 4/5, 1/2, 2/3, 0.
    results = metric.compute(per_class=True)
    assert results["miou"] == pytest.approx(100 * (2 / 5 + 2 / 3 + 1 / 3 + 2 / 3 + 0) / 5)
    assert results["aacc"] == pytest.approx(100 * 9 / 13)
    assert results["macc"] == pytest.approx(100 * (2 / 3 + 4 / 5 + 1 / 2 + 2 / 3 + 0) / 5)
    assert results["iou_0"] == pytest.approx(100 * 2 / 5)  # background counts
    # Broken control: averaging per-image mIoU (not the official pooled counts) gives another number.
    per_image = []
    for b in range(2):
        single = SegmentationMetric(num_classes=5)
        single.update(preds[b : b + 1], labels[b : b + 1])
        per_image.append(single.compute()["miou"])
    assert abs(np.mean(per_image) - results["miou"]) > 1.0


def test_segmentation_metric_resizes_logits_to_label_size():
    logits = torch.randn(2, 29, 4, 3, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 29, (2, 8, 6), generator=torch.Generator().manual_seed(1))
    metric = SegmentationMetric()
    metric.update(logits, labels)
    expected = SegmentationMetric()
    expected.update(F.interpolate(logits, size=(8, 6), mode="bilinear", align_corners=False).argmax(1), labels)
    assert metric.compute() == expected.compute()
    with pytest.raises(ValueError, match="outside"):
        metric.update(torch.zeros(1, 2, 2, dtype=torch.long), torch.full((1, 2, 2), 40))


# -------------------------------------------------------------------------------------------------------- normal
def _rotated(angles_deg):
    """Unit vectors at the given angles from +z, as (N, 3)."""
    a = torch.deg2rad(torch.tensor(angles_deg, dtype=torch.float64))
    return torch.stack([torch.sin(a), torch.zeros_like(a), torch.cos(a)], 1)


def test_normal_metric_hand_values_and_histogram_median():
    angles = [3.0, 10.0, 20.2, 40.0, 41.0]
    pred = _rotated(angles).T.reshape(1, 3, 1, 5).float() * 3.0  # raw, not unit length
    target = torch.tensor([0.0, 0.0, 1.0]).view(1, 3, 1, 1).expand(1, 3, 1, 5).clone()
    target = torch.cat([target, torch.full((1, 3, 1, 1), -1000.0)], dim=3)  # a masked background pixel
    pred = torch.cat([pred, torch.zeros(1, 3, 1, 1)], dim=3)
    mask = torch.tensor([[[True] * 5 + [False]]])
    metric = NormalMetric()
    metric.update(pred[..., :3], target[..., :3], mask[..., :3])  # streamed in two parts
    metric.update(pred[..., 3:], target[..., 3:], mask[..., 3:])
    results = metric.compute()
    assert results["mean_angular_error_deg"] == pytest.approx(np.mean(angles), abs=1e-4)
    assert results["rmse_angular_error_deg"] == pytest.approx(math.sqrt(np.mean(np.square(angles))), abs=1e-4)
    # 2.5 of 5 pixels -> the third angle, 20.2 deg, lies in bin [20.0, 20.5): its centre 20.25 is reported.
    assert results["median_angular_error_deg"] == 20.25
    assert results["within_5_deg"] == pytest.approx(20.0)
    assert results["within_11_25_deg"] == pytest.approx(40.0)
    assert results["within_22_5_deg"] == pytest.approx(60.0)
    assert results["within_30_deg"] == pytest.approx(60.0)
    # Broken control: the exact median (20.2) is not what the official histogram rule reports.
    assert results["median_angular_error_deg"] != pytest.approx(float(np.median(angles)))


# ------------------------------------------------------------------------------------------------------ pointmap
def test_sobel5_normals_match_opencv():
    rng = np.random.default_rng(0)
    pointmap = rng.normal(size=(7, 9, 3)).astype(np.float32)
    pointmap[..., 2] += 5
    grad_x = cv2.Sobel(pointmap, cv2.CV_32F, 1, 0, ksize=5)
    grad_y = cv2.Sobel(pointmap, cv2.CV_32F, 0, 1, ksize=5)
    normals = np.cross(grad_x, grad_y)
    normals = normals / (np.linalg.norm(normals, axis=2, keepdims=True) + 1e-6)
    ours = sobel5_normals(torch.from_numpy(pointmap).permute(2, 0, 1)[None])[0].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(ours, normals, atol=2e-5)
    # Broken control: zero padding (instead of OpenCV's reflect-101 border) changes the border normals.
    zero_pad = torch.from_numpy(pointmap).permute(2, 0, 1).double().reshape(3, 1, 7, 9)
    kernel = torch.outer(torch.tensor([1.0, 4, 6, 4, 1]), torch.tensor([-1.0, -2, 0, 2, 1])).double()[None, None]
    gx_zero = F.conv2d(zero_pad, kernel, padding=2)[:, 0].permute(1, 2, 0).numpy()
    assert np.abs(gx_zero - grad_x).max() > 1e-2


def test_pointmap_metric_hand_values_as_fractions():
    yy, xx = torch.meshgrid(torch.arange(8.0), torch.arange(9.0), indexing="ij")
    target = torch.stack([xx * 0.1, yy * 0.1, 2.0 + 0.05 * xx], 0)[None]  # a tilted plane
    # Interior pixels only: on the outermost row/column the reflect-101 Sobel derivative across the border is 0, so
    # the normal there is undefined (the official evaluator counts those pixels too; see PointmapMetric).
    mask = torch.zeros(1, 8, 9, dtype=torch.bool)
    mask[0, 1:-1, 1:-1] = True
    mask[0, 3, 4] = False
    shift = torch.tensor([0.0, 0.06, 0.0]).view(1, 3, 1, 1)
    metric = PointmapMetric()
    metric.update(target + shift, target, mask)
    results = metric.compute()
    assert results["mean_l2_error"] == pytest.approx(0.06)
    assert results["x_mae"] == pytest.approx(0.0, abs=1e-12) and results["y_mae"] == pytest.approx(0.06)
    assert results["rmse"] == pytest.approx(0.06)
    assert (results["within_5_cm"], results["within_10_cm"], results["within_20_cm"]) == (0.0, 1.0, 1.0)
    # A translation does not change the Sobel normals: zero angular error, every pixel within 5 degrees (fraction 1).
    assert results["normal_mean_angular_error_deg"] == pytest.approx(0.0, abs=1e-4)
    assert results["normal_within_5_deg"] == 1.0


# -------------------------------------------------------------------------------------------------------- albedo
def _ssim_loop(pred, target, mask, data_range):
    """Explicit per-pixel masked SSIM: Gaussian 11x11 sigma 1.5, zero padding, windows with > 50 % support."""
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    ax = np.arange(11) - 5.0
    g = np.exp(-(ax[None] ** 2 + ax[:, None] ** 2) / (2 * 1.5**2))
    g /= g.sum()
    _, height, width = pred.shape
    total, count = 0.0, 0
    for y in range(height):
        for x in range(width):
            w_sum = 0.0
            stats = np.zeros((3, 5))  # per channel: sum x, sum y, sum x^2, sum y^2, sum xy (weighted)
            for dy in range(-5, 6):
                for dx in range(-5, 6):
                    yy, xx = y + dy, x + dx
                    if 0 <= yy < height and 0 <= xx < width and mask[yy, xx]:
                        w = g[dy + 5, dx + 5]
                        w_sum += w
                        p, t = pred[:, yy, xx], target[:, yy, xx]
                        stats += w * np.stack([p, t, p * p, t * t, p * t], 1)
            support = max(w_sum, 1e-8)
            if support <= 0.5:
                continue
            mx, my, sxx, syy, sxy = (stats / support).T
            vx, vy, cov = sxx - mx**2, syy - my**2, sxy - mx * my
            ssim = ((2 * mx * my + c1) * (2 * cov + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2) + 1e-8)
            total += ssim.mean()
            count += 1
    return total, count


def test_masked_ssim_matches_explicit_loop():
    rng = np.random.default_rng(1)
    target = rng.uniform(size=(3, 12, 14))
    pred = np.clip(target + rng.normal(0, 0.1, size=target.shape), 0, 1)
    mask = np.zeros((12, 14), bool)
    mask[2:11, 3:12] = True
    ours = masked_ssim_sum(torch.from_numpy(pred), torch.from_numpy(target), torch.from_numpy(mask), 1.0)
    expected = _ssim_loop(pred, target, mask, 1.0)
    assert ours[1] == expected[1] and 0 < expected[1] < mask.sum()
    assert ours[0] == pytest.approx(expected[0], rel=1e-9)


def test_albedo_metric_psnr_dataset_global_and_range_rule():
    target = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 8, 8, dtype=torch.bool)
    mask[1, :4] = False
    error = torch.zeros_like(target)
    error[0] += 0.1
    error[1] += 0.3
    metric = AlbedoMetric()
    metric.update(target[:1] + error[:1], target[:1], mask[:1])
    metric.update(target[1:] + error[1:], target[1:], mask[1:])
    results = metric.compute()
    # Dataset-global MSE over the 64 + 32 foreground pixels: (64 * 0.01 + 32 * 0.09) / 96.
    mse = (64 * 0.01 + 32 * 0.09) / 96
    assert results["rmse"] == pytest.approx(math.sqrt(mse), rel=1e-6)
    assert results["psnr"] == pytest.approx(10 * math.log10(1.0 / mse), rel=1e-6)
    assert results["mae"] == pytest.approx((64 * 0.1 + 32 * 0.3) / 96, rel=1e-6)
    assert results["grad_l1"] == pytest.approx(0.0, abs=1e-6)  # a constant offset has no gradient error
    # Broken control: the mean of per-image PSNRs differs from the dataset-global one.
    per_image = np.mean([10 * math.log10(1 / 0.01), 10 * math.log10(1 / 0.09)])
    assert abs(per_image - results["psnr"]) > 0.5
    # 8-bit targets switch R to 255 (same images scaled: same PSNR).
    metric255 = AlbedoMetric()
    metric255.update((target[:1] + error[:1]) * 255, target[:1] * 255, mask[:1])
    metric255.update((target[1:] + error[1:]) * 255, target[1:] * 255, mask[1:])
    assert metric255.compute()["psnr"] == pytest.approx(results["psnr"], rel=1e-6)
    assert metric255.compute()["ssim"] == pytest.approx(results["ssim"], rel=1e-6)


# ------------------------------------------------------------------------------------------- evaluate modules
def test_evaluate_modules_load_offline_and_match_the_accumulators(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gen = torch.Generator().manual_seed(3)
    labels = torch.randint(0, 29, (2, 6, 5), generator=gen)
    preds = torch.randint(0, 29, (2, 6, 5), generator=gen)
    seg = evaluate.load(evaluate_module_path("seg"))
    accumulator = SegmentationMetric()
    accumulator.update(preds, labels)
    assert seg.compute(predictions=preds.tolist(), references=labels.tolist()) == accumulator.compute()

    normals_pred, normals_gt = torch.randn(2, 3, 4, 4, generator=gen), torch.randn(2, 3, 4, 4, generator=gen)
    masks = torch.rand(2, 4, 4, generator=gen) > 0.3
    for task, accumulator in (("normal", NormalMetric()), ("pointmap", PointmapMetric()), ("albedo", AlbedoMetric())):
        module = evaluate.load(evaluate_module_path(task))
        accumulator.update(normals_pred, normals_gt, masks)
        got = module.compute(predictions=normals_pred.tolist(), references=normals_gt.tolist(), masks=masks.int().tolist())
        expected = accumulator.compute()
        assert got.keys() == expected.keys()
        np.testing.assert_allclose(list(got.values()), list(expected.values()), rtol=1e-5)

    pose = evaluate.load(evaluate_module_path("pose"))
    rng = np.random.default_rng(4)
    gt = np.concatenate([rng.uniform(0, 100, (3, 308, 2)), np.full((3, 308, 1), 2.0)], -1)
    det = np.concatenate([gt[..., :2] + rng.normal(0, 2, (3, 308, 2)), rng.uniform(0.3, 1, (3, 308, 1))], -1)
    got = pose.compute(predictions=det.tolist(), references=gt.tolist(), areas=[5000.0, 9000.0, 20000.0],
                       boxes=[[0, 0, 100, 100]] * 3, image_ids=[1, 1, 2], box_scores=[1.0, 1.0, 1.0])
    assert 0 < got["oks_ap"] <= 1 and set(got) >= {"oks_ap", "oks_ar", "pck_0_05", "pck_0_1", "pck_0_2"}
    with pytest.raises(ValueError, match="Unknown task"):
        evaluate_module_path("depth")
