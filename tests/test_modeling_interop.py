"""Interop with transformers' own Sapiens2 port, kept honest by comparing weights and outputs, not by importing it.

Our modeling and processing files are self-contained (they ship to the Hub as remote code and must not depend on the
port's private internals), yet they promise the port's module names, parameter names, tensor layout and processor
config fields. So: the same state dict loads strictly into both, and in float32 RoPE mode (the port's arithmetic) both
give the same outputs; both image processors read each other's preprocessor_config.json and give the same
pixel_values where the geometry is the identity; our pose training targets equal the port's; no file in src/ imports
the port; and a saved repository (model and image processor) runs in a process where the port cannot be imported.
"""

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from transformers.models.sapiens2.image_processing_sapiens2 import generate_udp_gaussian_heatmaps

import sapiens2_hf
from sapiens2_hf.hub import save_for_hub
from sapiens2_hf.processing import Sapiens2HFImageProcessor, image_processor_for_task
from sapiens2_hf.modeling.sapiens2_processing_ops import udp_gaussian_heatmaps

pytestmark = pytest.mark.compat

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sapiens2_hf"
PORT_MODULE = "transformers.models.sapiens2"
TRANSFORMERS_CLASSES = {
    None: transformers.Sapiens2Model,
    "pose": transformers.Sapiens2ForPoseEstimation,
    "seg": transformers.Sapiens2ForSemanticSegmentation,
    "normal": transformers.Sapiens2ForNormalEstimation,
    "pointmap": transformers.Sapiens2ForPointmapEstimation,
}
FIELDS = {None: "last_hidden_state", "pose": "heatmaps", "seg": "logits", "normal": "normals", "pointmap": "pointmaps", "albedo": "albedos"}
# Both sides compute in float32 then; what remains is RoPE angle rounding (`coords / periods` here, `coords * inv_freq`
# there: ~1e-7 relative), far below the 1e-3 a single swapped tensor causes (the broken control).
REL_L2_TOLERANCE = 1e-5


def _rel_l2(actual: torch.Tensor, reference: torch.Tensor) -> float:
    return ((actual.double() - reference.double()).norm() / reference.double().norm()).item()


def _randomised_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors plus seeded noise: fresh models have LayerScale 1e-4 (attention branches nearly off) and
    unit norms, which would hide a swapped attention or norm tensor."""
    generator = torch.Generator().manual_seed(0)
    return {
        name: tensor + 0.05 * torch.randn(tensor.shape, generator=generator)
        for name, tensor in model.state_dict().items()
    }


def _pair(task: str | None, attn_implementation: str):
    """Our model and transformers' class built from the same config and loaded with the same state dict."""
    config = sapiens2_hf.tiny_config(task, rope_dtype="float32")
    ours = sapiens2_hf.model_class_for_task(task)(config)
    theirs_config = transformers.Sapiens2Config.from_dict(config.to_dict())
    theirs = TRANSFORMERS_CLASSES[task](theirs_config)
    assert set(ours.state_dict()) == set(theirs.state_dict())
    state_dict = _randomised_state_dict(ours)
    ours.load_state_dict(state_dict, strict=True)
    theirs.load_state_dict(state_dict, strict=True)
    for model in (ours, theirs):
        model.config._attn_implementation = attn_implementation
        model.eval()
    return ours, theirs, state_dict


def _outputs(model, pixel_values, **kwargs):
    with torch.no_grad():
        return model(pixel_values, **kwargs)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("task", list(TRANSFORMERS_CLASSES))
