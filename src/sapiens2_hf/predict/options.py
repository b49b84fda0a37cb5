"""The typed options of a run (`PredictOptions`: what the image and video loops, the writers and the web app read) and
the checks of what the `sapiens2-hf` commands and the app accept, before any work (standard library only: the parser
is built without torch, tests/test_cli_startup.py).

- Numbers (argparse types): `positive_int`; `finite_float`, `positive_float`, `non_negative_float`, `probability`
  refuse NaN and infinity, which compare false with every threshold and would pass any range check written as
  `value < low`. `device_name` checks the spelling of `--device` (whether this machine has it is checked where the
  pipeline is made, `sapiens2_hf.pipeline_factory.check_device`: that needs torch).
- Paths the user names (`check_local_source`, `check_regular_file`): a missing path that cannot be a Hub id is "no
  such file or folder" instead of a Hub lookup; anything that is not a regular file or a folder (a FIFO, a socket, a
  device) is refused before it is opened, because reading one blocks until another process writes to it; the JSON
  files of a model folder must hold JSON objects of sane depth (json raises RecursionError on deep nesting, and the
  loaders call `.get` on what they read).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..export.formats import RUNTIME_BACKENDS
from ..modeling.sapiens2_tasks import KEYPOINT_FORMAT_NAMES, TASK_SPECS, looks_local

# JSON files of a model, adapter or export folder that the loaders read.
MODEL_FOLDER_JSON = ("config.json", "preprocessor_config.json", "processor_config.json", "adapter_config.json",
                     "export_info.json", "model.safetensors.index.json")
MAX_JSON_DEPTH = 64  # far deeper than any config; json.loads overflows the stack near 1000


def positive_int(text: str) -> int:
    """argparse type for sizes and counts: an integer >= 1."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer (>= 1)")
    return value


def seed(text: str) -> int:
    """argparse type for `--seed`: what torch and numpy accept, 0 ... 2**32 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"{value} is outside 0 ... {2**32 - 1}")
    return value


def out_folder(text: str) -> str:
    """argparse type for `--out`: an empty name would silently mean the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; name the folder to write into")
    return text


def _number(text: str, accepts, requirement: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or not accepts(value):
        raise argparse.ArgumentTypeError(f"{text} is not {requirement}")
    return value


def finite_float(text: str) -> float:
    """argparse type: a number other than NaN and +-infinity."""
    return _number(text, lambda value: True, "a finite number")


def positive_float(text: str) -> float:
    return _number(text, lambda value: value > 0, "a positive finite number")


def non_negative_float(text: str) -> float:
    return _number(text, lambda value: value >= 0, "a finite number >= 0")


def probability(text: str) -> float:
    """argparse type for scores, thresholds and IoUs: a number in [0, 1]."""
    return _number(text, lambda value: 0 <= value <= 1, "a probability in [0, 1]")


DTYPES = ("float32", "bfloat16", "float16")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# `--backend`: the torch model, or a backend of the export table (an exported ONNX folder run by onnxruntime, float32
# or its int8 file; an AOTInductor package); the table is stdlib-only: `--help` stays torch-free.
BACKENDS = ("torch", *RUNTIME_BACKENDS)
# Device types `--device` may name (torch's accelerators); whether this machine has one is checked with torch.
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "npu", "hpu", "mlu", "musa")


def device_name(text: str) -> str:
    """argparse type of `--device`: `auto`, or a device type of `DEVICE_TYPES` with an optional `:index`."""
    kind, colon, index = text.partition(":")
    if text == "auto" or (kind in DEVICE_TYPES and (not colon or index.isdigit())):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a device; use auto, cpu, cuda, cuda:N (a GPU index) or mps")


def _named(option: str, value: str | os.PathLike) -> str:
    """`--option value`, or the value alone for a positional argument (`option` empty)."""
    return f"{option} {os.fspath(value)}" if option else os.fspath(value)


