"""transformers' own pipeline tasks and machinery with our classes: `pipeline("image-segmentation")` and
`pipeline("depth-estimation")` on our checkpoints, JSON-able results (`sapiens2_hf.serialization`), and batching
through transformers' `Pipeline` call path (lists with `batch_size`, generators, `KeyDataset` over a `datasets`
dataset, `num_workers`), which must give exactly the one-by-one results."""

import json
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoModelForDepthEstimation, AutoModelForSemanticSegmentation, pipeline
from transformers.pipelines.pt_utils import KeyDataset

import sapiens2_hf
from sapiens2_hf.data.keypoint_formats import people_in_format
from sapiens2_hf.hub import save_for_hub
from sapiens2_hf.modeling.sapiens2_tasks import TASK_SPECS
from sapiens2_hf.processing import Sapiens2HFImageProcessor
from sapiens2_hf.serialization import image_from_json, to_json_compatible


pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("one_thread")]

PIPELINE_TASK = {spec.name: spec.pipeline_name for spec in TASK_SPECS.values()}
DENSE_TASKS = [spec.name for spec in TASK_SPECS.values() if spec.resize != "crop"]  # all but top-down pose
SIZE = {"height": 64, "width": 48}


def _images(count=5, seed=0):
    """Images of different sizes and aspect ratios, so that every batch mixes geometries."""
    rng = np.random.default_rng(seed)
    shapes = [(70, 50, 3), (40, 90, 3), (64, 48, 3), (33, 77, 3), (120, 80, 3), (50, 50, 3)]
    return [rng.integers(0, 256, shapes[i % len(shapes)], dtype=np.uint8) for i in range(count)]


def _model(task, seed=0, **overrides):
    torch.manual_seed(seed)
    return sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task, **overrides)).eval()


def _per_sample(model):
    """`model` with a forward that runs each row of a batch on its own: its outputs no longer depend on the batch
    composition (a batched convolution or matmul may round differently), so the batching tests see the pipeline's
    batching alone and can demand exact equality. The class keeps its name (the stock pipelines check it)."""
    base = type(model)

    def forward(self, pixel_values, **kwargs):
        self.forward_batch_sizes.append(pixel_values.shape[0])
        rows = [base.forward(self, pixel_values[i : i + 1], **kwargs) for i in range(pixel_values.shape[0])]
        return type(rows[0])(**{key: torch.cat([row[key] for row in rows]) for key in rows[0].keys()})

    model.__class__ = type(base.__name__, (base,), {"forward": forward})
    model.forward_batch_sizes = []
    return model


def _save(task, folder, seed=0, remote_code=False, **overrides):
    """A checkpoint folder as `save_for_hub` writes it (the convert CLI's layout), by default without the modeling
    files (see `test_remote_code_repositories_need_trust_remote_code_false` for a repository with them)."""
    model = _model(task, seed, **overrides)
    save_for_hub(model, folder, image_processor=Sapiens2HFImageProcessor(task=task, size=SIZE),
                 remote_code=remote_code)
    return model


@pytest.fixture(scope="module")
def seg_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkpoints") / "seg"
    _save("seg", folder)  # the official bfloat16 RoPE (the config default)
    return folder


@pytest.fixture(scope="module")
def pointmap_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkpoints") / "pointmap"
    _save("pointmap", folder)
    return folder


# ------------------------------------------------------------------------------------------------------------------
# transformers' stock pipelines
# ------------------------------------------------------------------------------------------------------------------


def test_saved_checkpoints_have_our_model_type(seg_folder, pointmap_folder):
    """One model type, written and read the same way: transformers' stock pipelines reach our classes through our own
    registration, never by taking over transformers' `sapiens2` type (tests/test_registration.py)."""
    for folder in (seg_folder, pointmap_folder):
        assert json.loads((folder / "config.json").read_text())["model_type"] == "sapiens2_hf"