def test_same_weights_same_outputs_as_transformers(task, attn_implementation):
    ours, theirs, _ = _pair(task, attn_implementation)
    pixel_values = torch.randn(2, 3, 64, 48, generator=torch.Generator().manual_seed(1))
    mine, reference = _outputs(ours, pixel_values), _outputs(theirs, pixel_values)
    assert _rel_l2(getattr(mine, FIELDS[task]), getattr(reference, FIELDS[task])) < REL_L2_TOLERANCE
    if task == "pointmap":
        assert reference.scales is not None and _rel_l2(mine.scales, reference.scales) < REL_L2_TOLERANCE
    if task is None:
        assert _rel_l2(mine.pooler_output, reference.pooler_output) < REL_L2_TOLERANCE
        # Recorded hidden states: the encoder input and every layer output, before the final norm, on both sides.
        mine = _outputs(ours, pixel_values, output_hidden_states=True, output_attentions=True)
        reference = _outputs(theirs, pixel_values, output_hidden_states=True, output_attentions=True)
        assert len(mine.hidden_states) == len(reference.hidden_states) == ours.config.num_hidden_layers + 1
        for own, their in zip(mine.hidden_states, reference.hidden_states):
            assert _rel_l2(own, their) < REL_L2_TOLERANCE
        assert len(mine.attentions) == len(reference.attentions)  # empty with sdpa (no weights), one per layer eager
        for own, their in zip(mine.attentions, reference.attentions):
            assert _rel_l2(own, their) < REL_L2_TOLERANCE


@pytest.mark.parametrize("task", list(TRANSFORMERS_CLASSES))
def test_broken_control_one_swapped_tensor_fails(task):
    """Swapping the SwiGLU gate and up projections of one block in transformers' copy must break the agreement."""
    ours, theirs, state_dict = _pair(task, "sdpa")
    prefix = "model.layer.1.mlp." if task is None else "model.model.layer.1.mlp."
    broken = dict(state_dict)
    broken[prefix + "gate_proj.weight"], broken[prefix + "up_proj.weight"] = (
        state_dict[prefix + "up_proj.weight"],
        state_dict[prefix + "gate_proj.weight"],
    )
    theirs.load_state_dict(broken, strict=True)
    pixel_values = torch.randn(2, 3, 64, 48, generator=torch.Generator().manual_seed(1))
    field = FIELDS[task]
    assert _rel_l2(getattr(_outputs(ours, pixel_values), field), getattr(_outputs(theirs, pixel_values), field)) > 1e-3


def test_seeded_backbones_initialise_like_transformers():
    """Same construction order and init as the port: a seeded backbone gets transformers' exact initial weights.
    (Task heads match only in distribution: the port builds each head convolution twice, which shifts the RNG.)"""
    config = sapiens2_hf.tiny_config()
    torch.manual_seed(0)
    ours = sapiens2_hf.Sapiens2Model(config).state_dict()
    torch.manual_seed(0)
    theirs = transformers.Sapiens2Model(transformers.Sapiens2Config.from_dict(config.to_dict())).state_dict()
    assert all(torch.equal(ours[name], theirs[name]) for name in theirs)
    assert not torch.equal(ours["model.layer.0.layer_scale1.lambda1"], torch.ones(config.hidden_size))  # 1e-4, ours


# ----------------------------------------------------------------------------------------------- no port imports


