"""Humans in 3D (issue 32): 2D keypoints lifted into metres with the pointmap (`lift_keypoints`), the composed
`sapiens2-pose-3d` pipeline, `sapiens2-hf pose3d` on images and video, the .glb files, and the app's 3D tab.

The lifting rule is measured on synthetic humans, whose camera-frame 3D keypoints are known: bounds below were
measured with `benchmarks/bench_pose3d.py`'s ground-truth case (the figures are in the README's "3D" section).
"""

from __future__ import annotations

import json
import struct
import types
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import sapiens2_hf
from sapiens2_hf.cli.main import main
from sapiens2_hf.data.synthetic import render_sample
from sapiens2_hf.pose3d.lifting import joint_depths_for, lift_keypoints, mpjpe, pa_mpjpe
from sapiens2_hf.modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES
from sapiens2_hf.pose3d.outputs import Keypoint3DSmoother, ground_truth_result, jitter_mm, pose3d_record
from sapiens2_hf.visualization import SKELETON_LINKS
from sapiens2_hf.visualization.gltf import pointmap_mesh, write_people_glb, write_skeleton_animation
from sapiens2_hf.hub.tiny_models import save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

PHOTO = Path(str(resources.files("sapiens2_hf").joinpath("assets", "demo", "astronaut.png")))
BODY_JOINTS = joint_depths_for(POSE_KEYPOINT_NAMES) > 0
SEEDS = range(1, 7)  # single-person synthetic scenes (seed 0 is a close-up: joints hidden behind the chest)
# Pooled over SEEDS at 256x192: MPJPE 16.4 mm over visible, valid keypoints; body joints 25.1 mm with the rule's step
# into the body, 43.3 mm left on the skin; another scene's pointmap: 1520 mm. (benchmarks/bench_pose3d.py measures
# the same on more scenes.)
TRUTH_BOUND_MM = 25.0


@pytest.fixture(scope="module")
def samples():
    return [render_sample(seed, height=256, width=192, num_people=1) for seed in SEEDS]


def _pooled_error(samples, pointmaps=None, **lifting) -> tuple[float, float]:
    """MPJPE (mm) over every sample's visible, valid keypoints, and over its body joints."""
    errors, body = [], []
    for k, sample in enumerate(samples):
        if pointmaps is not None:
            sample = {**sample, "pointmap": pointmaps[k]}
        person = ground_truth_result(sample, **lifting)["people"][0]
        ok = (sample["keypoint_visibility"][0] == 2) & person["keypoint_3d_valid"]
        distance = np.linalg.norm(person["keypoints_3d"] - sample["keypoints_3d"][0], axis=-1) * 1000
        errors += list(distance[ok])
        body += list(distance[ok & BODY_JOINTS])
    return float(np.mean(errors)), float(np.mean(body))


# ----------------------------------------------------------------------------------------------------------------
# the lifting rule
# ----------------------------------------------------------------------------------------------------------------


def test_true_keypoints_and_pointmap_lift_within_the_measured_bound(samples):
    overall, body = _pooled_error(samples)
    assert overall < TRUTH_BOUND_MM, overall
    # the step into the body: body joints nearer their true place than left on the skin (measured 25.1 vs 43.3 mm)
    _, on_skin = _pooled_error(samples, joint_depths=0.0)
    assert body < 0.7 * on_skin, (body, on_skin)
    # control: another scene's pointmap (the same people elsewhere) is far outside the bound
    shifted = [samples[(k + 1) % len(samples)]["pointmap"] for k in range(len(samples))]
    assert _pooled_error(samples, pointmaps=shifted)[0] > 5 * TRUTH_BOUND_MM


def test_metrics_mpjpe_and_procrustes():
    rng = np.random.default_rng(0)
    target = rng.normal(size=(20, 3))
    angle = 0.7
    rotation = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    moved = 1.3 * target @ rotation.T + np.array([0.5, -1.0, 2.0])
    assert mpjpe(moved, target) > 0.5
    assert pa_mpjpe(moved, target) < 1e-9  # a similarity transform away: PA-MPJPE is 0
    assert pa_mpjpe(moved + rng.normal(scale=0.1, size=moved.shape), target) > 0.01  # control: noise is not