def test_auto_classes_give_our_classes_after_import(seg_folder, pointmap_folder):
    assert type(AutoModelForSemanticSegmentation.from_pretrained(seg_folder)) is sapiens2_hf.Sapiens2ForSemanticSegmentation
    assert type(AutoModelForDepthEstimation.from_pretrained(pointmap_folder)) is sapiens2_hf.Sapiens2ForPointmapEstimation


def test_image_segmentation_pipeline_runs_our_class(seg_folder):
    pipe = pipeline("image-segmentation", model=str(seg_folder), device="cpu")
    assert type(pipe).__name__ == "ImageSegmentationPipeline"
    assert type(pipe.model) is sapiens2_hf.Sapiens2ForSemanticSegmentation
    assert isinstance(pipe.image_processor, Sapiens2HFImageProcessor)
    ours = pipeline("sapiens2-segmentation", model=str(seg_folder), device="cpu")
    id2label = pipe.model.config.id2label
    for image in _images(3):
        height, width = image.shape[:2]
        segments = pipe(Image.fromarray(image))
        class_map = ours(image)["segmentation"]
        # transformers' semantic format: one entry per class present, score None, a binary "L" mask
        assert [s["label"] for s in segments] == [id2label[int(c)] for c in np.unique(class_map)]
        rebuilt = np.full((height, width), -1)
        for segment in segments:
            assert segment["score"] is None and segment["mask"].mode == "L" and segment["mask"].size == (width, height)
            mask = np.asarray(segment["mask"])
            assert set(np.unique(mask)) <= {0, 255}
            label_id = next(i for i, name in id2label.items() if name == segment["label"])
            assert (rebuilt[mask == 255] == -1).all()  # masks do not overlap
            rebuilt[mask == 255] = label_id
        np.testing.assert_array_equal(rebuilt, class_map)  # exactly our pipeline's class map
    assert [s["label"] for s in pipe(Image.fromarray(_images(1)[0]), subtask="semantic")] == \
        [s["label"] for s in pipe(Image.fromarray(_images(1)[0]))]
    for subtask in ("panoptic", "instance"):
        with pytest.raises(ValueError, match=f"Subtask {subtask} is not supported"):
            pipe(Image.fromarray(_images(1)[0]), subtask=subtask)
    # control: the mask comparison above catches another model's class map
    other = pipeline("image-segmentation", model=_model("seg", seed=1), image_processor=pipe.image_processor,
                     device="cpu")
    image = _images(1)[0]
    rebuilt = np.zeros(image.shape[:2], np.int64)
    for segment in other(Image.fromarray(image)):
        rebuilt[np.asarray(segment["mask"]) == 255] = next(i for i, n in id2label.items() if n == segment["label"])
    assert not np.array_equal(rebuilt, ours(image)["segmentation"])


def _official_folder(task, tmp_path, load_case):
    """The official tiny `<task>_e2e` checkpoint converted to a repository folder (as `sapiens2-hf convert` does)."""
    meta, reference, weights = load_case(f"{task}_e2e")
    size = [meta["input"]["height"], meta["input"]["width"]]
    model = sapiens2_hf.model_class_for_task(task).from_pretrained(weights, image_size=size)
    save_for_hub(model, tmp_path / task, remote_code=False,
                 image_processor=Sapiens2HFImageProcessor(task=task, size={"height": size[0], "width": size[1]}))
    return meta, reference, Image.open(weights.parent / meta["image"]["file"]).convert("RGB")


