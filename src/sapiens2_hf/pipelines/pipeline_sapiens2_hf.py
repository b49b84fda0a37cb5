# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""transformers pipelines for the five Sapiens2 tasks (layer 0, Hub-shippable).

| pipeline task | result per image |
|---|---|
| `sapiens2-pose` | list of people: `{"bbox", "bbox_score", "keypoints", "scores", "labels"}` |
| `sapiens2-segmentation` | `{"segmentation"}`: `(height, width)` int64 class ids |
| `sapiens2-normal` | `{"normals"}`: `(height, width, 3)` float32 unit normals (camera frame) |
| `sapiens2-pointmap` | `{"pointmap", "depth", "scale"}`: `(height, width, 3)` metric XYZ, `(height, width)` Z |
| `sapiens2-albedo` | `{"albedo"}`: `(height, width, 3)` float32 RGB in [0, 1] |

All arrays are numpy, at the original image size, indexed `[y, x]`. The pipelines are thin: the image processor owns
all the geometry and decoding (duck-typed: any processor with the `Sapiens2HFImageProcessor` API); the pipeline batches
inputs, runs the model and turns tensors into numpy. Decoding runs on the model's device.

This module imports no other part of sapiens2_hf (Hub rule); the default image processor is found through transformers'
`AutoImageProcessor` registry for the model's config class.
"""

from __future__ import annotations

import types
from typing import Any, Iterable, Iterator

import numpy as np
import torch
from transformers import Pipeline


#: Default person detector for the pose pipeline (COCO-trained RT-DETR; transformers-native, Apache-2.0).
DEFAULT_DETECTOR = "PekingU/rtdetr_r50vd"

PIPELINE_TASKS = {
    "sapiens2-pose": "pose",
    "sapiens2-segmentation": "seg",
    "sapiens2-normal": "normal",
    "sapiens2-pointmap": "pointmap",
    "sapiens2-albedo": "albedo",
}


def _is_sapiens2_hf_processor(processor) -> bool:
    """Duck-typed: our processors carry a task policy and the albedo post-processing transformers' stock one lacks."""
    return hasattr(processor, "post_process_albedo_estimation") and hasattr(processor, "task")


def _default_image_processor(model, task: str, like=None):
    """Build the registered Sapiens2 image processor for the model's config class and `task`.

    Args:
        like: an image processor whose settings to keep, typically transformers' stock `Sapiens2ImageProcessor`
            loaded from an official repo's preprocessor_config.json: its input size and normalisation carry over,
            while our class adds the task's official pre- and post-processing policy. Without it (or without a size
            in it) the input size is the model's configured one.
    """
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING

    try:
        entry = IMAGE_PROCESSOR_MAPPING[type(model.config)]
    except KeyError:
        entry = None
    candidates = list(entry.values()) if isinstance(entry, dict) else list(entry or [])
    candidates = [c for c in candidates if c is not None and hasattr(c, "post_process_albedo_estimation")]
    if not candidates:
        raise ValueError(
            f"no Sapiens2 image processor is registered for {type(model.config).__name__}; pass "
            "image_processor=Sapiens2HFImageProcessor(task=...) or `import sapiens2_hf` first."
        )
    kwargs = {}
    if like is not None:
        kwargs = {key: value for key, value in like.to_dict().items()
                  if key not in ("image_processor_type", "processor_class", "_processor_class", "task")}
    kwargs["task"] = task
    size = getattr(model.config, "image_size", None)
    if "size" not in kwargs and isinstance(size, (list, tuple)) and len(size) == 2:
        kwargs["size"] = {"height": int(size[0]), "width": int(size[1])}
    return candidates[0](**kwargs)


