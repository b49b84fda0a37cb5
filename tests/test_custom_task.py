"""A seventh task added from a user's own code, in this one file: a 2-channel DensePose-style UV regression head on the
Sapiens2 backbone, written as four objects (output class, loss, model class carrying its spec, metric) with its name
typed once (`task = "uv"`), registered with `sapiens2_hf.register_task` and run through every surface the six official
tasks have: the model and Auto classes, `pipeline(...)`, the command line on an image and a video, the web app through
gradio_client, stock `Trainer`, `training_scripts/finetune.py` on a `datasets.Dataset`, its metric and ONNX export.

Everything task-specific below is what a user writes; nothing in the package names `uv`. The registration is undone
after the module (`unregister_task`), so the rest of the suite sees the six official tasks only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn
from transformers.utils import ModelOutput

import sapiens2_hf
from sapiens2_hf import TaskSpec

# compat: the registration reaches into transformers (Auto mappings, the pipeline registry): checked at both ends
pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("one_thread")]


# ------------------------------------------------------------------------------------------------ the user's code


@dataclass
class Sapiens2UVEstimatorOutput(ModelOutput):
    """`uvs`: `(batch_size, 2, height, width)` body-surface coordinates (u, v) in [0, 1]."""

    loss: torch.Tensor | None = None
    uvs: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class UVLoss(nn.Module):
    """L1 between predicted and target UV on the person's pixels."""

    def forward(self, uvs, labels, mask=None):
        if uvs.shape[-2:] != labels.shape[-2:]:
            uvs = nn.functional.interpolate(uvs, size=labels.shape[-2:], mode="bilinear", align_corners=False)
        weight = torch.ones_like(labels[:, :1]) if mask is None else mask.to(uvs.dtype)
        l1 = ((uvs - labels).abs() * weight).sum() / (weight.sum() * uvs.shape[1]).clamp(min=1)
        return l1, {"l1_loss": l1}


class Sapiens2ForUVEstimation(sapiens2_hf.Sapiens2TaskModel):
    """Body-surface UV regression: everything else (pipeline, data, training, command line) defaults to a dense map."""

    task = "uv"
    loss_class = UVLoss
    output_class = Sapiens2UVEstimatorOutput
    spec = TaskSpec(title="Body-surface UV regression", num_labels=2, foreground_fill=0.0,
                    description="`uvs`: body-surface (u, v) in [0, 1] per pixel")

    def forward(self, pixel_values, labels=None, mask=None, **kwargs):
        return self.decode(pixel_values, labels=labels, loss_targets=(mask,), **kwargs)


class UVMetric:
    """Streaming mean absolute UV error on the person's pixels (`uv_mae`, lower is better)."""

    def __init__(self):
        self.total = torch.zeros(2, dtype=torch.float64)

    def statistics(self, predictions, targets, mask=None):
        if predictions.shape[-2:] != targets.shape[-2:]:
            predictions = nn.functional.interpolate(predictions, size=targets.shape[-2:], mode="bilinear")
        weight = torch.ones_like(targets[:, :1]) if mask is None else mask.to(predictions.dtype)
        error = ((predictions - targets).abs().mean(1, keepdim=True) * weight).flatten(1).sum(1)
        return torch.stack([error.double(), weight.flatten(1).sum(1).double()], dim=1)

    def accumulate(self, statistics):
        self.total += statistics.double().sum(0).cpu()

    def compute(self):
        return {"uv_mae": float(self.total[0] / self.total[1].clamp(min=1))}


@pytest.fixture(scope="module", autouse=True)
def uv_task():
    sapiens2_hf.register_task(Sapiens2ForUVEstimation, metric=UVMetric)
    yield
    sapiens2_hf.unregister_task(Sapiens2ForUVEstimation.task)


# ------------------------------------------------------------------------------------------------------- the tests

UV = "uv"  # the name as the surfaces take it (a sub-command, a pipeline name, --task)


