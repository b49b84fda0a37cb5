"""`sapiens2-hf {pose,seg,normal,pointmap,albedo}`: folders with a corrupt file, videos, outputs and the summary."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

import sapiens2_hf
from sapiens2_hf.cli.main import main
from sapiens2_hf.processing import Sapiens2HFImageProcessor


MODEL_CLASSES = {
    "pose": sapiens2_hf.Sapiens2ForPoseEstimation,
    "seg": sapiens2_hf.Sapiens2ForSemanticSegmentation,
    "normal": sapiens2_hf.Sapiens2ForNormalEstimation,
    "pointmap": sapiens2_hf.Sapiens2ForPointmapEstimation,
    "albedo": sapiens2_hf.Sapiens2ForAlbedoEstimation,
}
if hasattr(sapiens2_hf.modeling, "Sapiens2ForImageMatting"):  # the sixth task, where this tree has it
    MODEL_CLASSES["matting"] = sapiens2_hf.modeling.Sapiens2ForImageMatting


def _model_folder(tmp_path, task, with_processor=True):
    torch.manual_seed(0)
    folder = tmp_path / f"model_{task}"
    MODEL_CLASSES[task](sapiens2_hf.tiny_config(task)).save_pretrained(folder)
    if with_processor:
        Sapiens2HFImageProcessor(task=task, size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def _inputs(tmp_path):
    folder = tmp_path / "inputs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (70, 50, 3), dtype=np.uint8)).save(folder / "a.png")
    Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(folder / "b.jpg")
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    (folder / "notes.txt").write_text("ignored")
    return folder


def _video(tmp_path, frames=5):
    cv2 = pytest.importorskip("cv2")
    path = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 5, (48, 32))
    assert writer.isOpened()
    for k in range(frames):
        writer.write(np.full((32, 48, 3), 40 * k, np.uint8))
    writer.release()
    return path


def test_seg_over_a_folder_with_a_corrupt_file_and_a_video(tmp_path, capsys):
    model = _model_folder(tmp_path, "seg")
    inputs = _inputs(tmp_path)
    video = _video(tmp_path)
    out = tmp_path / "out"
    code = main(["seg", str(inputs), str(video), str(tmp_path / "missing.png"), "--model", str(model),
                 "--out", str(out), "--batch-size", "2", "--device", "cpu", "--video-stride", "2"])
    captured = capsys.readouterr()
    assert code == 1  # something was skipped
    assert "broken.png" in captured.err and "missing.png" in captured.err
    assert "processed 5 image(s) (3 video frame(s))" in captured.out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processed"] == 5 and summary["video_frames"] == 3
    assert sorted(Path_name(s["input"]) for s in summary["skipped"]) == ["broken.png", "missing.png"]
    seg = np.load(out / "a_seg.npy")
    assert seg.shape == (70, 50) and seg.dtype == np.uint8 and seg.max() < 29
    assert Image.open(out / "a_seg.png").size[1] == 70
    assert np.load(out / "b_seg.npy").shape == (40, 60)
    # video frames: arrays per frame; the overlays go into the annotated video, at the frame rate / stride
    assert sorted(p.name for p in (out / "clip").iterdir()) == [f"frame_{i:06d}_seg.npy" for i in (0, 2, 4)]
    assert np.load(out / "clip" / "frame_000002_seg.npy").shape == (32, 48)
    av = pytest.importorskip("av")
    with av.open(str(out / "clip.mp4")) as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        assert float(stream.average_rate) == pytest.approx(2.5)
    assert len(frames) == 3 and frames[0].shape == (32, 48, 3)
    assert not list(out.rglob("*.tmp"))


def Path_name(value):
    return value.replace("\\", "/").rsplit("/", 1)[-1]


def test_pose_with_a_boxes_file_writes_coco_json(tmp_path, capsys):
    model = _model_folder(tmp_path, "pose")
    inputs = _inputs(tmp_path)
    (inputs / "broken.png").unlink()
    boxes = tmp_path / "boxes.json"
    boxes.write_text(json.dumps({"a.png": [[2, 3, 40, 60], [10, 10, 30, 50]], "b.jpg": []}))
    out = tmp_path / "out"
    code = main(["pose", str(inputs), "--model", str(model), "--out", str(out), "--boxes", str(boxes),
                 "--device", "cpu", "--no-flip-test", "--quiet", "--batch-size", "2"])
    assert code == 0, capsys.readouterr().err
    coco = json.loads((out / "a.json").read_text())
    assert coco["images"][0]["height"] == 70 and coco["images"][0]["width"] == 50
    assert coco["categories"][0]["keypoints"][:2] == ["nose", "left_eye"]
    assert len(coco["categories"][0]["skeleton"]) == 65
    annotations = coco["annotations"]
    assert [a["bbox"] for a in annotations] == [[2.0, 3.0, 38.0, 57.0], [10.0, 10.0, 20.0, 40.0]]
    assert len(annotations[0]["keypoints"]) == 3 * 308
    assert annotations[0]["keypoints"][2] == annotations[0]["keypoint_scores"][0]
    assert json.loads((out / "b.json").read_text())["annotations"] == []
    assert Image.open(out / "a_pose.png").size == (50, 70)


@pytest.mark.parametrize("task", ["normal", "pointmap", "albedo"])
def test_dense_tasks_write_arrays_and_images(tmp_path, task, capsys):
    model = _model_folder(tmp_path, task, with_processor=task != "albedo")  # albedo: default processor
    image = tmp_path / "x.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (30, 20, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "out"
    extra = ["--ply"] if task == "pointmap" else []
    assert main([task, str(image), "--model", str(model), "--out", str(out), "--device", "cpu", "--quiet",
                 *extra]) == 0, capsys.readouterr().err
    if task == "normal":
        assert np.load(out / "x_normal.npy").shape == (30, 20, 3)
        assert Image.open(out / "x_normal.png").size == (20, 30)
    elif task == "pointmap":
        pointmap, depth = np.load(out / "x_pointmap.npy"), np.load(out / "x_depth.npy")
        assert pointmap.shape == (30, 20, 3) and np.array_equal(depth, pointmap[..., 2])
        assert (out / "x.ply").read_bytes().startswith(b"ply\nformat binary_little_endian 1.0\nelement vertex 600")
    else:
        albedo = np.load(out / "x_albedo.npy")
        assert np.array_equal(np.asarray(Image.open(out / "x_albedo.png")), (albedo * 255).astype(np.uint8))


def test_wrong_processor_task_is_a_clear_error(tmp_path, capsys):
    model = _model_folder(tmp_path, "seg")
    Sapiens2HFImageProcessor(task="normal").save_pretrained(model)
    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    assert main(["seg", str(image), "--model", str(model), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "not 'seg'" in capsys.readouterr().err


def test_cli_tasks_are_the_registry_tasks():
    """The CLI's task table is derived from the registry (read torch-free, `_registration.task_registry`): it names
    exactly the registry's tasks and pipelines."""
    from sapiens2_hf.cli.predict import predict_parser
    from sapiens2_hf.modeling.sapiens2_tasks import TASK_SPECS

    commands = next(a for a in predict_parser()._actions if a.dest == "command").choices
    assert list(commands) == list(TASK_SPECS)


