"""`LossTermsLoggingMixin`, the per-term loss logging both trainers share (fine-tuning and pretraining)."""

from types import SimpleNamespace

import pytest
import torch
from transformers import Trainer

from sapiens2_hf.pretraining.trainer import Sapiens2PreTrainingTrainer
from sapiens2_hf.training.loss_logging import LossTermsLoggingMixin
from sapiens2_hf.training.trainer import Sapiens2Trainer


class _RecordingBase:
    """Stands in for `transformers.Trainer`: records what reaches `log`; `reduce` averages over two fake processes
    whose values are this process's and twice this process's."""

    def __init__(self):
        self.logged, self.reduced = [], []
        self.args = SimpleNamespace(device=torch.device("cpu"))

        def reduce(tensor, reduction):
            self.reduced.append((tensor.dtype, reduction))
            return (tensor + 2 * tensor) / 2

        self.accelerator = SimpleNamespace(reduce=reduce)

    def log(self, logs, start_time=None):
        self.logged.append(dict(logs))


class _Trainer(LossTermsLoggingMixin, _RecordingBase):
    def extra_loss_logs(self):
        return {"extra": 0.5}


def test_terms_are_micro_batch_means_averaged_over_processes():
    trainer = _Trainer()
    trainer.record_loss_terms({"a_loss": torch.tensor(1.0), "b_loss": None})
    trainer.record_loss_terms({"a_loss": torch.tensor(2.0), "b_loss": torch.tensor(4.0)})
    trainer.log({"eval_loss": 9.0})  # not a training log: the terms wait for the next one
    trainer.log({"loss": 3.0})
    # mean over the 2 micro-batches (a term missing from one counts as 0 there), then the mean over processes (x1.5)
    assert trainer.logged[-1] == {"loss": 3.0, "a_loss": 2.25, "b_loss": 3.0, "extra": 0.5}
    assert trainer.reduced == [(torch.float32, "mean")]
    trainer.log({"loss": 1.0})  # nothing recorded since: no terms, no extras
    assert trainer.logged[-1] == {"loss": 1.0}
    # Control: without the mixin the same calls log the total loss only.
    plain = _RecordingBase()
    plain.log({"loss": 3.0})
    assert plain.logged[-1] == {"loss": 3.0}


def test_sums_keep_float64_where_the_device_has_it():
    trainer = _Trainer()
    for _ in range(4):
        trainer.record_loss_terms({"a_loss": torch.tensor(0.1, dtype=torch.float32)})
    sums = trainer._loss_term_sums["a_loss"]
    assert sums.dtype == torch.float64 and sums.item() == 4 * float(torch.tensor(0.1, dtype=torch.float32))


@pytest.mark.parametrize("trainer_class", [Sapiens2Trainer, Sapiens2PreTrainingTrainer])
def test_both_trainers_use_the_mixin(trainer_class):
    mro = trainer_class.__mro__
    assert LossTermsLoggingMixin in mro and mro.index(LossTermsLoggingMixin) < mro.index(Trainer)
    assert "log" not in trainer_class.__dict__  # one implementation of the per-term logging
