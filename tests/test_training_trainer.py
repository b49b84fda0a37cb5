"""Sapiens2Trainer: official losses (never the stock pose loss), per-term logging, gradient accumulation, layer-wise
LR decay, the official schedule, freezing, exact resume and bounded-memory evaluation."""

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import TrainingArguments

import sapiens2_hf
from sapiens2_hf.data.datasets import Sapiens2TaskDataset
from sapiens2_hf.data.dense import NormalTransform, SegTransform
from sapiens2_hf.data.pose import PoseTransform
from sapiens2_hf.losses import PoseHeatmapLoss
from sapiens2_hf.metrics import NormalMetric, SegmentationMetric
from sapiens2_hf.training import Sapiens2Trainer, freeze_backbone, layer_id, official_schedule, parameter_groups
from toy_records import toy_normal_records, toy_pose_records, toy_seg_records


NO_AUG_POSE = {k: 0.0 for k in PoseTransform.DEFAULT_PROBABILITIES}


pytestmark = pytest.mark.usefixtures("one_thread")


def _args(tmp_path, **overrides):
    kwargs = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, per_device_eval_batch_size=4, max_steps=1,
                  learning_rate=0.05, optim="sgd", max_grad_norm=0.0, weight_decay=0.0, lr_scheduler_type="constant",
                  logging_steps=1, report_to=[], batch_eval_metrics=True, use_cpu=True, save_strategy="no",
                  disable_tqdm=True, seed=0, dataloader_num_workers=0)
    kwargs.update(overrides)
    return TrainingArguments(**kwargs)


def _pose_model(seed=0):
    torch.manual_seed(seed)
    return sapiens2_hf.Sapiens2ForPoseEstimation(sapiens2_hf.tiny_config("pose"))


def _pose_data(count=8, train=True):
    transform = PoseTransform((64, 48), train=train, augment_probabilities=NO_AUG_POSE if train else None)
    return Sapiens2TaskDataset(toy_pose_records(count, seed=1), transform, seed=0)


def test_gradient_accumulation_2x2_equals_batch_4(tmp_path):
    results = {}
    for name, batch, accumulation, scaled in (("big", 4, 1, False), ("accumulated", 2, 2, False), ("broken", 2, 2, True)):
        model = _pose_model()
        trainer = Sapiens2Trainer(model=model, args=_args(tmp_path / name, per_device_train_batch_size=batch,
                                                          gradient_accumulation_steps=accumulation),
                                  train_dataset=_pose_data(), task="pose")
        if scaled:
            trainer.loss_is_scaled_for_ga = True  # transformers' assumption for custom losses: the bug to avoid
        trainer.train()
        results[name] = ({k: v.detach().clone() for k, v in model.state_dict().items()}, trainer.state.log_history[0]["loss"])
    big, accumulated, broken = results["big"], results["accumulated"], results["broken"]
    assert accumulated[1] == pytest.approx(big[1], rel=1e-5)
    for key in big[0]:
        torch.testing.assert_close(accumulated[0][key], big[0][key], atol=1e-6, rtol=1e-5)
    # Broken control: with the loss taken as already normalised, the update (and the logged loss) double.
    assert broken[1] == pytest.approx(2 * big[1], rel=1e-5)
    delta_big = (big[0]["decode_head.predictor.bias"] - _pose_model().state_dict()["decode_head.predictor.bias"]).abs().sum()
    delta_broken = (broken[0]["decode_head.predictor.bias"] - _pose_model().state_dict()["decode_head.predictor.bias"]).abs().sum()
    assert float(delta_broken) == pytest.approx(2 * float(delta_big), rel=1e-4)


def test_pose_loss_is_the_official_one_and_terms_are_logged(tmp_path):
    model = _pose_model()
    dataset = _pose_data(4)
    trainer = Sapiens2Trainer(model=model, args=_args(tmp_path, learning_rate=0.0), train_dataset=dataset, task="pose")
    batch = trainer.data_collator([dataset[i] for i in range(4)])
    with torch.no_grad():
        loss = trainer.compute_loss(model.eval(), batch)
        heatmaps = model(pixel_values=batch["pixel_values"]).heatmaps
    official, _ = PoseHeatmapLoss()(heatmaps, batch["labels"], batch["label_weights"])
    torch.testing.assert_close(loss, official)
    # transformers' stock pose loss (F.mse_loss with weights, no x10) is a different number ...
    weights = batch["label_weights"][:, :, None, None].expand_as(heatmaps)
    stock = F.mse_loss(heatmaps, batch["labels"], weight=weights)
    assert not math.isclose(float(loss), float(stock), rel_tol=1e-3)
    # ... and the model's own loss from the same targets (what transformers' stock Trainer trains with) is the
    # official one too.
    with torch.no_grad():
        own = model(pixel_values=batch["pixel_values"], labels=batch["labels"], label_weights=batch["label_weights"])
    torch.testing.assert_close(own.loss, official)
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["keypoint_mse_loss"] == pytest.approx(log["loss"], rel=1e-4)