def test_the_command_and_the_app_build_the_same_typed_options():
    """One table of the predict commands' options (`predict.options`): each command's parser has exactly the options
    `command_defaults(task)` lists, with those defaults and the value rules the app's `predict_options` checks
    (`--threads` also caps at the machine's CPUs), so the app's options are the command's for the same values."""
    from sapiens2_hf.cli.predict import predict_parser
    from sapiens2_hf.predict.options import PredictOptions, _command_options, command_defaults, predict_options

    commands = next(a for a in predict_parser()._actions if a.dest == "command").choices
    for task, parser in commands.items():
        actions = {action.dest: action for action in parser._actions if action.dest != "help"}
        assert set(actions) == set(command_defaults(task)), task
        for name, option in _command_options(task).items():
            default, _, check = option.metadata["command"]
            assert actions[name].default == default, (task, name)
            if isinstance(check, tuple):
                assert tuple(actions[name].choices) == check, (task, name)
            elif name != "threads":
                assert actions[name].type is check, (task, name)
        parsed = PredictOptions.from_args(parser.parse_args(["a.png", "--model", "m", "--out", "o"]))
        assert parsed == predict_options(task, "m", "o", inputs=["a.png"]), task
    # control: another value, or an option another task's command has, is not the command's default
    pose = PredictOptions.from_args(commands["pose"].parse_args(["a.png", "--model", "m", "--out", "o"]))
    assert pose != predict_options("pose", "m", "o", inputs=["a.png"], kpt_threshold=0.5)
    with pytest.raises(ValueError, match="has no option"):
        predict_options("seg", "m", "o", ply=True)


