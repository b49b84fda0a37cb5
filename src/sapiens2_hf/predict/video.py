"""Videos in the task commands: `sapiens2-hf <task> clip.mp4 --out DIR` (the outputs are listed in predict/run.py).

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

from ..modeling.sapiens2_tasks import TASK_SPECS
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


class _VideoRun:
    """One video's run (see the module docstring): the per-frame failures, the writer-thread step and the two ways
    batches go through the pipeline (dense frames, tracked people)."""

    def __init__(self, options, pipe, path: Path, name: str, out: Path, boxes: dict, report, progress):
        self.options, self.pipe, self.path, self.boxes = options, pipe, path, boxes
        self.report, self.progress = report, progress
        self.frame_folder = out / name
        self.files: list[Path] = []
        self.failed_frames = self.decoded = 0
        self.first_failure: dict[str, dict] = {}  # reason -> its entry in report.skipped
        self.sink: _InOrder | None = None
        self.top_down = TASK_SPECS[options.task].top_down
        self.state = self.smoother = None
        if self.top_down:
            listed = any(key.startswith((f"{path.name}#", f"{path}#")) for key in boxes)
            self.state = _PoseState(options, listed)
        elif options.video.temporal_filter:
            self.smoother = DenseResultFilter(options.task, options.video.temporal_min_cutoff,
                                              options.video.temporal_beta)

    def fail(self, frame, reason: str) -> None:
        """Report a failed frame; a reason already reported for this video adds the frame to that entry."""
        self.failed_frames += 1
        entry = self.first_failure.get(reason)
        if entry is None:
            entry = {"input": f"{self.path}#{frame.index}", "reason": reason, "frames": [frame.index]}
            self.first_failure[reason] = entry
            self.report.skipped.append(entry)
            return
        entry["frames"].append(frame.index)
        entry["reason"] = f"{reason} [the same for {len(entry['frames'])} frames of {self.path.name}]"

    def _pose_json(self, frame, result, track_ids) -> dict:
        video_options = self.options.video
        smoothing = None if video_options.no_smooth else {
            "filter": "one-euro", "min_cutoff": video_options.smooth_min_cutoff, "beta": video_options.smooth_beta}
        info = {"detect_every": video_options.detect_every, "smoothing": smoothing}
        return pose_annotations(f"{self.path}#{frame.index}", frame.image.shape, result,
                                self.options.output.kpt_threshold, self.options.output.keypoint_format, track_ids,
                                {"frame_index": frame.index, "time_s": round(frame.time, 6)}, info,
                                skeleton=self.options.output.skeleton)

    def _write_frame(self, frame, result, track_ids):
        """The frame's output files; returns its annotated frame (None without an overlay)."""
        pose_json = self._pose_json(frame, result, track_ids) if self.top_down else None
        with writing_outputs():
            written, overlay = write_outputs(self.options, self.frame_folder / f"frame_{frame.index:06d}",
                                             frame.image, result, video=True, pose_json=pose_json)
        if overlay is not None and track_ids:
            overlay = _draw_track_ids(overlay, result, track_ids)
        self.files.extend(written)
        self.report.written += len(written)
        self.report.processed += 1
        return overlay

    def emit(self, taken: int, frame, result, writer, track_ids=None) -> None:
        """Write one frame's outputs and its annotated frame (on the writer thread, in frame order)."""
        self.report.frames += 1
        self.decoded += 1
        overlay = None
        if isinstance(result, Exception):
            self.fail(frame, _reason(result))
        else:
            try:
                overlay = self._write_frame(frame, result, track_ids)
            except OutputWriteError:  # the folder cannot take more: the run stops (predict/run.py)
                raise
            except Exception as error:  # noqa: BLE001 - e.g. NaN in the results
                self.fail(frame, _reason(error))
        if writer is not None:
            with writing_outputs():
                writer.write(np.asarray(overlay) if overlay is not None else frame.image)
        self.progress.update(1)

    def run_dense(self, batch, writer) -> None:
        for (taken, frame), result in zip(batch, _run_frames(self.options, self.pipe, batch)):
            if self.smoother is not None and not isinstance(result, Exception):
                try:  # frame order: this thread, in turn
                    result = self.smoother.filter(result, frame.image, frame.time)
                except Exception as error:  # noqa: BLE001 - reported for this frame; the filter restarts
                    self.smoother.reset()
                    result = error
            self.sink.submit(taken, frame, result, writer)

    def _listed(self, frame):
        return _boxes_for(f"{self.path}#{frame.index}", self.boxes)

    def _run_detection(self, pair, listed, writer) -> None:
        taken, frame = pair
        (result,) = _run_frames(self.options, self.pipe, [pair], None if listed is None else [listed],
                                fallback_to_full_image=False)
        track_ids = None
        if not isinstance(result, Exception):
            track_ids = self.state.after_detection(result)
            self.state.follow(result, frame.image.shape)
            result = self.state.smooth(result, track_ids, frame.time)
        self.sink.submit(taken, frame, result, writer, track_ids)

    def _run_tracked(self, run: list, writer) -> None:
        """Frames between two detection frames, all with the boxes of the tracks known now."""
        tracks = list(self.state.tracker.tracks)
        track_ids = [t.track_id for t in tracks]
        if tracks:
            people_boxes = [[t.box.tolist() for t in tracks]] * len(run)
            results = _run_frames(self.options, self.pipe, run, people_boxes,
                                  box_scores=[[t.score for t in tracks]] * len(run))
        else:
            results = [[] for _ in run]
        for (taken, frame), result in zip(run, results):
            if not isinstance(result, Exception):
                self.state.follow(result, frame.image.shape)
                result = self.state.smooth(result, track_ids, frame.time)
            self.sink.submit(taken, frame, result, writer, track_ids)

    def run_pose(self, batch, writer) -> None:
        i = 0
        while i < len(batch):
            taken, frame = batch[i]
            listed = self._listed(frame)
            if self.state.is_detection(taken, listed):
                self._run_detection(batch[i], listed, writer)
                i += 1
                continue
            j = i + 1  # the frames up to the next detection frame share the boxes known now
            while j < len(batch) and not self.state.is_detection(batch[j][0], self._listed(batch[j][1])):
                j += 1
            self._run_tracked(batch[i:j], writer)
            i = j

    def run_batches(self, reader, writer) -> None:
        """Decode (ahead), infer (here) and write (behind, in frame order): at most about four batches of frames
        are in memory."""
        run = self.run_pose if self.top_down else self.run_dense
        batch_size = self.options.runtime.batch_size
        self.sink = _InOrder(self.emit, 2 * batch_size)
        frames = _prefetch(_frames(reader, self.options.video.video_stride, self.options.video.max_frames),
                           2 * batch_size)
        with contextlib.closing(frames):
            batch: list = []
            for taken, frame in frames:
                batch.append((taken, frame))
                if len(batch) == batch_size:
                    run(batch, writer)
                    batch = []
            if batch:
                run(batch, writer)
        self.sink.close()
        if self.decoded == 0:
            raise OSError("no frame could be decoded")