def test_the_spec_is_derived_from_the_class():
    """Name, model class, output class and field, pipeline name, result map come from the class; the data and
    training facets are the dense-map defaults, with the class's loss and the given metric."""
    from sapiens2_hf.data.tasks import DATA_TASKS
    from sapiens2_hf.training.tasks import TRAINING_TASKS

    spec = sapiens2_hf.task_spec(UV)
    assert (spec.name, spec.model_class, spec.output_class, spec.output_field, spec.pipeline_name) == (
        "uv", "Sapiens2ForUVEstimation", "Sapiens2UVEstimatorOutput", "uvs", "sapiens2-uv")
    assert spec.result_maps == ("uv",) and spec.num_labels == 2 and spec.auto_class == "AutoModel"
    assert spec.resize == "letterbox" and spec.head_upsampling == "pixel_shuffle"
    assert TRAINING_TASKS[UV].loss is UVLoss and TRAINING_TASKS[UV].metrics == {"uv": UVMetric}
    assert TRAINING_TASKS[UV].loss_batch_keys == ("labels", "mask")
    assert DATA_TASKS[UV].target_columns == ("uv",) and DATA_TASKS[UV].file_suffixes == (".npy",)
    # control: a class without its output class names what is missing
    class Sapiens2ForNothing(sapiens2_hf.Sapiens2TaskModel):
        task = "nothing"
        loss_class = UVLoss

    with pytest.raises(ValueError, match="output_class must be the ModelOutput"):
        sapiens2_hf.register_task(Sapiens2ForNothing)
    assert "nothing" not in sapiens2_hf.task_names()


def _uv_model(folder, seed=0):
    torch.manual_seed(seed)
    model = Sapiens2ForUVEstimation(sapiens2_hf.Sapiens2Config.from_preset("tiny", task=UV))
    model.save_pretrained(folder)
    return model


def _photo(height=48, width=64, seed=0):
    return np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)


def test_model_config_and_auto_class(tmp_path):
    model = _uv_model(tmp_path / "uv")
    config = json.loads((tmp_path / "uv" / "config.json").read_text())
    assert config["task"] == "uv" and config["architectures"] == ["Sapiens2ForUVEstimation"]
    assert config["head_config"]["use_pixel_shuffle"]
    assert sapiens2_hf.Sapiens2Config.from_pretrained(tmp_path / "uv").num_labels == 2
    x = torch.randn(1, 3, 64, 48)
    with torch.no_grad():
        expected = model.eval()(x).uvs
    assert expected.shape == (1, 2, 64, 48)  # the tiny pixel-shuffle head decodes to the input size
    for loader in (sapiens2_hf.model_class_for_task("uv"), sapiens2_hf.AutoModelForUVEstimation,
                   Sapiens2ForUVEstimation):
        loaded = loader.from_pretrained(tmp_path / "uv")
        assert type(loaded) is Sapiens2ForUVEstimation
        with torch.no_grad():
            assert torch.equal(loaded.eval()(x).uvs, expected)
    # the loss comes from `labels`, as for the official tasks
    labels, mask = torch.rand(1, 2, 64, 48), torch.ones(1, 1, 64, 48, dtype=torch.bool)
    assert model(x, labels=labels, mask=mask).loss > 0


def test_a_task_is_registered_once_and_checked():
    import dataclasses

    with pytest.raises(ValueError, match="already registered"):
        sapiens2_hf.register_task(Sapiens2ForUVEstimation)

    class Sapiens2ForSeg(Sapiens2ForUVEstimation):
        task = "seg"

    with pytest.raises(ValueError, match="already registered"):  # an official task cannot be replaced either
        sapiens2_hf.register_task(Sapiens2ForSeg)

    class Sapiens2ForUV2(Sapiens2ForUVEstimation):
        task = "uv2"

    spec = sapiens2_hf.task_spec(UV)  # an explicit spec is checked against the class
    with pytest.raises(ValueError, match="has task = 'uv2', but the spec registers 'uv3'"):
        sapiens2_hf.register_task(Sapiens2ForUV2, spec=dataclasses.replace(
            spec, name="uv3", model_class="Sapiens2ForUV2", pipeline_name="sapiens2-uv3"))
    with pytest.raises(ValueError, match="spec's model_class is 'Other'"):
        sapiens2_hf.register_task(Sapiens2ForUV2, spec=dataclasses.replace(spec, name="uv2", model_class="Other"))
    assert "uv2" not in sapiens2_hf.task_names() and "uv3" not in sapiens2_hf.task_names()


