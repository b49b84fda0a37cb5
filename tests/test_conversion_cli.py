"""`sapiens2-hf convert`: official file -> HF folder that loads back with identical outputs, run from outside the repo."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

import sapiens2_hf
from official_cases import MODEL_CASES, compare, load_case, make_official_hub_folder, within

CASES = {"pretrain": None, "pose": "pose", "seg": "seg", "normal": "normal", "pointmap": "pointmap", "albedo": "albedo"}


def _convert(args, capsys):
    from sapiens2_hf.cli.main import main

    code = main(["convert", *args])
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


@pytest.mark.parametrize("case", list(CASES))
def test_convert_reproduces_official_outputs(case, tmp_path, capsys):
    meta, reference, weights = load_case(case)
    out = tmp_path / "converted"
    size = ["--image-size", str(meta["input"]["height"]), str(meta["input"]["width"])] if case == "pointmap" else []
    result = _convert([str(weights), "--out", str(out), *size], capsys)
    assert result.returncode == 0, result.stderr
    assert "verified by reloading it: every tensor bit-exact" in result.stdout  # the command says what it checked
    assert {"config.json", "model.safetensors", "README.md"} <= {p.name for p in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    assert config["task"] == CASES[case] and config["rope_dtype"] == "bfloat16"
    card = ModelCard.load(out / "README.md")
    assert "sapiens2" in card.data.tags
    class_name, fields = MODEL_CASES[case]
    model = getattr(sapiens2_hf, class_name).from_pretrained(out)
    with torch.no_grad():
        outputs = model(reference["pixel_values"])
    for ours, theirs in fields.items():
        stats = compare(outputs[ours], reference[theirs])
        assert within(stats, meta["noise_floor"]["recommended_tolerance"][theirs]), (case, ours, stats)
    direct_model = getattr(sapiens2_hf, class_name).from_pretrained(weights)
    direct_state = direct_model.state_dict()
    assert all(torch.equal(tensor, direct_state[name]) for name, tensor in model.state_dict().items())
    with torch.no_grad():
        direct = direct_model(reference["pixel_values"])
    for ours in fields:
        # Two loads of the same tensors may run different kernel paths (memory layout): float rounding only.
        assert compare(outputs[ours], direct[ours])["rel_l2"] < 1e-5, ours


def test_convert_refuses_a_wrong_task_and_a_non_empty_folder(tmp_path, capsys):
    _, _, weights = load_case("seg")
    result = _convert([str(weights), "--out", str(tmp_path / "x"), "--task", "pose"], capsys)
    assert result.returncode == 2 and "`seg` checkpoint" in result.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("user data")
    result = _convert([str(weights), "--out", str(tmp_path / "full")], capsys)
    assert result.returncode == 2 and "not empty" in result.stderr
    assert (tmp_path / "full" / "keep.txt").read_text() == "user data"
    # The pointmap scale branch is tied to its input size: a size it does not fit is refused, naming --image-size.
    _, _, pointmap = load_case("pointmap")
    result = _convert([str(pointmap), "--out", str(tmp_path / "pm"), "--image-size", "64", "48"], capsys)
    assert result.returncode == 2 and "--image-size" in result.stderr


def test_convert_infers_the_pointmap_input_size(tmp_path, capsys):
    """The tiny pointmap file's scale branch does not fit 1024x768: the official-aspect size it fits is used."""
    meta, reference, pointmap = load_case("pointmap")
    result = _convert([str(pointmap), "--out", str(tmp_path / "pm")], capsys)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "pm" / "config.json").read_text())["image_size"] == [256, 192]
    processor = json.loads((tmp_path / "pm" / "preprocessor_config.json").read_text())
    assert processor["size"] == {"height": 256, "width": 192}
    model = sapiens2_hf.Sapiens2ForPointmapEstimation.from_pretrained(tmp_path / "pm")
    with torch.no_grad():
        scales = model(reference["pixel_values"]).scales
    assert within(compare(scales, reference["scales"]), meta["noise_floor"]["recommended_tolerance"]["scales"])


def test_convert_a_4k_file(tmp_path, capsys):
    """The verification input follows the config (multiples of the 64-pixel 4K feature stride)."""
    meta, reference, weights = load_case("pretrain_4k")
    renamed = tmp_path / "sapiens2_custom_4k_pretrain.safetensors"
    renamed.write_bytes(weights.read_bytes())
    result = _convert([str(renamed), "--out", str(tmp_path / "4k")], capsys)
    assert result.returncode == 0, result.stderr
    model = sapiens2_hf.Sapiens2Model.from_pretrained(tmp_path / "4k")
    assert model.config.num_tokenizer_layers == 2
    with torch.no_grad():
        hidden = model(reference["pixel_values"]).last_hidden_state
    tolerance = meta["noise_floor"]["recommended_tolerance"]["last_hidden_state"]
    assert within(compare(hidden, reference["last_hidden_state"]), tolerance)


@pytest.mark.parametrize("layout", [("hf", "official"), ("hf",), ("official",)])
def test_convert_an_official_hub_layout_folder(layout, tmp_path, capsys):
    meta, reference, _ = load_case("seg")
    folder = make_official_hub_folder("seg", tmp_path / "repo", layout)
    result = _convert([str(folder), "--out", str(tmp_path / "out")], capsys)
    assert result.returncode == 0, result.stderr
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["rope_dtype"] == "bfloat16" and config["task"] == "seg"
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path / "out")
    with torch.no_grad():
        logits = model(reference["pixel_values"]).logits
    assert within(compare(logits, reference["logits"]), meta["noise_floor"]["recommended_tolerance"]["logits"])


