"""The run layer (sapiens2_hf.runs): the one decoder of files and its guarantees, input enumeration, resume markers,
the run lock on filelock, the --out rule and per-run records; each with a control."""

import io
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sapiens2_hf.cli.main import main
from sapiens2_hf.processing import load_image_rgb
from sapiens2_hf.runs import decode
from sapiens2_hf.runs.decode import ImageDecodeError, decode_image
from sapiens2_hf.runs.inputs import (IMAGE_SUFFIXES, check_out_not_in_inputs, collect_files, is_dataset_folder,
                                     output_names)
from sapiens2_hf.runs.records import RunReport, write_summary
from sapiens2_hf.runs.resume import ResumeMarkers, file_fingerprint
from sapiens2_hf.utils.run_lock import LOCK_FILE, RunFolderLockedError, read_lock, run_folder_lock
from sapiens2_hf.video.tracking import box_iou

from model_folders import save_tiny_model
from model_folders import write_images as _images

RUN = ["--device", "cpu", "--quiet", "--threads", "1"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

pytestmark = pytest.mark.usefixtures("one_thread")


def _png(path: Path, array: np.ndarray, mode: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array, mode).save(path) if mode else Image.fromarray(array).save(path)
    return path


def _one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


# ---------------------------------------------------------------------------------------------------- the decoder
@pytest.mark.parametrize("shape", [(1, 1, 3), (3, 300, 3), (300, 3, 3), (4, 4, 3)])
def test_a_file_is_never_an_ambiguous_array(tmp_path, shape):
    array = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    path = _png(tmp_path / "x.png", array)
    np.testing.assert_array_equal(decode_image(path), array)
    np.testing.assert_array_equal(decode_image(path.read_bytes()), array)  # bytes and cells read the same
    np.testing.assert_array_equal(decode_image({"bytes": path.read_bytes(), "path": None}), array)
    # control: the same pixels as an array are ambiguous to the pipelines' rules, which is why files are read here
    if shape[0] in (1, 3, 4) and shape[-1] in (1, 3, 4):
        with pytest.raises(ValueError, match="ambiguous"):
            load_image_rgb(array)


@pytest.mark.parametrize("size", [(20000, 2), (20000, 10), (2, 20000)])
def test_extreme_aspect_ratios_are_one_line_naming_the_limit(tmp_path, size):
    width, height = size
    path = _png(tmp_path / "strip.png", np.zeros((height, width, 3), np.uint8))
    with pytest.raises(ImageDecodeError, match=r"aspect ratio over the limit of 200:1.*MAX_ASPECT_RATIO") as error:
        decode_image(path)
    assert str(path) in _one_line(error)
    # control: at the limit it decodes
    assert decode_image(_png(tmp_path / "ok.png", np.zeros((2, 400, 3), np.uint8))).shape == (2, 400, 3)


def test_the_pixel_cap_and_the_memory_bound_hold_before_decoding(tmp_path, monkeypatch):
    path = _png(tmp_path / "big.png", np.zeros((64, 64, 3), np.uint8))
    decoded = []
    original = Image.Image.load
    monkeypatch.setattr(Image.Image, "load", lambda self: decoded.append(1) or original(self))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # cap: 2 x 1000 pixels < 64 x 64
    with pytest.raises(ValueError, match="pixels") as error:
        decode_image(path)
    assert str(path) in _one_line(error) and not decoded  # refused from the header
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10**8)
    monkeypatch.setattr(decode, "MAX_DECODED_BYTES", 64 * 64 * 3 - 1)
    with pytest.raises(ImageDecodeError, match="MAX_DECODED_BYTES") as error:
        decode_image(path)
    assert "64x64" in _one_line(error) and not decoded
    monkeypatch.setattr(decode, "MAX_DECODED_BYTES", 64 * 64 * 3)  # control: at the bound it decodes
    assert decode_image(path).shape == (64, 64, 3) and decoded


def test_zero_byte_truncated_and_non_image_files_are_one_line_naming_the_file(tmp_path):
    good = tmp_path / "good.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(good, quality=90)
    png = _png(tmp_path / "good.png", np.zeros((64, 64, 3), np.uint8))
    cases = {"empty.png": b"", "cut.jpg": good.read_bytes()[:-300], "cut.png": png.read_bytes()[:60],
             "notes.png": b"not an image at all"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ImageDecodeError) as error:
            decode_image(tmp_path / name)
        assert name in _one_line(error), name
    with pytest.raises(ImageDecodeError, match="not a regular file"):
        decode_image(tmp_path)
    assert decode_image(good).shape == (64, 64, 3) and decode_image(png).shape == (64, 64, 3)  # controls


