"""`from_pretrained` of our classes is transformers' own: what its loader offers works on every layout we read
(device maps with disk offload, dtypes, shards, state dicts, config overrides, key mappings, loading info), with our
strictness on top and `strict=False` for transformers' behaviour. Official files stream through the declared weight
conversions (modeling/official_format_sapiens2_hf.py) instead of a state dict built in memory."""

import json
import logging
import os

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel, pipeline
from transformers.conversion_mapping import get_checkpoint_conversion_mapping

import sapiens2_hf


pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("one_thread")]


def _model(task="seg", seed=0):
    torch.manual_seed(seed)
    return sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task)).eval()


def _logits(model, pixel_values):
    with torch.no_grad():
        return model(pixel_values).logits


@pytest.fixture(scope="module")
def seg_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("seg")
    _model().save_pretrained(folder)
    return folder


PIXELS = torch.randn(1, 3, 64, 48, generator=torch.Generator().manual_seed(0))


def test_every_load_goes_through_transformers_from_pretrained(seg_folder, load_case, monkeypatch):
    calls = []
    original = PreTrainedModel.from_pretrained.__func__

    def counting(cls, *args, **kwargs):
        calls.append(cls.__name__)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(counting))
    sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(seg_folder)
    sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(load_case("pose")[2])  # an official file
    sapiens2_hf.Sapiens2Model.from_pretrained(load_case("pretrain_4k")[2])  # the 4K tokenizer's names too
    assert calls == ["Sapiens2ForSemanticSegmentation", "Sapiens2ForPoseEstimation", "Sapiens2Model"]


def test_conversions_are_declared_to_transformers_for_our_type_only():
    assert get_checkpoint_conversion_mapping("sapiens2_hf") is not None
    # transformers' own `sapiens2` entry is its own, untouched
    ours = {str(t.source_patterns) for t in get_checkpoint_conversion_mapping("sapiens2_hf")}
    theirs = {str(t.source_patterns) for t in get_checkpoint_conversion_mapping("sapiens2")}
    assert ours != theirs and r"['^tokenizer\\.w_cls']" not in theirs


def test_disk_offload_with_a_memory_budget_smaller_than_the_model(seg_folder, tmp_path):
    reference = _logits(sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(seg_folder), PIXELS)
    size = sum(p.numel() * p.element_size() for p in _model().parameters())
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(
        seg_folder, device_map="auto", max_memory={"cpu": size // 2}, offload_folder=tmp_path / "offload"
    )
    assert "disk" in set(model.hf_device_map.values()), model.hf_device_map
    assert any(name.endswith(".dat") or name.endswith(".safetensors") for name in os.listdir(tmp_path / "offload")) \
        or any(p.device.type == "meta" for p in model.parameters())
    torch.testing.assert_close(_logits(model, PIXELS), reference, rtol=0, atol=0)
    # control: the comparison sees another model's weights
    assert not torch.equal(_logits(_model(seed=1), PIXELS), reference)


def test_device_map_dict_and_pipeline_device_map(seg_folder):
    device_map = {"model": "cpu", "decode_head": "cpu"}
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(seg_folder, device_map=device_map)
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    reference = _logits(sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(seg_folder), PIXELS)
    torch.testing.assert_close(_logits(model, PIXELS), reference, rtol=0, atol=0)
    pipe = pipeline("sapiens2-segmentation", model=str(seg_folder), device_map="auto")
    assert type(pipe.model) is sapiens2_hf.Sapiens2ForSemanticSegmentation  # ours, never transformers' class


def test_bfloat16_official_file_is_cast_tensor_by_tensor(load_case):
    """dtype=bfloat16 of an official float32 file gives bf16 parameters and the same outputs as casting the float32
    model (the official RoPE stays bfloat16 in both)."""
    _, reference, weights = load_case("normal")
    direct = sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights, dtype=torch.bfloat16)
    assert {p.dtype for p in direct.parameters()} == {torch.bfloat16}
    cast = sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights).to(torch.bfloat16)
    with torch.no_grad():
        x = reference["pixel_values"].bfloat16()
        assert torch.equal(direct(x).normals, cast(x).normals)
    auto = sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights, dtype="auto")  # the stored dtype
    assert {p.dtype for p in auto.parameters()} == {torch.float32}