def port_imports(source: str) -> list[str]:
    """Every import of transformers' Sapiens2 port in `source` (any import form, or a module name in a string, as
    `importlib.import_module` would take it)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith(PORT_MODULE)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith(PORT_MODULE):
                found.append(node.module)
            elif node.module == "transformers.models":
                found += [f"{node.module}.{alias.name}" for alias in node.names if alias.name == "sapiens2"]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(PORT_MODULE):
            found.append(node.value)
    return found


def test_the_import_check_catches_every_form():
    sources = [
        "from transformers.models.sapiens2 import modeling_sapiens2 as _port",
        "import transformers.models.sapiens2.modeling_sapiens2",
        "from transformers.models import sapiens2",
        "import importlib\nimportlib.import_module('transformers.models.sapiens2.configuration_sapiens2')",
    ]
    assert all(port_imports(source) for source in sources)
    assert not port_imports("from transformers import PreTrainedModel\nfrom transformers.models import auto")


def test_no_source_file_imports_the_port():
    """modeling/, processing/ and pipelines/ ship to the Hub as remote code and must not depend on the port's private
    internals; the rest of src/ builds on them and has no reason to either (the port is for tests to compare with)."""
    files = sorted(PACKAGE.rglob("*.py"))
    assert {"modeling", "processing", "pipelines", "pretraining", "hub"} <= {path.parent.name for path in files}
    offenders = {str(path.relative_to(PACKAGE)): port_imports(path.read_text()) for path in files}
    assert not any(offenders.values()), {name: found for name, found in offenders.items() if found}


# ------------------------------------------------------------------------------------------------ image processor

# Both processors normalise `(x - mean) / std` in float32 from the same config fields, with the constants rounded to
# float32 in a different order (ours: mean / rescale in float64 then rounded; transformers: float32 mean times
# 1 / rescale): a few float32 ulps apart at most (measured max-abs: 0 with the values below, 2.4e-7 with the ImageNet
# defaults). A channel swap (measured 5.06) or a normalisation that did not travel with the config (0.80) is far above.
PIXEL_VALUES_TOLERANCE = 1e-5
# Normalisation other than the default (ImageNet), so that a field that does not travel between the two classes shows.
CUSTOM_NORMALISATION = {"image_mean": [0.5, 0.4, 0.3], "image_std": [0.2, 0.25, 0.3], "rescale_factor": 1 / 250}


def _max_abs(actual: torch.Tensor, reference: torch.Tensor) -> float:
    return (actual.double() - reference.double()).abs().max().item()


def _input_sized_images(count: int = 3, size: tuple[int, int] = (64, 48)) -> list[np.ndarray]:
    generator = np.random.default_rng(7)
    return [generator.integers(0, 256, (*size, 3), dtype=np.uint8) for _ in range(count)]


@pytest.mark.parametrize("task", ["seg", "pretrain", "normal", "pointmap", "albedo"])
def test_processor_reads_transformers_config_and_matches_its_pixel_values(task, tmp_path):
    """transformers' stock processor writes a config; ours reads it for `task` and saves its own; the stock class
    reads that one back. On images at the input size (the geometry is then the identity for both: stretch and
    letterbox alike) both give the same pixel_values: the config fields, normalisation, channel order, layout and
    dtype agree. Resampling differs by design (ours is the official OpenCV geometry; tests/test_processing_parity.py
    shows transformers' crop is not the official one)."""
    stock = transformers.Sapiens2ImageProcessor(size={"height": 64, "width": 48}, **CUSTOM_NORMALISATION)
    stock.save_pretrained(tmp_path / "stock")
    ours = Sapiens2HFImageProcessor.from_pretrained(tmp_path / "stock", task=task)
    assert ours.task == task and ours.input_size == (64, 48)
    ours.save_pretrained(tmp_path / "ours")
    stock_again = transformers.Sapiens2ImageProcessor.from_pretrained(tmp_path / "ours")
    assert stock_again.do_pad == (task in ("normal", "pointmap", "albedo"))  # transformers' letterbox switch
    images = _input_sized_images()
    mine = ours(images)["pixel_values"]
    theirs = stock_again(images, return_tensors="pt")["pixel_values"]
    assert mine.dtype == theirs.dtype == torch.float32 and mine.shape == theirs.shape == (3, 3, 64, 48)
    assert _max_abs(mine, theirs) <= PIXEL_VALUES_TOLERANCE
    # Broken controls: BGR input, and a processor whose normalisation did not come from the config.
    assert _max_abs(ours([image[..., ::-1].copy() for image in images])["pixel_values"], theirs) > 0.1
    assert _max_abs(image_processor_for_task(task, size={"height": 64, "width": 48})(images)["pixel_values"], theirs) > 0.1


def _pose_targets_case(seed: int):
    """Boxes and keypoints of two images: keypoints inside, around and far outside their boxes, some invisible, one
    person without keypoints and one with `[x, y]` rows only (all visible)."""
    generator = torch.Generator().manual_seed(seed)
    boxes, keypoints = [], []
    for num_people in (3, 2):
        image_boxes, image_people = [], []
        for _ in range(num_people):
            x, y = (torch.rand(2, generator=generator) * 300 - 20).tolist()
            w, h = (torch.rand(2, generator=generator) * 200 + 10).tolist()
            rows = torch.rand(17, 3, generator=generator)
            rows[:, 0] = x - 0.5 * w + rows[:, 0] * 2 * w
            rows[:, 1] = y - 0.5 * h + rows[:, 1] * 2 * h
            rows[:, 2] = (rows[:, 2] > 0.25).float() * 2
            rows[0] = torch.tensor([x - 10 * w, y + 10 * h, 2.0])  # its 3-sigma square misses the map: weight 0
            image_boxes.append([x, y, w, h])
            image_people.append(rows.tolist())
        boxes.append(image_boxes)
        keypoints.append(image_people)
    keypoints[0][1] = []
    keypoints[1][0] = [row[:2] for row in keypoints[1][0]]
    return boxes, keypoints


@pytest.mark.parametrize("input_size, downscale, sigma", [((256, 192), 4, 6.0), ((128, 96), 4, 2.0), ((96, 128), 2, 3.5)])
def test_udp_heatmap_targets_equal_transformers(input_size, downscale, sigma):
    """Our UDP Gaussian heatmap encoder (pose training targets) is bit-identical to transformers'
    `generate_udp_gaussian_heatmaps` (same process, same float32 operations): max-abs 0."""
    boxes, keypoints = _pose_targets_case(seed=sum(input_size) + downscale)
    mine, my_weights = udp_gaussian_heatmaps(boxes, keypoints, input_size, downscale, sigma)
    theirs, their_weights = generate_udp_gaussian_heatmaps(boxes, keypoints, input_size, downscale, sigma)
    assert len(mine) == len(theirs) == 5 and mine[1].shape[0] == 0
    assert [h.shape for h in mine] == [h.shape for h in theirs]
    assert max(_max_abs(a, b) for a, b in zip(mine, theirs) if a.numel()) == 0.0
    assert all(torch.equal(a, b) for a, b in zip(my_weights, their_weights))
    assert 0 < sum(w.sum().item() for w in my_weights) < sum(w.numel() for w in my_weights)  # some weights are 0
    # Broken controls: one visible keypoint moved by half a pixel of the input, and another sigma.
    visible = int(their_weights[0].nonzero()[0])
    moved = [[[list(row) for row in person] for person in image] for image in keypoints]
    moved[0][0][visible][0] += 0.5
    shifted, _ = udp_gaussian_heatmaps(boxes, moved, input_size, downscale, sigma)
    assert _max_abs(shifted[0], theirs[0]) > 1e-3
    wider, _ = udp_gaussian_heatmaps(boxes, keypoints, input_size, downscale, sigma * 1.05)
    assert _max_abs(wider[0], theirs[0]) > 1e-3


def test_processor_keypoint_labels_are_transformers_targets():
    """The processor's `keypoints=` path: labels and weights equal transformers' targets for the boxes it cropped."""
    boxes, keypoints = _pose_targets_case(seed=3)
    keypoints[0][1] = keypoints[0][0]  # the processor wants keypoints for every box
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 128, "width": 96})
    images = [np.zeros((300, 400, 3), np.uint8)] * 2
    batch = processor(images, boxes=boxes, keypoints=keypoints)
    cropped = [[[x0, y0, x1 - x0, y1 - y0] for x0, y0, x1, y1 in batch["boxes_xyxy"][batch["image_index"] == i].tolist()]
               for i in range(2)]
    theirs, their_weights = generate_udp_gaussian_heatmaps(cropped, keypoints, (128, 96), 4, 6.0)
    assert len(batch["labels"]) == len(theirs) == 5
    assert max(_max_abs(a, b) for a, b in zip(batch["labels"], theirs)) == 0.0
    assert all(torch.equal(a, b) for a, b in zip(batch["label_weights"], their_weights))


