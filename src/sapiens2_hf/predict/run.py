"""The run of `sapiens2-hf {pose,seg,normal,pointmap,albedo,matting} INPUT... --model M --out DIR` (`predict(options)`,
parsed by cli/predict.py) and of the web app: batch inference over images, folders and videos; sharded over
processes under `accelerate launch`, resumable. docs/cli.md documents every file each command writes, for users.

For each input image the command writes, atomically, into `--out`:

| task | files |
|---|---|
| pose | `<name>.json` (COCO-style: image, categories with the keypoint names and skeleton, one annotation per person with `bbox` in COCO xywh and `bbox_xyxy`; `info.bbox_format` says "xywh"), `<name>_pose.png` (overlay) |
| seg | `<name>_seg.npy` (uint8 class ids, height x width), `<name>_seg.png` (overlay with legend) |
| normal | `<name>_normal.npy` (float32 height x width x 3), `<name>_normal.png` ((n + 1) / 2 as RGB) |
| pointmap | `<name>_pointmap.npy` (float32 XYZ), `<name>_depth.npy` (float32 Z), `<name>_depth.png` (Turbo-coloured depth with a colour bar labelled in metres at its 1st / 99th percentile ends; background grey), `<name>.ply` with `--ply` |
| albedo | `<name>_albedo.png` (uint8 RGB, truncated like the official demo), `<name>_albedo.npy` (float32 in [0, 1]) |
| matting | `<name>_alpha.png` (uint8), `<name>_alpha.npy` (float32 in [0, 1]), `<name>_foreground.png` (RGBA cut-out: the model's foreground, straight alpha), `<name>_matting.png` (the foreground over green) |

Person foreground (normal, pointmap, albedo), as the official demos do: `--foreground-model SEG_MODEL` runs a
Sapiens2 segmentation model (folder, Hub id or official file) on the same batches and keeps the pixels it labels as
a body part (label > 0); `--foreground-mask PATH_OR_DIR` takes given masks instead: one mask image for every input
(and video frame), or a folder with `<input name>.png` (or another image suffix) per image input (non-zero =
person; an image input without one is skipped and reported). Outside the person the arrays hold 0 (normals,
albedo) or NaN (pointmap, depth; the .ply leaves those points out), the overlays show it neutral (grey normals and
depth, black albedo), and `<name>_mask.png` (uint8, 255 = person) is written beside them.

| option | tasks | effect |
|---|---|---|
| `--foreground-model SEG_MODEL` | normal, pointmap, albedo | mask by a segmentation model's foreground |
| `--foreground-mask PATH_OR_DIR` | normal, pointmap, albedo | mask by given masks (one file for all, or a folder) |
| `--focal-length F` | pointmap | metric pointmap / depth for a camera of horizontal focal length F (pixels of each input image) |
| `--intrinsics FX FY CX CY` | pointmap | the same with the whole camera: Z from FX, X and Y re-projected through it |

`--no-overlay` leaves out the visualisations, `--no-arrays` the .npy files. Pose keypoints are the model's 308 unless
`--keypoint-format coco17|coco_wholebody133|body25` (the JSON then holds that format's keypoints, names and the links
of the 308 skeleton between keypoints the format copies; the overlay still shows the 308).

Videos (`.mp4`, `.avi`, `.mov`, `.mkv`, `.webm`, `.m4v`; decoded with PyAV, frame by frame) give `<out>/<video
name>.mp4`, the annotated video (the overlays above, at the input's frame rate divided by `--video-stride`), and per
processed frame `<out>/<video name>/frame_<index>...`: the arrays above, and for pose one COCO-style JSON per frame
(`frame_<index>.json`, with `frame_index`, `time_s` and a `track_id` per person). Pose on video runs the person
detector every `--detect-every` frames (and on any frame while nobody is tracked); in between each person's box
follows its keypoints of the previous frame; people keep their track id from detection to detection by IoU matching,
and keypoints are smoothed over time by a One-Euro filter (`--smooth-min-cutoff`, `--smooth-beta`, off with
`--no-smooth`). Details: `sapiens2_hf.video` and predict/video.py.

An input that fails (unreadable or truncated file, bad boxes, no detector for an image without boxes, ...) is reported
on stderr and in `<out>/summary.json` (`skipped`: input and reason) and skipped; the run goes on with the rest. A
summary is printed at the end and written to `<out>/summary.json`. Exit status: 0 when every input was processed, 1
when some were skipped, 2 for usage errors (bad arguments, unreadable model or boxes file) before any input is
processed, and 2 when the outputs cannot be written (a full disk, a read-only --out): the run then stops at the first
failed write instead of computing the rest, and the summary lists the input that failed (`skipped`), the inputs not
processed (`not_processed`) and why (`stopped`); when the summary itself cannot be written, the lists go to stderr.

`<name>` is the input's stem (`photo.jpg` -> `photo`) unless another input would write the same file: then its file
name (`a.jpg` and `a.png` -> `a.jpg_seg.png`, `a.png_seg.png`), and for the same file name in two folders the file
name and a hash of its path (`a.png-1c9e05d2f3`); `summary.json` lists every such input under `output_names`
(the rule: the function `output_names`). `--out` must not be an input folder or the folder of an input file (outputs would be read
back as inputs and could replace files of the user's); a subfolder is fine, folders are not read recursively. URLs,
FIFOs and other non-regular files are not read (skipped with the reason; as `--boxes` or `--model`, a usage error).

Resuming and sharding: inputs whose outputs a previous run completed with the same options are skipped
(`already_done` in the summary; `--overwrite` recomputes them); under `accelerate launch --num_processes N -m
sapiens2_hf.cli.main <task> ...` each process takes its share of the inputs (`sapiens2_hf.runs.shard`); each
input's done marker (`sapiens2_hf.runs.resume`) records a fingerprint of the input file, the model and the options
that change outputs (`PredictOptions.fingerprint`, the input's --boxes entry). Each run's own record is also kept
under its task's name, `<out>/.sapiens2-hf/runs/<task>.json`, so runs of two tasks into one --out keep both.

Pose boxes (`--boxes FILE.json`): `{key: [[x_min, y_min, x_max, y_max], ...]}` in image pixels (xyxy, like the
pipeline), `[]` for no people. Keys are image file names (`a.jpg`) or the paths as given; a video frame's key is
`<video file name>#<frame index>` (e.g. `clip.mp4#0`, `clip.mp4#30`; the index counts every decoded frame, before
`--video-stride`) or `<video path>#<frame index>`. Inputs without an entry go through the person detector
(`--detector`, default `PekingU/rtdetr_r50vd`, which needs the Hub or a local copy), unless a key of the file matches
no input: that is taken for a misspelt key, a usage error naming the inputs without an entry and the closest name
(`check_boxes_keys`). JSON is written without NaN or infinity (`allow_nan=False`): boxes are checked before use.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import functools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from ..modeling.sapiens2_tasks import TASK_SPECS
from ..runs.inputs import IMAGE_SUFFIXES, check_out_not_in_inputs, collect_files
from ..runs.inputs import output_names as _unit_names
from ..runs.records import RunReport, merge_summaries, part_path, write_summary
from ..runs.resume import STATE_FOLDER, ResumeMarkers, file_fingerprint
from ..runs.shard import Shard
from ..utils.run_lock import run_folder_lock
from .options import ForegroundOptions, PredictOptions, check_intrinsics, check_local_source, check_regular_file
from .outputs import (OutputWriteError, _boxes_for, image_output_suffixes, pose_annotations, predict_images,
                      write_outputs, writing_outputs)


# The entries of a video named `v` in --out (its frame folder and its annotated video); an image's files are
# `image_output_suffixes()` (predict/outputs.py). `output_names` keeps them apart.
VIDEO_OUTPUT_SUFFIXES = ("", ".mp4")
RESERVED_ENTRIES = ("summary.json", STATE_FOLDER)


# ----------------------------------------------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class _Item:
    """One image to process: where it comes from and how to read it."""

    name: str  # output name (unique within the run)
    source: str  # for messages and the boxes file
    out_dir: Path
    load: Callable[[], np.ndarray]
    marker: tuple[str, dict] | None = None  # (name, fingerprint) of the done marker written after its outputs


def output_names(images: list[Path], videos: list[Path]) -> tuple[list[str], list[str]]:
    """The output name of every input: one rule for images and videos, injective over the inputs of a run.

    An input is named by the first of these under which no entry it writes into --out clashes with another input's:
    its stem (`a.png` -> `a`, as before), its file name (`a.png` while `a.jpg` is an input too), its file name and a
    hash of its resolved path (`a.png-1c9e05d2f3`, for an `a.png` in two folders). The entries are
    `name + image_output_suffixes()` for an image and `name + VIDEO_OUTPUT_SUFFIXES` for a video, compared without
    letter case (case-insensitive file systems); `RESERVED_ENTRIES` (the run's summary and state folder) clash with
    every input. All inputs of a clash move on together, so a name does not depend on the order of the inputs, only
    on which inputs clash; a run computes every name before sharding (the rule: `runs.inputs.output_names`)."""
    units = [(path, image_output_suffixes()) for path in images] + [(path, VIDEO_OUTPUT_SUFFIXES) for path in videos]
    names = _unit_names(units, RESERVED_ENTRIES)
    return names[:len(images)], names[len(images):]


# ----------------------------------------------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------------------------------------------


def build_pipeline(options: PredictOptions, device: str | None = None):
    """The command's pipeline, made by the library's own factory (`sapiens2_hf.pipeline`) from the model it loads
    (an official file, a folder, a Hub id, or an exported folder for `--backend`) and the image processor it finds
    (the model's saved one, else the task's official one, at `--input-size` when given). `--foreground-model` is a
    segmentation pipeline of its own, built the same way; `--compile` is the factory's `fast=True` recipe."""
    import torch

    from ..modeling import model_class_for_task
    from ..pipeline_factory import pipeline

    runtime = options.runtime
    if device is None or device == "auto":
        device = runtime.device if runtime.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if runtime.backend != "torch":
        model, device = load_backend_model(argparse.Namespace(task=options.task, **dataclasses.asdict(runtime)),
                                           runtime.device)
    else:
        model = model_class_for_task(options.task).from_pretrained(runtime.model)
    kwargs: dict[str, Any] = {}
    if TASK_SPECS[options.task].top_down and options.output.detector:
        kwargs["detector"] = options.output.detector
    if options.foreground.foreground_model:
        # the segmentation model as a pipeline of its own, loaded like --model (its processor, or the official one)
        segmenter = options.replace(task="seg", foreground=ForegroundOptions(), runtime=dataclasses.replace(
            runtime, model=options.foreground.foreground_model, input_size=None, backend="torch", compile=False))
        try:
            kwargs["segmenter"] = build_pipeline(segmenter, device)
        except (OSError, ValueError) as error:
            kind = OSError if isinstance(error, OSError) else ValueError
            raise kind(f"--foreground-model {options.foreground.foreground_model}: {error}") from error
    if runtime.backend == "torch" and runtime.compile:
        kwargs.update(fast=True, compile={"mode": runtime.compile_mode}, compile_cache_dir=runtime.compile_cache)
    return pipeline(TASK_SPECS[options.task].pipeline_name, model=model, image_processor=_image_processor(
        options, model), device=device, dtype=getattr(torch, runtime.dtype), **kwargs)


def load_backend_model(args: argparse.Namespace, device: str):
    """`(model, device)` for a predict command with `--backend onnxruntime[-int8]|aoti`.

    `args.model` must be an exported folder of `args.task` in the backend's format; `device` "auto" becomes the
    runtime's own device (the CPU for onnxruntime and CPU packages).
    """
    from ..export import load_backend

    if getattr(args, "dtype", "float32") != "float32":
        raise ValueError(f"--backend {args.backend} runs in float32; drop --dtype {args.dtype}.")
    model = load_backend(args.model, args.backend, task=args.task, num_threads=getattr(args, "threads", None))
    return model, (str(model.device) if device == "auto" else device)


def _image_processor(options: PredictOptions, model):
    """The model's saved image processor (ours or transformers' stock one: size and normalisation kept), else the
    task's official one at the model's input size; `--input-size` overrides the size."""
    from ..processing import Sapiens2HFImageProcessor

    source = options.runtime.model
    size = None
    if options.runtime.input_size is not None:
        size = {"height": options.runtime.input_size[0], "width": options.runtime.input_size[1]}
    saved = Path(source) / "preprocessor_config.json"
    config_dict = None
    if saved.is_file() or not Path(source).exists():  # a local folder with a processor, or a Hub repo
        try:
            config_dict, _ = Sapiens2HFImageProcessor.get_image_processor_dict(source)
        except OSError:
            if saved.is_file():
                raise
    if config_dict is None and size is None:
        height, width = model.config.image_size_hw
        size = {"height": height, "width": width}
    try:
        return Sapiens2HFImageProcessor.from_image_processor(config_dict, options.task,
                                                             **({"size": size} if size else {}))
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None


# ----------------------------------------------------------------------------------------------------------------
# main loop
# ----------------------------------------------------------------------------------------------------------------


def _load_boxes(path: str | None) -> dict[str, list]:
    if path is None:
        return {}
    check_regular_file("--boxes", path)
    try:
        data = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"--boxes {path} is not valid JSON: {error}.") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object {{image file name: [[x0, y0, x1, y1], ...]}}.")
    return data


