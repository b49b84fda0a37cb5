"""Dense outputs as users consume them: person-foreground masking (given masks and a segmentation model), metric
pointmaps for a known camera (focal length, intrinsics), the depth image with a colour bar, and the CLI options."""

import json
import types

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset
from transformers import pipeline
from transformers.modeling_outputs import SemanticSegmenterOutput

import sapiens2_hf
from sapiens2_hf import visualization as vis
from sapiens2_hf.cli.main import main
from sapiens2_hf.pipelines import PIPELINE_CLASSES
from sapiens2_hf.processing import Sapiens2HFImageProcessor
from sapiens2_hf.visualization import drawing


pytestmark = pytest.mark.usefixtures("one_thread")

MODEL_CLASSES = {
    "seg": sapiens2_hf.Sapiens2ForSemanticSegmentation,
    "normal": sapiens2_hf.Sapiens2ForNormalEstimation,
    "pointmap": sapiens2_hf.Sapiens2ForPointmapEstimation,
    "albedo": sapiens2_hf.Sapiens2ForAlbedoEstimation,
}
PIPELINE_TASK = {"seg": "sapiens2-segmentation", "normal": "sapiens2-normal", "pointmap": "sapiens2-pointmap",
                 "albedo": "sapiens2-albedo"}
# result fields the mask applies to, and their background value
MASKED = {"normal": {"normals": 0.0}, "pointmap": {"pointmap": np.nan, "depth": np.nan}, "albedo": {"albedo": 0.0}}


def _model(task, seed=0):
    # fp32 RoPE: batch composition alone would flip bf16 roundings and hide what the batching checks look at
    torch.manual_seed(seed)
    return MODEL_CLASSES[task](sapiens2_hf.tiny_config(task, rope_dtype="float32")).eval()


def _pipe(task, **kwargs):
    return pipeline(PIPELINE_TASK[task], model=_model(task), device="cpu", **kwargs)


def _images(seed=0, shapes=((70, 50, 3), (40, 90, 3), (64, 48, 3))):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for shape in shapes]


def _masks(images, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.random(image.shape[:2]) > 0.4 for image in images]


def _background_is(values, fill):
    return np.isnan(values).all() if np.isnan(fill) else (values == fill).all()


class _BrightSeg(sapiens2_hf.Sapiens2ForSemanticSegmentation):
    """Labels a pixel as a body part (class 1) where the input is brighter than mid-grey, background elsewhere: a
    segmenter whose foreground is known."""

    def forward(self, pixel_values, **kwargs):
        brightness = pixel_values.float().mean(1, keepdim=True)  # normalised: 0 is about mid-grey
        logits = torch.full((pixel_values.shape[0], self.config.num_labels, *pixel_values.shape[-2:]), -10.0)
        logits[:, 0:1] = 0.0
        logits[:, 1:2] = brightness * 10.0
        return SemanticSegmenterOutput(logits=logits)


def _bright_seg():
    torch.manual_seed(0)
    return _BrightSeg(sapiens2_hf.tiny_config("seg", rope_dtype="float32")).eval()