# ------------------------------------------------------------------------------- remote code without the port

# A transformers without the port: its package cannot be imported, and the Auto registries do not know its model types
# (as in a release without it). Both are needed: transformers' Auto classes match configs by class *name*, and ours is
# also called `Sapiens2Config`, so with the registries intact `AutoModel` itself would import the port's modeling module
# to decide between local and remote code (transformers' own lookup, not an import of ours).
BLOCK_PORT_AND_PACKAGE = textwrap.dedent(
    f"""
    import sys
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name == {PORT_MODULE!r} or name.startswith({PORT_MODULE + "."!r}):
                raise ImportError(name + " is blocked in this process")
            if name == "sapiens2_hf" or name.startswith("sapiens2_hf."):
                raise ImportError("sapiens2_hf is not available in this process")
    sys.meta_path.insert(0, _Block())
    from transformers.models.auto import configuration_auto, modeling_auto
    for _names in [configuration_auto.CONFIG_MAPPING_NAMES] + [
        value for key, value in vars(modeling_auto).items() if key.endswith("_MAPPING_NAMES") and isinstance(value, dict)
    ]:
        _names.pop("sapiens2", None)
        _names.pop("sapiens2_head", None)
    """
)


# Runs one image through a task's image processor, model and post-processing, with the processor's own API only; the
# same source runs here (our installed classes) and in the child process (the repo's remote code).
RUN_PROCESSOR = textwrap.dedent(
    """
    def run_processor(processor, model, image):
        import torch

        inputs = processor(image)
        with torch.no_grad():
            outputs = model(inputs["pixel_values"])
        task = processor.task
        if task == "pose":
            people = processor.post_process_pose_estimation(
                outputs, crops=inputs)
            prediction = people[0][0]["keypoints"]
        elif task == "seg":
            prediction = processor.post_process_semantic_segmentation(
                outputs, target_sizes=inputs["original_sizes"], return_segmentation_scores=True)[0]["segmentation_scores"]
        else:
            post_process = getattr(processor, "post_process_" + task + "_estimation")
            field = {"normal": "normals", "pointmap": "pointmap", "albedo": "albedo"}[task]
            prediction = post_process(outputs, source_sizes=inputs["original_sizes"], paddings=inputs["padding"])[0][field]
        return inputs["pixel_values"], prediction
    """
)


