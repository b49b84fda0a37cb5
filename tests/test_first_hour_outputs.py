"""A user's first hour (issue 21, items 6, 7, 9, 10): what the commands write is documented and labelled, long steps
say so and routine runs stay quiet, errors give command-line hints, and the docs match what is written."""

import configparser
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import sapiens2_hf
from sapiens2_hf.runs.errors import error_message
from sapiens2_hf.cli.main import build_parser, main
from sapiens2_hf.processing import Sapiens2HFImageProcessor


ROOT = Path(__file__).resolve().parents[1]
RUN = ["--quiet", "--threads", "1"]


def _seg_model(folder: Path) -> Path:
    torch.manual_seed(0)
    sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg")).save_pretrained(folder)
    Sapiens2HFImageProcessor(task="seg", size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def _photos(folder: Path) -> Path:
    folder.mkdir(parents=True)
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(folder / "a.png")
    return folder


# ---------------------------------------------------------------------------------------------------------------
# item 6: what each command writes, and the box formats


def test_pose_json_labels_its_box_format_and_keeps_coco_bbox():
    from sapiens2_hf.predict.outputs import pose_annotations

    person = {"bbox": np.array([10.0, 20.0, 50.0, 90.0]), "bbox_score": 0.9, "keypoints": np.zeros((2, 2)),
              "scores": np.array([0.8, 0.1]), "labels": ["nose", "left_eye"]}
    record = pose_annotations("a.png", (100, 80, 3), [person], threshold=0.3)
    (annotation,) = record["annotations"]
    assert annotation["bbox"] == [10.0, 20.0, 40.0, 70.0]  # COCO xywh, unchanged
    assert annotation["bbox_xyxy"] == [10.0, 20.0, 50.0, 90.0]  # what --boxes takes
    assert record["info"]["bbox_format"] == "xywh"


def test_boxes_help_names_xyxy():
    pose = build_parser()._subparsers._group_actions[0].choices["pose"]
    (boxes,) = [action for action in pose._actions if "--boxes" in action.option_strings]
    assert "xyxy" in boxes.help and "xywh" in boxes.help


def test_docs_cli_lists_every_output_file_and_both_box_formats():
    from sapiens2_hf.predict.outputs import image_output_suffixes

    text = (ROOT / "docs" / "cli.md").read_text()
    missing = [suffix for suffix in image_output_suffixes() if f"<name>{suffix}`" not in text]
    assert not missing, missing
    for command in ("convert", "merge", "export", "demo"):
        assert f"## `sapiens2-hf {command}" in text
    assert "bbox_xyxy" in text and "**xywh** (COCO)" in text and "summary.json" in text
    assert "docs/cli.md" in (ROOT / "README.md").read_text()


# ---------------------------------------------------------------------------------------------------------------
# item 7: long steps announce themselves, routine runs are quiet


def test_export_says_it_started_before_the_long_step(tmp_path, monkeypatch, capsys):
    import sapiens2_hf.export as export

    def slow_export(*args, **kwargs):
        assert "exporting" in capsys.readouterr().err  # printed before the work, not after it
        raise export.ExportCheckError("stub")

    monkeypatch.setattr(export, "export_model", slow_export)
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "out"), "--threads", "1"]) == 2
    assert "stub" in capsys.readouterr().err


def test_quiet_predict_shows_no_progress_bars(tmp_path, capfd):
    model, photos = _seg_model(tmp_path / "model"), _photos(tmp_path / "photos")
    capfd.readouterr()
    assert main(["seg", str(photos), "--model", str(model), "--out", str(tmp_path / "out"), *RUN]) == 0
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "it/s]" not in err, err


def test_training_arguments_pin_memory_only_with_an_accelerator(tmp_path):
    from sapiens2_hf.training.run_setup import Sapiens2TrainingArguments

    on_cpu = Sapiens2TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    assert on_cpu.dataloader_pin_memory is False
    default = Sapiens2TrainingArguments(output_dir=str(tmp_path))
    assert default.dataloader_pin_memory is torch.accelerator.is_available()


