"""What users bring from the field: Meta's official Hub layout (transformers-written config.json, model.safetensors
with the original tensor names, transformers' stock preprocessor_config.json, and the original file beside them),
folders with only some of those files, Hub ids offline, free-form file names and weights stored in other dtypes.

The folders are written by transformers itself (`official_cases.make_official_hub_folder`), so they change when
transformers' own save format changes.
"""

import json
import shutil

import numpy as np
import pytest
import torch
from official_cases import HUB_LAYOUT_CASES, MODEL_CASES, compare, load_case, make_official_hub_folder, within
from safetensors.torch import load_file, save_file
from transformers import pipeline

import sapiens2_hf
from sapiens2_hf.modeling import resolve_checkpoint
from sapiens2_hf.processing import Sapiens2HFImageProcessor

pytestmark = pytest.mark.compat


LAYOUTS = {"both": ("hf", "official"), "hf_only": ("hf",), "official_only": ("official",)}
PIPELINE_TASKS = {"pose": "sapiens2-pose", "seg": "sapiens2-segmentation", "normal": "sapiens2-normal",
                  "pointmap": "sapiens2-pointmap"}
RESULT_FIELD = {"seg": "segmentation", "normal": "normals", "pointmap": "pointmap"}


def _outputs(model, pixel_values):
    with torch.no_grad():
        return dict(model(pixel_values))


def _assert_reproduces_official(case, model):
    meta, reference, _ = load_case(case)
    assert model.config.rope_dtype == "bfloat16" and model.config.pos_embed_rescale is None
    outputs = _outputs(model, reference["pixel_values"])
    for ours, theirs in MODEL_CASES[case][1].items():
        stats = compare(outputs[ours], reference[theirs])
        tolerance = meta["noise_floor"]["recommended_tolerance"][theirs]
        assert within(stats, tolerance), (case, ours, stats, tolerance)
        # the official bf16 RoPE mode, not transformers' fp32 one
        assert stats["rel_l2"] < 0.5 * compare(outputs[ours], reference[theirs + "_rope_fp32"])["rel_l2"]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(HUB_LAYOUT_CASES))
def test_official_hub_layout_loads_with_our_exact_numerics(case, layout, tmp_path):
    folder = make_official_hub_folder(case, tmp_path / "repo", LAYOUTS[layout])
    if layout != "official_only":  # transformers writes the original tensor names back on save
        assert "model.safetensors" in {p.name for p in folder.iterdir()}
        assert any(k.startswith(("backbone.", "cls_token")) for k in load_file(folder / "model.safetensors"))
    model = getattr(sapiens2_hf, HUB_LAYOUT_CASES[case]).from_pretrained(folder)
    assert type(model) is getattr(sapiens2_hf, HUB_LAYOUT_CASES[case])
    assert model.config.task == (None if case == "pretrain" else case)
    _assert_reproduces_official(case, model)
    # the folder's config.json applies (its input size), also when only the original file is beside it
    assert model.config.image_size_hw == tuple(json.loads((folder / "config.json").read_text())["image_size"])


def test_official_hub_layout_control_with_swapped_mlp_halves_fails(tmp_path):
    """Control: the layout test can fail. A conversion bug (SwiGLU halves swapped in the fused w12) breaks parity."""
    folder = make_official_hub_folder("seg", tmp_path / "repo", ("hf",))
    state = load_file(folder / "model.safetensors")
    key = next(k for k in state if k.endswith("ffn.w12.weight"))
    gate, up = state[key].chunk(2)
    state[key] = torch.cat((up, gate))
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(folder)
    with pytest.raises(AssertionError):
        _assert_reproduces_official("seg", model)


_IMAGE = np.random.default_rng(0).integers(0, 256, (90, 70, 3), dtype=np.uint8)
# The pose case is 18 layers deep: at its file's 1024x768 (3072 tokens) one pipeline call with the flip test takes
# ~4 s; the layouts are what is tested here, and a folder whose configs record another size is as much the official
# layout (the size comes from config.json and the stock preprocessor_config.json, as there).
PIPELINE_SIZES = {"pose": (256, 192)}


def _pipeline_kwargs(case):
    return {"boxes": [[5, 5, 60, 85]]} if case == "pose" else {}