def check_boxes_keys(path: str | None, boxes: dict, images: list[Path], videos: list[Path]) -> None:
    """Refuses a --boxes file with keys that match no input while some inputs have no entry: a misspelt key, whose
    image would otherwise go to the person detector (and fail there when none can be loaded). Keys of inputs not in
    this run are fine when every input has its entry (one file for several runs)."""
    names = {key for path in images for key in (path.name, str(path))}
    frames = {key for path in videos for key in (path.name, str(path))}  # a frame's key is `<video>#<index>`

    def matches(key: str) -> bool:
        video, hash_sign, index = key.rpartition("#")
        return key in names or bool(hash_sign and index.isdigit() and video in frames)

    unmatched = sorted(key for key in boxes if not matches(key))
    missing = [str(path) for path in images if _boxes_for(str(path), boxes) is None]
    missing += [str(path) for path in videos if not _video_boxes(path, boxes)]
    if not unmatched or not missing:
        return

    def closest(key: str) -> str:
        video, hash_sign, index = key.rpartition("#")
        if hash_sign and index.isdigit():
            near = difflib.get_close_matches(video, sorted(frames), n=1)
            return f" (did you mean {near[0] + '#' + index!r}?)" if near else ""
        near = difflib.get_close_matches(key, sorted(names), n=1)
        return f" (did you mean {near[0]!r}?)" if near else ""

    shown = ", ".join(f"{key!r} matches no input{closest(key)}" for key in unmatched[:5])
    more = f" and {len(unmatched) - 5} more" if len(unmatched) > 5 else ""
    raise ValueError(f"--boxes {path}: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                     f"{'has' if len(missing) == 1 else 'have'} no entry, while {shown}{more}; fix the key(s) "
                     "(image file names or paths as given, '<video file name>#<frame index>'), or remove them to run "
                     "the person detector on those inputs.")


