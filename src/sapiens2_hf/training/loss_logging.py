"""`LossTermsLoggingMixin`: logs every loss term next to `loss`, for any `transformers.Trainer` subclass.

A trainer that mixes this in calls `record_loss_terms(terms)` once per training micro-batch (from `compute_loss`); at
the next `log` that carries `loss`, each term is logged as its mean over the micro-batches since the previous log,
averaged across processes, rounded as transformers rounds `loss`. The sums stay on the device (no host sync per
micro-batch), in float64 where the device has it (float32 on MPS), so a long logging interval adds no visible rounding.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch


class LossTermsLoggingMixin:
    """Mix in before `transformers.Trainer`: `class MyTrainer(LossTermsLoggingMixin, Trainer)`.

    Override `extra_loss_logs` to add values computed at log time (logged only with the terms).
    """

    _loss_term_sums: dict[str, torch.Tensor]
    _loss_term_count: int

    def record_loss_terms(self, terms: Mapping[str, torch.Tensor | None]) -> None:
        """Adds one micro-batch's terms (scalar tensors; `None` values are skipped) to the running sums."""
        sums = self.__dict__.setdefault("_loss_term_sums", {})
        for name, value in terms.items():
            if value is None:
                continue
            value = value.detach()
            value = value.to(torch.float32 if value.device.type == "mps" else torch.float64)
            sums[name] = sums[name] + value if name in sums else value
        self._loss_term_count = getattr(self, "_loss_term_count", 0) + 1

    def extra_loss_logs(self) -> dict[str, float]:
        """Values logged with the terms (none by default)."""
        return {}

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        count = getattr(self, "_loss_term_count", 0)
        if "loss" in logs and count:
            sums = self._loss_term_sums
            names = sorted(sums)
            means = torch.stack([sums[name].to(self.args.device) for name in names]) / count
            # Collectives need one dtype on every process; float32 is what every backend reduces.
            means = self.accelerator.reduce(means.float(), reduction="mean")
            logs.update({name: round(value, 6) for name, value in zip(names, means.tolist())})
            logs.update(self.extra_loss_logs())
            self._loss_term_sums, self._loss_term_count = {}, 0
        super().log(logs, start_time)
