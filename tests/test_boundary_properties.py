"""Seeded property tests of the boundaries (issue 31): for every draw of an image, a box list, a config, a corrupted
safetensors file or a command-line value, the result is either correct or an error of the vocabulary the command
line reports in one line without a traceback (`sapiens2_hf.runs.errors.is_expected_error`, `error_message`). A
TypeError from deep inside numpy, OpenCV or torch, an empty or endless message or a NaN output fails the property.

The generators are plain `numpy.random.default_rng(seed)` draws (no extra dependency); each test's seed and draw
count are fixed, so a failure names its draw and replays exactly. Budget: about 20 s in all on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import struct

import numpy as np
import pytest
import torch
from PIL import Image

import sapiens2_hf
from sapiens2_hf.runs.errors import error_message, is_expected_error
from sapiens2_hf.processing import Sapiens2HFImageProcessor

pytestmark = pytest.mark.usefixtures("one_thread")


def _assert_clean_refusal(error: BaseException, draw: str) -> None:
    """An error the command line prints as its one line (`error_message`), short enough to read."""
    assert is_expected_error(error), f"{draw}: {type(error).__name__} is not one of our errors: {error}"
    message = error_message(error)
    assert 10 < len(message) <= 600, f"{draw}: {message!r}"


def _outcome(call, draw: str):
    """The call's result, or None after checking that its error is a clean refusal."""
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - the property is about which errors escape
        _assert_clean_refusal(error, draw)
        return None


# ------------------------------------------------------------------------------------------------------- images

_SIZES = (0, 1, 2, 3, 4, 17, 64)
_DTYPES = ("uint8", "uint16", "int32", "int64", "float32", "float64", "bool")
_PIL_MODES = ("RGB", "RGBA", "L", "LA", "La", "P", "I;16", "I", "F", "CMYK", "1", "YCbCr", "HSV")


def _draw_array(rng) -> tuple[np.ndarray, str]:
    height, width = (int(rng.choice(_SIZES)) for _ in range(2))
    dtype = str(rng.choice(_DTYPES))
    layout = str(rng.choice(("hwc3", "hwc4", "hwc1", "hw", "chw3", "chw1", "hwc2", "hwc5")))
    shape = {"hwc3": (height, width, 3), "hwc4": (height, width, 4), "hwc1": (height, width, 1), "hw": (height, width),
             "chw3": (3, height, width), "chw1": (1, height, width), "hwc2": (height, width, 2),
             "hwc5": (height, width, 5)}[layout]
    if dtype == "bool":
        array = rng.random(shape) > 0.5
    elif dtype.startswith("float"):
        scale = float(rng.choice((1.0, 255.0, 1e6)))
        array = (rng.random(shape) * scale).astype(dtype)
        if array.size and rng.random() < 0.3:
            array.flat[int(rng.integers(array.size))] = float(rng.choice((np.nan, np.inf, -np.inf)))
    else:
        high = {"uint8": 256, "uint16": 65536, "int32": 70000, "int64": 300}[dtype]
        array = rng.integers(-5 if dtype.startswith("int") else 0, high, shape).astype(dtype)
    return array, f"array {dtype} {layout} {shape}"


def _draw_pil(rng) -> tuple[Image.Image, str]:
    mode = str(rng.choice(_PIL_MODES))
    size = (int(rng.choice(_SIZES[1:])), int(rng.choice(_SIZES[1:])))
    base = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3)).astype(np.uint8))
    image = base.convert("RGBA").convert(mode) if mode == "La" else base.convert(mode)
    return image, f"PIL {mode} {size}"


def test_any_image_gives_finite_pixels_or_a_clean_refusal():
    rng = np.random.default_rng(31)
    processor = Sapiens2HFImageProcessor(task="seg", size={"height": 32, "width": 24})
    results = {"ok": 0, "refused": 0}
    for index in range(120):
        image, draw = _draw_pil(rng) if rng.random() < 0.35 else _draw_array(rng)
        draw = f"draw {index}: {draw}"
        if rng.random() < 0.3 and isinstance(image, np.ndarray):
            image = torch.from_numpy(image) if image.dtype != np.uint16 else image
        batch = _outcome(lambda: processor(image), draw)
        if batch is None:
            results["refused"] += 1
            continue
        pixels = batch["pixel_values"]
        assert tuple(pixels.shape) == (1, 3, 32, 24), draw
        assert torch.isfinite(pixels).all(), f"{draw}: non-finite pixel values went through"
        results["ok"] += 1
    # the generator is not degenerate: both outcomes occur
    assert results["ok"] > 30 and results["refused"] > 10, results


# -------------------------------------------------------------------------------------------------------- boxes

def _draw_box(rng) -> list:
    kind = rng.random()
    if kind < 0.5:  # a plausible box, maybe outside the image or degenerate
        x0, y0 = rng.uniform(-50, 120, 2)
        return [float(x0), float(y0), float(x0 + rng.uniform(-10, 90)), float(y0 + rng.uniform(-10, 90))]
    if kind < 0.7:
        return [float(rng.choice((np.nan, np.inf, -np.inf, 1e30, 0.0))) for _ in range(4)]
    if kind < 0.85:
        return [float(v) for v in rng.uniform(0, 50, int(rng.integers(0, 9)))]  # wrong length
    return [str(rng.choice(("a", "1", ""))), 2, 3, 4]  # wrong type


