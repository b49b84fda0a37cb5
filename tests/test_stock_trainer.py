"""transformers' stock `Trainer` (no subclass, no `compute_loss_func`) trains every task model: the models take the
task targets as `forward` arguments and return the official task loss as `loss`, as transformers' own models do.

Each run trains a tiny model for `STEPS` AdamW steps on synthetic data (tests/task_targets.py: one smooth target per
task, random inputs) and measures the loss of the whole data set, collated, with the model in eval mode before and
after, so the figures do not depend on which samples a logged step saw. Measured (torch 2.14.1, transformers 5.24,
CPU, one thread), loss after / before: pose 0.20, seg 0.62, normal 0.08, pointmap 0.23, albedo 0.32, matting 0.28;
the test asserts < 0.8 for each. Broken control: the same run at learning rate 0 leaves the loss unchanged.
"""

import pytest
import torch
from task_targets import TARGET_KEYS, pixel_values, task_targets
from transformers import Trainer, TrainingArguments

import sapiens2_hf


pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("one_thread")]

TASKS = list(TARGET_KEYS)
NUM_SAMPLES = 4
BATCH_SIZE = 2
STEPS = 40
LEARNING_RATE = 1e-2


class SyntheticTaskDataset(torch.utils.data.Dataset):
    """`NUM_SAMPLES` dicts of `pixel_values` `(3, 64, 48)` and the task's targets (`task_targets`, one per sample)."""

    def __init__(self, task: str):
        self.pixel_values = pixel_values(NUM_SAMPLES, seed=1)
        self.targets = task_targets(task, NUM_SAMPLES)

    def __len__(self):
        return NUM_SAMPLES

    def __getitem__(self, index):
        return {"pixel_values": self.pixel_values[index], **{k: v[index] for k, v in self.targets.items()}}


def _arguments(tmp_path, **overrides):
    arguments = dict(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=STEPS, learning_rate=LEARNING_RATE,
        per_device_train_batch_size=BATCH_SIZE, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        logging_steps=1, save_strategy="no", disable_tqdm=True, seed=0, dataloader_num_workers=0,
    )
    return TrainingArguments(**{**arguments, **overrides})


def _model(task):
    torch.manual_seed(0)
    return sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task))


def _eval_loss(model, dataset) -> float:
    batch = {key: torch.stack([dataset[i][key] for i in range(len(dataset))]) for key in dataset[0]}
    model.eval()
    with torch.no_grad():
        return float(model(**batch).loss)


def _train(task, tmp_path, **argument_overrides):
    """(loss before, loss after) of a stock-Trainer run; the run's own logged losses are all finite."""
    model, dataset = _model(task), SyntheticTaskDataset(task)
    before = _eval_loss(model, dataset)
    trainer = Trainer(model=model, args=_arguments(tmp_path, **argument_overrides), train_dataset=dataset)
    assert trainer.model_accepts_loss_kwargs is False  # the losses are batch means: no `num_items_in_batch`
    trainer.train()
    logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == STEPS and all(torch.isfinite(torch.tensor(logged)))
    return before, _eval_loss(model, dataset)


@pytest.mark.parametrize("task", TASKS)
def test_stock_trainer_lowers_the_task_loss(task, tmp_path):
    before, after = _train(task, tmp_path)
    assert after < 0.8 * before, (task, before, after)


@pytest.mark.parametrize("task", ["pose", "pointmap"])
def test_broken_control_no_learning_rate_no_progress(task, tmp_path):
    before, after = _train(task, tmp_path, learning_rate=0.0)
    assert after == pytest.approx(before, rel=1e-6), (task, before, after)


def _first_logged_loss(tmp_path, **argument_overrides) -> float:
    trainer = Trainer(model=_model("pose"), args=_arguments(tmp_path, max_steps=1, **argument_overrides),
                      train_dataset=SyntheticTaskDataset("pose"))
    trainer.train()
    return trainer.state.log_history[0]["loss"]


def test_gradient_accumulation_averages_the_micro_batches(tmp_path, monkeypatch):
    """Two accumulated micro-batches of one sample log (and step with) the loss of one batch of both: the models set
    `accepts_loss_kwargs = False`, so the Trainer divides each micro-batch loss by the accumulation steps."""
    whole = _first_logged_loss(tmp_path, per_device_train_batch_size=2)
    accumulated = _first_logged_loss(tmp_path, per_device_train_batch_size=1, gradient_accumulation_steps=2)
    assert accumulated == pytest.approx(whole, abs=2e-4)  # the logged loss is rounded to 4 decimals
    # Broken control: a model that claims to normalise by `num_items_in_batch` itself gets the sum, twice the loss.
    monkeypatch.setattr(sapiens2_hf.Sapiens2ForPoseEstimation, "accepts_loss_kwargs", True)
    broken = _first_logged_loss(tmp_path, per_device_train_batch_size=1, gradient_accumulation_steps=2)
    assert broken == pytest.approx(2 * whole, abs=4e-4)
