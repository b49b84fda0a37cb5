"""`Sapiens2PreTrainingTrainer`: accumulation scaling, one EMA update per optimizer step, logged terms, exact resume,
and the pretraining script end to end."""

import copy
import math

import pytest
import torch
from PIL import Image
from transformers import TrainerCallback, TrainingArguments

from sapiens2_hf import Sapiens2ForPoseEstimation, Sapiens2Model, tiny_config
from sapiens2_hf.pretraining import (
    LOSS_NAMES,
    MultiCropAugmentation,
    MultiCropCollator,
    PretrainingImageDataset,
    Sapiens2ForPreTraining,
    ema_momentum,
    tiny_pretraining_config,
)
from sapiens2_hf.pretraining.toy_data import make_toy_images
from sapiens2_hf.pretraining.run import main as pretrain_main
from sapiens2_hf.pretraining.trainer import Sapiens2PreTrainingTrainer


class RecordingTrainer(Sapiens2PreTrainingTrainer):
    """Keeps every micro-batch and its outputs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded_inputs, self.recorded_outputs = [], []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True)
        if model.training:
            self.recorded_inputs.append({k: v.clone() for k, v in inputs.items()})
            self.recorded_outputs.append(outputs)
        return (loss, outputs) if return_outputs else loss


class GradientCapture(TrainerCallback):
    def __init__(self):
        self.gradients = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.gradients.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})


def training_args(tmp_path, **overrides):
    kwargs = {
        "output_dir": str(tmp_path),
        "per_device_train_batch_size": 2,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "report_to": "none",
        "disable_tqdm": True,
        "save_strategy": "no",
        "seed": 0,
        "dataloader_pin_memory": False,
        "use_cpu": True,
    }
    kwargs.update(overrides)
    return TrainingArguments(**kwargs)


def toy_dataset(num_images=4, seed=0):
    images, _ = make_toy_images(num_images, 72, 56, seed=seed)
    return PretrainingImageDataset(list(images), seed=seed)


@pytest.fixture
def config():
    return tiny_pretraining_config()


def test_accumulation_scaling_and_one_ema_update_per_step(tmp_path, config):
    torch.manual_seed(0)
    model = Sapiens2ForPreTraining(config)
    initial = copy.deepcopy(model)
    capture = GradientCapture()
    trainer = RecordingTrainer(
        model=model,
        args=training_args(tmp_path, gradient_accumulation_steps=2, max_steps=1, max_grad_norm=0.0),
        train_dataset=toy_dataset(),
        data_collator=MultiCropCollator.from_config(config, MultiCropAugmentation.tiny()),
        callbacks=[capture],
    )
    trainer.train()
    assert len(trainer.recorded_inputs) == 2 and len(capture.gradients) == 1

    # The accumulated gradient is the mean of the two micro-batch gradients.
    reference = initial.train()
    for inputs in trainer.recorded_inputs:
        (reference(**inputs, schedule_step=0).loss / 2).backward()
    expected = {n: p.grad for n, p in reference.named_parameters() if p.grad is not None}
    got = capture.gradients[0]
    assert got.keys() == expected.keys() and not any(k.startswith("teacher.") for k in got)
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-6)
    name = "mae_decoder.pixel_predictor.weight"
    assert not torch.allclose(got[name], 2 * expected[name], rtol=1e-2)  # control: an unscaled sum differs

    # Exactly one EMA update for the two micro-batches, with the momentum of step 0.
    assert trainer.ema_callback.num_updates == 1
    momentum = ema_momentum(0, 1, config)
    assert momentum == pytest.approx(0.992)
    student = dict(model.named_parameters())
    teacher_before = dict(initial.teacher.named_parameters())
    for name, teacher_param in model.teacher.named_parameters():
        once = momentum * teacher_before[name] + (1 - momentum) * student[name]
        torch.testing.assert_close(teacher_param, once, rtol=0, atol=1e-6)
    # Control: a second update (one per micro-batch) would be visible at this tolerance.
    name = "cls_head.mlp.0.weight"
    once = momentum * teacher_before[name] + (1 - momentum) * student[name]
    twice = momentum * once + (1 - momentum) * student[name]
    assert (twice - dict(model.teacher.named_parameters())[name]).abs().max().item() > 1e-6


def test_every_term_is_logged(tmp_path, config):
    torch.manual_seed(0)
    trainer = RecordingTrainer(
        model=Sapiens2ForPreTraining(config),
        args=training_args(tmp_path, gradient_accumulation_steps=2, max_steps=2),
        train_dataset=toy_dataset(),
        data_collator=MultiCropCollator.from_config(config, MultiCropAugmentation.tiny()),
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "mae_loss" in entry]
    assert len(logs) == 2
    for step, entry in enumerate(logs):
        outputs = trainer.recorded_outputs[2 * step : 2 * step + 2]
        for name in (*LOSS_NAMES, "teacher_prototype_entropy"):
            expected = sum(getattr(o, name).item() for o in outputs) / 2
            assert entry[name] == pytest.approx(expected, abs=2e-6), name
        assert entry["loss"] == pytest.approx(sum(o.loss.item() for o in outputs) / 2, rel=1e-4)
        assert entry["teacher_temperature"] == pytest.approx(0.04 + 0.003 * (step + 1))
        assert entry["ema_momentum"] == pytest.approx(ema_momentum(step, 2, config))


def test_prototypes_stay_frozen_for_the_first_steps(tmp_path):
    config = tiny_pretraining_config(freeze_prototypes_steps=1)
    torch.manual_seed(0)
    model = Sapiens2ForPreTraining(config)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = Sapiens2PreTrainingTrainer(
        model=model, args=training_args(tmp_path, max_steps=1), train_dataset=toy_dataset(),
        data_collator=MultiCropCollator.from_config(config, MultiCropAugmentation.tiny()),
    )
    trainer.train()
    after = dict(model.named_parameters())
    for name in ("cls_head.prototypes", "patch_head.prototypes"):
        assert torch.equal(after[name], before[name])
    # Control: the rest of the head did move.
    assert not torch.equal(after["cls_head.mlp.0.weight"], before["cls_head.mlp.0.weight"])


def run_with_checkpoints(output_dir, config, resume_from=None, dataset_seed=0, init_seed=0):
    torch.manual_seed(init_seed)
    trainer = Sapiens2PreTrainingTrainer(
        model=Sapiens2ForPreTraining(config),
        args=training_args(output_dir, max_steps=4, save_strategy="steps", save_steps=2),
        # 6 images, batch 2: 3 steps per epoch, so the run crosses an epoch boundary after the checkpoint.
        train_dataset=toy_dataset(num_images=6, seed=dataset_seed),
        data_collator=MultiCropCollator.from_config(config, MultiCropAugmentation.tiny()),
    )
    trainer.train(resume_from_checkpoint=resume_from)
    losses = {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}
    return trainer, losses


@pytest.mark.slow
def test_resume_continues_the_loss_curve_exactly(tmp_path):
    # Running centres make the losses' own state part of what must be restored.
    config = tiny_pretraining_config(centering="centering")
    full, full_losses = run_with_checkpoints(tmp_path / "full", config)
    checkpoint = str(tmp_path / "full" / "checkpoint-2")
    resumed, resumed_losses = run_with_checkpoints(tmp_path / "resumed", config, resume_from=checkpoint, init_seed=1)
    # The resumed history holds the checkpoint's steps 1-2 and the newly trained steps 3-4.
    assert sorted(resumed_losses) == [1, 2, 3, 4] and resumed.state.global_step == 4
    for step in (3, 4):
        assert resumed_losses[step] == full_losses[step]
    full_state, resumed_state = full.model.state_dict(), resumed.model.state_dict()
    for key, value in full_state.items():
        assert torch.equal(value, resumed_state[key]), key
    # The teacher stayed frozen and outside the optimizer through save, load and resume.
    assert all(not p.requires_grad for p in resumed.model.teacher.parameters())
    optimised = {id(p) for group in resumed.optimizer.param_groups for p in group["params"]}
    assert not optimised & {id(p) for p in resumed.model.teacher.parameters()}
    assert len(optimised) == sum(1 for n, p in resumed.model.named_parameters() if not n.startswith("teacher."))
    # Control: other augmentation seeds after the same checkpoint give another curve.
    _, other_losses = run_with_checkpoints(tmp_path / "other", config, resume_from=checkpoint, dataset_seed=5)
    assert other_losses[3] != full_losses[3]


@pytest.mark.slow
def test_pretrain_script_from_a_folder_and_a_dataset(tmp_path):
    images, _ = make_toy_images(6, 70, 52, seed=3)
    folder = tmp_path / "images"
    folder.mkdir()
    for i, image in enumerate(images):
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(folder / f"{i}.png")
    common = ["--max_steps", "2", "--per_device_train_batch_size", "3", "--report_to", "none", "--disable_tqdm", "true",
              "--use_cpu", "true", "--dataloader_pin_memory", "false", "--save_strategy", "no"]
    trainer = pretrain_main(["--image_folder", str(folder), "--output_dir", str(tmp_path / "run"), *common])
    assert trainer.state.global_step == 2
    exported = Sapiens2Model.from_pretrained(tmp_path / "run" / "backbone")
    for key, value in trainer.model.model.state_dict().items():
        assert torch.equal(exported.state_dict()[key], value)
    reloaded = Sapiens2ForPreTraining.from_pretrained(tmp_path / "run")
    assert torch.equal(reloaded.teacher.model.embeddings.cls_token, trainer.model.teacher.model.embeddings.cls_token)
    pose = Sapiens2ForPoseEstimation.from_backbone(tmp_path / "run" / "backbone", config=tiny_config("pose"))
    assert pose(torch.randn(1, 3, 64, 48)).heatmaps.shape == (1, 308, 16, 12)

    import datasets

    dataset = datasets.Dataset.from_dict({"image": [Image.open(p) for p in sorted(folder.iterdir())]})
    dataset.cast_column("image", datasets.Image()).save_to_disk(str(tmp_path / "hf_dataset"))
    trainer = pretrain_main(
        ["--dataset_name", str(tmp_path / "hf_dataset"), "--output_dir", str(tmp_path / "run_ds"),
         "--config_overrides", '{"mask_ratio": 0.75}', "--augmentation_overrides", '{"num_local_crops": 0}', *common]
    )
    assert trainer.state.global_step == 2 and trainer.model.config.mask_ratio == 0.75
    assert math.isfinite(trainer.state.log_history[-1]["train_loss"])
    with pytest.raises(ValueError, match="exactly one"):
        pretrain_main(["--output_dir", str(tmp_path / "none"), *common])