@pytest.fixture(scope="module")
def reference_result():
    """`reference_result(case)`: the pipeline built by hand from the official file (at the folder's input size), run
    on `_IMAGE`; computed once per case, for the three layouts."""
    results = {}

    def run(case):
        if case not in results:
            _, _, weights = load_case(case)
            size = {"image_size": list(PIPELINE_SIZES[case])} if case in PIPELINE_SIZES else {}
            model = getattr(sapiens2_hf, HUB_LAYOUT_CASES[case]).from_pretrained(weights, **size)
            results[case] = pipeline(PIPELINE_TASKS[case], model=model, device="cpu")(_IMAGE, **_pipeline_kwargs(case))
        return results[case]

    return run


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(PIPELINE_TASKS))
def test_pipelines_accept_the_official_hub_layout(case, layout, tmp_path, reference_result):
    folder = make_official_hub_folder(case, tmp_path / "repo", LAYOUTS[layout], image_size=PIPELINE_SIZES.get(case))
    assert json.loads((folder / "preprocessor_config.json").read_text())["image_processor_type"] == "Sapiens2ImageProcessor"
    pipe = pipeline(PIPELINE_TASKS[case], model=str(folder), device="cpu")
    assert type(pipe.model) is getattr(sapiens2_hf, HUB_LAYOUT_CASES[case])  # ours, never transformers' fallback
    assert isinstance(pipe.image_processor, Sapiens2HFImageProcessor) and pipe.image_processor.task == case
    assert pipe.image_processor.input_size == pipe.model.config.image_size_hw
    assert case not in PIPELINE_SIZES or pipe.model.config.image_size_hw == PIPELINE_SIZES[case]  # the folder's size
    # the same pipeline built by hand from the official file and our processor
    ours, expected = pipe(_IMAGE, **_pipeline_kwargs(case)), reference_result(case)
    if case == "pose":
        np.testing.assert_allclose(ours[0]["keypoints"], expected[0]["keypoints"], atol=1e-3)
    elif case == "seg":
        assert (ours["segmentation"] == expected["segmentation"]).mean() > 0.999
    else:
        field = RESULT_FIELD[case]
        np.testing.assert_allclose(ours[field], expected[field], atol=1e-4 * np.abs(expected[field]).max())


def test_sapiens2_hf_pipeline_takes_an_official_file(tmp_path):
    _, _, weights = load_case("seg")
    pipe = sapiens2_hf.pipeline("sapiens2-segmentation", model=weights, device="cpu")
    assert type(pipe.model) is sapiens2_hf.Sapiens2ForSemanticSegmentation and pipe.image_processor.task == "seg"
    # and a folder holding only that file, which transformers' own factory cannot read (no config.json)
    shutil.copy(weights, tmp_path / weights.name)
    image = np.zeros((40, 30, 3), dtype=np.uint8)
    assert np.array_equal(sapiens2_hf.pipeline("sapiens2-segmentation", model=tmp_path)(image)["segmentation"],
                          pipe(image)["segmentation"])


# ------------------------------------------------------------------------------------------ Hub ids, offline


def _fake_cache(cache, repo_id, folder):
    """Lays out `folder`'s files as huggingface_hub's cache of `repo_id` at revision main."""
    commit = "0" * 40
    root = cache / f"models--{repo_id.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    shutil.copytree(folder, root / "snapshots" / commit)


@pytest.mark.parametrize("layout", ["both", "official_only"])
def test_cached_official_hub_repo_loads_offline(layout, tmp_path):
    folder = make_official_hub_folder("pose", tmp_path / "repo", LAYOUTS[layout])
    _fake_cache(tmp_path / "cache", "facebook/sapiens2-pose-tiny", folder)
    model = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained("facebook/sapiens2-pose-tiny", cache_dir=tmp_path / "cache")
    _assert_reproduces_official("pose", model)


def test_uncached_hub_id_offline_is_a_clear_error(tmp_path):
    with pytest.raises(OSError, match="offline mode.*HF_HUB_OFFLINE=1.*local folder"):
        sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained("facebook/sapiens2-pose-1b", cache_dir=tmp_path)


# ------------------------------------------------------------------------------------------- names and dtypes


