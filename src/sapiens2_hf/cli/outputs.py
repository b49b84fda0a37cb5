"""What the predict commands write for one image or video frame, and the pipeline call that produces it: shared by
the image loop (cli/predict.py), the video loop (cli/video.py) and the web app. The file layout is described in
cli/predict.py's docstring and docs/cli.md.
"""

from __future__ import annotations

import contextlib
import errno
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from .._registration import task_registry

if TYPE_CHECKING:  # numpy is imported where it is used, so that building the parser (`--help`) stays cheap
    import numpy as np


# Every file an image input named `n` may write directly into --out, as `n + suffix` (any task, any option), and the
# entries of a video named `v` (its frame folder and its annotated video): `output_names` keeps them apart.
IMAGE_OUTPUT_SUFFIXES = (".json", "_pose.png", "_seg.npy", "_seg.png", "_normal.npy", "_normal.png", "_pointmap.npy",
                         "_depth.npy", "_depth.png", ".ply", "_albedo.png", "_albedo.npy", "_alpha.png", "_alpha.npy",
                         "_foreground.png", "_matting.png", "_mask.png")

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
    from ..modeling.sapiens2_keypoint_formats import describe_sources
    from ..visualization import SKELETON_LINKS

    first_copy: dict[int, int] = {}
    for row in describe_sources(keypoint_format):
        if row["kind"] == "copy":
            first_copy.setdefault(row["source_indices"][0], row["index"])
    return [[first_copy[a] + 1, first_copy[b] + 1] for a, b in SKELETON_LINKS if a in first_copy and b in first_copy]


def pose_annotations(source: str, image_shape: tuple[int, ...], people: list[dict], threshold: float,
               keypoint_format: str | None = None, track_ids: list[int] | None = None,
               frame: dict | None = None, info: dict | None = None) -> dict:
    """COCO-style JSON of one image's people (see the module docstring)."""
    import numpy as np

    from ..visualization import SKELETON_LINKS

    if keypoint_format is None:
        names = list(people[0]["labels"]) if people else []
        skeleton = [[a + 1, b + 1] for a, b in SKELETON_LINKS]
    else:
        from ..modeling.sapiens2_keypoint_formats import KEYPOINT_FORMATS, convert_keypoints

        names = list(KEYPOINT_FORMATS[keypoint_format])
        skeleton = _format_skeleton(keypoint_format)
    annotations = []
    for k, person in enumerate(people):
        x0, y0, x1, y1 = (float(v) for v in person["bbox"])
        points, scores = np.asarray(person["keypoints"]), np.asarray(person["scores"])
        if keypoint_format is not None:
            points, scores = convert_keypoints(points, scores, keypoint_format)
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


def _overlay(args, image: np.ndarray, result: Any, video: bool = False):
    """The visualisation of one result as a PIL image (the frame of the annotated video for videos: the seg
    legend, which changes the width with the classes present, is left out there)."""
    import numpy as np

    from .. import visualization as vis

    if args.task == "pose":
        return vis.draw_keypoints(image, result, score_threshold=args.kpt_threshold)
    if args.task == "seg":
        return vis.overlay_segmentation(image, result["segmentation"], legend=not video)
    if args.task == "normal":
        return vis.normals_to_rgb(result["normals"])
    if args.task == "pointmap":
        return vis.depth_to_image(result["depth"], mask=result.get("mask"), units="m")
    if args.task == "albedo":
        return vis.albedo_to_image(result["albedo"])
    if args.task == "matting":
        from PIL import Image

        alpha = np.clip(np.asarray(_matting_alpha(result), np.float32), 0.0, 1.0)[..., None]
        green = np.array([0.0, 177.0, 64.0], np.float32)
        # the model's pre-multiplied foreground over green when it gives one (the composite the model means),
        # else the input image cut out by alpha
        foreground = result.get("foreground")
        person = np.asarray(foreground, np.float32) * 255.0 if foreground is not None else image * alpha
        return Image.fromarray(np.clip(np.round(person + green * (1 - alpha)), 0, 255).astype(np.uint8))
    raise ValueError(f"no outputs defined for task {args.task!r}.")


def _cutout(foreground, alpha):
    """RGBA uint8 cut-out from a pre-multiplied foreground `(H, W, 3)` in [0, 1] and its alpha `(H, W)`: colours
    un-multiplied (straight alpha, as PNG stores it), transparent where alpha is 0."""
    import numpy as np

    alpha = np.clip(np.asarray(alpha, np.float32), 0.0, 1.0)
    colour = np.asarray(foreground, np.float32) / np.maximum(alpha, 1e-6)[..., None]
    rgba = np.concatenate([np.clip(colour, 0.0, 1.0), alpha[..., None]], axis=-1)
    return np.round(rgba * 255.0).astype(np.uint8)