def test_any_box_list_gives_crops_inside_the_image_rules_or_a_clean_refusal():
    rng = np.random.default_rng(32)
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48})
    image = np.zeros((100, 80, 3), np.uint8)
    outcomes = {"ok": 0, "refused": 0}
    for index in range(80):
        boxes = [_draw_box(rng) for _ in range(int(rng.integers(0, 4)))]
        box_format = str(rng.choice(("xyxy", "xywh")))
        draw = f"draw {index}: boxes {boxes} ({box_format})"
        batch = _outcome(lambda: processor(image, boxes=[boxes], box_format=box_format), draw)
        if batch is None:
            outcomes["refused"] += 1
            continue
        outcomes["ok"] += 1
        assert torch.isfinite(batch["pixel_values"]).all(), draw
        assert torch.isfinite(batch["bbox_center"]).all() and (batch["bbox_scale"] > 0).all(), draw
    assert outcomes["ok"] > 10 and outcomes["refused"] > 10, outcomes


# ------------------------------------------------------------------------------------------------------ configs

_BAD_VALUES = (0, -3, "8", None, 2.5, True, [], {}, float("nan"), 10**12)
_CONFIG_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "patch_size",
                  "image_size", "num_labels", "intermediate_size", "num_register_tokens", "layer_norm_eps",
                  "rope_theta", "task")


def test_any_config_value_builds_a_working_model_or_a_clean_refusal():
    rng = np.random.default_rng(33)
    base = sapiens2_hf.tiny_config("seg").to_dict()
    pixels = torch.zeros(1, 3, 32, 32)
    outcomes = {"ok": 0, "refused": 0}
    for index in range(40):
        values = dict(base)
        field = str(rng.choice(_CONFIG_FIELDS))
        if field not in values:
            continue
        values[field] = _BAD_VALUES[int(rng.integers(len(_BAD_VALUES)))]
        draw = f"draw {index}: {field}={values[field]!r}"
        values.pop("model_type", None)

        def build():
            config = sapiens2_hf.Sapiens2Config(**values)
            model = sapiens2_hf.Sapiens2ForSemanticSegmentation(config).eval()
            with torch.no_grad():
                return model(pixels).logits

        logits = _outcome(build, draw)
        if logits is None:
            outcomes["refused"] += 1
        else:
            outcomes["ok"] += 1
            assert torch.isfinite(logits).all(), draw
    assert outcomes["refused"] > 10, outcomes


# ---------------------------------------------------------------------------------------- safetensors headers

def test_any_corrupted_safetensors_header_loads_or_is_refused_cleanly(tmp_path):
    """Truncations and header corruptions (the length prefix, the JSON, the offsets); the tensor data is left alone,
    since a flipped weight byte is a different, valid file."""
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg"))
    model.save_pretrained(tmp_path / "healthy")
    data = (tmp_path / "healthy" / "model.safetensors").read_bytes()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length])
    rng = np.random.default_rng(34)
    refused = 0
    for index in range(24):
        kind = str(rng.choice(("truncate", "length", "json_bytes", "offsets")))
        corrupted = bytearray(data)
        if kind == "truncate":
            corrupted = corrupted[:int(rng.integers(0, len(data) - 1))]
        elif kind == "length":
            corrupted[:8] = struct.pack("<Q", int(rng.choice((0, 1, header_length + 1, len(data), 2**40, 2**63))))
        elif kind == "json_bytes":
            for position in rng.integers(8, 8 + header_length, 3):
                corrupted[int(position)] = int(rng.integers(0, 256))
        else:
            edited = json.loads(json.dumps(header))
            name = str(rng.choice([key for key in edited if key != "__metadata__"]))
            start, end = edited[name]["data_offsets"]
            edited[name]["data_offsets"] = [start, end + int(rng.integers(1, 10**9))]
            text = json.dumps(edited).encode()
            corrupted = bytearray(struct.pack("<Q", len(text)) + text + data[8 + header_length:])
        folder = tmp_path / f"draw{index}"
        folder.mkdir()
        (folder / "config.json").write_bytes((tmp_path / "healthy" / "config.json").read_bytes())
        (folder / "model.safetensors").write_bytes(bytes(corrupted))
        draw = f"draw {index}: {kind}"
        loaded = _outcome(lambda: sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(folder), draw)
        if loaded is None:
            refused += 1
    assert refused >= 20  # nearly every corruption is caught; the rest loaded a file that is still valid


# ------------------------------------------------------------------------------------------- command-line values

_VALUE_DRAWS = ("-1", "0", "1", "0.5", "2", "nan", "inf", "-inf", "1e309", "abc", "", "3.7", "100000000000")


def _typed_actions(parser: argparse.ArgumentParser):
    for action in parser._actions:  # noqa: SLF001 - argparse has no public listing of a parser's options
        if action.option_strings and action.type is not None and getattr(action.type, "__module__", "").startswith(
                ("sapiens2_hf", "builtins")) and action.type not in (str,):
            yield action


def test_any_numeric_option_value_parses_to_a_sane_value_or_exits_with_one_line(capsys):
    from sapiens2_hf.cli.main import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    rng = np.random.default_rng(35)
    checked = 0
    for command in ("pose", "seg", "video"):
        if command not in subparsers.choices:
            continue
        sub = subparsers.choices[command]
        for action in _typed_actions(sub):
            for value in rng.choice(_VALUE_DRAWS, 4, replace=False):
                draw = f"{command} {action.option_strings[0]} {value!r}"
                try:
                    parsed = action.type(str(value))
                except (argparse.ArgumentTypeError, ValueError, TypeError) as error:
                    message = str(error).strip()
                    assert message and "\n" not in message, draw
                    continue
                checked += 1
                if isinstance(parsed, float):
                    assert np.isfinite(parsed), f"{draw} parsed to {parsed}"
                if "threshold" in action.dest or "probability" in action.dest:
                    assert 0.0 <= parsed <= 1.0, f"{draw}: a probability parsed to {parsed}"
    assert checked > 0
