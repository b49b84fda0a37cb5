"""Hostile and broken inputs at the loading boundary (issue 20, items 8-12): crafted safetensors (NaN / inf weights,
bad metadata), crafted configs, images with huge headers or EXIF orientation, per-call detectors across calls and
threads, and many pose boxes. Each case gets a one-line error or a correct result, quickly; none hangs."""

import base64
import io
import json
import os
import struct
import threading
import time
import zlib

import numpy as np
import pytest
import torch
from model_folders import tiny_pose_pipeline
from official_cases import load_case
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers.image_utils import load_image

import sapiens2_hf
from sapiens2_hf.modeling.post_processing_sapiens2_hf import FlippedCropOutputs
from sapiens2_hf.modeling import image_loading_sapiens2_hf as image_loading
from sapiens2_hf.modeling import post_processing_sapiens2_hf as processing_module
from sapiens2_hf.modeling import pipeline_sapiens2_hf as pipeline_module
from sapiens2_hf.modeling.configuration_sapiens2_hf import MAX_IMAGE_SIDE, Sapiens2Config, tiny_config
from sapiens2_hf.processing import image_processor_for_task, load_image_rgb


pytestmark = pytest.mark.usefixtures("one_thread")


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


# ------------------------------------------------------------------------------------------- item 8: EXIF orientation

# EXIF orientation -> the PIL transpose that makes the stored pixels upright (PIL's ImageOps.exif_transpose table).
_UPRIGHT = {1: None, 3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_270, 8: Image.Transpose.ROTATE_90}


def _exif_photo(path, orientation: int, fmt: str = "JPEG"):
    """A 40x64 picture with distinct corners, stored with an EXIF Orientation tag (4:4:4, quality 100, so that
    OpenCV's and PIL's JPEG decoders give the same pixels)."""
    pixels = np.zeros((40, 64, 3), np.uint8)
    pixels[:10, :20] = (255, 0, 0)
    pixels[30:, 50:] = (0, 0, 255)
    exif = Image.Exif()
    exif[0x0112] = orientation
    options = {"quality": 100, "subsampling": 0} if fmt == "JPEG" else {}
    Image.fromarray(pixels).save(path, fmt, exif=exif, **options)
    return pixels


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_exif_orientation_is_the_same_for_paths_pil_images_and_transformers(orientation, fmt, tmp_path):
    path = tmp_path / f"photo.{fmt.lower()}"
    _exif_photo(path, orientation, fmt)
    stored = np.asarray(Image.open(path).convert("RGB"))  # the pixels as stored, tag ignored
    transpose = _UPRIGHT[orientation]
    upright = stored if transpose is None else np.asarray(Image.fromarray(stored).transpose(transpose))
    from_path = load_image_rgb(str(path))
    with Image.open(path) as pil:
        from_pil = load_image_rgb(pil)
    np.testing.assert_array_equal(from_pil, upright)
    np.testing.assert_array_equal(from_path, upright)
    np.testing.assert_array_equal(from_pil, np.asarray(load_image(str(path))))  # transformers' reader
    if orientation != 1:  # control: the tag matters for these
        assert from_pil.shape != stored.shape or not np.array_equal(from_pil, stored)


def test_pose_inputs_from_a_pil_image_and_its_path_are_identical(tmp_path):
    path = tmp_path / "photo.jpg"
    _exif_photo(path, 6)
    processor = image_processor_for_task("pose", size={"height": 64, "width": 48})
    box = [[2.0, 3.0, 30.0, 50.0]]  # inside the upright 40x64 (width x height) photo
    from_path = processor(str(path), boxes=[box], box_format="xyxy")
    with Image.open(path) as pil:
        from_pil = processor(pil, boxes=[box], box_format="xyxy")
    assert from_path["original_sizes"].tolist() == [[64, 40]] == from_pil["original_sizes"].tolist()
    torch.testing.assert_close(from_pil["pixel_values"], from_path["pixel_values"], rtol=0, atol=0)


# ------------------------------------------------------------------------------------------- item 9: per-call detector


def _detector_returning(box):
    def detect(image, threshold):
        return [{"label": "person", "score": 0.9,
                 "box": dict(zip(("xmin", "ymin", "xmax", "ymax"), box))}]

    return detect