def test_seg_terms_sum_to_the_logged_loss(tmp_path):
    torch.manual_seed(0)
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg", image_size=[32, 32]))
    probabilities = {k: 0.0 for k in SegTransform.DEFAULT_PROBABILITIES}
    dataset = Sapiens2TaskDataset(toy_seg_records(8), SegTransform((32, 32), augment_probabilities=probabilities))
    trainer = Sapiens2Trainer(model=model, args=_args(tmp_path, max_steps=2, logging_steps=2), train_dataset=dataset,
                              task="seg")
    trainer.train()
    log = trainer.state.log_history[0]
    assert {"cross_entropy_loss", "dice_loss"} <= set(log)
    assert log["cross_entropy_loss"] + log["dice_loss"] == pytest.approx(log["loss"], rel=1e-4)


def test_layer_decay_groups_follow_the_official_rule():
    model = _pose_model()
    groups = parameter_groups(model, learning_rate=1.0, weight_decay=0.1, layer_decay_rate=0.8, num_layers=2)
    by_name = {name: (g["lr"], g["weight_decay"]) for g in groups for name in g["param_names"]}
    assert by_name["model.embeddings.cls_token"] == (pytest.approx(0.8**3), 0.1)  # 3-D tokens are decayed
    assert by_name["model.embeddings.patch_embeddings.bias"] == (pytest.approx(0.8**3), 0.0)
    assert by_name["model.model.layer.0.attention.q_proj.weight"] == (pytest.approx(0.8**2), 0.1)
    assert by_name["model.model.layer.1.norm1.weight"] == (pytest.approx(0.8), 0.0)
    assert by_name["model.norm.weight"] == (pytest.approx(1.0), 0.0)
    assert by_name["decode_head.predictor.weight"] == (pytest.approx(1.0), 0.1)
    assert layer_id("base_model.model.model.model.layer.1.attention.q_proj.lora_A.default.weight", 2) == 2
    # No decay: one group per (lr, wd), all at the base rate.
    flat = parameter_groups(model, 1.0, 0.1)
    assert {g["lr"] for g in flat} == {1.0} and len(flat) == 2


def test_official_schedule_values():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = official_schedule(optimizer, num_training_steps=20, warmup_steps=5)
    lrs = []
    for _ in range(21):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(1e-3) and lrs[5] == pytest.approx(1.0) and lrs[20] == pytest.approx(0.0)
    assert lrs[2] == pytest.approx(1e-3 + (1 - 1e-3) * 2 / 5) and lrs[10] == pytest.approx(1 - 5 / 15)


def test_freeze_backbone_stages():
    model = _pose_model()
    frozen = freeze_backbone(model, num_frozen_layers=1)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert frozen > 0 and "model.embeddings.cls_token" not in trainable
    assert not any(".layer.0." in n for n in trainable) and any(".layer.1." in n for n in trainable)
    freeze_backbone(model)
    assert {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad} == {"decode_head"}


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    common = dict(max_steps=6, learning_rate=1e-3, optim="adamw_torch", lr_scheduler_type="linear",
                  per_device_train_batch_size=2, weight_decay=0.1, max_grad_norm=1.0)
    full = Sapiens2Trainer(model=_pose_model(), args=_args(tmp_path / "full", **common),
                           train_dataset=Sapiens2TaskDataset(toy_pose_records(6, seed=1), PoseTransform((64, 48))),
                           task="pose", layer_decay_rate=0.8, official_schedule=True)
    full.train()
    losses_full = [h["loss"] for h in full.state.log_history if "loss" in h]
    part = Sapiens2Trainer(model=_pose_model(), args=_args(tmp_path / "part", save_strategy="steps", save_steps=3, **common),
                           train_dataset=Sapiens2TaskDataset(toy_pose_records(6, seed=1), PoseTransform((64, 48))),
                           task="pose", layer_decay_rate=0.8, official_schedule=True)
    part.train()
    resumed = Sapiens2Trainer(model=_pose_model(seed=1), args=_args(tmp_path / "part", **common),
                              train_dataset=Sapiens2TaskDataset(toy_pose_records(6, seed=1), PoseTransform((64, 48))),
                              task="pose", layer_decay_rate=0.8, official_schedule=True)
    resumed.train(resume_from_checkpoint=str(tmp_path / "part" / "checkpoint-3"))
    losses_resumed = [h["loss"] for h in resumed.state.log_history if "loss" in h]
    assert len(losses_full) == 6 and losses_resumed[-3:] == pytest.approx(losses_full[3:], rel=1e-6)
    for key, value in full.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[key], value)