def _mask_in_folder(folder: str, source: str) -> Path:
    """The --foreground-mask folder's mask of an input: `<input stem>.png`, else another image suffix."""
    stem = Path(source).stem
    for suffix in (".png", *sorted(IMAGE_SUFFIXES - {".png"})):
        candidate = Path(folder) / f"{stem}{suffix}"
        if candidate.is_file():
            return candidate
    raise ValueError(f"no foreground mask for {source} in --foreground-mask {folder} (looked for {stem}.png and the "
                     "other image suffixes).")


def _run_batch(options, pipe, batch: list[tuple[_Item, np.ndarray]], boxes: dict, report: RunReport,
               out: Path) -> None:
    """Process one batch. A failing input is skipped and reported, the others are processed: a failed batch is
    retried one input at a time to find which input failed."""
    per_image = [_boxes_for(item.source, boxes) for item, _ in batch] if TASK_SPECS[options.task].top_down else []
    listed = [b is not None for b in per_image]
    if len(batch) > 1 and any(listed) and not all(listed):  # some use --boxes, some the detector: one at a time
        for pair in batch:
            _run_batch(options, pipe, [pair], boxes, report, out)
        return
    try:
        extra = {}
        folder = options.foreground.foreground_mask
        if folder is not None and Path(folder).is_dir():
            extra["foreground_mask"] = [_mask_in_folder(folder, item.source) for item, _ in batch]
        results = predict_images(options, pipe, [image for _, image in batch], per_image if any(listed) else None,
                                 **extra)
    except Exception as error:  # noqa: BLE001 - a per-input failure must not end the run
        if len(batch) > 1:
            for pair in batch:
                _run_batch(options, pipe, [pair], boxes, report, out)
            return
        report.skip(batch[0][0].source, error)
        return
    for (item, image), result in zip(batch, results):
        try:
            base = item.out_dir / item.name
            pose_json = None
            if TASK_SPECS[options.task].top_down:
                pose_json = pose_annotations(item.source, image.shape, result, options.output.kpt_threshold,
                                             options.output.keypoint_format, skeleton=options.output.skeleton)
            with writing_outputs():
                files, _ = write_outputs(options, base, image, result, pose_json=pose_json)
                if item.marker is not None:
                    ResumeMarkers(out, "images").mark_done(item.marker[0], item.marker[1], files)
        except OutputWriteError as error:  # the folder cannot take more: stop the run (run_predict)
            report.skip(item.source, error)
            raise
        except Exception as error:  # noqa: BLE001 - e.g. NaN in the results
            report.skip(item.source, error)
            continue
        report.written += len(files)
        report.processed += 1
        report.finished.add(item.source)


