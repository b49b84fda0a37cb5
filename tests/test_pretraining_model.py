"""`Sapiens2ForPreTraining`: one student pass, token removal, frozen teacher, save/load, export."""

import pytest
import torch

from sapiens2_hf import Sapiens2Model, tiny_config
from sapiens2_hf.pretraining.losses.mae_loss import MaeLoss
from sapiens2_hf.modeling import TASK_MODEL_CLASSES
from sapiens2_hf.pretraining import (
    MultiCropAugmentation,
    MultiCropCollator,
    Sapiens2ForPreTraining,
    Sapiens2PreTrainingConfig,
    tiny_pretraining_config,
)


def make_batch(config, batch_size=4, seed=0, augmentation=None):
    augmentation = augmentation or MultiCropAugmentation.tiny()
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (batch_size, 3, 80, 60), generator=generator, dtype=torch.uint8)
    collator = MultiCropCollator.from_config(config, augmentation)
    return collator([{"image": image, "seed": seed * 1000 + i} for i, image in enumerate(images)])


@pytest.fixture(scope="module")
def config():
    return tiny_pretraining_config()


@pytest.fixture
def model(config):
    torch.manual_seed(0)
    return Sapiens2ForPreTraining(config).train()


def test_total_is_the_weighted_sum_of_terms(model, config):
    outputs = model(**make_batch(config), schedule_step=4)
    terms = {name: getattr(outputs, name) for name in ("mae_loss", "cls_loss", "patch_loss", "koleo_loss")}
    assert all(value is not None and torch.isfinite(value) for value in terms.values())
    expected = terms["mae_loss"] + config.contrastive_loss_weight * (
        terms["cls_loss"] + terms["patch_loss"] + 0.1 * terms["koleo_loss"]
    )
    assert abs(outputs.loss.item() - expected.item()) < 1e-5
    assert abs(outputs.teacher_temperature.item() - (0.04 + 0.03 * 4 / 10)) < 1e-7
    # At initialisation the normalised-pixel MSE is about 1 (the variance of the targets), the cross-entropies about
    # log(32) or above.
    assert 0.5 < terms["mae_loss"].item() < 2.0
    assert terms["cls_loss"].item() > 3.0 and terms["patch_loss"].item() > 3.0
    assert 0.0 <= outputs.teacher_prototype_entropy.item() <= torch.log(torch.tensor(32.0)).item() + 1e-5


def test_reconstruction_feeds_the_mae_term(model, config):
    batch = make_batch(config)
    outputs = model(**batch)
    views = batch["pixel_values"].transpose(0, 1).flatten(0, 1)
    masks = batch["patch_mask_indices"].transpose(0, 1).flatten(0, 1)
    predictions = outputs.reconstruction.transpose(0, 1).flatten(0, 1)
    recomputed = MaeLoss(16)(predictions, views, masks)
    assert abs(recomputed.item() - outputs.mae_loss.item()) < 1e-6


def test_student_never_sees_masked_patches(model, config):
    batch = make_batch(config, batch_size=2)
    model.eval()
    reference = model(**batch).reconstruction
    masked_patch = batch["patch_mask_indices"][0, 0, 0].item()
    kept_patch = batch["patch_keep_indices"][0, 0, 0].item()
    grid_w = 48 // 16

    def perturbed(patch):
        changed = {k: v.clone() for k, v in batch.items()}
        row, col = divmod(patch, grid_w)
        changed["pixel_values"][0, 0, :, row * 16 : (row + 1) * 16, col * 16 : (col + 1) * 16] += 3.0
        return model(**changed).reconstruction

    # Token removal: the student's output does not depend on the removed patches at all ...
    assert torch.equal(perturbed(masked_patch), reference)
    # ... but does depend on the kept ones (control).
    assert (perturbed(kept_patch) - reference).abs().max().item() > 1e-4


def test_teacher_gets_no_gradient_and_stays_frozen(model, config):
    outputs = model(**make_batch(config))
    outputs.loss.backward()
    assert all(not p.requires_grad and p.grad is None for p in model.teacher.parameters())
    for module in (model.model, model.mae_decoder, model.cls_head, model.patch_head):
        grads = [p.grad for p in module.parameters() if p.requires_grad]
        assert grads and all(g is not None for g in grads)
        assert max(g.abs().max().item() for g in grads) > 0
    model.train()
    assert not model.teacher.training and model.model.training