def test_pipeline_gives_the_map_at_the_image_size(tmp_path):
    from transformers import pipeline

    _uv_model(tmp_path / "uv")
    runner = pipeline("sapiens2-uv", model=str(tmp_path / "uv"))
    result = runner(_photo(30, 50))
    assert result["uv"].shape == (30, 50, 2) and result["uv"].dtype == np.float32
    # masked by a foreground like the official dense tasks (its `foreground_fill`)
    mask = np.zeros((30, 50), bool)
    mask[5:20, 10:30] = True
    masked = runner(_photo(30, 50), foreground_mask=mask)
    assert (masked["uv"][~mask] == 0).all() and np.array_equal(masked["uv"][mask], result["uv"][mask])


def test_command_line_on_an_image_and_a_video(tmp_path, capsys):
    from PIL import Image

    from sapiens2_hf.cli.main import main
    from sapiens2_hf.video import write_video

    _uv_model(tmp_path / "uv")
    Image.fromarray(_photo()).save(tmp_path / "photo.png")
    out = tmp_path / "out"
    argv = ["--model", str(tmp_path / "uv"), "--device", "cpu", "--quiet", "--threads", "1"]
    assert main(["uv", str(tmp_path / "photo.png"), "--out", str(out), *argv]) == 0, capsys.readouterr().err
    assert np.load(out / "photo_uv.npy").shape == (48, 64, 2)
    assert Image.open(out / "photo_uv.png").size == (64, 48)
    video = write_video(tmp_path / "clip.mp4", [_photo(seed=k) for k in range(3)], fps=6)
    assert main(["uv", str(video), "--out", str(tmp_path / "video"), *argv]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "video" / "clip").iterdir()) == [
        f"frame_{k:06d}_uv.npy" for k in range(3)]
    assert (tmp_path / "video" / "clip.mp4").is_file()
    # the sub-command lists the new task in its help
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "uv" in capsys.readouterr().out


def test_finetune_script_on_a_datasets_dataset_learns(tmp_path):
    """`training_scripts/finetune.py --task uv` on a `datasets.Dataset` saved to disk (image, uv, mask columns): the
    task's own metric falls past a threshold, and the saved repo loads back. Measured on this machine (x86-64): the
    untrained head's uv_mae is 0.48 (`--do_train False`), 0.18 after these 60 steps; the bound is 0.3."""
    import importlib.util
    from pathlib import Path

    import datasets

    script = Path(__file__).resolve().parents[1] / "training_scripts" / "finetune.py"
    spec = importlib.util.spec_from_file_location("finetune_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    finetune_main = module.main

    rng = np.random.default_rng(0)
    rows = {"image": [], "uv": [], "mask": []}
    for _ in range(8):
        image = rng.integers(0, 60, (64, 48, 3), dtype=np.uint8)
        mask = np.zeros((64, 48), bool)
        y0, x0 = rng.integers(4, 24), rng.integers(4, 16)
        mask[y0:y0 + 32, x0:x0 + 24] = True
        image[mask] = 200
        ys, xs = np.mgrid[0:64, 0:48]
        uv = np.stack([(xs - x0) / 24.0, (ys - y0) / 32.0], -1).clip(0, 1).astype(np.float32) * mask[..., None]
        rows["image"].append(image), rows["uv"].append(uv), rows["mask"].append(mask.astype(np.uint8))
    datasets.Dataset.from_dict(rows).save_to_disk(tmp_path / "data")
    out = tmp_path / "run"
    finetune_main(["--task", "uv", "--preset", "tiny", "--dataset_name", str(tmp_path / "data"),
                   "--do_train", "--do_eval", "--output_dir", str(out), "--max_steps", "60", "--learning_rate", "3e-3",
                   "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4", "--seed", "0",
                   "--report_to", "none", "--use_cpu", "--logging_steps", "20", "--save_strategy", "no",
                   "--train_val_split", "0.25", "--augment", "False", "--disable_tqdm", "true"])
    results = json.loads((out / "eval_results.json").read_text())
    assert results["eval_uv_mae"] < 0.3, results
    loaded = sapiens2_hf.AutoModelForUVEstimation.from_pretrained(out)
    assert type(loaded) is Sapiens2ForUVEstimation


def test_stock_trainer_trains_it(tmp_path):
    import transformers

    model = _uv_model(tmp_path / "uv")
    data = [{"pixel_values": torch.randn(3, 64, 48), "labels": torch.rand(2, 64, 48),
             "mask": torch.ones(1, 64, 48, dtype=torch.bool)} for _ in range(4)]
    arguments = transformers.TrainingArguments(output_dir=str(tmp_path / "stock"), max_steps=3, report_to=[],
                                               per_device_train_batch_size=2, use_cpu=True, save_strategy="no")
    before = {name: value.clone() for name, value in model.decode_head.state_dict().items()}
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=data)
    trainer.train()
    assert np.isfinite(trainer.state.log_history[-1]["train_loss"])
    assert any(not torch.equal(value, before[name]) for name, value in model.decode_head.state_dict().items())