def _video_boxes(path: Path, boxes: dict) -> dict:
    """The --boxes entries of one video's frames (for its done-marker fingerprint)."""
    prefixes = (f"{path.name}#", f"{path}#")
    return {key: value for key, value in sorted(boxes.items()) if key.startswith(prefixes)}



def predict(options: PredictOptions, command: str | None = None, run_units: Callable | None = None) -> int:
    """Runs a predict command (see the module docstring); returns its exit code. The run holds --out while it writes
    (`sapiens2_hf.utils.run_lock`): a second run into it meanwhile is refused in one line naming this one.

    A composed command runs on the same machinery (inputs, --out rule, lock, shards, resume markers, records, exit
    codes) with its own `command` name (its messages and its run record) and `run_units(options, todo, boxes,
    report, out, shard)`, which computes and writes this process's units (`_run_units` is the predict commands').
    """
    with contextlib.ExitStack() as out_lock:
        return _predict(options, out_lock, command or options.task, run_units or _run_units)


def fingerprint(options: PredictOptions, path: Path, boxes: Any) -> dict[str, Any]:
    """What an input's outputs depend on: the file, the task, the model, the options that change outputs, its
    --boxes entry (its done marker records it: `runs.resume`)."""
    return {**file_fingerprint(path), "task": options.task, "model": str(options.runtime.model),
            "options": options.fingerprint(), "boxes": boxes}