def _positive_int(name: str, value: Any, default: int) -> int:
    """`value` as an int >= 1 (`None` gives `default`); 0, negatives, fractions and booleans are errors."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
    return int(value)


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Sapiens2PipelineBase(Pipeline):
    """Shared batching: images are processed in chunks of `batch_size`; results come back in input order."""

    _load_processor = False
    _load_image_processor = None
    _load_feature_extractor = False
    _load_tokenizer = False
    _load_video_processor = False
    task_name: str = ""

    def __init__(self, *args, **kwargs):
        dtype = kwargs.get("dtype")
        super().__init__(*args, **kwargs)
        if isinstance(dtype, str) and dtype != "auto" and hasattr(torch, dtype):
            dtype = getattr(torch, dtype)
        if isinstance(dtype, torch.dtype) and self.model.dtype != dtype:
            self.model.to(dtype)
        self.model.eval()
        if self.image_processor is None or not _is_sapiens2_hf_processor(self.image_processor):
            # No processor, or transformers' stock one (an official repo's preprocessor_config.json): ours, with the
            # task's official policy and the stock one's size and normalisation.
            self.image_processor = _default_image_processor(self.model, self.task_name, like=self.image_processor)
        processor_task = getattr(self.image_processor, "task", None)
        if processor_task != self.task_name:
            raise ValueError(f"the image processor is for task {processor_task!r} but this pipeline runs "
                             f"{self.task_name!r}; pass an image processor with task={self.task_name!r}.")

    # -- parameters ------------------------------------------------------------------------------------------------

    def _sanitize_parameters(self, **kwargs):
        unknown = set(kwargs) - set(self._call_parameters())
        if unknown:
            raise ValueError(f"unknown argument(s) {sorted(unknown)} for {type(self).__name__}; valid: "
                             f"{sorted(self._call_parameters())}.")
        return {}, {}, dict(kwargs)

    def _call_parameters(self) -> tuple[str, ...]:
        return ()

    # -- the three stages (also usable one image at a time through transformers' run_single) ---------------------

    def preprocess(self, inputs, **params):
        images = inputs if isinstance(inputs, list) else [inputs]
        return self.image_processor(images, task=self.task_name)

    def _forward(self, model_inputs, **params):
        pixel_values = model_inputs["pixel_values"].to(self.device, self.model.dtype)
        return {"inputs": model_inputs, "outputs": self.model(pixel_values=pixel_values)}

    def forward(self, model_inputs, **forward_params):
        # keep the outputs on the model's device: decoding runs there (transformers' forward moves them to CPU)
        with self.device_placement(), torch.inference_mode():
            return self._forward(model_inputs, **forward_params)

    def run_single(self, inputs, preprocess_params, forward_params, postprocess_params):
        return self.__call__(inputs, **postprocess_params)

    # -- call ------------------------------------------------------------------------------------------------------

    def __call__(self, inputs, batch_size: int | None = None, **kwargs):
        """Run on one image or a list (or generator) of images: path, URL, PIL image or `(H, W, 3)` uint8 RGB array.

        Returns one result for a single image, a list for a list, and a generator for a generator.
        """
        _, _, params = self._sanitize_parameters(**kwargs)
        params = {**self._postprocess_params, **params}
        # `is None`, not `or`: batch_size=0 is an error, not a request for the default
        batch_size = _positive_int("batch_size", batch_size if batch_size is not None else self._batch_size, 1)
        if isinstance(inputs, types.GeneratorType):
            return self._run(inputs, batch_size, params, single=False)
        single = not isinstance(inputs, (list, tuple))
        results = list(self._run([inputs] if single else list(inputs), batch_size, params, single))
        return results[0] if single else results

    def _run(self, inputs, batch_size, params, single) -> Iterator[Any]:
        for chunk in _chunks(inputs, batch_size):
            yield from self._process_chunk(chunk, params, single)

    def _process_chunk(self, images: list, params: dict, single: bool) -> list:
        model_inputs = self.preprocess(images)
        model_outputs = self.forward(model_inputs)
        return self.postprocess(model_outputs, **params)

    @staticmethod
    def _float(outputs, name):
        value = getattr(outputs, name, None)
        return None if value is None else value.float()


class Sapiens2SegmentationPipeline(_Sapiens2PipelineBase):
    """`pipeline("sapiens2-segmentation")`: 29-class body-part segmentation at the original image size.

    Result per image: `{"segmentation": np.ndarray (height, width) int64}` with class ids in `[0, num_labels)`
    (names in `model.config.id2label`; 0 is background).
    """

    task_name = "seg"

    def postprocess(self, model_outputs, **params):
        inputs, outputs = model_outputs["inputs"], model_outputs["outputs"]
        logits = self._float(outputs, "logits")
        maps = self.image_processor.post_process_semantic_segmentation(
            types.SimpleNamespace(logits=logits), target_sizes=inputs["original_sizes"].tolist())
        return [{"segmentation": m.cpu().numpy()} for m in maps]


class Sapiens2NormalPipeline(_Sapiens2PipelineBase):
    """`pipeline("sapiens2-normal")`: surface normals at the original image size.

    Result per image: `{"normals": np.ndarray (height, width, 3) float32}`, camera frame `(x, y, z)`, unit length
    before the final resize (officially not re-normalised afterwards).
    """

    task_name = "normal"

    def postprocess(self, model_outputs, **params):
        inputs, outputs = model_outputs["inputs"], model_outputs["outputs"]
        results = self.image_processor.post_process_normal_estimation(
            types.SimpleNamespace(normals=self._float(outputs, "normals")),
            source_sizes=inputs["original_sizes"].tolist(), paddings=inputs["padding"])
        return [{"normals": r["normals"].permute(1, 2, 0).cpu().numpy()} for r in results]


class Sapiens2PointmapPipeline(_Sapiens2PipelineBase):
    """`pipeline("sapiens2-pointmap")`: metric pointmap and depth at the original image size.

    Result per image: `{"pointmap": np.ndarray (height, width, 3) float32 XYZ (X right, Y down, Z forward),
    "depth": np.ndarray (height, width) float32 (= Z), "scale": float}` (units of the training depth, metres).
    """

    task_name = "pointmap"

    def postprocess(self, model_outputs, **params):
        inputs, outputs = model_outputs["inputs"], model_outputs["outputs"]
        results = self.image_processor.post_process_pointmap_estimation(
            types.SimpleNamespace(pointmaps=self._float(outputs, "pointmaps"), scales=self._float(outputs, "scales")),
            source_sizes=inputs["original_sizes"].tolist(), paddings=inputs["padding"])
        return [{"pointmap": r["pointmap"].permute(1, 2, 0).cpu().numpy(), "depth": r["depth"].cpu().numpy(),
                 "scale": None if r["scale"] is None else float(r["scale"])} for r in results]


class Sapiens2AlbedoPipeline(_Sapiens2PipelineBase):
    """`pipeline("sapiens2-albedo")`: RGB albedo at the original image size.

    Result per image: `{"albedo": np.ndarray (height, width, 3) float32 RGB in [0, 1]}`.
    """

    task_name = "albedo"

    def postprocess(self, model_outputs, **params):
        inputs, outputs = model_outputs["inputs"], model_outputs["outputs"]
        albedos = self._float(outputs, "albedos")
        if albedos is None:
            albedos = self._float(outputs, "albedo")
        results = self.image_processor.post_process_albedo_estimation(
            types.SimpleNamespace(albedos=albedos), source_sizes=inputs["original_sizes"].tolist(),
            paddings=inputs["padding"])
        return [{"albedo": r["albedo"].permute(1, 2, 0).cpu().numpy()} for r in results]


def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> list[int]:
    """Greedy non-maximum suppression (highest score first); returns kept indices in score order."""
    order = torch.argsort(scores, descending=True, stable=True).tolist()
    keep: list[int] = []
    areas = (boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)
    for i in order:
        ok = True
        for j in keep:
            w = (torch.minimum(boxes[i, 2], boxes[j, 2]) - torch.maximum(boxes[i, 0], boxes[j, 0])).clamp(min=0)
            h = (torch.minimum(boxes[i, 3], boxes[j, 3]) - torch.maximum(boxes[i, 1], boxes[j, 1])).clamp(min=0)
            inter = w * h
            iou = inter / (areas[i] + areas[j] - inter).clamp(min=1e-12)
            if iou > iou_threshold:
                ok = False
                break
        if ok:
            keep.append(i)
    return keep


_XYXY = "[x_min, y_min, x_max, y_max]"


def _nesting_depth(value: Any) -> int:
    """Depth of nested lists / arrays, following first elements: a number is 0, an empty list 1."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return value.ndim
    if isinstance(value, (list, tuple)):
        return 1 + (_nesting_depth(value[0]) if len(value) else 0)
    return 0