def test_official_segmentation_checkpoint_under_image_segmentation(tmp_path, load_case):
    """Parity with the official demo through transformers' stock pipeline: the masks rebuild the official class map
    (bfloat16 RoPE) within its noise floor, which the float32-RoPE class map (transformers' own class's arithmetic)
    does not meet."""
    meta, reference, image = _official_folder("seg", tmp_path, load_case)
    pipe = pipeline("image-segmentation", model=str(tmp_path / "seg"), device="cpu")
    assert type(pipe.model) is sapiens2_hf.Sapiens2ForSemanticSegmentation
    names = {name: i for i, name in pipe.model.config.id2label.items()}
    class_map = torch.full(reference["class_map"].shape, -1, dtype=torch.long)
    for segment in pipe(image):
        class_map[torch.from_numpy(np.asarray(segment["mask"]) == 255)] = names[segment["label"]]
    tolerance = meta["noise_floor"]["recommended_tolerance"]["class_map"]["frac_differing"]
    assert (class_map != reference["class_map"]).float().mean().item() <= tolerance
    assert (reference["class_map_rope_fp32"] != reference["class_map"]).float().mean().item() > tolerance  # control


def test_official_pointmap_checkpoint_under_depth_estimation(tmp_path, load_case):
    meta, reference, image = _official_folder("pointmap", tmp_path, load_case)
    pipe = pipeline("depth-estimation", model=str(tmp_path / "pointmap"), device="cpu")
    assert type(pipe.model) is sapiens2_hf.Sapiens2ForPointmapEstimation
    depth = pipe(image)["predicted_depth"]
    tolerance = meta["noise_floor"]["recommended_tolerance"]["depth_float16"]

    def within(actual, expected):
        diff = (actual.double() - expected.double()).abs()
        stats = {"max_abs": diff.max().item(), "mean_abs": diff.mean().item(),
                 "rel_l2": (diff.norm() / expected.double().norm()).item()}
        return all(stats[k] <= tolerance[k] for k in tolerance), stats

    ok, stats = within(depth.half(), reference["depth_float16"])
    assert ok, stats
    assert not within(depth.half(), reference["depth_float16_rope_fp32"])[0]  # control: the other RoPE mode


def test_remote_code_repositories_need_trust_remote_code_false(tmp_path, monkeypatch):
    """A repository that ships our modeling and processing files (`save_for_hub`'s default) makes transformers'
    factory ask whether to run them (it looks for a video processor next to the remote image processor) unless
    `trust_remote_code` is given; `trust_remote_code=False` uses the installed sapiens2_hf without asking."""
    _save("seg", tmp_path / "seg", remote_code=True)

    def no_prompt(*args, **kwargs):
        raise AssertionError("transformers asked whether to run remote code")

    monkeypatch.setattr("builtins.input", no_prompt)
    pipe = pipeline("image-segmentation", model=str(tmp_path / "seg"), trust_remote_code=False, device="cpu")
    assert type(pipe.model) is sapiens2_hf.Sapiens2ForSemanticSegmentation
    assert pipe(Image.fromarray(_images(1)[0]))


def test_depth_estimation_pipeline_gives_metric_depth_of_our_pointmap(pointmap_folder):
    pipe = pipeline("depth-estimation", model=str(pointmap_folder), device="cpu")
    assert type(pipe).__name__ == "DepthEstimationPipeline"
    assert type(pipe.model) is sapiens2_hf.Sapiens2ForPointmapEstimation
    ours = pipeline("sapiens2-pointmap", model=str(pointmap_folder), device="cpu")
    for image in _images(3):
        height, width = image.shape[:2]
        result = pipe(Image.fromarray(image))
        assert set(result) == {"predicted_depth", "depth"}
        depth = result["predicted_depth"]
        assert isinstance(depth, torch.Tensor) and depth.shape == (height, width) and depth.dtype == torch.float32
        assert isinstance(result["depth"], Image.Image) and result["depth"].size == (width, height)
        expected = ours(image)
        # Z of our metric pointmap, exactly (letterbox padding recomputed from the size = the preprocess one)
        np.testing.assert_array_equal(depth.numpy(), expected["depth"])
        np.testing.assert_array_equal(depth.numpy(), expected["pointmap"][..., 2])
    # control: the canonical (unscaled) Z differs by the predicted scale
    processor = pipe.image_processor
    image = _images(1)[0]
    inputs = processor(image)
    with torch.no_grad():
        outputs = pipe.model(inputs["pixel_values"])
    canonical = processor.post_process_pointmap_estimation(types.SimpleNamespace(pointmaps=outputs.pointmaps, scales=None),
                                                           source_sizes=[image.shape[:2]])[0]["depth"]
    assert not torch.allclose(canonical, pipe(Image.fromarray(image))["predicted_depth"], rtol=1e-3)


