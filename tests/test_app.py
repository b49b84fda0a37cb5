"""The web app (`sapiens2-hf app`) served in this process on 127.0.0.1, driven as its users drive it: through
`gradio_client` (every task's image endpoint, the video endpoints, a bad input) and in headless Chromium (upload the
bundled photo, run pose and seg, see the result image; a broken handler shows its message). Also the Space folder
(`sapiens2-hf space`) and the command's start-up.

Every model is the app's `demo` model (tiny random weights, built offline), so the numbers are random; the tests pin
formats and shapes, and that the app's files are byte for byte those `sapiens2-hf <task>` writes for the same model,
image and boxes.
"""

import json
import os
import zipfile
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

try:  # the `app` extra, installed with .[test] (scripts/setup.sh): CI must run these tests, never skip them
    import gradio
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("the web app needs the app extra: pip install -e '.[app]'", allow_module_level=True)
from gradio_client import handle_file  # noqa: E402 (after the extra's check)

from app_client import TimedClient  # noqa: E402

from sapiens2_hf import _registration  # noqa: E402
from sapiens2_hf.app import AppRunner, launch  # noqa: E402
from sapiens2_hf.cli.main import main  # noqa: E402
from sapiens2_hf.visualization import read_ply_header  # noqa: E402

pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("one_thread")]

PHOTO = Path(str(resources.files("sapiens2_hf").joinpath("assets", "demo", "astronaut.png")))
BOX = "25 10 380 508"  # the photo's person (sapiens2_hf.demo.PHOTO_BOX_XYXY, rounded)
TASKS = ("pose", "seg", "normal", "pointmap", "albedo", "matting")
# the raw outputs of each task: file name -> the array shape for the 512x512 photo (None: not an array)
RAW = {
    "pose": {"astronaut.json": None},
    "seg": {"astronaut_seg.npy": (512, 512)},
    "normal": {"astronaut_normal.npy": (512, 512, 3)},
    "pointmap": {"astronaut_pointmap.npy": (512, 512, 3), "astronaut_depth.npy": (512, 512), "astronaut.ply": None},
    "albedo": {"astronaut_albedo.npy": (512, 512, 3)},
    "matting": {"astronaut_alpha.npy": (512, 512)},
}
LEGEND_TASKS = {"seg", "pointmap"}  # their overlays add a legend / colour bar to the right of the image


class BrokenRunner(AppRunner):
    """A deliberately broken app: every image run fails with a known message."""

    def run_image(self, *args, **kwargs):
        raise ValueError("deliberately broken handler: the page must show this message")


def _serve(runner, free_port_factory):
    _registration.register()
    return launch(runner=runner, port=free_port_factory(), block=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory, free_port_factory):
    runner = AppRunner(tmp_path_factory.mktemp("app"), device="cpu")
    app = _serve(runner, free_port_factory)
    yield app, runner, TimedClient(app.local_url, verbose=False)
    app.close()


@pytest.fixture(scope="module")
def broken(tmp_path_factory, free_port_factory):
    app = _serve(BrokenRunner(tmp_path_factory.mktemp("broken"), device="cpu"), free_port_factory)
    yield app
    app.close()


def _cli_outputs(task: str, model: Path, out: Path) -> Path:
    argv = [task, str(PHOTO), "--model", str(model), "--out", str(out), "--quiet", "--threads", "1", "--device", "cpu"]
    if task == "pose":
        (out.parent / "boxes.json").write_text(json.dumps({PHOTO.name: [[float(v) for v in BOX.split()]]}))
        argv += ["--boxes", str(out.parent / "boxes.json")]
    if task == "pointmap":
        argv.append("--ply")
    assert main(argv) == 0
    return out


