"""Teacher centering for self-distillation: Sinkhorn-Knopp in log space, a running centre, or none.

The teacher of a DINO-style objective must be kept from collapsing onto one prototype (or onto the uniform
distribution); `TeacherCentering(mode=...)` picks the way:

- `"sinkhorn_knopp"` (SwAV, Caron et al. 2020; the DINOv2/DINOv3 default): a few Sinkhorn-Knopp iterations make the
  batch's assignment doubly stochastic (rows sum to 1, every prototype gets the same mass). Written once, in log
  space, for the CLS and the patch objectives: the textbook version exponentiates `logits / temperature` first and
  overflows once a logit exceeds about `88 * temperature` (3.5 at temperature 0.04).
- `"centering"` (DINO, Caron et al. 2021): subtract an EMA of the teacher logits before the sharpened softmax; the
  centre is a persistent buffer, so it survives `save_pretrained` / resume.
- `"none"`: a plain sharpened softmax. It collapses; it is the control of the collapse test.

Reductions over samples are summed across `torch.distributed` processes when it is initialised, so a sharded batch
gets the same targets as one big batch.
"""

import math

import torch
import torch.distributed as dist
from torch import nn


CENTERING_MODES = ("sinkhorn_knopp", "centering", "none")


def _is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _distributed_logsumexp_over_samples(log_values: torch.Tensor, distributed: bool) -> torch.Tensor:
    """`logsumexp` over the samples of `(num_samples, num_prototypes)` -> `(1, num_prototypes)`, across processes
    when `distributed`."""
    if not distributed:
        return torch.logsumexp(log_values, dim=0, keepdim=True)
    maximum = log_values.amax(dim=0, keepdim=True)
    dist.all_reduce(maximum, op=dist.ReduceOp.MAX)
    # A prototype whose every logit is -inf would give inf - inf; keep its maximum finite.
    maximum = torch.where(torch.isfinite(maximum), maximum, torch.zeros_like(maximum))
    summed = torch.exp(log_values - maximum).sum(dim=0, keepdim=True)
    dist.all_reduce(summed)
    return maximum + torch.log(summed)


@torch.no_grad()
def sinkhorn_knopp_log(
    teacher_logits: torch.Tensor, temperature: float, num_iterations: int = 3, distributed: bool | None = None
) -> torch.Tensor:
    r"""Sinkhorn-Knopp normalisation of teacher logits, computed in log space.

    Starting from `Q = exp(logits / temperature)`, each iteration first rescales every prototype (column) to total
    mass `1 / num_prototypes`, then every sample (row) to mass `1 / num_samples`; the result is multiplied by
    `num_samples` so that each row is a probability distribution. This is the same sequence of operations as the
    DINOv2 / SwAV implementation (which works on `exp` directly), but every step is a subtraction of a `logsumexp`,
    so logits of any magnitude (e.g. 1e4) give finite results.

    `teacher_logits` `(num_samples, num_prototypes)`, any float dtype, are computed in float32; `num_iterations` (3)
    as in SwAV and DINOv2; `distributed` (default: `torch.distributed` initialised with several processes) sums over
    the samples of all processes. Returns `(num_samples, num_prototypes)` float32: rows sum to 1, and over all samples
    (of all processes) every prototype receives the same total mass, `num_samples / num_prototypes`.
    """
    if temperature <= 0:
        raise ValueError(f"The teacher temperature must be positive, got {temperature}.")
    if teacher_logits.ndim != 2:
        raise ValueError(
            f"`teacher_logits` must have shape (num_samples, num_prototypes), got {tuple(teacher_logits.shape)}."
        )
    distributed = _is_distributed() if distributed is None else distributed
    log_q = teacher_logits.float() / temperature  # (num_samples, num_prototypes)
    num_prototypes = log_q.shape[1]
    num_samples = torch.tensor(float(log_q.shape[0]), device=log_q.device)
    if distributed:
        dist.all_reduce(num_samples)
    log_num_samples = torch.log(num_samples)
    log_num_prototypes = math.log(num_prototypes)
    for _ in range(num_iterations):
        log_q = log_q - _distributed_logsumexp_over_samples(log_q, distributed) - log_num_prototypes
        log_q = log_q - torch.logsumexp(log_q, dim=1, keepdim=True) - log_num_samples
    return torch.exp(log_q + log_num_samples)


class TeacherCentering(nn.Module):
    """Turns teacher logits into centred, sharpened target distributions (one of `CENTERING_MODES`).

    Attributes:
        center (`torch.Tensor` of shape `(1, num_prototypes)`, float32): the running centre (persistent buffer,
            starts at zero as in DINO; only read and updated in `"centering"` mode, and only updated in training mode).

    `num_prototypes` is the logits' last dim; `center_momentum` (0.9) is DINO's, `sinkhorn_iterations` (3) DINOv2's.

    Example:
        >>> centering = TeacherCentering(num_prototypes=16)
        >>> targets = centering(torch.randn(8, 16), temperature=0.04)  # (8, 16), rows sum to 1
    """

    center: torch.Tensor

    def __init__(self, num_prototypes: int, mode: str = "sinkhorn_knopp", center_momentum: float = 0.9,
                 sinkhorn_iterations: int = 3):
        super().__init__()
        if mode not in CENTERING_MODES:
            raise ValueError(f"Unknown centering mode {mode!r}; choose one of {CENTERING_MODES}.")
        if not 0.0 <= center_momentum < 1.0:
            raise ValueError(f"`center_momentum` must be in [0, 1), got {center_momentum}.")
        self.mode = mode
        self.center_momentum = center_momentum
        self.sinkhorn_iterations = sinkhorn_iterations
        self.register_buffer("center", torch.zeros(1, num_prototypes), persistent=True)

    @torch.no_grad()
    def update_center(self, teacher_logits: torch.Tensor) -> None:
        """`center <- momentum * center + (1 - momentum) * mean(teacher_logits)`, the mean over the samples
        `(num_samples, num_prototypes)` of all processes."""
        batch_sum = teacher_logits.float().sum(dim=0, keepdim=True)
        count = torch.tensor(float(teacher_logits.shape[0]), device=batch_sum.device)
        if _is_distributed():
            dist.all_reduce(batch_sum)
            dist.all_reduce(count)
        batch_center = batch_sum / count
        self.center.mul_(self.center_momentum).add_(batch_center.to(self.center.dtype), alpha=1 - self.center_momentum)

    @torch.no_grad()
    def forward(self, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
        """Raw `(num_samples, num_prototypes)` teacher logits -> float32 targets of that shape, rows summing to 1. In
        `"centering"` mode and training mode, the centre is updated after the targets are computed (DINO's order)."""
        if self.mode == "sinkhorn_knopp":
            return sinkhorn_knopp_log(teacher_logits, temperature, self.sinkhorn_iterations)
        logits = teacher_logits.float()
        if self.mode == "none":
            return torch.softmax(logits / temperature, dim=-1)
        targets = torch.softmax((logits - self.center) / temperature, dim=-1)
        if self.training:
            self.update_center(logits)
        return targets

    def extra_repr(self) -> str:
        return f"num_prototypes={self.center.shape[1]}, mode={self.mode!r}"
