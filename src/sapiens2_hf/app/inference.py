"""What the web app computes (layer 3), without Gradio: one task's pipeline on an uploaded image or video, from typed
options (`predict_options`) on the driver the command line runs on too (`predict/`), so the app's downloads are byte
for byte what `sapiens2-hf <task>` writes for the same input and options.

A model is named as on the command line (a converted folder, a Hub id, an official `sapiens2_<size>_<task>.safetensors`
file) or as `demo`: a tiny Sapiens2 with random weights (`tiny_config(task)`, seeded), built offline on first use, so
the app runs with no weights and no network. Its outputs have the real shapes and formats and random values.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from ..modeling.sapiens2_tasks import TASK_SPECS, installed_task_names
from ..pose3d.outputs import skeleton_links, write_pose3d_outputs
from ..predict.options import check_local_source, predict_options
from ..predict.outputs import overlay_suffix, pose_annotations, predict_images, write_outputs
from ..predict.run import build_pipeline
from ..predict.video import process_video
from ..runs.decode import decode_image
from ..runs.records import RunReport
from ..video import VideoReader

DEMO_MODEL = "demo"
DEMO_SEED = 0


def task_names() -> tuple[str, ...]:
    """The registered tasks, in the registry's order, with those of installed packages (entry points, registered on
    first call; read without importing torch when there are none)."""
    if installed_task_names():
        from ..tasks import load_installed_tasks  # their model code needs torch

        load_installed_tasks()
    return tuple(TASK_SPECS)


def parse_boxes(text: str | None) -> list[list[float]] | None:
    """Person boxes typed as text: one box per line (or `;`-separated), `x_min y_min x_max y_max` in image pixels,
    numbers separated by spaces or commas; brackets are ignored, so `[[10, 20, 200, 400]]` works too.

    Returns:
        The boxes (xyxy, as `--boxes` and the pose pipeline take them), or None for blank text.

    Raises:
        `ValueError`: a box without four numbers, a non-finite number, or x_max <= x_min / y_max <= y_min.
    """
    if text is None or not text.strip():
        return None
    cleaned = text.replace("[", " ").replace("]", ";").replace("\n", ";")
    boxes = []
    for chunk in cleaned.split(";"):
        parts = chunk.replace(",", " ").split()
        if not parts:
            continue
        try:
            numbers = [float(part) for part in parts]
        except ValueError:
            raise ValueError(f"boxes: {chunk.strip()!r} is not four numbers x_min y_min x_max y_max.") from None
        if len(numbers) != 4 or not all(math.isfinite(v) for v in numbers):
            raise ValueError(f"boxes: {chunk.strip()!r} is not four finite numbers x_min y_min x_max y_max.")
        x0, y0, x1, y1 = numbers
        if x1 <= x0 or y1 <= y0:
            raise ValueError(f"boxes: {chunk.strip()!r} is not x_min y_min x_max y_max (x_max > x_min, y_max > y_min).")
        boxes.append(numbers)
    return boxes or None


@dataclass
class Result:
    """One run's files (all under the run's own folder)."""

    overlay: Path | None  # the picture (an image; for a video the annotated .mp4)
    files: list[Path] = field(default_factory=list)  # the raw outputs to download (JSON, .npy, .ply; a .zip for video)
    summary: str = ""  # one line for the page


class AppRunner:
    """Runs the tasks for the app: a task's pipeline is built on its first run and kept until the task is run with
    another model (one model per task in memory); each run writes into a new folder under `work_dir`.

    Args:
        work_dir (`str` or `Path`, *optional*): where runs and the demo models are written (default: a new temporary
            folder).
        device (`str`, defaults to `"auto"`): as `--device` (`auto`: CUDA when available).
        dtype (`str`, defaults to `"float32"`): as `--dtype`.
    """

    def __init__(self, work_dir: str | Path | None = None, device: str = "auto", dtype: str = "float32"):
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="sapiens2-hf-app-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.device, self.dtype = device, dtype
        self._pipelines: dict[str, tuple[str, Any]] = {}  # task -> (model source, its pipeline)
        self._lock = threading.Lock()  # Gradio runs events on worker threads; one model load at a time

    # -- models ----------------------------------------------------------------------------------------------------

    def demo_model(self, task: str) -> Path:
        """The folder of the tiny random-weight model of `task` (built and saved on first use; seeded, so every
        process builds the same weights)."""
        from ..hub.tiny_models import save_tiny_model

        folder = self.work_dir / "demo_models" / task
        if not (folder / "config.json").is_file():
            save_tiny_model(task, folder, seed=DEMO_SEED, overwrite=True)
        return folder

    def _source(self, task: str, model: str | None) -> str:
        model = (model or "").strip() or DEMO_MODEL
        return str(self.demo_model(task)) if model == DEMO_MODEL else model

    def _options(self, task: str, model: str, out: Path, **changes):
        """The options of `sapiens2-hf <task>` at its defaults (so the app writes what the command writes), for one
        input written into `out`; the pointmap tab also writes the point cloud."""
        if TASK_SPECS[task].metric_3d:  # a metric 3D result: its point cloud too
            changes.setdefault("ply", True)
        return predict_options(task, model, out, quiet=True, device=self.device, dtype=self.dtype, **changes)

    def pipeline(self, task: str, model: str | None):
        """The pipeline for `task` with `model` (`demo`, a folder, Hub id or official file), built on first use."""
        from .._registration import register  # the model code (torch)

        register()  # idempotent; the model classes and pipelines as the command line has them

        if task not in task_names():
            raise ValueError(f"unknown task {task!r}; one of {', '.join(task_names())}.")
        with self._lock:
            source = self._source(task, model)
            kept = self._pipelines.get(task)
            if kept is None or kept[0] != source:
                check_local_source("model", source)
                self._pipelines.pop(task, None)  # one model per task in memory: the new one replaces it
                self._pipelines[task] = (source, build_pipeline(self._options(task, source, self.work_dir)))
            return self._pipelines[task][1]

    def _run_folder(self) -> Path:
        folder = self.work_dir / "runs" / uuid.uuid4().hex[:12]
        folder.mkdir(parents=True)
        return folder

    # -- images ----------------------------------------------------------------------------------------------------

    def run_image(self, task: str, image: np.ndarray | str | Path, model: str | None = None,
                  boxes: str | None = None, name: str | None = None, keypoint_threshold: float = 0.3) -> Result:
        """Runs `task` on one image and writes its outputs as `sapiens2-hf <task> --ply` does.

        Args:
            task (`str`): `pose`, `seg`, `normal`, `pointmap`, `albedo` or `matting`.
            image (`np.ndarray` of shape `(height, width, 3)`, uint8 RGB, or a file path): the input (a file is read
                as the command line reads it: EXIF orientation applied).
            model (`str`, *optional*): `demo` (default), a folder, Hub id or official .safetensors file.
            boxes (`str`, *optional*): pose only; person boxes as text (`parse_boxes`). Blank: the whole image is one
                person's box (the app runs offline; there is no detector).
            name (`str`, *optional*): the output files' base name (`<name>.json`, `<name>_seg.npy`, ...; default: the
                file's stem, else `image`).
            keypoint_threshold (`float`): pose only; the score below which keypoints are not drawn.
        """
        image, name, source = _uploaded_image(image, name)
        pipe = self.pipeline(task, model)
        out = self._run_folder()
        options = self._options(task, "app", out, **_keypoint_options(task, keypoint_threshold))
        options = options.with_model_labels(pipe.model.config)
        people_boxes = None
        if TASK_SPECS[task].top_down:
            height, width = image.shape[:2]
            people_boxes = [parse_boxes(boxes) or [[0.0, 0.0, float(width), float(height)]]]
        (result,) = predict_images(options, pipe, [image], people_boxes)
        pose_json = None
        if TASK_SPECS[task].top_down:  # the JSON's `file_name`: the upload's file name (the command writes the path given)
            pose_json = pose_annotations(source or name, image.shape, result, keypoint_threshold,
                                         skeleton=options.output.skeleton)
        written, _ = write_outputs(options, out / name, image, result, pose_json=pose_json)
        # the task's picture, as `write_outputs` names it (the overlay; albedo's own image)
        suffix = overlay_suffix(task)
        overlay = next(path for path in written if path.name == f"{name}{suffix}")
        files = [path for path in written if path.suffix in (".json", ".npy", ".ply")]
        return Result(overlay, files, _summary(task, image, result))

    # -- 3D --------------------------------------------------------------------------------------------------------

    def pose3d_pipeline(self, pose_model: str | None, pointmap_model: str | None):
        """The `sapiens2-pose-3d` pipeline of a pose and a pointmap model (each `demo`, a folder, Hub id or official
        file), built on first use and kept while both stay the same."""
        from .._registration import register
        from ..pipeline_factory import pipeline

        register()
        with self._lock:
            sources = (self._source("pose", pose_model), self._source("pointmap", pointmap_model))
            kept = self._pipelines.get("pose3d")
            if kept is None or kept[0] != sources:
                for source in sources:
                    check_local_source("model", source)
                self._pipelines.pop("pose3d", None)
                device = {} if self.device == "auto" else {"device": self.device}
                self._pipelines["pose3d"] = (sources, pipeline("sapiens2-pose-3d", model=sources[0],
                                                               pointmap_model=sources[1], dtype=self.dtype, **device))
            return self._pipelines["pose3d"][1]

    def run_pose3d(self, image: np.ndarray | str | Path, pose_model: str | None = None,
                   pointmap_model: str | None = None, boxes: str | None = None, name: str | None = None) -> Result:
        """Runs `sapiens2-pose-3d` on one image and writes what `sapiens2-hf pose3d` writes (`<name>_3d.json`,
        `<name>.glb`). `Result.overlay` is the .glb (the 3D viewer's file); blank `boxes`: the whole image is one
        person."""
        image, name, source = _uploaded_image(image, name)
        pipe = self.pose3d_pipeline(pose_model, pointmap_model)
        height, width = image.shape[:2]
        result = pipe(image, boxes=parse_boxes(boxes) or [[0.0, 0.0, float(width), float(height)]])
        out = self._run_folder()
        count = len(result["people"][0]["labels"]) if result["people"] else 0
        json_path, glb_path = write_pose3d_outputs(out, name, result, image, source=source or name,
                                                   skeleton=skeleton_links(getattr(pipe.model.config, "skeleton", None), count))
        valid = sum(int(np.sum(person["keypoint_3d_valid"])) for person in result["people"])
        return Result(glb_path, [json_path, glb_path],
                      f"3D: {len(result['people'])} person(s), {valid} valid 3D keypoint(s), metres, camera frame")

    # -- videos ----------------------------------------------------------------------------------------------------

    def run_video(self, task: str, video: str | Path, model: str | None = None, boxes: str | None = None,
                  max_frames: int | None = 32, stride: int = 1, keypoint_threshold: float = 0.3) -> Result:
        """Runs `task` on a video as `sapiens2-hf <task> VIDEO` does: the annotated video, and the per-frame outputs
        in one .zip. For pose, `boxes` seed the people on the first frame (blank: the whole frame) and the tracker
        follows them.

        Raises:
            `ValueError`: when a frame failed (the reasons), or the video has no frames.
        """
        path = Path(video)
        pipe = self.pipeline(task, model)
        out = self._run_folder()
        name = path.stem or "video"
        options = self._options(task, "app", out, max_frames=max_frames, video_stride=stride,
                                **_keypoint_options(task, keypoint_threshold)).with_model_labels(pipe.model.config)
        listed: dict[str, list] = {}
        if TASK_SPECS[task].top_down:
            first = parse_boxes(boxes) or _whole_first_frame(path)
            listed = {f"{path}#0": first}
        report = RunReport()
        process_video(options, pipe, path, name, out, listed, report, tqdm(disable=True), None)
        if report.skipped:
            reasons = "; ".join(f"{entry['input']}: {entry['reason']}" for entry in report.skipped[:3])
            raise ValueError(f"{len(report.skipped)} frame(s) failed: {reasons}")
        if report.frames == 0:
            raise ValueError(f"{path.name}: no frames decoded.")
        archive = Path(shutil.make_archive(str(out / f"{name}_outputs"), "zip", out / name))
        return Result(out / f"{name}.mp4", [archive], f"{task}: {report.frames} frame(s) of {path.name}")


def _uploaded_image(image: Any, name: str | None) -> tuple[np.ndarray, str, str | None]:
    """An upload or a file as `(H, W, 3)` uint8 RGB, with its output name (the file's stem, else `image`) and its
    file name (None for an array); a file is read as the command line reads it (EXIF orientation applied)."""
    source = None
    if isinstance(image, (str, Path)):
        name, source = name or Path(image).stem, Path(image).name
        image = decode_image(image)  # the run layer's decoder: the command line's limits and EXIF rule
    return np.ascontiguousarray(_rgb_uint8(image)), name or "image", source


def _keypoint_options(task: str, threshold: float) -> dict[str, float]:
    """The keypoint threshold option of a top-down (keypoint) task's command; nothing for the others."""
    return {"kpt_threshold": threshold} if TASK_SPECS[task].top_down else {}


def _whole_first_frame(path: Path) -> list[list[float]]:
    with VideoReader(path) as reader:
        for frame in reader:
            height, width = frame.image.shape[:2]
            return [[0.0, 0.0, float(width), float(height)]]
    raise ValueError(f"{path.name}: no frames decoded.")


def _rgb_uint8(image: Any) -> np.ndarray:
    """An upload as `(height, width, 3)` uint8 RGB (Gradio gives RGB, RGBA or grey numpy arrays, or PIL images)."""
    if image is None:
        raise ValueError("no image: upload one first.")
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=-1)
    if array.ndim != 3 or array.shape[-1] not in (3, 4):
        raise ValueError(f"expected an RGB image, got an array of shape {array.shape}.")
    if array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    return array[..., :3]


def _summary(task: str, image: np.ndarray, result: Any) -> str:
    height, width = image.shape[:2]
    if TASK_SPECS[task].top_down:
        keypoints = len(result[0]["keypoints"]) if result else 0
        return f"{task}: {len(result)} person(s), {keypoints} keypoints each, on a {width}x{height} image"
    return f"{task}: {width}x{height} image"