def test_exif_orientation_is_applied(tmp_path):
    array = np.zeros((20, 40, 3), np.uint8)
    array[:, :10] = 255  # a white band on the left
    for orientation, shape in ((6, (40, 20, 3)), (1, (20, 40, 3))):  # 6: rotated 90 degrees; 1: upright (control)
        exif = Image.Exif()
        exif[0x0112] = orientation
        path = tmp_path / f"o{orientation}.jpg"
        Image.fromarray(array).save(path, exif=exif, quality=95)
        assert decode_image(path).shape == shape


def test_modes_alpha_and_16_bit(tmp_path):
    sixteen = _png(tmp_path / "deep.png", np.full((8, 8), 65535, np.uint16))
    assert decode_image(sixteen).min() == 255  # scaled, and not clipped: 65535 -> 255
    half = _png(tmp_path / "half.png", np.full((8, 8), 32896, np.uint16))
    assert decode_image(half).max() == 128
    rgba = _png(tmp_path / "rgba.png", np.dstack([np.full((8, 8, 3), 10, np.uint8), np.zeros((8, 8), np.uint8)]))
    assert decode_image(rgba).shape == (8, 8, 3) and decode_image(rgba).max() == 10  # alpha dropped, as files are
    palette = Image.fromarray(np.full((8, 8, 3), 200, np.uint8)).convert("P")
    palette.save(tmp_path / "p.png")
    grey = _png(tmp_path / "l.png", np.full((8, 8), 7, np.uint8))
    assert decode_image(tmp_path / "p.png").shape == (8, 8, 3) and (decode_image(grey) == 7).all()
    caller = Image.open(grey)
    decode_image(caller)
    assert caller.size == (8, 8) and caller.getpixel((0, 0)) == 7  # a caller's PIL image stays open


def test_torch_tensors_are_channels_first_numpy_arrays_keep_their_rule():
    values = np.arange(900, dtype=np.uint8).reshape(3, 100, 3)
    rgb = load_image_rgb(torch.from_numpy(values))
    np.testing.assert_array_equal(rgb, np.moveaxis(values, 0, -1))  # torch's convention: (channels, height, width)
    with pytest.raises(ValueError, match="ambiguous"):  # control: an ambiguous numpy array still asks for the layout
        load_image_rgb(values)
    assert load_image_rgb(torch.zeros(100, 100, 3, dtype=torch.uint8)).shape == (100, 100, 3)  # channels last


# ------------------------------------------------------------------------------------------------ enumeration
def test_inputs_are_enumerated_once_with_one_suffix_list(tmp_path):
    photos = _images(tmp_path / "photos", "a.png", "b.JPG", "c.tif")
    (photos / "notes.txt").write_text("x")
    (photos / "clip.mp4").write_bytes(b"0")
    (tmp_path / "nested" / "inner").mkdir(parents=True)
    skipped = []
    images, videos = collect_files([str(photos), str(photos / "a.png"), str(tmp_path / "missing.png"),
                                    "https://example.com/a.png", str(tmp_path / "nested")],
                                   lambda entry, reason: skipped.append((Path(entry).name, reason)))
    assert [p.name for p in images] == ["a.png", "b.JPG", "c.tif"] and [p.name for p in videos] == ["clip.mp4"]
    assert [name for name, _ in skipped] == ["missing.png", "a.png", "nested"]  # the URL's name is its last part
    assert "inner" in skipped[-1][1]  # a folder without images names its subfolders
    assert {".png", ".jpg", ".tif"} <= IMAGE_SUFFIXES and ".txt" not in IMAGE_SUFFIXES
    assert not is_dataset_folder(photos)
    (photos / "dataset_info.json").write_text("{}")
    assert is_dataset_folder(photos)


def test_output_names_are_injective_and_avoid_reserved_entries(tmp_path):
    paths = [tmp_path / "x" / "a.png", tmp_path / "x" / "a.jpg", tmp_path / "y" / "a.png", tmp_path / "b.png"]
    names = output_names([(p, ("_seg.png",)) for p in paths], reserved=("b_seg.png",))
    assert len(set(names)) == 4 and names[0] != "a" and names[3] == "b.png"
    assert output_names([(tmp_path / "c.png", ("_seg.png",))]) == ["c"]  # control: no clash, the stem


def test_out_equal_to_or_inside_the_inputs_is_refused(tmp_path, capsys):
    photos = _images(tmp_path / "photos", "a.png")
    for out, what in ((photos, "an input folder"), (photos, "the folder of the input")):
        inputs = [str(photos)] if what == "an input folder" else [str(photos / "a.png")]
        with pytest.raises(ValueError, match=f"--out {out} is {what}") as error:
            check_out_not_in_inputs(out, inputs, [photos / "a.png"])
        _one_line(error)
    check_out_not_in_inputs(photos / "out", [str(photos)], [photos / "a.png"])  # control: a subfolder is fine
    model = save_tiny_model(tmp_path, "seg")
    assert main(["seg", str(photos), "--model", str(model), "--out", str(photos), *RUN]) == 2
    assert "is an input folder" in capsys.readouterr().err
    assert sorted(p.name for p in photos.iterdir()) == ["a.png"]  # nothing of the user's touched