_DEFAULT_BOX, _OWN_BOX, _CALL_BOX = [1, 1, 20, 30], [2, 2, 30, 40], [5, 6, 40, 60]


@pytest.fixture
def pose_pipe_factory(monkeypatch):
    """Pose pipelines on a tiny model whose named detectors are stand-ins: transformers' `pipeline("object-detection",
    model=name)` gives the default detector's box for `DEFAULT_DETECTOR` and the call's box for "call-detector"."""
    import transformers

    real_pipeline = transformers.pipeline
    loads = []

    def fake_pipeline(task, *args, model=None, **kwargs):
        if task != "object-detection":
            return real_pipeline(task, *args, model=model, **kwargs)
        loads.append(model)
        boxes = {pipeline_module.DEFAULT_DETECTOR: _DEFAULT_BOX, "call-detector": _CALL_BOX}
        return _detector_returning(boxes[model])

    monkeypatch.setattr(transformers, "pipeline", fake_pipeline)
    torch.manual_seed(0)
    model = sapiens2_hf.Sapiens2ForPoseEstimation(tiny_config("pose", rope_dtype="float32")).eval()

    def make(**kwargs):
        return real_pipeline("sapiens2-pose", model=model, device="cpu", **kwargs)

    make.loads = loads
    return make


_IMAGE = np.random.default_rng(0).integers(0, 256, (70, 50, 3), dtype=np.uint8)


def _bbox(result) -> list:
    return result[0]["bbox"].tolist()


def test_a_call_detector_by_name_serves_that_call_only(pose_pipe_factory):
    pipe = pose_pipe_factory()
    assert _bbox(pipe(_IMAGE, detector="call-detector", flip_test=False)) == _CALL_BOX
    assert _bbox(pipe(_IMAGE, flip_test=False)) == _DEFAULT_BOX  # was the call's detector: it stuck
    assert _bbox(pipe(_IMAGE, detector="call-detector", flip_test=False)) == _CALL_BOX
    assert pose_pipe_factory.loads == ["call-detector", pipeline_module.DEFAULT_DETECTOR]  # each loaded once


def test_a_call_detector_never_replaces_the_pipeline_own(pose_pipe_factory):
    pipe = pose_pipe_factory(detector=_detector_returning(_OWN_BOX))
    assert _bbox(pipe(_IMAGE, detector="call-detector", flip_test=False)) == _CALL_BOX
    assert _bbox(pipe(_IMAGE, detector=_detector_returning(_DEFAULT_BOX), flip_test=False)) == _DEFAULT_BOX
    assert _bbox(pipe(_IMAGE, flip_test=False)) == _OWN_BOX


def test_threads_with_and_without_a_call_detector_each_get_their_own(pose_pipe_factory):
    pipe = pose_pipe_factory()
    results, errors = {}, []
    start = threading.Barrier(6)

    def work(index):
        try:
            start.wait(timeout=30)
            for call in range(3):
                kwargs = {"detector": "call-detector"} if index % 2 else {}
                results[index, call] = _bbox(pipe(_IMAGE, flip_test=False, **kwargs))
        except Exception as error:  # reported below with the thread's index
            errors.append((index, repr(error)))

    threads = [threading.Thread(target=work, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads) and not errors, errors
    for (index, call), box in results.items():
        assert box == (_CALL_BOX if index % 2 else _DEFAULT_BOX), (index, call, box)
    assert len(results) == 18


# ------------------------------------------------------------------------------ item 10: non-finite weights and values


def _saved_tiny(tmp_path, task="seg"):
    torch.manual_seed(0)
    model = sapiens2_hf.model_class_for_task(task)(tiny_config(task)).eval()
    model.save_pretrained(tmp_path)
    return sapiens2_hf.model_class_for_task(task)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_weight_in_a_folder_is_refused_by_name(value, tmp_path):
    cls = _saved_tiny(tmp_path)
    cls.from_pretrained(tmp_path)  # control: the clean folder loads
    state = load_file(tmp_path / "model.safetensors")
    name = sorted(key for key in state if key.startswith("decode_head") and key.endswith("weight"))[0]
    state[name].view(-1)[3] = value
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="NaN or infinite") as error:
        cls.from_pretrained(tmp_path)
    assert name in _one_line(error)


