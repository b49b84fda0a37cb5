"""iBOT-style masked patch self-distillation ("dense" contrastive term of the Sapiens2 objective).

At every masked patch position, the student's prediction is trained to match the teacher's centred, sharpened
prototype distribution of the unmasked patch (iBOT, Zhou et al. 2021, arXiv 2111.07832; DINOv2 reference
implementation facebookresearch/dinov2 `dinov2/loss/ibot_patch_loss.py`). In `Sapiens2ForPreTraining` the student
never sees the masked patches (they are removed before the backbone); its predictions for them come from the MAE
decoder, as in data2vec 2.0 (Baevski et al. 2022, arXiv 2212.07525).
"""

import torch
import torch.nn.functional as F
from torch import nn

from .centering import TeacherCentering


class IbotPatchLoss(nn.Module):
    r"""Cross-entropy between teacher and student prototype distributions at masked patch positions.

    `loss = mean_i ( -sum_k targets[i, k] * log_softmax(student_logits[i] / student_temp)[k] )`, the mean over all
    masked patches of the batch. iBOT/DINOv2 first average within each image and then over images; with the same
    number of masked patches in every image (as here: the collator masks a fixed ratio), the two are equal. Pass
    `weights` to reproduce the per-image averaging with ragged masks.

    `num_prototypes` is the patch head's; `student_temp` (0.1) as in iBOT / DINOv2; `centering`, `center_momentum` and
    `sinkhorn_iterations` go to `TeacherCentering`.

    Example:
        >>> loss_fn = IbotPatchLoss(num_prototypes=16)
        >>> loss = loss_fn(torch.randn(30, 16), torch.randn(30, 16), teacher_temp=0.04)
    """

    def __init__(self, num_prototypes: int, student_temp: float = 0.1, centering: str = "sinkhorn_knopp",
                 center_momentum: float = 0.9, sinkhorn_iterations: int = 3):
        super().__init__()
        self.student_temp = student_temp
        self.centering = TeacherCentering(num_prototypes, centering, center_momentum, sinkhorn_iterations)

    def forward(self, student_logits: torch.Tensor, teacher_logits: torch.Tensor, teacher_temp: float,
                weights: torch.Tensor | None = None) -> torch.Tensor:
        """`()` float32 loss of the student's `(num_masked_patches, num_prototypes)` logits at the masked positions of
        all images of the batch against the raw teacher logits of the same patches, same order (no gradient taken
        through them; all rows centred together), at this step's `teacher_temp`. `weights` `(num_masked_patches,)`,
        summing to the number of images (e.g. `1 / num_masked_in_its_image`), replace the plain mean by a weighted
        sum divided by the number of images."""
        if student_logits.shape != teacher_logits.shape or student_logits.ndim != 2:
            raise ValueError(
                f"Student logits {tuple(student_logits.shape)} and teacher logits {tuple(teacher_logits.shape)} must "
                "both have shape (num_masked_patches, num_prototypes)."
            )
        targets = self.centering(teacher_logits.detach(), teacher_temp)  # (num_masked_patches, num_prototypes)
        per_patch = -(targets * F.log_softmax(student_logits.float() / self.student_temp, dim=-1)).sum(dim=-1)
        if weights is None:
            return per_patch.mean()
        return (per_patch * weights).sum() / weights.sum()