def test_translating_the_pointmap_moves_every_valid_keypoint_by_that_vector(samples):
    sample = samples[0]
    shift = np.array([0.31, -0.12, 0.45], dtype=np.float32)
    before = ground_truth_result(sample)["people"][0]
    after = ground_truth_result({**sample, "pointmap": sample["pointmap"] + shift})["people"][0]
    valid = before["keypoint_3d_valid"]
    assert valid.sum() > 50 and np.array_equal(valid, after["keypoint_3d_valid"])
    assert before["keypoint_3d_status"] == after["keypoint_3d_status"]
    np.testing.assert_allclose(after["keypoints_3d"][valid] - before["keypoints_3d"][valid],
                               np.broadcast_to(shift, (int(valid.sum()), 3)), atol=2e-5)
    np.testing.assert_array_equal(after["keypoint_3d_confidence"], before["keypoint_3d_confidence"])
    # control: scaling the pointmap is not a translation of the result
    scaled = ground_truth_result({**sample, "pointmap": sample["pointmap"] * 1.5})["people"][0]
    change = scaled["keypoints_3d"][valid] - before["keypoints_3d"][valid]
    assert np.abs(change - change.mean(axis=0)).max() > 0.05


def _plane(height=40, width=40, depth=2.0, focal=100.0):
    rows, columns = np.mgrid[0:height, 0:width].astype(np.float64)
    z = np.full((height, width), depth)
    return np.stack([(columns - width / 2) * z / focal, (rows - height / 2) * z / focal, z], axis=-1)


def test_a_keypoint_outside_the_mask_is_flagged_invalid():
    pointmap = _plane()
    mask = np.zeros((40, 40), bool)
    mask[:, :20] = True  # the person is the left half
    keypoints = np.array([[10.0, 20.0], [35.0, 20.0]])
    lifted = lift_keypoints(keypoints, [0.9, 0.9], pointmap, mask, window_radius=2)
    assert lifted.status == ["valid", "outside_mask"] and lifted.valid.tolist() == [True, False]
    assert lifted.confidence[1] == 0 and lifted.confidence[0] > 0.8
    np.testing.assert_allclose(lifted.keypoints_3d[0], pointmap[20, 10], atol=1e-6)
    # control: without the mask the same point is on the plane and valid
    assert lift_keypoints(keypoints, [0.9, 0.9], pointmap, None, window_radius=2).status == ["valid", "valid"]


def test_depth_discontinuity_low_score_and_outside_image_are_flagged():
    pointmap = _plane()
    pointmap[:, 20:, 2] = 3.0  # a step of 1 m between the halves
    keypoints = np.array([[20.0, 20.0], [10.0, 20.0], [10.0, 10.0], [-5.0, 3.0]])
    lifted = lift_keypoints(keypoints, [0.9, 0.9, 0.1, 0.9], pointmap, None, window_radius=2)
    assert lifted.status == ["depth_discontinuity", "valid", "low_score", "outside_image"]
    # at the edge, the surface of the nearest pixel (column 20: the far side) is kept, not a mix of the two
    assert abs(lifted.keypoints_3d[0, 2] - 3.0) < 1e-6
    assert np.isnan(lifted.keypoints_3d[3]).all()


def test_joints_step_into_the_body_along_the_inward_normal():
    pointmap = _plane()
    lifted = lift_keypoints([[20.0, 20.0]], [1.0], pointmap, None, window_radius=2, joint_depths=[0.05])
    np.testing.assert_allclose(lifted.keypoints_3d[0], [0, 0, 2.05], atol=1e-6)  # away from the camera
    np.testing.assert_allclose(lifted.surface_points[0], [0, 0, 2.0], atol=1e-6)


def test_smoothing_cuts_the_jitter_of_a_noisy_still_track_and_keeps_invalid_points_out():
    rng = np.random.default_rng(0)
    truth = np.array([[0.1, -0.2, 2.5], [0.0, 0.3, 2.6]])
    smoother = Keypoint3DSmoother()
    raw, smoothed = [], []
    for frame in range(60):
        noisy = truth + rng.normal(scale=0.01, size=truth.shape)
        valid = np.array([[True, frame != 30]])
        raw.append(noisy)
        smoothed.append(smoother.filter([7], noisy[None], valid, frame / 30)[0])
    assert np.isnan(smoothed[30][1]).all() and np.isfinite(smoothed[30][0]).all()
    raw, smoothed = np.array(raw), np.array(smoothed)
    assert jitter_mm(smoothed[:29]) < 0.5 * jitter_mm(raw[:29])  # measured 0.34x with the defaults
    assert smoother.filter([8], truth[None], np.ones((1, 2), bool), 3.0).shape == (1, 2, 3)  # a new track


