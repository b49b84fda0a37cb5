"""The pretraining objectives, one per file: masked pixel reconstruction (`MaeLoss`), the DINO CLS term
(`DinoClsLoss`), the iBOT patch term (`IbotPatchLoss`) and the KoLeo regulariser (`KoLeoLoss`), plus the teacher-target
centring the two self-distillation terms share (`TeacherCentering`, `sinkhorn_knopp_log`).

Each returns a scalar; `Sapiens2ForPreTraining` names and weights the terms. The fine-tuning task losses live in
`sapiens2_hf.losses`.
"""

from .centering import CENTERING_MODES, TeacherCentering, sinkhorn_knopp_log
from .dino_cls_loss import DinoClsLoss
from .ibot_patch_loss import IbotPatchLoss
from .koleo_loss import KoLeoLoss
from .mae_loss import MaeLoss, patchify, unpatchify


__all__ = ["CENTERING_MODES", "DinoClsLoss", "IbotPatchLoss", "KoLeoLoss", "MaeLoss", "TeacherCentering", "patchify",
           "sinkhorn_knopp_log", "unpatchify"]
