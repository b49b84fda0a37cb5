"""DINO self-distillation loss on the CLS token ("sparse" contrastive term of the Sapiens2 objective).

The student's prototype scores of every view are trained to predict the teacher's centred, sharpened prototype
distribution of every *other* global view (DINO, Caron et al. 2021, arXiv 2104.14294; DINOv2, Oquab et al. 2023,
arXiv 2304.07193; reference implementation facebookresearch/dinov2 `dinov2/loss/dino_clstoken_loss.py`). The
teacher centering (`TeacherCentering`) is owned by the loss, so its running centre, when used, is saved with the
model.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .centering import TeacherCentering


class DinoClsLoss(nn.Module):
    r"""Cross-entropy between teacher and student prototype distributions of the CLS token, over view pairs.

    `loss` is the mean over view pairs `(s, t)` of `mean_b(-sum_k targets[t, b, k] * log_softmax(student_logits[s, b]
    / student_temp)[k])`; with `ignore_diagonal=True` (DINO's choice, also DINOv3's for global crops) the pairs with
    `s == t` are skipped. The first `num_teacher_views` student views must be the (masked) global views the teacher
    saw, in the same order; the remaining student views are local crops.

    `num_prototypes` is the CLS head's; `student_temp` (0.1) as in DINO / DINOv2; `centering`, `center_momentum` and
    `sinkhorn_iterations` go to `TeacherCentering`.

    Example:
        >>> loss_fn = DinoClsLoss(num_prototypes=16)
        >>> loss = loss_fn(torch.randn(4, 8, 16), torch.randn(2, 8, 16), teacher_temp=0.04)
    """

    def __init__(self, num_prototypes: int, student_temp: float = 0.1, centering: str = "sinkhorn_knopp",
                 center_momentum: float = 0.9, sinkhorn_iterations: int = 3, ignore_diagonal: bool = True):
        super().__init__()
        self.student_temp = student_temp
        self.ignore_diagonal = ignore_diagonal
        self.centering = TeacherCentering(num_prototypes, centering, center_momentum, sinkhorn_iterations)

    def teacher_targets(self, teacher_logits: torch.Tensor, teacher_temp: float) -> torch.Tensor:
        """Centred target distributions (float32, no gradient) of `(num_teacher_views, batch_size, num_prototypes)`
        logits, same shape; all views are centred together, as in DINOv2."""
        num_views, batch_size, num_prototypes = teacher_logits.shape
        targets = self.centering(teacher_logits.reshape(num_views * batch_size, num_prototypes), teacher_temp)
        return targets.view(num_views, batch_size, num_prototypes)

    def cross_entropy(self, student_logits: torch.Tensor, teacher_targets: torch.Tensor) -> torch.Tensor:
        """The class docstring's mean over pairs, vectorised: `(num_student_views, batch, K)` logits and
        `(num_teacher_views, batch, K)` targets -> `()` float32."""
        num_student_views, num_teacher_views = student_logits.shape[0], teacher_targets.shape[0]
        if student_logits.shape[1:] != teacher_targets.shape[1:]:
            raise ValueError(
                f"Student logits {tuple(student_logits.shape)} and teacher targets {tuple(teacher_targets.shape)} "
                "must agree in (batch_size, num_prototypes)."
            )
        if num_student_views < num_teacher_views:
            raise ValueError(
                f"The student has {num_student_views} views but the teacher {num_teacher_views}: the student must see "
                "every global view the teacher sees (first), then the local crops."
            )
        student_log_probs = F.log_softmax(student_logits.float() / self.student_temp, dim=-1)
        # s: student view, t: teacher view, b: batch, k: prototype
        pair_losses = -torch.einsum("tbk,sbk->st", teacher_targets, student_log_probs) / student_logits.shape[1]
        keep = torch.ones_like(pair_losses, dtype=torch.bool)
        if self.ignore_diagonal:
            keep[:num_teacher_views].fill_diagonal_(False)
        if not keep.any():
            raise ValueError(
                "No (student view, teacher view) pair is left once same-view pairs are skipped: use at least two global "
                "views or some local crops, or set ignore_diagonal=False."
            )
        return pair_losses[keep].mean()

    def forward(self, student_logits: torch.Tensor, teacher_logits: torch.Tensor, teacher_temp: float) -> torch.Tensor:
        """`()` float32 mean cross-entropy over the kept view pairs of the student's `(num_student_views, batch_size,
        num_prototypes)` logits (global views first, in the teacher's order, then local crops) and the raw teacher
        logits of the global views (no gradient taken through them), at this step's `teacher_temp`."""
        return self.cross_entropy(student_logits, self.teacher_targets(teacher_logits.detach(), teacher_temp))