def test_every_task_through_the_client_writes_what_the_command_writes(served, tmp_path):
    app, runner, client = served
    for task in TASKS:
        overlay, files, summary = client.predict("demo", handle_file(PHOTO), *([BOX] if task == "pose" else []),
                                                 api_name=f"/{task}_image")
        picture = Image.open(overlay)
        if task in LEGEND_TASKS:
            assert picture.height == 512 and picture.width > 512, (task, picture.size)
        else:
            assert picture.size == (512, 512), (task, picture.size)
        got = {Path(path).name: Path(path) for path in files}
        assert set(got) == set(RAW[task]), (task, sorted(got))
        for name, shape in RAW[task].items():
            if shape is not None:
                array = np.load(got[name])
                assert array.shape == shape and np.isfinite(array).all(), (name, array.shape)
        # the same bytes as `sapiens2-hf <task>` with the same model (the app reuses the command's writers)
        cli = _cli_outputs(task, runner.demo_model(task), tmp_path / task)
        for name in RAW[task]:
            if name.endswith(".json"):  # the same but for `file_name`: the command writes the path it was given
                app_json, cli_json = json.loads(got[name].read_text()), json.loads((cli / name).read_text())
                assert app_json["images"][0].pop("file_name") == PHOTO.name
                assert cli_json["images"][0].pop("file_name") == str(PHOTO)
                assert app_json == cli_json
            else:
                assert got[name].read_bytes() == (cli / name).read_bytes(), (task, name)
        assert Image.open(cli / Path(overlay).name).size == picture.size
        assert summary.startswith(f"{task}:")
        if task == "pointmap":  # every pixel of the 512x512 pointmap (all finite), coloured
            assert "element vertex 262144" in read_ply_header(got["astronaut.ply"])
    pose = json.loads(Path(client.predict("demo", handle_file(PHOTO), BOX, api_name="/pose_image")[1][0]).read_text())
    (person,) = pose["annotations"]
    assert len(person["keypoints"]) == 308 * 3 and len(pose["categories"][0]["keypoints"]) == 308
    assert person["bbox"] == [25.0, 10.0, 355.0, 498.0]  # COCO xywh of the typed xyxy box


def test_pose_without_boxes_takes_the_whole_image(served):
    _, _, client = served
    _, (pose_json,), summary = client.predict("demo", handle_file(PHOTO), "", api_name="/pose_image")
    (person,) = json.loads(Path(pose_json).read_text())["annotations"]
    assert person["bbox"] == [0.0, 0.0, 512.0, 512.0] and "1 person(s), 308 keypoints" in summary


def test_bad_input_reaches_the_client_as_its_message(served):
    _, _, client = served
    with pytest.raises(Exception, match=r"boxes: '1 2 3' is not four finite numbers"):
        client.predict("demo", handle_file(PHOTO), "1 2 3", api_name="/pose_image")
    with pytest.raises(Exception, match=r"no such file or folder"):
        client.predict("./no/such/model", handle_file(PHOTO), api_name="/seg_image")


def test_video_gives_the_annotated_video_and_the_frames(served, tmp_path):
    from sapiens2_hf.video import VideoReader, write_video

    _, _, client = served
    photo = np.asarray(Image.open(PHOTO).convert("RGB").resize((96, 96)))
    clip = write_video(tmp_path / "clip.mp4", [np.roll(photo, 4 * k, axis=1) for k in range(5)], fps=10)
    for task, arrays in (("seg", "frame_000000_seg.npy"), ("pose", "frame_000000.json")):
        video, archive, summary = client.predict("demo", handle_file(clip), 3,
                                                 *(["10 5 90 95"] if task == "pose" else []),
                                                 api_name=f"/{task}_video")
        assert summary == f"{task}: 3 frame(s) of clip.mp4"
        with VideoReader(video["video"] if isinstance(video, dict) else video) as reader:
            frames = [frame.image for frame in reader]
        assert len(frames) == 3 and frames[0].shape[:2] == (96, 96)
        names = zipfile.ZipFile(archive).namelist()
        assert arrays in names and len([n for n in names if n.startswith("frame_")]) == 3, names
    first = json.loads(zipfile.ZipFile(archive).read("frame_000000.json"))
    assert first["annotations"][0]["bbox"] == [10.0, 5.0, 80.0, 90.0] and first["annotations"][0]["track_id"] == 1
    _, archive, _ = client.predict("demo", handle_file(clip), 1, "", api_name="/pose_video")  # blank: the whole frame
    first = json.loads(zipfile.ZipFile(archive).read("frame_000000.json"))
    assert first["annotations"][0]["bbox"] == [0.0, 0.0, 96.0, 96.0]


# ----------------------------------------------------------------------------------------------------------------
# in a real browser
# ----------------------------------------------------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        message = (f"{', '.join(missing)} not found: the browser tests need Debian's chromium and chromium-driver "
                   "(scripts/setup.sh installs them as root: apt-get install chromium chromium-driver)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        from selenium import webdriver
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("the browser tests need selenium (pip install -e '.[test]')")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1800",
                     "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _open_tab(driver, title: str):
    from selenium.webdriver.common.by import By

    driver.find_element(By.XPATH, f"//button[@role='tab' and normalize-space()='{title}']").click()


def _upload_and_run(driver, task: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 30)
    upload = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f"#{task}-image-input input[type=file]"))
    upload.send_keys(str(PHOTO))
    # the upload is shown before Run is pressed (else the event would see no image)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"#{task}-image-input img"))
    driver.find_element(By.ID, f"{task}-image-run").click()
    return wait


