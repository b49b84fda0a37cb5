"""Our image processor against transformers' own `Sapiens2ImageProcessor` where both have the same method: a
transformers user gets transformers' return types, keys and shapes, and the inputs transformers accepts.

Values are compared only where both processors compute the same thing (the post-processing resizes, an image already
at the input size); elsewhere our official geometry and decoder differ from transformers' by design.
"""

import types

import numpy as np
import pytest
import torch
import transformers
from PIL import Image
from transformers.image_transforms import convert_to_rgb
from transformers.modeling_outputs import SemanticSegmenterOutput
from transformers.models.sapiens2.modeling_sapiens2 import (
    Sapiens2ImageMattingOutput,
    Sapiens2NormalEstimatorOutput,
    Sapiens2PointmapEstimatorOutput,
    Sapiens2PoseEstimatorOutput,
)

from sapiens2_hf.processing import Sapiens2HFImageProcessor

SIZE = {"height": 32, "width": 24}


def _theirs(**fields):
    return transformers.Sapiens2ImageProcessor(size=SIZE, **fields)


def _ours(task, **fields):
    return Sapiens2HFImageProcessor(task=task, size=SIZE, **fields)


def _structure(value):
    """Types, keys, shapes and dtypes of a post-processing result, recursively (no values)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, (list, tuple)):
        return [_structure(item) for item in value]
    if hasattr(value, "keys"):
        return (type(value), {key: _structure(value[key]) for key in value.keys()})
    return value


# ------------------------------------------------------------------------------------------------------------------
# semantic segmentation: transformers' output class
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target_sizes", [[(50, 40), (33, 17)], [(50, 40), (50, 40)], None,
                                          torch.tensor([[50, 40], [33, 17]])])
def test_segmentation_returns_transformers_types_keys_and_shapes(target_sizes):
    # the class is new in transformers 5.24 (before it, our processor returns its own class of that name)
    output_class = pytest.importorskip("transformers.image_processing_outputs").SemanticSegmentationPostProcessorOutput
    logits = torch.randn(2, 5, 32, 24, generator=torch.Generator().manual_seed(0))
    outputs = SemanticSegmenterOutput(logits=logits)
    ours = _ours("seg").post_process_semantic_segmentation(outputs, target_sizes, return_segmentation_scores=True)
    # transformers 5.24's method fails on a tensor of sizes (F.interpolate gets numpy sizes): it gets the list
    listed = target_sizes.tolist() if isinstance(target_sizes, torch.Tensor) else target_sizes
    theirs = _theirs().post_process_semantic_segmentation(outputs, listed, return_segmentation_scores=True)
    assert _structure(ours) == _structure(theirs)
    for mine, reference in zip(ours, theirs):
        assert isinstance(mine, output_class)
        # key access (what our pipelines and tests use) and attribute access (transformers' documented one)
        assert mine["segmentation"] is mine.segmentation and mine["segmentation_scores"] is mine.segmentation_scores
        assert torch.allclose(mine.segmentation_scores, reference.segmentation_scores, atol=1e-5)
        assert torch.equal(mine.segmentation, reference.segmentation)
    # without scores both return bare class maps
    plain = _ours("seg").post_process_semantic_segmentation(outputs, target_sizes)
    assert _structure(plain) == _structure(_theirs().post_process_semantic_segmentation(outputs, listed))
    assert all(torch.equal(a, b.segmentation) for a, b in zip(plain, ours))
    # control: the old plain dicts have the keys but neither the type nor attribute access
    old = [{"segmentation": m.segmentation, "segmentation_scores": m.segmentation_scores} for m in ours]
    assert _structure(old) != _structure(theirs) and not hasattr(old[0], "segmentation")


def test_segmentation_output_feeds_the_foreground_mask():
    logits = torch.randn(1, 3, 8, 6, generator=torch.Generator().manual_seed(1))
    processor = _ours("seg")
    (result,) = processor.post_process_semantic_segmentation(logits, return_segmentation_scores=True)
    assert torch.equal(processor.foreground_mask_from_segmentation(result), result.segmentation > 0)


# ------------------------------------------------------------------------------------------------------------------
# matting: alpha is (1, height, width)
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target_sizes", [[(45, 25), (45, 25)], [(45, 25), (20, 30)], None])
def test_matting_returns_transformers_keys_shapes_and_values(target_sizes):
    maps = torch.rand(2, 4, 32, 24, generator=torch.Generator().manual_seed(2))
    outputs = Sapiens2ImageMattingOutput(foregrounds=maps[:, :3], alphas=maps[:, 3:])
    ours = _ours("matting").post_process_image_matting(outputs, target_sizes=target_sizes)
    theirs = _theirs().post_process_image_matting(outputs, target_sizes=target_sizes)
    assert _structure(ours) == _structure(theirs)
    for mine, reference in zip(ours, theirs):
        assert mine["alpha"].shape[0] == 1 and mine["composite"] is None
        assert torch.equal(mine["alpha"], reference["alpha"])
        assert torch.equal(mine["foreground"], reference["foreground"])
    # with a background: the composite has their shape and dtype (ours rounds, theirs truncates: one grey level)
    background = np.random.default_rng(3).integers(0, 256, (40, 30, 3), dtype=np.uint8)
    ours = _ours("matting").post_process_image_matting(outputs, target_sizes=target_sizes, backgrounds=background)
    theirs = _theirs().post_process_image_matting(outputs, target_sizes=target_sizes, backgrounds=background)
    assert _structure(ours) == _structure(theirs)
    for mine, reference in zip(ours, theirs):
        assert (mine["composite"].int() - reference["composite"].int()).abs().max() <= 1
    # control: the old (height, width) alpha does not have their structure
    old = [{**result, "alpha": result["alpha"][0]} for result in ours]
    assert _structure(old) != _structure(theirs)


# ------------------------------------------------------------------------------------------------------------------
# inputs: RGBA images and per-call normalisation
# ------------------------------------------------------------------------------------------------------------------


def _rgba():
    return np.random.default_rng(4).integers(0, 256, (32, 24, 4), dtype=np.uint8)  # already at the input size


@pytest.mark.parametrize("kind", ["numpy", "pil", "tensor"])
def test_rgba_with_do_convert_rgb_composites_over_white_like_transformers(kind):
    rgba = _rgba()
    image = {"numpy": rgba, "pil": Image.fromarray(rgba, "RGBA"),
             "tensor": torch.from_numpy(rgba).permute(2, 0, 1).contiguous()}[kind]
    processor = _ours("seg")
    ours = processor(image, do_convert_rgb=True)["pixel_values"]
    # the pixels transformers' processor makes of it (PIL's compositing for PIL images, torch's for the others),
    # through our geometry: the same
    if kind == "pil":
        composited = convert_to_rgb(image, return_numpy=True)
    else:
        composited = _theirs().convert_to_rgb(torch.from_numpy(rgba).permute(2, 0, 1)).permute(1, 2, 0).numpy()
    assert torch.equal(ours, processor(composited)["pixel_values"])
    # and at the input size (no resize on either side) their pixel_values, up to float rounding
    theirs = _theirs()(image, do_convert_rgb=True, return_tensors="pt")["pixel_values"]
    assert ours.shape == theirs.shape and torch.allclose(ours, theirs, atol=1e-5)
    # the field set on the processor (a saved preprocessor_config.json) does the same
    assert torch.equal(_ours("seg", do_convert_rgb=True)(image)["pixel_values"], ours)
    # control: by default the alpha channel is dropped (as OpenCV reads a file), which differs
    dropped = processor(image)["pixel_values"]
    assert torch.equal(dropped, processor(np.ascontiguousarray(rgba[..., :3]))["pixel_values"])
    assert not torch.allclose(dropped, theirs, atol=1e-3)


def test_palette_transparency_is_composited_like_transformers():
    palette = Image.fromarray(np.random.default_rng(8).integers(0, 4, (32, 24), dtype=np.uint8), "P")
    palette.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30] + [0] * 756)
    palette.info["transparency"] = 2  # blue is transparent: white once composited
    ours = _ours("seg")(palette, do_convert_rgb=True)["pixel_values"]
    assert torch.equal(ours, _ours("seg")(convert_to_rgb(palette, return_numpy=True))["pixel_values"])
    # control: by default the palette colour is kept
    assert not torch.equal(ours, _ours("seg")(palette)["pixel_values"])


def test_float_rgba_is_scaled_before_compositing():
    rgba = _rgba()
    ours = _ours("seg")(rgba.astype(np.float32) / 255.0, do_convert_rgb=True)["pixel_values"]
    assert torch.equal(ours, _ours("seg")(rgba, do_convert_rgb=True)["pixel_values"])


@pytest.mark.parametrize("fields", [
    {"image_mean": [0.4, 0.5, 0.6], "image_std": [0.2, 0.3, 0.25]},
    {"image_mean": 0.5, "image_std": 0.5},
    {"do_normalize": False},
    {"do_rescale": False, "image_mean": [100.0, 110.0, 120.0], "image_std": [50.0, 55.0, 60.0]},
])
def test_per_call_normalisation_matches_transformers(fields):
    image = np.ascontiguousarray(_rgba()[..., :3])
    processor = _ours("normal")
    ours = processor(image, **fields)["pixel_values"]
    theirs = _theirs()(image, return_tensors="pt", **fields)["pixel_values"]
    assert ours.shape == theirs.shape and torch.allclose(ours, theirs, rtol=1e-6, atol=1e-5)
    # the same as setting the fields on the processor; the processor itself is unchanged
    assert torch.equal(ours, _ours("normal", **fields)(image)["pixel_values"])
    default = processor(image)["pixel_values"]
    assert torch.allclose(default, _theirs()(image, return_tensors="pt")["pixel_values"], atol=1e-5)
    # control: the override changes the result
    assert not torch.allclose(default, ours, atol=1e-3)


def test_per_call_normalisation_checks_its_values():
    with pytest.raises(ValueError, match="image_mean has 4 values"):
        _ours("seg")(np.zeros((8, 8, 3), np.uint8), image_mean=[0.5] * 4)
    with pytest.raises(ValueError, match="unsupported argument"):
        _ours("seg")(np.zeros((8, 8, 3), np.uint8), resample=0)


# ------------------------------------------------------------------------------------------------------------------
# the other post-processing methods both classes have: same keys (ours may add some) and shapes
# ------------------------------------------------------------------------------------------------------------------


def _common(ours, theirs):
    """`ours` restricted to the keys of `theirs`, item by item (our extra keys are additions)."""
    if isinstance(theirs, list):
        return [_common(a, b) for a, b in zip(ours, theirs)] + ours[len(theirs):]
    return {key: ours[key] for key in theirs if key in ours} | {key: None for key in theirs if key not in ours}


@pytest.mark.parametrize("sizes", [{}, {"source_sizes": [(60, 30), (20, 40)]},
                                   {"source_sizes": [(60, 30), (20, 40)], "target_sizes": [(15, 10), (7, 9)]},
                                   {"target_sizes": [(15, 10), (7, 9)]}])
def test_normal_and_pointmap_post_processing_have_transformers_structure(sizes):
    generator = torch.Generator().manual_seed(5)
    normals = Sapiens2NormalEstimatorOutput(normals=torch.randn(2, 3, 32, 24, generator=generator))
    ours = _ours("normal").post_process_normal_estimation(normals, **sizes)
    theirs = _theirs(do_pad=True).post_process_normal_estimation(normals, **sizes)
    assert _structure(ours) == _structure(theirs)
    pointmaps = Sapiens2PointmapEstimatorOutput(pointmaps=torch.randn(2, 3, 32, 24, generator=generator),
                                                scales=torch.rand(2, 1, generator=generator) + 0.5)
    ours = _ours("pointmap").post_process_pointmap_estimation(pointmaps, **sizes)
    theirs = _theirs(do_pad=True).post_process_pointmap_estimation(pointmaps, **sizes)
    assert _structure(_common(ours, theirs)) == _structure(theirs)


def test_pose_post_processing_has_transformers_structure():
    heatmaps = torch.rand(3, 17, 8, 6, generator=torch.Generator().manual_seed(6))
    boxes = [[[10.0, 20.0, 30.0, 50.0], [40.0, 5.0, 20.0, 25.0]], [[0.0, 0.0, 64.0, 48.0]]]  # COCO xywh
    kwargs = {"threshold": 0.5, "source_sizes": [(100, 80), (60, 70)], "target_sizes": [(50, 40), (60, 70)]}
    outputs = Sapiens2PoseEstimatorOutput(heatmaps=heatmaps)
    ours = _ours("pose").post_process_pose_estimation(outputs, boxes, box_format="xywh")
    theirs = _theirs().post_process_pose_estimation(outputs, boxes)
    # keys and shapes; our keypoints are float64 (documented), theirs float32
    as_float32 = [[{**person, "keypoints": person["keypoints"].float()} for person in image] for image in ours]
    assert _structure(as_float32) == _structure(theirs)
    assert all(person["bbox"].tolist() == reference["bbox"].tolist()
               for image, references in zip(ours, theirs) for person, reference in zip(image, references))
    # with a threshold and rescaling the kept keypoints may differ (the decoders differ), the keys do not
    ours = _ours("pose").post_process_pose_estimation(outputs, boxes, box_format="xywh", **kwargs)
    theirs = _theirs().post_process_pose_estimation(outputs, boxes, **kwargs)
    assert [[sorted(p) for p in image] for image in ours] == [[sorted(p) for p in image] for image in theirs]


def test_depth_post_processing_has_transformers_depth_structure():
    """transformers' Sapiens2 processor has no depth method; ours follows the depth processors' (DPT's) format."""
    depth = torch.rand(2, 32, 24, generator=torch.Generator().manual_seed(7))
    sizes = [(60, 30), (20, 40)]
    theirs = transformers.DPTImageProcessor().post_process_depth_estimation(
        types.SimpleNamespace(predicted_depth=depth), target_sizes=sizes)
    pointmaps = Sapiens2PointmapEstimatorOutput(pointmaps=torch.rand(2, 3, 32, 24) + 0.5, scales=torch.ones(2, 1))
    ours = _ours("pointmap").post_process_depth_estimation(pointmaps, target_sizes=sizes)
    assert _structure(_common(ours, theirs)) == _structure(theirs)
