"""The README's main job (`sapiens2-hf demo`), shortened: every stage runs and writes its outputs."""

import json

import pytest
from huggingface_hub import ModelCard

from sapiens2_hf.cli.main import main


@pytest.mark.slow
def test_demo_runs_end_to_end_offline(tmp_path):
    code = main(["demo", "--out", str(tmp_path), "--pretrain-steps", "2", "--finetune-steps", "60"])
    report = json.loads((tmp_path / "report.json").read_text())
    assert code == 0 and report["pck_0_1_after"] > report["pck_0_1_before"]
    assert report["reload_max_abs_difference"] == 0.0
    # transformers' Auto class builds the installed, registered class (not the repository's copy of it)
    assert report["reloaded_class"].startswith("sapiens2_hf.") and report["reloaded_class"].endswith(
        ".Sapiens2ForPoseEstimation")
    assert {p.name for p in (tmp_path / "overlays").iterdir()} >= {"astronaut.png", "synthetic_0.png"}
    people = json.loads((tmp_path / "keypoints.json").read_text())
    assert len(people[0]["people"][0]["keypoints"]) == 308
    card = ModelCard.load(tmp_path / "sapiens2-tiny-pose-synthetic" / "README.md")
    assert card.data.eval_results[0].metric_type == "pck_0_1"
    assert "PCK@0.1" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_demo_reruns_into_the_same_folder_and_keeps_the_users_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    argv = ["demo", "--out", str(tmp_path), "--pretrain-steps", "2", "--finetune-steps", "2"]
    assert main(argv) == 0
    first = json.loads((tmp_path / "report.json").read_text())
    # the second run replaces the demo's own work folder (its pretraining run) instead of refusing it
    assert main(argv) == 0
    second = json.loads((tmp_path / "report.json").read_text())
    assert second["pck_0_1_after"] == first["pck_0_1_after"]  # one seed, one process, the same kernels
    assert (tmp_path / "notes.txt").read_text() == "mine"
