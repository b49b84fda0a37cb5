"""`sapiens2-hf {pose,seg,normal,pointmap,albedo,matting} INPUT... --model M --out DIR`: batch inference over images,
folders and videos; sharded over processes under `accelerate launch`, resumable. docs/cli.md documents every file
each command writes, for users.

The parsers (torch-free: `--help`) and the handler: the arguments as typed options (`predict.options`, with their
defaults, `command_defaults`), run by the driver the web app runs on too (`predict.run.predict`: what is written).
"""

from __future__ import annotations

import argparse

from ..modeling import sapiens2_tasks as catalog
from ..predict.options import (COMPILE_MODES, DTYPES, PredictOptions, check_intrinsics, check_local_source,
                               command_defaults, device_name, finite_float, non_negative_float, out_folder,
                               positive_float, positive_int, probability)
from ..predict.run import predict
from .export import add_backend_argument
from .hub_access import hub_ids, prepare_hub_access
from .threads import add_threads_argument

# The task registry, read without importing torch (`--help` must not: tests/test_cli_startup.py) and at each use, so
# that a task registered after import has its sub-command, pipeline and help (the registry's title).
_TASK_SPECS = catalog.TASK_SPECS


def task_help(task: str) -> str:
    """A task's sub-command help: its registry title, lower-cased at the start."""
    title = _TASK_SPECS[task].title
    return title[0].lower() + title[1:]


def predict_parser() -> argparse.ArgumentParser:
    """A parser of the predict commands alone (`sapiens2-hf <task> ...`)."""
    parser = argparse.ArgumentParser(prog="sapiens2-hf")
    add_predict_subparsers(parser.add_subparsers(dest="command", required=True))
    return parser


def add_person_arguments(parser) -> None:
    """Where a top-down command's people come from (`pose`, `pose3d`)."""
    defaults = command_defaults("pose")  # stated once, on the typed options (pose3d reads them from argv too)
    parser.add_argument("--boxes", default=None, metavar="FILE.json",
                        help="JSON file {key: [[x_min, y_min, x_max, y_max], ...]} of person boxes in "
                             "pixels, xyxy format (not the xywh of COCO and of the written JSON's 'bbox'; "
                             "its 'bbox_xyxy' can be passed back) ([] = nobody). Keys: image file names "
                             "('a.jpg') or paths as given; "
                             "video frames: '<video file name>#<frame index>' (e.g. 'clip.mp4#0', "
                             "'clip.mp4#30'; the index counts every decoded frame, before --video-stride) "
                             "or '<video path>#<frame index>'. Inputs not listed use the detector")
    parser.add_argument("--whole-image", action="store_true",
                        help="an input without --boxes entry is one person filling the image (or video "
                             "frame): no detector needed, e.g. offline on a cropped photo")
    parser.add_argument("--detector", default=None, metavar="ID_OR_FOLDER",
                        help="object-detection model id or local folder for inputs without boxes (default "
                             "PekingU/rtdetr_r50vd: needs the Hub or a cached copy)")
    parser.add_argument("--detector-threshold", type=probability, default=defaults["detector_threshold"],
                        help="least detector score of a person box, in [0, 1] (default %(default)s)")
    parser.add_argument("--no-flip-test", action="store_true", help="disable the official flip test")


def add_camera_arguments(parser) -> None:
    """The camera of a metric 3D command's inputs (`pointmap`, `pose3d`)."""
    camera = parser.add_mutually_exclusive_group()
    camera.add_argument("--focal-length", type=positive_float, default=None, metavar="F",
                        help="the camera's horizontal focal length in pixels of the input images: metric "
                             "results for that camera instead of the predicted one")
    camera.add_argument("--intrinsics", type=finite_float, nargs=4, default=None,
                        metavar=("FX", "FY", "CX", "CY"),
                        help="the camera in pixels of the input images: Z metric from FX, X and Y "
                             "re-projected through it")


def add_frame_arguments(parser) -> None:
    """Which video frames a command processes."""
    parser.add_argument("--video-stride", type=positive_int, default=command_defaults("pose")["video_stride"],
                        help="process every n-th video frame")
    parser.add_argument("--max-frames", type=positive_int, default=None, help="at most this many frames per video")


