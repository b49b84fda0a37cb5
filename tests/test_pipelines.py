"""Sapiens2 pipelines: tiny random models (shapes, keys, coordinate frames, batching) and end-to-end parity with the
official demos on the `*_e2e` fixtures (photo and boxes in, final outputs in original-image coordinates out)."""

import json
import types

import numpy as np
import pytest
import torch
from official_cases import FIXTURES, pose_keypoints_within
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoImageProcessor, pipeline

import sapiens2_hf
from sapiens2_hf.modeling.post_processing_sapiens2_hf import FlippedCropOutputs
from sapiens2_hf.pipelines import PIPELINE_CLASSES
from sapiens2_hf.processing import Sapiens2HFImageProcessor

pytestmark = pytest.mark.compat


MODEL_CLASSES = {
    "pose": sapiens2_hf.Sapiens2ForPoseEstimation,
    "seg": sapiens2_hf.Sapiens2ForSemanticSegmentation,
    "normal": sapiens2_hf.Sapiens2ForNormalEstimation,
    "pointmap": sapiens2_hf.Sapiens2ForPointmapEstimation,
    "albedo": sapiens2_hf.Sapiens2ForAlbedoEstimation,
}
PIPELINE_TASK = {"pose": "sapiens2-pose", "seg": "sapiens2-segmentation", "normal": "sapiens2-normal",
                 "pointmap": "sapiens2-pointmap", "albedo": "sapiens2-albedo"}
RESULT_KEYS = {"seg": {"segmentation"}, "normal": {"normals"}, "pointmap": {"pointmap", "depth", "scale"},
               "albedo": {"albedo"}}


@pytest.fixture(scope="module", autouse=True)
def registered():
    """`import sapiens2_hf` registered the pipelines (with our model classes) and the image processor."""
    from transformers.pipelines import PIPELINE_REGISTRY

    assert PIPELINE_REGISTRY.supported_tasks["sapiens2-pose"]["pt"] == (sapiens2_hf.Sapiens2ForPoseEstimation,)
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING

    assert IMAGE_PROCESSOR_MAPPING[sapiens2_hf.Sapiens2Config]["torchvision"] is Sapiens2HFImageProcessor


def _tiny_model(task, seed=0):
    # fp32 RoPE: in the official bf16 mode, batch composition alone flips bf16 roundings (up to ~1e-3), which would
    # hide what the batching tests check
    torch.manual_seed(seed)
    return MODEL_CLASSES[task](sapiens2_hf.tiny_config(task, rope_dtype="float32")).eval()


def _images(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for shape in ((70, 50, 3), (40, 90, 3), (64, 48, 3))]


@pytest.mark.parametrize("task", ["seg", "normal", "pointmap", "albedo"])
def test_dense_pipeline_shapes_values_and_batching(task):
    model = _tiny_model(task)
    pipe = pipeline(PIPELINE_TASK[task], model=model, device="cpu")
    assert isinstance(pipe, PIPELINE_CLASSES[PIPELINE_TASK[task]])
    assert pipe.image_processor.task == task and pipe.image_processor.input_size == (64, 48)
    images = _images()
    batched = pipe(images, batch_size=3)
    single = [pipe(image) for image in images]
    for image, a, b in zip(images, batched, single):
        assert set(a) == RESULT_KEYS[task]
        height, width = image.shape[:2]
        if task == "seg":
            assert a["segmentation"].shape == (height, width) and a["segmentation"].dtype == np.int64
            assert 0 <= a["segmentation"].min() and a["segmentation"].max() < 29
            assert (a["segmentation"] == b["segmentation"]).mean() > 0.999
        else:
            key = {"normal": "normals", "pointmap": "pointmap", "albedo": "albedo"}[task]
            assert a[key].shape == (height, width, 3) and a[key].dtype == np.float32
            # batch of 3 vs batch of 1: the heads' float32 convolutions change with the batch (the fixtures' noise
            # floor: up to 3e-5), amplified where a raw normal is short; a post-processing mix-up would be O(1)
            np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-4 * np.abs(b[key]).max())
    # values: the pipeline equals processor -> model -> post-processing done by hand
    processor = pipe.image_processor
    inputs = processor(images[0])
    with torch.no_grad():
        outputs = model(inputs["pixel_values"])
    if task == "seg":
        expected = processor.post_process_semantic_segmentation(outputs, target_sizes=[(70, 50)])[0].numpy()
        assert np.array_equal(single[0]["segmentation"], expected)
    elif task == "normal":
        expected = processor.post_process_normal_estimation(outputs, source_sizes=[(70, 50)])[0]["normals"]
        np.testing.assert_array_equal(single[0]["normals"], expected.permute(1, 2, 0).numpy())
        norms = np.linalg.norm(single[2]["normals"], axis=-1)  # same size as the model input: no resize
        np.testing.assert_allclose(norms, 1.0, atol=1e-5)
    elif task == "pointmap":
        expected = processor.post_process_pointmap_estimation(outputs, source_sizes=[(70, 50)])[0]
        np.testing.assert_array_equal(single[0]["pointmap"], expected["pointmap"].permute(1, 2, 0).numpy())
        np.testing.assert_array_equal(single[0]["depth"], single[0]["pointmap"][..., 2])
        assert single[0]["scale"] == pytest.approx(float(outputs.scales[0, 0]))
    else:
        expected = processor.post_process_albedo_estimation(outputs, source_sizes=[(70, 50)])[0]["albedo"]
        np.testing.assert_array_equal(single[0]["albedo"], expected.permute(1, 2, 0).numpy())
        assert 0 <= single[0]["albedo"].min() and single[0]["albedo"].max() <= 1