def test_folder_with_a_free_form_official_file_name(tmp_path):
    _, reference, weights = load_case("pretrain_4k")
    shutil.copy(weights, tmp_path / "sapiens2_custom_4k_pretrain.safetensors")
    assert resolve_checkpoint(tmp_path).kind == "official"
    model = sapiens2_hf.Sapiens2Model.from_pretrained(tmp_path)
    direct = sapiens2_hf.Sapiens2Model.from_pretrained(weights)
    assert model.config.num_tokenizer_layers == 2
    torch.testing.assert_close(_outputs(model, reference["pixel_values"])["last_hidden_state"],
                               _outputs(direct, reference["pixel_values"])["last_hidden_state"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_official_file_in_another_float_dtype_is_cast_with_a_note(dtype, tmp_path, caplog):
    meta, reference, weights = load_case("normal")
    state = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in load_file(weights).items()}
    path = tmp_path / weights.name
    save_file(state, path, metadata={"format": "pt"})
    model = sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(path)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert "to float32" in caplog.text
    outputs = _outputs(model, reference["pixel_values"])
    if dtype is torch.float64:  # lossless: the official outputs within their tolerance
        assert within(compare(outputs["normals"], reference["normals"]), meta["noise_floor"]["recommended_tolerance"]["normals"])
    else:  # rounded weights: near, not exact
        assert compare(outputs["normals"], reference["normals"])["rel_l2"] < 5e-2


def test_integer_tensors_are_refused_by_name(tmp_path):
    _, _, weights = load_case("normal")
    state = load_file(weights)
    state["decode_head.conv_normal.weight"] = state["decode_head.conv_normal.weight"].to(torch.int8)
    save_file(state, tmp_path / weights.name, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"decode_head\.conv_normal\.weight \(I8\)"):
        sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(tmp_path / weights.name)
    # the same in a transformers-layout folder (int8 would otherwise silently become zeros)
    folder = tmp_path / "hf"
    sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights).save_pretrained(folder)
    hf_state = load_file(folder / "model.safetensors")
    hf_state["decode_head.predictor.weight"] = hf_state["decode_head.predictor.weight"].to(torch.int8)
    save_file(hf_state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"decode_head\.predictor\.weight \(I8\)"):
        sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(folder)


# ---------------------------------------------------------------------------------------- pointmap input size


