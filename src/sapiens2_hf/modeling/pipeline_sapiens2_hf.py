# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""transformers pipelines for the six Sapiens2 tasks (layer 0, Hub-shippable).

| pipeline task | result per image |
|---|---|
| `sapiens2-pose` | list of people: `{"bbox", "bbox_score", "keypoints", "scores", "labels"}` |
| `sapiens2-segmentation` | `{"segmentation"}`: `(height, width)` int64 class ids |
| `sapiens2-normal` | `{"normals"}`: `(height, width, 3)` float32 unit normals (camera frame) |
| `sapiens2-pointmap` | `{"pointmap", "depth", "scale"}`: `(height, width, 3)` metric XYZ, `(height, width)` Z |
| `sapiens2-albedo` | `{"albedo"}`: `(height, width, 3)` float32 RGB in [0, 1] |
| `sapiens2-matting` | `{"alpha", "foreground"}`: `(height, width)` float32 in [0, 1], `(height, width, 3)` RGB |

Normal, pointmap and albedo results keep only the person with `foreground_mask=` (a given mask) or `segmenter=` (a
`sapiens2-segmentation` pipeline, model or model id; foreground = label > 0): they gain `"mask"` and their
background becomes 0 (normals, albedo) or NaN (pointmap, depth). The pointmap pipeline takes the camera as
`focal_length=` or `intrinsics=` (original-image pixels) for metric results in that camera.

All arrays are numpy, at the original image size, indexed `[y, x]` (`sapiens2_hf.serialization.to_json_compatible`
makes any result `json.dumps`-able). The pipelines are thin: the image processor owns all the geometry and decoding
(duck-typed: any processor with the `Sapiens2HFImageProcessor` API); the pipeline runs the model and turns tensors into
numpy. Decoding runs on the model's device.

The call path is transformers' own (`Pipeline.__call__`): `preprocess` / `_forward` / `postprocess` per image, a
`DataLoader` with transformers' collate function for `batch_size` and `num_workers`, lazy iteration over generators
and datasets (`KeyDataset`). The pose pipeline is a transformers `ChunkPipeline`: one model row per person crop,
batched across images, regrouped per image for decoding.

This module imports no other part of sapiens2_hf (Hub rule); the default image processor is found through transformers'
`AutoImageProcessor` registry for the model's config class.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import torch

# transformers' pipeline for one input -> many model rows (its mask-generation and zero-shot detection pipelines use
# it); not re-exported at the top level, so imported from where `Pipeline` itself lives.
from transformers.pipelines.base import ChunkPipeline

from .foreground_sapiens2_hf import SEGMENTER_PREFIX, load_segmenter, segmenter_part
from .person_detection_sapiens2_hf import DEFAULT_DETECTOR, _nms, detect_people, load_detector  # noqa: F401 (re-export)
from .pipeline_base_sapiens2_hf import (  # noqa: F401 (the public names re-exported from here)
    PIPELINE_TASKS,
    _positive_int,
    _Sapiens2DensePipeline,
    _Sapiens2PipelineBase,
    check_device,
    check_dtype,
)
from .pipeline_inputs_sapiens2_hf import (
    _boxes_per_image,
    _dense_input,
    _ImageOptions,
    _pose_input,
    dense_call_inputs,
    pose_call_inputs,
)
from .post_processing_sapiens2_hf import FlippedCropOutputs
from .sapiens2_label_data import NUM_POSE_KEYPOINTS
from .sapiens2_tasks import OFFICIAL_TASK_NAMES, TASK_SPECS


#: Boxes the pose pipeline crops at once (`preprocess` yields their rows before cropping the next ones): about 12 MB
#: per box at 1024x768, so the crops of an image with 1,000 boxes take 190 MB, not 12 GB. Crops are independent: the
#: results do not depend on it.
POSE_CROP_CHUNK_SIZE = 16


class Sapiens2SegmentationPipeline(_Sapiens2DensePipeline):
    """`pipeline("sapiens2-segmentation")`: 29-class body-part segmentation at the original image size.

    Result per image: `{"segmentation": np.ndarray (height, width) int64}` with class ids in `[0, num_labels)`
    (names in `model.config.id2label`; 0 is background).
    """

    task_name = "seg"
    output_fields = ("logits",)

    def postprocess(self, model_outputs, **params):
        (segmentation,) = self.image_processor.post_process_semantic_segmentation(
            self._namespace(model_outputs, logits="logits"), target_sizes=model_outputs["original_sizes"].tolist())
        return {"segmentation": segmentation.cpu().numpy()}


