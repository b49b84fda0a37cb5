"""Hostile inputs to the `sapiens2-hf` commands (issue 20, items 3, 4, 7 and 13): crafted folders, file names,
configs and options, a full disk. Each case asserts a correct result or one error line with exit code 2 (argument
errors: argparse's usage and one error line), never a traceback; every case that could block (a FIFO) runs in a
child process with a timeout.

| case | before | after |
|---|---|---|
| `--out` = the input folder | overwrote the user's `x_seg.png`, reran on its own outputs | refused, one line |
| inputs `a.jpg`, `a.png`, `a_1.png` | two named `a_1`: outputs lost, resume never converged | `a.jpg`, `a.png`, `a_1` |
| full disk | computed every input, lost the skipped list | stops at once, summary lists the rest |
| config values, JSON list or nesting, zero sizes, convert on a full disk | traceback | one line |
| `--threads 100000`, `--kpt-threshold nan` | segfault, accepted | argument errors |
| a FIFO input or `--boxes`, a URL input | hung, mangled path | skipped or refused, one line |
| a missing local `--model ./x` | a repo-id error from the Hub client | "no such file or folder" |
"""

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sapiens2_hf.predict import run as predict_run
from sapiens2_hf.runs.errors import is_expected_error
from sapiens2_hf.cli.main import main
from sapiens2_hf.utils import atomic_io

from model_folders import save_tiny_model
from model_folders import write_images as _images

pytestmark = pytest.mark.usefixtures("one_thread")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
RUN = ["--device", "cpu", "--quiet", "--threads", "1"]


@pytest.fixture(scope="module")
def seg_model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("models"), "seg")


def _one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sapiens2-hf {command}: error: "), err
    return lines[0]


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


# ---------------------------------------------------------------------------------------------------------------
# item 3: --out among the inputs
# ---------------------------------------------------------------------------------------------------------------


def test_out_equal_to_the_input_folder_is_refused_and_nothing_is_touched(tmp_path, seg_model, capsys):
    photos = _images(tmp_path / "photos", "x.png")
    (photos / "x_seg.png").write_bytes(b"the user's own file")
    before = sorted(p.name for p in photos.iterdir())
    for inputs, out in ([str(photos)], photos), ([str(photos / "x.png")], photos), ([str(photos)], tmp_path / "."
                                                                                     / "photos"):
        assert main(["seg", *inputs, "--model", str(seg_model), "--out", str(out), *RUN]) == 2
        line = _one_line_error(capsys, "seg")
        assert "would mix with the inputs" in line and "sapiens2-hf-out" in line, line
    assert (photos / "x_seg.png").read_bytes() == b"the user's own file"
    assert sorted(p.name for p in photos.iterdir()) == before  # no summary, no state folder


def test_out_inside_an_input_folder_works_and_a_rerun_reads_no_outputs(tmp_path, seg_model, capsys):
    """Control: a subfolder is fine (folders are not read recursively); the rerun finds everything done."""
    photos = _images(tmp_path / "photos", "x.png", "y.jpg")
    out = photos / "results"
    for run in range(2):
        assert main(["seg", str(photos), "--model", str(seg_model), "--out", str(out), *RUN]) == 0
        summary = _summary(out)
        assert (summary["processed"], summary["already_done"]) == ((2, 0) if run == 0 else (0, 2))
    assert sorted(p.name for p in photos.iterdir()) == ["results", "x.png", "y.jpg"]
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == [
        "summary.json", "x_seg.npy", "x_seg.png", "y_seg.npy", "y_seg.png"]


# ---------------------------------------------------------------------------------------------------------------
# item 4: one output name per input
# ---------------------------------------------------------------------------------------------------------------


def _alone(tmp_path, seg_model, source: Path) -> np.ndarray:
    """The segmentation of `source` run on its own (named by its stem)."""
    out = tmp_path / f"alone_{source.parent.name}_{source.name}"
    assert main(["seg", str(source), "--model", str(seg_model), "--out", str(out), *RUN]) == 0
    return np.load(out / f"{source.stem}_seg.npy")