def check_regular_file(option: str, path: str | os.PathLike) -> None:
    """Refuses an existing `path` that is neither a regular file nor a folder (links are followed)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: the caller's own error names it
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ValueError(f"{_named(option, path)} is not a regular file or folder (a FIFO, socket or device); "
                         "it is not read.")


def _depth(value, limit: int, depth: int = 0) -> int:
    if depth > limit or not isinstance(value, (dict, list)):
        return depth
    children = value.values() if isinstance(value, dict) else value
    return max((_depth(child, limit, depth + 1) for child in children), default=depth + 1)


def _check_json_object(option: str, path: Path) -> None:
    check_regular_file(option, path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError(f"{path} nests JSON deeper than {MAX_JSON_DEPTH} levels.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}).") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, not a {type(data).__name__}.")
    if _depth(data, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise ValueError(f"{path} nests JSON deeper than {MAX_JSON_DEPTH} levels.")


def check_local_source(option: str, value: str | os.PathLike | None) -> None:
    """Checks a model-like argument (`--model`; `option` "" for a positional one, `convert SOURCE`) before any loader
    sees it.

    A missing path that `looks_local` is "no such file or folder" (a Hub lookup would answer with a confusing
    repo-id error, or reach the network); a non-regular file is refused; a folder's entries must be regular files or
    folders and its `MODEL_FOLDER_JSON` files JSON objects. Anything else (a Hub id) is left to the loaders."""
    if value is None:
        return
    path = Path(value)
    if not path.exists():
        if looks_local(os.fspath(value)):
            raise ValueError(f"{_named(option, value)}: no such file or folder.")
        return
    check_regular_file(option, path)
    if path.is_dir():
        for entry in path.iterdir():
            check_regular_file(option, entry)
        for name in MODEL_FOLDER_JSON:
            if (path / name).exists():
                _check_json_object(option, path / name)


def check_intrinsics(intrinsics) -> None:
    if intrinsics is not None and not min(intrinsics[:2]) > 0:  # the type checked all four are finite
        raise ValueError(f"--intrinsics {' '.join(f'{value:g}' for value in intrinsics)}: the focal lengths FX and FY "
                         "must be positive (pixels of the input images).")


__all__ = ["ForegroundOptions", "LiftingOptions", "OutputOptions", "PredictOptions", "RuntimeOptions", "VideoOptions",
           "check_intrinsics", "check_local_source", "check_regular_file", "command_defaults", "device_name",
           "finite_float", "non_negative_float", "positive_float", "positive_int", "predict_options", "probability"]


# ------------------------------------------------------------------------------------------------ typed options


def _option(default=None, on: str | None = None, check=None, fingerprint: str | None = None, command: bool = True):
    """A field; a command option (`command`) has `default` in each predict command that takes it (`on`: the registry
    property giving it; None in the others) and its argparse type's value rule `check` (a tuple: its choices).
    `fingerprint`: "never" (results change within float tolerance only), "when_set" (added after the first resume
    markers were written: recorded only when set, so that older markers stay valid)."""
    metadata = {"fingerprint": fingerprint, **({"command": (default, on, check)} if command else {})}
    return field(default=None if on else default, metadata=metadata)


class _OptionGroup:
    """A frozen group of a predict command's options: built from the parsed command line (`from_args`; an option the
    command does not have is the field's default) or directly, without argv (the web app)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace):
        return cls(**{option.name: getattr(args, option.name, option.default) for option in fields(cls)})

    def fingerprint(self) -> dict[str, Any]:
        """The options that change what is written, as a resume marker records them (set-only ones while set)."""
        recorded = {}
        for option in fields(self):
            rule, value = option.metadata.get("fingerprint"), getattr(self, option.name)
            if rule == "never" or (rule == "when_set" and value in (None, False)):
                continue
            recorded[option.name] = value
        return recorded


@dataclass(frozen=True)
class RuntimeOptions(_OptionGroup):
    """Which model runs, where and how (`--model`, `--device`, `--dtype`, `--backend`, `--compile*`, `--batch-size`,
    `--input-size`, `--threads`). Of these only the dtype and the input size change what is written beyond float
    tolerance, so only they are fingerprinted."""

    model: str | None = _option(fingerprint="never")
    dtype: str = _option("float32", check=DTYPES)
    input_size: Any = _option(check=positive_int)
    device: str = _option("auto", check=device_name, fingerprint="never")
    backend: str = _option("torch", check=BACKENDS, fingerprint="never")
    compile: bool = _option(False, fingerprint="never")
    compile_mode: str | None = _option(check=COMPILE_MODES, fingerprint="never")
    compile_cache: str | None = _option(fingerprint="never")
    batch_size: int = _option(1, check=positive_int, fingerprint="never")
    threads: int | None = _option(check=positive_int, fingerprint="never")