class _Sapiens2MaskableDensePipeline(_Sapiens2DensePipeline):
    """Normal, pointmap and albedo: results can keep only the person, as the official demos do.

    Call arguments (besides `batch_size`, `num_workers`):
        foreground_mask: the person foreground of the image, `(height, width)` at the image's size: a bool (or 0 / 1)
            numpy array or tensor, a PIL image (non-zero = foreground) or its path. For a list of images a list with
            one mask (or `None`) per image; generators and datasets carry theirs in dict inputs.
        segmenter: computes the foreground as the segmentation's non-background labels (label > 0): a
            `sapiens2-segmentation` pipeline, a Sapiens2 segmentation model, or a model folder / Hub id (loaded once
            per pipeline). It runs on the same batches as this model. Also an argument of the pipeline itself
            (`pipeline(..., segmenter=...)`); `segmenter=False` in a call switches that off. Not together with
            given masks.

    Instead of an image, a dict `{"image": ..., "foreground_mask": ...}` (pointmap also `"focal_length"`,
    `"intrinsics"`) carries the image's own options; they win over the call's.

    A masked result gains `"mask"` (`(height, width)` bool, True = person) and has its background set to
    the task's `foreground_fill` (the registry): normals 0 (the zero vector), albedo 0, pointmap and depth NaN.
    A mask of another size than its image is a `ValueError` naming both sizes.
    """

    #: Result fields the foreground mask applies to.
    masked_fields: tuple[str, ...] = ()
    #: Per-image call arguments (a list input: one per image).
    per_image_options: tuple[str, ...] = ("foreground_mask",)

    def __init__(self, *args, segmenter=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._loaded_segmenters: dict[Any, Any] = {}
        self._segmenter = self._get_segmenter(segmenter)

    def _sanitize_parameters(self, segmenter=None, **kwargs):
        preprocess, forward, postprocess = super()._sanitize_parameters(**kwargs)
        if segmenter is False:
            resolved = None
        elif segmenter is None:
            resolved = getattr(self, "_segmenter", None)
        else:
            resolved = self._get_segmenter(segmenter)
        if resolved is not None or segmenter is False:
            # every stage takes part: its inputs in preprocess, its model in _forward, its decoding in postprocess
            preprocess["segmenter"] = forward["segmenter"] = postprocess["segmenter"] = resolved
        return preprocess, forward, postprocess

    def _get_segmenter(self, segmenter):
        """A `sapiens2-segmentation` pipeline for `segmenter` (a pipeline, a model, or a folder / Hub id), each
        loaded once per pipeline (`load_segmenter`)."""
        if segmenter is None or segmenter is False:
            return None
        if isinstance(segmenter, Sapiens2SegmentationPipeline):
            return segmenter
        key = str(segmenter) if isinstance(segmenter, str) or hasattr(segmenter, "__fspath__") else id(segmenter)
        if key not in self._loaded_segmenters:
            loaded = load_segmenter(segmenter, self.device, Sapiens2SegmentationPipeline, register_pipelines)
            self._loaded_segmenters[key] = (segmenter, loaded)  # the reference keeps `id(segmenter)` unique
        return self._loaded_segmenters[key][1]

    # -- call ------------------------------------------------------------------------------------------------------

    def __call__(self, inputs, *args, batch_size: int | None = None, num_workers: int | None = None, **kwargs):
        """As `_Sapiens2PipelineBase.__call__`, with per-image options (see the class docstring)."""
        options = {name: kwargs.pop(name) for name in self.per_image_options if kwargs.get(name) is not None}
        for name in self.per_image_options:
            kwargs.pop(name, None)
        inputs = dense_call_inputs(inputs, options, self.image_processor)
        return super().__call__(inputs, *args, batch_size=batch_size, num_workers=num_workers, **kwargs)

    # -- stages ----------------------------------------------------------------------------------------------------

    def preprocess(self, item, segmenter=None, **params):
        item = _dense_input(0, item)
        image = item.image
        segmenter_inputs, layout = {}, None
        if segmenter is not None:
            if item.foreground_mask is not None:
                raise ValueError(f"input {item.number} has a foreground_mask and a segmenter is set; pass one of them "
                                 "(segmenter=False uses the given masks).")
            image, layout = self.image_processor.load_image_rgb(image), "channels_last"  # read once, for both models
            segmenter_inputs = segmenter.preprocess(image, input_data_format=layout)
        model_inputs = self.image_processor(image, task=self.task_name, input_data_format=layout)
        size = model_inputs["original_sizes"][0].tolist()
        mask = None
        if item.foreground_mask is not None:
            mask = self.image_processor.validate_foreground_mask(item.foreground_mask, size,
                                                                 name=f"the foreground_mask of input {item.number}")
        camera = {}
        if item.focal_length is not None or item.intrinsics is not None:
            camera = self.image_processor.validate_camera(item.focal_length, item.intrinsics)
        model_inputs["image_options"] = _ImageOptions(item.number, mask, camera)
        for key, value in segmenter_inputs.items():
            model_inputs[SEGMENTER_PREFIX + key] = value
        return model_inputs

    def _forward(self, model_inputs, segmenter=None, **params):
        result = super()._forward(model_inputs)
        result["image_options"] = model_inputs["image_options"]
        if segmenter is not None:
            for key, value in segmenter.forward(segmenter_part(model_inputs)).items():
                result[SEGMENTER_PREFIX + key] = value
        return result

    def _mask(self, result: dict, model_outputs, segmenter=None) -> dict:
        """`result` with the background of `masked_fields` filled and `"mask"` added, when the image has a mask."""
        options = model_outputs.get("image_options")
        mask = getattr(options, "mask", None)
        if segmenter is not None:
            segmentation = segmenter.postprocess(segmenter_part(model_outputs))["segmentation"]
            mask = np.asarray(self.image_processor.foreground_mask_from_segmentation(segmentation))
        if mask is None:
            return result
        for key in self.masked_fields:
            result[key] = self.image_processor.apply_foreground_mask(result[key], mask, channels_last=True)
        result["mask"] = mask
        return result


class Sapiens2DenseMapPipeline(_Sapiens2MaskableDensePipeline):
    """The pipeline of a dense task registered with `sapiens2_hf.register_task` (`dense_map_pipeline_class` makes
    one per task): the task's prediction, post-processed by the processor method its registry entry names
    (`post_process_dense_maps` by default: unpad, resize), at the original image size.

    Result per image: `{key: np.ndarray (height, width, channels) float32}` (`(height, width)` for a one-channel
    map), `key` as the post-processor names it (the task's first `result_maps` entry). With `foreground_mask=` or
    `segmenter=` (see `_Sapiens2MaskableDensePipeline`) also `"mask"`, the background set to the task's
    `foreground_fill`. The normal and albedo pipelines are such pipelines of official tasks.
    """

    def postprocess(self, model_outputs, segmenter=None, **params):
        spec = TASK_SPECS[self.task_name]
        post_process = getattr(self.image_processor, spec.post_process)
        fields = {name: name for name in self.output_fields}
        (result,) = post_process(self._namespace(model_outputs, **fields),
                                 source_sizes=model_outputs["original_sizes"].tolist(), paddings=model_outputs["padding"])
        output = {}
        for key, value in result.items():
            if isinstance(value, torch.Tensor):
                value = value.permute(1, 2, 0) if value.ndim == 3 else value
                value = value[..., 0] if value.ndim == 3 and value.shape[-1] == 1 else value
                value = value.cpu().numpy()
            output[key] = value
        return self._mask(output, model_outputs, segmenter)


class Sapiens2NormalPipeline(Sapiens2DenseMapPipeline):
    """`pipeline("sapiens2-normal")`: surface normals at the original image size.

    Result per image: `{"normals": np.ndarray (height, width, 3) float32}`, camera frame `(x, y, z)`, unit length
    before the final resize (officially not re-normalised afterwards). With `foreground_mask=` or `segmenter=`
    (see `_Sapiens2MaskableDensePipeline`) also `"mask"` `(height, width)` bool, and the background normals are 0.
    """

    task_name = "normal"
    output_fields = ("normals",)
    masked_fields = ("normals",)


class Sapiens2PointmapPipeline(_Sapiens2MaskableDensePipeline):
    """`pipeline("sapiens2-pointmap")`: metric pointmap and depth at the original image size.

    Result per image: `{"pointmap": np.ndarray (height, width, 3) float32 XYZ (X right, Y down, Z forward),
    "depth": np.ndarray (height, width) float32 (= Z), "scale": float}` (units of the training depth, metres;
    `scale` is the one the canonical pointmap was divided by). transformers' `pipeline("depth-estimation")` gives the
    same depth in its own format (`predicted_depth`).

    Call arguments, besides the foreground masking of `_Sapiens2MaskableDensePipeline` (background: NaN, which the
    .ply writer skips):
        focal_length (`float`): the camera's horizontal focal length in pixels of the original image; it replaces
            the predicted scale (image processor's `post_process_pointmap_estimation(focal_length=...)`), so the
            pointmap and depth are metric for that camera.
        intrinsics: the camera in original-image pixels, `(fx, fy, cx, cy)` or a 3x3 matrix: Z metric from `fx`,
            then X and Y re-projected from Z through it, `X = (u - cx) Z / fx`, `Y = (v - cy) Z / fy`.
    Either is one value for all images or, for a list of images, one per image (`None` for the predicted camera);
    dict inputs carry their own. With either, the result also holds `"focal_length"` (`float`, the one used).
    """

    task_name = "pointmap"
    output_fields = ("pointmaps", "scales")
    masked_fields = ("pointmap", "depth")
    per_image_options = ("foreground_mask", "focal_length", "intrinsics")

    def postprocess(self, model_outputs, segmenter=None, **params):
        options = model_outputs.get("image_options")
        camera = getattr(options, "camera", None) or {}
        (result,) = self.image_processor.post_process_pointmap_estimation(
            self._namespace(model_outputs, pointmaps="pointmaps", scales="scales"),
            source_sizes=model_outputs["original_sizes"].tolist(), paddings=model_outputs["padding"], **camera)
        output = {"pointmap": result["pointmap"].permute(1, 2, 0).cpu().numpy(),
                  "depth": result["depth"].cpu().numpy(),
                  "scale": None if result["scale"] is None else float(result["scale"])}
        if any(value is not None for value in camera.values()):
            output["focal_length"] = float(result["focal_length"])
        return self._mask(output, model_outputs, segmenter)


class Sapiens2AlbedoPipeline(Sapiens2DenseMapPipeline):
    """`pipeline("sapiens2-albedo")`: RGB albedo at the original image size.

    Result per image: `{"albedo": np.ndarray (height, width, 3) float32 RGB in [0, 1]}`. With `foreground_mask=` or
    `segmenter=` (see `_Sapiens2MaskableDensePipeline`) also `"mask"` `(height, width)` bool, and the background
    albedo is 0.
    """

    task_name = "albedo"
    output_fields = ("albedos", "albedo")  # the processor reads `albedos`, else `albedo`
    masked_fields = ("albedo",)


def dense_map_pipeline_class(task: str) -> type[Sapiens2DenseMapPipeline]:
    """A `Sapiens2DenseMapPipeline` subclass for a registered dense task: its prediction fields are the registry
    entry's `output_field` and `extra_output_fields`, and a foreground mask applies to its result maps."""
    spec = TASK_SPECS[task]
    name = spec.model_class.removeprefix("Sapiens2For").removesuffix("Estimation") or spec.name
    return type(f"Sapiens2{name}Pipeline", (Sapiens2DenseMapPipeline,), {
        "task_name": spec.name,
        "output_fields": (spec.output_field, *spec.extra_output_fields),
        "masked_fields": (spec.result_maps or (spec.name,))[:1] if spec.foreground_fill is not None else (),
        "__module__": __name__,
    })


class Sapiens2MattingPipeline(_Sapiens2DensePipeline):
    """`pipeline("sapiens2-matting")`: alpha matte and foreground at the original image size.

    Result per image: `{"alpha": np.ndarray (height, width) float32 in [0, 1], "foreground": np.ndarray
    (height, width, 3) float32 pre-multiplied RGB in [0, 1]}` (`foreground + (1 - alpha) * background` composites
    the person over a new background). With `background=`, also `"composite"`: `(height, width, 3)` uint8 RGB, the
    person over that background: an image (PIL, `(height, width, 3)` uint8 RGB array, or a path; resized to each
    input) or a colour `(red, green, blue)` in `[0, 255]` (`background=(0, 255, 0)`).
    """

    task_name = "matting"
    output_fields = ("alphas", "foregrounds")

    def _call_parameters(self) -> dict[str, str]:
        return {"background": "postprocess"}

    def postprocess(self, model_outputs, background=None, **params):
        (result,) = self.image_processor.post_process_image_matting(
            self._namespace(model_outputs, alphas="alphas", foregrounds="foregrounds"),
            source_sizes=model_outputs["original_sizes"].tolist(), paddings=model_outputs["padding"],
            backgrounds=background)
        # the processor's alpha is (1, height, width), as transformers'; the pipeline's is a (height, width) image
        output = {"alpha": result["alpha"][0].cpu().numpy(),
                  "foreground": result["foreground"].permute(1, 2, 0).cpu().numpy()}
        if result["composite"] is not None:
            output["composite"] = result["composite"].permute(1, 2, 0).cpu().numpy()
        return output


class Sapiens2PosePipeline(_Sapiens2PipelineBase, ChunkPipeline):
    """`pipeline("sapiens2-pose")`: top-down 308-keypoint pose estimation.

    Inputs: an image, a list of images, a generator or a `torch.utils.data.Dataset` (e.g. `KeyDataset(dataset,
    "image")`). Instead of an image, a dict `{"image": ..., "boxes": [...], "box_scores": [...]}` carries its own
    boxes (one image's nesting, below; `boxes` and `box_scores` optional, other keys ignored), so a dataset with
    image and box columns, or a generator, streams with its boxes.

    Call arguments:
        boxes: person boxes in image pixels, always `[x_min, y_min, x_max, y_max]` (box_format `"xyxy"`; the image
            processor's own default is COCO xywh, so the pipeline names the format in every processor call). No
            detector is loaded then.
            - one image: a list of boxes `[[x0, y0, x1, y1], ...]`, or the per-image nesting
              `[[[x0, y0, x1, y1], ...]]`; `[]` (or `[[]]`) means no people;
            - a list of images: one list of boxes per image, `[[box, ...], [], ...]`.
            Arrays / tensors of shape `(num_boxes, 4)` (one image) or one such entry per image work the same way.
            Boxes may stick out of the image (as officially), but a box that is NaN or infinite, has zero or
            negative width or height, or lies entirely outside its image raises a `ValueError` naming the image,
            the box, its value and the box format.
        box_scores: optional scores for `boxes` (default 1.0), nested exactly like `boxes`: for one image a list of
            numbers (or `[[...]]`), for a list of images one list per image; one finite score per box.
        detector: used for an image without boxes: a transformers object-detection pipeline, a model id / folder for
            one (default `DEFAULT_DETECTOR`, which needs the Hub or a local copy), or a callable with the same output
            format. If it cannot be loaded, the error names the default detector, `boxes=` and `detector=`. It runs
            in `preprocess`, so with `num_workers` > 0 in the `DataLoader` worker: give it a CPU detector there,
            or boxes.
        detector_threshold (`float`, defaults to 0.3), person_label (`str`, defaults to `"person"`),
            nms_threshold (`float`, defaults to 0.3): the official demo's filtering.
        fallback_to_full_image (`bool`, defaults to `True`): official demo behaviour when no person is detected:
            the whole image becomes one box (its `bbox_score` is 0.0).
        flip_test (`bool`, defaults to `True`): the official flip test (averaged heatmaps); skipped for a model whose
            keypoints have no left/right pairs.
        batch_size (`int` >= 1): person crops per model call. This is transformers' `ChunkPipeline`: `preprocess`
            turns each image into one row per person (cropping `POSE_CROP_CHUNK_SIZE` boxes at a time),
            consecutive images' rows share model calls, each call's heatmaps are decoded as it returns (`_forward`,
            with the image processor), and `postprocess` collects each image's people. Memory is bounded by the
            batch size and chunk, whatever the number of boxes. `crop_batch_size` (`int` >= 1) is the same setting
            under its older name; when given it wins.
        num_workers (`int` >= 0): as in transformers (`ChunkPipeline` runs at most one worker).

    Result per image: a list of people, in box order, each `{"bbox": np.ndarray (4,) float32 xyxy, "bbox_score":
    float, "keypoints": np.ndarray (num_keypoints, 2) float64 (x, y) image pixels, "scores": np.ndarray
    (num_keypoints,) float32 heatmap maxima, "labels": list[str] keypoint names}`.
    """

    task_name = "pose"

    def __init__(self, *args, detector=None, **kwargs):
        super().__init__(*args, **kwargs)
        # The pipeline's own detector, as given (never replaced by a call's `detector=`, which lives only in that
        # call's preprocess parameters, as every per-call argument does in transformers' pipelines).
        self._detector = detector
        # Detectors loaded from a name (the default, the pipeline's own or a call's), by name: a cache, so that a
        # name is loaded once; which one a call uses is decided by that call's arguments alone.
        self._loaded_detectors: dict[str, Any] = {}

    def _call_parameters(self):
        return {
            "detector": "preprocess", "detector_threshold": "preprocess", "person_label": "preprocess",
            "nms_threshold": "preprocess", "fallback_to_full_image": "preprocess", "flip_test": "forward",
        }

    def __call__(self, inputs, *args, boxes=None, box_scores=None, batch_size: int | None = None,
                 crop_batch_size: int | None = None, num_workers: int | None = None, **kwargs):
        if box_scores is not None and boxes is None:
            raise ValueError("box_scores= needs boxes=; detected boxes come with the detector's scores.")
        batch_size = _positive_int("batch_size", batch_size, None)
        batch_size = _positive_int("crop_batch_size", crop_batch_size, batch_size)
        inputs = pose_call_inputs(inputs, boxes, box_scores)
        return super().__call__(inputs, *args, batch_size=batch_size, num_workers=num_workers, **kwargs)

    def _get_detector(self, detector):
        """The detector of one call: its `detector=` when given, else the pipeline's own (else the default); one
        given by name is loaded once (`load_detector`)."""
        detector = detector if detector is not None else self._detector
        if detector is not None and not isinstance(detector, str):
            return detector
        name = detector or DEFAULT_DETECTOR
        loaded = self._loaded_detectors.get(name)
        if loaded is None:
            # two threads loading the same name at once both load it; either copy serves
            loaded = self._loaded_detectors.setdefault(name, load_detector(name, self.device))
        return loaded

    def preprocess(self, item, **detection):
        """One image -> one model row per person (`ChunkPipeline`): each row holds the crop `pixel_values`
        `(1, 3, height, width)`, its box geometry and score, the image size and `is_last`. An image without people
        gives one row with `has_person` False (its zero crop is never run)."""
        item = _pose_input(0, item)
        load = getattr(self.image_processor, "load_image_rgb", None)
        array = load(item.image) if load is not None else item.image
        if item.boxes is None:
            detector = self._get_detector(detection.pop("detector", None))
            boxes, scores = detect_people(detector, array, **detection)
        else:
            boxes, scores = item.boxes, item.box_scores
            if not item.checked:
                (boxes,), scores = _boxes_per_image(boxes, scores, 1, True, first_number=item.number)
                scores = None if scores is None else scores[0]
            validate = getattr(self.image_processor, "validate_pose_boxes", None)
            if validate is not None:
                # checked before any crop, naming the image's number in the whole call
                validate([boxes], "xyxy", [array.shape[:2]], [item.number])
        if scores is None:
            scores = [1.0] * len(boxes)
        count = len(boxes)
        if count == 0:
            height, width = self.image_processor.input_size
            yield {"has_person": torch.zeros(1, dtype=torch.bool), "pixel_values": torch.zeros(1, 3, height, width),
                   "bbox_center": torch.zeros(1, 2), "bbox_scale": torch.zeros(1, 2), "boxes_xyxy": torch.zeros(1, 4),
                   "box_score": torch.zeros(1, dtype=torch.float64),
                   "original_size": torch.tensor([array.shape[:2]], dtype=torch.long), "is_last": True}
            return
        # Cropped POSE_CROP_CHUNK_SIZE boxes at a time, as the rows are consumed: 1,000 boxes never hold 1,000 crops.
        for start in range(0, count, POSE_CROP_CHUNK_SIZE):
            chunk = list(boxes[start : start + POSE_CROP_CHUNK_SIZE])
            inputs = self.image_processor([array], boxes=[chunk], box_format="xyxy", task="pose",
                                          input_data_format="channels_last" if load is not None else None)
            rows = {key: inputs[key] for key in ("pixel_values", "bbox_center", "bbox_scale", "boxes_xyxy")}
            rows["box_score"] = torch.tensor(scores[start : start + len(chunk)], dtype=torch.float64).reshape(-1)
            for k in range(len(chunk)):
                yield {"has_person": torch.ones(1, dtype=torch.bool),
                       **{key: value[k : k + 1].clone() for key, value in rows.items()},
                       "original_size": inputs["original_sizes"], "is_last": start + k == count - 1}

    def _forward(self, model_inputs, flip_test: bool = True):
        """One batch of person rows -> their keypoints, decoded here by the image processor.

        An image's rows wait in transformers' `ChunkPipeline` until its last one has run, so decoding each batch as
        it comes (as transformers' mask-generation pipeline post-processes its masks in `_forward`) keeps
        `(num_keypoints, 2)` keypoints per waiting person instead of its heatmaps (about 120 MB per person at 1024x768
        with the flip test): memory is bounded by the batch size, not by the number of people in an image."""
        has_person = model_inputs["has_person"]
        keypoints = scores = None
        if bool(has_person.any()):
            crops = model_inputs["pixel_values"][has_person].to(self.device, self.model.dtype)
            heatmaps = self.model(pixel_values=crops).heatmaps
            extra = {}
            # a keypoint set without left/right pairs (a single hand) is not mirrored: no flip test for it
            mirrored = bool(getattr(self.model.config, "flip_pairs", None)) or heatmaps.shape[1] == NUM_POSE_KEYPOINTS \
                or self.image_processor.flip_indices is not None
            if flip_test and mirrored:
                extra["outputs_flipped"] = FlippedCropOutputs(self.model(pixel_values=crops.flip(-1)).heatmaps,
                                                              getattr(self.model.config, "flip_pairs", None))
            boxes = model_inputs["boxes_xyxy"][has_person]
            geometry = {"bbox_center": model_inputs["bbox_center"][has_person], "bbox_scale":
                        model_inputs["bbox_scale"][has_person], "boxes_xyxy": boxes}
            (people,) = self.image_processor.post_process_pose_estimation(
                types.SimpleNamespace(heatmaps=heatmaps), crops=geometry, **extra)
            found = torch.stack([person["keypoints"] for person in people])
            found_scores = torch.stack([person["scores"] for person in people])
            # rows of images without people get zeros, never read
            keypoints = found.new_zeros((has_person.shape[0], *found.shape[1:]))
            scores = found_scores.new_zeros((has_person.shape[0], *found_scores.shape[1:]))
            keypoints[has_person.to(found.device)] = found
            scores[has_person.to(found_scores.device)] = found_scores
        # `has_person` first: transformers' iterators read the batch size from the first entry
        return {"has_person": has_person, "keypoints": keypoints, "keypoint_scores": scores,
                **{key: model_inputs[key] for key in ("boxes_xyxy", "box_score", "original_size", "is_last")}}

    def _keypoint_names(self, num_keypoints: int) -> list[str]:
        id2label = getattr(self.model.config, "id2label", None) or {}
        names = [id2label.get(i, id2label.get(str(i))) for i in range(num_keypoints)]
        if len(id2label) == num_keypoints and all(n and not str(n).startswith("LABEL_") for n in names):
            return [str(n) for n in names]
        return list(self.image_processor.keypoint_names(num_keypoints))

    def postprocess(self, model_outputs):
        """One image's rows (as `_forward` returned them, one person each, decoded) -> its list of people."""
        rows = [row for row in model_outputs if bool(row["has_person"].reshape(-1)[0])]
        if not rows:
            return []
        keypoints = torch.cat([row["keypoints"] for row in rows]).cpu().numpy()
        scores = torch.cat([row["keypoint_scores"] for row in rows]).cpu().numpy()
        boxes = torch.cat([row["boxes_xyxy"] for row in rows]).float().cpu().numpy()
        names = self._keypoint_names(keypoints.shape[1])
        box_scores = torch.cat([row["box_score"] for row in rows]).tolist()
        return [
            {"bbox": boxes[k].astype(np.float32), "bbox_score": float(box_scores[k]), "keypoints": keypoints[k],
             "scores": scores[k], "labels": names}
            for k in range(len(rows))
        ]


PIPELINE_CLASSES = {
    "sapiens2-pose": Sapiens2PosePipeline,
    "sapiens2-segmentation": Sapiens2SegmentationPipeline,
    "sapiens2-normal": Sapiens2NormalPipeline,
    "sapiens2-pointmap": Sapiens2PointmapPipeline,
    "sapiens2-albedo": Sapiens2AlbedoPipeline,
    "sapiens2-matting": Sapiens2MattingPipeline,
}


def register_pipelines(model_classes: dict[str, Any] | None = None) -> None:
    """Register the pipeline of every task in the registry with transformers' pipeline registry (idempotent).

    Args:
        model_classes: model class (or tuple of classes) used to load a model from a folder / Hub id, keyed by short
            task (`"pose"`, `"seg"`, ...) or pipeline task. Defaults to transformers' Auto class of the task (our
            config must be registered with it); a task transformers has none for (albedo, a registered task) has no
            default, so pass it (e.g. `{"albedo": AutoModelForAlbedoEstimation}`).
    """
    import transformers

    model_classes = dict(model_classes or {})
    for spec in TASK_SPECS.values():
        default = None if spec.auto_class == "AutoModel" else getattr(transformers, spec.auto_class, None)
        register_pipeline(spec.name, model_classes.get(spec.name, model_classes.get(spec.pipeline_name, default)))


class _ModelRequired(dict):
    """The `default` of our pipelines in transformers' registry: there is no default model to download, so
    `pipeline(name)` without `model=` is a one-line error naming `model=` and examples (transformers' factory reads
    `default["model"]` when no model is given), not `KeyError: 'default'`."""

    def __init__(self, pipeline_task: str, task: str):
        super().__init__(model=None)
        self.pipeline_task, self.task = pipeline_task, task

    def __getitem__(self, key):
        if self.task not in OFFICIAL_TASK_NAMES:  # a registered task has no official checkpoints
            raise ValueError(f"pipeline({self.pipeline_task!r}) needs model=: a folder or Hub repo id of a "
                             f"{self.task!r} model (saved with save_pretrained), or the model object.")
        raise ValueError(
            f"pipeline({self.pipeline_task!r}) needs model=: a folder saved with save_pretrained, a Hub repo id such as "
            f"'facebook/sapiens2-{self.task}-1b', or an official sapiens2_<size>_{self.task}.safetensors file "
            "(`sapiens2-hf tiny` writes a tiny random model folder to try)."
        )


def register_pipeline(task: str, model_class: Any = None, composed: dict[str, Any] | None = None) -> None:
    """Register `task`'s pipeline (`PIPELINE_CLASSES`) under its pipeline name with transformers (idempotent), and
    `composed` (name -> class: pipelines built on its model); `model_class` (class or tuple) loads a model by name."""
    from transformers.pipelines import PIPELINE_REGISTRY

    pipeline_task = TASK_SPECS[task].pipeline_name
    wanted_models = () if model_class is None else (model_class if isinstance(model_class, tuple) else (model_class,))
    # the task's own pipeline, then those composed on its model, which load it alike
    wanted = [(pipeline_task, PIPELINE_CLASSES[pipeline_task]), *(composed or {}).items()]
    for name, pipeline_class in wanted:
        current = PIPELINE_REGISTRY.supported_tasks.get(name)
        if current is not None and current.get("impl") is pipeline_class \
                and tuple(current.get("pt", ())) == wanted_models:
            continue
        PIPELINE_REGISTRY.register_pipeline(name, pipeline_class=pipeline_class, pt_model=wanted_models or None,
                                            default=_ModelRequired(name, task), type="image")


def unregister_pipeline(task: str) -> None:
    """Remove `task`'s pipeline from transformers' pipeline registry and `PIPELINE_CLASSES`."""
    from transformers.pipelines import PIPELINE_REGISTRY

    pipeline_task = TASK_SPECS[task].pipeline_name
    PIPELINE_REGISTRY.supported_tasks.pop(pipeline_task, None)
    PIPELINE_CLASSES.pop(pipeline_task, None)


__all__ = [
    "DEFAULT_DETECTOR",
    "PIPELINE_CLASSES",
    "PIPELINE_TASKS",
    "Sapiens2AlbedoPipeline",
    "Sapiens2DenseMapPipeline",
    "dense_map_pipeline_class",
    "Sapiens2MattingPipeline",
    "Sapiens2NormalPipeline",
    "Sapiens2PointmapPipeline",
    "Sapiens2PosePipeline",
    "Sapiens2SegmentationPipeline",
    "register_pipeline",
    "register_pipelines",
    "unregister_pipeline",
]
