"""Video: PyAV reading and atomic mp4 writing, the One-Euro filter (lag and jitter on synthetic trajectories), IoU
tracking, and `sapiens2-hf <task> video.mp4` end to end on tiny models and tiny synthetic videos."""

import json

import numpy as np
import pytest
import torch

import sapiens2_hf
from sapiens2_hf.cli.main import build_parser, main
from sapiens2_hf.processing import Sapiens2HFImageProcessor
from sapiens2_hf.video import (
    DEFAULT_BETA,
    DEFAULT_MIN_CUTOFF,
    IouTracker,
    OneEuroFilter,
    VideoReader,
    VideoWriter,
    box_from_keypoints,
    trajectory_errors,
    write_video,
)

pytestmark = pytest.mark.compat

av = pytest.importorskip("av")

FPS = 30.0
T = 300


def _noisy(truth, seed=0, sigma=2.0):
    return truth + np.random.default_rng(seed).normal(0.0, sigma, truth.shape)


def _smooth(values, min_cutoff=DEFAULT_MIN_CUTOFF, beta=DEFAULT_BETA):
    one_euro = OneEuroFilter(min_cutoff, beta)
    return np.array([one_euro.filter(v, k / FPS) for k, v in enumerate(values)])


def _trajectories():
    t = np.arange(T) / FPS
    still = np.tile([[100.0, 50.0]], (T, 1))
    moving = np.stack([100 + 300 * t, 50 + 0 * t], axis=1)  # 300 px/s = 10 px per frame
    return still, moving


# ------------------------------------------------------------------------------------------------------------------
# One-Euro filter
# ------------------------------------------------------------------------------------------------------------------


def test_one_euro_reduces_jitter_at_rest_and_lags_little_when_moving():
    still, moving = _trajectories()
    noisy_still, noisy_moving = _noisy(still, 0), _noisy(moving, 1)
    raw_still, raw_moving = trajectory_errors(noisy_still, still), trajectory_errors(noisy_moving, moving)
    rest, fast = trajectory_errors(_smooth(noisy_still), still), trajectory_errors(_smooth(noisy_moving), moving)
    # measured (defaults 1 Hz, beta 0.02): at rest jitter 7.0 -> 1.8 px/frame^2, RMS error 2.8 -> 1.3 px;
    # at 300 px/s lag 0.49 frames
    assert raw_still["jitter"] == pytest.approx(7.0, abs=0.3)
    assert rest["jitter"] < raw_still["jitter"] / 3 and rest["rmse"] < raw_still["rmse"] / 2
    assert rest["lag_frames"] == 0.0
    assert 0.2 < fast["lag_frames"] < 0.7 and fast["rmse"] < 7.0
    assert fast["jitter"] < raw_moving["jitter"]
    # controls: an unsmoothed track fails the jitter bound, a fixed low-pass (beta 0) fails the lag bound
    assert not raw_still["jitter"] < raw_still["jitter"] / 3
    fixed = trajectory_errors(_smooth(noisy_moving, beta=0.0), moving)
    assert fixed["lag_frames"] > 4.0 and not fixed["lag_frames"] < 0.7


def test_one_euro_basics():
    one_euro = OneEuroFilter()
    points = np.array([[3.0, 4.0], [5.0, 6.0]])
    assert np.array_equal(one_euro.filter(points, 0.0), points)  # first sample unchanged
    for k in range(1, 5):
        assert np.array_equal(one_euro.filter(points, k / FPS), points)  # still stays still, exactly
    with pytest.raises(ValueError, match="increasing times"):
        one_euro.filter(points, 0.0)
    moved = one_euro.filter(points + 10.0, 5 / FPS)
    assert np.all((moved > points) & (moved < points + 10.0))
    # a missing (NaN) point restarts from its next value instead of poisoning the filter
    nan_points = points.copy()
    nan_points[0] = np.nan
    assert np.isnan(one_euro.filter(nan_points, 6 / FPS)[0]).all()
    assert np.array_equal(one_euro.filter(points, 7 / FPS)[0], points[0])
    with pytest.raises(ValueError, match="min_cutoff > 0"):
        OneEuroFilter(min_cutoff=0.0)