@dataclass(frozen=True)
class OutputOptions(_OptionGroup):
    """What is computed and written per image: files, the pose decoding and detection, the camera of a pointmap."""

    no_overlay: bool = _option(False)
    no_arrays: bool = _option(False)
    ply: bool | None = _option(False, "metric_3d")
    no_flip_test: bool | None = _option(False, "top_down")
    kpt_threshold: float | None = _option(0.3, "top_down", probability)
    detector: str | None = _option(None, "top_down")
    detector_threshold: float | None = _option(0.3, "top_down", probability)
    keypoint_format: str | None = _option(None, "top_down", KEYPOINT_FORMAT_NAMES)
    focal_length: float | None = _option(None, "metric_3d", positive_float, "when_set")
    intrinsics: Any = _option(None, "metric_3d", finite_float, "when_set")
    # The loaded model's own labels, set once it is loaded (`with_model_labels`), not options: a pose model's keypoint
    # links (0-based, its config's `skeleton`; None: the official 308 skeleton) and a segmentation model's class names
    # (None: the 29 official ones).
    skeleton: Any = _option(fingerprint="never", command=False)
    class_names: Any = _option(fingerprint="never", command=False)


@dataclass(frozen=True)
class VideoOptions(_OptionGroup):
    """How videos are read, tracked and smoothed (`--video-stride`, `--max-frames`, the pose tracker and One-Euro
    filter, the dense tasks' `--temporal-filter`)."""

    video_stride: int = _option(1, check=positive_int)
    max_frames: int | None = _option(check=positive_int)
    detect_every: int | None = _option(1, "top_down", positive_int)
    track_iou: float | None = _option(0.3, "top_down", probability)
    no_smooth: bool | None = _option(False, "top_down")
    # sapiens2_hf.video.smoothing.DEFAULT_MIN_CUTOFF / DEFAULT_BETA (tests/test_cli_video.py checks they agree)
    smooth_min_cutoff: float | None = _option(1.0, "top_down", positive_float)
    smooth_beta: float | None = _option(0.02, "top_down", non_negative_float)
    # `--temporal-filter` for the tasks whose result holds per-pixel maps (as sapiens2_hf.video.smoothing's)
    temporal_filter: bool | None = _option(False, "result_maps", fingerprint="when_set")
    temporal_min_cutoff: float | None = _option(None, "result_maps", positive_float, "when_set")
    temporal_beta: float | None = _option(None, "result_maps", non_negative_float, "when_set")


@dataclass(frozen=True)
class ForegroundOptions(_OptionGroup):
    """Keeping only the person in a dense task's maps: a segmentation model, or given mask images."""

    foreground_model: str | None = _option(None, "foreground_fill", fingerprint="when_set")
    foreground_mask: str | None = _option(None, "foreground_fill", fingerprint="when_set")


@dataclass(frozen=True)
class LiftingOptions(_OptionGroup):
    """`sapiens2-hf pose3d`: the pointmap model the pose is lifted with, the lifting's parameters and the 3D files
    (`--pointmap-model`, `--window-radius`, `--depth-jump`, `--surface`, `--no-glb`, `--max-vertices`); unset in the
    predict commands."""

    pointmap_model: str | None = _option(fingerprint="when_set", command=False)
    window_radius: int | None = _option(fingerprint="when_set", command=False)
    depth_jump: float | None = _option(fingerprint="when_set", command=False)
    surface: bool | None = _option(fingerprint="when_set", command=False)
    no_glb: bool | None = _option(fingerprint="when_set", command=False)
    max_vertices: int | None = _option(fingerprint="when_set", command=False)