def test_strict_false_loads_a_non_finite_weight_with_a_warning(tmp_path):
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging

    from sapiens2_hf.modeling import loading_sapiens2_hf

    cls = _saved_tiny(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    name = sorted(state)[0]
    state[name].view(-1)[0] = float("nan")
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with CaptureLogger(logging.get_logger(loading_sapiens2_hf.__name__)) as captured:
        model = cls.from_pretrained(tmp_path, strict=False)
    assert name in captured.out and "NaN or infinite" in captured.out
    assert torch.isnan(model.state_dict()[name]).any()


def test_a_non_finite_weight_in_an_official_file_is_refused(tmp_path):
    _, _, weights = load_case("seg")
    state = load_file(weights)
    with safe_open(str(weights), "pt") as handle:
        metadata = handle.metadata()
    name = next(key for key in sorted(state) if key.startswith("decode_head") and state[key].is_floating_point())
    state[name].view(-1)[0] = float("inf")
    crafted = tmp_path / weights.name
    save_file(state, crafted, metadata=metadata)
    with pytest.raises(ValueError, match="NaN or infinite") as error:
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(crafted)
    assert "decode_head" in _one_line(error)


@pytest.mark.parametrize("field, value, needle", [
    ("rms_norm_eps", float("nan"), "rms_norm_eps"),
    ("rms_norm_eps", 0.0, "rms_norm_eps"),
    ("layerscale_value", float("inf"), "layerscale_value"),
    ("rope_theta", -100.0, "rope_theta"),
    ("initializer_range", float("nan"), "initializer_range"),
    ("drop_path_rate", 1.5, "drop_path_rate"),
    ("pos_embed_jitter", 0.5, "pos_embed_jitter"),
])
def test_non_finite_or_out_of_range_config_values_are_refused(field, value, needle, tmp_path):
    cls = _saved_tiny(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[field] = value
    (tmp_path / "config.json").write_text(json.dumps(config))  # NaN / Infinity as Python's json writes them
    with pytest.raises(ValueError, match=needle) as error:
        cls.from_pretrained(tmp_path)
    _one_line(error)
    good = tmp_path / "good"
    _saved_tiny(good)
    with pytest.raises(ValueError, match=needle) as error:  # the same value as a keyword override of a good folder
        cls.from_pretrained(good, **{field: value})
    _one_line(error)


def test_head_config_epsilon_must_be_finite():
    with pytest.raises(ValueError, match="norm_eps") as error:
        tiny_config("albedo", head_config={"upsample_out_channels": [8], "norm_type": "rms_norm",
                                           "norm_eps": float("nan")})
    _one_line(error)


# ------------------------------------------------------------------------------------------ item 11: image_size bounds


def _official_with_metadata(tmp_path, image_size):
    _, _, weights = load_case("seg")
    with safe_open(str(weights), "pt") as handle:
        metadata = dict(handle.metadata() or {})
    metadata["image_size"] = image_size
    crafted = tmp_path / weights.name
    save_file(load_file(weights), crafted, metadata=metadata)
    return crafted


@pytest.mark.parametrize("image_size, needle", [
    ("[0, 0]", r"outside \[1, 8192\]"),
    ("[-1024, 768]", r"outside \[1, 8192\]"),
    ("[100000, 100000]", r"outside \[1, 8192\]"),
    ("[1000, 768]", "not divisible by the model's feature stride"),
    ("[1024]", "not `\\[height, width\\]`"),
])
def test_bad_image_size_in_official_metadata_is_refused(image_size, needle, tmp_path):
    crafted = _official_with_metadata(tmp_path, image_size)
    with pytest.raises(ValueError, match=needle) as error:
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(crafted)
    assert "metadata" in _one_line(error)


def test_a_good_image_size_in_official_metadata_is_used(tmp_path):
    crafted = _official_with_metadata(tmp_path, "[512, 384]")
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(crafted)
    assert list(model.config.image_size) == [512, 384]


@pytest.mark.parametrize("image_size", [[0, 0], [-64, 48], [100000, 100000], [MAX_IMAGE_SIDE + 16, 48], [72, 48]])
def test_bad_image_size_in_a_config_is_refused(image_size, tmp_path):
    cls = _saved_tiny(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["image_size"] = image_size
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="image_size") as error:
        cls.from_pretrained(tmp_path)
    _one_line(error)
    with pytest.raises(ValueError, match="image_size"):
        tiny_config("seg", image_size=image_size)
    assert list(tiny_config("seg", image_size=[MAX_IMAGE_SIDE, 48]).image_size) == [MAX_IMAGE_SIDE, 48]  # control


# ---------------------------------------------------------------------- item 12: sizes checked before any allocation


def _png_with_header_size(width: int, height: int) -> bytes:
    """A valid 1x1 PNG whose IHDR claims `width` x `height` (CRC fixed): a few bytes that would decode to
    `width * height * 3` bytes."""
    buffer = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    header = bytearray(data[16:29])
    header[0:8] = struct.pack(">II", width, height)
    data[16:29] = header
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + bytes(header)))
    return bytes(data)