# -------------------------------------------------------------------------------------------- resume and records
def test_resume_markers_match_fingerprint_and_files(tmp_path):
    source = _images(tmp_path / "in", "a.png") / "a.png"
    out = tmp_path / "out"
    (out / "a_seg.png").parent.mkdir(parents=True)
    (out / "a_seg.png").write_bytes(b"x")
    markers = ResumeMarkers(out, "images")
    expected = {**file_fingerprint(source), "options": {"dtype": "float32"}}
    assert not markers.is_done("a", expected)
    markers.mark_done("a", expected, [out / "a_seg.png"])
    assert markers.is_done("a", expected)  # control: the same facts
    assert not markers.is_done("a", {**expected, "options": {"dtype": "bfloat16"}})  # other options
    assert not ResumeMarkers(out, "images", "pose3d").is_done("a", expected)  # another run's markers are apart
    os.utime(source, ns=(0, 0))
    assert not markers.is_done("a", {**file_fingerprint(source), "options": {"dtype": "float32"}})  # input changed
    (out / "a_seg.png").unlink()
    assert not markers.is_done("a", expected)  # an output is missing
    markers.clear("a")
    assert not markers.path("a").exists()


def test_two_runs_of_two_tasks_keep_each_others_records(tmp_path):
    out = tmp_path / "out"
    for task, processed in (("seg", 2), ("normal", 1)):
        report = RunReport(processed=processed)
        write_summary({"task": task, "processed": report.processed, "skipped": []}, out / "summary.json",
                      [str(tmp_path / "in")], run=task)
    folder_record = json.loads((out / "summary.json").read_text())
    assert folder_record["task"] == "normal" and folder_record["runs"] == 2
    assert set(folder_record["run_records"]) == {"seg", "normal"}
    own = {task: json.loads((out / path).read_text()) for task, path in folder_record["run_records"].items()}
    assert own["seg"]["processed"] == 2 and own["normal"]["processed"] == 1


def test_a_multi_image_run_skips_a_refused_image_and_keeps_the_others(tmp_path, capsys):
    photos = _images(tmp_path / "photos", "a.png")
    _png(photos / "one.png", np.full((1, 1, 3), 9, np.uint8))
    _png(photos / "strip.png", np.zeros((3, 300, 3), np.uint8))
    _png(photos / "long.png", np.zeros((2, 20000, 3), np.uint8))
    model = save_tiny_model(tmp_path, "seg")
    out = tmp_path / "out"
    assert main(["seg", str(photos), "--model", str(model), "--out", str(out), *RUN]) == 1  # documented: 1 = skipped
    err = capsys.readouterr().err
    assert f"skipped {photos / 'long.png'}: " in err and "MAX_ASPECT_RATIO" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processed"] == 3 and [Path(s["input"]).name for s in summary["skipped"]] == ["long.png"]
    assert (out / "one_seg.png").is_file() and (out / "strip_seg.png").is_file()
    assert (out / ".sapiens2-hf" / "runs" / "seg.json").is_file()


# ----------------------------------------------------------------------------------------------------- the lock
HOLD = """import sys
from sapiens2_hf.utils.run_lock import run_folder_lock
with run_folder_lock(sys.argv[1], command="holder"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_killed_holder_leaves_a_lock_the_next_run_takes_over(tmp_path, caplog):
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderLockedError, match=f"pid {holder.pid} "):  # control: a live holder refuses
            with run_folder_lock(folder):
                pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert read_lock(folder)["pid"] == holder.pid  # the killed run could not remove its file
    with caplog.at_level(logging.WARNING, logger="sapiens2_hf.utils.run_lock"):
        with run_folder_lock(folder):
            assert read_lock(folder)["pid"] == os.getpid()
    assert any(f"pid {holder.pid}" in record.getMessage() for record in caplog.records)
    assert not (folder / LOCK_FILE).exists()


# -------------------------------------------------------------------------------------------------- libraries
def test_box_iou_is_torchvisions_with_zero_for_empty_boxes():
    a = np.array([[0, 0, 10, 10], [5, 5, 5, 5]], float)
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [1, 1, 1, 1]], float)
    np.testing.assert_allclose(box_iou(a, b), [[1.0, 1 / 3, 0.0], [0.0, 0.0, 0.0]])
    assert box_iou(np.zeros((0, 4)), b).shape == (0, 3)


def test_the_decoder_reads_what_the_pipelines_read(tmp_path):
    """Control for the move of file reading into the run layer: a PNG decodes to the array the pipelines' loader
    gives for the same file."""
    array = np.random.default_rng(1).integers(0, 256, (33, 47, 3), dtype=np.uint8)
    path = _png(tmp_path / "p.png", array)
    np.testing.assert_array_equal(decode_image(path), load_image_rgb(str(path)))
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, "PNG")
    np.testing.assert_array_equal(decode_image(buffer.getvalue()), array)