@dataclass(frozen=True)
class PredictOptions:
    """A predict command (`sapiens2-hf <task> ...`) as typed, frozen groups: what the image and video loops, the
    writers and the web app read. `from_args` builds it from the parsed command line; the app with `predict_options`.

    Attributes:
        task (`str`): the registry task.
        inputs (`tuple[str, ...]`), out (`str`): the inputs and the output folder.
        runtime, output, video, foreground, lifting: the option groups (lifting: pose3d only).
        boxes (`str`, *optional*): the `--boxes` file (pose).
        whole_image (`bool`): pose: an input without a `--boxes` entry is one person filling the image.
        overwrite, quiet (`bool`): recompute finished inputs; no progress bar.
    """

    task: str
    runtime: RuntimeOptions
    output: OutputOptions = field(default_factory=OutputOptions)
    video: VideoOptions = field(default_factory=VideoOptions)
    foreground: ForegroundOptions = field(default_factory=ForegroundOptions)
    lifting: LiftingOptions = field(default_factory=LiftingOptions)
    inputs: tuple[str, ...] = _option(())
    out: str = _option("", check=out_folder)
    boxes: str | None = _option(None, "top_down")
    whole_image: bool = field(default=False, metadata={"command": (False, "top_down", None)})
    overwrite: bool = _option(False)
    quiet: bool = _option(False)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "PredictOptions":
        groups = {"runtime": RuntimeOptions, "output": OutputOptions, "video": VideoOptions,
                  "foreground": ForegroundOptions, "lifting": LiftingOptions}
        plain = {option.name: getattr(args, option.name, None) or option.default for option in fields(cls)
                 if "command" in option.metadata}
        return cls(task=args.task, **{name: group.from_args(args) for name, group in groups.items()},
                   **{**plain, "inputs": tuple(plain["inputs"]), "out": str(plain["out"])})

    def fingerprint(self) -> dict[str, Any]:
        """Every option that changes what an input's outputs are (the resume marker's `options`): the dtype and
        input size, then the output, video and foreground groups; device, batch size and threads are not."""
        whole_image = {"whole_image": True} if self.whole_image else {}  # absent when off: older markers match
        return {**self.runtime.fingerprint(), **self.output.fingerprint(), **self.video.fingerprint(),
                **self.foreground.fingerprint(), **self.lifting.fingerprint(), **whole_image}

    def replace(self, **changes) -> "PredictOptions":
        """A copy with top-level fields or whole groups replaced (`dataclasses.replace`)."""
        return dataclasses.replace(self, **changes)

    def with_model_labels(self, config) -> "PredictOptions":
        """A copy that draws and writes the loaded model's own keypoint set: its config's `skeleton` (a model
        fine-tuned on another set than the official 308)."""
        labels = {}
        if self.output.keypoint_format and TASK_SPECS[self.task].top_down:
            # refused before any input is read, naming what the model lacks (not after inference, when writing)
            from ..data.keypoint_formats import source_keypoint_indices  # torch: loaded with the model

            source_keypoint_indices(self.output.keypoint_format, [config.id2label[i] for i in range(config.num_labels)])
        if getattr(config, "skeleton", None) is not None:
            labels["skeleton"] = tuple(tuple(link) for link in config.skeleton)
        if TASK_SPECS[self.task].class_map:
            labels["class_names"] = tuple(config.id2label[i] for i in range(config.num_labels))
        return self.replace(output=dataclasses.replace(self.output, **labels)) if labels else self


def _command_options(task: str) -> dict[str, Any]:
    """The fields of `sapiens2-hf <task>`'s options: the common ones (`on` None) and those of the registry properties
    the task has (a `foreground_fill` that is not None: its maps are masked by a person foreground)."""
    if task not in TASK_SPECS:
        raise ValueError(f"unknown task {task!r}; one of {', '.join(TASK_SPECS)}.")
    spec, groups = TASK_SPECS[task], (PredictOptions, RuntimeOptions, OutputOptions, VideoOptions, ForegroundOptions)
    return {option.name: option for group in groups for option in fields(group) if "command" in option.metadata and (
        (on := option.metadata["command"][1]) is None
        or (spec.foreground_fill is not None if on == "foreground_fill" else bool(getattr(spec, on))))}


def command_defaults(task: str) -> dict[str, Any]:
    """Every option of `sapiens2-hf <task>` with its default: the one place they are defined (the parser sets them,
    `predict_options` starts from them)."""
    return {name: option.metadata["command"][0] for name, option in _command_options(task).items()}


def predict_options(task: str, model: str, out: str | os.PathLike = "", **changes: Any) -> PredictOptions:
    """The options of `sapiens2-hf <task> --model MODEL --out OUT` with every other option at the command's default
    (`command_defaults`), and `changes` by option name (`kpt_threshold=0.5`, `ply=True`), each checked as the command
    line checks it: how the web app builds a command's options without a command line."""
    options = _command_options(task)
    unknown = sorted(set(changes) - set(options))
    if unknown:
        raise ValueError(f"`sapiens2-hf {task}` has no option(s) {unknown}.")
    for name, value in changes.items():
        _check_value(name, options[name].metadata["command"][2], value)
    values = {**command_defaults(task), "model": model, "out": str(out), "task": task, **changes}
    return PredictOptions.from_args(argparse.Namespace(**values))


def _check_value(name: str, check, value: Any) -> None:
    """A value given by option name (`predict_options`) checked by the option's value rule (`probability`,
    `positive_int`, ...; a tuple: its choices), each item of a list."""
    if value is None or isinstance(value, bool) or check is None:
        return
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(check, tuple) and item not in check:
            raise ValueError(f"{name}={value!r}; use one of {', '.join(map(str, check))}.")
        try:
            if not isinstance(check, tuple):
                check(str(item))
        except (argparse.ArgumentTypeError, ValueError) as error:
            raise ValueError(f"{name}={value!r}: {error or 'not a valid value'}.") from None