# ----------------------------------------------------------------------------------------------------------------
# files
# ----------------------------------------------------------------------------------------------------------------


def _glb_json(path: Path) -> dict:
    data = path.read_bytes()
    magic, version, length = struct.unpack_from("<III", data, 0)
    assert (magic, version, length) == (0x46546C67, 2, len(data))
    chunk_length, chunk_type = struct.unpack_from("<II", data, 12)
    assert chunk_type == 0x4E4F534A
    return json.loads(data[20:20 + chunk_length])


def test_glb_round_trips_through_trimesh_with_the_mesh_and_skeleton(samples, tmp_path):
    trimesh = pytest.importorskip("trimesh")
    sample = samples[2]
    result = ground_truth_result(sample)
    mesh = pointmap_mesh(result["pointmap"], sample["image"], result["mask"])
    assert len(mesh.vertices) == int(result["mask"].sum()) and len(mesh.faces) > len(mesh.vertices)
    path = tmp_path / "person.glb"
    summary = write_people_glb(path, result["people"], result["pointmap"], sample["image"], result["mask"],
                               links=SKELETON_LINKS)
    person = result["people"][0]
    valid = int(person["keypoint_3d_valid"].sum())
    scene = trimesh.load(path, process=False)
    surface = scene.geometry["person_surface"]
    assert len(surface.vertices) == len(mesh.vertices) and len(surface.faces) == len(mesh.faces)
    # glTF's frame: (X, -Y, -Z) of the camera frame
    np.testing.assert_allclose(np.asarray(surface.vertices)[:5], mesh.vertices[:5] * [1, -1, -1], atol=1e-6)
    assert len(scene.geometry["skeleton_0_joints"].vertices) == valid == summary["people"][0]["joints"]
    assert type(scene.geometry["skeleton_0_bones"]).__name__ == "Path3D"
    bones = sum(1 for a, b in SKELETON_LINKS if person["keypoint_3d_valid"][a] and person["keypoint_3d_valid"][b])
    gltf = _glb_json(path)
    (bone_mesh,) = [m for m in gltf["meshes"] if m["name"] == "skeleton_0_bones"]
    assert gltf["accessors"][bone_mesh["primitives"][0]["indices"]]["count"] == 2 * bones == 2 * summary["people"][0]["bones"]
    # control: a cut-off file is not a scene
    broken = tmp_path / "broken.glb"
    broken.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(Exception):
        trimesh.load(broken, process=False)


def test_animated_skeleton_moves_its_joints_over_time(tmp_path):
    trimesh = pytest.importorskip("trimesh")
    times = np.arange(5) / 10
    positions = np.zeros((5, 3, 3), np.float32)
    positions[:, 0] = [0.0, 0.0, 2.0]
    positions[:, 1, 0] = np.linspace(0.1, 0.5, 5)
    positions[:, 1, 2] = 2.0
    positions[:, 2] = np.nan  # never known: left out with its link
    positions[2, 1] = np.nan  # unknown once: held at its last position
    summary = write_skeleton_animation(tmp_path / "clip.glb", times, positions, links=[(0, 1), (1, 2)])
    assert summary == {"joints": 2, "bones": 1, "frames": 5}
    gltf = _glb_json(tmp_path / "clip.glb")
    (animation,) = gltf["animations"]
    assert len(animation["channels"]) == 2 and {c["target"]["path"] for c in animation["channels"]} == {"translation"}
    assert gltf["skins"][0]["joints"] == [0, 1]
    trimesh.load(tmp_path / "clip.glb", process=False)  # a valid glTF for trimesh too


def test_record_states_units_frame_and_uses_null_for_missing_points(samples):
    sample = samples[0]
    result = ground_truth_result(sample)
    record = json.loads(json.dumps(pose3d_record(result, "x.png", sample["image"].shape, skeleton=[(0, 1)]),
                                   allow_nan=False))
    assert record["units"] == "metres" and record["frame"].startswith("camera: X right, Y down, Z forward")
    person = record["people"][0]
    assert len(person["keypoints_3d"]) == 308 and None in person["keypoints_3d"]
    assert set(person["status"]) <= {"valid", "low_score", "outside_image", "outside_mask", "depth_discontinuity"}
    assert person["num_valid"] == sum(person["valid"])


