"""`training_scripts/publish_official.py`: the official zoo (here: official-format tiny files) into repo folders."""

import shutil
import sys
from pathlib import Path

import torch
from huggingface_hub import ModelCard

import sapiens2_hf
from official_cases import compare, load_case
from sapiens2_hf.hub.publish import official_repo_id

ROOT = Path(__file__).resolve().parents[1]


def test_official_repo_ids():
    assert official_repo_id("sapiens2_1b_pose.safetensors") == "facebook/sapiens2-pose-1b"
    assert official_repo_id("sapiens2_1b_4k_pretrain.safetensors") == "facebook/sapiens2-pretrain-1b-4k"
    assert official_repo_id("model.safetensors") is None


def _publish(folder):
    """The publish script over a checkpoint folder laid out like the official host's (one folder per task)."""
    checkpoint_root = folder / "sapiens2_host"
    for case, task_folder in (("pretrain", "pretrain"), ("pose", "pose"), ("pointmap", "pointmap")):
        _, _, weights = load_case(case)
        (checkpoint_root / task_folder).mkdir(parents=True)
        shutil.copy(weights, checkpoint_root / task_folder / weights.name)
    return {"args": [sys.executable, str(ROOT / "training_scripts" / "publish_official.py"), "--checkpoint-root",
                     str(checkpoint_root), "--out", str(folder / "repos"), "--image-size",
                     "sapiens2_tinyc_pointmap.safetensors=160x144"]}


# The script's run (~7 s on one core) starts with the session, beside the other tests (conftest.py).
EARLY_CHILDREN = {"publish": ("test_publish_script_converts_and_verifies_every_file", _publish)}


def test_publish_script_converts_and_verifies_every_file(early_child):
    result, folder = early_child("publish")
    assert result.returncode == 0, result.stderr
    folders = sorted(p.name for p in (folder / "repos").iterdir())
    assert folders == ["sapiens2-pointmap-tinyc", "sapiens2-pose-tinyp", "sapiens2-pretrain-tinya"]
    card = ModelCard.load(folder / "repos" / "sapiens2-pose-tinyp" / "README.md")
    assert card.data.base_model == "facebook/sapiens2-pretrain-tinyp"
    _, reference, weights = load_case("pose")
    model = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(folder / "repos" / "sapiens2-pose-tinyp")
    direct = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(weights)
    direct_state = direct.state_dict()
    assert all(torch.equal(tensor, direct_state[name]) for name, tensor in model.state_dict().items())
    with torch.no_grad():  # same tensors, possibly other kernel paths (memory layout): float rounding only
        heatmaps, expected = model(reference["pixel_values"]).heatmaps, direct(reference["pixel_values"]).heatmaps
    assert compare(heatmaps, expected)["rel_l2"] < 1e-5