def _half_bright(shape, seed=0):
    """An image whose left part is bright and right part dark (with noise), so its foreground is non-trivial."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 60, shape, dtype=np.uint8)
    image[:, : shape[1] * 2 // 5] += 190
    return image


# ----------------------------------------------------------------------------------------------------------------
# the image processor's mask helpers
# ----------------------------------------------------------------------------------------------------------------


def test_foreground_from_segmentation_and_mask_forms(tmp_path):
    processor = Sapiens2HFImageProcessor(task="normal")
    seg = np.array([[0, 1, 28], [0, 0, 5]])
    expected = np.array([[False, True, True], [False, False, True]])
    assert np.array_equal(processor.foreground_mask_from_segmentation(seg), expected)
    assert np.array_equal(processor.foreground_mask_from_segmentation({"segmentation": seg}), expected)
    as_tensor = processor.foreground_mask_from_segmentation(torch.from_numpy(seg))
    assert isinstance(as_tensor, torch.Tensor) and torch.equal(as_tensor, torch.from_numpy(expected))
    # every accepted form of a mask reads as the same bool array
    grey = Image.fromarray(expected.astype(np.uint8) * 255)
    grey.save(tmp_path / "mask.png")
    forms = [expected, expected.astype(np.float32), expected.astype(np.uint8), expected.astype(np.uint8) * 255,
             torch.from_numpy(expected), expected[..., None], expected[None], grey, grey.convert("1"),
             tmp_path / "mask.png", str(tmp_path / "mask.png")]
    for form in forms:
        mask = processor.validate_foreground_mask(form, (2, 3))
        assert mask.dtype == bool and np.array_equal(mask, expected), type(form)
    with pytest.raises(ValueError, match=r"is 2x3 \(height x width\) but the image is 3x2"):
        processor.validate_foreground_mask(expected, (3, 2))
    for bad, message in ((expected * 0.5, "values other than 0 and 1"), (np.full((2, 3), np.nan), "NaN"),
                         (np.zeros((2, 3, 2)), "shape"), (np.array([[0, 2, 1]], np.int64), "other than 0 and 1"),
                         (tmp_path / "missing.png", "could not read")):
        with pytest.raises(ValueError, match=message):
            processor.validate_foreground_mask(bad)


def test_apply_foreground_mask_layouts_and_fill_values():
    mask = np.array([[True, False], [False, True], [True, True]])
    channels_last = np.arange(18, dtype=np.float32).reshape(3, 2, 3) + 1
    normal = Sapiens2HFImageProcessor(task="normal")
    pointmap = Sapiens2HFImageProcessor(task="pointmap")
    masked = normal.apply_foreground_mask(channels_last, mask)
    assert np.array_equal(masked[mask], channels_last[mask]) and (masked[~mask] == 0).all()
    assert channels_last.min() > 0  # the input is not changed
    # channels first (the post-processors' tensors), NaN for pointmaps by default
    channels_first = torch.from_numpy(channels_last).permute(2, 0, 1)
    tensor = pointmap.apply_foreground_mask(channels_first, torch.from_numpy(mask))
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (3, 3, 2)
    assert torch.equal(tensor[:, torch.from_numpy(mask)], channels_first[:, torch.from_numpy(mask)])
    assert torch.isnan(tensor[:, ~torch.from_numpy(mask)]).all()
    depth = pointmap.apply_foreground_mask(channels_last[..., 2], mask)
    assert np.isnan(depth[~mask]).all() and np.array_equal(depth[mask], channels_last[..., 2][mask])
    # broken control: the inverted mask keeps the other pixels
    inverted = normal.apply_foreground_mask(channels_last, ~mask)
    assert not np.array_equal(inverted[mask], channels_last[mask])
    with pytest.raises(ValueError, match="channels first and last"):
        normal.apply_foreground_mask(np.zeros((3, 3, 3)), np.ones((3, 3), bool))
    assert normal.apply_foreground_mask(np.ones((3, 3, 3)), np.eye(3, dtype=bool), channels_last=False)[0, 0, 1] == 0
    with pytest.raises(ValueError, match="do not match the mask"):
        normal.apply_foreground_mask(np.zeros((4, 2, 3)), mask)
    with pytest.raises(ValueError, match="NaN"):
        pointmap.apply_foreground_mask(np.zeros((3, 2), np.int64), mask)
    with pytest.raises(ValueError, match="fill_value"):
        Sapiens2HFImageProcessor(task="seg").apply_foreground_mask(channels_last, mask)


# ----------------------------------------------------------------------------------------------------------------
# pipelines: given masks
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["normal", "pointmap", "albedo"])
def test_masked_results_keep_the_person_and_fill_the_background(task):
    pipe = _pipe(task)
    assert isinstance(pipe, PIPELINE_CLASSES[PIPELINE_TASK[task]])
    image = _images()[0]
    mask = _masks([image])[0]
    plain, masked = pipe(image), pipe(image, foreground_mask=mask)
    assert set(masked) == set(plain) | {"mask"} and "mask" not in plain
    assert masked["mask"].dtype == bool and np.array_equal(masked["mask"], mask)
    for key, fill in MASKED[task].items():
        assert masked[key].shape == plain[key].shape and masked[key].dtype == plain[key].dtype
        # same process, same batch: the person's values are the unmasked ones exactly
        assert np.array_equal(masked[key][mask], plain[key][mask])
        assert _background_is(masked[key][~mask], fill)
        assert not _background_is(plain[key][~mask], fill)  # control: without a mask the background has values
    if task == "pointmap":
        assert masked["scale"] == plain["scale"]
    # a PIL mask image (non-zero = person) gives the same result
    from_image = pipe(image, foreground_mask=Image.fromarray(mask.astype(np.uint8) * 255))
    assert np.array_equal(from_image["mask"], mask)


@pytest.mark.parametrize("task", ["normal", "pointmap"])
def test_masked_batches_equal_one_by_one_lists_generators_and_datasets(task):
    pipe = _pipe(task)
    images = _images()
    masks = _masks(images)
    key = {"normal": "normals", "pointmap": "pointmap"}[task]
    single = [pipe(image, foreground_mask=mask) for image, mask in zip(images, masks)]
    batched = pipe(images, foreground_mask=masks, batch_size=2)
    as_dicts = [{"image": image, "foreground_mask": mask, "other_column": k} for k, (image, mask)
                in enumerate(zip(images, masks))]
    streamed = list(pipe((row for row in as_dicts), batch_size=2))

    class Rows(Dataset):
        def __len__(self):
            return len(as_dicts)

        def __getitem__(self, index):
            return as_dicts[index]

    from_dataset = list(pipe(Rows(), batch_size=3))
    for results in (batched, streamed, from_dataset):
        assert len(results) == 3
        for a, b, mask in zip(results, single, masks):
            assert np.array_equal(a["mask"], mask) and np.array_equal(b["mask"], mask)
            nan = np.isnan(b[key])
            assert np.array_equal(np.isnan(a[key]), nan)
            # float32 arithmetic of the heads changes with the batch (tests/test_pipelines.py); a mask mix-up is O(1)
            np.testing.assert_allclose(a[key][~nan], b[key][~nan], rtol=0, atol=1e-4 * np.abs(b[key][~nan]).max())
    # images without a mask in the same call stay unmasked
    mixed = pipe([images[0], {"image": images[1], "foreground_mask": masks[1]}], batch_size=2)
    assert "mask" not in mixed[0] and np.array_equal(mixed[1]["mask"], masks[1])
    partly = pipe(images[:2], foreground_mask=[None, masks[1]], batch_size=2)
    assert "mask" not in partly[0] and np.array_equal(partly[1]["mask"], masks[1])


def test_mask_errors_name_the_problem():
    pipe = _pipe("normal")
    images = _images()
    masks = _masks(images)
    with pytest.raises(ValueError, match=r"input 0 is 40x90 \(height x width\) but the image is 70x50"):
        pipe(images[0], foreground_mask=masks[1])
    with pytest.raises(ValueError, match=r"input 1 is 70x50 \(height x width\) but the image is 40x90"):
        pipe(images[:2], foreground_mask=[masks[0], masks[0]], batch_size=2)
    with pytest.raises(ValueError, match="one mask \\(or None\\) per image"):
        pipe(images, foreground_mask=masks[0])
    with pytest.raises(ValueError, match="one mask \\(or None\\) per image"):
        pipe(images, foreground_mask=masks[:2])
    with pytest.raises(ValueError, match="dict inputs"):
        list(pipe((image for image in images), foreground_mask=masks[0]))
    with pytest.raises(ValueError, match="pass one of them"):
        pipe(images[0], foreground_mask=masks[0], segmenter=_bright_seg())
    with pytest.raises(ValueError, match="segmenter of type"):
        pipe(images[0], segmenter=3)
    with pytest.raises(ValueError, match="'image' key"):
        pipe({"foreground_mask": masks[0]})


# ----------------------------------------------------------------------------------------------------------------
# pipelines: the foreground from a segmentation model
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["normal", "pointmap", "albedo"])
def test_segmenter_masks_by_the_segmentation_foreground(task):
    seg_model = _bright_seg()
    seg_pipe = pipeline("sapiens2-segmentation", model=seg_model, device="cpu")
    images = [_half_bright((70, 50, 3)), _half_bright((40, 90, 3), seed=1)]
    expected = [seg_pipe(image)["segmentation"] > 0 for image in images]
    for mask in expected:
        assert 0.2 < mask.mean() < 0.8  # a real foreground and background
    pipe = _pipe(task)
    plain = [pipe(image) for image in images]
    for segmenter in (seg_pipe, seg_model):
        batched = pipe(images, segmenter=segmenter, batch_size=2)
        for result, mask, reference in zip(batched, expected, plain):
            # the segmenter runs on the same batches: its labels (argmax) equal the one-by-one ones here
            assert np.array_equal(result["mask"], mask)
            for key, fill in MASKED[task].items():
                assert _background_is(result[key][~mask], fill)
                np.testing.assert_allclose(result[key][mask], reference[key][mask], rtol=0,
                                           atol=1e-4 * np.abs(reference[key]).max())
    # a pipeline built with a segmenter masks every call; segmenter=False switches it off for one call
    masking = pipeline(PIPELINE_TASK[task], model=pipe.model, device="cpu", segmenter=seg_pipe)
    assert np.array_equal(masking(images[0])["mask"], expected[0])
    assert "mask" not in masking(images[0], segmenter=False)
    given = masking(images[0], segmenter=False, foreground_mask=~expected[0])
    assert np.array_equal(given["mask"], ~expected[0])


def test_segmenter_from_a_folder(tmp_path):
    torch.manual_seed(3)
    folder = tmp_path / "seg"
    _model("seg", seed=3).save_pretrained(folder)
    Sapiens2HFImageProcessor(task="seg", size={"height": 64, "width": 48}).save_pretrained(folder)
    image = _images()[0]
    reference = pipeline("sapiens2-segmentation", model=str(folder), device="cpu")(image)["segmentation"] > 0
    pipe = _pipe("albedo")
    result = pipe(image, segmenter=str(folder))
    assert np.array_equal(result["mask"], reference)
    assert len(pipe._loaded_segmenters) == 1
    pipe(image, segmenter=str(folder))
    assert len(pipe._loaded_segmenters) == 1  # loaded once
    with pytest.raises(OSError, match="could not load the segmenter"):
        pipe(image, segmenter=str(tmp_path / "nothing"))


def test_depth_estimation_users_mask_with_the_processor():
    """`pipeline("depth-estimation")` has no mask argument: its users mask with the image processor's helpers."""
    model = _model("pointmap")
    processor = Sapiens2HFImageProcessor(task="pointmap", size={"height": 64, "width": 48})
    image = _images()[0]
    mask = _masks([image])[0]
    with torch.no_grad():
        outputs = model(processor(image)["pixel_values"])
    (result,) = processor.post_process_depth_estimation(outputs, target_sizes=[image.shape[:2]])
    depth = processor.apply_foreground_mask(result["predicted_depth"], mask)
    pipe = pipeline("sapiens2-pointmap", model=model, image_processor=processor, device="cpu")
    expected = pipe(image, foreground_mask=mask)["depth"]
    assert np.array_equal(np.isnan(depth.numpy()), ~mask)
    assert np.array_equal(depth.numpy()[mask], expected[mask])


