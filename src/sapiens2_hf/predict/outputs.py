"""What the predict commands write for one image or video frame, and the pipeline call that produces it: shared by
the image loop (predict/run.py), the video loop (predict/video.py) and the web app. The file layout is described in
predict/run.py's docstring and docs/cli.md.
"""

from __future__ import annotations

import contextlib
import errno
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from PIL import Image

from ..modeling.sapiens2_tasks import TASK_SPECS
from ..utils.atomic_io import atomic_write_text
from ..visualization import (
    SKELETON_LINKS,
    albedo_to_image,
    class_palette,
    depth_to_image,
    draw_keypoints,
    map_to_rgb,
    normals_to_rgb,
    overlay_segmentation,
    save_image,
    save_npy,
    save_ply,
)
from .options import PredictOptions


class OutputWriteError(OSError):
    """Writing into --out failed (a full disk, a read-only or removed folder). The run stops there: every later input
    would be computed only to fail the same way. Raised by `writing_outputs`."""


# write failures that concern one input's file names rather than the folder: that input is skipped, the run goes on
_PER_NAME_ERRNOS = frozenset({errno.ENAMETOOLONG})


@contextlib.contextmanager
def writing_outputs() -> Iterator[None]:
    """Turns an OSError raised in the block, which writes outputs, into an `OutputWriteError`."""
    try:
        yield
    except OutputWriteError:
        raise
    except OSError as error:
        if error.errno in _PER_NAME_ERRNOS:
            raise
        raise OutputWriteError(error.errno, error.strerror or str(error), error.filename) from error


def _format_skeleton(keypoint_format: str) -> list[list[int]]:
    """The 308 skeleton's links between keypoints that `keypoint_format` copies (1-based, COCO style): each link
    joins the same two landmarks in both layouts; a 308 point copied twice (COCO-WholeBody's wrist and hand root)
    is linked at its first copy. Points made as means (BODY_25's Neck, MidHip) have no link."""
    from ..data.keypoint_formats import describe_sources

    first_copy: dict[int, int] = {}
    for row in describe_sources(keypoint_format):
        if row["kind"] == "copy":
            first_copy.setdefault(row["source_indices"][0], row["index"])
    return [[first_copy[a] + 1, first_copy[b] + 1] for a, b in SKELETON_LINKS if a in first_copy and b in first_copy]


def pose_annotations(source: str, image_shape: tuple[int, ...], people: list[dict], threshold: float,
               keypoint_format: str | None = None, track_ids: list[int] | None = None,
               frame: dict | None = None, info: dict | None = None, skeleton=None) -> dict:
    """COCO-style JSON of one image's people (see the module docstring)."""
    if keypoint_format is None:
        names = list(people[0]["labels"]) if people else []
        skeleton = [[a + 1, b + 1] for a, b in (SKELETON_LINKS if skeleton is None else skeleton)]
    else:
        from ..data.keypoint_formats import KEYPOINT_FORMATS, convert_keypoints

        names = list(KEYPOINT_FORMATS[keypoint_format])
        skeleton = _format_skeleton(keypoint_format)
    annotations = []
    for k, person in enumerate(people):
        x0, y0, x1, y1 = (float(v) for v in person["bbox"])
        points, scores = np.asarray(person["keypoints"]), np.asarray(person["scores"])
        if keypoint_format is not None and list(person["labels"]) != names:
            # from the model's own keypoints (its labels), by name; people the pipeline converted pass as they are
            points, scores = convert_keypoints(points, scores, keypoint_format, source_names=list(person["labels"]))
        keypoints = np.concatenate([points, scores[:, None].astype(np.float64)], axis=1)
        annotation = {
            "id": k + 1,
            "image_id": 1,
            "category_id": 1,
            "bbox": [x0, y0, x1 - x0, y1 - y0],  # COCO xywh, as pycocotools reads it (`info.bbox_format`)
            "bbox_xyxy": [x0, y0, x1, y1],  # the format `--boxes` and the pipeline take
            "score": float(person["bbox_score"]),
            "keypoints": [float(v) for v in keypoints.reshape(-1)],
            "keypoint_scores": [float(v) for v in scores],
            "num_keypoints": int((scores > threshold).sum()),
        }
        if track_ids is not None:
            annotation["track_id"] = int(track_ids[k])
        annotations.append(annotation)
    image_entry = {"id": 1, "file_name": source, "height": int(image_shape[0]), "width": int(image_shape[1])}
    image_entry.update(frame or {})
    return {
        "images": [image_entry],
        "categories": [{"id": 1, "name": "person", "keypoints": names, "skeleton": skeleton}],
        "annotations": annotations,
        "info": {"description": "sapiens2-hf pose; keypoints are (x, y, score) triples in image pixels",
                 "keypoint_threshold_for_num_keypoints": threshold,
                 "bbox_format": "xywh",  # of `bbox`; `bbox_xyxy` holds the same box as --boxes takes it
                 "keypoint_format": keypoint_format or "sapiens2_308", **(info or {})},
    }