def test_pointmap_input_size_is_inferred_from_the_scale_branch():
    """The tiny pointmap case's scale MLP does not fit 1024x768; the official 4:3 size it fits is inferred."""
    meta, reference, weights = load_case("pointmap")
    model = sapiens2_hf.Sapiens2ForPointmapEstimation.from_pretrained(weights)
    assert model.config.image_size == [256, 192]
    model._check_scale_input(torch.zeros(1, 1, 256 // 16, 192 // 16))  # fits
    outputs = _outputs(model, reference["pixel_values"])  # the case's own 160x144 input fits the branch too
    tolerance = meta["noise_floor"]["recommended_tolerance"]["scales"]
    assert within(compare(outputs["scales"], reference["scales"]), tolerance)


def test_pointmap_input_size_from_file_metadata_wins(tmp_path):
    _, _, weights = load_case("pointmap")
    path = tmp_path / weights.name
    save_file(load_file(weights), path, metadata={"format": "pt", "image_size": "[160, 144]"})
    assert sapiens2_hf.Sapiens2ForPointmapEstimation.from_pretrained(path).config.image_size == [160, 144]


# --------------------------------------------------------------------------- held-out, unseen tiny architectures

UNSEEN_HEADS = {
    "pose": dict(upsample_out_channels=[16, 8], conv_out_channels=[8, 8], num_labels=308),
    "seg": dict(upsample_out_channels=[16, 8], conv_out_channels=[8], num_labels=29),
    "normal": dict(upsample_out_channels=[16, 8], conv_out_channels=[8], use_pixel_shuffle=True, num_labels=3),
    # one more scale conv than the fixtures and a 192x144 training size that 1024x768 does not fit
    "pointmap": dict(upsample_out_channels=[16, 8], conv_out_channels=[8], use_pixel_shuffle=True, num_labels=3,
                     scale_conv_out_channels=[8, 4], scale_conv_kernel_sizes=[1, 1], scale_final_input_size=36,
                     scale_final_hidden_sizes=[16, 8]),
}


def _unseen_official_file(task, folder):
    """An official-format file of an architecture no fixture has (hidden 48, head dim 12, 4 registers, per-layer GQA
    4/2/4), written by transformers' own save (which uses the original tensor names), renamed as Meta names files."""
    import transformers

    torch.manual_seed(0)
    head = dict(UNSEEN_HEADS.get(task, {}))
    num_labels = head.pop("num_labels", None)
    config = transformers.Sapiens2Config(
        hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_attention_heads=2, num_first_full_attention_layers=1, num_last_full_attention_layers=1,
        num_register_tokens=4, image_size=[192, 144], layerscale_value=0.5,
        **({"head_config": head, "num_labels": num_labels} if task != "pretrain" else {}),
    )
    vanilla = getattr(transformers, HUB_LAYOUT_CASES[task])(config).eval()
    vanilla.save_pretrained(folder)
    path = folder / f"sapiens2_heldout_{task}.safetensors"
    (folder / "model.safetensors").rename(path)
    (folder / "config.json").unlink()
    return vanilla, path


@pytest.mark.parametrize("task", ["pretrain", "pose", "seg", "normal", "pointmap"])
def test_held_out_unseen_architectures_load_and_convert(task, tmp_path, capsys):
    vanilla, path = _unseen_official_file(task, tmp_path / "files")
    cls = getattr(sapiens2_hf, HUB_LAYOUT_CASES[task])
    ours = cls.from_pretrained(path, rope_dtype="float32")  # transformers' numbers: the comparable mode
    assert ours.config.num_key_value_heads_per_layer == [4, 2, 4] and ours.config.num_register_tokens == 4
    if task == "pointmap":
        assert ours.config.image_size == [192, 144]  # inferred from the scale branch
    pixel_values = torch.randn(2, 3, 192, 144, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, actual = dict(vanilla(pixel_values)), _outputs(ours, pixel_values)
    fields = [name for name, value in actual.items() if isinstance(value, torch.Tensor)]
    assert fields
    distances = {name: compare(actual[name], expected[name])["rel_l2"] for name in fields}
    assert max(distances.values()) < 1e-5, distances
    # control: the official bf16 RoPE mode is measurably farther from transformers' fp32 RoPE than rounding
    bf16 = _outputs(cls.from_pretrained(path), pixel_values)
    assert compare(bf16[fields[0]], expected[fields[0]])["rel_l2"] > 10 * max(distances[fields[0]], 1e-7)
    # and the file converts (verified inside convert)
    from sapiens2_hf.cli.main import main

    assert main(["convert", str(path), "--out", str(tmp_path / "converted")]) == 0, capsys.readouterr().err
    reloaded = cls.from_pretrained(tmp_path / "converted")
    assert compare(_outputs(reloaded, pixel_values)[fields[0]], bf16[fields[0]])["rel_l2"] < 1e-5


def test_backbone_and_save_for_hub_accept_the_official_hub_layout(tmp_path):
    """`from_backbone` (what finetune.py --backbone_name_or_path calls) and `save_for_hub` with the stock processor an
    official repo carries."""
    from transformers import AutoImageProcessor

    from sapiens2_hf.hub import save_for_hub

    _, reference, weights = load_case("pretrain")
    folder = make_official_hub_folder("pretrain", tmp_path / "pretrain", ("hf", "official"))
    seg = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_backbone(folder, head_config="tiny")
    direct = sapiens2_hf.Sapiens2Model.from_pretrained(weights)
    torch.testing.assert_close(seg.model.get_feature_map(reference["pixel_values"]),
                               direct.get_feature_map(reference["pixel_values"]), rtol=0, atol=1e-5)
    seg_folder = make_official_hub_folder("seg", tmp_path / "seg", ("hf",))
    stock = AutoImageProcessor.from_pretrained(seg_folder)
    assert not isinstance(stock, Sapiens2HFImageProcessor)
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(seg_folder)
    saved = save_for_hub(model, tmp_path / "out", image_processor=stock)
    processor_config = json.loads((saved / "preprocessor_config.json").read_text())
    assert processor_config["task"] == "seg" and processor_config["size"] == stock.size
    pipe = pipeline("sapiens2-segmentation", model=str(saved), device="cpu")
    assert pipe(np.zeros((40, 30, 3), dtype=np.uint8))["segmentation"].shape == (40, 30)