def test_teacher_starts_as_student_and_update_is_ema(model):
    student = dict(model.model.named_parameters())
    for name, param in model.teacher.model.named_parameters():
        assert torch.equal(param, student[name])
    before = {n: p.detach().clone() for n, p in model.teacher.named_parameters()}
    with torch.no_grad():
        for param in model.cls_head.parameters():
            param.add_(1.0)
    model.update_teacher(0.9)
    for name, param in model.teacher.cls_head.named_parameters():
        expected = 0.9 * before[f"cls_head.{name}"] + 0.1 * dict(model.cls_head.named_parameters())[name]
        torch.testing.assert_close(param, expected, rtol=0, atol=1e-6)
    # The backbone, unchanged in the student, is unchanged in the teacher.
    for name, param in model.teacher.model.named_parameters():
        torch.testing.assert_close(param, before[f"model.{name}"], rtol=0, atol=1e-6)


def test_plain_mae_skips_the_teacher(config):
    mae_config = tiny_pretraining_config(contrastive_loss_weight=0.0)
    model = Sapiens2ForPreTraining(mae_config).train()
    calls = []
    model.teacher.model.register_forward_hook(lambda *args: calls.append(1))
    outputs = model(**make_batch(mae_config))
    assert calls == []
    assert outputs.cls_loss is None and outputs.patch_loss is None and outputs.teacher_prototype_entropy is None
    assert outputs.loss.item() == outputs.mae_loss.item()


def test_save_load_roundtrip(tmp_path, config):
    centred = tiny_pretraining_config(centering="centering")
    model = Sapiens2ForPreTraining(centred).train()
    batch = make_batch(centred)
    model(**batch)  # moves the running centres away from zero
    assert model.dino_cls_loss.centering.center.abs().sum().item() > 0
    model.save_pretrained(tmp_path)
    loaded = Sapiens2ForPreTraining.from_pretrained(tmp_path)
    assert isinstance(loaded.config, Sapiens2PreTrainingConfig)
    assert type(loaded.config.backbone_config).__module__.startswith("sapiens2_hf")
    assert loaded.config.centering == "centering"
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    assert all(not p.requires_grad for p in loaded.teacher.parameters())
    assert all(p.requires_grad for p in loaded.model.parameters())
    model.eval(), loaded.eval()
    assert model(**batch).loss.item() == loaded(**batch).loss.item()


def test_export_backbone_loads_in_backbone_and_task_classes(tmp_path, model):
    with torch.no_grad():
        for param in model.model.parameters():
            param.add_(0.01)  # student now differs from the teacher
    model.save_backbone(tmp_path / "student")
    model.save_backbone(tmp_path / "teacher", which="teacher")
    backbone = Sapiens2Model.from_pretrained(tmp_path / "student")
    for key, value in model.model.state_dict().items():
        assert torch.equal(backbone.state_dict()[key], value)
    teacher = Sapiens2Model.from_pretrained(tmp_path / "teacher")
    key = "embeddings.cls_token"
    assert not torch.equal(teacher.state_dict()[key], backbone.state_dict()[key])  # control: which= matters
    for task, task_class in TASK_MODEL_CLASSES.items():
        if task is None:
            continue
        task_model = task_class.from_backbone(tmp_path / "student", config=tiny_config(task))
        for key, value in model.model.state_dict().items():
            assert torch.equal(task_model.model.state_dict()[key], value), (task, key)


def test_from_backbone_starts_student_and_teacher(tmp_path, config):
    source = Sapiens2Model(tiny_config())
    source.save_pretrained(tmp_path)
    model = Sapiens2ForPreTraining.from_backbone(tmp_path, config=config)
    for key, value in source.state_dict().items():
        assert torch.equal(model.model.state_dict()[key], value)
        assert torch.equal(model.teacher.model.state_dict()[key], value)
    with pytest.raises(ValueError, match="hidden_size"):
        Sapiens2ForPreTraining.from_backbone(source, config=tiny_pretraining_config({"hidden_size": 64}))


def test_input_errors(model, config):
    batch = make_batch(config)
    broken = dict(batch, patch_mask_indices=batch["patch_keep_indices"].clone())
    with pytest.raises(ValueError, match="partition"):
        model(**broken)
    with pytest.raises(ValueError, match="num_global_crops"):
        model(**dict(batch, pixel_values=batch["pixel_values"][:, 0]))
    with pytest.raises(ValueError, match="task=None"):
        Sapiens2PreTrainingConfig(backbone_config=tiny_config("pose"))
    with pytest.raises(ValueError, match="centering"):
        tiny_pretraining_config(centering="mean")
