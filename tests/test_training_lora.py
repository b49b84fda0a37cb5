"""LoRA via peft: target modules, heads in full, adapter save/load, merge_and_unload parity, several task adapters
on one frozen backbone, and a LoRA training step that leaves the backbone untouched."""

import pytest
import torch
from peft import PeftModel
from transformers import TrainingArguments

import sapiens2_hf
from sapiens2_hf.data.datasets import Sapiens2TaskDataset
from sapiens2_hf.data.pose import PoseTransform
from sapiens2_hf.training import Sapiens2Trainer, apply_lora, load_task_adapters, save_lora_adapter
from sapiens2_hf.training.lora import set_lora_adapter


pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("one_thread")]


def _task_model(task, seed=0, backbone_state=None, **overrides):
    torch.manual_seed(seed)
    model = sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task, **overrides))
    if backbone_state is not None:
        model.model.load_state_dict(backbone_state)
    return model


def _base_layer_name(name, state):
    """peft moves an adapted Linear's weight under `.base_layer`."""
    if name in state:
        return name
    module, leaf = name.rsplit(".", 1)
    return f"{module}.base_layer.{leaf}"


def _randomise_adapters(peft_model, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name or ("modules_to_save" in name and parameter.requires_grad):
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)


def test_lora_targets_attention_and_trains_heads_in_full():
    peft_model = apply_lora(_task_model("pointmap"), "pointmap", rank=4)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    lora_modules = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable if "lora_" in n}
    assert lora_modules == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert any("decode_head.modules_to_save" in n for n in trainable)
    assert any("scale_head.modules_to_save" in n for n in trainable)
    assert not any("embeddings" in n or "norm" in n.split(".")[-2] for n in trainable)
    with_mlp = apply_lora(_task_model("pose"), "pose", rank=4, include_mlp=True)
    mlp = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in with_mlp.named_parameters() if "lora_" in n}
    assert mlp == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_adapter_save_load_and_merge_give_identical_outputs(tmp_path):
    base = _task_model("pose", layerscale_value=1.0)
    backbone_state = {k: v.clone() for k, v in base.model.state_dict().items()}
    head_state = {k: v.clone() for k, v in base.decode_head.state_dict().items()}
    peft_model = apply_lora(base, "pose", rank=4)
    _randomise_adapters(peft_model, 0)
    pixel_values = torch.randn(2, 3, 64, 48, generator=torch.Generator().manual_seed(1))
    peft_model.eval()
    with torch.no_grad():
        reference = peft_model(pixel_values=pixel_values).heatmaps
    save_lora_adapter(peft_model, tmp_path / "adapter")
    fresh = _task_model("pose", backbone_state=backbone_state, layerscale_value=1.0)
    fresh.decode_head.load_state_dict(head_state)
    loaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(pixel_values=pixel_values).heatmaps, reference, atol=0, rtol=0)
        merged = loaded.merge_and_unload()
        assert type(merged) is sapiens2_hf.Sapiens2ForPoseEstimation
        torch.testing.assert_close(merged(pixel_values=pixel_values).heatmaps, reference, atol=1e-5, rtol=1e-5)
        # Broken control: the base model without the adapter gives other heatmaps.
        plain = _task_model("pose", backbone_state=backbone_state, layerscale_value=1.0)
        plain.decode_head.load_state_dict(head_state)
        assert (plain.eval()(pixel_values=pixel_values).heatmaps - reference).abs().max() > 1e-3


def test_several_task_adapters_share_one_frozen_backbone(tmp_path):
    # LayerScale 1 (instead of the 1e-4 initialisation) so that the attention adapters visibly change the outputs.
    backbone = sapiens2_hf.Sapiens2Model(sapiens2_hf.tiny_config(layerscale_value=1.0))
    backbone_state = {k: v.clone() for k, v in backbone.state_dict().items()}
    pixel_values = torch.randn(2, 3, 64, 48, generator=torch.Generator().manual_seed(2))
    references = {}
    for seed, task in enumerate(("pose", "seg", "normal")):
        model = _task_model(task, seed=seed, backbone_state=backbone_state, layerscale_value=1.0)
        peft_model = apply_lora(model, task, rank=4)
        _randomise_adapters(peft_model, seed + 10)
        peft_model.eval()
        with torch.no_grad():
            output = peft_model(pixel_values=pixel_values)
        references[task] = output[0]
        save_lora_adapter(peft_model, tmp_path / task)
    multi = load_task_adapters(backbone, {task: tmp_path / task for task in references}).eval()
    assert multi.tasks == ["pose", "seg", "normal"]
    assert all(model.model is multi.backbone for model in multi.task_models.values())
    assert not any(p.requires_grad for p in multi.parameters())
    with torch.no_grad():
        for task in ("normal", "pose", "seg", "pose"):  # any order: the active adapter follows the task
            torch.testing.assert_close(multi(pixel_values, task)[0], references[task], atol=1e-6, rtol=1e-6)
        # Broken control: the pose head on the seg adapter's backbone features is not the pose model.
        set_lora_adapter(multi.backbone, "seg")
        wrong = multi.task_models["pose"](pixel_values=pixel_values).heatmaps
        assert (wrong - references["pose"]).abs().max() > 1e-4
    with pytest.raises(ValueError, match="No adapter"):
        multi(pixel_values, "albedo")
    current = multi.backbone.state_dict()
    for name, value in backbone_state.items():  # the shared base weights are untouched
        torch.testing.assert_close(current[_base_layer_name(name, current)], value)


def test_lora_training_changes_only_adapters_and_heads(tmp_path, toy_records):
    model = _task_model("pose")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    peft_model = apply_lora(model, "pose", rank=4)
    args = TrainingArguments(str(tmp_path), per_device_train_batch_size=2, max_steps=2, learning_rate=1e-2,
                             report_to=[], batch_eval_metrics=True, use_cpu=True, save_strategy="no", disable_tqdm=True,
                             optim="adamw_torch")
    dataset = Sapiens2TaskDataset(toy_records["pose"](4), PoseTransform((64, 48)))
    trainer = Sapiens2Trainer(model=peft_model, args=args, train_dataset=dataset, task="pose", layer_decay_rate=0.8)
    trainer.train()
    after = peft_model.get_base_model().state_dict()
    for name, value in before.items():
        if name.startswith("model."):
            torch.testing.assert_close(after[_base_layer_name(name, after)], value)
    changed_lora = [n for n, p in peft_model.named_parameters() if "lora_B" in n and p.abs().sum() > 0]
    assert changed_lora  # lora_B starts at zero; training moved it
