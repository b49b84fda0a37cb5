"""Ranges and types of every option and argument, and library errors as our one-line errors ("Nothing silent, round
two"). Each case asserts the refusal (a ValueError or OSError naming the input and the fix, which the command line
prints as one line with exit code 2, or an argparse error) and a control that the valid value still works.

| case | before | after |
|---|---|---|
| `device="cuda"` / `"mps"` lacking, `device=0` on a CPU | torch's RuntimeError; 0 ran on the CPU | one line, the fix |
| `device="banana"` | torch's RuntimeError (a traceback on the command line) | one line naming it |
| `dtype="banana"` | transformers fell back to float32 with a note | refused, naming float32, float16, bfloat16, auto |
| `--kpt-threshold 2`, `--track-iou 2`, `--batch-size 0`, `--intrinsics 0 ...` | accepted | argument errors |
| `image_std=[0, 0, 0]`, NaN mean, wrong length | -inf pixel values | refused when the processor is made or loaded |
| a (3, 100, 3) array | read as (height 3, width 100) without a word | refused unless `input_data_format` is given |
| a 0x0 array | OpenCV assertion | one line naming the shape |
| PIL mode "La" | PIL's "conversion from La to L not supported" | converted |
| a `--boxes` key with a typo | "needs a person detector ... could not be loaded" | the key, image, closest name |
| a URL to a closed port | httpx's ConnectError | one line naming the URL |
| `merge` of a model folder | a Hub repo-id error | "has no adapter_config.json" |
"""

import json
import re

import numpy as np
import pytest
import torch
import transformers
from PIL import Image

import sapiens2_hf
from sapiens2_hf.predict.options import predict_options
from sapiens2_hf.predict.run import check_boxes_keys
from sapiens2_hf.runs.errors import error_message, is_expected_error
from sapiens2_hf.cli.main import build_parser, main
from sapiens2_hf.processing import Sapiens2HFImageProcessor, load_image_rgb

from model_folders import save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")
RUN = ["--device", "cpu", "--quiet", "--threads", "1"]


@pytest.fixture(scope="module")
def seg_model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("models"), "seg")


@pytest.fixture(scope="module")
def pose_model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("models"), "pose")