def test_a_huge_png_header_is_refused_before_decoding_by_path_and_by_url(tmp_path):
    data = _png_with_header_size(20000, 20000)
    path = tmp_path / "bomb.png"
    path.write_bytes(data)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    for source in (str(path), path, url):
        started = time.monotonic()
        with pytest.raises(ValueError, match="400000000 pixels") as error:
            load_image_rgb(source)
        assert "MAX_IMAGE_PIXELS" in _one_line(error)
        assert time.monotonic() - started < 5


@pytest.fixture
def small_pixel_limit(monkeypatch):
    """PIL's limit at 1,000 pixels: images over 2,000 pixels are refused (PIL's `Image.open` refuses files itself)."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # PIL warns over 1x, refuses over 2x
def test_one_pixel_limit_for_every_kind_of_input(small_pixel_limit, tmp_path):
    too_big, fine = np.zeros((40, 64, 3), np.uint8), np.zeros((40, 40, 3), np.uint8)  # 2,560 and 1,600 pixels
    path, fine_path = tmp_path / "big.png", tmp_path / "fine.png"
    Image.fromarray(too_big).save(path)
    Image.fromarray(fine).save(fine_path)
    for source in (str(path), Image.fromarray(too_big), too_big, torch.from_numpy(too_big), too_big.transpose(2, 0, 1),
                   Image.fromarray(np.zeros((40, 64), np.uint16))):
        with pytest.raises(ValueError, match="pixels") as error:
            load_image_rgb(source)
        assert "MAX_IMAGE_PIXELS" in _one_line(error)
    for source in (str(fine_path), Image.fromarray(fine), fine, torch.from_numpy(fine)):  # control: under the limit
        assert load_image_rgb(source).shape == (40, 40, 3)


def test_the_pixel_limit_is_pil_own_and_can_be_lifted(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(ValueError, match="2,560 pixels, over the limit of 2,000"):
        load_image_rgb(np.zeros((40, 64, 3), np.uint8))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    assert load_image_rgb(np.zeros((40, 64, 3), np.uint8)).shape == (40, 64, 3)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_path_is_refused_instead_of_blocking(tmp_path):
    fifo = tmp_path / "input.png"
    os.mkfifo(fifo)
    outcome = []

    def read():
        try:
            load_image_rgb(str(fifo))
        except Exception as error:  # checked below
            outcome.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # unblock the reader before failing, so that the process can exit
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=10)
        pytest.fail("reading a FIFO blocked")
    assert isinstance(outcome[0], ValueError) and "not a regular file" in str(outcome[0])


@pytest.mark.parametrize("overrides, needle", [
    ({"hidden_size": 10**9}, "parameters"),
    ({"num_hidden_layers": 10**9}, "parameters"),
    ({"intermediate_size": 10**12}, "parameters"),
    ({"num_register_tokens": 10**12}, "parameters"),
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"hidden_size": -32}, "hidden_size"),
    ({"patch_size": 0}, "patch_size"),
])
def test_absurd_config_sizes_are_refused_before_allocation(overrides, needle, tmp_path):
    started = time.monotonic()
    with pytest.raises(ValueError, match=needle) as error:
        tiny_config("seg", **overrides)
    _one_line(error)
    cls = _saved_tiny(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(overrides)
    config.pop("num_key_value_heads_per_layer", None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=needle):
        cls.from_pretrained(tmp_path)
    assert time.monotonic() - started < 20  # nothing of that size was built


def test_head_channels_count_towards_the_parameter_bound():
    with pytest.raises(ValueError, match="parameters"):
        tiny_config("seg", head_config={"upsample_out_channels": [10**7, 10**7], "conv_out_channels": [8]})
    with pytest.raises(ValueError, match="upsample_out_channels"):
        tiny_config("seg", head_config={"upsample_out_channels": [0], "conv_out_channels": [8]})


def test_official_presets_are_within_the_bounds():
    for variant in ("0.4b", "1b", "5b", "1b-4k"):
        Sapiens2Config.from_preset(variant, "pointmap")


@pytest.mark.parametrize("size", [{"height": 200000, "width": 768}, {"height": 0, "width": 768},
                                  {"height": -1024, "width": 768}])
def test_processor_size_is_bounded(size):
    with pytest.raises(ValueError, match="size") as error:
        image_processor_for_task("seg", size=size)
    _one_line(error)
    processor = image_processor_for_task("seg", size={"height": 64, "width": 48})
    with pytest.raises(ValueError, match="size"):
        processor(np.zeros((8, 8, 3), np.uint8), size=size)  # a per-call size too, before any allocation
    assert processor(np.zeros((8, 8, 3), np.uint8))["pixel_values"].shape == (1, 3, 64, 48)  # control


# ----------------------------------------------------------------- item 12: many pose boxes, memory bounded by chunks


def _many_boxes(count, seed=0):
    rng = np.random.default_rng(seed)
    corners = rng.uniform(0, 40, (count, 2))
    return np.concatenate([corners, corners + rng.uniform(8, 30, (count, 2))], axis=1).tolist()


def test_pose_pipeline_crops_and_decodes_boxes_in_chunks_with_the_same_results(monkeypatch):
    pipe = tiny_pose_pipeline()
    boxes = _many_boxes(40)
    crops_per_call, decoded_per_call = [], []
    processor_call = type(pipe.image_processor).__call__
    decode = processing_module.decode_udp_heatmaps

    def counting_call(self, images, *args, boxes=None, **kwargs):
        if boxes is not None:
            crops_per_call.append(sum(len(b) for b in boxes))
        return processor_call(self, images, *args, boxes=boxes, **kwargs)

    def counting_decode(heatmaps, *args, **kwargs):
        decoded_per_call.append(heatmaps.shape[0])
        return decode(heatmaps, *args, **kwargs)

    monkeypatch.setattr(type(pipe.image_processor), "__call__", counting_call)
    monkeypatch.setattr(processing_module, "decode_udp_heatmaps", counting_decode)
    held = []
    postprocess = pipe.postprocess
    monkeypatch.setattr(pipe, "postprocess", lambda rows, **kw: held.append(rows) or postprocess(rows, **kw))
    chunked = pipe(_IMAGE, boxes=boxes, batch_size=4)
    assert max(crops_per_call) == pipeline_module.POSE_CROP_CHUNK_SIZE and sum(crops_per_call) == 40
    assert max(decoded_per_call) <= 4 and sum(decoded_per_call) == 40  # decoded per model batch
    # what waits for an image's last row: keypoints, never heatmaps
    assert all(not any(torch.is_tensor(v) and v.ndim == 4 for v in row.values()) for row in held[0])

    monkeypatch.setattr(pipeline_module, "POSE_CROP_CHUNK_SIZE", 1000)
    whole = pipe(_IMAGE, boxes=boxes, batch_size=40)
    assert len(chunked) == len(whole) == 40
    for a, b in zip(chunked, whole):
        np.testing.assert_array_equal(a["bbox"], b["bbox"])
        np.testing.assert_allclose(a["keypoints"], b["keypoints"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(a["scores"], b["scores"], rtol=0, atol=1e-6)


def test_processor_pose_decoding_is_chunked_and_chunk_independent(monkeypatch):
    processor = image_processor_for_task("pose", size={"height": 64, "width": 48})
    generator = torch.Generator().manual_seed(0)
    heatmaps = torch.rand(40, 17, 16, 12, generator=generator)
    flipped = torch.rand(40, 17, 16, 12, generator=generator)
    center = torch.rand(40, 2, generator=generator) * 50 + 10
    scale = torch.rand(40, 2, generator=generator) * 30 + 10
    flip_pairs = [[k, 16 - k] for k in range(8)]  # point k mirrors point 16 - k

    def decode():
        (people,) = processor.post_process_pose_estimation(
            heatmaps, crops={"bbox_center": center, "bbox_scale": scale}, outputs_flipped=FlippedCropOutputs(flipped, flip_pairs))
        return torch.stack([p["keypoints"] for p in people]), torch.stack([p["scores"] for p in people])

    sizes = []
    original = processing_module.decode_udp_heatmaps
    monkeypatch.setattr(processing_module, "decode_udp_heatmaps",
                        lambda maps, *a, **k: sizes.append(maps.shape[0]) or original(maps, *a, **k))
    chunked = decode()
    assert sizes == [16, 16, 8]
    monkeypatch.setattr(processing_module, "POSE_DECODE_CHUNK_SIZE", 1000)
    whole = decode()
    torch.testing.assert_close(chunked[0], whole[0], rtol=0, atol=1e-9)
    torch.testing.assert_close(chunked[1], whole[1], rtol=0, atol=0)


# ------------------------------------------------------------------------- item 13: indexes pointing outside the folder


@pytest.fixture(scope="module")
def sharded_seg_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sharded") / "victim"
    torch.manual_seed(0)
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation(tiny_config(task="seg"))
    model.save_pretrained(folder, max_shard_size="50KB")
    return folder


@pytest.mark.parametrize("rewrite, needle", [
    (lambda shard: f"../victim/{shard}", "no folders, no '..'"),
    (lambda shard: f"/{shard}", "no folders, no '..'"),
    (lambda shard: f"sub/{shard}", "no folders, no '..'"),
    (lambda shard: shard.replace(".safetensors", ".bin"), "must be a .safetensors file"),
    (lambda shard: "..", "must be a .safetensors file"),
])
def test_an_index_naming_shards_outside_its_folder_is_refused(sharded_seg_folder, rewrite, needle, tmp_path):
    index = json.loads((sharded_seg_folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = {name: rewrite(shard) for name, shard in index["weight_map"].items()}
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    (attacker / "config.json").write_text((sharded_seg_folder / "config.json").read_text())
    (attacker / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(OSError) as error:
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(attacker)
    assert needle in _one_line(error) and "model.safetensors.index.json" in str(error.value)


@pytest.mark.parametrize("weight_map", [[], {}, "model.safetensors", None])
def test_an_index_that_is_not_a_weight_map_is_one_line(sharded_seg_folder, weight_map, tmp_path):
    (tmp_path / "config.json").write_text((sharded_seg_folder / "config.json").read_text())
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(OSError, match="weight_map"):
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path)


def test_a_valid_sharded_folder_still_loads(sharded_seg_folder):
    """The control: the index as save_pretrained wrote it (several shards beside it)."""
    index = json.loads((sharded_seg_folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(sharded_seg_folder)
    assert model.config.task == "seg"


# ------------------------------------------------------------------------------- item 13: a stalled server has a limit


@pytest.fixture
def stalled_server():
    """A TCP server on 127.0.0.1 that accepts connections and never answers (what a hung host looks like)."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/photo.jpg"
    stop.set()
    thread.join()
    for connection in held:
        connection.close()
    server.close()


def test_a_url_to_a_stalled_server_fails_within_the_timeout(stalled_server, monkeypatch):
    monkeypatch.setattr(image_loading, "URL_TIMEOUT_S", 1.0)
    started = time.monotonic()
    with pytest.raises(Exception) as error:
        load_image_rgb(stalled_server)
    elapsed = time.monotonic() - started
    assert elapsed < 10, f"waited {elapsed:.1f} s for a server that never answers"
    assert "timed out" in str(error.value).lower() or "timeout" in type(error.value).__name__.lower(), repr(error.value)


def test_the_url_timeout_is_what_reaches_transformers_load_image(stalled_server, monkeypatch):
    """The control: the limit comes from URL_TIMEOUT_S (a reader that ignored it would wait the full minute)."""
    seen = {}

    def spy(url, timeout=None):
        seen["timeout"] = timeout
        raise TimeoutError("spy")

    import transformers.image_utils

    monkeypatch.setattr(transformers.image_utils, "load_image", spy)
    monkeypatch.setattr(image_loading, "URL_TIMEOUT_S", 1.5)
    with pytest.raises(Exception):
        load_image_rgb(stalled_server)
    assert seen["timeout"] == 1.5
