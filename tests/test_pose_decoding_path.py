"""One decoding path for pose: training's evaluation decodes the same heatmaps into the same keypoints as the pose
pipeline, because both call the processor ops (`flip_test_average`, `decode_udp_heatmaps`, `crop_to_image`); the
training-log accuracy takes its arg-max from the same ops."""

import numpy as np
import pytest
import torch
from model_folders import tiny_pose_pipeline

from sapiens2_hf.metrics.pose import heatmap_argmax as metrics_argmax
from sapiens2_hf.modeling.sapiens2_label_data import POSE_FLIP_PAIRS
from sapiens2_hf.modeling.sapiens2_processing_ops import flip_pairs_to_indices, heatmap_argmax
from sapiens2_hf.training.evaluation import TaskEvaluator, flip_test_heatmaps

pytestmark = pytest.mark.usefixtures("one_thread")


def _evaluation_keypoints(model, inputs, flip_indices) -> torch.Tensor:
    """What `TaskEvaluator` reports for the processor's crops, flip test on (as `Sapiens2Trainer` evaluates)."""
    with torch.no_grad():
        outputs = model(pixel_values=inputs["pixel_values"])
        heatmaps = flip_test_heatmaps(model, inputs["pixel_values"], outputs.heatmaps, flip_indices)
    num_crops, num_keypoints = heatmaps.shape[:2]
    batch = {
        "pixel_values": inputs["pixel_values"],
        "labels": torch.zeros_like(heatmaps), "label_weights": torch.zeros(num_crops, num_keypoints),
        "crop_center": inputs["bbox_center"], "crop_scale": inputs["bbox_scale"],
        "gt_keypoints": torch.zeros(num_crops, num_keypoints, 3), "gt_bbox": torch.ones(num_crops, 4),
        "gt_area": torch.ones(num_crops), "image_id": torch.zeros(num_crops), "instance_id": torch.arange(num_crops),
    }
    return TaskEvaluator("pose").batch_statistics(outputs, batch, heatmaps=heatmaps)["pred_keypoints"]


def _one_crop_at_a_time(model) -> None:
    """The model runs each crop of a batch alone: the pipeline batches a crop with its flipped copy and evaluation
    runs them apart, and the kernels of other batch sizes round differently. A random tiny model's heatmaps are
    nearly flat, so that rounding alone can move an arg-max by whole heatmap pixels (81 image pixels under
    ATEN_CPU_CAPABILITY=avx2); per-crop runs give both paths the same heatmaps, and the decoding is what is compared."""
    forward = model.forward

    def per_crop(pixel_values=None, **kwargs):
        outputs = [forward(pixel_values=pixel_values[i:i + 1], **kwargs) for i in range(len(pixel_values))]
        return type(outputs[0])(heatmaps=torch.cat([output.heatmaps for output in outputs]))

    model.forward = per_crop


def test_evaluation_decodes_the_pipelines_keypoints():
    pipe = tiny_pose_pipeline()
    _one_crop_at_a_time(pipe.model)
    image = np.random.default_rng(0).integers(0, 256, (96, 72, 3), dtype=np.uint8)
    boxes = [[4.0, 6.0, 60.0, 90.0], [10.0, 2.0, 50.0, 70.0]]
    people = pipe(image, boxes=boxes, flip_test=True)
    from_pipeline = torch.tensor(np.stack([person["keypoints"] for person in people]), dtype=torch.float64)
    inputs = pipe.image_processor(image, boxes=[boxes], box_format="xyxy", return_tensors="pt")
    flip_indices = flip_pairs_to_indices(POSE_FLIP_PAIRS, from_pipeline.shape[1])
    from_evaluation = _evaluation_keypoints(pipe.model, inputs, flip_indices)
    # the same heatmaps decoded by both paths: float rounding of the decode's own arithmetic is all that may differ
    difference = (from_evaluation - from_pipeline).abs().max().item()
    assert difference < 1e-3, difference
    # control: a flip test without the left/right swap decodes other keypoints, far beyond that tolerance
    wrong = _evaluation_keypoints(pipe.model, inputs, list(range(from_pipeline.shape[1])))
    assert (wrong - from_pipeline).abs().max().item() > 0.1


def test_training_accuracy_uses_the_processors_argmax():
    heatmaps = torch.zeros(1, 2, 4, 5)
    heatmaps[0, 0, 1, 3] = heatmaps[0, 0, 2, 0] = 1.0  # a tie: the first maximum in row-major order
    heatmaps[0, 1] = -1.0  # no positive maximum: (-1, -1)
    assert metrics_argmax is heatmap_argmax
    locations, scores = heatmap_argmax(heatmaps)
    assert locations.tolist() == [[[3.0, 1.0], [-1.0, -1.0]]] and scores.tolist() == [[1.0, -1.0]]