@pytest.fixture
def no_accelerator(monkeypatch):
    """This machine as one without CUDA or MPS, whatever it has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def _image(folder, name="a.png", seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(folder / name)
    return folder / name


def _one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sapiens2-hf {command}: error: "), err
    return lines[0]


def _argument_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# ---------------------------------------------------------------------------------------------------------------
# 1. devices this machine does not have
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "mps", 0])
@pytest.mark.parametrize("factory", [sapiens2_hf.pipeline, transformers.pipeline], ids=["ours", "transformers"])
def test_a_device_this_machine_lacks_is_one_line_naming_it(factory, device, seg_model, no_accelerator):
    with pytest.raises(ValueError) as error:
        factory("sapiens2-segmentation", model=str(seg_model), device=device)
    message = str(error.value)
    assert f"device={device!r}" in message and "not available here" in message and "device='cpu'" in message
    assert "\n" not in message


@pytest.mark.parametrize("factory", [sapiens2_hf.pipeline, transformers.pipeline], ids=["ours", "transformers"])
def test_an_unknown_device_is_one_line(factory, seg_model):
    with pytest.raises(ValueError, match=r"device='banana' is not a device.*'cpu'"):
        factory("sapiens2-segmentation", model=str(seg_model), device="banana")


@pytest.mark.parametrize("device", ["cpu", -1, torch.device("cpu")])
def test_the_cpu_still_works_as_a_device(device, seg_model, no_accelerator):
    pipe = sapiens2_hf.pipeline("sapiens2-segmentation", model=str(seg_model), device=device)
    assert pipe.device == torch.device("cpu")
    assert pipe(np.zeros((20, 10, 3), np.uint8))["segmentation"].shape == (20, 10)


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_cli_device_this_machine_lacks_is_one_line(tmp_path, seg_model, no_accelerator, device, capsys):
    image = _image(tmp_path / "in")
    code = main(["seg", str(image), "--model", str(seg_model), "--out", str(tmp_path / "out"), "--quiet",
                 "--threads", "1", "--device", device])
    line = _one_line_error(capsys, "seg")
    assert code == 2
    assert f"--device {device} is not available here" in line and "--device cpu" in line


@pytest.mark.parametrize("device", ["banana", "0", "cuda:x", ""])
def test_cli_device_that_is_not_one_is_an_argument_error(tmp_path, device, capsys):
    line = _argument_error(capsys, ["seg", "x.png", "--model", "m", "--out", str(tmp_path), "--device", device])
    assert f"--device: {device!r} is not a device" in line


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:1", "mps"])
def test_cli_device_names_still_parse(tmp_path, device):
    args = build_parser().parse_args(["seg", "x.png", "--model", "m", "--out", str(tmp_path), "--device", device])
    assert args.device == device


# ---------------------------------------------------------------------------------------------------------------
# 2. dtype names
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("factory", [sapiens2_hf.pipeline, transformers.pipeline], ids=["ours", "transformers"])
@pytest.mark.parametrize("dtype", ["banana", "float64", 3])
def test_an_unknown_dtype_is_refused_with_the_accepted_names(factory, dtype, seg_model):
    with pytest.raises(ValueError) as error:
        factory("sapiens2-segmentation", model=str(seg_model), dtype=dtype)
    message = str(error.value)
    assert f"dtype={dtype!r}" in message or f"dtype=torch.{dtype}" in message  # transformers turns a name it knows
    assert all(name in message for name in ("float32", "float16", "bfloat16", "auto")), message


@pytest.mark.parametrize("dtype, expected", [("bfloat16", torch.bfloat16), ("auto", torch.float32),
                                             (torch.float16, torch.float16), ("bf16", torch.bfloat16)])
def test_accepted_dtypes_still_load(dtype, expected, seg_model):
    assert sapiens2_hf.pipeline("sapiens2-segmentation", model=str(seg_model), dtype=dtype).model.dtype == expected


# ---------------------------------------------------------------------------------------------------------------
# 3. option ranges
# ---------------------------------------------------------------------------------------------------------------


PROBABILITY_OPTIONS = [("pose", "--kpt-threshold"), ("pose", "--detector-threshold"), ("pose", "--track-iou")]
SIZE_OPTIONS = [("seg", "--batch-size"), ("seg", "--video-stride"), ("seg", "--max-frames"),
                ("pose", "--detect-every")]


@pytest.mark.parametrize("task, option", PROBABILITY_OPTIONS)
@pytest.mark.parametrize("value", ["2", "-0.1", "1.0001", "nan"])
def test_probability_options_outside_0_1_are_argument_errors(tmp_path, task, option, value, capsys):
    line = _argument_error(capsys, [task, "x.png", "--model", "m", "--out", str(tmp_path), option, value])
    assert f"argument {option}" in line and (value in line)


@pytest.mark.parametrize("task, option", PROBABILITY_OPTIONS)
@pytest.mark.parametrize("value", ["0", "0.5", "1"])
def test_probability_options_inside_0_1_parse(tmp_path, task, option, value):
    args = build_parser().parse_args([task, "x.png", "--model", "m", "--out", str(tmp_path), option, value])
    assert getattr(args, option[2:].replace("-", "_")) == float(value)


@pytest.mark.parametrize("task, option", SIZE_OPTIONS)
@pytest.mark.parametrize("value", ["0", "-1", "1.5"])
def test_size_options_below_one_are_argument_errors(tmp_path, task, option, value, capsys):
    line = _argument_error(capsys, [task, "x.png", "--model", "m", "--out", str(tmp_path), option, value])
    assert f"argument {option}" in line


@pytest.mark.parametrize("task, option", SIZE_OPTIONS)
def test_size_options_of_one_parse(tmp_path, task, option):
    args = build_parser().parse_args([task, "x.png", "--model", "m", "--out", str(tmp_path), option, "1"])
    assert getattr(args, option[2:].replace("-", "_")) == 1


def test_the_app_options_are_checked_as_the_command_line_checks_them():
    with pytest.raises(ValueError, match=r"kpt_threshold=2.*\[0, 1\]"):
        predict_options("pose", "m", "out", kpt_threshold=2)
    with pytest.raises(ValueError, match=r"batch_size=0"):
        predict_options("seg", "m", "out", batch_size=0)
    assert predict_options("pose", "m", "out", kpt_threshold=0.7).output.kpt_threshold == 0.7


@pytest.mark.parametrize("intrinsics", [["0", "10", "5", "5"], ["10", "-1", "5", "5"]])
def test_intrinsics_with_a_focal_length_not_positive_is_a_usage_error(tmp_path, intrinsics, capsys):
    image = _image(tmp_path / "in")
    code = main(["pointmap", str(image), "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "out"),
                 *RUN, "--intrinsics", *intrinsics])
    line = _one_line_error(capsys, "pointmap")
    assert code == 2 and "--intrinsics" in line and "FX and FY must be positive" in line


# ---------------------------------------------------------------------------------------------------------------
# 4. normalisation constants
# ---------------------------------------------------------------------------------------------------------------


BAD_NORMALISATION = [
    ({"image_std": [0.0, 0.0, 0.0]}, "image_std"), ({"image_std": [0.2, -0.2, 0.2]}, "image_std"),
    ({"image_std": 0.0}, "image_std"), ({"image_mean": [float("nan"), 0.4, 0.4]}, "image_mean"),
    ({"image_mean": [0.4, float("inf"), 0.4]}, "image_mean"), ({"image_std": [0.2, 0.2]}, "image_std"),
    ({"rescale_factor": 0.0}, "rescale_factor"),
]


@pytest.mark.parametrize("fields, name", BAD_NORMALISATION)
def test_bad_normalisation_is_refused_when_the_processor_is_made(fields, name):
    with pytest.raises(ValueError, match=rf"^{name}[= ]"):
        Sapiens2HFImageProcessor(task="seg", **fields)


@pytest.mark.parametrize("fields, name", BAD_NORMALISATION)
def test_bad_normalisation_is_refused_when_the_processor_is_loaded(tmp_path, fields, name):
    Sapiens2HFImageProcessor(task="seg").save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({**saved, **fields}))
    with pytest.raises(ValueError, match=rf"^{name}[= ]"):
        Sapiens2HFImageProcessor.from_pretrained(tmp_path)


def test_bad_normalisation_in_a_call_is_refused():
    processor = Sapiens2HFImageProcessor(task="seg", size={"height": 16, "width": 16})
    with pytest.raises(ValueError, match=r"^image_std="):
        processor(np.zeros((8, 8, 3), np.uint8), image_std=[0, 0, 0])


def test_valid_normalisation_still_normalises():
    processor = Sapiens2HFImageProcessor(task="seg", size={"height": 16, "width": 16}, image_mean=0.5, image_std=0.25)
    values = processor(np.full((8, 8, 3), 255, np.uint8))["pixel_values"]
    torch.testing.assert_close(values, torch.full_like(values, 2.0))  # (1 - 0.5) / 0.25


# ---------------------------------------------------------------------------------------------------------------
# 5. ambiguous channel layout
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 100, 3), (3, 3, 3), (1, 50, 4)])
@pytest.mark.parametrize("kind", [np.asarray])  # torch tensors are channels first (tests/test_runs_layer.py)
def test_an_ambiguous_channel_layout_is_refused_naming_input_data_format(shape, kind):
    image = kind(np.zeros(shape, np.uint8))
    with pytest.raises(ValueError, match=rf"shape {re.escape(str(shape))} is ambiguous.*input_data_format="):
        load_image_rgb(image)
    with pytest.raises(ValueError, match="input_data_format"):
        Sapiens2HFImageProcessor(task="seg", size={"height": 16, "width": 16})(image)


@pytest.mark.parametrize("layout, size", [("channels_first", [100, 3]), ("channels_last", [3, 100])])
@pytest.mark.parametrize("kind", [np.asarray, torch.from_numpy])
def test_input_data_format_settles_the_layout(layout, size, kind):
    image = kind(np.arange(900, dtype=np.uint8).reshape(3, 100, 3))
    processor = Sapiens2HFImageProcessor(task="seg", size={"height": 16, "width": 16})
    assert processor(image, input_data_format=layout)["original_sizes"].tolist() == [size]
    rgb = load_image_rgb(image, input_data_format=layout)
    expected = np.arange(900, dtype=np.uint8).reshape(3, 100, 3)
    np.testing.assert_array_equal(rgb, np.moveaxis(expected, 0, -1) if layout == "channels_first" else expected)


@pytest.mark.parametrize("shape, size", [((3, 100, 100), (100, 100)), ((100, 100, 3), (100, 100)),
                                         ((100, 3, 3), (100, 3)), ((5, 7), (5, 7))])
def test_unambiguous_layouts_are_still_inferred(shape, size):
    assert load_image_rgb(np.zeros(shape, np.uint8)).shape == (*size, 3)


# ---------------------------------------------------------------------------------------------------------------
# 6. empty images
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, 0, 3), (0, 5, 3), (5, 0), (0, 0), (3, 0, 7)])
def test_an_empty_image_is_one_line_naming_its_shape(shape):
    with pytest.raises(ValueError, match=r"no pixels.*at least 1x1") as error:
        Sapiens2HFImageProcessor(task="seg", size={"height": 16, "width": 16})(np.zeros(shape, np.uint8))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="no pixels"):
        load_image_rgb(torch.zeros(shape, dtype=torch.uint8))


def test_an_empty_pil_image_is_one_line():
    with pytest.raises(ValueError, match="no pixels"):
        load_image_rgb(Image.new("RGB", (0, 3)))


def test_a_one_pixel_image_still_works():
    assert load_image_rgb(np.full((1, 1), 7, np.uint8)).tolist() == [[[7, 7, 7]]]
    one_pixel = np.array([[[1, 2, 3]]], np.uint8)  # (1, 1, 3): a layout to name, as any (1|3|4, ..., 1|3|4)
    assert load_image_rgb(one_pixel, input_data_format="channels_last").tolist() == [[[1, 2, 3]]]


# ---------------------------------------------------------------------------------------------------------------
# 7. PIL modes
# ---------------------------------------------------------------------------------------------------------------


GRAY = np.arange(0, 240, 8, dtype=np.uint8).reshape(5, 6)
COLOUR = np.random.default_rng(0).integers(0, 256, (5, 6, 3), dtype=np.uint8)


def _pil_of_mode(mode: str) -> tuple[Image.Image, np.ndarray]:
    """A PIL image of `mode` and the RGB array it must give."""
    gray, colour = Image.fromarray(GRAY), Image.fromarray(COLOUR)
    grey_rgb = np.repeat(GRAY[..., None], 3, axis=-1)
    if mode in ("LA", "La"):
        return gray.convert("LA").convert(mode), grey_rgb  # opaque: premultiplying changes nothing
    if mode == "1":
        binary = GRAY >= 128
        return Image.fromarray(binary), np.repeat(binary[..., None] * np.uint8(255), 3, axis=-1)
    if mode in ("I;16", "I"):
        wide = Image.frombytes("I;16", (6, 5), (GRAY.astype("<u2") * 257).tobytes())
        return (wide if mode == "I;16" else wide.convert("I")), grey_rgb
    if mode == "F":
        return Image.fromarray(GRAY.astype(np.float32) / 255.0), grey_rgb
    if mode in ("P", "PA"):
        palette = colour.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
        image = palette if mode == "P" else palette.convert("PA")
        return image, np.asarray(palette.convert("RGB"))
    if mode == "RGBa":
        return colour.convert("RGBA").convert("RGBa"), COLOUR
    return colour.convert(mode), COLOUR  # CMYK: 255 - RGB with K = 0, an exact round trip


@pytest.mark.parametrize("mode", ["LA", "La", "P", "PA", "I;16", "I", "F", "CMYK", "1", "RGBa"])
@pytest.mark.parametrize("do_convert_rgb", [None, True])
def test_each_pil_mode_gives_its_rgb(mode, do_convert_rgb):
    image, expected = _pil_of_mode(mode)
    assert image.mode == mode
    rgb = load_image_rgb(image, do_convert_rgb)
    assert rgb.dtype == np.uint8 and rgb.shape == (5, 6, 3)
    np.testing.assert_array_equal(rgb, expected)


def test_a_translucent_la_image_composites_over_white():
    image = Image.fromarray(np.stack([np.zeros((2, 2), np.uint8), np.full((2, 2), 128, np.uint8)], -1), "LA")
    assert load_image_rgb(image.convert("La"), do_convert_rgb=True)[0, 0].tolist() == [127, 127, 127]


# ---------------------------------------------------------------------------------------------------------------
# 8. --boxes keys that match no input
# ---------------------------------------------------------------------------------------------------------------


def test_a_boxes_key_with_a_typo_names_the_image_and_the_closest_key(tmp_path, pose_model, capsys):
    photos = tmp_path / "photos"
    _image(photos, "person_one.png"), _image(photos, "b.png", seed=1)
    boxes = tmp_path / "boxes.json"
    boxes.write_text(json.dumps({"person_on.png": [[1, 1, 20, 30]], "b.png": []}))
    code = main(["pose", str(photos), "--model", str(pose_model), "--out", str(tmp_path / "out"), "--boxes",
                 str(boxes), "--no-flip-test", *RUN])
    line = _one_line_error(capsys, "pose")
    assert code == 2
    assert "person_one.png" in line and "'person_on.png' matches no input (did you mean 'person_one.png'?)" in line
    assert "detector" not in line.split(";")[0]
    assert not (tmp_path / "out" / "person_one.json").exists()


def test_boxes_keys_that_match_still_run(tmp_path, pose_model, capsys):
    photos = tmp_path / "photos"
    _image(photos, "person_one.png")
    boxes = tmp_path / "boxes.json"
    boxes.write_text(json.dumps({str(photos / "person_one.png"): [[1, 1, 20, 30]], "other.png": []}))
    code = main(["pose", str(photos), "--model", str(pose_model), "--out", str(tmp_path / "out"), "--boxes",
                 str(boxes), "--no-flip-test", *RUN])
    assert code == 0, capsys.readouterr().err
    assert len(json.loads((tmp_path / "out" / "person_one.json").read_text())["annotations"]) == 1


def test_video_frame_keys_match_their_video(tmp_path):
    videos = [tmp_path / "clip.mp4"]
    images = [tmp_path / "a.png"]
    boxes = {"a.png": [], "clip.mp4#0": [], f"{videos[0]}#30": []}
    check_boxes_keys("b.json", boxes, images, videos)  # every key matches
    with pytest.raises(ValueError, match=r"'clip.mpg#3' matches no input \(did you mean 'clip.mp4#3'\?\)"):
        check_boxes_keys("b.json", {"a.png": [], "clip.mpg#3": []}, images, videos)


# ---------------------------------------------------------------------------------------------------------------
# 9. URLs that cannot be reached
# ---------------------------------------------------------------------------------------------------------------


def test_a_url_to_a_closed_port_is_one_line_naming_it():
    url = "http://127.0.0.1:9/x.jpg"  # port 9 (discard): nothing listens there
    with pytest.raises(OSError, match=r"could not read an image from 'http://127.0.0.1:9/x.jpg'") as error:
        load_image_rgb(url)
    assert is_expected_error(error.value) and "\n" not in error_message(error.value)
    with pytest.raises(OSError, match="127.0.0.1:9"):
        Sapiens2HFImageProcessor(task="seg", size={"height": 16, "width": 16})(url)


# ---------------------------------------------------------------------------------------------------------------
# 10. merge of a folder that is not an adapter
# ---------------------------------------------------------------------------------------------------------------


def test_merge_of_a_model_folder_says_it_has_no_adapter_config(tmp_path, seg_model, capsys):
    code = main(["merge", str(seg_model), "--out", str(tmp_path / "merged"), "--threads", "1"])
    line = _one_line_error(capsys, "merge")
    assert code == 2
    assert f"{seg_model} has no adapter_config.json" in line and "--use_lora" in line
    assert "repo" not in line.lower()
    assert not (tmp_path / "merged").exists()
    from sapiens2_hf.training.lora import merge_lora

    with pytest.raises(ValueError, match="has no adapter_config.json"):  # the Python API says the same
        merge_lora(seg_model, tmp_path / "merged")


def test_merge_of_a_file_says_it_expects_a_folder(tmp_path, capsys):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"x")
    assert main(["merge", str(weights), "--out", str(tmp_path / "merged"), "--threads", "1"]) == 2
    assert "is a file, not an adapter folder" in _one_line_error(capsys, "merge")