# ------------------------------------------------------------------------------------------------ per-task outputs


@dataclass
class OutputFiles:
    """The files of one input (`<folder>/<name><suffix>`) as a task's writer saves them; `written` lists them."""

    base: Path
    written: list[Path] = field(default_factory=list)

    def path(self, suffix: str) -> Path:
        if suffix not in image_output_suffixes():  # output_names must know every file an input writes
            raise AssertionError(f"{suffix!r} is not one of the task's declared files (TaskOutputs.files)")
        return self.base.parent / f"{self.base.name}{suffix}"

    def save(self, function: Callable[[Any, Path], Any], value: Any, suffix: str) -> None:
        """`function(value, path)` for the file of `suffix`, recorded once it is written."""
        path = self.path(suffix)
        function(value, path)
        self.written.append(path)


@dataclass(frozen=True)
class TaskOutputs:
    """The command line's and the web app's facet of one task: what the predict commands (images, video frames)
    and the app write for its pipeline result, and how they name it. Layer 0's spec (`TaskSpec`) holds none of this.

    Attributes:
        files (`tuple[str, ...]`): the suffix of every file `write` may save (`OutputFiles.save`).
        write: `write(options, files, image, result, video, pose_json)`: saves the task's arrays and files
            (`options`: the command's `PredictOptions`).
        picture: `picture(options, image, result, video) -> PIL.Image`: the overlay (also each frame of the annotated
            video).
        picture_is_output (`bool`): the picture is the task's own output (albedo's image): `write` saves it, also
            with --no-overlay, and it is not written again as an overlay.
        overlay_suffix (`str`, *optional*): the file name suffix of the picture (`<input name><suffix>`, also the web
            app's result); default `_<task>.png` (`overlay_suffix`).
        short_title (`str`, *optional*): the app's tab title; default the spec's `title` (`tab_title`).
    """

    files: tuple[str, ...]
    write: Callable[..., None]
    picture: Callable[..., Any]
    picture_is_output: bool = False
    overlay_suffix: str | None = None
    short_title: str | None = None


def _write_pose(options, files: OutputFiles, image, result, video: bool, pose_json: dict | None) -> None:
    if pose_json is None:
        pose_json = pose_annotations(str(files.base), image.shape, result, options.output.kpt_threshold,
                                     options.output.keypoint_format, skeleton=options.output.skeleton)
    files.save(_save_json, pose_json, ".json")


def _picture_pose(options, image, result, video: bool):
    links = {} if options.output.skeleton is None else {"skeleton_links": options.output.skeleton}
    return draw_keypoints(image, result, score_threshold=options.output.kpt_threshold, **links)


def _write_seg(options, files: OutputFiles, image, result, video: bool, pose_json: dict | None) -> None:
    seg = result["segmentation"]
    if not options.output.no_arrays:
        files.save(save_npy, seg.astype(np.uint8) if seg.max(initial=0) < 256 else seg, "_seg.npy")


def _picture_seg(options, image, result, video: bool):
    # the legend changes the width with the classes present: left out of the frames of a video
    names = options.output.class_names
    labels = {} if names is None else {"class_names": names, "palette": class_palette(names)}
    return overlay_segmentation(image, result["segmentation"], legend=not video, **labels)


def _write_normal(options, files: OutputFiles, image, result, video: bool, pose_json: dict | None) -> None:
    if not options.output.no_arrays:
        files.save(save_npy, result["normals"], "_normal.npy")


def _picture_normal(options, image, result, video: bool):
    return normals_to_rgb(result["normals"])


def _write_pointmap(options, files: OutputFiles, image, result, video: bool, pose_json: dict | None) -> None:
    if not options.output.no_arrays:
        files.save(save_npy, result["pointmap"], "_pointmap.npy")
        files.save(save_npy, result["depth"], "_depth.npy")
    if options.output.ply:
        files.save(lambda points, path: save_ply(path, points, colors=image), result["pointmap"], ".ply")


def _picture_pointmap(options, image, result, video: bool):
    return depth_to_image(result["depth"], mask=result.get("mask"), units="m")