def test_post_process_depth_estimation_focal_length_and_sizes():
    model = _model("pointmap")
    processor = Sapiens2HFImageProcessor(task="pointmap", size=SIZE)
    images = _images(2)
    sizes = [image.shape[:2] for image in images]
    inputs = processor(images)
    with torch.no_grad():
        outputs = model(inputs["pixel_values"])
    predicted = processor.post_process_depth_estimation(outputs, target_sizes=sizes)
    for result, size in zip(predicted, sizes):
        assert result["predicted_depth"].shape == size and result["focal_length"].ndim == 0
    # without sizes: the model's output grid, padding included
    assert processor.post_process_depth_estimation(outputs)[0]["predicted_depth"].shape == (64, 48)
    # the focal length the predicted scale implies gives the predicted depth back
    implied = [float(r["focal_length"]) for r in predicted]
    again = processor.post_process_depth_estimation(outputs, target_sizes=sizes, focal_length=implied)
    def close(actual, expected):  # float32 rounding of the scale, relative to the map's range
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=2e-6 * expected.abs().max().item())

    for a, b in zip(again, predicted):
        close(a["predicted_depth"], b["predicted_depth"])
    # a given focal length f: metric depth = canonical depth * f * (input width / original width of the letterboxed
    # content) / 768, computed here by hand from the letterbox geometry
    focal = [500.0, 1200.0]
    given = processor.post_process_depth_estimation(outputs, target_sizes=sizes, focal_length=focal)
    for i, (height, width) in enumerate(sizes):
        ratio = min(48 / width, 64 / height)
        resized_width = max(1, int(width * ratio))
        expected_scale = 768.0 / (focal[i] * resized_width / width)
        expected = predicted[i]["predicted_depth"] * (outputs.scales[i, 0] / expected_scale)
        close(given[i]["predicted_depth"], expected)
        assert float(given[i]["focal_length"]) == focal[i]
        # control: a focal length taken in model-input pixels (no letterbox factor) is another depth
        wrong = predicted[i]["predicted_depth"] * (outputs.scales[i, 0] / (768.0 / focal[i]))
        assert not torch.allclose(given[i]["predicted_depth"], wrong, rtol=1e-3)
    for bad in (0.0, -3.0, float("nan"), [500.0]):
        with pytest.raises(ValueError, match="focal_length"):
            processor.post_process_depth_estimation(outputs, target_sizes=sizes, focal_length=bad)


def test_depth_estimation_refuses_normal_models(tmp_path):
    """A normal map is no depth: the registry no longer tags normal models `depth-estimation`, and the stock
    pipeline on a normal checkpoint fails with an error naming the right pipeline."""
    assert TASK_SPECS["normal"].pipeline_tag != "depth-estimation"
    from sapiens2_hf.hub.model_card import render_model_card

    assert render_model_card(sapiens2_hf.tiny_config("normal")).data.pipeline_tag == "image-to-image"
    assert render_model_card(sapiens2_hf.tiny_config("pointmap")).data.pipeline_tag == "depth-estimation"
    _save("normal", tmp_path / "normal")
    pipe = pipeline("depth-estimation", model=str(tmp_path / "normal"), device="cpu")
    with pytest.raises(ValueError, match="sapiens2-normal"):
        pipe(Image.fromarray(_images(1)[0]))


