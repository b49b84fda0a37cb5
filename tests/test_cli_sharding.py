"""Sharded and resumable batch inference (cli/sharding.py): two CPU processes under `accelerate launch` write the
same files as one process, each input once; a rerun skips complete inputs and recomputes only missing outputs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from model_folders import save_tiny_model
from PIL import Image

from sapiens2_hf.cli.main import main
from sapiens2_hf.video import VideoReader, write_video

STATE = ".sapiens2-hf"


def _inputs(tmp_path, images=5, frames=4):
    """`images` images and one video of `frames` frames, and a boxes file for all of them (pose)."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    boxes = {}
    for k in range(images):
        Image.fromarray(rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(folder / f"img{k}.png")
        boxes[f"img{k}.png"] = [[2, 3, 25, 36]]
    write_video(folder / "clip.mp4", [rng.integers(0, 256, (32, 48, 3), dtype=np.uint8) for _ in range(frames)],
                fps=5)
    for k in range(frames):
        boxes[f"clip.mp4#{k}"] = [[4 + k, 2, 30 + k, 30]]
    boxes_file = tmp_path / "boxes.json"
    boxes_file.write_text(json.dumps(boxes))
    return folder, boxes_file


def _outputs(out: Path) -> dict[str, Path]:
    return {str(p.relative_to(out)): p for p in sorted(out.rglob("*"))
            if p.is_file() and STATE not in p.parts and p.name != "summary.json"}


def _markers(out: Path) -> dict[str, dict]:
    return {str(p.relative_to(out / STATE / "done")): json.loads(p.read_text())
            for p in sorted((out / STATE / "done").rglob("*.json"))}


def _argv(task, inputs, model, out, boxes):
    extra = ["--boxes", str(boxes), "--no-flip-test"] if task == "pose" else []
    return [task, str(inputs), "--model", str(model), "--out", str(out), "--device", "cpu", "--threads", "1",
            "--quiet", *extra]


SHARDED_TASKS = ("seg", "pose")


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory, free_port_factory):
    """Both tasks run by one process (in this one) and by one `accelerate launch` of two processes: this file runs as
    the launched script (see the end) and calls the CLI's `main` once per task, so the two tasks share one launch
    (each launch costs ~10 s of process start-up and imports). Returns (launch result, {task: working folder})."""
    launcher = Path(sys.executable).parent / "accelerate"
    if not launcher.is_file():
        pytest.skip("accelerate's launcher is not installed next to this interpreter")
    folders, commands = {}, []
    for task in SHARDED_TASKS:
        folder = folders[task] = tmp_path_factory.mktemp(f"sharded-{task}")
        model = save_tiny_model(folder, task)
        inputs, boxes = _inputs(folder)
        assert main(_argv(task, inputs, model, folder / "one", boxes)) == 0
        commands.append(_argv(task, inputs, model, folder / "two", boxes))
    port = free_port_factory()
    # --multi_gpu: accelerate's multi-process launcher; without GPUs the processes use gloo on the CPU
    command = [str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1",
               "--main_process_port", str(port), __file__, json.dumps(commands)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    return result, folders


@pytest.mark.slow
@pytest.mark.parametrize("task", SHARDED_TASKS)
def test_two_processes_write_what_one_process_writes(sharded_runs, task):
    result, folders = sharded_runs
    tmp_path = folders[task]
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.count("with 2 processes") == len(SHARDED_TASKS), result.stdout
    one, two = _outputs(tmp_path / "one"), _outputs(tmp_path / "two")
    assert sorted(one) == sorted(two) and len(one) > 10  # no gaps, nothing extra
    # The outputs per input and frame (JSON, npy, png): the same bytes.
    for name, path in one.items():
        if not name.endswith(".mp4"):
            assert path.read_bytes() == two[name].read_bytes(), name
    # The annotated videos: libx264 (PyAV's build) does not encode the same frames to the same bytes every time
    # (measured: 3-6 of 16 encodes of identical frames differ, decoded mean-abs 0.43 of 255 on noise frames, with 1
    # thread too; one CI run gave 1.59 on one frame), so the decoded frames are compared as images: each within a
    # mean-abs of 4 of the one-process frame, at least 10x nearer to it than to any other frame, and nearest to it
    # (the random frames are ~44 apart after encoding).
    for name, path in one.items():
        if name.endswith(".mp4"):
            frames = [[f.image.astype(np.float64) for f in VideoReader(p)] for p in (path, two[name])]
            assert len(frames[0]) == len(frames[1]) == 4
            distance = np.array([[np.abs(a - b).mean() for b in frames[1]] for a in frames[0]])
            assert (np.diag(distance) <= 4.0).all(), (name, distance.round(2))
            others = distance + np.diag(np.full(4, np.inf))
            assert (10 * np.diag(distance) <= others.min(axis=1)).all(), (name, distance.round(2))
            assert (distance.argmin(axis=1) == np.arange(4)).all(), (name, distance.round(2))
    # each input done exactly once, by one of the two processes, and both worked
    markers = _markers(tmp_path / "two")
    assert sorted(markers) == [f"images/img{k}.json" for k in range(5)] + ["videos/clip.json"]
    assert {m["process"] for m in markers.values()} == {0, 1}
    summaries = [json.loads((tmp_path / run / "summary.json").read_text()) for run in ("one", "two")]
    assert summaries[1]["processes"] == 2 and not list((tmp_path / "two" / STATE).glob("summary-process*"))
    for key in ("processed", "video_frames", "files_written", "skipped", "already_done"):
        assert summaries[0][key] == summaries[1][key], key  # a duplicate would count twice, a gap not at all
    assert summaries[0]["processed"] == 9


def test_a_rerun_recomputes_only_missing_outputs(tmp_path, capsys):
    model = save_tiny_model(tmp_path, "seg")
    inputs, boxes = _inputs(tmp_path)
    out = tmp_path / "out"
    argv = _argv("seg", inputs, model, out, boxes)
    assert main(argv) == 0
    before = {name: (path.read_bytes(), path.stat().st_mtime_ns) for name, path in _outputs(out).items()}
    removed = ["img1_seg.npy", "clip/frame_000002_seg.npy"]
    for name in removed:
        (out / name).unlink()
    capsys.readouterr()
    assert main(argv) == 0
    assert "4 input(s) already done" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    # img1 (1 image) and the video (4 frames) again; the 4 other images skipped
    assert (summary["processed"], summary["video_frames"], summary["already_done"]) == (5, 4, 4)
    after = _outputs(out)
    assert sorted(after) == sorted(before)
    recomputed = {"img1_seg.npy", "img1_seg.png", "clip.mp4"} | {f"clip/frame_{k:06d}_seg.npy" for k in range(4)}
    for name, path in after.items():
        content, mtime = before[name]
        if name.endswith(".npy") or name.endswith(".png"):
            assert path.read_bytes() == content, name  # recomputed or not: the same result
        assert (path.stat().st_mtime_ns == mtime) == (name not in recomputed), name
    # all done: nothing is recomputed; --overwrite recomputes everything; other options too
    assert main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["already_done"] == 6
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads((out / "summary.json").read_text())["processed"] == 9
    assert main([*argv, "--no-overlay"]) == 0
    assert json.loads((out / "summary.json").read_text())["already_done"] == 0


def test_a_failed_input_is_not_marked_done(tmp_path, capsys):
    model = save_tiny_model(tmp_path, "seg")
    inputs, boxes = _inputs(tmp_path, images=2, frames=2)
    (inputs / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    out = tmp_path / "out"
    assert main(_argv("seg", inputs, model, out, boxes)) == 1
    assert sorted(_markers(out)) == ["images/img0.json", "images/img1.json", "videos/clip.json"]
    assert main(_argv("seg", inputs, model, out, boxes)) == 1  # tried again, reported again
    summary = json.loads((out / "summary.json").read_text())
    assert summary["already_done"] == 3 and [Path(s["input"]).name for s in summary["skipped"]] == ["broken.png"]


if __name__ == "__main__":  # a process of the launch in `sharded_runs`: one CLI command line after the other
    for argv in json.loads(sys.argv[1]):
        if main(argv) != 0:
            sys.exit(1)


def test_the_resume_fingerprint_is_derived_from_the_typed_output_options():
    """Every option a resume marker records is a field of the typed option groups (none hand-listed); the later
    options are recorded only when set, so markers written without them stay valid; device, batch size and threads
    are not output options."""
    import dataclasses

    from sapiens2_hf.predict.options import predict_options

    options = predict_options("normal", "m", "out", device="cpu", batch_size=4, threads=2)
    recorded = options.fingerprint()
    assert recorded["dtype"] == "float32" and recorded["no_overlay"] is False and recorded["kpt_threshold"] is None
    assert not {"device", "batch_size", "threads", "model", "backend"} & set(recorded)
    assert "foreground_model" not in recorded and "temporal_filter" not in recorded  # set-only, unset
    changed = predict_options("normal", "m", "out", foreground_model="seg-model")
    assert changed.fingerprint()["foreground_model"] == "seg-model" and changed.fingerprint() != recorded
    # the keys markers written before the option groups recorded for this command: the same set
    assert set(recorded) == {"dtype", "input_size", "no_overlay", "no_arrays", "video_stride", "max_frames", "ply",
                             "no_flip_test", "kpt_threshold", "detector", "detector_threshold", "keypoint_format",
                             "detect_every", "track_iou", "no_smooth", "smooth_min_cutoff", "smooth_beta"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.runtime.dtype = "bfloat16"
    with pytest.raises(ValueError, match="has no option"):  # a pose option on a seg command
        predict_options("seg", "m", "out", kpt_threshold=0.5)