@pytest.mark.parametrize("keypoint_format", ["coco17", "body25", "coco_wholebody133"])
def test_pose_keypoint_format_converts_the_json_only(tmp_path, keypoint_format, capsys):
    from sapiens2_hf.predict.outputs import _format_skeleton
    from sapiens2_hf.pipelines import Sapiens2PosePipeline
    from sapiens2_hf.data.keypoint_formats import KEYPOINT_FORMATS, describe_sources, people_in_format

    model = _model_folder(tmp_path, "pose")
    image = tmp_path / "a.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (70, 50, 3), dtype=np.uint8)).save(image)
    boxes = tmp_path / "boxes.json"
    box_list = [[2, 3, 40, 60], [10, 10, 30, 50]]
    boxes.write_text(json.dumps({"a.png": box_list}))
    common = [str(image), "--model", str(model), "--boxes", str(boxes), "--device", "cpu", "--quiet",
              "--no-flip-test"]
    assert main(["pose", *common, "--out", str(tmp_path / "native")]) == 0, capsys.readouterr().err
    assert main(["pose", *common, "--out", str(tmp_path / "fmt"), "--keypoint-format", keypoint_format]) == 0
    coco = json.loads((tmp_path / "fmt" / "a.json").read_text())
    names = list(KEYPOINT_FORMATS[keypoint_format])
    category = coco["categories"][0]
    assert category["keypoints"] == names and coco["info"]["keypoint_format"] == keypoint_format
    # the skeleton joins the same landmarks as the 308 one: every link's ends are copies of a 308 link's ends
    copies = {row["index"]: row["source_indices"][0] for row in describe_sources(keypoint_format)
              if row["kind"] == "copy"}
    from sapiens2_hf.visualization import SKELETON_LINKS

    links_308 = {frozenset(link) for link in SKELETON_LINKS}
    assert category["skeleton"] == _format_skeleton(keypoint_format) and category["skeleton"]
    for a, b in category["skeleton"]:
        assert frozenset((copies[a - 1], copies[b - 1])) in links_308
    if keypoint_format == "coco17":  # COCO's own person skeleton (19 links), in any order
        coco_links = [[16, 14], [14, 12], [17, 15], [15, 13], [12, 13], [6, 12], [7, 13], [6, 7], [6, 8], [7, 9],
                      [8, 10], [9, 11], [2, 3], [1, 2], [1, 3], [2, 4], [3, 5], [4, 6], [5, 7]]
        assert sorted(map(sorted, category["skeleton"])) == sorted(map(sorted, coco_links))
    # the numbers are the pipeline's own conversion (same process: exact)
    processor = Sapiens2HFImageProcessor.from_pretrained(model)
    pipe = Sapiens2PosePipeline(model=sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(model),
                                image_processor=processor, device="cpu")
    people = people_in_format(pipe(str(image), boxes=box_list, flip_test=False), keypoint_format)
    assert len(coco["annotations"]) == 2
    for annotation, person in zip(coco["annotations"], people):
        triples = np.asarray(annotation["keypoints"]).reshape(-1, 3)
        assert triples.shape == (len(names), 3)
        assert np.array_equal(triples[:, :2], person["keypoints"])
        assert np.array_equal(triples[:, 2], person["scores"].astype(np.float64))
    # the overlay is drawn from the native 308 keypoints: the same picture as without the format
    assert (tmp_path / "fmt" / "a_pose.png").read_bytes() == (tmp_path / "native" / "a_pose.png").read_bytes()
    native = json.loads((tmp_path / "native" / "a.json").read_text())
    assert len(native["categories"][0]["keypoints"]) == 308
    assert len(native["annotations"][0]["keypoints"]) == 3 * 308


def test_matting_outputs(tmp_path, capsys):
    if "matting" not in MODEL_CLASSES:
        pytest.skip("no matting model in this tree")
    model = _model_folder(tmp_path, "matting", with_processor=False)
    image = tmp_path / "x.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (30, 20, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "out"
    assert main(["matting", str(image), "--model", str(model), "--out", str(out), "--device", "cpu",
                 "--quiet"]) == 0, capsys.readouterr().err
    alpha = np.load(out / "x_alpha.npy")
    assert alpha.shape == (30, 20) and alpha.dtype == np.float32 and 0 <= alpha.min() and alpha.max() <= 1
    assert np.array_equal(np.asarray(Image.open(out / "x_alpha.png")), np.round(alpha * 255).astype(np.uint8))
    cutout = Image.open(out / "x_foreground.png")
    assert cutout.mode == "RGBA" and cutout.size == (20, 30)
    assert np.array_equal(np.asarray(cutout)[..., 3], np.asarray(Image.open(out / "x_alpha.png")))
    assert Image.open(out / "x_matting.png").size == (20, 30)