def test_sharded_folder_written_by_transformers(seg_folder, tmp_path):
    _model().save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]) > 10
    reference = _logits(sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(seg_folder), PIXELS)
    torch.testing.assert_close(
        _logits(sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path), PIXELS), reference, rtol=0, atol=0
    )


def test_state_dict_config_overrides_and_loading_info(seg_folder):
    model = _model()
    loaded, info = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(
        None, config=model.config, state_dict=model.state_dict(), output_loading_info=True
    )
    assert torch.equal(_logits(loaded, PIXELS), _logits(model, PIXELS))
    assert not info["missing_keys"] and not info["unexpected_keys"]
    overridden = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(
        seg_folder, output_hidden_states=True, rope_dtype="float32"
    )
    assert overridden.config.output_hidden_states and overridden.config.rope_dtype == "float32"
    with torch.no_grad():
        assert len(overridden(PIXELS).hidden_states) == overridden.config.num_hidden_layers + 1
    # an official state dict in memory, original names, takes the same path
    state = load_file(os.path.join(os.path.dirname(__file__), "fixtures/official/seg/sapiens2_tinyb_seg.safetensors"))
    assert isinstance(sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(None, state_dict=state),
                      sapiens2_hf.Sapiens2ForSemanticSegmentation)


def test_key_mapping_renames_foreign_names(seg_folder, tmp_path):
    state = load_file(seg_folder / "model.safetensors")
    renamed = {key.replace("decode_head.", "segmentation_head."): value for key, value in state.items()}
    save_file(renamed, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((seg_folder / "config.json").read_text())
    with pytest.raises(ValueError, match="segmentation_head"):  # control: strict without the mapping
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path)
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(
        tmp_path, key_mapping={r"^segmentation_head\.": "decode_head."}
    )
    assert torch.equal(_logits(model, PIXELS),
                       _logits(sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(seg_folder), PIXELS))


def test_strict_by_default_and_strict_false_is_transformers_behaviour(seg_folder, tmp_path):
    state = load_file(seg_folder / "model.safetensors")
    del state["decode_head.predictor.weight"]
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((seg_folder / "config.json").read_text())
    with pytest.raises(ValueError, match=r"missing tensors .*decode_head\.predictor\.weight.*strict=False"):
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path)
    model, info = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(
        tmp_path, strict=False, output_loading_info=True
    )
    assert info["missing_keys"] == {"decode_head.predictor.weight"}
    assert model.decode_head.predictor.weight.isfinite().all()  # initialised, as transformers does


def _load_reports(capfd, caplog, load):
    # transformers logs the load report through its library logger, whose own handler holds whatever stream was
    # sys.stderr when it was made (under pytest: possibly an earlier test's capture, so transformers 5.23's report
    # escaped both capsys and capfd); letting the record propagate to the root logger makes caplog see it on every
    # version, and capfd still catches anything printed directly.
    library_logger = logging.getLogger("transformers")
    propagate = library_logger.propagate
    library_logger.propagate = True
    caplog.clear()
    capfd.readouterr()
    try:
        with caplog.at_level("WARNING"):
            load()
    finally:
        library_logger.propagate = propagate
    captured = capfd.readouterr()
    return "LOAD REPORT" in caplog.text + captured.out + captured.err


def test_adapters_and_backbones_of_task_checkpoints_load_without_reports(tmp_path, capfd, caplog):
    from sapiens2_hf.training.lora import apply_lora, save_lora_adapter

    _model("pose").save_pretrained(tmp_path / "base")
    base = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(tmp_path / "base")
    adapted = apply_lora(base, "pose", rank=4)
    save_lora_adapter(adapted, tmp_path / "adapter")
    assert not _load_reports(capfd, caplog, lambda: sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(tmp_path / "adapter"))
    assert not _load_reports(capfd, caplog, lambda: sapiens2_hf.Sapiens2Model.from_pretrained(tmp_path / "base"))
    # control: a genuinely unexpected tensor, loaded leniently, is reported by transformers
    state = load_file(tmp_path / "base" / "model.safetensors")
    save_file({**state, "extra.weight": torch.zeros(2)}, tmp_path / "base" / "model.safetensors", metadata={"format": "pt"})
    assert _load_reports(capfd, caplog, lambda: sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(
        tmp_path / "base", strict=False))