def test_every_tag_that_names_a_stock_pipeline_runs_there(tmp_path):
    """The model cards' `pipeline_tag` is truthful: each task tagged with a stock pipeline's name runs under it."""
    tagged = {spec.name: spec.pipeline_tag for spec in TASK_SPECS.values()
              if spec.pipeline_tag in ("image-segmentation", "depth-estimation")}
    assert tagged == {"seg": "image-segmentation", "pointmap": "depth-estimation"}
    for task, tag in tagged.items():
        _save(task, tmp_path / task)
        pipe = pipeline(tag, model=str(tmp_path / task), device="cpu")
        assert type(pipe.model) is sapiens2_hf.model_class_for_task(task)
        assert pipe(Image.fromarray(_images(1)[0]))


def test_vanilla_transformers_still_loads_its_own_classes(seg_folder, pointmap_folder):
    """Without sapiens2_hf, our folders (model type `sapiens2_hf`) are not silently taken by transformers' Auto
    classes; transformers' own classes load them when named explicitly (same module and tensor names)."""
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from PIL import Image
        from transformers import AutoModelForDepthEstimation, AutoModelForSemanticSegmentation, pipeline
        from transformers import Sapiens2ForSemanticSegmentation, Sapiens2ImageProcessor
        try:
            AutoModelForSemanticSegmentation.from_pretrained({str(seg_folder)!r})
            raise AssertionError("vanilla AutoModelForSemanticSegmentation built a model of an unknown type")
        except ValueError:
            pass
        model = Sapiens2ForSemanticSegmentation.from_pretrained({str(seg_folder)!r})
        assert type(model).__module__ == "transformers.models.sapiens2.modeling_sapiens2", type(model)
        # our preprocessor_config.json names our class, which vanilla AutoImageProcessor cannot resolve: the stock
        # class reads the same file
        processor = Sapiens2ImageProcessor.from_pretrained({str(seg_folder)!r})
        segments = pipeline("image-segmentation", model=model, image_processor=processor,
                            device="cpu")(Image.new("RGB", (50, 70)))
        assert segments and all(isinstance(s["mask"], Image.Image) for s in segments)
        try:  # transformers maps no `sapiens2` class for depth estimation
            AutoModelForDepthEstimation.from_pretrained({str(pointmap_folder)!r})
            raise AssertionError("vanilla AutoModelForDepthEstimation loaded a Sapiens2 pointmap checkpoint")
        except ValueError:
            pass
        assert "sapiens2_hf" not in sys.modules
        print("ok")
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


# ------------------------------------------------------------------------------------------------------------------
# JSON
# ------------------------------------------------------------------------------------------------------------------


def _assert_round_trip(original, loaded):
    """`loaded` (json.loads of to_json_compatible) equals `original` exactly, arrays compared in their dtype."""
    if isinstance(original, dict):
        assert set(loaded) == set(original)
        for key in original:
            _assert_round_trip(original[key], loaded[key])
    elif isinstance(original, (list, tuple)) and not (original and isinstance(original[0], str)):
        assert len(loaded) == len(original)
        for a, b in zip(original, loaded):
            _assert_round_trip(a, b)
    elif isinstance(original, (np.ndarray, torch.Tensor)):
        array = original.numpy() if isinstance(original, torch.Tensor) else original
        restored = np.asarray(loaded, dtype=array.dtype)
        assert restored.shape == array.shape
        np.testing.assert_array_equal(restored, array)  # bit-exact: NaN-free floats survive JSON exactly
    elif isinstance(original, Image.Image):
        np.testing.assert_array_equal(np.asarray(image_from_json(loaded)), np.asarray(original))
    else:
        assert loaded == original


@pytest.mark.parametrize("task", list(PIPELINE_TASK))
def test_every_sapiens2_pipeline_result_serialises_and_round_trips(task):
    pipe = pipeline(PIPELINE_TASK[task], model=_model(task, rope_dtype="float32"), device="cpu")
    image = _images(1)[0]
    if task == "pose":
        results = [pipe(image, boxes=[[2.0, 3.0, 40.0, 60.0], [10.0, 5.0, 30.0, 30.0]], box_scores=[0.9, 0.25]),
                   people_in_format(pipe(image, boxes=[[2.0, 3.0, 40.0, 60.0]]), "coco17")]
    else:
        results = [pipe(image), pipe([image, image], batch_size=2)]
    for result in results:
        with pytest.raises(TypeError):  # the problem: numpy arrays are not JSON
            json.dumps(result)
        text = json.dumps(to_json_compatible(result), allow_nan=False)
        _assert_round_trip(result, json.loads(text))


