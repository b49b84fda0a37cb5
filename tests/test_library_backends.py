"""Kept libraries in place of hand-written code, each proven equal to a straightforward reference and measured:
torchvision's NMS for the pose pipeline's person boxes, OpenCV's Turbo table for depth images. (The OKS AP backend
is compared with pycocotools in tests/test_metrics_pose.py and benchmarks/bench_metrics_pose.py.)"""

import time

import numpy as np
import pytest
import torch

from sapiens2_hf.modeling.pipeline_sapiens2_hf import _nms
from sapiens2_hf.visualization import drawing


def _reference_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> list[int]:
    """Greedy NMS written out: highest score first (ties in input order), drop a box whose IoU with a kept box is
    above the threshold. The pipeline's former pure-Python implementation."""
    order = torch.argsort(scores, descending=True, stable=True).tolist()
    areas = (boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)
    keep = []
    for i in order:
        suppressed = False
        for j in keep:
            w = (torch.minimum(boxes[i, 2], boxes[j, 2]) - torch.maximum(boxes[i, 0], boxes[j, 0])).clamp(min=0)
            h = (torch.minimum(boxes[i, 3], boxes[j, 3]) - torch.maximum(boxes[i, 1], boxes[j, 1])).clamp(min=0)
            inter = w * h
            if inter / (areas[i] + areas[j] - inter).clamp(min=1e-12) > iou_threshold:
                suppressed = True
                break
        if not suppressed:
            keep.append(i)
    return keep


def _random_boxes(generator: torch.Generator, count: int, tied_scores: bool):
    xy = torch.rand(count, 2, generator=generator) * 200
    wh = 5 + torch.rand(count, 2, generator=generator) * 80
    boxes = torch.cat([xy, xy + wh], dim=1)
    if tied_scores:  # few distinct values: many ties, whose order decides which box survives
        scores = torch.randint(0, 4, (count,), generator=generator).float() / 4
    else:
        scores = torch.rand(count, generator=generator)
    return boxes, scores


def _mismatches(nms_function, tied_scores: bool) -> tuple[int, int]:
    """(cases where `nms_function` keeps other boxes than the reference, boxes kept in all) over random cases."""
    generator = torch.Generator().manual_seed(int(tied_scores))
    mismatches = kept = 0
    for count in (2, 5, 20, 40):
        for threshold in (0.0, 0.3, 0.7):
            boxes, scores = _random_boxes(generator, count, tied_scores)
            expected = _reference_nms(boxes, scores, threshold)
            mismatches += nms_function(boxes, scores, threshold) != expected
            kept += len(expected)
    return mismatches, kept


@pytest.mark.parametrize("tied_scores", [False, True])
def test_nms_keeps_the_same_boxes_as_the_reference(tied_scores):
    mismatches, kept = _mismatches(_nms, tied_scores)
    assert mismatches == 0 and kept > 50
    # Exact duplicates with equal scores: the first in input order survives; identical boxes have IoU 1 > 0.99.
    boxes = torch.tensor([[0.0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 10, 10], [20, 20, 30, 30]])
    scores = torch.tensor([0.5, 0.9, 0.5, 0.9])
    assert _nms(boxes, scores, 0.99) == _reference_nms(boxes, scores, 0.99) == [1, 0]
    # A box touching another (IoU exactly 0) is never suppressed at threshold 0, as `>` requires.
    touching = torch.tensor([[0.0, 0, 10, 10], [10, 0, 20, 10]])
    assert _nms(touching, torch.tensor([0.9, 0.8]), 0.0) == [0, 1]
    assert _nms(torch.zeros(0, 4), torch.zeros(0), 0.3) == []


def test_nms_broken_controls_are_caught():
    """Two plausible slips must fail the comparison above: ties broken the other way (last box first), and a box
    suppressed at IoU equal to the threshold (`>=`)."""
    from torchvision.ops import nms

    def reversed_ties(boxes, scores, threshold):
        flipped = torch.flip(torch.arange(len(scores)), dims=[0])
        return [int(flipped[i]) for i in _nms(boxes[flipped], scores[flipped], threshold)]

    def at_threshold(boxes, scores, threshold):
        return _nms(boxes, scores, threshold - 1e-6)

    assert _mismatches(reversed_ties, tied_scores=True)[0] > 0
    assert _mismatches(at_threshold, tied_scores=False)[0] > 0
    assert nms(torch.tensor([[0.0, 0, 10, 10], [10, 0, 20, 10]]), torch.tensor([0.9, 0.8]), -1e-6).tolist() == [0]


