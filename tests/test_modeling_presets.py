"""Presets of every official (size, task): parameter counts equal the official models' (built on the meta device)."""

import json
from pathlib import Path

import pytest
import torch

import sapiens2_hf
from sapiens2_hf import Sapiens2Config

ZOO = json.loads((Path(__file__).parent / "fixtures" / "spec" / "model_zoo.json").read_text())
SIZES = ["0.1b", "0.4b", "0.8b", "1b", "5b"]
TASK_HEAD_SIZES = [(task, size) for task in ("pose", "seg", "normal", "pointmap", "albedo") for size in ("0.4b", "0.8b", "1b", "5b")]


def _num_parameters(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("size", SIZES)
def test_backbone_parameter_count_equals_official(size):
    config = Sapiens2Config.from_preset(size)
    with torch.device("meta"):
        model = sapiens2_hf.Sapiens2Model(config)
    assert _num_parameters(model) == ZOO["archs"][size]["params_counted_from_code"]
    assert config.num_key_value_heads_per_layer == ZOO["archs"][size]["num_kv_heads_per_layer"]
    assert model.rope_embeddings.periods.numel() == ZOO["archs"][size]["rope_periods_buffer_len"]


@pytest.mark.parametrize("task,size", TASK_HEAD_SIZES)
def test_head_parameter_count_equals_official(task, size):
    config = Sapiens2Config.from_preset(size, task=task)
    with torch.device("meta"):
        model = sapiens2_hf.model_class_for_task(task)(config)
    head_params = _num_parameters(model) - _num_parameters(model.model)
    assert head_params == ZOO["heads"][task][size]["params_computed"]
    assert model.config.num_labels == {"pose": 308, "seg": 29}.get(task, 3)


def test_pointmap_preset_scale_branch_takes_the_official_6144_features():
    config = Sapiens2Config.from_preset("1b", task="pointmap")
    assert config.head_config.scale_final_input_size == 6144


def test_rope_periods_in_bfloat16_match_the_official_buffer(load_case):
    from safetensors.torch import load_file

    _, _, weights = load_case("pretrain")
    stored = load_file(weights)["rope_embed.periods"]
    model = sapiens2_hf.Sapiens2Model.from_pretrained(weights)
    assert stored.dtype == torch.bfloat16 and torch.equal(model.rope_embeddings.periods, stored)
    # fp32 arithmetic rounded afterwards would differ (21.5 instead of 21.625 for head dim 12): the control.
    head_dim = model.config.head_dim
    fp32_rounded = (100.0 ** (2 * torch.arange(head_dim // 4, dtype=torch.float32) / (head_dim // 2))).bfloat16()
    assert not torch.equal(fp32_rounded, stored)


def test_unknown_preset_errors():
    with pytest.raises(ValueError, match="Unknown Sapiens2 variant"):
        Sapiens2Config.from_preset("2b")
    with pytest.raises(ValueError, match="no official pose head for Sapiens2-0.1b"):
        Sapiens2Config.from_preset("0.1b", task="pose")
    # transformers' strict configs wrap validation errors in their own class, with our message inside.
    with pytest.raises(Exception, match="`rope_dtype` must be one of"):
        Sapiens2Config(rope_dtype="float16")


def test_rope_augmentation_is_off_by_default_in_train_mode():
    model = sapiens2_hf.Sapiens2Model(sapiens2_hf.tiny_config()).train()
    first = model.rope_embeddings(4, 3)
    second = model.rope_embeddings(4, 3)
    assert torch.equal(first[0], second[0])
    jittered = sapiens2_hf.Sapiens2Model(sapiens2_hf.tiny_config(pos_embed_rescale=2.0)).train()
    torch.manual_seed(0)
    assert not torch.equal(jittered.rope_embeddings(4, 3)[0], first[0])
