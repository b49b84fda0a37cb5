"""Pretraining losses, centering, schedules and EMA: values against hand-written references and closed forms."""

import math

import pytest
import torch
import torch.nn.functional as F

from sapiens2_hf.pretraining.losses.centering import TeacherCentering, sinkhorn_knopp_log
from sapiens2_hf.pretraining.losses.dino_cls_loss import DinoClsLoss
from sapiens2_hf.pretraining.losses.ibot_patch_loss import IbotPatchLoss
from sapiens2_hf.pretraining.losses.koleo_loss import KoLeoLoss
from sapiens2_hf.pretraining.losses.mae_loss import MaeLoss, patchify, unpatchify
from sapiens2_hf.pretraining.ema import ema_update_
from sapiens2_hf.pretraining.schedules import cosine_schedule, ema_momentum, linear_warmup, teacher_temperature
from sapiens2_hf.pretraining import tiny_pretraining_config


def reference_sinkhorn(logits: torch.Tensor, temperature: float, iterations: int) -> torch.Tensor:
    """The textbook Sinkhorn-Knopp (SwAV / DINOv2 order of operations), on exp() directly, in float64."""
    q = torch.exp(logits.double() / temperature).T  # (prototypes, samples)
    num_prototypes, num_samples = q.shape
    q = q / q.sum()
    for _ in range(iterations):
        q = q / q.sum(dim=1, keepdim=True) / num_prototypes
        q = q / q.sum(dim=0, keepdim=True) / num_samples
    return (q * num_samples).T


def test_sinkhorn_log_space_matches_reference():
    logits = torch.randn(12, 7, generator=torch.Generator().manual_seed(0))
    ours = sinkhorn_knopp_log(logits, temperature=0.1, num_iterations=3, distributed=False)
    reference = reference_sinkhorn(logits, 0.1, 3)
    assert (ours.double() - reference).abs().max().item() < 1e-6
    # Negative control: one iteration fewer is a different result, so the comparison can fail.
    assert (sinkhorn_knopp_log(logits, 0.1, 2, distributed=False).double() - reference).abs().max().item() > 1e-3


def test_sinkhorn_marginals():
    # Converged (many iterations, mild temperature): rows sum to 1 and every prototype gets num_samples / K.
    logits = torch.randn(16, 5, generator=torch.Generator().manual_seed(1))
    targets = sinkhorn_knopp_log(logits, temperature=0.5, num_iterations=100, distributed=False)
    torch.testing.assert_close(targets.sum(dim=1), torch.ones(16), atol=1e-5, rtol=0)
    torch.testing.assert_close(targets.sum(dim=0), torch.full((5,), 16 / 5), atol=1e-4, rtol=0)


def test_sinkhorn_is_finite_on_huge_logits():
    generator = torch.Generator().manual_seed(2)
    logits = 1e4 * torch.randn(32, 8, generator=generator)
    targets = sinkhorn_knopp_log(logits, temperature=0.04, num_iterations=3, distributed=False)
    assert torch.isfinite(targets).all()
    torch.testing.assert_close(targets.sum(dim=1), torch.ones(32), atol=1e-5, rtol=0)
    # Control: the textbook version overflows on the same input.
    assert torch.isnan(reference_sinkhorn(logits.float(), 0.04, 3)).any()
    # Also in the other modes and in the losses built on them.
    for mode in ("centering", "none"):
        assert torch.isfinite(TeacherCentering(8, mode=mode)(logits, 0.04)).all()
    loss = DinoClsLoss(8)(1e4 * torch.randn(3, 16, 8, generator=generator), 1e4 * torch.randn(2, 16, 8, generator=generator), 0.04)
    assert torch.isfinite(loss)


def test_running_center_closed_form():
    centering = TeacherCentering(4, mode="centering", center_momentum=0.9)
    batch_1 = torch.tensor([[1.0, 2.0, 3.0, 4.0], [3.0, 2.0, 1.0, 0.0]])
    batch_2 = torch.tensor([[0.0, 0.0, 8.0, 0.0]])
    targets_1 = centering(batch_1, temperature=0.5)
    # Targets use the centre before the update (zeros here): DINO's order.
    torch.testing.assert_close(targets_1, torch.softmax(batch_1 / 0.5, dim=-1))
    expected = 0.1 * batch_1.mean(0, keepdim=True)
    torch.testing.assert_close(centering.center, expected)
    targets_2 = centering(batch_2, temperature=0.5)
    torch.testing.assert_close(targets_2, torch.softmax((batch_2 - expected) / 0.5, dim=-1))
    expected = 0.9 * expected + 0.1 * batch_2
    torch.testing.assert_close(centering.center, expected)
    centering.eval()
    centering(batch_1, temperature=0.5)
    torch.testing.assert_close(centering.center, expected)  # no update in eval mode


def test_centering_rejects_unknown_mode():
    with pytest.raises(ValueError, match="sinkhorn_knopp"):
        TeacherCentering(4, mode="softmax")


def test_dino_cls_loss_matches_loop():
    generator = torch.Generator().manual_seed(3)
    student = torch.randn(4, 5, 6, generator=generator)  # 2 global + 2 local views
    teacher = torch.randn(2, 5, 6, generator=generator)
    loss_fn = DinoClsLoss(6, student_temp=0.1, centering="none")
    ours = loss_fn(student, teacher, teacher_temp=0.07)
    targets = torch.softmax(teacher.double() / 0.07, dim=-1)
    log_probs = torch.log_softmax(student.double() / 0.1, dim=-1)
    total, pairs = 0.0, 0
    for s in range(4):
        for t in range(2):
            if s == t:
                continue
            total += (-(targets[t] * log_probs[s]).sum(-1)).mean()
            pairs += 1
    assert pairs == 6
    assert abs(ours.item() - (total / pairs).item()) < 1e-5
    # Control: keeping the same-view pairs changes the value.
    with_diagonal = DinoClsLoss(6, centering="none", ignore_diagonal=False)(student, teacher, 0.07)
    assert abs(with_diagonal.item() - ours.item()) > 1e-3