def process_video(options, pipe, path: Path, name: str, out: Path, boxes: dict, report, progress,
                  expected: dict | None) -> None:
    """Run one video (see the module docstring); failures are added to `report`."""
    video = _VideoRun(options, pipe, path, name, out, boxes, report, progress)
    try:
        with VideoReader(path) as reader:
            with writing_outputs():
                writer = None if options.output.no_overlay else VideoWriter(
                    out / f"{name}.mp4", reader.fps / options.video.video_stride)
            try:
                video.run_batches(reader, writer)
                if writer is not None:
                    with writing_outputs():
                        video.files.append(writer.close())
            except BaseException:
                if video.sink is not None:
                    with contextlib.suppress(BaseException):
                        video.sink.close()  # the writer thread stops before the file it writes is removed
                if writer is not None:
                    writer.abort()
                raise
    except OutputWriteError as error:  # the folder cannot take more: the run stops (predict/run.py)
        report.skip(str(path), error)
        raise
    except (OSError, ValueError) as error:  # cannot open, decoding stopped, nothing decoded
        report.skip(str(path), error)
        return
    if expected is not None and video.failed_frames == 0:
        with writing_outputs():
            ResumeMarkers(out, "videos").mark_done(name, expected, video.files)


__all__ = ["count_frames", "process_video"]