# ----------------------------------------------------------------------------------------------------------------
# the pipeline and the command
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("pose3d_models")
    return {task: save_tiny_model(task, root / task) for task in ("pose", "pointmap", "seg")}


def test_pipeline_lifts_its_own_pose_with_its_own_pointmap(tiny):
    from transformers import pipeline

    pointmap = sapiens2_hf.pipeline("sapiens2-pointmap", model=tiny["pointmap"])
    pipe = pipeline("sapiens2-pose-3d", model=str(tiny["pose"]), pointmap_model=pointmap)
    box = [[40.0, 20.0, 400.0, 500.0]]
    result = pipe(str(PHOTO), boxes=box, focal_length=900.0, window_radius=3)
    assert result["units"] == "metres" and result["focal_length"] == 900.0
    (person,) = result["people"]
    assert person["keypoints_3d"].shape == (308, 3) and person["keypoint_3d_valid"].dtype == bool
    # the fields are lift_keypoints on the pipeline's own 2D pose and pointmap (the same image, the same camera)
    alone = sapiens2_hf.pipeline("sapiens2-pose", model=tiny["pose"])(str(PHOTO), boxes=box)[0]
    np.testing.assert_array_equal(alone["keypoints"], person["keypoints"])
    expected = lift_keypoints(person["keypoints"], person["scores"], pointmap(str(PHOTO), focal_length=900.0)["pointmap"],
                              None, window_radius=3, joint_depths=joint_depths_for(person["labels"]))
    np.testing.assert_array_equal(expected.keypoints_3d, person["keypoints_3d"])
    assert expected.status == person["keypoint_3d_status"]
    # two images, one without people; names and files through sapiens2_hf.pipeline, with a segmenter
    pipe = sapiens2_hf.pipeline("sapiens2-pose-3d", model=tiny["pose"], pointmap_model=tiny["pointmap"],
                                segmenter=tiny["seg"])
    results = pipe([str(PHOTO), str(PHOTO)], boxes=[box, []])
    assert len(results) == 2 and len(results[1]["people"]) == 0 and results[0]["mask"].shape == (512, 512)
    with pytest.raises(ValueError, match="pointmap_model="):
        sapiens2_hf.pipeline("sapiens2-pose-3d", model=tiny["pose"])


def _synthetic_video(path: Path, frames: int = 4) -> None:
    from sapiens2_hf.video import write_video

    write_video(path, [render_sample(seed, height=128, width=96, num_people=1)["image"] for seed in range(frames)],
                fps=10)


def test_command_writes_json_glb_and_video_tracks(tiny, tmp_path, capsys):
    trimesh = pytest.importorskip("trimesh")
    pytest.importorskip("av")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "photo.png").write_bytes(PHOTO.read_bytes())
    _synthetic_video(inputs / "clip.mp4")
    out = tmp_path / "out"
    code = main(["pose3d", str(inputs), "--model", str(tiny["pose"]), "--pointmap-model", str(tiny["pointmap"]),
                 "--whole-image", "--out", str(out), "--threads", "1", "--quiet"])
    assert code == 0, capsys.readouterr().err
    record = json.loads((out / "photo_3d.json").read_text())
    assert record["units"] == "metres" and record["image"]["width"] == 512 and len(record["people"]) == 1
    assert record["people"][0]["bbox_xyxy"] == [0.0, 0.0, 512.0, 512.0]
    trimesh.load(out / "photo.glb", process=False)
    with np.load(out / "clip_3d.npz") as tracks:
        assert tracks["keypoints_3d"].shape == (4, len(tracks["track_ids"]), 308, 3)
        assert str(tracks["units"]) == "metres" and tracks["time_s"].shape == (4,)
    assert "animations" in _glb_json(out / "clip_3d.glb") or len(_glb_json(out / "clip_3d.glb")["nodes"]) >= 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processed"] == 2 and summary["frames"] == 4 and not summary["skipped"]