def test_colliding_names_keep_every_input_and_resume_converges(tmp_path, seg_model, capsys):
    photos = _images(tmp_path / "photos", "a.jpg", "a.png", "a_1.png")
    out = tmp_path / "out"
    assert main(["seg", str(photos), "--model", str(seg_model), "--out", str(out), *RUN]) == 0
    summary = _summary(out)
    assert summary["processed"] == 3 and summary["files_written"] == 6
    assert summary["output_names"] == {str(photos / "a.jpg"): "a.jpg", str(photos / "a.png"): "a.png"}
    for name, output in (("a.jpg", "a.jpg"), ("a.png", "a.png"), ("a_1.png", "a_1")):
        assert np.array_equal(np.load(out / f"{output}_seg.npy"), _alone(tmp_path, seg_model, photos / name)), name
    assert main(["seg", str(photos), "--model", str(seg_model), "--out", str(out), *RUN]) == 0
    assert (_summary(out)["processed"], _summary(out)["already_done"]) == (0, 3)  # resume converges


def test_the_same_file_name_in_two_folders(tmp_path, seg_model, capsys):
    one, two = _images(tmp_path / "one", "a.png", seed=1), _images(tmp_path / "two", "a.png", seed=2)
    out = tmp_path / "out"
    assert main(["seg", str(one), str(two), str(one / "a.png"), "--model", str(seg_model), "--out", str(out),
                 *RUN]) == 0
    summary = _summary(out)
    assert summary["processed"] == 2  # the file given twice is processed once
    names = summary["output_names"]
    assert sorted(names) == [str(one / "a.png"), str(two / "a.png")] and len(set(names.values())) == 2
    for source, name in names.items():
        assert name.startswith("a.png-")
        assert np.array_equal(np.load(out / f"{name}_seg.npy"), _alone(tmp_path, seg_model, Path(source)))


def test_output_names_are_injective_and_keep_unique_stems(tmp_path):
    paths = lambda *names: [tmp_path / name for name in names]  # noqa: E731
    # unique stems keep their names (as before); images and videos with the same stem write different entries
    assert predict_run.output_names(paths("a.png", "b.jpg"), paths("a.mp4")) == (["a", "b"], ["a"])
    images = paths("a.jpg", "a.png", "a_1.png", "A.bmp", "summary.png", "x.png")
    image_names, video_names = predict_run.output_names(images, paths("x_seg.png.mp4", ".sapiens2-hf.avi"))
    assert image_names[:3] == ["a.jpg", "a.png", "a_1"]
    assert image_names[3] == "A.bmp"  # `A_seg.png` and `a_seg.png` are one file on case-insensitive systems
    assert image_names[4] == "summary.png"  # pose's `summary.json` would be the run's summary
    assert image_names[5] == "x.png" and video_names == ["x_seg.png.mp4", ".sapiens2-hf.avi"]
    entries = [name + suffix for name in image_names for suffix in predict_run.image_output_suffixes()]
    entries += [name + suffix for name in video_names for suffix in predict_run.VIDEO_OUTPUT_SUFFIXES]
    assert len({entry.casefold() for entry in entries}) == len(entries)
    assert not {entry.casefold() for entry in entries} & {"summary.json", ".sapiens2-hf"}
    # the names do not depend on the order of the inputs
    assert predict_run.output_names(images[::-1], [])[0] == predict_run.output_names(images, [])[0][::-1]