# ----------------------------------------------------------------------------------------------------------------
# pointmaps for a known camera
# ----------------------------------------------------------------------------------------------------------------


def _pointmap_case():
    model = _model("pointmap")
    processor = Sapiens2HFImageProcessor(task="pointmap", size={"height": 64, "width": 48})
    images = _images(shapes=((70, 50, 3), (40, 90, 3)))
    with torch.no_grad():
        outputs = model(processor(images)["pixel_values"])
    pipe = pipeline("sapiens2-pointmap", model=model, image_processor=processor, device="cpu")
    return model, processor, images, outputs, pipe


def test_focal_length_pointmap_equals_depth_estimation_and_scales_inversely():
    model, processor, images, outputs, pipe = _pointmap_case()
    sizes = [image.shape[:2] for image in images]
    focal = [400.0, 900.0]
    depth = processor.post_process_depth_estimation(outputs, target_sizes=sizes, focal_length=focal)
    pointmaps = processor.post_process_pointmap_estimation(outputs, source_sizes=sizes, focal_length=focal)
    # the pipeline on the same batch of two (the model's arithmetic depends on the batch)
    piped = pipe(images, focal_length=focal, batch_size=2)
    for i in range(2):
        # one shared computation: bit-equal within this process
        assert torch.equal(pointmaps[i]["depth"], depth[i]["predicted_depth"])
        assert float(pointmaps[i]["focal_length"]) == focal[i] == float(depth[i]["focal_length"])
        result = piped[i]
        assert result["focal_length"] == focal[i]
        assert np.array_equal(result["depth"], depth[i]["predicted_depth"].numpy())
        assert np.array_equal(result["pointmap"], pointmaps[i]["pointmap"].permute(1, 2, 0).numpy())
    # metric depth is proportional to the focal length: depth(2.5 f) = 2.5 depth(f), up to float32 rounding
    doubled = pipe(images[0], focal_length=2.5 * focal[0])
    single = pipe(images[0], focal_length=focal[0])
    scale = np.abs(single["depth"]).max()
    assert np.abs(doubled["depth"] - 2.5 * single["depth"]).max() <= 1e-5 * 2.5 * scale
    assert np.abs(doubled["depth"] - single["depth"]).max() > 0.5 * scale  # control: it does change
    # the focal length the prediction implies reproduces the predicted depth
    predicted = processor.post_process_pointmap_estimation(outputs, source_sizes=sizes)
    implied = [float(r["focal_length"]) for r in predicted]
    again = processor.post_process_pointmap_estimation(outputs, source_sizes=sizes, focal_length=implied)
    for a, b in zip(again, predicted):
        torch.testing.assert_close(a["pointmap"], b["pointmap"], rtol=1e-5, atol=2e-6 * b["pointmap"].abs().max())
    # per image, None keeps the prediction
    mixed = processor.post_process_pointmap_estimation(outputs, source_sizes=sizes, focal_length=[None, focal[1]])
    assert torch.equal(mixed[0]["pointmap"], predicted[0]["pointmap"])
    assert torch.equal(mixed[1]["pointmap"], pointmaps[1]["pointmap"])
    listed = pipe(images, focal_length=[None, focal[1]], batch_size=2)
    assert "focal_length" not in listed[0] and listed[1]["focal_length"] == focal[1]