def test_command_refuses_a_missing_pointmap_model_before_torch(tmp_path):
    import subprocess
    import sys

    code = ("import sys, sapiens2_hf_cli; from sapiens2_hf.cli.main import main; rc = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code, "pose3d", str(PHOTO), "--model", str(tmp_path),
                             "--pointmap-model", "./no_such_model", "--out", str(tmp_path / "o")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "--pointmap-model" in result.stderr and "no such file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------------------------------------
# the web app's 3D tab
# ----------------------------------------------------------------------------------------------------------------


def test_app_3d_tab_through_the_client(tmp_path, free_port_factory):
    pytest.importorskip("gradio")
    from app_client import TimedClient
    from gradio_client import handle_file

    from sapiens2_hf import _registration
    from sapiens2_hf.app import AppRunner, launch

    _registration.register()
    app = launch(runner=AppRunner(tmp_path / "app", device="cpu"), port=free_port_factory(), block=False)
    try:
        scene, files, summary = TimedClient(app.local_url, verbose=False).predict(
            "demo", "demo", handle_file(PHOTO), "25 10 380 508", api_name="/pose3d_image")
        assert Path(scene).suffix == ".glb" and summary.startswith("3D: 1 person(s)")
        assert sorted(Path(f).name for f in files) == ["astronaut.glb", "astronaut_3d.json"]
    finally:
        app.close()


class _TruthPipeline:
    """Stands in for the 3D pipeline in the browser test: the lift of a synthetic human's true pose and pointmap,
    so the viewer has a body to show (the demo models' random pointmaps have none)."""

    model = types.SimpleNamespace(config=types.SimpleNamespace(skeleton=None))

    def __init__(self, sample):
        self.sample = sample

    def __call__(self, image, boxes=None):
        return ground_truth_result(self.sample)


def test_app_3d_tab_renders_in_headless_chromium(samples, tmp_path, free_port_factory, request):
    pytest.importorskip("gradio")
    from PIL import Image

    from sapiens2_hf import _registration
    from sapiens2_hf.app import AppRunner, launch

    browser = _webgl_browser("/usr/bin/chromium", "/usr/bin/chromedriver")  # Debian's (scripts/setup.sh test)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    sample = samples[1]

    class TruthRunner(AppRunner):
        def pose3d_pipeline(self, pose_model, pointmap_model):
            return _TruthPipeline(sample)

    image_path = tmp_path / "person.png"
    Image.fromarray(sample["image"]).save(image_path)
    _registration.register()
    app = launch(runner=TruthRunner(tmp_path / "app", device="cpu"), port=free_port_factory(), block=False)
    try:
        browser.get(app.local_url)
        wait = WebDriverWait(browser, 60)
        wait.until(lambda d: d.find_elements(By.XPATH, "//button[@role='tab' and normalize-space()='3D']"))
        browser.find_element(By.XPATH, "//button[@role='tab' and normalize-space()='3D']").click()
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#pose3d-image-input input[type=file]")).send_keys(
            str(image_path))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#pose3d-image-input img"))
        browser.find_element(By.ID, "pose3d-run").click()
        wait.until(lambda d: "valid 3D keypoint" in d.find_element(By.ID, "pose3d-info").text)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#pose3d-output canvas"))
        # the viewer draws the body: its canvas holds many colours, not the empty viewer's background
        artefacts = Path(request.config.rootpath) / "test-artifacts"
        artefacts.mkdir(exist_ok=True)
        shot = artefacts / "app_3d_tab.png"

        def drawn(driver) -> bool:
            driver.find_element(By.ID, "pose3d-output").screenshot(str(shot))
            pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
            return len(np.unique(pixels, axis=0)) > 500

        wait.until(drawn)
        loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
        assert all(url.startswith((app.local_url, "data:", "blob:")) for url in loaded), loaded
    finally:
        browser.quit()
        app.close()


def _webgl_browser(chromium: str, chromedriver: str):
    """Headless Chromium with software WebGL (SwiftShader), which Gradio's Model3D viewer needs."""
    import os

    missing = [path for path in (chromium, chromedriver) if not os.access(path, os.X_OK)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} not found (scripts/setup.sh test installs them as root)")
        pytest.skip(f"{', '.join(missing)} not found")
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1800",
                     "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--ignore-gpu-blocklist"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=chromedriver))
    driver.set_page_load_timeout(60)
    return driver
