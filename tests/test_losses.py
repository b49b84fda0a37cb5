"""Loss values against independent, explicit per-element loops (float64 Python arithmetic).

Each reference below re-derives the official Sapiens2 recipe (facebookresearch/sapiens2 `sapiens/*/src/models/losses`
and the loss settings of its configs) pixel by pixel, without calling the library. Every test also has a broken
control: a plausible but wrong variant of the recipe that must NOT match.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F

from sapiens2_hf.data.label_tables import SEG_CE_CLASS_WEIGHTS
from sapiens2_hf.losses import AlbedoLoss, NormalLoss, PointmapLoss, PoseHeatmapLoss, SegmentationLoss


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _close(a, b, rel=1e-5, abs_=1e-6):
    return abs(float(a) - float(b)) <= abs_ + rel * abs(float(b))


def _assert_terms(total, terms):
    assert all(re.fullmatch(r"[a-z0-9_]+_loss", name) for name in terms), list(terms)
    torch.testing.assert_close(total, sum(terms.values()))


# ----------------------------------------------------------------------------------------------------------- pose
def _pose_reference(pred, target, weights):
    batch, keypoints, height, width = pred.shape
    acc = 0.0
    for b in range(batch):
        for k in range(keypoints):
            for y in range(height):
                for x in range(width):
                    acc += float(weights[b, k]) * (float(pred[b, k, y, x]) - float(target[b, k, y, x])) ** 2
    return 10.0 * acc / (batch * keypoints * height * width)


def test_pose_heatmap_loss_matches_loop():
    pred = torch.randn(2, 5, 4, 3, generator=_gen(0))
    target = torch.rand(2, 5, 4, 3, generator=_gen(1))
    weights = torch.tensor([[1.0, 0.0, 1.0, 0.5, 1.0], [0.0, 0.0, 1.0, 1.0, 1.0]])
    total, terms = PoseHeatmapLoss()(pred, target, weights)
    _assert_terms(total, terms)
    expected = _pose_reference(pred, target, weights)
    assert _close(total, expected), (float(total), expected)
    # (B, K, 1, 1) weights are accepted and equal.
    total_4d, _ = PoseHeatmapLoss()(pred, target, weights[:, :, None, None])
    assert _close(total_4d, expected)
    # Broken control: normalising by the weight sum (transformers' stock `F.mse_loss(weight=...)` style) differs.
    broken = _pose_reference(pred, target, weights) * pred.numel() / float(weights.sum() * 4 * 3)
    assert not _close(total, broken)
    with pytest.raises(ValueError, match="target_weights"):
        PoseHeatmapLoss()(pred, target, weights[:, :3])


# ------------------------------------------------------------------------------------------------------------ seg
def _seg_reference(logits, labels, class_weights, ignore=255, eps=1e-3):
    batch, classes, height, width = logits.shape
    ce = 0.0
    for b in range(batch):
        for y in range(height):
            for x in range(width):
                label = int(labels[b, y, x])
                if label == ignore:
                    continue
                row = [float(logits[b, c, y, x]) for c in range(classes)]
                log_norm = math.log(sum(math.exp(v) for v in row))
                ce += class_weights[label] * (log_norm - row[label])
    ce /= batch * height * width
    dice_total = 0.0
    for b in range(batch):
        probs = torch.softmax(logits[b].double(), dim=0)
        dices = []
        for c in range(1, classes):
            inter = p_sq = g_sq = 0.0
            for y in range(height):
                for x in range(width):
                    label = int(labels[b, y, x])
                    if label == ignore:
                        continue
                    p = float(probs[c, y, x])
                    g = 1.0 if label == c else 0.0
                    inter += p * g
                    p_sq += p * p
                    g_sq += g * g
            if g_sq > 0:
                dices.append((2 * inter + eps) / (p_sq + g_sq + eps))
        if dices:  # samples without any labelled foreground class add 0 but still count in the batch mean
            dice_total += 1.0 - sum(dices) / len(dices)
    return ce, dice_total / batch


def _seg_inputs():
    logits = torch.randn(3, 29, 4, 5, generator=_gen(2)) * 2
    labels = torch.randint(0, 29, (3, 4, 5), generator=_gen(3))
    labels[0, 0, :3] = 255
    labels[1] = 0  # background only -> no Dice contribution
    labels[1, 2, 2] = 255
    labels[2, :2] = 7
    return logits, labels


def test_segmentation_loss_matches_loop():
    logits, labels = _seg_inputs()
    total, terms = SegmentationLoss()(logits, labels)
    _assert_terms(total, terms)
    ce, dice = _seg_reference(logits, labels, SEG_CE_CLASS_WEIGHTS)
    assert _close(terms["cross_entropy_loss"], ce), (float(terms["cross_entropy_loss"]), ce)
    assert _close(terms["dice_loss"], dice), (float(terms["dice_loss"]), dice)
    # (B, 1, H, W) labels are accepted.
    total_4d, _ = SegmentationLoss()(logits, labels[:, None])
    torch.testing.assert_close(total_4d, total)


def test_segmentation_loss_broken_controls():
    logits, labels = _seg_inputs()
    _, terms = SegmentationLoss()(logits, labels)
    weights = torch.tensor(SEG_CE_CLASS_WEIGHTS)
    # PyTorch's "mean" reduction divides by the weight sum of the labelled pixels: not the official rule.
    stock = F.cross_entropy(logits, labels, weight=weights, ignore_index=255)
    assert not _close(terms["cross_entropy_loss"], stock)
    # Dice averaged only over samples that have a foreground class (not the official batch mean).
    _, dice = _seg_reference(logits, labels, SEG_CE_CLASS_WEIGHTS)
    assert not _close(terms["dice_loss"], dice * 3 / 2)


def test_segmentation_loss_resizes_logits_and_rejects_bad_labels():
    logits, labels = _seg_inputs()
    small = logits[:, :, ::2, ::2].contiguous()
    total, _ = SegmentationLoss()(small, labels)
    up = F.interpolate(small, size=(4, 5), mode="bilinear", align_corners=False)
    ce, dice = _seg_reference(up, labels, SEG_CE_CLASS_WEIGHTS)
    assert _close(total, ce + dice)
    bad = labels.clone()
    bad[0, 0, 0] = 40
    with pytest.raises(ValueError, match="outside"):
        SegmentationLoss()(logits, bad)


# --------------------------------------------------------------------------------------------------------- normal
def _unit(v):
    n = math.sqrt(sum(c * c for c in v))
    return [c / max(n, 1e-6) for c in v]


def _normal_reference(pred, target, mask, squared_grad=True):
    batch, channels, height, width = pred.shape
    cos_sum = l1_sum = 0.0
    valid_count = 0
    for b in range(batch):
        for y in range(height):
            for x in range(width):
                if not mask[b, y, x]:
                    continue
                valid_count += 1
                p = [float(pred[b, c, y, x]) for c in range(channels)]
                t = [float(target[b, c, y, x]) for c in range(channels)]
                cos_sum += 1 - sum(a * b_ for a, b_ in zip(_unit(p), _unit(t)))
                l1_sum += sum(abs(a - b_) for a, b_ in zip(p, t))
    grads = []
    for dy, dx in ((0, 1), (1, 0)):
        err = 0.0
        pairs = 0
        for b in range(batch):
            for y in range(height - dy):
                for x in range(width - dx):
                    if not (mask[b, y, x] and mask[b, y + dy, x + dx]):
                        continue
                    pairs += 1
                    for c in range(channels):
                        d_pred = float(pred[b, c, y + dy, x + dx]) - float(pred[b, c, y, x])
                        d_tgt = float(target[b, c, y + dy, x + dx]) - float(target[b, c, y, x])
                        err += (d_pred - d_tgt) ** 2 if squared_grad else abs(d_pred - d_tgt)
        grads.append(err / max(pairs, 1))
    return {"cosine_loss": 10 * cos_sum / valid_count, "l1_loss": l1_sum / valid_count, "grad_loss": 10 * sum(grads)}


def _normal_inputs():
    pred = torch.randn(2, 3, 5, 4, generator=_gen(4))
    target = F.normalize(torch.randn(2, 3, 5, 4, generator=_gen(5)), dim=1)
    mask = torch.rand(2, 5, 4, generator=_gen(6)) > 0.3
    target = torch.where(mask[:, None], target, torch.full_like(target, -1000.0))  # official background value
    return pred, target, mask


def test_normal_loss_matches_loop():
    pred, target, mask = _normal_inputs()
    total, terms = NormalLoss()(pred, target, mask)
    _assert_terms(total, terms)
    expected = _normal_reference(pred, target, mask)
    for name, value in expected.items():
        assert _close(terms[name], value), (name, float(terms[name]), value)
    # Broken control: an absolute (true "L1") gradient term is not the official squared one.
    broken = _normal_reference(pred, target, mask, squared_grad=False)
    assert not _close(terms["grad_loss"], broken["grad_loss"])


def test_normal_loss_ignores_non_finite_background_and_empty_masks():
    pred, target, mask = _normal_inputs()
    total, _ = NormalLoss()(pred, target, mask)
    nan_target = torch.where(mask[:, None], target, torch.full_like(target, float("nan")))
    total_nan, _ = NormalLoss()(pred, nan_target, mask)
    torch.testing.assert_close(total_nan, total)
    pred.requires_grad_(True)
    empty, _ = NormalLoss()(pred, target, torch.zeros_like(mask))
    empty.backward()
    assert float(empty.detach()) == 0.0 and torch.isfinite(pred.grad).all() and pred.grad.abs().sum() == 0


# ------------------------------------------------------------------------------------------------------- pointmap
def _bilinear_up2(img):
    """Explicit 2x bilinear upsampling with align_corners=False (half-pixel centres, edge clamp)."""
    channels, height, width = len(img), len(img[0]), len(img[0][0])
    out = [[[0.0] * (2 * width) for _ in range(2 * height)] for _ in range(channels)]

    def taps(dst, size):
        src = max((dst + 0.5) / 2 - 0.5, 0.0)
        i0 = min(int(math.floor(src)), size - 1)
        i1 = min(i0 + 1, size - 1)
        return i0, i1, src - i0

    for c in range(channels):
        for yo in range(2 * height):
            y0, y1, ly = taps(yo, height)
            for xo in range(2 * width):
                x0, x1, lx = taps(xo, width)
                top = img[c][y0][x0] * (1 - lx) + img[c][y0][x1] * lx
                bottom = img[c][y1][x0] * (1 - lx) + img[c][y1][x1] * lx
                out[c][yo][xo] = top * (1 - ly) + bottom * ly
    return out


def _reflect(i, size):
    return 1 if i == -1 else (size - 2 if i == size else i)


def _normals_map(pm, mask, scale):
    """Normals of one (3, H, W) nested-list map: cross(right - centre, down - centre) x 100, reflect padding."""
    height, width = len(pm[0]), len(pm[0][0])
    normals, valid = {}, {}
    for y in range(height):
        for x in range(width):
            centre = [pm[c][y][x] / scale for c in range(3)]
            right = [(pm[c][y][_reflect(x + 1, width)] / scale - centre[c]) * 100 for c in range(3)]
            down = [(pm[c][_reflect(y + 1, height)][x] / scale - centre[c]) * 100 for c in range(3)]
            n = [
                right[1] * down[2] - right[2] * down[1],
                right[2] * down[0] - right[0] * down[2],
                right[0] * down[1] - right[1] * down[0],
            ]
            magnitude = math.sqrt(sum(v * v for v in n))
            ok = magnitude > 1e-6 and bool(mask[y][x])
            normals[y, x] = [v / max(magnitude, 1e-6) if ok else 0.0 for v in n]
            valid[y, x] = ok
    return normals, valid


def _pointmap_reference(pred, scales, target, target_scales, mask, intrinsics, normal_l1_divisor=3):
    batch, _, height, width = pred.shape
    P = pred.double().tolist()
    T = [[[[float(target[b, c, y, x]) if mask[b, y, x] else 0.0 for x in range(width)] for y in range(height)]
          for c in range(3)] for b in range(batch)]
    M = mask.tolist()
    mean_depth = []
    for b in range(batch):
        zs = [T[b][2][y][x] for y in range(height) for x in range(width) if M[b][y][x]]
        mean_depth.append(sum(zs) / len(zs))
    n_valid = sum(1 for b in range(batch) for y in range(height) for x in range(width) if M[b][y][x])

    l1 = sum(abs(P[b][c][y][x] - T[b][c][y][x]) / mean_depth[b]
             for b in range(batch) for c in range(3) for y in range(height) for x in range(width) if M[b][y][x])
    l1 /= n_valid

    ms_err = 0.0
    ms_count = 0
    for b in range(batch):
        pu = _bilinear_up2([[[v / mean_depth[b] for v in row] for row in P[b][c]] for c in range(3)])
        tu = _bilinear_up2([[[v / mean_depth[b] for v in row] for row in T[b][c]] for c in range(3)])
        for yo in range(2 * height):
            for xo in range(2 * width):
                if M[b][yo // 2][xo // 2]:
                    ms_count += 1
                    ms_err += sum(abs(pu[c][yo][xo] - tu[c][yo][xo]) for c in range(3))
    multiscale = ms_err / ms_count

    silog_sum = 0.0
    for b in range(batch):
        ds = [math.log(max(T[b][2][y][x], 1e-4)) - math.log(max(P[b][2][y][x], 1e-4))
              for y in range(height) for x in range(width) if M[b][y][x]]
        mean_d = sum(ds) / len(ds)
        silog_sum += math.sqrt(sum(d * d for d in ds) / len(ds) - 0.5 * mean_d * mean_d)
    silog = silog_sum / batch

    k_err = 0.0
    for b in range(batch):
        fx, fy, cx, cy = (float(intrinsics[b, 0, 0]), float(intrinsics[b, 1, 1]),
                          float(intrinsics[b, 0, 2]), float(intrinsics[b, 1, 2]))
        for y in range(height):
            for x in range(width):
                if M[b][y][x]:
                    z = P[b][2][y][x]
                    k_err += abs(P[b][0][y][x] - (x - cx) * z / fx) + abs(P[b][1][y][x] - (y - cy) * z / fy)
    intrinsics_term = k_err / n_valid

    si_err = 0.0
    for b in range(batch):
        count = sum(1 for y in range(height) for x in range(width) if M[b][y][x]) + 1e-6
        cp = [sum(P[b][c][y][x] / mean_depth[b] for y in range(height) for x in range(width) if M[b][y][x]) / count
              for c in range(3)]
        ct = [sum(T[b][c][y][x] / mean_depth[b] for y in range(height) for x in range(width) if M[b][y][x]) / count
              for c in range(3)]
        for y in range(height):
            for x in range(width):
                if M[b][y][x]:
                    si_err += sum(abs((P[b][c][y][x] / mean_depth[b] - cp[c]) - (T[b][c][y][x] / mean_depth[b] - ct[c]))
                                  for c in range(3))
    shift_invariant = si_err / n_valid

    n_err = 0.0
    n_count = 0
    for b in range(batch):
        s = float(target_scales[b])
        pn, _ = _normals_map(P[b], M[b], s)
        tn, tv = _normals_map(T[b], M[b], s)
        for (y, x), ok in tv.items():
            if ok:
                n_count += 1
                cos = max(-1.0, min(1.0, sum(a * c for a, c in zip(pn[y, x], tn[y, x]))))
                n_err += (1 - cos) + sum(abs(a - c) for a, c in zip(pn[y, x], tn[y, x])) / normal_l1_divisor
    normal = n_err / n_count

    scale_term = sum(abs(float(scales[b]) - float(target_scales[b])) for b in range(batch)) / batch
    return {
        "l1_loss": min(2 * l1, 4.0),
        "multiscale_l1_loss": min(multiscale, 4.0),
        "silog_loss": silog,
        "intrinsics_consistency_loss": intrinsics_term,
        "shift_invariant_l1_loss": min(shift_invariant, 4.0),
        "normal_loss": 2 * normal,
        "scale_l1_loss": 4 * scale_term,
    }


def _pointmap_inputs(seed=7):
    g = _gen(seed)
    batch, height, width = 2, 5, 6
    intrinsics = torch.tensor([[[6.0, 0, 2.7], [0, 6.5, 2.1], [0, 0, 1]], [[4.0, 0, 3.2], [0, 4.0, 1.9], [0, 0, 1]]])
    depth = 2.0 + torch.rand(batch, height, width, generator=g)
    u = torch.arange(width).view(1, 1, width).float()
    v = torch.arange(height).view(1, height, 1).float()
    x = (u - intrinsics[:, 0, 2].view(-1, 1, 1)) * depth / intrinsics[:, 0, 0].view(-1, 1, 1)
    y = (v - intrinsics[:, 1, 2].view(-1, 1, 1)) * depth / intrinsics[:, 1, 1].view(-1, 1, 1)
    target_scales = 768.0 / intrinsics[:, 0, 0]  # (B,)
    target = torch.stack([x, y, depth], 1) * target_scales.view(-1, 1, 1, 1)
    # Scattered holes, chosen so that no valid pixel has both its right and its down neighbour off the mask: there
    # the two difference vectors are parallel, and float32 rounding (as in the official code) decides whether the
    # cross product clears the 1e-6 validity threshold, which a float64 reference cannot reproduce.
    mask = torch.ones(batch, height, width, dtype=torch.bool)
    for b, holes in enumerate(([(0, 3), (1, 0), (2, 4), (3, 2), (4, 5)], [(0, 0), (1, 4), (2, 2), (3, 5), (4, 1)])):
        for y_hole, x_hole in holes:
            mask[b, y_hole, x_hole] = False
    target = torch.where(mask[:, None], target, torch.zeros_like(target))  # official background value
    pred = target + 3.0 * torch.randn(target.shape, generator=g)
    pred[:, 2] = pred[:, 2].abs() + 1.0
    scales = target_scales.view(-1, 1) + torch.randn(batch, 1, generator=g)
    return pred, scales, target, target_scales.view(-1, 1), mask, intrinsics


def test_pointmap_loss_matches_loop():
    pred, scales, target, target_scales, mask, intrinsics = _pointmap_inputs()
    total, terms = PointmapLoss()(pred, scales, target, target_scales, mask, intrinsics)
    _assert_terms(total, terms)
    expected = _pointmap_reference(pred, scales, target, target_scales, mask, intrinsics)
    assert list(terms) == list(expected)
    for name, value in expected.items():
        assert _close(terms[name], value, rel=2e-5), (name, float(terms[name]), value)
    # An explicit mean depth equals the computed one.
    mean_depth = torch.stack([target[b, 2][mask[b]].mean() for b in range(2)])
    total_md, _ = PointmapLoss()(pred, scales, target, target_scales, mask, intrinsics, mean_depth)
    torch.testing.assert_close(total_md, total)


def test_pointmap_loss_clamp_and_broken_control():
    pred, scales, target, target_scales, mask, intrinsics = _pointmap_inputs()
    _, terms = PointmapLoss()(pred * 50, scales, target, target_scales, mask, intrinsics)
    # Big errors: the weighted depth-normalised L1 terms saturate at exactly 4.
    assert float(terms["l1_loss"]) == 4.0 and float(terms["shift_invariant_l1_loss"]) == 4.0
    _, terms = PointmapLoss()(pred, scales, target, target_scales, mask, intrinsics)
    expected = _pointmap_reference(pred, scales, target, target_scales, mask, intrinsics)
    # Broken control: the normal term's L1 part summed (not averaged) over the three components.
    broken = _pointmap_reference(pred, scales, target, target_scales, mask, intrinsics, normal_l1_divisor=1)
    assert _close(terms["normal_loss"], expected["normal_loss"], rel=2e-5)
    assert not _close(terms["normal_loss"], broken["normal_loss"], rel=1e-3)
    # Broken control: intrinsics consistency against the canonical K (f scaled to 768) is not the official term.
    canonical_k = intrinsics.clone()
    canonical_k[:, :2] *= target_scales.view(-1, 1, 1)
    _, terms_k = PointmapLoss()(pred, scales, target, target_scales, mask, canonical_k)
    assert not _close(terms_k["intrinsics_consistency_loss"], expected["intrinsics_consistency_loss"], rel=1e-3)


def test_pointmap_loss_gradients_are_finite_for_a_perfect_prediction():
    _, _, target, target_scales, mask, intrinsics = _pointmap_inputs()
    pred = target.clone().requires_grad_(True)
    total, terms = PointmapLoss()(pred, target_scales.clone(), target, target_scales, mask, intrinsics)
    total.backward()
    assert float(terms["silog_loss"]) == 0.0 and float(terms["l1_loss"]) == 0.0
    assert torch.isfinite(pred.grad).all()


# --------------------------------------------------------------------------------------------------------- albedo
def _albedo_reference(pred, target, mask, clamp_chroma=True):
    batch, channels, height, width = pred.shape
    P, T, M = pred.double().tolist(), target.double().tolist(), mask.tolist()
    n_valid = sum(1 for b in range(batch) for y in range(height) for x in range(width) if M[b][y][x])
    l1 = sum(abs(P[b][c][y][x] - T[b][c][y][x]) for b in range(batch) for c in range(channels)
             for y in range(height) for x in range(width) if M[b][y][x]) / n_valid
    grads = []
    for dy, dx in ((0, 1), (1, 0)):
        err, pairs = 0.0, 0
        for b in range(batch):
            for y in range(height - dy):
                for x in range(width - dx):
                    if M[b][y][x] and M[b][y + dy][x + dx]:
                        pairs += 1
                        err += sum(((P[b][c][y + dy][x + dx] - P[b][c][y][x]) - (T[b][c][y + dy][x + dx] - T[b][c][y][x])) ** 2
                                   for c in range(channels))
        grads.append(err / pairs)
    chroma = 0.0
    for b in range(batch):
        for y in range(height):
            for x in range(width):
                if M[b][y][x]:
                    p = [min(max(P[b][c][y][x], 0.0), 1.0) if clamp_chroma else P[b][c][y][x] for c in range(3)]
                    t = [T[b][c][y][x] for c in range(3)]
                    sp, st = sum(p) + 1e-6, sum(t) + 1e-6
                    chroma += sum(abs(p[c] / sp - t[c] / st) for c in range(3))
    return {"l1_loss": 2 * l1, "grad_loss": 2 * 0.5 * sum(grads), "chromaticity_loss": chroma / n_valid}


def test_albedo_loss_matches_loop():
    pred = torch.rand(2, 3, 4, 5, generator=_gen(8)) * 1.4 - 0.2  # some values outside [0, 1]
    target = torch.rand(2, 3, 4, 5, generator=_gen(9))
    mask = torch.rand(2, 4, 5, generator=_gen(10)) > 0.3
    total, terms = AlbedoLoss()(pred, target, mask)
    _assert_terms(total, terms)
    expected = _albedo_reference(pred, target, mask)
    for name, value in expected.items():
        assert _close(terms[name], value), (name, float(terms[name]), value)
    # Broken control: chromaticity of the unclamped prediction is not the official term.
    broken = _albedo_reference(pred, target, mask, clamp_chroma=False)
    assert not _close(terms["chromaticity_loss"], broken["chromaticity_loss"])


def test_losses_reject_mismatched_shapes():
    with pytest.raises(ValueError, match="same shape"):
        AlbedoLoss()(torch.rand(2, 3, 4, 5), torch.rand(1, 3, 4, 5))
    with pytest.raises(ValueError, match="mask"):
        NormalLoss()(torch.rand(2, 3, 4, 5), torch.rand(2, 3, 4, 5), torch.ones(2, 4, 4))