def _check_run_options(options: PredictOptions) -> None:
    """The option values `_predict` refuses before it reads any input."""
    if options.runtime.batch_size < 1 or options.video.video_stride < 1:
        raise ValueError("--batch-size and --video-stride must be >= 1.")
    if options.video.max_frames is not None and options.video.max_frames < 1:
        raise ValueError("--max-frames must be >= 1.")
    check_intrinsics(options.output.intrinsics)
    check_local_source("--model", options.runtime.model)
    check_local_source("--foreground-model", options.foreground.foreground_model)
    check_local_source("--detector", options.output.detector)


def _check_foreground_mask(mask_option: str | None, videos: list[Path]) -> None:
    if mask_option is None:
        return
    if not Path(mask_option).exists():
        raise ValueError(f"--foreground-mask {mask_option}: no such file or folder.")
    check_regular_file("--foreground-mask", mask_option)
    if Path(mask_option).is_dir() and videos:
        raise ValueError(f"--foreground-mask {mask_option} is a folder of per-image masks, which video frames do "
                         "not have; pass one mask file for every frame, or --foreground-model.")


def _units_to_run(options: PredictOptions, command: str, image_paths: list[Path], videos: list[Path], boxes: dict,
                  out: Path, shard, report: RunReport) -> tuple[list, dict[str, str]]:
    """This process's share of the inputs not done yet, as (kind, name, path, fingerprint or None), and the inputs
    whose outputs are not named by their stem (input -> name)."""
    # one ordered list of units on every process, named before sharding so that names do not depend on the share
    image_names, video_names = output_names(image_paths, videos)
    units = [("images", name, path) for name, path in zip(image_names, image_paths)]
    units += [("videos", name, path) for name, path in zip(video_names, videos)]
    renamed = {str(path): name for _, name, path in units if name != path.stem}
    todo = []
    for kind, name, path in shard.split(units):
        try:
            entry = _boxes_for(str(path), boxes) if kind == "images" else _video_boxes(path, boxes)
            expected = fingerprint(options, path, entry if TASK_SPECS[options.task].top_down else None)
        except OSError:  # unreadable: processed, and reported, as usual
            todo.append((kind, name, path, None))
            continue
        markers = ResumeMarkers(out, kind, None if command == options.task else command)  # a composed command's own
        if not options.overwrite and markers.is_done(name, expected):
            report.already_done += 1
            continue
        markers.clear(name)
        todo.append((kind, name, path, expected))
    return todo, renamed


