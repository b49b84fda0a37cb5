"""Videos in the task commands: `sapiens2-hf <task> clip.mp4 --out DIR` (the outputs are listed in cli/predict.py).

Three stages overlap, so that the model is the bottleneck: a background thread decodes frames one at a time
(`sapiens2_hf.video.VideoReader`, PyAV) up to two batches ahead; this thread runs batches of `--batch-size` frames
through the task's pipeline; a second background thread writes each frame's outputs in frame order, the per-frame
files and the annotated frame straight into the mp4 encoder (`VideoWriter`, atomic: the mp4 appears complete at the
end), with at most two batches waiting. The video is never in memory: a few batches of frames at most.

Pose (top-down) on video:
- detection frames: every frame listed in `--boxes`; every `--detect-every`-th processed frame, and any frame while
  nobody is tracked, of a video without entries in `--boxes`. A video with entries in `--boxes` (e.g. `clip.mp4#0`
  only) runs the detector on its other frames only when `--detector` is given (then on every `--detect-every`-th
  one): the listed boxes seed the tracks, which then follow the people. On detection frames people come from
  `--boxes` or the detector (no whole-image fallback box when nobody is found), and `IouTracker` gives them track
  ids;
- other frames: each tracked person's box is the box of its keypoints in the previous processed frame
  (`box_from_keypoints`; the previous box when too few keypoints are confident). The frames between two detection
  frames are batched together, all with the boxes known before the batch, so `--batch-size 1` follows motion frame
  by frame and larger batches trade that for speed;
- keypoints are smoothed per track by a One-Euro filter on the frames' presentation times (a new track starts a new
  filter). The JSON and the overlay hold the smoothed keypoints; scores are not smoothed.

Dense tasks on video with `--temporal-filter`: each frame's maps (normals, pointmap and depth, albedo, alpha and
foreground, segmentation labels) go through `sapiens2_hf.video.DenseResultFilter` in frame order before they are
written: the previous filtered output follows the optical flow of the frames and is blended with the new one by the
One-Euro rule per pixel (`--temporal-min-cutoff`, `--temporal-beta`; docs/video.md). Without the option the outputs
are the per-frame ones, bit for bit. A failed frame is skipped by the filter too.
A frame that fails is reported (`<video>#<index>`) and shows unannotated in the mp4, so that the video keeps its
timing; a video with a failed frame gets no done marker, so a resumed run computes it again. Frames of one video that
fail for the same reason (a detector that cannot be loaded fails every frame) are reported once: one entry, at the
first such frame, whose `frames` lists them all and whose reason ends with their count.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from PIL import ImageDraw

from ..runs.records import reason as _reason
from ..runs.resume import ResumeMarkers
from ..video import (DenseResultFilter, IouTracker, OneEuroFilter, VideoReader, VideoWriter,
                     box_from_keypoints)
from .options import PredictOptions
from .outputs import OutputWriteError, _boxes_for, pose_annotations, predict_images, write_outputs, writing_outputs


def count_frames(path: Path, stride: int, max_frames: int | None) -> int:
    """Frames that will be processed, from the container's frame count (0 when unknown; for progress bars)."""
    try:
        with VideoReader(path) as reader:
            count = reader.frame_count
    except (OSError, ImportError):
        return 0
    count = -(-count // stride)
    return min(count, max_frames) if max_frames is not None else count


class _InOrder:
    """Runs `consume(*item)` for each submitted item on one background thread, in submission order, with at most
    `size` items waiting (so memory stays bounded). The first exception stops the consuming; `submit` and `close`
    raise it."""

    _END = object()

    def __init__(self, consume, size: int):
        self._consume = consume
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, size))
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="sapiens2-hf-writer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if self._error is None:  # after a failure the rest is drained, not consumed
                try:
                    self._consume(*item)
                except BaseException as error:  # noqa: BLE001 - handed to the submitting thread
                    self._error = error

    def submit(self, *item) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(item)

    def close(self) -> None:
        """Wait until every submitted item is consumed; raise the first failure."""
        self._queue.put(self._END)
        self._thread.join()
        if self._error is not None:
            raise self._error