def test_evaluation_is_streamed_and_equals_whole_dataset_metrics(tmp_path):
    torch.manual_seed(0)
    model = sapiens2_hf.Sapiens2ForNormalEstimation(sapiens2_hf.tiny_config("normal", image_size=[32, 32])).eval()
    dataset = Sapiens2TaskDataset(toy_normal_records(10, seed=3), NormalTransform((32, 32), train=False))
    trainer = Sapiens2Trainer(model=model, args=_args(tmp_path, per_device_eval_batch_size=3), eval_dataset=dataset,
                              task="normal")
    metrics = trainer.evaluate()
    batch = trainer.data_collator([dataset[i] for i in range(len(dataset))])
    with torch.no_grad():
        normals = model(pixel_values=batch["pixel_values"]).normals
    reference = NormalMetric()
    reference.update(normals, batch["labels"], batch["mask"])
    for name, value in reference.compute().items():
        assert metrics[f"eval_{name}"] == pytest.approx(value, rel=1e-5, abs=1e-6)
    # What each batch hands to the metric is fixed-size: (batch, 3 + thresholds + 360 histogram bins).
    loss, statistics, _ = trainer.prediction_step(model, trainer.data_collator([dataset[i] for i in range(3)]), False)
    assert statistics["normal"].shape == (3, 3 + 4 + 360)

    seg_model = sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg", image_size=[32, 32])).eval()
    seg_data = Sapiens2TaskDataset(toy_seg_records(5, seed=4), SegTransform((32, 32), train=False))
    seg_metrics = Sapiens2Trainer(model=seg_model, args=_args(tmp_path / "seg", per_device_eval_batch_size=2),
                                  eval_dataset=seg_data, task="seg").evaluate()
    batch = trainer.data_collator([seg_data[i] for i in range(5)])
    with torch.no_grad():
        logits = seg_model(pixel_values=batch["pixel_values"]).logits
    seg_reference = SegmentationMetric()
    seg_reference.update(logits, batch["labels"])
    assert seg_metrics["eval_miou"] == pytest.approx(seg_reference.compute()["miou"])


def test_pose_evaluation_reports_oks_and_pck(tmp_path):
    trainer = Sapiens2Trainer(model=_pose_model().eval(), args=_args(tmp_path), eval_dataset=_pose_data(6, train=False),
                              task="pose")
    metrics = trainer.evaluate()
    assert {"eval_acc_pose", "eval_pck_0_1", "eval_oks_ap", "eval_oks_ar"} <= set(metrics)
    assert 0.0 <= metrics["eval_pck_0_2"] <= 1.0


def test_trainer_requires_batch_eval_metrics(tmp_path):
    with pytest.raises(ValueError, match="batch_eval_metrics"):
        Sapiens2Trainer(model=_pose_model(), args=_args(tmp_path, batch_eval_metrics=False), task="pose")


def test_trainer_writes_the_sapiens2_model_card(tmp_path):
    """`push_to_hub` uploads `output_dir`; the card it writes there is ours, with the last evaluation metrics."""
    from huggingface_hub import ModelCard
    from transformers import TrainingArguments

    import sapiens2_hf
    from sapiens2_hf.training import Sapiens2Trainer

    model = sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg"))
    args = TrainingArguments(str(tmp_path), report_to=[], use_cpu=True, batch_eval_metrics=True, hub_model_id="me/seg")
    trainer = Sapiens2Trainer(model=model, args=args, task="seg")
    trainer.state.log_history.append({"eval_miou": 12.5, "eval_loss": 1.0, "step": 3})
    trainer.create_model_card(dataset="synthetic humans")
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.pipeline_tag == "image-segmentation" and card.data.datasets == ["synthetic humans"]
    assert [(r.metric_type, r.metric_value) for r in card.data.eval_results] == [("miou", 12.5)]
    assert "Background" in card.text
