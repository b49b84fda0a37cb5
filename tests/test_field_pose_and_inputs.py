"""Field bugs: pose box nesting, validation and formats, the offline detector, the CLI's per-input failures, image
inputs (16 bit, truncated JPEG, non-finite floats), batch sizes, segmentation memory and global TF32 state."""

import io
import json
import math
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from model_folders import tiny_pose_pipeline
from PIL import Image
from transformers import pipeline

import sapiens2_hf
from sapiens2_hf.cli.main import main
from sapiens2_hf.modeling.pipeline_sapiens2_hf import DEFAULT_DETECTOR
from sapiens2_hf.processing import Sapiens2HFImageProcessor, load_image_rgb
from sapiens2_hf.modeling import sapiens2_processing_ops as ops


def _image(height=70, width=50, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


BOX_A, BOX_B = [2.0, 3.0, 40.0, 60.0], [10.0, 5.0, 30.0, 30.0]


def _outputs(**fields):
    return type("Outputs", (), fields)()


# ------------------------------------------------------------------------------------------------------------------
# pose boxes: nesting, scores, validation
# ------------------------------------------------------------------------------------------------------------------


def test_pose_one_image_accepts_a_list_of_boxes_or_per_image_nesting():
    pipe = tiny_pose_pipeline()
    image = _image()
    flat = pipe(image, boxes=[BOX_A, BOX_B], flip_test=False)
    nested = pipe(image, boxes=[[BOX_A, BOX_B]], box_scores=[[0.5, 0.7]], flip_test=False)  # was an IndexError
    as_list = pipe([image], boxes=[[BOX_A, BOX_B]], box_scores=[[0.5, 0.7]], flip_test=False)[0]
    as_array = pipe(image, boxes=np.array([BOX_A, BOX_B]), box_scores=[0.5, 0.7], flip_test=False)
    assert len(flat) == len(nested) == len(as_list) == len(as_array) == 2
    for people in (nested, as_list, as_array):
        for a, b in zip(flat, people):
            np.testing.assert_array_equal(a["keypoints"], b["keypoints"])
            np.testing.assert_array_equal(a["bbox"], b["bbox"])
    assert [p["bbox_score"] for p in flat] == [1.0, 1.0]
    assert [p["bbox_score"] for p in nested] == [0.5, 0.7] == [p["bbox_score"] for p in as_array]
    assert pipe(image, boxes=[[]]) == [] and pipe(image, boxes=[]) == []
    with pytest.raises(ValueError, match="not nested as expected"):
        pipe(image, boxes=BOX_A)  # a bare box, not a list of boxes
    with pytest.raises(ValueError, match=r"boxes\[0\] .* is not a list of boxes"):
        pipe([image, image], boxes=[BOX_A, [BOX_B]])


def test_pose_box_scores_must_match_the_boxes():
    pipe = tiny_pose_pipeline()
    image = _image()
    with pytest.raises(ValueError, match=r"box_scores for image 0 has 1 score\(s\) for 2 box\(es\)"):
        pipe(image, boxes=[BOX_A, BOX_B], box_scores=[0.9])  # was an IndexError
    with pytest.raises(ValueError, match=r"box_scores for image 1 has 2 score\(s\) for 1 box\(es\)"):
        pipe([image, image], boxes=[[BOX_A], [BOX_B]], box_scores=[[0.9], [0.1, 0.2]])
    with pytest.raises(ValueError, match="non-finite"):
        pipe(image, boxes=[BOX_A], box_scores=[float("nan")])
    with pytest.raises(ValueError, match="box_scores= needs boxes="):
        pipe(image, box_scores=[0.5], detector=lambda image, threshold: [])


@pytest.mark.parametrize("box, problem", [
    ([1.0, float("nan"), 30.0, 40.0], "is not finite"),
    ([1.0, 2.0, float("inf"), 40.0], "is not finite"),
    ([5.0, 5.0, 5.0, 40.0], "zero or negative width or height"),
    ([40.0, 3.0, 2.0, 60.0], "zero or negative width or height"),  # inverted
    ([60.0, 0.0, 90.0, 30.0], "entirely outside the 50x70"),  # right of a 50-wide image
    ([-40.0, -40.0, 0.0, 10.0], "entirely outside the 50x70"),  # touches the corner only
])
def test_pose_bad_boxes_are_named_errors(box, problem):
    pipe = tiny_pose_pipeline()
    images = [_image(), _image(seed=1)]
    # image 1 lands in the second chunk (batch_size=1): the error still gives its number in the whole call
    with pytest.raises(ValueError) as info:
        pipe(images, boxes=[[BOX_A], [BOX_B, box]], batch_size=1, flip_test=False)
    message = str(info.value)
    assert problem in message and "box 1 of image 1" in message and "box_format='xyxy'" in message
    assert str([float(v) for v in box]) in message


def test_pose_partly_outside_boxes_are_fine():
    pipe = tiny_pose_pipeline()
    people = pipe(_image(), boxes=[[-20.0, -10.0, 30.0, 40.0], [40.0, 60.0, 80.0, 100.0]], flip_test=False)
    assert len(people) == 2 and all(np.isfinite(p["keypoints"]).all() for p in people)


def test_processor_validates_boxes_and_names_box_format():
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48})
    image = _image()
    # the processor's convention is COCO xywh (transformers'); a negative width is an inverted box
    with pytest.raises(ValueError, match=r"box 0 of image 0, \[10.0, 5.0, -3.0, 20.0\] \(box_format='xywh'"):
        processor(image, boxes=[[[10, 5, -3, 20]]])
    with pytest.raises(ValueError, match="box_format='xyxy'.*entirely outside"):
        processor(image, boxes=[[[100, 5, 120, 20]]], box_format="xyxy")
    with pytest.raises(ValueError, match=r"shape \(1, 8\)"):
        processor(image, boxes=[[[1, 2, 30, 40, 5, 6, 20, 30]]])  # used to be reshaped into two boxes silently