def _write_albedo(options, files: OutputFiles, image, result, video: bool, pose_json: dict | None) -> None:
    if not video:  # the albedo image is the task's output, written even with --no-overlay
        files.save(save_image, albedo_to_image(result["albedo"]), "_albedo.png")
    if not options.output.no_arrays:
        files.save(save_npy, result["albedo"], "_albedo.npy")


def _picture_albedo(options, image, result, video: bool):
    return albedo_to_image(result["albedo"])


def _cutout(foreground, alpha):
    """RGBA uint8 cut-out from a pre-multiplied foreground `(H, W, 3)` in [0, 1] and its alpha `(H, W)`: colours
    un-multiplied (straight alpha, as PNG stores it), transparent where alpha is 0."""
    alpha = np.clip(np.asarray(alpha, np.float32), 0.0, 1.0)
    colour = np.asarray(foreground, np.float32) / np.maximum(alpha, 1e-6)[..., None]
    rgba = np.concatenate([np.clip(colour, 0.0, 1.0), alpha[..., None]], axis=-1)
    return np.round(rgba * 255.0).astype(np.uint8)


def _write_matting(options, files: OutputFiles, image, result, video: bool, pose_json: dict | None) -> None:
    alpha = np.asarray(result["alpha"], np.float32)  # the matting pipeline's `(height, width)` alpha in [0, 1]
    if not video:
        files.save(save_image, np.round(np.clip(alpha, 0, 1) * 255).astype(np.uint8), "_alpha.png")
        if result.get("foreground") is not None:
            files.save(save_image, _cutout(result["foreground"], alpha), "_foreground.png")
    if not options.output.no_arrays:
        files.save(save_npy, alpha, "_alpha.npy")


def _picture_matting(options, image, result, video: bool):
    alpha = np.clip(np.asarray(result["alpha"], np.float32), 0.0, 1.0)[..., None]
    green = np.array([0.0, 177.0, 64.0], np.float32)
    # the model's pre-multiplied foreground over green when it gives one (the composite the model means), else the
    # input image cut out by alpha
    foreground = result.get("foreground")
    person = np.asarray(foreground, np.float32) * 255.0 if foreground is not None else image * alpha
    return Image.fromarray(np.clip(np.round(person + green * (1 - alpha)), 0, 255).astype(np.uint8))


#: Task -> its outputs on the command line and in the app: the one place a task's files are defined. A task added
#: from outside the package registers its own with `register_task_outputs`.
TASK_OUTPUTS: dict[str, TaskOutputs] = {
    "pose": TaskOutputs((".json",), _write_pose, _picture_pose, short_title="Pose (308 keypoints)"),
    "seg": TaskOutputs(("_seg.npy",), _write_seg, _picture_seg, short_title="Body-part segmentation"),
    "normal": TaskOutputs(("_normal.npy",), _write_normal, _picture_normal, short_title="Surface normals"),
    # the picture is the depth (Z) in colour; the pointmap is an array
    "pointmap": TaskOutputs(("_pointmap.npy", "_depth.npy", ".ply"), _write_pointmap, _picture_pointmap,
                            overlay_suffix="_depth.png", short_title="Pointmap / depth"),
    "albedo": TaskOutputs(("_albedo.png", "_albedo.npy"), _write_albedo, _picture_albedo, picture_is_output=True,
                          short_title="Albedo"),
    "matting": TaskOutputs(("_alpha.png", "_foreground.png", "_alpha.npy"), _write_matting, _picture_matting,
                           short_title="Matting"),
}
#: The person mask any masked dense result writes (`--foreground-model` / `--foreground-mask`).
MASK_SUFFIX = "_mask.png"


def task_outputs(task: str) -> TaskOutputs:
    """The command line's and app's facet of `task`: its `TASK_OUTPUTS` entry, else (a registered task without one)
    `dense_map_outputs(task)`."""
    outputs = TASK_OUTPUTS.get(task)
    return outputs if outputs is not None else dense_map_outputs(task)


def overlay_suffix(task: str) -> str:
    """The file name suffix of `task`'s picture: its outputs' `overlay_suffix`, default `_<task>.png`."""
    return task_outputs(task).overlay_suffix or f"_{task}.png"


def tab_title(task: str) -> str:
    """The web app's tab title of `task`: its outputs' `short_title`, default the spec's `title`."""
    return task_outputs(task).short_title or TASK_SPECS[task].title


def image_output_suffixes() -> tuple[str, ...]:
    """Every file an image input named `n` may write directly into --out, as `n + suffix` (any task, any option):
    each registered task's files and picture, and the person mask. (A video's entries are its frame folder and its
    annotated video; `output_names` keeps the two apart.)"""
    suffixes = [suffix for task in TASK_SPECS for suffix in (*task_outputs(task).files, overlay_suffix(task))]
    return tuple(dict.fromkeys([*suffixes, MASK_SUFFIX]))


