"""`sapiens2-hf pose3d INPUT... --model POSE --pointmap-model POINTMAP --out DIR`: each person's keypoints in metres,
the 2D pose lifted with the pointmap of the same image (`pipeline("sapiens2-pose-3d")`; the rule:
`sapiens2_hf.modeling.lifting_sapiens2_hf`).

Per image, into `--out`: `<name>_3d.json` (units, frame and camera stated; per person the 2D keypoints, the 3D
keypoints in camera-frame metres, a confidence, a validity flag and the reason a keypoint is not valid; the lifting's
parameters; keypoint names and 0-based skeleton: `sapiens2_hf.pose3d.pose3d_record`) and `<name>.glb` (the people's
pointmap as a coloured mesh, cut at depth discontinuities and outside the person mask, with each 3D skeleton;
`--no-glb` leaves it out). Per video: `<name>_3d.npz` (3D keypoint tracks over frames, smoothed by the One-Euro
filter unless `--no-smooth`, the raw lift beside them: `sapiens2_hf.pose3d.write_track_file`) and `<name>_3d.glb`
(the tracks as an animated skeleton). `summary.json` lists what was processed and skipped, as the predict commands'.

People: `--boxes FILE.json` (the pose command's format; a video's key `<file name>#<frame index>` seeds it),
`--whole-image` (the image is one person), else the person detector (`--detector`). In a video, each person's box
follows their keypoints from frame to frame, and track ids come from IoU matching (`sapiens2_hf.video.tracking`).
`--foreground-model SEG_MODEL` masks the pointmap to the people, so keypoints off the body are flagged
`outside_mask`; `--focal-length` / `--intrinsics` give the camera.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from .options import (check_local_source, device_name, finite_float, non_negative_float, positive_float, positive_int,
                      probability)


def add_pose3d_subparser(subparsers) -> None:
    from .threads import add_threads_argument

    parser = subparsers.add_parser("pose3d", help="3D keypoints in metres (pose lifted with a pointmap) on images "
                                   "and videos, with .glb scenes", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="image files, folders (not recursive), videos")
    parser.add_argument("--model", required=True, help="pose model: folder, Hub id or official file")
    parser.add_argument("--pointmap-model", required=True, help="pointmap model: folder, Hub id or official file")
    parser.add_argument("--out", required=True, help="output folder (created)")
    parser.add_argument("--foreground-model", default=None, metavar="SEG_MODEL",
                        help="a Sapiens2 segmentation model: mask the pointmap to the people (flags keypoints off "
                             "the body)")
    parser.add_argument("--device", type=device_name, default="auto", help="'auto', 'cpu', 'cuda:0', ...")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--boxes", default=None, metavar="FILE.json",
                        help="person boxes, xyxy pixels, as the pose command takes them")
    parser.add_argument("--whole-image", action="store_true",
                        help="an input without a --boxes entry is one person filling the image")
    parser.add_argument("--detector", default=None, metavar="ID_OR_FOLDER",
                        help="object-detection model for inputs without boxes (default PekingU/rtdetr_r50vd)")
    camera = parser.add_mutually_exclusive_group()
    camera.add_argument("--focal-length", type=positive_float, default=None, metavar="F",
                        help="the camera's horizontal focal length in pixels of the inputs")
    camera.add_argument("--intrinsics", type=finite_float, nargs=4, default=None, metavar=("FX", "FY", "CX", "CY"))
    lifting = parser.add_argument_group("lifting")
    lifting.add_argument("--kpt-threshold", type=probability, default=0.3,
                         help="least 2D keypoint score of a valid 3D keypoint (default 0.3)")
    lifting.add_argument("--window-radius", type=positive_int, default=None, metavar="PIXELS",
                         help="pointmap window around each keypoint (default: 2%% of the person box's larger side)")
    lifting.add_argument("--depth-jump", type=positive_float, default=0.1, metavar="METRES",
                         help="a larger depth gap inside the window is a discontinuity (default 0.1)")
    lifting.add_argument("--surface", action="store_true",
                         help="keep every keypoint on the skin (no step into the body for joints)")
    parser.add_argument("--no-glb", action="store_true", help="do not write .glb files")
    parser.add_argument("--max-vertices", type=positive_int, default=250_000,
                        help="at most this many mesh vertices per .glb (the pointmap is subsampled)")
    video = parser.add_argument_group("video")
    video.add_argument("--video-stride", type=positive_int, default=1, help="process every n-th frame")
    video.add_argument("--max-frames", type=positive_int, default=None, help="at most this many frames per video")
    video.add_argument("--track-iou", type=probability, default=0.3, help="least IoU to keep a track id")
    video.add_argument("--no-smooth", action="store_true", help="do not smooth the 3D tracks")
    video.add_argument("--smooth-min-cutoff", type=positive_float, default=1.0, metavar="HZ",
                       help="One-Euro cutoff at rest, Hz (default 1.0)")
    video.add_argument("--smooth-beta", type=non_negative_float, default=7.0,
                       help="One-Euro speed coefficient per metre/second (default 7.0)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    add_threads_argument(parser)
    parser.set_defaults(handler=run_pose3d, precheck=check_pose3d_arguments, task="pose3d")


def check_pose3d_arguments(args: argparse.Namespace) -> None:
    """Paths and values, before torch is imported (as the predict commands' precheck)."""
    from .hub_access import hub_ids, prepare_hub_access
    from .predict import DEFAULT_DETECTOR, _check_intrinsics

    _check_intrinsics(args.intrinsics)
    for option, value in (("--model", args.model), ("--pointmap-model", args.pointmap_model),
                          ("--foreground-model", args.foreground_model), ("--detector", args.detector)):
        check_local_source(option, value)
    detector = args.detector or (None if args.boxes or args.whole_image else DEFAULT_DETECTOR)
    prepare_hub_access("pose3d", hub_ids(args.model, args.pointmap_model, args.foreground_model, detector))


def run_pose3d(args: argparse.Namespace) -> int:
    import sys

    from ..utils.run_lock import run_folder_lock
    from .predict import RunReport, _check_out, _collect, _load_boxes, check_boxes_keys, output_names
    from .sharding import write_summary

    check_pose3d_arguments(args)
    report = RunReport()
    images, videos = _collect(args.inputs, report)
    out = Path(args.out)
    _check_out(out, args.inputs, images + videos)
    boxes = _load_boxes(args.boxes)
    check_boxes_keys(args.boxes, boxes, images, videos)
    with run_folder_lock(out):
        pipe = _build_pipeline(args)
        image_names, video_names = output_names(images, videos)
        written: list[str] = []
        for path, name in zip(images, image_names):
            with _skipping(report, str(path)):
                written += [str(p) for p in _one_image(args, pipe, path, name, boxes, out)]
                report.processed += 1
                report.finished.add(str(path))
        for path, name in zip(videos, video_names):
            with _skipping(report, str(path)):
                files, frames = _one_video(args, pipe, path, name, boxes, out)
                written += [str(p) for p in files]
                report.processed += 1
                report.frames += frames
                report.finished.add(str(path))
        record = {"command": "pose3d", "processed": report.processed, "frames": report.frames,
                  "skipped": report.skipped, "written": written}
        write_summary(record, out / "summary.json", [str(p) for p in images + videos])
    for entry in report.skipped:
        print(f"sapiens2-hf pose3d: skipped {entry['input']}: {entry['reason']}", file=sys.stderr)
    if not args.quiet:
        print(f"sapiens2-hf pose3d: processed {report.processed} input(s), wrote {len(written)} file(s) to {out}")
    return 1 if report.skipped else 0


@contextlib.contextmanager
def _skipping(report, source: str):
    """An input that fails for a reason of its own (unreadable, bad boxes, no detector) is reported and skipped."""
    from .outputs import OutputWriteError

    try:
        yield
    except OutputWriteError:
        raise
    except (ValueError, OSError) as error:
        report.skip(source, error)


def _build_pipeline(args):
    from .. import pipeline

    kwargs = {"pointmap_model": args.pointmap_model, "segmenter": args.foreground_model, "dtype": args.dtype}
    if args.device != "auto":
        kwargs["device"] = args.device
    if args.detector is not None:
        kwargs["detector"] = args.detector
    return pipeline("sapiens2-pose-3d", model=args.model, **kwargs)


def _skeleton(pipe, num_keypoints: int) -> list[tuple[int, int]]:
    from ..visualization import SKELETON_LINKS

    own = getattr(pipe.model.config, "skeleton", None)
    links = own if own else SKELETON_LINKS
    return [(int(a), int(b)) for a, b in links if int(a) < num_keypoints and int(b) < num_keypoints]


def _lifting_options(args) -> dict:
    options = {"score_threshold": args.kpt_threshold, "window_radius": args.window_radius,
               "depth_jump": args.depth_jump}
    if args.surface:
        options["joint_depths"] = 0.0
    return options


def _camera(args) -> dict:
    if args.focal_length is not None:
        return {"focal_length": args.focal_length}
    if args.intrinsics is not None:
        return {"intrinsics": tuple(args.intrinsics)}
    return {}


def _people_boxes(args, key_sources: tuple[str, ...], boxes: dict, image_shape) -> list | None:
    """The --boxes entry of the first key found, or the whole image with --whole-image, else None (the detector)."""
    for key in key_sources:
        found = boxes.get(key)
        if found is not None:
            return found
    if args.whole_image:
        return [[0.0, 0.0, float(image_shape[1]), float(image_shape[0])]]
    return None


def _one_image(args, pipe, path: Path, name: str, boxes: dict, out: Path) -> list[Path]:
    from ..pose3d import write_pose3d_outputs
    from ..processing import load_image_rgb
    from .outputs import writing_outputs

    image = load_image_rgb(path)
    people_boxes = _people_boxes(args, (path.name, str(path)), boxes, image.shape)
    lifting = _lifting_options(args)
    result = pipe(image, **({} if people_boxes is None else {"boxes": people_boxes}), **_camera(args), **lifting)
    num_keypoints = len(result["people"][0]["labels"]) if result["people"] else 0
    with writing_outputs():
        return write_pose3d_outputs(out, name, result, image, source=str(path),
                                    skeleton=_skeleton(pipe, num_keypoints), lifting=_recorded(lifting),
                                    glb=not args.no_glb, max_vertices=args.max_vertices)


def _recorded(lifting: dict) -> dict:
    recorded = dict(lifting)
    recorded.setdefault("joint_depths", "JOINT_DEPTHS_M by keypoint name")
    return recorded


def _one_video(args, pipe, path: Path, name: str, boxes: dict, out: Path) -> tuple[list[Path], int]:
    import numpy as np

    from ..pose3d import Keypoint3DSmoother, write_track_file
    from ..video.io import VideoReader
    from ..video.tracking import IouTracker, box_from_keypoints
    from ..visualization.gltf import write_skeleton_animation
    from .outputs import writing_outputs

    tracker = IouTracker(args.track_iou)
    smoother = None if args.no_smooth else Keypoint3DSmoother(args.smooth_min_cutoff, args.smooth_beta)
    lifting = _lifting_options(args)
    frames, names, previous = [], None, None
    with VideoReader(path) as reader:
        for frame in reader:
            if frame.index % args.video_stride:
                continue
            if args.max_frames is not None and len(frames) >= args.max_frames:
                break
            keys = (f"{path.name}#{frame.index}", f"{path}#{frame.index}")
            people_boxes = _people_boxes(args, keys, boxes, frame.image.shape) if previous is None or any(
                key in boxes for key in keys) else previous
            result = pipe(frame.image, **({} if people_boxes is None else {"boxes": people_boxes}), **_camera(args),
                          **lifting)
            people = result["people"]
            if people and names is None:
                names = list(people[0]["labels"])
            tracks = tracker.update([person["bbox"] for person in people], [person["bbox_score"] for person in people])
            raw = np.stack([p["keypoints_3d"] for p in people]) if people else np.zeros((0, len(names or []), 3))
            valid = np.stack([p["keypoint_3d_valid"] for p in people]) if people else np.zeros(raw.shape[:2], bool)
            track_ids = [track.track_id for track in tracks]
            smoothed = smoother.filter(track_ids, raw, valid, frame.time) if smoother is not None else \
                np.where(valid[..., None], raw, np.nan)
            frames.append({"frame_index": frame.index, "time_s": frame.time, "track_ids": track_ids,
                           "keypoints_3d": raw, "smoothed": smoothed, "valid": valid,
                           "confidence": np.stack([p["keypoint_3d_confidence"] for p in people]) if people
                           else np.zeros(raw.shape[:2], np.float32)})
            # the next frame's boxes follow each person's keypoints (the detector, or --boxes, only when lost)
            carried = [box_from_keypoints(p["keypoints"], p["scores"], args.kpt_threshold, frame.image.shape[:2])
                       for p in people]
            carried = [box.tolist() for box in carried if box is not None]
            previous = carried or None
    if not frames:
        raise ValueError(f"{path}: no frame was processed")
    names = names or []
    smoothing = None if args.no_smooth else {"min_cutoff": args.smooth_min_cutoff, "beta": args.smooth_beta}
    with writing_outputs():
        files = [write_track_file(out / f"{name}_3d.npz", frames, names, smoothing=smoothing)]
        if not args.no_glb and names:
            with np.load(files[0]) as tracks:
                positions, track_ids, times = tracks["keypoints_3d"], tracks["track_ids"], tracks["time_s"]
            count = len(names)
            links = [(a + k * count, b + k * count) for k in range(len(track_ids))
                     for a, b in _skeleton(pipe, count)]
            joint_names = [f"track{track}_{label}" for track in track_ids for label in names]
            write_skeleton_animation(out / f"{name}_3d.glb", times - times[0],
                                     positions.reshape(len(times), -1, 3), links, joint_names)
            files.append(out / f"{name}_3d.glb")
    return files, len(frames)