def test_post_process_pose_needs_the_box_format_of_preprocess():
    """README-style xyxy boxes decoded as xywh moved keypoints by hundreds of pixels without an error."""
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48})
    image = _image(400, 700)
    boxes = [[[349.0, 20.0, 690.0, 390.0]]]  # xyxy, as in the README
    inputs = processor(image, boxes=boxes, box_format="xyxy")
    heatmaps = torch.rand(1, 17, 16, 12, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="without box_format="):
        processor.post_process_pose_estimation(_outputs(heatmaps=heatmaps), boxes=boxes)
    expected = processor.post_process_pose_estimation(_outputs(heatmaps=heatmaps), crops=inputs)[0][0]
    same = processor.post_process_pose_estimation(_outputs(heatmaps=heatmaps), boxes=boxes, box_format="xyxy")[0][0]
    assert torch.equal(same["keypoints"], expected["keypoints"])
    # boxes and the preprocess geometry together are cross-checked: the wrong format is an error
    with pytest.raises(ValueError, match="box_format='xywh' do not match"):
        processor.post_process_pose_estimation(_outputs(heatmaps=heatmaps), boxes=boxes, box_format="xywh",
                                               crops=inputs)
    both = processor.post_process_pose_estimation(_outputs(heatmaps=heatmaps), boxes=boxes, box_format="xyxy",
                                                  crops=inputs)[0][0]
    assert torch.equal(both["keypoints"], expected["keypoints"])
    # with source_sizes the boxes are checked against their images
    with pytest.raises(ValueError, match="entirely outside"):
        processor.post_process_pose_estimation(_outputs(heatmaps=heatmaps), boxes=[[[800, 20, 900, 390]]],
                                               box_format="xyxy", source_sizes=[(400, 700)])


def test_no_boxes_and_no_detector_offline_names_every_remedy():
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(DEFAULT_DETECTOR, "config.json"), str):
        pytest.skip("the default detector is in the local cache: nothing fails to load")
    pipe = tiny_pose_pipeline()
    with pytest.raises(OSError) as info:
        pipe(_image())
    message = str(info.value)
    for needle in (DEFAULT_DETECTOR, "boxes=", "--boxes", "detector=", "--detector", "local folder"):
        assert needle in message, needle