# ---------------------------------------------------------------------------------------------------------------
# item 7: a full disk
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def full_disk(monkeypatch):
    """`full_disk(keep)`: every atomic write fails with ENOSPC except those whose target name is in `keep`; returns
    the list of pipeline calls, which the run appends to."""
    calls = []
    predict = predict_run.predict_images
    monkeypatch.setattr(predict_run, "predict_images",
                        lambda *args, **kwargs: calls.append(1) or predict(*args, **kwargs))
    import sapiens2_hf.predict.video as video_cli

    monkeypatch.setattr(video_cli, "predict_images", predict_run.predict_images)

    def install(keep=()):
        sibling = atomic_io._temporary_sibling

        def failing(path):
            if path.name in keep:
                return sibling(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

        monkeypatch.setattr(atomic_io, "_temporary_sibling", failing)
        return calls

    return install


@pytest.mark.parametrize("summary_fits", [True, False])
def test_a_full_disk_stops_the_run_and_keeps_the_lists(tmp_path, seg_model, full_disk, summary_fits, capsys):
    photos = _images(tmp_path / "photos", "a.png", "b.png", "c.png")
    out = tmp_path / "out"
    calls = full_disk(keep=("summary.json",) if summary_fits else ())
    assert main(["seg", str(photos), "--model", str(seg_model), "--out", str(out), "--batch-size", "1", *RUN]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "No space left on device" in err.splitlines()[-1]
    assert len(calls) == 1  # it stopped at the first failed write instead of computing b and c
    assert "stopped with 0 image(s) written, 1 input(s) skipped and 2 not processed" in err.splitlines()[-1]
    not_processed = [str(photos / "b.png"), str(photos / "c.png")]
    if summary_fits:
        summary = _summary(out)
        assert [entry["input"] for entry in summary["skipped"]] == [str(photos / "a.png")]
        assert summary["not_processed"] == not_processed and "No space left" in summary["stopped"]
        assert len(err.strip().splitlines()) == 1
    else:
        assert not (out / "summary.json").exists()
        assert f"skipped {photos / 'a.png'}: " in err and all(f"not processed {p}" in err for p in not_processed)
    assert not list(out.rglob("*.tmp"))


def test_a_full_disk_stops_a_video(tmp_path, seg_model, full_disk, capsys):
    cv2 = pytest.importorskip("cv2")
    pytest.importorskip("av")
    video = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 5, (48, 32))
    for k in range(12):
        writer.write(np.full((32, 48, 3), 20 * k, np.uint8))
    writer.release()
    out = tmp_path / "out"
    calls = full_disk(keep=("summary.json",))
    assert main(["seg", str(video), "--model", str(seg_model), "--out", str(out), "--batch-size", "1", *RUN]) == 2
    assert "No space left on device" in _one_line_error(capsys, "seg")
    summary = _summary(out)
    assert [entry["input"] for entry in summary["skipped"]] == [str(video)]
    assert "No space left" in summary["skipped"][0]["reason"] and summary["not_processed"] == []
    # the writer thread's failure stops the frames within a batch or two (12 without the fix)
    assert len(calls) < 12 and not (out / "clip.mp4").exists() and not list(out.rglob("*.tmp"))


def test_a_full_disk_in_convert_is_one_line(tmp_path, load_case, monkeypatch, capsys):
    from safetensors import SafetensorError

    import transformers.modeling_utils

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)
    _, _, weights = load_case("seg")
    assert main(["convert", str(weights), "--out", str(tmp_path / "converted"), "--threads", "1"]) == 2
    assert "No space left on device" in _one_line_error(capsys, "convert")
    assert not (tmp_path / "converted").exists()


# ---------------------------------------------------------------------------------------------------------------
# item 13: one line instead of a traceback
# ---------------------------------------------------------------------------------------------------------------