def _is_empty(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray, torch.Tensor)) and _nesting_depth(value) >= 1 \
        and len(value) == 0


def _one_image(value: Any, depth_of_one: int, name: str, example: str) -> list:
    """A single image's `value` -> `[value]`, accepting a list of items `example` or the nesting `[example]`."""
    if not isinstance(value, (list, tuple, np.ndarray, torch.Tensor)) or (
            _nesting_depth(value) < depth_of_one and not _is_empty(value)):
        raise ValueError(f"{name}={value!r} is not nested as expected; for one image pass {example} or the "
                         f"per-image nesting [{example}].")
    depth = _nesting_depth(value)
    # `[[...]]` is one image's entry when its only element is itself a list of items (or empty)
    if len(value) == 1 and (depth > depth_of_one or _is_empty(value[0])):
        return [value[0]]
    if depth > depth_of_one:
        raise ValueError(f"{name} for one image is nested {depth} deep with {len(value)} entries at the top; pass "
                         f"{example} or [{example}] (a single entry: the one image).")
    return [value]


def _boxes_per_image(boxes: Any, box_scores: Any, num_images: int, single: bool) -> tuple[list, list | None]:
    """The pose pipeline's `boxes` / `box_scores` -> one entry per image (nesting rules: `Sapiens2PosePipeline`).

    Only the nesting and the scores are checked here; the boxes' values are checked by the image processor
    (`validate_pose_boxes`) once the images' sizes are known.
    """
    if single:
        boxes = _one_image(boxes, 2, "boxes", f"[{_XYXY}, ...]")
        if box_scores is not None:
            box_scores = _one_image(box_scores, 1, "box_scores", "[score, ...]")
    else:
        if not isinstance(boxes, (list, tuple, np.ndarray, torch.Tensor)) or len(boxes) != num_images:
            count = len(boxes) if hasattr(boxes, "__len__") else "no"
            raise ValueError(f"boxes has {count} entries for {num_images} images; pass one list of {_XYXY} boxes "
                             "per image (an empty list for an image without people).")
        for i, entry in enumerate(boxes):
            if _nesting_depth(entry) < 2 and not _is_empty(entry):
                raise ValueError(f"boxes[{i}] = {entry!r} is not a list of boxes; with a list of images pass one "
                                 f"list of boxes per image, e.g. [[{_XYXY}], []].")
        if box_scores is not None and (not isinstance(box_scores, (list, tuple, np.ndarray, torch.Tensor))
                                       or len(box_scores) != num_images):
            count = len(box_scores) if hasattr(box_scores, "__len__") else "no"
            raise ValueError(f"box_scores has {count} entries for {num_images} images; pass one list of scores per "
                             "image, nested like boxes.")
    if box_scores is None:
        return list(boxes), None
    scores = []
    for i, (image_boxes, image_scores) in enumerate(zip(boxes, box_scores)):
        try:
            values = np.asarray(image_scores.detach().cpu() if isinstance(image_scores, torch.Tensor)
                                else image_scores, dtype=np.float64)
        except (TypeError, ValueError):
            values = None
        if values is None or values.ndim != 1 and values.size:
            raise ValueError(f"box_scores for image {i} is {image_scores!r}; pass one number per box, nested like "
                             "boxes.")
        if values.size != len(image_boxes):
            raise ValueError(f"box_scores for image {i} has {values.size} score(s) for {len(image_boxes)} box(es); "
                             "pass one score per box, nested like boxes.")
        if not np.isfinite(values).all():
            raise ValueError(f"box_scores for image {i} holds non-finite values {values.tolist()}; scores must be "
                             "finite numbers.")
        scores.append(values.reshape(-1).tolist())
    return list(boxes), scores