# ------------------------------------------------------------------------------------------------------------------
# batch sizes
# ------------------------------------------------------------------------------------------------------------------


def test_zero_batch_sizes_are_errors():
    pipe = tiny_pose_pipeline()
    image = _image()
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        pipe(image, boxes=[BOX_A], batch_size=0)
    with pytest.raises(ValueError, match="crop_batch_size must be an integer >= 1, got 0"):
        pipe(image, boxes=[BOX_A], crop_batch_size=0)
    torch.manual_seed(0)
    seg = pipeline("sapiens2-segmentation", device="cpu",
                   model=sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg")).eval())
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        seg([image, image], batch_size=0)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got -2"):
        seg([image, image], batch_size=-2)


# ------------------------------------------------------------------------------------------------------------------
# image inputs
# ------------------------------------------------------------------------------------------------------------------


def test_16_bit_images_are_scaled_not_clipped():
    values = np.array([[0, 128, 129, 257, 32768, 65535]], np.uint16)
    expected = np.round(values.astype(np.float64) * 255 / 65535).astype(np.uint8)  # [0, 0, 1, 1, 128, 255]
    assert expected.tolist() == [[0, 0, 1, 1, 128, 255]]
    pil16 = Image.fromarray(values)
    assert pil16.mode == "I;16"
    pil32 = Image.fromarray(values.astype(np.int32))
    assert pil32.mode == "I"
    tensor = torch.from_numpy(values.astype(np.int32)).to(torch.uint16)
    rgb16 = np.repeat(values[..., None], 3, axis=-1)
    for variant in (values, rgb16, pil16, pil32, tensor):
        # (1, 6, 3) is also a channels-first (1, 6, 3) image: its layout must be named
        out = load_image_rgb(variant, input_data_format="channels_last" if variant is rgb16 else None)
        assert out.dtype == np.uint8 and out.shape == (1, 6, 3)
        np.testing.assert_array_equal(out[..., 0], expected, err_msg=type(variant).__name__)
        np.testing.assert_array_equal(out[..., 2], expected)
    with pytest.raises(ValueError, match="outside the 16-bit range"):
        load_image_rgb(Image.fromarray(np.array([[70000]], np.int32)))


def test_non_finite_float_images_are_errors():
    image = np.full((6, 5, 3), 0.5, np.float32)
    image[0, 0, 0], image[1, 2, 1], image[3, 3, 2] = np.nan, np.inf, -np.inf
    with pytest.raises(ValueError, match=r"3 non-finite value\(s\)"):
        load_image_rgb(image)
    with pytest.raises(ValueError, match=r"3 non-finite value\(s\)"):
        Sapiens2HFImageProcessor(task="seg")(torch.from_numpy(image))
    assert load_image_rgb(np.nan_to_num(image, nan=0.0, posinf=1.0, neginf=0.0)).shape == (6, 5, 3)


def _jpeg_bytes(seed=0, **kwargs):
    buffer = io.BytesIO()
    Image.fromarray(_image(120, 90, seed)).save(buffer, "JPEG", **kwargs)
    return buffer.getvalue()


@pytest.mark.parametrize("kwargs", [{"quality": 90}, {"progressive": True}])
def test_truncated_jpeg_is_an_error_naming_the_file(tmp_path, kwargs):
    data = _jpeg_bytes(**kwargs)
    good, cut = tmp_path / "good.jpg", tmp_path / "cut.jpg"
    good.write_bytes(data)
    cut.write_bytes(data[: len(data) // 2])
    assert load_image_rgb(good).shape == (120, 90, 3)
    with pytest.raises(ValueError, match=r"cut\.jpg.*truncated or corrupt.*re-download"):
        load_image_rgb(cut)
    with pytest.raises(ValueError, match=r"cut\.jpg.*truncated or corrupt.*re-download"):
        load_image_rgb(Image.open(cut))  # a PIL image opened from the file
    # data after the end-of-image marker (motion photos, maker trailers) is not truncation
    trailer = tmp_path / "trailer.jpg"
    trailer.write_bytes(data + b"\x00\x00ftypmp42 appended video" + b"\xff\xd8")
    np.testing.assert_array_equal(load_image_rgb(trailer), load_image_rgb(good))


# ------------------------------------------------------------------------------------------------------------------
# segmentation memory
# ------------------------------------------------------------------------------------------------------------------


def test_chunked_segmentation_is_bit_identical_to_the_one_shot_resize():
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(29, 64, 48, generator=generator) * 4).round() / 4  # quantised: many exact ties
    logits[5, 10:14, 10:14] = float("nan")  # NaN wins, as in torch.max
    size = (1000, 700)
    reference = F.interpolate(logits[None], size=size, mode="bilinear", align_corners=False)[0].max(dim=0).indices
    # 1 channel at a time, groups leaving remainders (2 x 14 + 1, 4 x 7 + 1, ...), and one shot
    for channels in (1, 2, 3, 4, 5, 7, 13, 29):
        labels = ops.resize_logits_argmax(logits, size, max_chunk_elements=channels * size[0] * size[1])
        assert labels.dtype == torch.int64 and torch.equal(labels, reference), channels
    processor = Sapiens2HFImageProcessor(task="seg")
    batched = processor.post_process_semantic_segmentation(_outputs(logits=logits[None].repeat(2, 1, 1, 1)),
                                                           target_sizes=[size, (64, 48)])
    assert torch.equal(batched[0], reference)
    assert torch.equal(batched[1], logits.max(dim=0).indices)


_LARGE_SEGMENTATION = textwrap.dedent("""
    import resource, torch
    from sapiens2_hf.processing import Sapiens2HFImageProcessor
    processor = Sapiens2HFImageProcessor(task="seg")
    logits = torch.randn(1, 29, 256, 192, generator=torch.Generator().manual_seed(0))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    labels = processor.post_process_semantic_segmentation(logits, target_sizes=[(4000, 3000)])[0]
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert labels.shape == (4000, 3000)
    print((after - before) * 1024 if __import__("sys").platform != "darwin" else after - before)
""")
# The fresh interpreter (~11 s on one core: 29 bilinear resizes to 12 Mpx) runs from the start of the session, beside
# the other tests (conftest.py).
EARLY_CHILDREN = {"large-segmentation": ("test_segmentation_of_a_large_photo_has_bounded_peak_memory",
                                         lambda folder: {"args": [sys.executable, "-c", _LARGE_SEGMENTATION]})}


@pytest.mark.slow  # ~11 s: 29 bilinear resizes to 12 Mpx in a fresh interpreter
def test_segmentation_of_a_large_photo_has_bounded_peak_memory(early_child):
    """Before: all 29 channels were resized at once (29 x 4 bytes per output pixel, 1.4 GB at 4000x3000)."""
    result, _ = early_child("large-segmentation")
    assert result.returncode == 0, result.stderr
    growth = int(result.stdout.strip().splitlines()[-1])
    # 12e6 output pixels: int64 labels (96 MB) + two channels, running maximum and indices (~250 MB); one-shot: 1.5 GB
    assert growth < 600 * 2**20, f"peak RSS grew by {growth / 2**20:.0f} MiB"


# ------------------------------------------------------------------------------------------------------------------
# no global state
# ------------------------------------------------------------------------------------------------------------------


def test_blur_changes_no_global_matmul_flags(monkeypatch):
    writes = []
    real = torch.backends.cuda.matmul

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def __setattr__(self, name, value):
            writes.append((name, value))

    monkeypatch.setattr(torch.backends.cuda, "matmul", Spy())
    maps = torch.rand(4, 16, 12, generator=torch.Generator().manual_seed(0))
    reference = ops.gaussian_blur_zero_padded(maps, 11)
    assert writes == []  # the old context manager set allow_tf32 (process-wide) on every call
    monkeypatch.undo()

    flags_before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                    torch.get_float32_matmul_precision())
    errors = []

    def work():
        try:
            for _ in range(20):
                assert torch.equal(ops.gaussian_blur_zero_padded(maps, 11), reference)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision()) == flags_before