def register_task_outputs(task: str, outputs: TaskOutputs) -> None:
    """Registers the command-line outputs of a task added to the registry from outside the package, when the
    default (`dense_map_outputs`) does not serve it (its picture is `_<task>.png` unless `outputs` names another
    suffix). `sapiens2_hf.unregister_task` takes it back."""
    TASK_OUTPUTS[task] = outputs


def dense_map_outputs(task: str) -> TaskOutputs:
    """The outputs of a registered dense task with no writer of its own: each map of its result (the registry entry's
    `result_maps`, else the task name) as `<name>_<key>.npy` (not with --no-arrays), and as the picture, the first
    map in colour (`visualization.map_to_rgb`)."""
    spec = TASK_SPECS[task]
    keys = spec.result_maps or (spec.name,)

    def write(options, files: OutputFiles, image, result, video: bool, pose_json: dict | None) -> None:
        if not options.output.no_arrays:
            for key in keys:
                files.save(save_npy, result[key], f"_{key}.npy")

    def picture(options, image, result, video: bool):
        return map_to_rgb(result[keys[0]])

    return TaskOutputs(tuple(f"_{key}.npy" for key in keys), write, picture)


def write_outputs(options: PredictOptions, base: Path, image: np.ndarray, result: Any, *, video: bool = False,
                  pose_json: dict | None = None) -> tuple[list[Path], Any]:
    """Write one image's (or video frame's) outputs next to `base` (`<folder>/<name>`): the task's files
    (`TASK_OUTPUTS`), the person mask of a masked result, and the picture.

    Returns:
        `(paths written, overlay)`: for a video frame the overlay (PIL) goes to the annotated video and is returned
        instead of written (None with --no-overlay).
    """
    outputs = task_outputs(options.task)
    files = OutputFiles(base)
    outputs.write(options, files, image, result, video, pose_json)
    if isinstance(result, dict) and result.get("mask") is not None and not video:  # --foreground-model / -mask
        files.save(save_image, result["mask"].astype("uint8") * 255, MASK_SUFFIX)
    overlay = None
    if not options.output.no_overlay and not (outputs.picture_is_output and not video):
        overlay = outputs.picture(options, image, result, video)
        if not video:
            files.save(save_image, overlay, overlay_suffix(options.task))
            overlay = None
    return files.written, overlay


def _save_json(data: Any, path: Path, indent: int | None = None) -> None:
    """Write JSON atomically; NaN / infinity are an error (`allow_nan=False`), never written as invalid JSON."""
    text = json.dumps(data, indent=indent, allow_nan=False)
    atomic_write_text(path, text)


def _boxes_for(source: str, boxes: dict) -> Any:
    return boxes.get(Path(source).name, boxes.get(source))


def _width_height(image) -> tuple[int, int]:
    """(width, height) of a decoded image: an (H, W, C) array or a PIL image."""
    return image.size if hasattr(image, "getbands") else (image.shape[1], image.shape[0])


def predict_images(options: PredictOptions, pipe, images: list, boxes: list | None = None, **extra) -> list:
    """Run the pipeline on a batch of images (pose: with one list of boxes per image, else the detector)."""
    kwargs: dict[str, Any] = {}
    if TASK_SPECS[options.task].top_down:
        kwargs["flip_test"] = not options.output.no_flip_test
        kwargs["detector_threshold"] = options.output.detector_threshold
        if options.whole_image:  # an input without boxes is one person: its whole image, xyxy
            boxes = [entry if entry is not None else [[0.0, 0.0, *map(float, _width_height(image))]]
                     for entry, image in zip(boxes or [None] * len(images), images)]
        if boxes is not None:
            kwargs["boxes"] = boxes
    mask = options.foreground.foreground_mask
    if mask is not None and Path(mask).is_file():  # one mask for every input (a folder: per input, in `extra`)
        kwargs["foreground_mask"] = [mask] * len(images)
    if options.output.focal_length is not None:
        kwargs["focal_length"] = options.output.focal_length
    if options.output.intrinsics is not None:
        kwargs["intrinsics"] = tuple(options.output.intrinsics)
    kwargs.update(extra)
    # decoded (H, W, 3) arrays as PIL images: their layout is stated, not guessed from the shape (a 1x1 image)
    images = [Image.fromarray(image) if getattr(image, "ndim", 0) == 3 else image for image in images]
    return pipe(images, batch_size=len(images), **kwargs)
