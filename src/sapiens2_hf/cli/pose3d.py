"""`sapiens2-hf pose3d INPUT... --model POSE --pointmap-model POINTMAP --out DIR`: each person's keypoints in metres,
the 2D pose lifted with the pointmap of the same image (`pipeline("sapiens2-pose-3d")`; the rule:
`sapiens2_hf.pose3d.lifting`).

Per image, into `--out`: `<name>_3d.json` (units, frame and camera stated; per person the 2D keypoints, the 3D
keypoints in camera-frame metres, a confidence, a validity flag and the reason a keypoint is not valid; the lifting's
parameters; keypoint names and 0-based skeleton: `sapiens2_hf.pose3d.outputs.pose3d_record`) and `<name>.glb` (the
people's pointmap as a coloured mesh, cut at depth discontinuities and outside the person mask, with each 3D skeleton;
`--no-glb` leaves it out). Per video: `<name>_3d.npz` (3D keypoint tracks over frames, smoothed by the One-Euro
filter unless `--no-smooth`, the raw lift beside them: `sapiens2_hf.pose3d.outputs.write_track_file`) and
`<name>_3d.glb` (the tracks as an animated skeleton). `summary.json` lists what was processed and skipped, as the predict commands'.

People: `--boxes FILE.json` (the pose command's format; a video's key `<file name>#<frame index>` seeds it),
`--whole-image` (the image is one person), else the person detector (`--detector`). In a video, each person's box
follows their keypoints from frame to frame, and track ids come from IoU matching (`sapiens2_hf.video.tracking`).
`--foreground-model SEG_MODEL` masks the pointmap to the people, so keypoints off the body are flagged
`outside_mask`; `--focal-length` / `--intrinsics` give the camera; `--input-size` (alias `--image-size`) the
pointmap model's input size (an official pointmap file trained at another size).

A composed task on the predict commands' machinery (`predict.run.predict`): the same inputs, `--out` rule, run
lock, shards under `accelerate launch`, resume markers (`--overwrite` recomputes) and records (this run's own:
`.sapiens2-hf/runs/pose3d.json`); its options are typed (`PredictOptions` with task `pose` and the `lifting`
group).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ..runs.records import RunReport
from ..runs.resume import ResumeMarkers
from ..modeling.sapiens2_tasks import DEFAULT_DETECTOR
from ..predict.options import (DTYPES, ForegroundOptions, PredictOptions, check_intrinsics, check_local_source,
                               device_name, non_negative_float, out_folder, positive_float, positive_int, probability)
from ..predict.outputs import OutputWriteError, _boxes_for, predict_images, writing_outputs
from ..predict.run import build_pipeline, predict
from .hub_access import hub_ids, prepare_hub_access
from .predict import add_camera_arguments, add_frame_arguments, add_person_arguments, add_rerun_arguments
from .threads import add_threads_argument

COMMAND = "pose3d"


def add_pose3d_subparser(subparsers) -> None:
    parser = subparsers.add_parser("pose3d", help="3D keypoints in metres (pose lifted with a pointmap) on images "
                                   "and videos, with .glb scenes", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="image files, folders (not recursive), videos")
    parser.add_argument("--model", required=True, help="pose model: folder, Hub id or official file")
    parser.add_argument("--pointmap-model", required=True, help="pointmap model: folder, Hub id or official file")
    parser.add_argument("--out", type=out_folder, required=True, help="output folder (created)")
    parser.add_argument("--foreground-model", default=None, metavar="SEG_MODEL",
                        help="a Sapiens2 segmentation model: mask the pointmap to the people (flags keypoints off "
                             "the body)")
    parser.add_argument("--device", type=device_name, default="auto", help="'auto', 'cpu', 'cuda:0', ...")
    parser.add_argument("--dtype", default="float32", choices=DTYPES)
    parser.add_argument("--input-size", "--image-size", type=positive_int, nargs=2, metavar=("HEIGHT", "WIDTH"),
                        default=None, help="the pointmap model's input size (default: the model's / its saved "
                                           "processor's), e.g. for an official file trained at another size")
    add_person_arguments(parser)
    add_camera_arguments(parser)
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
    add_frame_arguments(video)
    video.add_argument("--track-iou", type=probability, default=0.3, help="least IoU to keep a track id")
    video.add_argument("--no-smooth", action="store_true", help="do not smooth the 3D tracks")
    video.add_argument("--smooth-min-cutoff", type=positive_float, default=1.0, metavar="HZ",
                       help="One-Euro cutoff at rest, Hz (default 1.0)")
    video.add_argument("--smooth-beta", type=non_negative_float, default=7.0,
                       help="One-Euro speed coefficient per metre/second (default 7.0)")
    add_rerun_arguments(parser)
    add_threads_argument(parser)
    parser.set_defaults(handler=run_pose3d, precheck=check_pose3d_arguments, task="pose3d")


def check_pose3d_arguments(args: argparse.Namespace) -> None:
    """Paths and values, before torch is imported (as the predict commands' precheck)."""
    check_intrinsics(args.intrinsics)
    for option, value in (("--model", args.model), ("--pointmap-model", args.pointmap_model),
                          ("--foreground-model", args.foreground_model), ("--detector", args.detector)):
        check_local_source(option, value)
    detector = args.detector or (None if args.boxes or args.whole_image else DEFAULT_DETECTOR)
    prepare_hub_access("pose3d", hub_ids(args.model, args.pointmap_model, args.foreground_model, detector))


def pose3d_options(args: argparse.Namespace) -> PredictOptions:
    """The parsed command line as typed options: a pose run (task `pose`) with the `lifting` group set."""
    return PredictOptions.from_args(argparse.Namespace(**{**vars(args), "task": "pose"}))


def run_pose3d(args: argparse.Namespace) -> int:
    check_pose3d_arguments(args)
    check_local_source("--pointmap-model", args.pointmap_model)
    return predict(pose3d_options(args), command=COMMAND, run_units=_run_units)


def _build_pipeline(options: PredictOptions, device: str):
    """`sapiens2-pose-3d` composed of the predict commands' pipelines: the pose model (with the detector) and the
    pointmap model (at `--input-size`, masked by `--foreground-model`), each loaded as `build_pipeline` loads it."""
    from ..pipeline_factory import pipeline  # torch

    runtime = options.runtime
    pose = build_pipeline(options.replace(foreground=ForegroundOptions(), runtime=dataclasses.replace(
        runtime, input_size=None)), device)
    try:
        pointmap = build_pipeline(options.replace(task="pointmap", runtime=dataclasses.replace(
            runtime, model=options.lifting.pointmap_model)), device)
    except (OSError, ValueError) as error:  # named by its option, as --foreground-model is
        kind = OSError if isinstance(error, OSError) else ValueError
        raise kind(f"--pointmap-model {options.lifting.pointmap_model}: {error}") from error
    detector = {"detector": options.output.detector} if options.output.detector else {}
    return pipeline("sapiens2-pose-3d", model=pose.model, image_processor=pose.image_processor,
                    pointmap_model=pointmap, device=pose.device, **detector)


def _lifting(options: PredictOptions) -> dict:
    lifting = {"score_threshold": options.output.kpt_threshold, "window_radius": options.lifting.window_radius,
               "depth_jump": options.lifting.depth_jump}
    if options.lifting.surface:
        lifting["joint_depths"] = 0.0
    return lifting


class _Lifter:
    """The pose pipeline with the lifting options: writes one image's or one video's pose3d outputs."""

    def __init__(self, options: PredictOptions, pipe, boxes: dict, out: Path):
        from ..pose3d import outputs as lifted  # torch

        self.lifted, self.pipe, self.boxes, self.out = lifted, pipe, boxes, out
        self.options = options.with_model_labels(pipe.model.config)
        self.lifting = _lifting(self.options)
        self.recorded = {**self.lifting,
                         "joint_depths": self.lifting.get("joint_depths", "JOINT_DEPTHS_M by keypoint name")}

    def predict_one(self, image, people_boxes):
        (result,) = predict_images(self.options, self.pipe, [image],
                                   None if people_boxes is None else [people_boxes], **self.lifting)
        return result

    def image(self, name: str, path: Path) -> tuple[list[Path], int]:
        """The files written and the video frames lifted (none)."""
        from ..runs.decode import decode_image

        image = decode_image(path)
        result = self.predict_one(image, _boxes_for(str(path), self.boxes))
        links = self.lifted.skeleton_links(self.options.output.skeleton,
                                           len(result["people"][0]["labels"]) if result["people"] else 0)
        with writing_outputs():
            files = self.lifted.write_pose3d_outputs(
                self.out, name, result, image, source=str(path), skeleton=links, lifting=self.recorded,
                glb=not self.options.lifting.no_glb, max_vertices=self.options.lifting.max_vertices)
        return files, 0

    def video(self, name: str, path: Path) -> tuple[list[Path], int]:
        """The files written and the video frames lifted."""
        video, lifted = self.options.video, self.lifted
        smoother = None if video.no_smooth else lifted.Keypoint3DSmoother(video.smooth_min_cutoff, video.smooth_beta)
        tracks, names = lifted.lift_video(
            path, self.predict_one, lambda index: _boxes_for(f"{path}#{index}", self.boxes),
            kpt_threshold=self.options.output.kpt_threshold, track_iou=video.track_iou,
            video_stride=video.video_stride, max_frames=video.max_frames, smoother=smoother)
        smoothing = None if smoother is None else {"min_cutoff": video.smooth_min_cutoff, "beta": video.smooth_beta}
        with writing_outputs():
            files = lifted.write_video_tracks(self.out, name, tracks, names, smoothing=smoothing,
                                              links=lifted.skeleton_links(self.options.output.skeleton, len(names)),
                                              glb=not self.options.lifting.no_glb)
        return files, len(tracks)


def _run_units(options: PredictOptions, todo: list, boxes: dict, report: RunReport, out: Path, shard) -> None:
    """Compute and write this process's inputs (`todo`: (kind, name, path, fingerprint or None); see
    `predict.run.predict`)."""
    report.notes.update(command=COMMAND, frames=0)
    if not todo:
        return
    lifter = _Lifter(options, _build_pipeline(options, shard.device(options.runtime.device)), boxes, out)
    for kind, name, path, expected in todo:
        try:
            files, frames = lifter.image(name, path) if kind == "images" else lifter.video(name, path)
            if expected is not None:
                with writing_outputs():
                    ResumeMarkers(out, kind, COMMAND).mark_done(name, expected, files)
        except OutputWriteError as error:  # the folder cannot take more: the run stops (predict/run.py)
            report.skip(str(path), error)
            raise
        except Exception as error:  # noqa: BLE001 - unreadable, bad boxes, no detector: this input is skipped
            report.skip(str(path), error)
            continue
        report.processed += 1
        report.frames += frames
        report.notes["frames"] = report.frames
        report.written += len(files)
        report.finished.add(str(path))