def test_blur_matches_a_float64_reference():
    maps = torch.rand(3, 20, 14, generator=torch.Generator().manual_seed(1))
    kernel = ops.opencv_gaussian_kernel1d(11).double()
    padded = F.pad(maps.double()[:, None], (5, 5, 5, 5))
    exact = F.conv2d(F.conv2d(padded, kernel.view(1, 1, 1, 11)), kernel.view(1, 1, 11, 1))[:, 0]
    torch.testing.assert_close(ops.gaussian_blur_zero_padded(maps, 11).double(), exact, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------------------------------
# CLI: per-input failures, summary, exit codes, strict JSON
# ------------------------------------------------------------------------------------------------------------------


def _pose_model_folder(tmp_path):
    torch.manual_seed(0)
    folder = tmp_path / "model_pose"
    sapiens2_hf.Sapiens2ForPoseEstimation(sapiens2_hf.tiny_config("pose")).save_pretrained(folder)
    Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def test_cli_pose_skips_failing_inputs_and_reports_them(tmp_path, capsys):
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(DEFAULT_DETECTOR, "config.json"), str):
        pytest.skip("the default detector is in the local cache: the unlisted image would not fail")
    model = _pose_model_folder(tmp_path)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for name, seed in (("a.png", 0), ("b.png", 1), ("c.png", 2), ("d.png", 3)):
        Image.fromarray(_image(70, 50, seed)).save(inputs / name)
    data = _jpeg_bytes()
    (inputs / "e.jpg").write_bytes(data[: len(data) // 2])  # truncated
    boxes = tmp_path / "boxes.json"
    # a: fine; b: NaN box; c: not listed (no detector offline); d: fine; e: truncated file
    boxes.write_text(json.dumps({"a.png": [BOX_A], "b.png": [[1.0, float("nan"), 30.0, 40.0]], "d.png": [],
                                 "e.jpg": [BOX_A]}))
    out = tmp_path / "out"
    code = main(["pose", str(inputs), "--model", str(model), "--out", str(out), "--boxes", str(boxes),
                 "--device", "cpu", "--no-flip-test", "--quiet", "--batch-size", "2"])
    err = capsys.readouterr().err
    assert code == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processed"] == 2
    reasons = {entry["input"].rsplit("/", 1)[-1]: entry["reason"] for entry in summary["skipped"]}
    assert sorted(reasons) == ["b.png", "c.png", "e.jpg"]
    assert "not finite" in reasons["b.png"] and DEFAULT_DETECTOR in reasons["c.png"]
    assert "--boxes" in reasons["c.png"] and "truncated" in reasons["e.jpg"]
    for name in ("b.png", "c.png", "e.jpg"):
        assert f"skipped {inputs / name}" in err
    assert len(json.loads((out / "a.json").read_text())["annotations"]) == 1
    assert json.loads((out / "d.json").read_text())["annotations"] == []
    assert not (out / "b.json").exists() and not (out / "c.json").exists()
    for path in out.glob("*.json"):  # strict JSON everywhere: no NaN / Infinity literals
        json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in {path.name}"))


def test_cli_exit_codes_and_help(tmp_path, capsys):
    model = _pose_model_folder(tmp_path)
    image = tmp_path / "x.png"
    Image.fromarray(_image()).save(image)
    boxes = tmp_path / "boxes.json"
    boxes.write_text(json.dumps({"x.png": [BOX_A]}))
    common = ["--model", str(model), "--boxes", str(boxes), "--device", "cpu", "--quiet", "--no-flip-test"]
    assert main(["pose", str(image), "--out", str(tmp_path / "ok"), *common]) == 0
    assert json.loads((tmp_path / "ok" / "summary.json").read_text())["skipped"] == []
    with pytest.raises(SystemExit) as info:  # an argument error, from the parser
        main(["pose", str(image), "--out", str(tmp_path / "bad"), "--batch-size", "0", *common])
    assert info.value.code == 2 and "--batch-size" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["pose", "--help"])
    assert info.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "'<video file name>#<frame index>'" in help_text and "'clip.mp4#30'" in help_text


def test_cli_json_writer_refuses_nan(tmp_path):
    from sapiens2_hf.predict.outputs import _save_json

    with pytest.raises(ValueError):
        _save_json({"keypoints": [math.nan]}, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