def add_rerun_arguments(parser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="recompute inputs whose outputs a previous run completed (default: skip them)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def _add_runtime_arguments(parser) -> None:
    parser.add_argument("--model", required=True,
                        help="converted folder, Hub id, or official sapiens2_<size>_<task>.safetensors file")
    parser.add_argument("--out", type=out_folder, required=True, help="output folder (created)")
    parser.add_argument("--device", type=device_name,
                        help="'auto' (cuda when available; under accelerate launch each process's GPU), 'cpu', "
                             "'cuda:0', ...")
    parser.add_argument("--dtype", choices=DTYPES)
    add_backend_argument(parser)
    parser.add_argument("--compile", action="store_true",
                        help="the GPU recipe: torch.compile with SDPA attention (with --dtype bfloat16 on CUDA; "
                             "the first batch compiles)")
    parser.add_argument("--compile-mode", choices=COMPILE_MODES)
    parser.add_argument("--batch-size", type=positive_int, help="images (video frames) per model batch")
    parser.add_argument("--input-size", type=positive_int, nargs=2, metavar=("HEIGHT", "WIDTH"), default=None,
                        help="model input size (default: the model's / the saved processor's)")


def _add_pose_arguments(parser) -> None:
    add_person_arguments(parser)
    parser.add_argument("--kpt-threshold", type=probability,
                        help="keypoint score for drawing (and for carrying a video person's box)")
    parser.add_argument("--keypoint-format", choices=catalog.KEYPOINT_FORMAT_NAMES,
                        help="write the JSON keypoints in this format instead of the 308 Sapiens2 ones "
                             "(the overlay shows the 308)")
    video = parser.add_argument_group("video (pose)")
    video.add_argument("--detect-every", type=positive_int, metavar="N",
                       help="run the detector on every N-th processed frame (and while nobody is tracked); "
                            "in between, boxes follow each person's keypoints (default 1: every frame)")
    video.add_argument("--track-iou", type=probability,
                       help="least IoU for a detection to keep a person's track id (default 0.3)")
    video.add_argument("--smooth-min-cutoff", type=positive_float, metavar="HZ",
                       help="One-Euro filter cutoff at rest, Hz (default 1.0; lower = smoother, more lag)")
    video.add_argument("--smooth-beta", type=non_negative_float,
                       help="One-Euro filter speed coefficient, per pixel (default 0.02; higher = less "
                            "lag on fast motion, more jitter)")
    video.add_argument("--no-smooth", action="store_true", help="do not smooth keypoints over time")


def _add_foreground_arguments(parser) -> None:
    """The person foreground that masks a task's maps."""
    foreground = parser.add_mutually_exclusive_group()
    foreground.add_argument("--foreground-model", default=None, metavar="SEG_MODEL",
                            help="keep only the person: a Sapiens2 segmentation model (folder, Hub id or "
                                 "official file) whose non-background labels are the foreground")
    foreground.add_argument("--foreground-mask", default=None, metavar="PATH_OR_DIR",
                            help="keep only the person: one mask image for every input, or a folder with "
                                 "<input name>.png per image (non-zero = person)")


def add_predict_subparsers(subparsers) -> None:
    """Register one sub-command per task (`pose`, `seg`, `normal`, `pointmap`, `albedo`, `matting`)."""
    for task in _TASK_SPECS:
        parser = subparsers.add_parser(task, help=f"run {task_help(task)} on images, folders and videos",
                                       description=__doc__.split("\n\n")[0])
        parser.add_argument("inputs", nargs="+", metavar="INPUT", help="image files, folders (not recursive), videos")
        _add_runtime_arguments(parser)
        parser.add_argument("--no-overlay", action="store_true",
                            help="do not write visualisations (nor the annotated video)")
        parser.add_argument("--no-arrays", action="store_true", help="do not write .npy arrays")
        add_frame_arguments(parser)
        add_rerun_arguments(parser)
        options = command_defaults(task)  # the options of this task's command (by its registry properties)
        if "boxes" in options:  # a top-down task
            _add_pose_arguments(parser)
        if "ply" in options:  # a metric 3D result
            parser.add_argument("--ply", action="store_true", help="also write a coloured point cloud (.ply)")
            add_camera_arguments(parser)
        if "foreground_model" in options:  # its maps are masked by a person foreground
            _add_foreground_arguments(parser)
        add_threads_argument(parser)
        if "temporal_filter" in options:  # its results hold per-pixel maps
            add_temporal_filter_arguments(parser)
        parser.set_defaults(**options, handler=run_predict, task=task, precheck=check_predict_arguments)


def add_temporal_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """`--temporal-filter` and its two knobs, for the dense tasks' video inputs (docs/video.md)."""
    group = parser.add_argument_group("video (dense tasks)")
    group.add_argument("--temporal-filter", action="store_true",
                       help="video: remove frame-to-frame flicker with a flow-guided One-Euro filter (the previous "
                            "output follows the optical flow; occlusions and fast changes pass unfiltered)")
    group.add_argument("--temporal-min-cutoff", type=positive_float, metavar="HZ",
                       help="temporal filter cutoff at rest, Hz (default: the task's, 0.5 for normal, pointmap and "
                            "seg, 1.0 else; lower = smoother)")
    group.add_argument("--temporal-beta", type=non_negative_float,
                       help="temporal filter speed coefficient, per map unit (default: the task's; higher = changes "
                            "not explained by motion pass sooner)")


def check_predict_arguments(args: argparse.Namespace) -> None:
    """The values and model-like paths of a predict command, checked before torch and transformers are imported
    (`main`'s precheck): a mistyped `--model` answers at once, not after seconds of imports. `predict` checks them
    again for callers without a command line (the web app)."""
    check_intrinsics(getattr(args, "intrinsics", None))
    check_local_source("--model", args.model)
    check_local_source("--foreground-model", getattr(args, "foreground_model", None))
    check_local_source("--detector", getattr(args, "detector", None))
    detector = getattr(args, "detector", None)
    if "boxes" in vars(args) and detector is None and not args.boxes and not args.whole_image:
        detector = catalog.DEFAULT_DETECTOR  # a command taking person boxes detects the people of inputs without them
    prepare_hub_access(args.task, hub_ids(args.model, getattr(args, "foreground_model", None), detector))


def run_predict(args: argparse.Namespace) -> int:
    """Handler of the task subcommands (see the module docstring): the parsed command line as `PredictOptions`, then
    `predict(options)`."""
    return predict(PredictOptions.from_args(args))

