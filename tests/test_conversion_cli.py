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
from official_cases import MODEL_CASES, compare, load_case, within

CASES = {"pretrain": None, "pose": "pose", "seg": "seg", "normal": "normal", "pointmap": "pointmap", "albedo": "albedo"}


def _convert_subprocess(args, cwd):
    return subprocess.run(
        [str(Path(sys.executable).parent / "sapiens2-hf"), "convert", *args],
        cwd=cwd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300,
    )


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
    with torch.no_grad():
        direct = getattr(sapiens2_hf, class_name).from_pretrained(weights)(reference["pixel_values"])
    for ours in fields:
        assert torch.equal(outputs[ours], direct[ours])


def test_convert_refuses_a_wrong_task_and_a_non_empty_folder(tmp_path, capsys):
    _, _, weights = load_case("seg")
    result = _convert([str(weights), "--out", str(tmp_path / "x"), "--task", "pose"], capsys)
    assert result.returncode == 2 and "`seg` checkpoint" in result.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("user data")
    result = _convert([str(weights), "--out", str(tmp_path / "full")], capsys)
    assert result.returncode == 2 and "not empty" in result.stderr
    assert (tmp_path / "full" / "keep.txt").read_text() == "user data"
    # The pointmap scale branch is tied to its input size: a file at a non-native size needs --image-size.
    _, _, pointmap = load_case("pointmap")
    result = _convert([str(pointmap), "--out", str(tmp_path / "pm")], capsys)
    assert result.returncode == 2 and "--image-size" in result.stderr


def test_installed_command_runs_from_outside_the_repo(tmp_path):
    """The console script, run from an unrelated folder, converts and the folder loads in a fresh process."""
    _, reference, weights = load_case("pointmap")
    result = _convert_subprocess([str(weights), "--out", str(tmp_path / "pm"), "--image-size", "160", "144"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    check = (
        "import sys, torch, sapiens2_hf; from safetensors.torch import load_file; "
        "m = sapiens2_hf.Sapiens2ForPointmapEstimation.from_pretrained(sys.argv[1]); "
        "ref = load_file(sys.argv[2]); o = m(ref['pixel_values']); "
        "print(float((o.pointmaps - ref['pointmaps']).abs().max()), float((o.scales - ref['scales']).abs().max()))"
    )
    case_file = weights.parent / "case.safetensors"
    result = subprocess.run([sys.executable, "-c", check, str(tmp_path / "pm"), str(case_file)], cwd=tmp_path,
                            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr
    pointmap_error, scale_error = map(float, result.stdout.split())
    assert pointmap_error < 0.02 and scale_error < 2e-4  # the case's recorded max-abs tolerances