def _best_time(function, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def test_nms_is_faster_than_the_python_loop():
    generator = torch.Generator().manual_seed(0)
    boxes, scores = _random_boxes(generator, 60, tied_scores=False)
    boxes = boxes / 4  # crowded: fewer suppressions would shorten the reference's inner loop
    library = _best_time(lambda: _nms(boxes, scores, 0.9))
    reference = _best_time(lambda: _reference_nms(boxes, scores, 0.9), repeats=1)
    print(f"NMS of 60 boxes: torchvision {library * 1e3:.2f} ms, Python loop {reference * 1e3:.1f} ms "
          f"(x{reference / library:.0f})")
    assert reference > 5 * library  # measured 30x-600x; the margin absorbs a busy machine


# Google's published Turbo table (Mikhailov 2019), first and last entries, as RGB in [0, 1].
TURBO_PUBLISHED = {0: (0.18995, 0.07176, 0.23217), 255: (0.47960, 0.01583, 0.01055)}


def _old_polynomial_turbo(x):
    """The hand-fitted polynomial the drawing module used before (kept here as the speed baseline)."""
    x = np.clip(x, 0.0, 1.0)[..., None]
    powers = np.concatenate([np.ones_like(x), x, x**2, x**3, x**4, x**5], axis=-1)
    coefficients = np.array([
        [0.13572138, 4.61539260, -42.66032258, 132.13108234, -152.94239396, 59.28637943],
        [0.09140261, 2.19418839, 4.84296658, -14.18503333, 4.27729857, 2.82956604],
        [0.10667330, 12.64194608, -60.58204836, 110.36276771, -89.90310912, 27.34824973],
    ])
    return (np.clip(powers @ coefficients.T, 0.0, 1.0) * 255.0).astype(np.uint8)


def test_turbo_is_the_published_table():
    levels = np.arange(256) / 255.0
    table = drawing.turbo_colours(levels)
    assert table.shape == (256, 3) and table.dtype == np.uint8
    for index, rgb in TURBO_PUBLISHED.items():
        np.testing.assert_allclose(table[index], np.asarray(rgb) * 255.0, atol=1.0)
    # The old polynomial was an approximation of the same map: close in the middle, up to 32/255 off at the ends.
    difference = np.abs(table.astype(int) - _old_polynomial_turbo(levels).astype(int))
    assert difference.max() <= 32 and difference.mean() < 8
    # Broken control: the polynomial misses the published ends by more than the tolerance used above.
    assert np.abs(_old_polynomial_turbo(np.array([0.0]))[0] - np.asarray(TURBO_PUBLISHED[0]) * 255).max() > 1.0
    assert drawing.turbo_colours(np.array([np.nan, -1.0, 2.0])).tolist() == [table[0].tolist(), table[0].tolist(),
                                                                             table[255].tolist()]


def test_depth_image_uses_the_table_near_warm_masked_black():
    rng = np.random.default_rng(0)
    depth = rng.uniform(1.0, 5.0, size=(40, 30))
    depth[0, 0] = np.nan
    mask = np.ones_like(depth, bool)
    mask[5:10, 5:10] = False
    image = np.asarray(drawing.depth_to_rgb(depth, mask))
    valid = np.isfinite(depth) & mask
    lo, hi = np.percentile(depth[valid], (1.0, 99.0))
    expected = drawing.turbo_colours(1.0 - (depth - lo) / (hi - lo))
    assert np.array_equal(image[valid], expected[valid])
    assert not image[~valid].any()
    nearest = np.unravel_index(np.nanargmin(depth), depth.shape)
    farthest = np.unravel_index(np.nanargmax(depth), depth.shape)
    assert image[nearest][0] > image[nearest][2] and image[farthest][2] > image[farthest][0]


def test_turbo_is_faster_than_the_polynomial():
    values = np.random.default_rng(0).uniform(size=(512, 384))
    library = _best_time(lambda: drawing.turbo_colours(values))
    polynomial = _best_time(lambda: _old_polynomial_turbo(values))
    print(f"Turbo of 512x384: OpenCV table {library * 1e3:.1f} ms, polynomial {polynomial * 1e3:.1f} ms "
          f"(x{polynomial / library:.1f})")
    assert polynomial > 2 * library  # measured ~10x-20x
