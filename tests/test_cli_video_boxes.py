"""Pose on video with `--boxes` for the first frame only: the listed boxes seed the tracks, later frames follow the
people without a detector (issue 21 item 1); frames of one video that fail for the same reason are reported once."""

import json

import numpy as np
import pytest
import torch

import sapiens2_hf
from sapiens2_hf.cli.main import main
from sapiens2_hf.processing import Sapiens2HFImageProcessor
from sapiens2_hf.video import write_video

av = pytest.importorskip("av")

FRAMES = 6


def _model_folder(tmp_path):
    torch.manual_seed(0)
    folder = tmp_path / "model_pose"
    sapiens2_hf.model_class_for_task("pose")(sapiens2_hf.tiny_config("pose")).save_pretrained(folder)
    Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def _clip(tmp_path):
    """Two bright people moving towards each other; a boxes file listing frame 0 only."""
    images = []
    for k in range(FRAMES):
        image = np.full((48, 96, 3), 30, np.uint8)
        for x0, y0, x1, y1 in ([4 + 3 * k, 6, 28 + 3 * k, 44], [60 - 3 * k, 4, 84 - 3 * k, 42]):
            image[y0:y1, x0:x1] = 200
        images.append(image)
    video = write_video(tmp_path / "clip.mp4", images, fps=10)
    boxes = tmp_path / "boxes.json"
    boxes.write_text(json.dumps({"clip.mp4#0": [[4, 6, 28, 44], [60, 4, 84, 42]]}))
    return video, boxes


def _args(video, model, out, *extra):
    return ["pose", str(video), "--model", str(model), "--out", str(out), "--device", "cpu", "--quiet",
            "--no-flip-test", "--threads", "1", *extra]


def test_first_frame_boxes_seed_the_tracker_with_default_detect_every(tmp_path, capsys, monkeypatch):
    """Default `--detect-every 1`, no `--detector`: before the fix every later frame asked for the (unavailable)
    detector and the run exited 1 with five skipped frames."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = _model_folder(tmp_path)
    video, boxes = _clip(tmp_path)
    out = tmp_path / "out"
    code = main(_args(video, model, out, "--boxes", str(boxes)))
    err = capsys.readouterr().err
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped"] == [] and summary["processed"] == FRAMES
    for k in range(FRAMES):
        coco = json.loads((out / "clip" / f"frame_{k:06d}.json").read_text())
        assert sorted(a["track_id"] for a in coco["annotations"]) == [1, 2], k
    first = json.loads((out / "clip" / "frame_000000.json").read_text())
    assert sorted(tuple(a["bbox"]) for a in first["annotations"]) == [(4, 6, 24, 38), (60, 4, 24, 38)]
    assert "no person boxes were given" not in err


def test_named_detector_still_runs_on_schedule_and_a_repeated_error_is_reported_once(tmp_path, capsys):
    """With `--detector` named, frames not listed follow `--detect-every` again; a detector that cannot be loaded
    fails each of those frames for the same reason, which is reported once for the video (control for the test
    above: the schedule, not the tracker, decides where the detector runs)."""
    model = _model_folder(tmp_path)
    video, boxes = _clip(tmp_path)
    not_a_model = tmp_path / "not_a_detector"
    not_a_model.mkdir()
    out = tmp_path / "out"
    code = main(_args(video, model, out, "--boxes", str(boxes), "--detector", str(not_a_model)))
    err = capsys.readouterr().err
    assert code == 1
    skipped = json.loads((out / "summary.json").read_text())["skipped"]
    assert len(skipped) == 1, skipped
    (entry,) = skipped
    assert entry["input"] == f"{video}#1" and entry["frames"] == [1, 2, 3, 4, 5]
    assert entry["reason"].endswith(f"[the same for 5 frames of {video.name}]")
    assert err.count("no person boxes were given") == 1
    # every third frame with the detector: frames 3 only fails; 1, 2, 4, 5 follow the tracks
    out3 = tmp_path / "out3"
    assert main(_args(video, model, out3, "--boxes", str(boxes), "--detector", str(not_a_model),
                      "--detect-every", "3")) == 1
    skipped = json.loads((out3 / "summary.json").read_text())["skipped"]
    assert [s["frames"] for s in skipped] == [[3]] and "the same for" not in skipped[0]["reason"]