def _merge_shard_summaries(out: Path, shard, options: PredictOptions, command: str, start: float) -> dict:
    """On the main process: the launch's summary.json from every process's part (the parts are removed)."""
    parts = [json.loads(part_path(out, k).read_text()) for k in range(shard.count)]
    record = merge_summaries(parts)
    record["seconds"] = round(time.perf_counter() - start, 3)
    write_summary(record, out / "summary.json", options.inputs, run=command)  # merged with an earlier run's
    for k in range(shard.count):
        part_path(out, k).unlink()
    return record


def _summary(command: str, options: PredictOptions, report: RunReport, start: float, renamed: dict[str, str],
             todo: list, stopped: OutputWriteError | None = None) -> dict[str, Any]:
    """This process's summary.json record (with what was not processed when the run `stopped`)."""
    record = {
        "task": command, "model": str(options.runtime.model), "processed": report.processed,
        "video_frames": report.frames, "already_done": report.already_done, "skipped": report.skipped,
        "files_written": report.written, "seconds": round(time.perf_counter() - start, 3), **report.notes,
    }
    if renamed:  # inputs whose outputs are not named by their stem (output_names)
        record["output_names"] = renamed
    if stopped is not None:
        record["stopped"] = str(stopped)
        record["not_processed"] = [str(path) for _, _, path, _ in todo if str(path) not in report.finished]
    return record


def _print_result(command: str, record: dict, out: Path, processes: int) -> None:
    print(f"sapiens2-hf {command}: processed {record['processed']} image(s)"
          + (f" ({record['video_frames']} video frame(s))" if record["video_frames"] else "")
          + (f", {record['already_done']} input(s) already done" if record["already_done"] else "")
          + f", wrote {record['files_written']} file(s) to {out} in {record['seconds']:.1f} s"
          + (f" with {processes} processes" if processes > 1 else ""))


def _predict(options: PredictOptions, out_lock: contextlib.ExitStack, command: str, run_units: Callable) -> int:
    _check_run_options(options)
    out = Path(options.out)
    report = RunReport()
    start = time.perf_counter()
    image_paths, videos = collect_files(options.inputs, report.skip)  # the others are reported skipped
    check_out_not_in_inputs(out, options.inputs, image_paths + videos)
    boxes = _load_boxes(options.boxes)
    check_boxes_keys(options.boxes, boxes, image_paths, videos)
    _check_foreground_mask(options.foreground.foreground_mask, videos)
    out.mkdir(parents=True, exist_ok=True)
    shard = Shard(options.runtime.device, feature="multi-process prediction")
    out_lock.enter_context(run_folder_lock(out, enabled=shard.is_main))  # the other processes write the main's share
    if not shard.is_main:  # every process finds the same missing inputs: the main process reports them
        report.skipped.clear()
    todo, renamed = _units_to_run(options, command, image_paths, videos, boxes, out, shard, report)
    summary = functools.partial(_summary, command, options, report, start, renamed, todo)
    summary_path = part_path(out, shard.index) if shard.count > 1 else out / "summary.json"
    try:
        run_units(options, todo, boxes, report, out, shard)
    except OutputWriteError as error:
        _stop(command, options, out, summary(error), summary_path, error)
    except BaseException:  # interrupted, or a bug: what was done and skipped is still put on record
        with contextlib.suppress(Exception):
            write_summary(summary(), summary_path, options.inputs, run=command)
        raise
    record = summary()
    try:
        write_summary(record, summary_path, options.inputs, run=command)
    except OSError as error:
        _stop(command, options, out, record, None, error)
    if shard.count > 1:
        shard.wait()  # every share is done and its part written
        if not shard.is_main:
            return 0  # the main process reports for the launch
        record = _merge_shard_summaries(out, shard, options, command, start)
        report.skipped = record["skipped"]
    _print_result(command, record, out, shard.count)
    if report.skipped:
        _print_skipped(command, report.skipped, f"listed in {out / 'summary.json'}")
        return 1
    return 0