def test_onnx_export_matches_the_model(tmp_path):
    pytest.importorskip("onnxruntime")
    from sapiens2_hf.export import export_model

    _uv_model(tmp_path / "uv")
    result = export_model(tmp_path / "uv", tmp_path / "onnx", format="onnx")
    assert result.info["output_names"] == ["uvs"]
    report = result.info["verification"]["outputs"]["uvs"]  # the exported graph against the eager model
    assert report["ok"] and report["rel_l2"] < 1e-2, report
    # the exported folder runs through the task's pipeline too
    exported = sapiens2_hf.pipeline("sapiens2-uv", model=str(tmp_path / "onnx"), backend="onnxruntime")
    eager = sapiens2_hf.pipeline("sapiens2-uv", model=str(tmp_path / "uv"))
    photo = _photo()
    assert np.abs(exported(photo)["uv"] - eager(photo)["uv"]).max() < 1e-2


def test_the_app_serves_it_through_gradio_client(tmp_path, free_port_factory):
    pytest.importorskip("gradio")
    from app_client import TimedClient
    from gradio_client import handle_file
    from PIL import Image

    from sapiens2_hf.app import AppRunner, launch

    Image.fromarray(_photo()).save(tmp_path / "photo.png")
    app = launch(runner=AppRunner(tmp_path / "app", device="cpu"), port=free_port_factory(), block=False)
    try:
        overlay, files, summary = TimedClient(app.local_url, verbose=False).predict(
            "demo", handle_file(str(tmp_path / "photo.png")), api_name="/uv_image")
    finally:
        app.close()
    assert Image.open(overlay).size == (64, 48) and summary.startswith("uv:")
    (array,) = [f for f in files if f.endswith(".npy")]
    assert np.load(array).shape == (48, 64, 2)


def test_unregister_takes_every_entry_back():
    """A second registration (a copy of the task under another name) and its removal: every table the registration
    filled is back to what it was, and the official tasks cannot be removed."""
    from transformers.pipelines import PIPELINE_REGISTRY

    from sapiens2_hf import auto
    from sapiens2_hf.predict.outputs import TASK_OUTPUTS
    from sapiens2_hf.cli.predict import predict_parser
    from sapiens2_hf.data.tasks import DATA_TASKS
    from sapiens2_hf.modeling import HEAD_PRESETS, TASK_MODEL_CLASSES
    from sapiens2_hf.training.tasks import TRAINING_TASKS

    class Sapiens2ForUVCopy(Sapiens2ForUVEstimation):
        task = "uv_copy"

    sapiens2_hf.register_task(Sapiens2ForUVCopy, data=DATA_TASKS["uv"], training=TRAINING_TASKS["uv"])

    def commands():
        return set(next(a for a in predict_parser()._actions if a.dest == "command").choices)

    assert "uv_copy" in commands() and hasattr(auto, "AutoModelForUVCopy")
    assert "sapiens2-uv-copy" in PIPELINE_REGISTRY.supported_tasks
    sapiens2_hf.unregister_task("uv_copy")
    assert "uv_copy" not in sapiens2_hf.task_names() and "uv_copy" not in commands()
    for table in (TASK_MODEL_CLASSES, HEAD_PRESETS, TASK_OUTPUTS, DATA_TASKS, TRAINING_TASKS):
        assert "uv_copy" not in table
    assert "sapiens2-uv-copy" not in PIPELINE_REGISTRY.supported_tasks and not hasattr(auto, "AutoModelForUVCopy")
    assert "uv" in sapiens2_hf.task_names()  # the other registration stays
    with pytest.raises(ValueError, match="official task"):
        sapiens2_hf.unregister_task("seg")