def test_dense_letterbox_frame_maps_back_to_the_image():
    """A model that echoes its input shows that unpadding + resizing lands on the original pixel grid."""

    class Echo(sapiens2_hf.Sapiens2ForAlbedoEstimation):
        def forward(self, pixel_values, **kwargs):
            mean = torch.tensor([123.675, 116.28, 103.53]).view(1, 3, 1, 1)
            std = torch.tensor([58.395, 57.12, 57.375]).view(1, 3, 1, 1)
            return sapiens2_hf.Sapiens2AlbedoEstimatorOutput(albedos=(pixel_values * std + mean) / 255.0)

    torch.manual_seed(0)
    model = Echo(sapiens2_hf.tiny_config("albedo")).eval()
    pipe = pipeline("sapiens2-albedo", model=model, device="cpu")
    image = np.zeros((96, 48, 3), np.uint8)  # tall: letterboxed to 64x32 with 8 columns of padding each side
    image[:, :24] = 255  # left half white
    albedo = pipe(image)["albedo"]
    assert albedo.shape == (96, 48, 3)
    assert albedo[:, :22].min() > 0.99 and albedo[:, 26:].max() < 0.01


class _PeakPose(sapiens2_hf.Sapiens2ForPoseEstimation):
    """Puts a sharp Gaussian, on every channel, at the brightest pixel of each crop (for coordinate-frame tests)."""

    def forward(self, pixel_values, **kwargs):
        batch, _, height, width = pixel_values.shape
        h, w = height // 4, width // 4
        brightness = pixel_values.float().sum(1)  # (batch, height, width)
        index = brightness.flatten(1).argmax(1)
        ys, xs = (index // width).float(), (index % width).float()
        # crop pixel -> heatmap pixel (UDP encode: (input - 1) / (heatmap - 1))
        hx, hy = xs * (w - 1) / (width - 1), ys * (h - 1) / (height - 1)
        grid_y, grid_x = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
        maps = torch.exp(-((grid_x - hx[:, None, None]) ** 2 + (grid_y - hy[:, None, None]) ** 2) / (2 * 1.5**2))
        return types.SimpleNamespace(heatmaps=maps[:, None].expand(batch, self.config.num_labels, h, w).contiguous())


def test_pose_pipeline_coordinate_frame_and_batching():
    torch.manual_seed(0)
    model = _PeakPose(sapiens2_hf.tiny_config("pose")).eval()
    pipe = pipeline("sapiens2-pose", model=model, device="cpu")
    images, boxes, dots = [], [], []
    rng = np.random.default_rng(1)
    for count in (1, 2, 3):
        # one bright dot per person; people 100 px apart so that no crop window sees another dot
        image = np.zeros((120, 100 * count, 3), np.uint8)
        image_boxes, image_dots = [], []
        for j in range(count):
            box = [100.0 * j + 10.5, 15.25, 100.0 * j + 70.5, 95.25]
            dot = (int(box[0] + 30 + rng.integers(-12, 13)), int(box[1] + 40 + rng.integers(-20, 21)))
            image[dot[1] - 1 : dot[1] + 2, dot[0] - 1 : dot[0] + 2] = 255
            image_boxes.append(box)
            image_dots.append(dot)
        images.append(image)
        boxes.append(image_boxes)
        dots.append(image_dots)
    results = pipe(images, boxes=boxes, batch_size=2, crop_batch_size=3)
    assert [len(r) for r in results] == [1, 2, 3]
    for image_results, image_boxes, image_dots in zip(results, boxes, dots):
        for person, box, dot in zip(image_results, image_boxes, image_dots):
            assert set(person) == {"bbox", "bbox_score", "keypoints", "scores", "labels"}
            assert person["keypoints"].shape == (308, 2) and person["keypoints"].dtype == np.float64
            assert person["scores"].shape == (308,) and person["labels"][:3] == ["nose", "left_eye", "right_eye"]
            np.testing.assert_allclose(person["bbox"], box, atol=1e-4)
            assert person["bbox_score"] == 1.0
            # every keypoint lands on the dot: within one crop pixel (80 * 1.25 / 64 = 1.6 image px)
            assert np.abs(person["keypoints"] - np.array(dot, float)).max() < 1.6
    unbatched = [pipe(image, boxes=b, flip_test=True) for image, b in zip(images, boxes)]
    for a_list, b_list in zip(results, unbatched):
        for a, b in zip(a_list, b_list):
            np.testing.assert_allclose(a["keypoints"], b["keypoints"], atol=1e-6)
            np.testing.assert_allclose(a["scores"], b["scores"], atol=1e-6)
    assert pipe(images[0], boxes=[]) == []


def test_pose_pipeline_random_model_flip_and_values():
    model = _tiny_model("pose")
    pipe = pipeline("sapiens2-pose", model=model, device="cpu")
    image = _images()[0]
    boxes = [[2.0, 3.0, 40.0, 60.0], [10.0, 5.0, 30.0, 30.0]]
    plain = pipe(image, boxes=boxes, flip_test=False)
    flipped = pipe(image, boxes=boxes)
    processor = pipe.image_processor
    inputs = processor(image, boxes=[boxes], box_format="xyxy")
    # The model runs as the pipeline runs it, one crop per call (its default batch_size=1): another batch
    # composition changes the kernels' rounding (one float32 ulp with ATEN_CPU_CAPABILITY=avx2), and this random
    # model's flat heatmaps turn an ulp into an argmax move, so bit-equality holds only for the same calls.
    crops = inputs["pixel_values"].split(1)
    with torch.no_grad():
        out = sapiens2_hf.Sapiens2PoseEstimatorOutput(heatmaps=torch.cat([model(crop).heatmaps for crop in crops]))
        out_flipped = sapiens2_hf.Sapiens2PoseEstimatorOutput(
            heatmaps=torch.cat([model(crop.flip(-1)).heatmaps for crop in crops])
        )
    expected = processor.post_process_pose_estimation(out, boxes=[boxes], box_format="xyxy")[0]
    expected_flip = processor.post_process_pose_estimation(out, boxes=[boxes], box_format="xyxy",
                                                           outputs_flipped=FlippedCropOutputs(out_flipped))[0]
    for k in range(2):
        np.testing.assert_array_equal(plain[k]["keypoints"], expected[k]["keypoints"].numpy())
        np.testing.assert_array_equal(flipped[k]["keypoints"], expected_flip[k]["keypoints"].numpy())
        assert not np.array_equal(plain[k]["scores"], flipped[k]["scores"])


def test_pose_pipeline_detector_filtering_nms_and_fallback():
    calls = []

    def detector(image, threshold):
        calls.append((image.size, threshold))
        return [
            {"label": "person", "score": 0.9, "box": {"xmin": 5, "ymin": 5, "xmax": 40, "ymax": 60}},
            {"label": "person", "score": 0.8, "box": {"xmin": 6, "ymin": 6, "xmax": 41, "ymax": 61}},  # NMS drops it
            {"label": "dog", "score": 0.99, "box": {"xmin": 0, "ymin": 0, "xmax": 10, "ymax": 10}},
            {"label": "person", "score": 0.2, "box": {"xmin": 0, "ymin": 0, "xmax": 20, "ymax": 20}},  # below 0.3
            {"label": "Person", "score": 0.7, "box": {"xmin": 30, "ymin": 2, "xmax": 48, "ymax": 30}},
        ]

    pipe = pipeline("sapiens2-pose", model=_tiny_model("pose"), device="cpu", detector=detector)
    people = pipe(_images()[0], flip_test=False)
    assert calls == [((50, 70), 0.3)]
    np.testing.assert_allclose([p["bbox"] for p in people], [[5, 5, 40, 60], [30, 2, 48, 30]])
    assert [p["bbox_score"] for p in people] == pytest.approx([0.9, 0.7])
    nobody = pipe(_images()[0], detector=lambda image, threshold: [], flip_test=False)
    assert len(nobody) == 1 and nobody[0]["bbox_score"] == 0.0
    np.testing.assert_allclose(nobody[0]["bbox"], [0, 0, 50, 70])
    assert pipe(_images()[0], detector=lambda image, threshold: [], fallback_to_full_image=False) == []
    with pytest.raises(ValueError, match="unknown argument"):
        pipe(_images()[0], flip=False)


def test_pipeline_from_a_saved_folder_and_inputs(tmp_path):
    model = _tiny_model("seg")
    model.save_pretrained(tmp_path / "seg")
    Sapiens2HFImageProcessor(task="seg", size={"height": 64, "width": 48}).save_pretrained(tmp_path / "seg")
    pipe = pipeline("sapiens2-segmentation", model=str(tmp_path / "seg"), device="cpu")
    assert isinstance(pipe.image_processor, Sapiens2HFImageProcessor)
    image = _images()[0]
    Image.fromarray(image).save(tmp_path / "image.png")
    from_array = pipe(image)["segmentation"]
    for variant in (Image.fromarray(image), str(tmp_path / "image.png")):
        assert np.array_equal(pipe(variant)["segmentation"], from_array)
    bigger = AutoImageProcessor.from_pretrained(tmp_path / "seg", size={"height": 128, "width": 96})
    assert isinstance(bigger, Sapiens2HFImageProcessor) and bigger.input_size == (128, 96)
    assert pipe(image, batch_size=2)["segmentation"].shape == (70, 50)
    generated = list(pipe(x for x in _images()))
    assert [r["segmentation"].shape for r in generated] == [(70, 50), (40, 90), (64, 48)]


def test_pipeline_bfloat16():
    pipe = pipeline("sapiens2-normal", model=_tiny_model("normal"), device="cpu", dtype=torch.bfloat16)
    assert pipe.model.dtype == torch.bfloat16
    normals = pipe(_images()[0])["normals"]
    assert normals.dtype == np.float32 and np.isfinite(normals).all()
    with pytest.raises(ValueError, match="image processor is for task"):
        pipeline("sapiens2-normal", model=_tiny_model("normal"), device="cpu",
                 image_processor=Sapiens2HFImageProcessor(task="seg"))


# ------------------------------------------------------------------------------------------------------------------
# end-to-end parity with the official demos
# ------------------------------------------------------------------------------------------------------------------


def _e2e(task):
    folder = FIXTURES / f"{task}_e2e"
    meta = json.loads((folder / "meta.json").read_text())
    ref = load_file(folder / "case.safetensors")
    size = [meta["input"]["height"], meta["input"]["width"]]
    model = MODEL_CLASSES[task].from_pretrained(folder / meta["weights_file"], image_size=size)
    processor = Sapiens2HFImageProcessor(task=task, size={"height": size[0], "width": size[1]})
    return folder, meta, ref, pipeline(PIPELINE_TASK[task], model=model, image_processor=processor, device="cpu")


def _within(actual, reference, tolerance):
    diff = (torch.as_tensor(np.asarray(actual)).double() - reference.double()).abs()
    stats = {"max_abs": diff.max().item(), "mean_abs": diff.mean().item(),
             "rel_l2": (diff.norm() / reference.double().norm()).item()}
    return all(stats[k] <= tolerance[k] for k in tolerance if k in stats), stats


@pytest.mark.parametrize("flip_test", [False, True])
def test_e2e_pose(flip_test):
    folder, meta, ref, pipe = _e2e("pose")
    name = "_flip_test" if flip_test else ""
    people = pipe(str(folder / meta["image"]["file"]), boxes=meta["boxes"]["given_xyxy"], flip_test=flip_test)
    assert len(people) == 1
    ok, stats = pose_keypoints_within(people[0]["keypoints"], meta, ref, name)
    assert ok, stats
    ok, stats = _within(people[0]["scores"], ref["scores" + name][0],
                        meta["noise_floor"]["recommended_tolerance"]["scores" + name])
    assert ok, stats
    # broken control: reversed flip pairs (with flip test) / the fp32-RoPE reference (without)
    if flip_test:
        pipe.model.config.flip_pairs = [[0, 1]]  # a valid but wrong permutation
        wrong = pipe(str(folder / meta["image"]["file"]), boxes=meta["boxes"]["given_xyxy"])
        assert not pose_keypoints_within(wrong[0]["keypoints"], meta, ref, name)[0]
    else:
        assert not pose_keypoints_within(ref["keypoints_image_rope_fp32"][0], meta, ref, name)[0]


def test_e2e_segmentation():
    folder, meta, ref, pipe = _e2e("seg")
    seg = pipe(str(folder / meta["image"]["file"]))["segmentation"]
    tolerance = meta["noise_floor"]["recommended_tolerance"]["class_map"]["frac_differing"]
    assert (torch.from_numpy(seg) != ref["class_map"]).float().mean().item() <= tolerance
    assert (ref["class_map_rope_fp32"] != ref["class_map"]).float().mean().item() > tolerance  # control


def test_e2e_normal():
    folder, meta, ref, pipe = _e2e("normal")
    normals = pipe(str(folder / meta["image"]["file"]))["normals"]
    tolerance = meta["noise_floor"]["recommended_tolerance"]["normal_image"]
    ok, stats = _within(normals, ref["normal_image"], tolerance)
    assert ok, stats
    assert not _within(normals, ref["normal_image_rope_fp32"], tolerance)[0]  # control: the other RoPE mode


def test_e2e_pointmap():
    folder, meta, ref, pipe = _e2e("pointmap")
    out = pipe(str(folder / meta["image"]["file"]))
    tolerances = meta["noise_floor"]["recommended_tolerance"]
    ok, stats = _within(out["pointmap"], ref["pointmap_metric_image"], tolerances["pointmap_metric_image"])
    assert ok, stats
    ok, stats = _within(out["depth"].astype(np.float16), ref["depth_float16"], tolerances["depth_float16"])
    assert ok, stats
    assert out["scale"] == pytest.approx(ref["scale"].item(), abs=tolerances["scale"]["max_abs"])
    assert not _within(out["pointmap"], ref["pointmap_metric_image_rope_fp32"],
                       tolerances["pointmap_metric_image"])[0]


def test_e2e_albedo():
    folder, meta, ref, pipe = _e2e("albedo")
    albedo = pipe(str(folder / meta["image"]["file"]))["albedo"]
    tolerances = meta["noise_floor"]["recommended_tolerance"]
    ok, stats = _within(albedo, ref["albedo_image"], tolerances["albedo_image"])
    assert ok, stats
    as_uint8 = torch.from_numpy((albedo * 255).astype(np.uint8))
    differing = (as_uint8 != ref["albedo_image_uint8"]).float().mean().item()
    assert differing <= tolerances["albedo_image_uint8"]["frac_differing"]
    assert (as_uint8.int() - ref["albedo_image_uint8"].int()).abs().max() <= 1
    fp32 = (ref["albedo_image_uint8_rope_fp32"] != ref["albedo_image_uint8"]).float().mean().item()
    assert fp32 > tolerances["albedo_image_uint8"]["frac_differing"]  # control: the other RoPE mode differs