def test_dino_cls_loss_needs_a_pair():
    with pytest.raises(ValueError, match="local crops"):
        DinoClsLoss(6)(torch.randn(1, 3, 6), torch.randn(1, 3, 6), 0.04)


def test_ibot_patch_loss_matches_manual():
    generator = torch.Generator().manual_seed(4)
    student, teacher = torch.randn(10, 6, generator=generator), torch.randn(10, 6, generator=generator)
    ours = IbotPatchLoss(6, student_temp=0.1, centering="none")(student, teacher, 0.04)
    per_patch = -(torch.softmax(teacher / 0.04, -1) * torch.log_softmax(student / 0.1, -1)).sum(-1)
    # relative bounds (losses of about 17; 1e-6 is 8 float32 ulp there): another summation order, as with scalar
    # kernels (ATEN_CPU_CAPABILITY=default), moves the sums by an ulp or two
    assert math.isclose(ours.item(), per_patch.mean().item(), rel_tol=1e-6)
    # Per-image averaging (3 masked patches in image 0, 7 in image 1) through weights.
    weights = torch.tensor([1 / 3] * 3 + [1 / 7] * 7)
    weighted = IbotPatchLoss(6, centering="none")(student, teacher, 0.04, weights=weights)
    expected = (per_patch[:3].mean() + per_patch[3:].mean()) / 2
    assert math.isclose(weighted.item(), expected.item(), rel_tol=1e-6)
    # Control: the plain mean over patches is not the per-image average.
    assert not math.isclose(weighted.item(), per_patch.mean().item(), rel_tol=1e-6)


def test_koleo_closed_form_and_bruteforce():
    # Orthonormal vectors: every nearest-neighbour distance is sqrt(2).
    assert abs(KoLeoLoss()(torch.eye(4) * 3.0).item() - (-math.log(math.sqrt(2)))) < 1e-6
    features = torch.randn(9, 5, generator=torch.Generator().manual_seed(5))
    normalised = F.normalize(features, dim=-1)
    distances = torch.cdist(normalised, normalised) + torch.eye(9) * 10
    expected = -torch.log(distances.min(dim=1).values).mean()
    assert abs(KoLeoLoss()(features).item() - expected.item()) < 1e-5
    assert KoLeoLoss()(torch.randn(1, 5)).item() == 0.0


def test_patchify_roundtrip_and_order():
    images = torch.arange(2 * 3 * 4 * 6, dtype=torch.float32).view(2, 3, 4, 6)
    patches = patchify(images, (2, 3))
    assert patches.shape == (2, 4, 18)
    # Patch 1 is the top row, second column; its first value is pixel (0, 3) of channel 0, then channel 1.
    assert patches[0, 1, 0].item() == images[0, 0, 0, 3].item()
    assert patches[0, 1, 1].item() == images[0, 1, 0, 3].item()
    torch.testing.assert_close(unpatchify(patches, (2, 3), (2, 2)), images)


def test_mae_loss_values():
    generator = torch.Generator().manual_seed(6)
    images = torch.randn(2, 3, 32, 32, generator=generator)
    mask = torch.tensor([[0, 2, 3], [1, 2, 3]])
    loss_fn = MaeLoss(16)
    targets = loss_fn.targets(images, mask)
    assert loss_fn(targets, images, mask).item() == 0.0
    # Predicting zeros costs mean(target^2) = (n - 1) / n for unbiased per-patch normalisation (n = 768 values).
    zeros = torch.zeros_like(targets)
    assert abs(loss_fn(zeros, images, mask).item() - 767 / 768) < 1e-5
    # Only masked patches matter: patch 1 of image 0 is kept, patch 0 is masked.
    changed_kept, changed_masked = images.clone(), images.clone()
    changed_kept[0, :, :16, 16:] += 5.0
    changed_masked[0, :, :16, :16] *= -1.0
    assert loss_fn(targets, changed_kept, mask).item() == 0.0
    assert loss_fn(targets, changed_masked, mask).item() > 0.1


def test_schedules():
    assert cosine_schedule(0, 100, 0.9, 1.0) == pytest.approx(0.9)
    assert cosine_schedule(50, 100, 0.9, 1.0) == pytest.approx(0.95)
    assert cosine_schedule(100, 100, 0.9, 1.0) == 1.0
    assert linear_warmup(0, 10, 0.04, 0.07) == pytest.approx(0.04)
    assert linear_warmup(5, 10, 0.04, 0.07) == pytest.approx(0.055)
    assert linear_warmup(10, 10, 0.04, 0.07) == pytest.approx(0.07)
    config = tiny_pretraining_config()  # warm-up 10 steps, 0.04 -> 0.07; EMA 0.992 -> 1
    assert teacher_temperature(5, config) == pytest.approx(0.055)
    assert ema_momentum(0, 10, config) == pytest.approx(0.992)
    assert ema_momentum(5, 10, config) == pytest.approx(0.996)


def test_ema_update_closed_form():
    teacher = [torch.tensor([1.0, 2.0]), torch.tensor([[0.5]])]
    student = [torch.tensor([3.0, -2.0]), torch.tensor([[1.5]])]
    ema_update_(teacher, student, 0.75)
    torch.testing.assert_close(teacher[0], torch.tensor([1.5, 1.0]))
    torch.testing.assert_close(teacher[1], torch.tensor([[0.75]]))
    with pytest.raises(ValueError, match="momentum"):
        ema_update_(teacher, student, 1.5)
