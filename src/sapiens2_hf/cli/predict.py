"""`sapiens2-hf {pose,seg,normal,pointmap,albedo} INPUT... --model M --out DIR`: batch inference over images,
folders and videos.

For each input image (or video frame) the command writes, atomically, into `--out`:

| task | files |
|---|---|
| pose | `<name>.json` (COCO-style: image, categories with the 308 keypoint names and skeleton, one annotation per person), `<name>_pose.png` (overlay) |
| seg | `<name>_seg.npy` (uint8 class ids, height x width), `<name>_seg.png` (overlay with legend) |
| normal | `<name>_normal.npy` (float32 height x width x 3), `<name>_normal.png` ((n + 1) / 2 as RGB) |
| pointmap | `<name>_pointmap.npy` (float32 XYZ), `<name>_depth.npy` (float32 Z), `<name>_depth.png`, `<name>.ply` with `--ply` |
| albedo | `<name>_albedo.png` (uint8 RGB, truncated like the official demo), `<name>_albedo.npy` (float32 in [0, 1]) |

Video frames go to `<out>/<video name>/frame_<index>...`. An input that fails (unreadable or truncated file, bad
boxes, no detector for an image without boxes, ...) is reported on stderr and in `<out>/summary.json` (`skipped`:
input and reason) and skipped; the run goes on with the rest. A summary is printed at the end and written to
`<out>/summary.json`. Exit status: 0 when every input was processed, 1 when some were skipped, 2 for usage errors
(bad arguments, unreadable model or boxes file) before any input is processed.

Pose boxes (`--boxes FILE.json`): `{key: [[x_min, y_min, x_max, y_max], ...]}` in image pixels (xyxy, like the
pipeline), `[]` for no people. Keys are image file names (`a.jpg`) or the paths as given; a video frame's key is
`<video file name>#<frame index>` (e.g. `clip.mp4#0`, `clip.mp4#30`; the index counts every decoded frame, before
`--video-stride`) or `<video path>#<frame index>`. Inputs without an entry go through the person detector
(`--detector`, default `PekingU/rtdetr_r50vd`, which needs the Hub or a local copy). JSON is written without NaN or
infinity (`allow_nan=False`): boxes are checked before use.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .convert import positive_int


TASK_TO_PIPELINE = {
    "pose": "sapiens2-pose",
    "seg": "sapiens2-segmentation",
    "normal": "sapiens2-normal",
    "pointmap": "sapiens2-pointmap",
    "albedo": "sapiens2-albedo",
}
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
VIDEO_SUFFIXES = {".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v"}
_HELP = {
    "pose": "308-keypoint pose (top-down: person boxes from --boxes or a detector)",
    "seg": "29-class body-part segmentation",
    "normal": "surface normals",
    "pointmap": "metric pointmap and depth",
    "albedo": "albedo",
}


def add_predict_subparsers(subparsers) -> None:
    """Register `pose`, `seg`, `normal`, `pointmap` and `albedo` on the `sapiens2-hf` command."""
    for task, help_text in _HELP.items():
        parser = subparsers.add_parser(task, help=f"run {help_text} on images, folders and videos",
                                       description=__doc__.split("\n\n")[0])
        parser.add_argument("inputs", nargs="+", metavar="INPUT", help="image files, folders (not recursive), videos")
        parser.add_argument("--model", required=True,
                            help="converted folder, Hub id, or official sapiens2_<size>_<task>.safetensors file")
        parser.add_argument("--out", required=True, help="output folder (created)")
        parser.add_argument("--device", default="auto", help="'auto' (cuda when available), 'cpu', 'cuda:0', ...")
        parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
        parser.add_argument("--batch-size", type=int, default=1, help="images per model batch")
        parser.add_argument("--input-size", type=positive_int, nargs=2, metavar=("HEIGHT", "WIDTH"), default=None,
                            help="model input size (default: the model's / the saved processor's)")
        parser.add_argument("--no-overlay", action="store_true", help="do not write visualisations")
        parser.add_argument("--no-arrays", action="store_true", help="do not write .npy arrays")
        parser.add_argument("--video-stride", type=int, default=1, help="process every n-th video frame")
        parser.add_argument("--max-frames", type=int, default=None, help="at most this many frames per video")
        parser.add_argument("--quiet", action="store_true", help="no progress bar")
        if task == "pose":
            parser.add_argument("--boxes", default=None, metavar="FILE.json",
                                help="JSON file {key: [[x_min, y_min, x_max, y_max], ...]} of person boxes in "
                                     "pixels ([] = nobody). Keys: image file names ('a.jpg') or paths as given; "
                                     "video frames: '<video file name>#<frame index>' (e.g. 'clip.mp4#0', "
                                     "'clip.mp4#30'; the index counts every decoded frame, before --video-stride) "
                                     "or '<video path>#<frame index>'. Inputs not listed use the detector")
            parser.add_argument("--detector", default=None, metavar="ID_OR_FOLDER",
                                help="object-detection model id or local folder for inputs without boxes (default "
                                     "PekingU/rtdetr_r50vd: needs the Hub or a cached copy)")
            parser.add_argument("--detector-threshold", type=float, default=0.3)
            parser.add_argument("--no-flip-test", action="store_true", help="disable the official flip test")
            parser.add_argument("--kpt-threshold", type=float, default=0.3, help="keypoint score for drawing")
        if task == "pointmap":
            parser.add_argument("--ply", action="store_true", help="also write a coloured point cloud (.ply)")
        parser.set_defaults(handler=run_predict, task=task)


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


@dataclass
class _Report:
    processed: int = 0
    frames: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    written: int = 0


def _read_image(path: Path) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        from ..processing import load_image_rgb

        return load_image_rgb(path)

    return load


def _iter_video(path: Path, out_dir: Path, stride: int, max_frames: int | None, report: _Report) -> Iterator[_Item]:
    try:
        import cv2
    except ImportError:
        report.skipped.append({"input": str(path), "reason": "videos need OpenCV (pip install opencv-python-headless)"})
        return
    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        report.skipped.append({"input": str(path), "reason": "cannot open the video"})
        return
    index = taken = 0
    try:
        while max_frames is None or taken < max_frames:
            ok, frame = capture.read()
            if not ok:
                break
            if index % stride == 0:
                rgb = np.ascontiguousarray(frame[..., ::-1])
                yield _Item(f"frame_{index:06d}", f"{path}#{index}", out_dir / path.stem, lambda rgb=rgb: rgb)
                taken += 1
            index += 1
    finally:
        capture.release()
    if taken == 0:
        report.skipped.append({"input": str(path), "reason": "no frame could be decoded"})


def _count_video_frames(path: Path, stride: int, max_frames: int | None) -> int:
    try:
        import cv2
    except ImportError:
        return 0
    capture = cv2.VideoCapture(str(path))
    count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) if capture.isOpened() else 0
    capture.release()
    count = -(-count // stride)
    return min(count, max_frames) if max_frames is not None else count


def _collect(inputs: list[str], report: _Report) -> tuple[list[Path], list[Path]]:
    images, videos = [], []
    for entry in inputs:
        path = Path(entry)
        candidates = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        for candidate in candidates:
            suffix = candidate.suffix.lower()
            if not candidate.exists():
                report.skipped.append({"input": str(candidate), "reason": "no such file or folder"})
            elif suffix in VIDEO_SUFFIXES:
                videos.append(candidate)
            elif suffix in IMAGE_SUFFIXES or not path.is_dir():
                images.append(candidate)
            # other files inside a folder (notes, json, ...) are silently ignored
    return images, videos


def _unique_names(paths: list[Path]) -> list[str]:
    used: dict[str, int] = {}
    names = []
    for path in paths:
        stem = path.stem
        count = used.get(stem, 0)
        used[stem] = count + 1
        names.append(stem if count == 0 else f"{stem}_{count}")
    return names


# ----------------------------------------------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------------------------------------------


def _build_pipeline(args: argparse.Namespace):
    import torch

    from ..modeling import model_class_for_task
    from ..pipelines import PIPELINE_CLASSES
    from ..processing import Sapiens2HFImageProcessor, image_processor_for_task

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    model = model_class_for_task(args.task).from_pretrained(args.model)
    size = None
    if args.input_size is not None:
        size = {"height": args.input_size[0], "width": args.input_size[1]}
    saved = Path(args.model) / "preprocessor_config.json"
    processor = None
    if saved.is_file() or not Path(args.model).exists():  # a local folder with a processor, or a Hub repo
        try:
            config_dict, _ = Sapiens2HFImageProcessor.get_image_processor_dict(args.model)
        except OSError:
            if saved.is_file():
                raise
            config_dict = None
        if config_dict is not None:
            config_dict = {k: v for k, v in config_dict.items() if k != "image_processor_type"}
            if "task" not in config_dict:  # transformers' own processor config: keep its values, use our policy
                config_dict["task"] = args.task
            processor = Sapiens2HFImageProcessor(**{**config_dict, **({"size": size} if size else {})})
        if processor is not None and processor.task != args.task:
            raise ValueError(f"the image processor of {args.model} is for task {processor.task!r}, not "
                             f"{args.task!r}.")
    if processor is None:
        if size is None:
            height, width = model.config.image_size_hw
            size = {"height": height, "width": width}
        processor = image_processor_for_task(args.task, size=size)
    pipeline_class = PIPELINE_CLASSES[TASK_TO_PIPELINE[args.task]]
    kwargs: dict[str, Any] = {}
    if args.task == "pose" and args.detector:
        kwargs["detector"] = args.detector
    return pipeline_class(model=model, image_processor=processor, device=device, dtype=dtype,
                          task=TASK_TO_PIPELINE[args.task], **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# outputs
# ----------------------------------------------------------------------------------------------------------------


def _coco_pose(item: _Item, image: np.ndarray, people: list[dict], threshold: float) -> dict:
    from ..visualization import SKELETON_LINKS

    names = people[0]["labels"] if people else []
    annotations = []
    for k, person in enumerate(people):
        x0, y0, x1, y1 = (float(v) for v in person["bbox"])
        keypoints = np.concatenate([person["keypoints"], person["scores"][:, None].astype(np.float64)], axis=1)
        annotations.append({
            "id": k + 1,
            "image_id": 1,
            "category_id": 1,
            "bbox": [x0, y0, x1 - x0, y1 - y0],
            "score": float(person["bbox_score"]),
            "keypoints": [float(v) for v in keypoints.reshape(-1)],
            "keypoint_scores": [float(v) for v in person["scores"]],
            "num_keypoints": int((person["scores"] > threshold).sum()),
        })
    return {
        "images": [{"id": 1, "file_name": item.source, "height": int(image.shape[0]), "width": int(image.shape[1])}],
        "categories": [{"id": 1, "name": "person", "keypoints": list(names),
                        "skeleton": [[a + 1, b + 1] for a, b in SKELETON_LINKS]}],
        "annotations": annotations,
        "info": {"description": "sapiens2-hf pose; keypoints are (x, y, score) triples in image pixels",
                 "keypoint_threshold_for_num_keypoints": threshold},
    }


def _write_outputs(args, item: _Item, image: np.ndarray, result: Any) -> int:
    from .. import visualization as vis

    base = item.out_dir / item.name
    written = 0

    def out(suffix: str) -> Path:
        return base.parent / f"{base.name}{suffix}"

    if args.task == "pose":
        _save_json(_coco_pose(item, image, result, args.kpt_threshold), out(".json"))
        written += 1
        if not args.no_overlay:
            vis.save_image(vis.draw_keypoints(image, result, score_threshold=args.kpt_threshold), out("_pose.png"))
            written += 1
    elif args.task == "seg":
        seg = result["segmentation"]
        if not args.no_arrays:
            vis.save_npy(seg.astype(np.uint8) if seg.max(initial=0) < 256 else seg, out("_seg.npy"))
            written += 1
        if not args.no_overlay:
            vis.save_image(vis.overlay_segmentation(image, seg), out("_seg.png"))
            written += 1
    elif args.task == "normal":
        if not args.no_arrays:
            vis.save_npy(result["normals"], out("_normal.npy"))
            written += 1
        if not args.no_overlay:
            vis.save_image(vis.normals_to_rgb(result["normals"]), out("_normal.png"))
            written += 1
    elif args.task == "pointmap":
        if not args.no_arrays:
            vis.save_npy(result["pointmap"], out("_pointmap.npy"))
            vis.save_npy(result["depth"], out("_depth.npy"))
            written += 2
        if not args.no_overlay:
            vis.save_image(vis.depth_to_rgb(result["depth"]), out("_depth.png"))
            written += 1
        if getattr(args, "ply", False):
            vis.save_ply(out(".ply"), result["pointmap"], colors=image)
            written += 1
    elif args.task == "albedo":
        vis.save_image(vis.albedo_to_image(result["albedo"]), out("_albedo.png"))
        written += 1
        if not args.no_arrays:
            vis.save_npy(result["albedo"], out("_albedo.npy"))
            written += 1
    return written


# ----------------------------------------------------------------------------------------------------------------
# main loop
# ----------------------------------------------------------------------------------------------------------------


def _save_json(data: Any, path: Path, indent: int | None = None) -> None:
    """Write JSON atomically; NaN / infinity are an error (`allow_nan=False`), never written as invalid JSON."""
    from ..visualization import atomic_write

    text = json.dumps(data, indent=indent, allow_nan=False)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def _load_boxes(path: str | None) -> dict[str, list]:
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"--boxes {path} is not valid JSON: {error}.") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object {{image file name: [[x0, y0, x1, y1], ...]}}.")
    return data


def _reason(error: BaseException) -> str:
    return str(error) if isinstance(error, (ValueError, OSError)) else f"{type(error).__name__}: {error}"


def _boxes_for(item: _Item, boxes: dict) -> Any:
    return boxes.get(Path(item.source).name, boxes.get(item.source))


def _predict(args, pipe, batch: list[tuple[_Item, np.ndarray]], boxes: dict) -> list:
    """Run the pipeline on one batch of images (pose: with their boxes, if the file lists them)."""
    images = [image for _, image in batch]
    kwargs: dict[str, Any] = {}
    if args.task == "pose":
        kwargs["flip_test"] = not args.no_flip_test
        kwargs["detector_threshold"] = args.detector_threshold
        per_image = [_boxes_for(item, boxes) for item, _ in batch]
        if all(b is not None for b in per_image):  # else none is listed: `_run_batch` splits mixed batches
            kwargs["boxes"] = per_image
    return pipe(images, batch_size=len(images), **kwargs)


def _run_batch(args, pipe, batch: list[tuple[_Item, np.ndarray]], boxes: dict, report: _Report) -> None:
    """Process one batch. A failing input is skipped and reported, the others are processed: a failed batch is
    retried one input at a time to find which input failed."""
    if args.task == "pose" and len(batch) > 1:
        listed = [_boxes_for(item, boxes) is not None for item, _ in batch]
        if any(listed) and not all(listed):  # some use --boxes, some the detector: one at a time
            for pair in batch:
                _run_batch(args, pipe, [pair], boxes, report)
            return
    try:
        results = _predict(args, pipe, batch, boxes)
    except Exception as error:  # noqa: BLE001 - a per-input failure must not end the run
        if len(batch) > 1:
            for pair in batch:
                _run_batch(args, pipe, [pair], boxes, report)
            return
        report.skipped.append({"input": batch[0][0].source, "reason": _reason(error)})
        return
    for (item, image), result in zip(batch, results):
        try:
            report.written += _write_outputs(args, item, image, result)
        except Exception as error:  # noqa: BLE001 - e.g. NaN in the results, a full disk
            report.skipped.append({"input": item.source, "reason": _reason(error)})
            continue
        report.processed += 1


def run_predict(args: argparse.Namespace) -> int:
    """Handler of the five task subcommands (see the module docstring)."""
    from tqdm.auto import tqdm

    if args.batch_size < 1 or args.video_stride < 1:
        raise ValueError("--batch-size and --video-stride must be >= 1.")
    if args.max_frames is not None and args.max_frames < 1:
        raise ValueError("--max-frames must be >= 1.")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = _Report()
    start = time.perf_counter()
    image_paths, videos = _collect(args.inputs, report)
    boxes = _load_boxes(getattr(args, "boxes", None))
    pipe = _build_pipeline(args)

    items: list[_Item] = [_Item(name, str(path), out, _read_image(path))
                          for name, path in zip(_unique_names(image_paths), image_paths)]
    total = len(items) + sum(_count_video_frames(v, args.video_stride, args.max_frames) for v in videos)
    video_names = _unique_names(videos)

    def all_items() -> Iterator[_Item]:
        yield from items
        for name, video in zip(video_names, videos):
            for item in _iter_video(video, out, args.video_stride, args.max_frames, report):
                item.out_dir = out / name
                report.frames += 1
                yield item

    progress = tqdm(total=total, disable=args.quiet, unit="img", desc=f"sapiens2-hf {args.task}", file=sys.stderr)
    batch: list[tuple[_Item, np.ndarray]] = []
    try:
        for item in all_items():
            try:
                image = item.load()
            except Exception as error:  # noqa: BLE001 - unreadable / truncated: skip this input
                report.skipped.append({"input": item.source, "reason": _reason(error)})
                progress.update(1)
                continue
            batch.append((item, image))
            if len(batch) == args.batch_size:
                _run_batch(args, pipe, batch, boxes, report)
                progress.update(len(batch))
                batch = []
        if batch:
            _run_batch(args, pipe, batch, boxes, report)
            progress.update(len(batch))
    finally:
        # written even when the run is interrupted, so that what was done and skipped is on record
        progress.close()
        elapsed = time.perf_counter() - start
        summary = {
            "task": args.task,
            "model": str(args.model),
            "processed": report.processed,
            "video_frames": report.frames,
            "skipped": report.skipped,
            "files_written": report.written,
            "seconds": round(elapsed, 3),
        }
        _save_json(summary, out / "summary.json", indent=2)
    print(f"sapiens2-hf {args.task}: processed {report.processed} image(s)"
          + (f" ({report.frames} video frame(s))" if report.frames else "")
          + f", wrote {report.written} file(s) to {out} in {elapsed:.1f} s")
    if report.skipped:
        print(f"sapiens2-hf {args.task}: skipped {len(report.skipped)} input(s) (listed in {out / 'summary.json'}):",
              file=sys.stderr)
        for entry in report.skipped:
            print(f"  skipped {entry['input']}: {entry['reason']}", file=sys.stderr)
        return 1
    return 0


__all__ = ["add_predict_subparsers", "run_predict"]