def _run_units(options, todo: list, boxes: dict, report: RunReport, out: Path, shard) -> None:
    """Compute and write this process's inputs (`todo`: (kind, name, path, fingerprint or None))."""
    from ..runs.decode import decode_image  # torch: the pipelines' input rules
    from .video import count_frames, process_video  # torch (tracking)

    if not todo:
        return
    pipe = build_pipeline(options, shard.device(options.runtime.device))
    options = options.with_model_labels(pipe.model.config)
    items = [_Item(name, str(path), out, functools.partial(decode_image, path),
                   None if expected is None else (name, expected))
             for kind, name, path, expected in todo if kind == "images"]
    video_units = [(name, path, expected) for kind, name, path, expected in todo if kind == "videos"]
    total = len(items) + sum(count_frames(path, options.video.video_stride, options.video.max_frames)
                             for _, path, _ in video_units)
    with tqdm(total=total, disable=options.quiet or not shard.is_main, unit="img", desc=f"sapiens2-hf {options.task}",
              file=sys.stderr) as progress:
        batch: list[tuple[_Item, np.ndarray]] = []
        for item in items:
            try:
                image = item.load()
            except Exception as error:  # noqa: BLE001 - unreadable / truncated: skip this input
                report.skip(item.source, error)
                progress.update(1)
                continue
            batch.append((item, image))
            if len(batch) == options.runtime.batch_size:
                _run_batch(options, pipe, batch, boxes, report, out)
                progress.update(len(batch))
                batch = []
        if batch:
            _run_batch(options, pipe, batch, boxes, report, out)
            progress.update(len(batch))
        for name, path, expected in video_units:
            process_video(options, pipe, path, name, out, boxes, report, progress, expected)
            report.finished.add(str(path))


def _print_skipped(command: str, entries: list[dict], where: str) -> None:
    print(f"sapiens2-hf {command}: skipped {len(entries)} input(s) ({where}):", file=sys.stderr)
    for entry in entries:
        print(f"  skipped {entry['input']}: {entry['reason']}", file=sys.stderr)


def _stop(command: str, options, out: Path, record: dict, summary_path: Path | None, error: OSError) -> None:
    """End a run whose outputs cannot be written: the summary (skipped and not processed inputs) is written when it
    can be, else listed on stderr; then one `OutputWriteError` line (exit code 2)."""
    written = None
    if summary_path is not None:
        with contextlib.suppress(OSError):
            write_summary(record, summary_path, options.inputs, run=command)
            written = summary_path
    pending = record.get("not_processed", [])
    if written is None:
        if record["skipped"]:
            _print_skipped(command, record["skipped"], "the summary could not be written")
        for source in pending:
            print(f"  not processed {source}", file=sys.stderr)
    where = f"listed in {written}" if written else "listed above; the summary could not be written"
    raise OutputWriteError(error.errno, f"could not write into {out} ({error}); stopped with {record['processed']} "
                           f"image(s) written, {len(record['skipped'])} input(s) skipped and {len(pending)} not "
                           f"processed ({where}); a rerun resumes them") from error


__all__ = ["OutputWriteError", "build_pipeline", "output_names", "predict", "writing_outputs"]