def test_cli_smoothing_defaults_are_the_filter_defaults():
    args = build_parser().parse_args(["pose", "clip.mp4", "--model", "m", "--out", "o"])
    assert (args.smooth_min_cutoff, args.smooth_beta) == (DEFAULT_MIN_CUTOFF, DEFAULT_BETA)
    assert args.detect_every == 1 and not args.no_smooth


# ------------------------------------------------------------------------------------------------------------------
# tracking
# ------------------------------------------------------------------------------------------------------------------


def _moving_boxes(frames=20):
    """Two people walking past each other (one nearer the camera, lower in the image: their boxes overlap in the
    middle frames, up to IoU 0.18), a third entering at frame 12; each frame's boxes in a shuffled order, with the
    identity of each box. (Two boxes of one size crossing exactly would be told apart by no IoU matcher: that
    needs a motion model.)"""
    rng = np.random.default_rng(0)
    sequence = []
    for k in range(frames):
        people = {"a": [10 + 6 * k, 20, 50 + 6 * k, 120], "b": [200 - 6 * k, 90, 240 - 6 * k, 190]}
        if k >= 12:
            people["c"] = [300, 40, 330, 100]
        order = rng.permutation(len(people))
        names = [list(people)[i] for i in order]
        sequence.append((names, [people[n] for n in names]))
    return sequence


def test_iou_tracker_keeps_ids_of_moving_boxes():
    tracker = IouTracker(0.3)
    identity = {}
    for names, boxes in _moving_boxes():
        for name, track in zip(names, tracker.update(boxes)):
            assert identity.setdefault(name, track.track_id) == track.track_id, name
    assert identity == {"a": identity["a"], "b": identity["b"], "c": 3} and {identity["a"], identity["b"]} == {1, 2}
    # a person who leaves ends its track; a new one gets a new id
    assert [t.track_id for t in tracker.update([[300, 40, 330, 100]])] == [3]
    assert [t.track_id for t in tracker.update([[0, 0, 5, 5]])] == [4]


def test_iou_tracker_control_without_matching_ids_change():
    """Control: with a threshold no moving box reaches, every frame gets new ids, so the check above would fail."""
    tracker = IouTracker(1.0)
    seen = set()
    for names, boxes in _moving_boxes(5):
        seen.update(t.track_id for t in tracker.update(boxes))
    assert len(seen) > 2


def test_box_from_keypoints():
    keypoints = np.array([[10.0, 20.0], [30.0, 60.0], [20.0, 40.0], [500.0, 500.0]])
    scores = np.array([0.9, 0.8, 0.7, 0.1])
    box = box_from_keypoints(keypoints, scores, 0.3, (100, 100), margin=0.1)
    assert np.allclose(box, [8.0, 16.0, 32.0, 64.0])
    assert box_from_keypoints(keypoints, scores, 0.75, (100, 100)) is None  # two confident points only


# ------------------------------------------------------------------------------------------------------------------
# reading and writing
# ------------------------------------------------------------------------------------------------------------------


def _frames(count, height=48, width=64, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(count)]


def test_video_writer_and_reader_round_trip(tmp_path):
    path = write_video(tmp_path / "clip.mp4", [np.full((31, 41, 3), 20 * k, np.uint8) for k in range(7)], fps=10)
    with VideoReader(path) as reader:
        assert (reader.fps, reader.frame_count, reader.width, reader.height) == (10, 7, 42, 32)  # odd: padded
        frames = list(reader)
    assert [f.index for f in frames] == list(range(7))
    assert [f.time for f in frames] == pytest.approx([k / 10 for k in range(7)])
    assert all(abs(float(f.image.mean()) - 20 * k) < 2 for k, f in enumerate(frames))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


def test_video_writer_is_atomic(tmp_path):
    target = tmp_path / "clip.mp4"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with VideoWriter(target, 5) as writer:
            writer.write(_frames(1)[0])
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]
    with pytest.raises(ValueError, match="first frame's size"):
        with VideoWriter(target, 5) as writer:
            writer.write(_frames(1)[0])
            writer.write(_frames(1, 40, 64)[0])
    assert target.read_bytes() == b"old"


# ------------------------------------------------------------------------------------------------------------------
# the CLI on videos
# ------------------------------------------------------------------------------------------------------------------


