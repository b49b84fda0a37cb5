"""Step-indexed schedules of the student-teacher objective. Every function is pure: the step is an argument, so a
resumed run (whose Trainer restores `global_step`) gets the same values as an uninterrupted one.

"Step" always means the number of optimizer steps already taken (`TrainerState.global_step`), never a micro-batch
count, so gradient accumulation does not change a schedule.
"""

import math


def cosine_schedule(step: int, total_steps: int, start: float, end: float) -> float:
    """`end + (start - end) * (1 + cos(pi * step / total_steps)) / 2` at the 0-based `step`, and `end` from
    `total_steps` (> 0) on (DINO's cosine scheduler, evaluated per step)."""
    if total_steps <= 0:
        raise ValueError(f"`total_steps` must be positive, got {total_steps}.")
    if step >= total_steps:
        return end
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * max(step, 0) / total_steps))


def linear_warmup(step: int, warmup_steps: int, start: float, end: float) -> float:
    """`start` at step 0, rising linearly to `end` at `warmup_steps`, then constant."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return end
    return start + (end - start) * max(step, 0) / warmup_steps


def teacher_temperature(step: int, config) -> float:
    """The teacher temperature at optimizer step `step`: linear warm-up from `config.warmup_teacher_temp` to
    `config.teacher_temp` over `config.teacher_temp_warmup_steps` steps (DINO, DINOv2)."""
    return linear_warmup(step, config.teacher_temp_warmup_steps, config.warmup_teacher_temp, config.teacher_temp)


def ema_momentum(step: int, total_steps: int, config) -> float:
    """The EMA momentum of the teacher update that follows optimizer step `step` (0-based): cosine from
    `config.ema_momentum` to `config.ema_momentum_end` over `total_steps` (DINO, DINOv2)."""
    return cosine_schedule(step, total_steps, config.ema_momentum, config.ema_momentum_end)