def _result_size(driver, task: str):
    """(naturalWidth, naturalHeight) of the task's result image once it has loaded, else None."""
    return driver.execute_script(
        "const img = document.querySelector(arguments[0]);"
        "return img && img.complete && img.naturalWidth ? [img.naturalWidth, img.naturalHeight] : null;",
        f"#{task}-image-output img")


def test_browser_runs_pose_and_seg_on_the_uploaded_photo(served, browser):
    from selenium.webdriver.common.by import By

    app, _, _ = served
    browser.get(app.local_url)
    wait = _upload_and_run(browser, "pose")
    assert wait.until(lambda d: _result_size(d, "pose")) == [512, 512]
    assert "308 keypoints" in browser.find_element(By.ID, "pose-image-info").text
    _open_tab(browser, "Body-part segmentation")
    wait = _upload_and_run(browser, "seg")
    width, height = wait.until(lambda d: _result_size(d, "seg"))
    assert height == 512 and width > 512  # the overlay with its legend
    links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "#seg-image-files a")]
    assert any(link.endswith("astronaut_seg.npy") for link in links), links
    # offline: everything the page loaded came from the app itself (no fonts, scripts or analytics from elsewhere)
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert loaded and all(url.startswith((app.local_url, "data:", "blob:")) for url in loaded), loaded


def test_browser_shows_the_error_of_a_broken_handler(broken, browser):
    from selenium.webdriver.common.by import By

    browser.get(broken.local_url)
    wait = _upload_and_run(browser, "pose")
    wait.until(lambda d: "deliberately broken handler" in d.find_element(By.TAG_NAME, "body").text)
    assert _result_size(browser, "pose") is None  # no result image, and the message says why


# ----------------------------------------------------------------------------------------------------------------
# the Space folder and the command
# ----------------------------------------------------------------------------------------------------------------


def test_space_folder_is_a_gradio_space(tmp_path, capsys):
    out = tmp_path / "space"
    assert main(["space", str(out), "--model", "pose=facebook/sapiens2-pose-0.4b"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "app.py", "requirements.txt"]
    readme = (out / "README.md").read_text()
    front = readme.split("---\n")[1]
    fields = dict(line.split(": ", 1) for line in front.splitlines() if ": " in line)
    assert fields["sdk"] == "gradio" and fields["app_file"] == "app.py" and fields["sdk_version"] == gradio.__version__
    assert (out / "requirements.txt").read_text().startswith("sapiens2_hf[app]")
    compile((out / "app.py").read_text(), "app.py", "exec")
    assert '"pose": "facebook/sapiens2-pose-0.4b"' in (out / "app.py").read_text()
    assert '"seg": "demo"' in (out / "app.py").read_text()
    # existing files are not replaced without --overwrite; local models are refused (a Space cannot read them)
    assert main(["space", str(out)]) == 2
    assert main(["space", str(tmp_path / "other"), "--model", f"seg={out}"]) == 2
    assert main(["space", str(tmp_path / "other"), "--model", "depth=x/y"]) == 2
    errors = capsys.readouterr().err
    assert "pass --overwrite" in errors and "a Space cannot read files" in errors and "unknown task 'depth'" in errors
    assert main(["space", str(out), "--overwrite", "--requirement", "sapiens2_hf[app] @ git+https://x/y"]) == 0
    assert (out / "requirements.txt").read_text() == "sapiens2_hf[app] @ git+https://x/y\n"


def test_app_command_options(capsys):
    from sapiens2_hf.cli.main import build_parser

    args = build_parser().parse_args(["app"])
    assert (args.host, args.port, args.share, args.model) == ("127.0.0.1", None, False, None)
    args = build_parser().parse_args(["app", "--port", "8000", "--model", "seg=some/model", "--share"])
    assert (args.port, args.model, args.share) == (8000, [("seg", "some/model")], True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["app", "--model", "seg"])
    assert "is not TASK=SOURCE" in capsys.readouterr().err


def test_app_without_gradio_says_which_extra(monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "gradio", None)  # None in sys.modules: the import fails as for a missing package
    assert main(["app", "--threads", "1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "sapiens2-hf app: error: the web app needs gradio: pip install 'sapiens2_hf[app]'"]


def test_boxes_typed_as_text():
    from sapiens2_hf.app.inference import parse_boxes

    assert parse_boxes("  \n") is None
    assert parse_boxes("[[10, 20, 200, 400]]") == [[10.0, 20.0, 200.0, 400.0]]
    assert parse_boxes("1,2,3,4; 5 6 7.5 8\n") == [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.5, 8.0]]
    for bad, message in (("1 2 3", "four finite numbers"), ("1 2 a 4", "is not four numbers"),
                         ("5 5 1 9", "x_max > x_min"), ("0 0 nan 4", "four finite numbers")):
        with pytest.raises(ValueError, match=message):
            parse_boxes(bad)