class Sapiens2PosePipeline(_Sapiens2PipelineBase):
    """`pipeline("sapiens2-pose")`: top-down 308-keypoint pose estimation.

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
        detector: used when `boxes` is not given: a transformers object-detection pipeline, a model id / folder for
            one (default `DEFAULT_DETECTOR`, which needs the Hub or a local copy), or a callable with the same output
            format. If it cannot be loaded, the error names the default detector, `boxes=` and `detector=`.
        detector_threshold (`float`, defaults to 0.3), person_label (`str`, defaults to `"person"`),
            nms_threshold (`float`, defaults to 0.3): the official demo's filtering.
        fallback_to_full_image (`bool`, defaults to `True`): official demo behaviour when no person is detected:
            the whole image becomes one box (its `bbox_score` is 0.0).
        flip_test (`bool`, defaults to `True`): the official flip test (averaged heatmaps).
        batch_size (`int` >= 1): number of images per chunk; the crops of a chunk are batched `crop_batch_size`
            (`int` >= 1, default: `batch_size`) at a time.

    Result per image: a list of people, in box order, each `{"bbox": np.ndarray (4,) float32 xyxy, "bbox_score":
    float, "keypoints": np.ndarray (num_keypoints, 2) float64 (x, y) image pixels, "scores": np.ndarray
    (num_keypoints,) float32 heatmap maxima, "labels": list[str] keypoint names}`.
    """

    task_name = "pose"

    def __init__(self, *args, detector=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._detector = detector

    def _call_parameters(self):
        return ("boxes", "box_scores", "detector", "detector_threshold", "person_label", "nms_threshold",
                "fallback_to_full_image", "flip_test", "crop_batch_size")

    def _run(self, inputs, batch_size, params, single) -> Iterator[Any]:
        boxes = params.get("boxes")
        scores = params.get("box_scores")
        if scores is not None and boxes is None:
            raise ValueError("box_scores= needs boxes=; detected boxes come with the detector's scores.")
        if boxes is not None and not isinstance(inputs, list):
            raise ValueError("boxes= needs a list of images (not a generator), one list of boxes per image.")
        if boxes is not None:
            boxes, scores = _boxes_per_image(boxes, scores, len(inputs), single)
        crop_batch_size = _positive_int("crop_batch_size", params.get("crop_batch_size"), batch_size)
        start = 0
        for chunk in _chunks(inputs, batch_size):
            chunk_params = dict(params, crop_batch_size=crop_batch_size)
            if boxes is not None:
                chunk_params["boxes"] = boxes[start : start + len(chunk)]
                chunk_params["box_scores"] = None if scores is None else scores[start : start + len(chunk)]
            yield from self._process_chunk(chunk, chunk_params, single, first_image=start)
            start += len(chunk)

    def _get_detector(self, detector):
        detector = detector if detector is not None else self._detector
        if detector is None or isinstance(detector, str):
            from transformers import pipeline as make_pipeline

            name = detector or DEFAULT_DETECTOR
            try:
                detector = make_pipeline("object-detection", model=name, device=self.device)
            except (OSError, ValueError, ImportError) as error:
                message = (
                    f"no person boxes were given, so the pose pipeline needs a person detector, but {name!r} could "
                    f"not be loaded ({type(error).__name__}: {error}). Either pass the boxes (boxes=[[x_min, y_min, "
                    "x_max, y_max], ...]; CLI: --boxes BOXES.json), or a detector available here: "
                    "detector=<local folder of an object-detection model, an object-detection pipeline or a callable> "
                    f"(CLI: --detector FOLDER). The default detector is {DEFAULT_DETECTOR!r}; it needs Hub access "
                    "once (or a copy in the Hugging Face cache) when HF_HUB_OFFLINE is set or the machine is offline."
                )
                raise (OSError(message) if isinstance(error, OSError) else ValueError(message)) from error
            self._detector = detector
        return detector

    def _detect(self, images: list[np.ndarray], params) -> tuple[list, list]:
        from PIL import Image

        detector = self._get_detector(params.get("detector"))
        threshold = float(params.get("detector_threshold", 0.3))
        person = str(params.get("person_label", "person")).lower()
        nms_threshold = float(params.get("nms_threshold", 0.3))
        boxes, scores = [], []
        for image in images:
            detections = detector(Image.fromarray(image), threshold=threshold)
            kept = [d for d in detections if str(d["label"]).lower() == person and float(d["score"]) > threshold]
            if kept:
                xyxy = torch.tensor([[d["box"]["xmin"], d["box"]["ymin"], d["box"]["xmax"], d["box"]["ymax"]]
                                     for d in kept], dtype=torch.float32)
                score = torch.tensor([float(d["score"]) for d in kept], dtype=torch.float32)
                # a detector may return an empty (zero-width) box; it has no person to crop
                usable = (torch.isfinite(xyxy).all(dim=1) & (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
                          & (xyxy[:, 2] > 0) & (xyxy[:, 3] > 0) & (xyxy[:, 0] < image.shape[1])
                          & (xyxy[:, 1] < image.shape[0]))
                xyxy, score = xyxy[usable], score[usable]
            if kept and len(xyxy):
                keep = _nms(xyxy, score, nms_threshold)
                boxes.append(xyxy[keep].tolist())
                scores.append(score[keep].tolist())
            elif params.get("fallback_to_full_image", True):
                boxes.append([[0.0, 0.0, float(image.shape[1]), float(image.shape[0])]])
                scores.append([0.0])
            else:
                boxes.append([])
                scores.append([])
        return boxes, scores

    def preprocess(self, inputs, boxes=None, **params):
        images = inputs if isinstance(inputs, list) else [inputs]
        return self.image_processor(images, boxes=boxes, box_format="xyxy", task="pose")

    def _process_chunk(self, images: list, params: dict, single: bool, first_image: int = 0) -> list:
        load = getattr(self.image_processor, "load_image_rgb", None)
        arrays = [load(image) for image in images] if load is not None else images
        boxes, scores = params.get("boxes"), params.get("box_scores")
        if boxes is None:
            boxes, scores = self._detect(arrays, params)
        else:
            validate = getattr(self.image_processor, "validate_pose_boxes", None)
            if validate is not None:
                # checked here, before any crop, so that errors give the images' numbers in the whole call
                validate(boxes, "xyxy", [a.shape[:2] for a in arrays], range(first_image, first_image + len(arrays)))
        if scores is None:
            scores = [[1.0] * len(b) for b in boxes]
        model_inputs = self.preprocess(arrays, boxes=boxes)
        crop_batch_size = _positive_int("crop_batch_size", params.get("crop_batch_size"), len(arrays))
        flip_test = bool(params.get("flip_test", True))
        pixel_values = model_inputs["pixel_values"]
        heatmaps, heatmaps_flipped = [], []
        with self.device_placement(), torch.inference_mode():
            for start in range(0, pixel_values.shape[0], crop_batch_size):
                batch = pixel_values[start : start + crop_batch_size].to(self.device, self.model.dtype)
                heatmaps.append(self.model(pixel_values=batch).heatmaps.float())
                if flip_test:
                    heatmaps_flipped.append(self.model(pixel_values=batch.flip(-1)).heatmaps.float())
        model_outputs = {
            "inputs": model_inputs,
            "heatmaps": torch.cat(heatmaps) if heatmaps else None,
            "heatmaps_flipped": torch.cat(heatmaps_flipped) if heatmaps_flipped else None,
            "box_scores": scores,
            "num_images": len(arrays),
        }
        return self.postprocess(model_outputs, **params)

    def _keypoint_names(self, num_keypoints: int) -> list[str]:
        id2label = getattr(self.model.config, "id2label", None) or {}
        names = [id2label.get(i, id2label.get(str(i))) for i in range(num_keypoints)]
        if len(id2label) == num_keypoints and all(n and not str(n).startswith("LABEL_") for n in names):
            return [str(n) for n in names]
        return list(self.image_processor.keypoint_names(num_keypoints))

    def postprocess(self, model_outputs, **params):
        inputs = model_outputs["inputs"]
        num_images = model_outputs["num_images"]
        if model_outputs["heatmaps"] is None:
            return [[] for _ in range(num_images)]
        heatmaps = model_outputs["heatmaps"]
        flipped = model_outputs["heatmaps_flipped"]
        extra = {}
        if flipped is not None:
            extra["outputs_on_flipped_input"] = types.SimpleNamespace(heatmaps=flipped)
            extra["flip_indices"] = self.image_processor.get_flip_indices(
                heatmaps.shape[1], getattr(self.model.config, "flip_pairs", None))
        decoded = self.image_processor.post_process_pose_estimation(
            types.SimpleNamespace(heatmaps=heatmaps), bbox_center=inputs["bbox_center"],
            bbox_scale=inputs["bbox_scale"], image_index=inputs["image_index"], boxes_xyxy=inputs["boxes_xyxy"],
            source_sizes=inputs["original_sizes"].tolist(), **extra)
        names = self._keypoint_names(heatmaps.shape[1])
        results = []
        for image, people in enumerate(decoded):
            image_scores = model_outputs["box_scores"][image]
            results.append([
                {"bbox": person["bbox"].cpu().numpy().astype(np.float32), "bbox_score": float(image_scores[k]),
                 "keypoints": person["keypoints"].cpu().numpy(), "scores": person["scores"].cpu().numpy(),
                 "labels": names}
                for k, person in enumerate(people)
            ])
        return results


PIPELINE_CLASSES = {
    "sapiens2-pose": Sapiens2PosePipeline,
    "sapiens2-segmentation": Sapiens2SegmentationPipeline,
    "sapiens2-normal": Sapiens2NormalPipeline,
    "sapiens2-pointmap": Sapiens2PointmapPipeline,
    "sapiens2-albedo": Sapiens2AlbedoPipeline,
}


def register_pipelines(model_classes: dict[str, Any] | None = None) -> None:
    """Register the five pipelines with transformers' pipeline registry (idempotent).

    Args:
        model_classes: model class (or tuple of classes) used to load a model from a folder / Hub id, keyed by short
            task (`"pose"`, `"seg"`, `"normal"`, `"pointmap"`, `"albedo"`) or pipeline task. Defaults to transformers'
            Auto classes for pose, segmentation, normal and pointmap (our config must be registered with them);
            albedo has no transformers Auto class, so pass it (e.g. `{"albedo": AutoModelForAlbedoEstimation}`).
    """
    import transformers
    from transformers.pipelines import PIPELINE_REGISTRY

    defaults = {
        "pose": getattr(transformers, "AutoModelForPoseEstimation", None),
        "seg": getattr(transformers, "AutoModelForSemanticSegmentation", None),
        "normal": getattr(transformers, "AutoModelForNormalEstimation", None),
        "pointmap": getattr(transformers, "AutoModelForPointmapEstimation", None),
        "albedo": None,
    }
    model_classes = dict(model_classes or {})
    for pipeline_task, short in PIPELINE_TASKS.items():
        model_class = model_classes.get(short, model_classes.get(pipeline_task, defaults[short]))
        current = PIPELINE_REGISTRY.supported_tasks.get(pipeline_task)
        wanted_models = () if model_class is None else (model_class if isinstance(model_class, tuple) else (model_class,))
        if current is not None and current.get("impl") is PIPELINE_CLASSES[pipeline_task] \
                and tuple(current.get("pt", ())) == wanted_models:
            continue
        PIPELINE_REGISTRY.register_pipeline(
            pipeline_task, pipeline_class=PIPELINE_CLASSES[pipeline_task], pt_model=wanted_models or None,
            type="image",
        )


__all__ = [
    "DEFAULT_DETECTOR",
    "PIPELINE_CLASSES",
    "PIPELINE_TASKS",
    "Sapiens2AlbedoPipeline",
    "Sapiens2NormalPipeline",
    "Sapiens2PointmapPipeline",
    "Sapiens2PosePipeline",
    "Sapiens2SegmentationPipeline",
    "register_pipelines",
]