def test_stock_pipeline_results_serialise(seg_folder, pointmap_folder):
    image = Image.fromarray(_images(1)[0])
    segments = pipeline("image-segmentation", model=str(seg_folder), device="cpu")(image)
    depth = pipeline("depth-estimation", model=str(pointmap_folder), device="cpu")(image)
    for result in (segments, depth):
        _assert_round_trip(result, json.loads(json.dumps(to_json_compatible(result), allow_nan=False)))
    dropped = json.loads(json.dumps(to_json_compatible(depth, images="drop")))
    assert set(dropped) == {"predicted_depth"}
    assert all(set(s) == {"score", "label"} for s in to_json_compatible(segments, images="drop"))


def test_json_helper_rules():
    value = {"a": np.array([1.5, np.nan, np.inf], np.float32), 3: torch.tensor([True, False]),
             "n": np.int64(7), "t": (np.float16(0.5), None, "x"), "g": (i for i in range(2)),
             "bf16": torch.tensor([1.25], dtype=torch.bfloat16)}
    converted = to_json_compatible(value)
    assert converted == {"a": [1.5, None, None], "3": [True, False], "n": 7, "t": [0.5, None, "x"], "g": [0, 1],
                         "bf16": [1.25]}
    json.dumps(converted, allow_nan=False)
    with pytest.raises(TypeError, match="cannot convert a builtins.object"):
        to_json_compatible({"x": object()})
    with pytest.raises(ValueError, match="images='jpeg'"):
        to_json_compatible({}, images="jpeg")
    with pytest.raises(ValueError, match="data:image/png"):
        image_from_json("not an image")


# ------------------------------------------------------------------------------------------------------------------
# batching through transformers' machinery
# ------------------------------------------------------------------------------------------------------------------