CONFIGS = {
    "a string size": (lambda config: {**config, "hidden_size": "32"}, "hidden_size"),
    "zero heads": (lambda config: {**config, "num_attention_heads": 0}, "num_attention_heads"),
    "an unknown RoPE dtype": (lambda config: {**config, "rope_dtype": "float16"}, "rope_dtype"),
    "a JSON list": (lambda config: [config], "must hold a JSON object, not a list"),
    "deep nesting": (lambda config: "[" * 100000 + "]" * 100000, "nests JSON deeper than"),
    "moderate nesting": (lambda config: {**config, "extra": json.loads("[" * 500 + "]" * 500)}, "nests JSON deeper"),
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_broken_config_is_one_line(case, tmp_path, seg_model, capsys):
    mutate, expected = CONFIGS[case]
    model = tmp_path / "model"
    shutil.copytree(seg_model, model)
    changed = mutate(json.loads((model / "config.json").read_text()))
    (model / "config.json").write_text(changed if isinstance(changed, str) else json.dumps(changed))
    image = _images(tmp_path / "photos", "x.png")
    assert main(["seg", str(image), "--model", str(model), "--out", str(tmp_path / "out"), *RUN]) == 2
    assert expected in _one_line_error(capsys, "seg")


def test_zero_size_tensors_in_an_official_file_are_one_line(tmp_path, load_case, capsys):
    from safetensors.torch import load_file, save_file

    _, _, weights = load_case("seg")
    empty = tmp_path / "sapiens2_tinyb_seg.safetensors"
    save_file({name: torch.zeros((0,) * tensor.ndim) for name, tensor in load_file(weights).items()}, empty)
    assert main(["convert", str(empty), "--out", str(tmp_path / "converted"), "--threads", "1"]) == 2
    line = _one_line_error(capsys, "convert")
    assert "(ZeroDivisionError at " in line or "shape" in line, line  # where loading divides, or its own check


@pytest.mark.parametrize("argv, expected", [
    (["seg", "x.png", "--model", "./missing", "--out", "o"], "--model ./missing: no such file or folder."),
    (["seg", "x.png", "--model", "models/missing/seg", "--out", "o"], "no such file or folder"),
    (["seg", "x.png", "--model", "sapiens2_1b_seg.safetensors", "--out", "o"], "no such file or folder"),
    (["convert", "./sapiens2_1b_seg.safetensors", "--out", "o"], "./sapiens2_1b_seg.safetensors: no such file"),
    (["export", "../missing", "--out", "o"], "../missing: no such file or folder"),
    (["merge", "/no/adapter", "--out", "o"], "/no/adapter: no such file or folder"),
])
def test_a_missing_local_path_is_not_a_hub_id(argv, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _images(tmp_path, "x.png")
    assert main([*argv, "--threads", "1"]) == 2
    assert expected in _one_line_error(capsys, argv[0])
    assert not (tmp_path / "o").exists()


def test_a_hub_id_still_goes_to_the_hub(tmp_path, monkeypatch, capsys):
    """Control: `namespace/name` is a Hub id (offline here: the Hub client's error, not 'no such file')."""
    monkeypatch.chdir(tmp_path)
    _images(tmp_path, "x.png")
    assert main(["seg", "x.png", "--model", "someone/not-a-cached-repo", "--out", "o", *RUN]) == 2
    line = _one_line_error(capsys, "seg")
    assert "no such file" not in line and "someone/not-a-cached-repo" in line


@pytest.mark.parametrize("option, value", [("--threads", "100000"), ("--kpt-threshold", "nan"),
                                           ("--detector-threshold", "inf"), ("--kpt-threshold", "-inf")])
def test_options_are_checked_when_parsed(option, value, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing of a run may land in the checkout
    with pytest.raises(SystemExit) as exit:
        main(["pose", "x.png", "--model", "m", "--out", "o", f"{option}={value}"])  # = for "-inf"
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"sapiens2-hf pose: error: argument {option}: {value} is ")


def test_intrinsics_must_be_finite(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        main(["pointmap", "x.png", "--model", "m", "--out", "o", "--intrinsics", "500", "nan", "1", "1"])
    assert exit.value.code == 2 and "nan is not a finite number" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before the run starts


def test_threads_up_to_the_cap_are_accepted():
    """Control: the cap is 4 x the machine's CPUs; that many threads still parse."""
    from sapiens2_hf.cli import threads
    from sapiens2_hf.cli.main import build_parser

    argv = ["seg", "x.png", "--model", "m", "--out", "o", "--threads", str(threads.max_threads())]
    args = build_parser().parse_args(argv)
    assert args.threads == 4 * (os.cpu_count() or 1)


def test_a_url_input_is_skipped_with_its_reason(tmp_path, seg_model, capsys):
    image = _images(tmp_path / "photos", "x.png")
    out = tmp_path / "out"
    url = "http://127.0.0.1:9/never.jpg"
    assert main(["seg", url, str(image / "x.png"), "--model", str(seg_model), "--out", str(out), *RUN]) == 1
    assert _summary(out)["skipped"] == [{"input": url, "reason": "a URL: the command reads local files only "
                                                                 "(download it first)"}]
    assert _summary(out)["processed"] == 1


def _cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    code = "import sys; from sapiens2_hf.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=ENV, cwd=cwd,
                          timeout=300)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_fifos_are_refused_instead_of_blocking(tmp_path, seg_model):
    """One child: a FIFO as an input (skipped), then a FIFO as --boxes and as the model (one line each); nothing
    ever writes to them, so a read would block until the timeout."""
    os.mkfifo(tmp_path / "pipe.png")
    os.mkfifo(tmp_path / "boxes.json")
    os.mkfifo(tmp_path / "pipe.safetensors")
    _images(tmp_path, "x.png")
    result = _cli(["seg", "pipe.png", "x.png", "--model", str(seg_model), "--out", "out", *RUN], tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "skipped pipe.png: not a regular file (a FIFO, socket or device): not read" in result.stderr
    assert _summary(tmp_path / "out")["processed"] == 1
    for argv, expected in ((["pose", "x.png", "--model", str(seg_model), "--boxes", "boxes.json"], "--boxes"),
                           (["seg", "x.png", "--model", "pipe.safetensors"], "--model")):
        result = _cli([*argv, "--out", "out2", *RUN], tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
        assert lines[0].endswith("is not a regular file or folder (a FIFO, socket or device); it is not read.")
        assert expected in lines[0]


# ---------------------------------------------------------------------------------------------------------------
# the error mapping itself (cli/main.py)
# ---------------------------------------------------------------------------------------------------------------


def _raised(error: BaseException, cause: BaseException | None = None) -> BaseException:
    try:
        raise error from cause
    except BaseException as caught:  # noqa: BLE001 - kept for inspection
        return caught


def test_library_errors_wrapping_ours_are_expected_and_bugs_are_not():
    from huggingface_hub.errors import StrictDataclassFieldValidationError
    from safetensors import SafetensorError

    assert is_expected_error(_raised(RuntimeError("wrapped"), ValueError("bad value")))
    assert is_expected_error(_raised(RuntimeError("outer"), _raised(KeyError("middle"), OSError("disk"))))
    assert is_expected_error(StrictDataclassFieldValidationError(field="hidden_size", cause=TypeError("expected int")))
    assert is_expected_error(SafetensorError("Error while deserializing header: HeaderTooLarge"))
    assert is_expected_error(ZeroDivisionError("integer modulo by zero"))
    # controls: a bug, also one raised while handling (not from) a ValueError, keeps its traceback
    assert not is_expected_error(RuntimeError("bug"))
    assert not is_expected_error(_raised(TypeError("bug"), KeyError("also a bug")))
    try:
        try:
            raise ValueError("handled")
        except ValueError:
            raise RuntimeError("bug while handling")  # noqa: B904 - the implicit context is the point
    except RuntimeError as error:
        assert not is_expected_error(error)


def test_arithmetic_errors_say_where_they_were_raised(monkeypatch, capsys):
    import sapiens2_hf.cli.merge as merge_cli

    def handler(args):
        return 1 // 0

    monkeypatch.setattr(merge_cli, "run_merge", handler)
    assert main(["merge", "adapter", "--out", "o", "--threads", "1"]) == 2
    line = _one_line_error(capsys, "merge")
    assert "(ZeroDivisionError at test_hostile_inputs_cli.py:" in line and "in handler" in line, line