def _prefetch(items: Iterator, size: int) -> Iterator:
    """`items`, produced by a background thread up to `size` ahead (frames decode while the model runs)."""
    ready: queue.Queue = queue.Queue(maxsize=max(1, size))
    stop = threading.Event()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                ready.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(("item", item)):
                    return
            put(("end", None))
        except BaseException as error:  # noqa: BLE001 - re-raised in the consuming thread
            put(("error", error))

    thread = threading.Thread(target=produce, name="sapiens2-hf-decoder", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = ready.get()
            if kind == "item":
                yield value
            elif kind == "end":
                return
            else:
                raise value
    finally:
        stop.set()
        thread.join()  # before the caller closes the container the thread decodes from


def _frames(reader, stride: int, max_frames: int | None):
    taken = 0
    for frame in reader:
        if max_frames is not None and taken >= max_frames:
            break
        if frame.index % stride == 0:
            yield taken, frame
            taken += 1


def _draw_track_ids(overlay, people: list[dict], track_ids: list[int]):
    draw = ImageDraw.Draw(overlay)
    for person, track_id in zip(people, track_ids):
        x0, y0 = (float(v) for v in person["bbox"][:2])
        draw.text((x0 + 2, y0 + 1), f"#{track_id}", fill=(0, 255, 0))
    return overlay


class _PoseState:
    """Tracks, their keypoint filters and the detection schedule of one video."""

    def __init__(self, options: PredictOptions, listed_frames: bool):
        self.options = options
        self.tracker = IouTracker(options.video.track_iou)
        self.filters: dict[int, OneEuroFilter] = {}
        self.make_filter = None if options.video.no_smooth else (
            lambda: OneEuroFilter(options.video.smooth_min_cutoff, options.video.smooth_beta))
        # the video has entries in --boxes: they seed the tracks, and the detector runs on the other frames only
        # when the user named one (never because nobody is tracked)
        self.listed_frames = listed_frames
        self.scheduled = not listed_frames or bool(options.output.detector)

    def is_detection(self, taken: int, listed: Any) -> bool:
        if listed is not None:
            return True
        if not self.scheduled:
            return False
        return taken % self.options.video.detect_every == 0 or (not self.tracker.tracks and not self.listed_frames)

    def after_detection(self, people: list[dict]) -> list[int]:
        tracks = self.tracker.update([p["bbox"] for p in people], [p["bbox_score"] for p in people])
        return [t.track_id for t in tracks]

    def follow(self, people: list[dict], image_shape) -> None:
        """Carry each track's box to the next frame from its keypoints in this one."""
        for track, person in zip(self.tracker.tracks, people):
            box = box_from_keypoints(person["keypoints"], person["scores"], self.options.output.kpt_threshold,
                                     image_shape[:2])
            if box is not None:
                track.box = box

    def smooth(self, people: list[dict], track_ids: list[int], time: float) -> list[dict]:
        if self.make_filter is None:
            return people
        live = set(track_ids)
        for ended in [k for k in self.filters if k not in live]:
            del self.filters[ended]
        smoothed = []
        for person, track_id in zip(people, track_ids):
            one_euro = self.filters.setdefault(track_id, self.make_filter())
            smoothed.append({**person, "keypoints": one_euro.filter(person["keypoints"], time)})
        return smoothed


def _run_frames(options, pipe, frames: list, boxes: list | None = None, **extra) -> list:
    """Pipeline results for several frames, or per frame an exception (a failed batch is retried frame by frame)."""
    images = [frame.image for _, frame in frames]
    try:
        return predict_images(options, pipe, images, boxes, **extra)
    except Exception as error:  # noqa: BLE001 - found per frame below
        if len(frames) == 1:
            return [error]
    return [_run_frames(options, pipe, [pair], None if boxes is None else [b], **extra)[0]
            for pair, b in zip(frames, boxes if boxes is not None else [None] * len(frames))]


def process_video(options, pipe, path: Path, name: str, out: Path, boxes: dict, report, progress,
                  expected: dict | None) -> None:
    """Run one video (see the module docstring); failures are added to `report`."""
    frame_folder = out / name
    files: list[Path] = []
    failed_frames = decoded = 0
    state = None
    if options.task == "pose":
        listed = any(key.startswith((f"{path.name}#", f"{path}#")) for key in boxes)
        state = _PoseState(options, listed)
    smoother = None
    if options.task != "pose" and options.video.temporal_filter:
        smoother = DenseResultFilter(options.task, options.video.temporal_min_cutoff,
                                     options.video.temporal_beta)

    first_failure: dict[str, dict] = {}  # reason -> its entry in report.skipped

    def fail(frame, reason: str) -> None:
        """Report a failed frame; a reason already reported for this video adds the frame to that entry."""
        nonlocal failed_frames
        failed_frames += 1
        entry = first_failure.get(reason)
        if entry is None:
            entry = {"input": f"{path}#{frame.index}", "reason": reason, "frames": [frame.index]}
            first_failure[reason] = entry
            report.skipped.append(entry)
            return
        entry["frames"].append(frame.index)
        entry["reason"] = f"{reason} [the same for {len(entry['frames'])} frames of {path.name}]"

    def emit_now(taken: int, frame, result, writer, track_ids=None) -> None:
        """Write one frame's outputs and its annotated frame (on the writer thread, in frame order)."""
        nonlocal decoded
        source = f"{path}#{frame.index}"
        report.frames += 1
        decoded += 1
        overlay = None
        if isinstance(result, Exception):
            fail(frame, _reason(result))
        else:
            try:
                pose_json = None
                if options.task == "pose":
                    video_options = options.video
                    smoothing = None if video_options.no_smooth else {
                        "filter": "one-euro", "min_cutoff": video_options.smooth_min_cutoff,
                        "beta": video_options.smooth_beta}
                    info = {"detect_every": video_options.detect_every, "smoothing": smoothing}
                    pose_json = pose_annotations(source, frame.image.shape, result, options.output.kpt_threshold,
                                                 options.output.keypoint_format, track_ids,
                                                 {"frame_index": frame.index, "time_s": round(frame.time, 6)}, info,
                                                 skeleton=options.output.skeleton)
                with writing_outputs():
                    written, overlay = write_outputs(options, frame_folder / f"frame_{frame.index:06d}",
                                                     frame.image, result, video=True, pose_json=pose_json)
                if overlay is not None and track_ids:
                    overlay = _draw_track_ids(overlay, result, track_ids)
                files.extend(written)
                report.written += len(written)
                report.processed += 1
            except OutputWriteError:  # the folder cannot take more: the run stops (cli/predict.py)
                raise
            except Exception as error:  # noqa: BLE001 - e.g. NaN in the results
                fail(frame, _reason(error))
        if writer is not None:
            with writing_outputs():
                writer.write(np.asarray(overlay) if overlay is not None else frame.image)
        progress.update(1)

    def run_dense(batch, writer) -> None:
        for (taken, frame), result in zip(batch, _run_frames(options, pipe, batch)):
            if smoother is not None and not isinstance(result, Exception):
                try:  # frame order: this thread, in turn
                    result = smoother.filter(result, frame.image, frame.time)
                except Exception as error:  # noqa: BLE001 - reported for this frame; the filter restarts
                    smoother.reset()
                    result = error
            sink.submit(taken, frame, result, writer)

    def run_pose(batch, writer) -> None:
        i = 0
        while i < len(batch):
            taken, frame = batch[i]
            listed = _boxes_for(f"{path}#{frame.index}", boxes)
            if state.is_detection(taken, listed):
                (result,) = _run_frames(options, pipe, [batch[i]], None if listed is None else [listed],
                                        fallback_to_full_image=False)
                track_ids = None
                if not isinstance(result, Exception):
                    track_ids = state.after_detection(result)
                    state.follow(result, frame.image.shape)
                    result = state.smooth(result, track_ids, frame.time)
                sink.submit(taken, frame, result, writer, track_ids)
                i += 1
                continue
            j = i + 1  # the frames up to the next detection frame share the boxes known now
            while j < len(batch) and not state.is_detection(
                    batch[j][0], _boxes_for(f"{path}#{batch[j][1].index}", boxes)):
                j += 1
            run = batch[i:j]
            tracks = list(state.tracker.tracks)
            track_ids = [t.track_id for t in tracks]
            if tracks:
                people_boxes = [[t.box.tolist() for t in tracks]] * len(run)
                results = _run_frames(options, pipe, run, people_boxes,
                                      box_scores=[[t.score for t in tracks]] * len(run))
            else:
                results = [[] for _ in run]
            for (taken_k, frame_k), result in zip(run, results):
                if not isinstance(result, Exception):
                    state.follow(result, frame_k.image.shape)
                    result = state.smooth(result, track_ids, frame_k.time)
                sink.submit(taken_k, frame_k, result, writer, track_ids)
            i = j

    run = run_pose if options.task == "pose" else run_dense
    try:
        with VideoReader(path) as reader:
            fps = reader.fps / options.video.video_stride
            with writing_outputs():
                writer = None if options.output.no_overlay else VideoWriter(out / f"{name}.mp4", fps)
            # decoding (ahead), inference (here) and writing (behind, in frame order) overlap: at most about
            # four batches of frames are in memory
            sink = _InOrder(emit_now, 2 * options.runtime.batch_size)
            try:
                frames = _prefetch(_frames(reader, options.video.video_stride, options.video.max_frames),
                                   2 * options.runtime.batch_size)
                with contextlib.closing(frames):
                    batch: list = []
                    for taken, frame in frames:
                        batch.append((taken, frame))
                        if len(batch) == options.runtime.batch_size:
                            run(batch, writer)
                            batch = []
                    if batch:
                        run(batch, writer)
                sink.close()
                if decoded == 0:
                    raise OSError("no frame could be decoded")
                if writer is not None:
                    with writing_outputs():
                        files.append(writer.close())
            except BaseException:
                with contextlib.suppress(BaseException):
                    sink.close()  # the writer thread stops before the file it writes is removed
                if writer is not None:
                    writer.abort()
                raise
    except OutputWriteError as error:  # the folder cannot take more: the run stops (cli/predict.py)
        report.skip(str(path), error)
        raise
    except (OSError, ValueError) as error:  # cannot open, decoding stopped, nothing decoded
        report.skip(str(path), error)
        return
    if expected is not None and failed_frames == 0:
        with writing_outputs():
            ResumeMarkers(out, "videos").mark_done(name, expected, files)


__all__ = ["count_frames", "process_video"]