def _assert_same(a, b):
    """Exactly equal results (dicts / lists of numpy arrays, numbers, strings)."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def _image_dataset(images):
    import datasets

    return datasets.Dataset.from_dict({"image": [Image.fromarray(i) for i in images]}).cast_column(
        "image", datasets.Image())


@pytest.mark.parametrize("task", DENSE_TASKS)
def test_dense_batching_equals_one_by_one(task):
    model = _per_sample(_model(task, rope_dtype="float32"))
    pipe = pipeline(PIPELINE_TASK[task], model=model, device="cpu")
    images = _images(5)
    one_by_one = [pipe(image) for image in images]
    assert model.forward_batch_sizes == [1] * 5
    model.forward_batch_sizes.clear()
    for batch_size, calls in ((2, [2, 2, 1]), (3, [3, 2]), (8, [5])):
        _assert_same(pipe(images, batch_size=batch_size), one_by_one)
        assert model.forward_batch_sizes == calls  # transformers' DataLoader made these batches
        model.forward_batch_sizes.clear()
    generated = pipe((image for image in images), batch_size=2)
    assert isinstance(generated, types.GeneratorType) or hasattr(generated, "__next__")
    _assert_same(list(generated), one_by_one)
    # a `datasets` dataset through transformers' KeyDataset (images stored as PNG: the same pixels)
    _assert_same(list(pipe(KeyDataset(_image_dataset(images), "image"), batch_size=3)), one_by_one)
    _assert_same(pipe(tuple(images), batch_size=2), one_by_one)
    if task == "seg":  # DataLoader worker processes run `preprocess`
        _assert_same(pipe(images, batch_size=2, num_workers=2), one_by_one)
    # control: a broken batch (another image's rows) is caught by the same comparison
    with pytest.raises(AssertionError):
        _assert_same(pipe(images[1:] + images[:1], batch_size=2), one_by_one)


def _pose_boxes(images):
    """Per image: several people, one, none."""
    boxes = []
    for i, image in enumerate(images):
        height, width = image.shape[:2]
        count = [2, 0, 3, 1, 2][i % 5]
        boxes.append([[2.0 + 3 * k, 1.0 + 2 * k, width - 5.0 - k, height - 4.0 - 2 * k] for k in range(count)])
    return boxes


def test_pose_is_a_chunk_pipeline_batching_crops_across_images():
    from transformers.pipelines.base import ChunkPipeline

    model = _per_sample(_model("pose", rope_dtype="float32"))
    pipe = pipeline("sapiens2-pose", model=model, device="cpu")
    assert isinstance(pipe, ChunkPipeline)
    images = _images(5)
    boxes = _pose_boxes(images)
    scores = [[0.5 + 0.1 * k for k in range(len(b))] for b in boxes]
    one_by_one = [pipe(image, boxes=b, box_scores=s) for image, b, s in zip(images, boxes, scores)]
    assert [len(r) for r in one_by_one] == [2, 0, 3, 1, 2]
    model.forward_batch_sizes.clear()
    _assert_same(pipe(images, boxes=boxes, box_scores=scores, batch_size=3), one_by_one)
    # 8 people + 1 row for the image without any (never run) = 9 rows, 3 per call across images: [2 people + the
    # empty row], [3], [1 + 2], each run twice (flip test)
    assert model.forward_batch_sizes == [2, 2, 3, 3, 3, 3]
    model.forward_batch_sizes.clear()
    _assert_same(pipe(images, boxes=boxes, box_scores=scores, crop_batch_size=4, flip_test=False), [
        pipe(image, boxes=b, box_scores=s, flip_test=False) for image, b, s in zip(images, boxes, scores)])
    # dict inputs carry their own boxes: a generator, and a `datasets` dataset with image and box columns
    rows = [{"image": image, "boxes": b, "box_scores": s} for image, b, s in zip(images, boxes, scores)]
    _assert_same(list(pipe((row for row in rows), batch_size=2)), one_by_one)
    import datasets

    table = datasets.Dataset.from_dict({"image": [Image.fromarray(i) for i in images], "boxes": boxes,
                                        "box_scores": scores, "extra": list(range(5))}).cast_column(
        "image", datasets.Image())
    _assert_same(list(pipe((row for row in table), batch_size=4)), one_by_one)
    # KeyDataset of images with a detector (deterministic: the boxes above, looked up by image size)
    by_size = {image.shape[:2]: (b, s) for image, b, s in zip(images, boxes, scores)}

    def detector(image, threshold):
        found, found_scores = by_size[(image.size[1], image.size[0])]
        return [{"label": "person", "score": score, "box": dict(zip(("xmin", "ymin", "xmax", "ymax"), box))}
                for box, score in zip(found, found_scores)]

    detected = list(pipe(KeyDataset(table, "image"), detector=detector, nms_threshold=1.0,
                         fallback_to_full_image=False, batch_size=3))
    expected = [pipe(image, detector=detector, nms_threshold=1.0, fallback_to_full_image=False) for image in images]
    _assert_same(detected, expected)
    assert [len(r) for r in detected] == [2, 0, 3, 1, 2]
    # errors still name the image's number in the whole call, whichever way it came in
    bad = [dict(row) for row in rows]
    bad[3]["boxes"] = [[5.0, 5.0, 5.0, 9.0]]
    with pytest.raises(ValueError, match="box 0 of image 3"):
        list(pipe((row for row in bad), batch_size=2))
    with pytest.raises(ValueError, match="boxes= needs an image or a list of images"):
        pipe((image for image in images), boxes=boxes)
    with pytest.raises(ValueError, match="without an 'image' key"):
        pipe([{"picture": images[0]}])
    assert pipe([]) == []