def test_expected_failures_are_one_line_and_exit_2(tmp_path, capsys):
    _, _, weights = load_case("seg")
    corrupt = tmp_path / "sapiens2_x_seg.safetensors"
    corrupt.write_bytes(weights.read_bytes()[:1000])
    cases = {
        "corrupt": [str(corrupt), "--out", str(tmp_path / "a")],
        "wrong task": [str(weights), "--out", str(tmp_path / "b"), "--task", "normal"],
        "bad size": [str(weights), "--out", str(tmp_path / "c"), "--image-size", "100", "70"],
        "missing": [str(tmp_path / "nothing.safetensors"), "--out", str(tmp_path / "d")],
        "not a checkpoint": [str(tmp_path), "--out", str(tmp_path / "e")],
    }
    for name, args in cases.items():
        result = _convert(args, capsys)
        assert result.returncode == 2, (name, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("sapiens2-hf convert: error: "), (name, result.stderr)
        assert "Traceback" not in result.stderr
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no staging folder left behind


def test_verification_catches_a_broken_reload():
    """Control of `verify_reload`: a swapped tensor, a changed config field and a changed output are each caught."""
    from sapiens2_hf.hub.convert_official import ConversionCheckError, verify_reload

    _, _, weights = load_case("normal")
    model = sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights)
    assert set(verify_reload(model, sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights), "x")) == {"normals"}
    broken = sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights)
    with torch.no_grad():
        broken.decode_head.predictor.weight.mul_(-1)
    with pytest.raises(ConversionCheckError, match="tensor `decode_head.predictor.weight`"):
        verify_reload(model, broken, "x")
    other = sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights, rope_dtype="float32")
    with pytest.raises(ConversionCheckError, match="config field `rope_dtype`"):
        verify_reload(model, other, "x")
    other.config.rope_dtype = "bfloat16"  # same config text, but the module still runs fp32 RoPE: outputs differ
    with pytest.raises(ConversionCheckError, match="output `normals`"):
        verify_reload(model, other, "x")


def _installed_convert(folder):
    """`sapiens2-hf convert` of the pointmap case by the console script, run from an unrelated folder."""
    _, _, weights = load_case("pointmap")
    command = [str(Path(sys.executable).parent / "sapiens2-hf"), "convert", str(weights), "--out", str(folder / "pm"),
               "--image-size", "160", "144"]
    return {"args": command, "cwd": folder, "env": {**os.environ, "HF_HUB_OFFLINE": "1"}}


# The console script's run (~7 s on one core, mostly imports) starts with the session, beside the other tests
# (conftest.py).
EARLY_CHILDREN = {"installed-convert": ("test_installed_command_runs_from_outside_the_repo", _installed_convert)}


def test_installed_command_runs_from_outside_the_repo(early_child):
    """The console script, run from an unrelated folder, converts, and the folder loads in another process (this one:
    a second child process would add ~7 s of imports and test nothing more, since the converting process is gone)."""
    result, folder = early_child("installed-convert")
    assert result.returncode == 0, result.stderr
    out = folder / "pm"
    _, reference, _ = load_case("pointmap")
    model = sapiens2_hf.Sapiens2ForPointmapEstimation.from_pretrained(out)
    with torch.no_grad():
        outputs = model(reference["pixel_values"])
    pointmap_error = (outputs.pointmaps - reference["pointmaps"]).abs().max().item()
    scale_error = (outputs.scales - reference["scales"]).abs().max().item()
    assert pointmap_error < 0.02 and scale_error < 2e-4  # the case's recorded max-abs tolerances


def test_convert_overwrite_keeps_what_it_did_not_write(tmp_path, capsys):
    _, _, weights = load_case("seg")
    out = tmp_path / "repo"
    (out / ".git").mkdir(parents=True)
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (out / "notes.txt").write_text("user data")
    assert _convert([str(weights), "--out", str(out), "--overwrite"], capsys).returncode == 0
    assert (out / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n" and (out / "notes.txt").read_text() == "user data"
    assert (out / "model.safetensors").is_file()
    sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(out)


def test_one_conversion_entry_point():
    """The conversion lives in one place, `sapiens2_hf.hub.convert_official` (it writes the model card, a hub concern);
    `sapiens2-hf convert` calls it. The run-time reader of the official format is a modeling module named for what it
    is, not a second converter; there is no `sapiens2_hf.conversion` package any more."""
    import importlib

    package = Path(sapiens2_hf.__file__).parent
    named_convert = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if "convert" in p.name)
    assert named_convert == ["cli/convert.py", "hub/convert_official.py"], named_convert
    assert "convert_official_checkpoint" in (package / "cli" / "convert.py").read_text()
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sapiens2_hf.conversion")
    from sapiens2_hf.hub import convert_official_checkpoint
    from sapiens2_hf.hub.convert_official import convert_official_checkpoint as defined
    from sapiens2_hf.modeling.official_format_sapiens2_hf import PREDICTOR_TASKS
    from sapiens2_hf.modeling.sapiens2_tasks import TASK_NAMES

    assert convert_official_checkpoint is defined
    assert sorted(PREDICTOR_TASKS.values()) == sorted(TASK_NAMES)  # derived from the task registry
