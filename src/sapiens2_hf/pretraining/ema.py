"""Exponential moving average of the student into the teacher.

The update is elementwise, so it works unchanged on the local shards of FSDP2 (`fully_shard`) parameters provided
the student and teacher modules are sharded the same way (see docs/pretraining.md for what was tested).
"""

import torch
from torch import nn


def paired_parameters(student: nn.Module, teacher: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The parameters of `student` and `teacher`, paired by name.

    Raises:
        ValueError: if the two modules do not have the same parameter names and shapes.
    """
    student_params = dict(student.named_parameters())
    teacher_params = dict(teacher.named_parameters())
    if student_params.keys() != teacher_params.keys():
        missing = sorted(student_params.keys() ^ teacher_params.keys())
        raise ValueError(f"Student and teacher differ in their parameters: {missing[:10]}.")
    names = sorted(student_params)
    for name in names:
        if student_params[name].shape != teacher_params[name].shape:
            raise ValueError(
                f"Student and teacher parameter {name} have shapes {tuple(student_params[name].shape)} and "
                f"{tuple(teacher_params[name].shape)}."
            )
    return [student_params[n] for n in names], [teacher_params[n] for n in names]


@torch.no_grad()
def ema_update_(teacher_params: list[torch.Tensor], student_params: list[torch.Tensor], momentum: float) -> None:
    """In place: `teacher <- momentum * teacher + (1 - momentum) * student`, with foreach kernels (as DINOv2/v3).

    Keep the teacher in float32: with a momentum near 1, bfloat16 rounds most updates away.
    """
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"The EMA momentum must be in [0, 1], got {momentum}.")
    if momentum == 1.0:
        return
    torch._foreach_mul_(teacher_params, momentum)
    torch._foreach_add_(teacher_params, [p.detach() for p in student_params], alpha=1.0 - momentum)