def _model_folder(tmp_path, task):
    torch.manual_seed(0)
    folder = tmp_path / f"model_{task}"
    model_class = sapiens2_hf.model_class_for_task(task)
    model_class(sapiens2_hf.tiny_config(task)).save_pretrained(folder)
    Sapiens2HFImageProcessor(task=task, size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def _read_video(path):
    with VideoReader(path) as reader:
        return reader.fps, [frame.image for frame in reader]


def test_seg_video_writes_an_annotated_mp4_and_arrays(tmp_path, capsys):
    model = _model_folder(tmp_path, "seg")
    video = write_video(tmp_path / "walk.mp4", _frames(8), fps=12)
    out = tmp_path / "out"
    assert main(["seg", str(video), "--model", str(model), "--out", str(out), "--device", "cpu", "--quiet",
                 "--batch-size", "3", "--threads", "1"]) == 0, capsys.readouterr().err
    fps, frames = _read_video(out / "walk.mp4")
    assert fps == 12 and len(frames) == 8 and frames[0].shape == (48, 64, 3)
    arrays = sorted((out / "walk").iterdir())
    assert [p.name for p in arrays] == [f"frame_{k:06d}_seg.npy" for k in range(8)]
    assert np.load(arrays[0]).shape == (48, 64)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processed"] == 8 and summary["video_frames"] == 8 and summary["skipped"] == []
    # stride and max-frames: frames 0, 3, 6 at 12 / 3 = 4 frames per second
    out2 = tmp_path / "out2"
    assert main(["seg", str(video), "--model", str(model), "--out", str(out2), "--device", "cpu", "--quiet",
                 "--video-stride", "3", "--max-frames", "3", "--no-arrays", "--threads", "1"]) == 0
    fps, frames = _read_video(out2 / "walk.mp4")
    assert fps == 4 and len(frames) == 3 and not (out2 / "walk").exists()


def _pose_video(tmp_path, frames=6):
    """A synthetic clip with two people (bright boxes) moving towards each other, and a boxes file listing every
    frame with the boxes in a shuffled order; returns (video, boxes file, {frame: {box tuple: person}})."""
    rng = np.random.default_rng(1)
    images, entries, who = [], {}, {}
    for k in range(frames):
        people = {"a": [4 + 3 * k, 6, 28 + 3 * k, 44], "b": [60 - 3 * k, 4, 84 - 3 * k, 42]}
        image = np.full((48, 96, 3), 30, np.uint8)
        for x0, y0, x1, y1 in people.values():
            image[y0:y1, x0:x1] = 200
        images.append(image)
        names = [list(people)[i] for i in rng.permutation(2)]
        entries[f"clip.mp4#{k}"] = [people[n] for n in names]
        who[k] = {tuple(float(v) for v in people[n]): n for n in names}
    video = write_video(tmp_path / "clip.mp4", images, fps=10)
    boxes = tmp_path / "boxes.json"
    boxes.write_text(json.dumps(entries))
    return video, boxes, who


def test_pose_video_tracks_people_and_writes_json_per_frame(tmp_path, capsys):
    model = _model_folder(tmp_path, "pose")
    video, boxes, who = _pose_video(tmp_path)
    common = [str(video), "--model", str(model), "--boxes", str(boxes), "--device", "cpu", "--quiet",
              "--no-flip-test", "--threads", "1"]
    out = tmp_path / "out"
    assert main(["pose", *common, "--out", str(out)]) == 0, capsys.readouterr().err
    fps, frames = _read_video(out / "clip.mp4")
    assert fps == 10 and len(frames) == 6 and frames[0].shape == (48, 96, 3)
    identity = {}
    smoothed = []
    for k in range(6):
        coco = json.loads((out / "clip" / f"frame_{k:06d}.json").read_text())
        assert coco["images"][0]["frame_index"] == k and coco["images"][0]["time_s"] == pytest.approx(k / 10)
        assert coco["info"]["smoothing"] == {"filter": "one-euro", "min_cutoff": 1.0, "beta": 0.02}
        for annotation in coco["annotations"]:
            x, y, w, h = annotation["bbox"]
            person = who[k][(x, y, x + w, y + h)]
            assert identity.setdefault(person, annotation["track_id"]) == annotation["track_id"]
        smoothed.append(coco)
    assert sorted(identity.values()) == [1, 2]

    # smoothing: the JSON holds exactly the library filter applied to the raw (--no-smooth) keypoints per track
    raw_out = tmp_path / "raw"
    assert main(["pose", *common, "--out", str(raw_out), "--no-smooth"]) == 0
    filters = {}
    differs = False
    for k in range(6):
        raw = json.loads((raw_out / "clip" / f"frame_{k:06d}.json").read_text())
        assert raw["info"]["smoothing"] is None
        by_track = {a["track_id"]: np.asarray(a["keypoints"]).reshape(-1, 3) for a in raw["annotations"]}
        for annotation in smoothed[k]["annotations"]:
            track = annotation["track_id"]
            expected = filters.setdefault(track, OneEuroFilter()).filter(by_track[track][:, :2], k / 10)
            got = np.asarray(annotation["keypoints"]).reshape(-1, 3)
            assert np.array_equal(got[:, :2], expected) and np.array_equal(got[:, 2], by_track[track][:, 2])
            differs |= not np.array_equal(got[:, :2], by_track[track][:, :2])
    assert differs  # control: the smoothing did change the keypoints


def test_pose_video_carries_boxes_between_detections(tmp_path, capsys):
    """Only frame 0 is listed and the detector would run every 100 frames: the other frames reuse the tracked
    boxes (no detector is needed) and keep the track ids."""
    model = _model_folder(tmp_path, "pose")
    video, boxes, _ = _pose_video(tmp_path)
    entries = json.loads(boxes.read_text())
    boxes.write_text(json.dumps({"clip.mp4#0": entries["clip.mp4#0"]}))
    out = tmp_path / "out"
    assert main(["pose", str(video), "--model", str(model), "--boxes", str(boxes), "--device", "cpu", "--quiet",
                 "--no-flip-test", "--detect-every", "100", "--batch-size", "2", "--keypoint-format", "coco17",
                 "--threads", "1", "--out", str(out)]) == 0, capsys.readouterr().err
    for k in range(6):
        coco = json.loads((out / "clip" / f"frame_{k:06d}.json").read_text())
        assert sorted(a["track_id"] for a in coco["annotations"]) == [1, 2]
        assert len(coco["annotations"][0]["keypoints"]) == 3 * 17 and coco["info"]["detect_every"] == 100
    assert len(_read_video(out / "clip.mp4")[1]) == 6
    # keypoints confident down to threshold 0 (the least --kpt-threshold takes): each frame's boxes are the previous
    # frame's keypoint boxes (frame by frame with --batch-size 1)
    out = tmp_path / "follow"
    assert main(["pose", str(video), "--model", str(model), "--boxes", str(boxes), "--device", "cpu", "--quiet",
                 "--no-flip-test", "--detect-every", "100", "--kpt-threshold", "0", "--no-smooth",
                 "--threads", "1", "--out", str(out)]) == 0, capsys.readouterr().err
    previous = None
    for k in range(6):
        coco = json.loads((out / "clip" / f"frame_{k:06d}.json").read_text())
        people = {a["track_id"]: a for a in coco["annotations"]}
        assert sorted(people) == [1, 2]
        if previous is not None:
            for track, annotation in people.items():
                points = np.asarray(previous[track]["keypoints"]).reshape(-1, 3)
                expected = box_from_keypoints(points[:, :2], points[:, 2], -1000, (48, 96))
                x, y, w, h = annotation["bbox"]
                assert np.allclose([x, y, x + w, y + h], expected, atol=1e-4), (k, track)
        previous = people


def test_unreadable_video_is_reported_and_skipped(tmp_path, capsys):
    model = _model_folder(tmp_path, "seg")
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all")
    out = tmp_path / "out"
    assert main(["seg", str(bad), "--model", str(model), "--out", str(out), "--device", "cpu", "--quiet"]) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert [s["input"] for s in summary["skipped"]] == [str(bad)] and "cannot open" in summary["skipped"][0]["reason"]
    assert not (out / "bad.mp4").exists() and not list(out.rglob("*.tmp"))