def _reprojection_error(pointmap, camera):
    """Max-abs deviation of X, Y from `(u - cx) Z / fx`, `(v - cy) Z / fy` at a few pixels (float64 reference)."""
    fx, fy, cx, cy = camera
    height, width = pointmap.shape[:2]
    worst = 0.0
    for v, u in ((0, 0), (height - 1, width - 1), (height // 2, width // 3), (7, width - 5), (height - 3, 2)):
        x, y, z = (float(value) for value in pointmap[v, u])
        worst = max(worst, abs(x - (u - cx) * z / fx), abs(y - (v - cy) * z / fy))
    return worst


def test_intrinsics_reproject_x_and_y_through_the_camera():
    model, processor, images, outputs, pipe = _pointmap_case()
    image = images[0]  # 70 x 50: cx, cy differ, so a swap shows
    camera = (420.0, 450.0, 21.0, 40.0)
    matrix = np.array([[camera[0], 0, camera[2]], [0, camera[1], camera[3]], [0, 0, 1]])
    result = pipe(image, intrinsics=camera)
    from_matrix = pipe(image, intrinsics=matrix)
    focal_only = pipe(image, focal_length=camera[0])
    assert np.array_equal(result["pointmap"], from_matrix["pointmap"]) and result["focal_length"] == camera[0]
    assert np.array_equal(result["depth"], focal_only["depth"])  # Z is the focal length's metric depth
    tolerance = 1e-5 * np.abs(result["depth"]).max()
    assert _reprojection_error(result["pointmap"], camera) <= tolerance
    # broken controls: swapped principal point; the model's own X, Y (focal length only)
    swapped = (camera[0], camera[1], camera[3], camera[2])
    assert _reprojection_error(result["pointmap"], swapped) > 100 * tolerance
    assert _reprojection_error(focal_only["pointmap"], camera) > 100 * tolerance
    # on a grid of another size than the image, positions are sampled at the matching original pixel centres
    (half,) = processor.post_process_pointmap_estimation(
        types.SimpleNamespace(pointmaps=outputs.pointmaps[:1], scales=outputs.scales[:1]), source_sizes=[(70, 50)],
        target_sizes=[(35, 25)], intrinsics=[camera])
    z = half["depth"].double()
    u = (torch.arange(25, dtype=torch.float64) + 0.5) * 2 - 0.5
    assert (half["pointmap"][0].double() - (u - camera[2]) / camera[0] * z).abs().max() <= 1e-5 * z.abs().max()


def test_camera_arguments_are_checked():
    model, processor, images, outputs, pipe = _pointmap_case()
    sizes = [image.shape[:2] for image in images]

    def post(**camera):
        return processor.post_process_pointmap_estimation(outputs, source_sizes=sizes, **camera)

    for bad, message in ((0.0, "positive finite"), (-1.0, "positive finite"), (float("inf"), "positive finite"),
                         ([500.0], "1 entries for 2 images"), ("500", "positive finite")):
        with pytest.raises(ValueError, match=message):
            post(focal_length=bad)
    for bad, message in (((500, 500, 10), "neither"), ((500, -1, 10, 10), "positive"),
                         ((500, 500, float("nan"), 10), "finite"), ([[500, 1, 10], [0, 500, 10], [0, 0, 1]], "skew"),
                         ([(500, 500, 10, 10)] * 3, "3 entries for 2 images")):
        with pytest.raises(ValueError, match=message):
            post(intrinsics=bad)
    with pytest.raises(ValueError, match="not both"):
        post(focal_length=500.0, intrinsics=(500, 500, 10, 10))
    # the pipeline checks before running the model, naming the argument
    with pytest.raises(ValueError, match="focal_length"):
        pipe(images, focal_length=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="focal_length"):
        list(pipe((image for image in images), focal_length=[1.0, 2.0]))
    with pytest.raises(ValueError, match="intrinsics"):
        pipe(images[0], intrinsics=(1.0, 2.0))
    with pytest.raises(ValueError, match="not both"):
        pipe({"image": images[0], "focal_length": 500.0, "intrinsics": (500, 500, 10, 10)})
    # per image in dict inputs, also from a generator
    rows = [{"image": images[0], "intrinsics": (400, 400, 25, 35)}, {"image": images[1], "focal_length": 700.0}]
    results = list(pipe((row for row in rows), batch_size=2))
    assert [r["focal_length"] for r in results] == [400.0, 700.0]
    # an input's own camera replaces the call's
    mixed = pipe([rows[0], images[1]], focal_length=700.0, batch_size=2)
    assert [r["focal_length"] for r in mixed] == [400.0, 700.0]


# ----------------------------------------------------------------------------------------------------------------
# depth image with a colour bar; point clouds skip the background
# ----------------------------------------------------------------------------------------------------------------


def test_depth_image_has_a_colour_bar_with_units():
    rng = np.random.default_rng(0)
    depth = rng.uniform(1.0, 4.0, size=(200, 120))
    depth[:10] = np.nan
    mask = np.ones_like(depth, bool)
    mask[:, :15] = False
    image = vis.depth_to_image(depth, mask)
    pixels = np.asarray(image)
    assert pixels.shape[0] == 200 and pixels.shape[1] > 120 + 20  # the same height; the bar panel to the right
    shown = np.isfinite(depth) & mask
    # the image part: depth_to_rgb's colours where shown, neutral grey elsewhere
    assert np.array_equal(pixels[:, :120][shown], np.asarray(vis.depth_to_rgb(depth, mask))[shown])
    assert (pixels[:, :120][~shown] == 128).all()
    # the bar: the Turbo table from far (top, blue) to near (bottom, red), one row per step
    panel = pixels[:, 120:]
    coloured = ~(panel == 255).all(-1) & ~(panel == 0).all(-1)  # neither the white panel nor black lines / text
    counts = coloured.sum(0)
    bar_columns = np.flatnonzero(counts > 0.5 * counts.max())
    column = coloured[:, bar_columns[len(bar_columns) // 2]]
    edges = np.flatnonzero(np.diff(np.concatenate([[0], column.astype(int), [0]])))
    start, stop = max(zip(edges[::2], edges[1::2]), key=lambda run: run[1] - run[0])  # the longest run: the bar
    gradient = panel[start:stop, bar_columns[len(bar_columns) // 2]]
    assert len(gradient) > 150
    assert np.array_equal(gradient, drawing.turbo_colours(np.linspace(0.0, 1.0, len(gradient))))
    assert gradient[0][2] > gradient[0][0] and gradient[-1][0] > gradient[-1][2]  # far blue on top, near red below
    # labels: dark text right of the bar at both ends; the title names the units (a longer unit widens the panel)
    text = (panel[:, bar_columns[-1] + 5 :] < 100).all(-1)
    assert text[: len(text) // 4].any() and text[-len(text) // 4 :].any()
    assert not text[len(text) // 3 : 2 * len(text) // 3].any()  # only min / max ticks
    assert vis.depth_to_image(depth, mask, units="millimetres").size[0] > image.size[0]
    assert vis.depth_to_image(depth, mask, colorbar=False).size == (120, 200)
    # a short image grows just enough for the labels; no valid depth still gives a picture
    assert vis.depth_to_image(depth[100:130, :20]).size[1] >= 30
    empty = vis.depth_to_image(np.full((200, 30), np.nan))
    assert empty.size[1] == 200 and empty.size[0] > 30 and (np.asarray(empty)[:, :30] == 128).all()
    with pytest.raises(ValueError, match="does not match"):
        vis.depth_to_image(depth, mask[:10])


def test_ply_leaves_out_the_masked_background(tmp_path):
    pipe = _pipe("pointmap")
    image = _images()[0]
    mask = _masks([image])[0]
    result = pipe(image, foreground_mask=mask)
    count = vis.save_ply(tmp_path / "person.ply", result["pointmap"], colors=image)
    assert count == int(mask.sum())
    assert f"element vertex {int(mask.sum())}" in vis.read_ply_header(tmp_path / "person.ply")


# ----------------------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------------------


def _model_folder(tmp_path, task, seed=0):
    folder = tmp_path / f"model_{task}"
    torch.manual_seed(seed)
    MODEL_CLASSES[task](sapiens2_hf.tiny_config(task)).save_pretrained(folder)
    Sapiens2HFImageProcessor(task=task, size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def test_cli_pointmap_with_a_foreground_model_and_a_focal_length(tmp_path, capsys):
    model, seg = _model_folder(tmp_path, "pointmap"), _model_folder(tmp_path, "seg", seed=5)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    images = _images(shapes=((70, 50, 3), (40, 60, 3)))
    for name, image in zip(("a", "b"), images):
        Image.fromarray(image).save(inputs / f"{name}.png")
    out = tmp_path / "out"
    code = main(["pointmap", str(inputs), "--model", str(model), "--foreground-model", str(seg), "--focal-length",
                 "600", "--ply", "--out", str(out), "--device", "cpu", "--quiet", "--batch-size", "2"])
    assert code == 0, capsys.readouterr().err
    # the same as the pipelines with the same folders, in this process
    seg_pipe = pipeline("sapiens2-segmentation", model=str(seg), device="cpu")
    pipe = pipeline("sapiens2-pointmap", model=str(model), device="cpu", segmenter=seg_pipe)
    for name, image in zip(("a", "b"), images):
        expected = pipe(image, focal_length=600.0)
        mask = np.asarray(Image.open(out / f"{name}_mask.png")) > 0
        assert np.array_equal(mask, expected["mask"]) and 0 < mask.mean() < 1
        depth = np.load(out / f"{name}_depth.npy")
        assert np.array_equal(np.isnan(depth), ~mask)
        # batch of two there, of one here: float32 arithmetic of the heads (tests/test_pipelines.py)
        np.testing.assert_allclose(depth[mask], expected["depth"][mask], rtol=0,
                                   atol=1e-4 * np.abs(expected["depth"][mask]).max())
        assert f"element vertex {int(mask.sum())}" in vis.read_ply_header(out / f"{name}.ply")
        overlay = Image.open(out / f"{name}_depth.png")
        assert overlay.size[0] > image.shape[1]  # the colour bar
    # the options are part of the resume fingerprint: another focal length recomputes, the same one does not
    again = ["pointmap", str(inputs), "--model", str(model), "--foreground-model", str(seg), "--out", str(out),
             "--device", "cpu", "--quiet"]
    assert main([*again, "--focal-length", "600", "--ply"]) == 0
    assert json.loads((out / "summary.json").read_text())["already_done"] == 2
    assert main([*again, "--intrinsics", "600", "600", "20", "30", "--ply"]) == 0
    assert json.loads((out / "summary.json").read_text())["processed"] == 2


def test_cli_foreground_masks_from_files(tmp_path, capsys):
    model = _model_folder(tmp_path, "normal")
    inputs, masks = tmp_path / "inputs", tmp_path / "masks"
    inputs.mkdir()
    masks.mkdir()
    images = _images(shapes=((30, 20, 3), (30, 20, 3)))
    given = _masks(images)
    for name, image in zip(("a", "b"), images):
        Image.fromarray(image).save(inputs / f"{name}.png")
    Image.fromarray(given[0].astype(np.uint8) * 255).save(masks / "a.png")
    out = tmp_path / "out"
    code = main(["normal", str(inputs), "--model", str(model), "--foreground-mask", str(masks), "--out", str(out),
                 "--device", "cpu", "--quiet"])
    assert code == 1  # b has no mask: skipped and reported
    assert "no foreground mask" in capsys.readouterr().err
    normals = np.load(out / "a_normal.npy")
    assert (normals[~given[0]] == 0).all() and (np.abs(normals[given[0]]).sum(-1) > 0).all()
    # one mask file for every input
    out2 = tmp_path / "out2"
    assert main(["normal", str(inputs), "--model", str(model), "--foreground-mask", str(masks / "a.png"),
                 "--out", str(out2), "--device", "cpu", "--quiet"]) == 0
    assert np.array_equal(np.asarray(Image.open(out2 / "b_mask.png")) > 0, given[0])
    assert main(["normal", str(inputs), "--model", str(model), "--foreground-mask", str(tmp_path / "none"),
                 "--out", str(out2), "--device", "cpu", "--quiet"]) == 2
    assert "no such file or folder" in capsys.readouterr().err