def _matting_alpha(result: Any):
    return result["alpha"]  # the matting pipeline's `(height, width)` float32 alpha in [0, 1]


def write_outputs(args, base: Path, image: np.ndarray, result: Any, *, video: bool = False,
                   pose_json: dict | None = None) -> tuple[list[Path], Any]:
    """Write one image's (or video frame's) outputs next to `base` (`<folder>/<name>`).

    Returns:
        `(paths written, overlay)`: for a video frame the overlay (PIL) goes to the annotated video and is returned
        instead of written (None with --no-overlay).
    """
    import numpy as np

    from .. import visualization as vis

    written: list[Path] = []

    def out(suffix: str) -> Path:
        if suffix not in IMAGE_OUTPUT_SUFFIXES:  # output_names must know every file an input writes
            raise AssertionError(f"{suffix!r} is not in IMAGE_OUTPUT_SUFFIXES")
        return base.parent / f"{base.name}{suffix}"

    def save(function, value, path: Path) -> None:
        function(value, path)
        written.append(path)

    overlay_name = task_registry().TASK_SPECS[args.task].overlay_file_suffix
    if args.task == "pose":
        if pose_json is None:
            pose_json = pose_annotations(str(base), image.shape, result, args.kpt_threshold,
                                   getattr(args, "keypoint_format", None))
        _save_json(pose_json, out(".json"))
        written.append(out(".json"))
    elif args.task == "seg":
        seg = result["segmentation"]
        if not args.no_arrays:
            save(vis.save_npy, seg.astype(np.uint8) if seg.max(initial=0) < 256 else seg, out("_seg.npy"))
    elif args.task == "normal":
        if not args.no_arrays:
            save(vis.save_npy, result["normals"], out("_normal.npy"))
    elif args.task == "pointmap":
        if not args.no_arrays:
            save(vis.save_npy, result["pointmap"], out("_pointmap.npy"))
            save(vis.save_npy, result["depth"], out("_depth.npy"))
        if getattr(args, "ply", False):
            vis.save_ply(out(".ply"), result["pointmap"], colors=image)
            written.append(out(".ply"))
    elif args.task == "albedo":
        if not video:  # the albedo image is the task's output, written even with --no-overlay
            save(vis.save_image, vis.albedo_to_image(result["albedo"]), out("_albedo.png"))
        if not args.no_arrays:
            save(vis.save_npy, result["albedo"], out("_albedo.npy"))
    elif args.task == "matting":
        alpha = np.asarray(_matting_alpha(result), np.float32)
        if not video:
            save(vis.save_image, np.round(np.clip(alpha, 0, 1) * 255).astype(np.uint8), out("_alpha.png"))
            if result.get("foreground") is not None:
                save(vis.save_image, _cutout(result["foreground"], alpha), out("_foreground.png"))
        if not args.no_arrays:
            save(vis.save_npy, alpha, out("_alpha.npy"))
    if isinstance(result, dict) and result.get("mask") is not None and not video:  # --foreground-model / -mask
        save(vis.save_image, result["mask"].astype(np.uint8) * 255, out("_mask.png"))
    overlay = None
    if not args.no_overlay and not (args.task == "albedo" and not video):
        overlay = _overlay(args, image, result, video=video)
        if not video:
            save(vis.save_image, overlay, out(overlay_name))
            overlay = None
    return written, overlay

def _save_json(data: Any, path: Path, indent: int | None = None) -> None:
    """Write JSON atomically; NaN / infinity are an error (`allow_nan=False`), never written as invalid JSON."""
    from ..visualization import atomic_write

    text = json.dumps(data, indent=indent, allow_nan=False)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))

def _reason(error: BaseException) -> str:
    return str(error) if isinstance(error, (ValueError, OSError)) else f"{type(error).__name__}: {error}"


def _boxes_for(source: str, boxes: dict) -> Any:
    return boxes.get(Path(source).name, boxes.get(source))


def predict_images(args, pipe, images: list, boxes: list | None = None, **extra) -> list:
    """Run the pipeline on a batch of images (pose: with one list of boxes per image, else the detector)."""
    kwargs: dict[str, Any] = {}
    if args.task == "pose":
        kwargs["flip_test"] = not args.no_flip_test
        kwargs["detector_threshold"] = args.detector_threshold
        if boxes is not None:
            kwargs["boxes"] = boxes
    mask = getattr(args, "foreground_mask", None)
    if mask is not None and Path(mask).is_file():  # one mask for every input (a folder: per input, in `extra`)
        kwargs["foreground_mask"] = [mask] * len(images)
    if getattr(args, "focal_length", None) is not None:
        kwargs["focal_length"] = args.focal_length
    if getattr(args, "intrinsics", None) is not None:
        kwargs["intrinsics"] = tuple(args.intrinsics)
    kwargs.update(extra)
    return pipe(images, batch_size=len(images), **kwargs)