def test_saved_repo_runs_where_the_port_cannot_be_imported(tmp_path):
    """Model and image processor of a saved repo load through the Auto classes with `trust_remote_code=True` where
    neither the port nor sapiens2_hf can be imported, and give our outputs: model outputs within `REL_L2_TOLERANCE`,
    pixel_values within `PIXEL_VALUES_TOLERANCE` and post-processed predictions within `REL_L2_TOLERANCE` of the
    installed classes' (bit-equality is not asserted across processes)."""
    tasks = [None, "pose", "seg", "normal", "pointmap", "albedo"]
    pixel_values = torch.randn(1, 3, 64, 48, generator=torch.Generator().manual_seed(0))
    image = np.random.default_rng(0).integers(0, 256, (70, 50, 3), dtype=np.uint8)  # not the input size: resampled
    namespace = {}
    exec(RUN_PROCESSOR, namespace)
    expected, processed = {}, {}
    for task in tasks:
        torch.manual_seed(0)
        model = sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task)).eval()
        processor = image_processor_for_task(task, size={"height": 64, "width": 48}) if task else None
        save_for_hub(model, tmp_path / f"repo-{task or 'backbone'}", image_processor=processor)
        expected[task] = getattr(_outputs(model, pixel_values), FIELDS[task])
        if processor is not None:
            processed[task] = namespace["run_processor"](processor, model, image)
    torch.save({"expected": expected, "pixel_values": pixel_values, "image": image}, tmp_path / "reference.pt")
    # Controls: copies of the seg repo with one shipped file (modeling, then processing) importing the port.
    controls = []
    for shipped, load in [("modeling_sapiens2_hf.py", "AutoModel"), ("image_processing_sapiens2_hf.py", "AutoImageProcessor")]:
        tampered = tmp_path / f"repo-seg-tampered-{load}"
        shutil.copytree(tmp_path / "repo-seg", tampered)
        path = tampered / shipped
        path.write_text(path.read_text() + f"\nimport {PORT_MODULE}.modeling_sapiens2\n")  # after any __future__ import
        controls.append((load, str(tampered)))
    # One child process for the loads and the controls (each process costs ~7 s of imports); the controls run last.
    code = BLOCK_PORT_AND_PACKAGE + RUN_PROCESSOR + textwrap.dedent(
        f"""
        import torch
        from transformers import AutoImageProcessor, AutoModel
        reference = torch.load({str(tmp_path / 'reference.pt')!r}, weights_only=False)
        processed = {{}}
        for task, field in {[(task, FIELDS[task]) for task in tasks]!r}:
            repo = {str(tmp_path)!r} + f"/repo-{{task or 'backbone'}}"
            model = AutoModel.from_pretrained(repo, trust_remote_code=True)
            assert type(model).__module__.startswith("transformers_modules"), type(model)
            with torch.no_grad():
                output = getattr(model(reference["pixel_values"]), field)
            expected = reference["expected"][task].double()
            rel_l2 = ((output.double() - expected).norm() / expected.norm()).item()
            assert rel_l2 < {REL_L2_TOLERANCE}, (task, rel_l2)
            if task is not None:
                processor = AutoImageProcessor.from_pretrained(repo, trust_remote_code=True)
                assert type(processor).__module__.startswith("transformers_modules"), type(processor)
                assert processor.task == task, (processor.task, task)
                processed[task] = run_processor(processor, model, reference["image"])
        torch.save(processed, {str(tmp_path / 'processed.pt')!r})
        loaded = sorted(name for name in sys.modules if name.startswith({PORT_MODULE!r}) or name.startswith("sapiens2_hf"))
        assert not loaded, loaded
        print("ok")

        import traceback
        import transformers
        for load, repo in {controls!r}:
            try:
                getattr(transformers, load).from_pretrained(repo, trust_remote_code=True)
            except Exception:
                blocked = "is blocked in this process" in traceback.format_exc()
                print("control", load, "blocked" if blocked else "failed otherwise")
                if not blocked:
                    traceback.print_exc()
            else:
                print("control", load, "loaded")
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0 and "ok" in result.stdout.splitlines(), result.stderr[-3000:]
    remote = torch.load(tmp_path / "processed.pt")
    assert sorted(remote) == sorted(processed)
    for task, (pixels, prediction) in processed.items():
        remote_pixels, remote_prediction = remote[task]
        assert pixels.shape == remote_pixels.shape and _max_abs(remote_pixels, pixels) <= PIXEL_VALUES_TOLERANCE, task
        assert prediction.shape == remote_prediction.shape, task
        assert _rel_l2(remote_prediction, prediction) < REL_L2_TOLERANCE, task

    # Controls: the same loads fail once a shipped modeling or processing file imports the port.
    for load, _ in controls:
        assert f"control {load} blocked" in result.stdout.splitlines(), (load, result.stdout, result.stderr[-3000:])


_PORT_BLOCK_CHECK = BLOCK_PORT_AND_PACKAGE + textwrap.dedent(
    """
    import transformers
    assert "sapiens2" not in transformers.CONFIG_MAPPING
    transformers.Sapiens2Model
    """
)
# The child (~4 s on one core, mostly importing transformers) runs from the start of the session, beside the other
# tests (conftest.py).
EARLY_CHILDREN = {"port-block": ("test_the_port_block_works", lambda folder: {
    "args": [sys.executable, "-c", _PORT_BLOCK_CHECK], "env": {**os.environ, "PYTHONPATH": ""}, "cwd": folder})}


def test_the_port_block_works(early_child):
    """Control: the blocker really makes the port unimportable in the child process."""
    result, _ = early_child("port-block")
    assert result.returncode != 0 and "is blocked in this process" in result.stderr, result.stderr[-2000:]