def test_lora_wrapping_raises_no_future_warning():
    from sapiens2_hf.training import apply_lora

    model = sapiens2_hf.Sapiens2ForPoseEstimation(sapiens2_hf.tiny_config("pose"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_lora(model, "pose", rank=4)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], [str(w.message) for w in caught]


def test_finetune_script_prints_final_metrics_once_with_units(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("finetune_script", ROOT / "training_scripts" / "finetune.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    class Trainer:
        def is_world_process_zero(self):
            return True

    metrics = {"eval_miou": 41.5, "eval_pck_0_1": 0.25, "eval_loss": 0.5}
    monkeypatch.setattr(script, "run_finetune", lambda *args, **kwargs: (Trainer(), metrics))
    script.main(["--task", "seg", "--output_dir", "unused", "--report_to", "none", "--use_cpu"])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["eval_loss: 0.5", "eval_miou: 41.5  (percent)", "eval_pck_0_1: 0.25  (fraction in [0, 1])"]


def test_finetune_does_not_print_the_metrics_itself():
    # the script prints the final metrics; run_finetune only saves them (they were printed twice)
    source = (ROOT / "src" / "sapiens2_hf" / "training" / "finetune.py").read_text()
    assert 'log_metrics("eval"' not in source and 'log_metrics("predict"' not in source


def test_package_data_is_declared_without_setuptools_warnings(tmp_path):
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["options"]["packages"].strip() == "find_namespace:"
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    result = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "build_py",
                             "--build-lib", str(tmp_path / "build")], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "would be ignored" not in result.stdout + result.stderr
    built = tmp_path / "build" / "sapiens2_hf"
    assert (built / "assets" / "demo" / "astronaut.png").is_file()
    assert not list(built.rglob("__pycache__"))


# ---------------------------------------------------------------------------------------------------------------
# item 9: hints in the command line's language


@pytest.mark.parametrize("api, cli", [
    ("x exists and is not empty; choose another folder or pass overwrite=True.", "pass --overwrite."),
    ("export it with quantize='int8-dynamic' for an int8 one.", "--quantize int8-dynamic`"),
    ("m is a `seg` checkpoint, not a `pose` one: load it with Sapiens2ForSemanticSegmentation.",
     "run it with `sapiens2-hf seg`."),
    ("f holds a 'onnx' export; backend 'aoti' needs `sapiens2-hf export --format aoti`.",
     "; --backend aoti needs `sapiens2-hf export --format aoti`."),
])
def test_cli_errors_translate_api_hints(api, cli):
    message = error_message(ValueError(api))
    assert cli in message and "=True" not in message and "quantize='" not in message and "backend '" not in message


def test_a_checkpoint_of_another_task_names_the_command(tmp_path, capsys):
    model, photos = _seg_model(tmp_path / "model"), _photos(tmp_path / "photos")
    assert main(["pose", str(photos), "--model", str(model), "--out", str(tmp_path / "out"), *RUN]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "run it with `sapiens2-hf seg`" in line and "Sapiens2For" not in line


@pytest.mark.parametrize("export_format, file, hint", [
    ("onnx", "model.onnx", "run it with `sapiens2-hf <task> --model FOLDER --backend onnxruntime`"),
    ("aoti", "model_aoti.pt2", "run it with `sapiens2-hf <task> --model FOLDER --backend aoti`"),
    ("torch-export", "model.pt2", "load this one from Python with sapiens2_hf.export.load_exported(folder)"),
])
def test_an_exported_folder_is_not_reported_as_missing_weights(export_format, file, hint, tmp_path, capsys):
    folder = tmp_path / "exported"
    sapiens2_hf.tiny_config("seg").save_pretrained(folder)
    (folder / file).write_bytes(b"graph")
    (folder / "export_info.json").write_text(json.dumps({"format": export_format, "task": "seg"}))
    photos = _photos(tmp_path / "photos")
    assert main(["seg", str(photos), "--model", str(folder), "--out", str(tmp_path / "out"), *RUN]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"is an exported model (format {export_format}: {file})" in line and hint in line
    assert "no weights" not in line


@pytest.mark.parametrize("background", [(0, 255, 0), [0, 255, 0], "path"])
def test_matting_background_takes_a_colour_or_a_path(background, tmp_path):
    processor = Sapiens2HFImageProcessor(task="matting", size={"height": 8, "width": 6})
    maps = torch.zeros(1, 4, 8, 6)
    maps[:, 0] = 0.5  # pre-multiplied red foreground 0.5 ...
    maps[:, 3] = 0.5  # ... at alpha 0.5
    if background == "path":
        Image.new("RGB", (6, 8), (0, 255, 0)).save(tmp_path / "green.png")
        background = str(tmp_path / "green.png")
    (result,) = processor.post_process_image_matting(maps, backgrounds=background)
    assert result["composite"][:, 0, 0].tolist() == [128, 128, 0]  # 0.5 red + 0.5 x green


def test_matting_background_colour_out_of_range_is_an_error():
    processor = Sapiens2HFImageProcessor(task="matting", size={"height": 8, "width": 6})
    with pytest.raises(ValueError, match=r"\(red, green, blue\) in \[0, 255\]"):
        processor.post_process_image_matting(torch.zeros(1, 4, 8, 6), backgrounds=(0, 300, 0))


# ---------------------------------------------------------------------------------------------------------------
# item 10: docs versus behaviour


def test_metric_units_label_percent_and_fraction():
    from sapiens2_hf.training.evaluation import metric_unit

    assert metric_unit("eval_miou") == "percent" and metric_unit("predict_aacc") == "percent"
    assert metric_unit("eval_pck_0_1") == metric_unit("eval_oks_ap").split(";")[0] == "fraction in [0, 1]"
    assert metric_unit("eval_mean_angular_error_deg") == "degrees" and metric_unit("eval_loss") is None


def test_synthetic_data_doc_covers_matting():
    text = (ROOT / "docs" / "synthetic_data.md").read_text()
    assert "five" not in text and "all six Sapiens2 tasks" in text
    for key in ("`alpha`", "`foreground`", "`matting_image`", "`matting`"):
        assert key in text


def test_readme_has_license_albedo_note_gallery_and_no_stale_copy_claim():
    text = (ROOT / "README.md").read_text()
    assert "## License" in text and "Apache License 2.0" in text and "Sapiens2 License" in text
    assert "Meta has released no albedo weights" in text
    assert "`model/`" not in text and "`adapter/`" not in text  # fine-tuning writes no such copies
    images = re.findall(r"\]\((docs/images/gallery/[^)]+\.png)\)", text)
    assert len(images) >= 8
    sizes = [(ROOT / image).stat().st_size for image in images]
    assert max(sizes) < 150_000 and sum(sizes) < 1_500_000


def test_demo_overlay_is_readable_with_ground_truth_beside_prediction():
    from sapiens2_hf.data.synthetic import render_sample
    from sapiens2_hf.demo import RENDER_SIZE, _ground_truth_beside_prediction

    sample = render_sample((3, 0), *RENDER_SIZE)
    people = [{"keypoints": points, "scores": np.ones(len(points), np.float32), "bbox": box}
              for points, box in zip(sample["keypoints"], sample["boxes"])]
    overlay = _ground_truth_beside_prediction(sample, people)
    assert overlay.height >= 384 + 20 and overlay.width >= 2 * 4 * RENDER_SIZE[1]
    left, right = np.asarray(overlay)[20:404, :288], np.asarray(overlay)[20:404, 292:580]
    assert np.array_equal(left, right)  # the prediction here is the ground truth: both panels draw the same


def test_enlarge_keeps_points_on_their_pixels():
    from sapiens2_hf.visualization import enlarge

    image = np.zeros((96, 72, 3), np.uint8)
    image[10, 20] = 255
    big, (person,) = enlarge(image, [{"keypoints": np.array([[20.0, 10.0]]), "bbox": np.array([0, 0, 72, 96])}])
    assert big.size == (288, 384)
    x, y = person["keypoints"][0]
    assert np.asarray(big)[int(round(y)), int(round(x))].tolist() == [255, 255, 255]
    assert person["bbox"].tolist() == [0, 0, 288, 384]


def test_demo_keypoints_json_and_report_explain_themselves():
    from sapiens2_hf.demo import METRIC_NOTES, _keypoints_entry, _markdown

    people = [{"bbox": np.array([0.0, 0.0, 4.0, 4.0]), "bbox_score": 1.0, "keypoints": np.zeros((2, 2)),
               "scores": np.ones(2), "labels": ["nose", "left_eye"]}]
    entry = _keypoints_entry("a", people)
    assert entry["keypoint_names"] == ["nose", "left_eye"] and entry["bbox_format"] == "xyxy"
    assert "labels" not in entry["people"][0]
    report = {"pretrain_steps": 1, "finetune_steps": 1, "lora_trainable_parameters": 1, "total_parameters": 2,
              "pck_0_1_before": 0.1, "pck_0_1_after": 0.2, "pipeline_pck_0_1_held_out": 0.2, "oks_ap_before": 0.0,
              "oks_ap_after": 0.0, "reload_max_abs_difference": 0.0, "seconds": 1.0, "metric_notes": METRIC_NOTES,
              "reloaded_class": "transformers_modules.sapiens2-tiny-pose-synthetic.modeling.Sapiens2ForPoseEstimation",
              "reloaded_from": "the repository's own modeling files (trust_remote_code)"}
    text = _markdown(report, Path("repo"))
    assert "transformers_modules" not in text and "`Sapiens2ForPoseEstimation` from the repository's own" in text
    assert "OKS AP: 0.000 before -> 0.000 after" in text and "0.0 is expected here" in text
