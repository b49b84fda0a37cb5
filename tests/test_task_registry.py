"""The task registries: layer 0 (`sapiens2_hf.modeling.sapiens2_tasks.TASK_SPECS`), data
(`sapiens2_hf.data.tasks.DATA_TASKS`) and training (`sapiens2_hf.training.tasks.TRAINING_TASKS`). Every per-task table
is derived from them, and every fact an entry states is true of the code it names: model classes, their output classes
and fields, head choices, Auto classes, processor policies and post-processing methods, pipelines, metric scripts, the
arguments `task_loss` feeds the loss, the data sources' columns and files. A hypothetical seventh (dense) task goes
through the data and training layers with registry entries alone."""

import ast
import dataclasses
import inspect
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import sapiens2_hf
from sapiens2_hf.data import hf_datasets, validation
from sapiens2_hf.data.dense import read_dense_folder
from sapiens2_hf.data.synthetic import sample_to_row, task_features
from sapiens2_hf.data.synthetic.writer import WRITER_TASKS
from sapiens2_hf.data.tasks import DATA_TASKS, DataTaskSpec, synthetic_record
from sapiens2_hf.hub import model_card, sharing
from sapiens2_hf.metrics import EVALUATE_MODULES, evaluate_module_path
from sapiens2_hf.modeling import HEAD_PRESETS, TASK_MODEL_CLASSES, tiny_config
from sapiens2_hf.modeling import configuration_sapiens2_hf as configuration
from sapiens2_hf.modeling.sapiens2_tasks import BACKBONE_MODEL_CLASS, PRETRAIN_TASK, TASK_NAMES, TASK_SPECS, task_spec
from sapiens2_hf.pipelines import PIPELINE_CLASSES, PIPELINE_TASKS
from sapiens2_hf.processing import Sapiens2HFImageProcessor, image_processor_for_task
from sapiens2_hf.modeling import image_processing_sapiens2_hf as image_processing
from sapiens2_hf.training import TRAINING_TASKS, TaskEvaluator, TrainingTaskSpec, lora_config, task_loss
from sapiens2_hf.training.tasks import head_modules


pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_training_registry_has_exactly_the_layer0_tasks():
    assert tuple(TRAINING_TASKS) == TASK_NAMES
    assert tuple(DATA_TASKS) == TASK_NAMES
    assert tuple(EVALUATE_MODULES) == TASK_NAMES
    assert WRITER_TASKS == TASK_NAMES
    assert set(HEAD_PRESETS) == set(TASK_NAMES)
    with pytest.raises(ValueError, match="Unknown Sapiens2 task 'depth'"):
        task_spec("depth")


def test_config_tables_are_the_registry():
    assert configuration.TASKS == TASK_NAMES
    compatible = (None, *(name for name in TASK_NAMES if TASK_SPECS[name].in_transformers))
    assert configuration.TRANSFORMERS_COMPATIBLE_TASKS == compatible
    for name, spec in TASK_SPECS.items():
        assert configuration.tiny_config(name).num_labels == spec.num_labels
    # A config.json written by vanilla transformers records the task only in `architectures`.
    for name, spec in TASK_SPECS.items():
        config = configuration.Sapiens2Config.from_dict({"architectures": [spec.model_class]})
        assert config.task == name
    assert configuration.Sapiens2Config.from_dict({"architectures": [BACKBONE_MODEL_CLASS]}).task is None


@pytest.mark.parametrize("task", TASK_NAMES)
def test_each_task_model_is_the_registry_entry(task):
    spec = TASK_SPECS[task]
    model_class = TASK_MODEL_CLASSES[task]
    assert model_class.__name__ == spec.model_class and getattr(sapiens2_hf, spec.model_class) is model_class
    config = tiny_config(task)
    assert config.head_config.norm_type == spec.head_norm
    assert config.head_config.use_pixel_shuffle == (spec.head_upsampling == "pixel_shuffle")
    expected_kernels = {"deconv": (4, 1), "pixel_shuffle": (3, 3)}[spec.head_upsampling]
    assert (config.head_config.upsample_kernel_sizes[0], config.head_config.conv_kernel_sizes[0]) == expected_kernels
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():
        outputs = model(pixel_values=torch.randn(1, 3, 64, 48))
    prediction = getattr(outputs, spec.output_field)
    assert prediction.shape[0] == 1 and torch.isfinite(prediction).all()
    assert type(outputs).__name__ == spec.output_class
    if spec.output_class.startswith("Sapiens2"):  # ours: public, as the registry derives it
        assert getattr(sapiens2_hf, spec.output_class) is type(outputs)
    # the training registry's heads are exactly the model's head sub-modules
    present = tuple(name for name in head_modules() if isinstance(getattr(model, name, None), torch.nn.Module))
    assert present == TRAINING_TASKS[task].head_modules
    assert lora_config(task).modules_to_save == list(present)
    # The predictor's channels: all in `output_field`, or split with the `extra_output_fields` (matting).
    fields = (spec.output_field, *spec.extra_output_fields)
    assert sum(getattr(outputs, field).shape[1] for field in fields) == spec.num_labels
    assert TASK_MODEL_CLASSES[None].__name__ == BACKBONE_MODEL_CLASS


@pytest.mark.parametrize("task", TASK_NAMES)
def test_auto_classes_processors_and_pipelines_follow_the_registry(task):
    spec = TASK_SPECS[task]
    model_class = TASK_MODEL_CLASSES[task]
    # _registration: transformers' Auto class of the task, or ours for a task it has none for.
    if spec.auto_class == "AutoModel":
        auto_class = getattr(sapiens2_hf, "AutoModelFor" + spec.model_class.removeprefix("Sapiens2For"))
    else:
        auto_class = getattr(transformers, spec.auto_class)
    assert auto_class._model_mapping[sapiens2_hf.Sapiens2Config] is model_class
    assert sharing._auto_class_name(task) == spec.auto_class
    assert model_card._task_facts(task) == (spec.pipeline_tag, spec.title, spec.model_class, spec.description)
    assert (model_card._transformers_auto(task) is not None) == spec.in_transformers
    # processor: resize policy and post-processing method
    assert task in image_processing.processor_tasks() and PRETRAIN_TASK in image_processing.processor_tasks()
    assert image_processor_for_task(task).do_pad == (spec.resize == "letterbox")
    assert callable(getattr(Sapiens2HFImageProcessor, spec.post_process))
    # pipeline
    assert PIPELINE_TASKS[spec.pipeline_name] == task
    assert PIPELINE_CLASSES[spec.pipeline_name].task_name == task
    # foreground masking: the processor's background value and the pipeline's mask options follow `foreground_fill`
    maskable = spec.foreground_fill is not None
    assert (image_processing.foreground_fill_value(task) is not None) == maskable
    assert ("segmenter" in inspect.signature(PIPELINE_CLASSES[spec.pipeline_name].__init__).parameters) == maskable
    assert transformers.pipelines.PIPELINE_REGISTRY.supported_tasks[spec.pipeline_name]["pt"] == (model_class,)
    # metric script
    assert EVALUATE_MODULES[task] == f"sapiens2_{task}"
    assert (sapiens2_hf.metrics.evaluate_modules.Path(evaluate_module_path(task)) / f"sapiens2_{task}.py").is_file()


class _Recorder(torch.nn.Module):
    def forward(self, *arguments):
        self.arguments = arguments
        return torch.zeros(()), {}


def _tensors(*names):
    return {name: torch.full((1,), float(index)) for index, name in enumerate(names)}


# The arguments of each official loss, in call order, as the explicit calls before the registry spelled them.
EXPECTED_LOSS_ARGUMENTS = {
    "pose": ("heatmaps", "labels", "label_weights"),
    "seg": ("logits", "labels"),
    "normal": ("normals", "labels", "mask"),
    "pointmap": ("pointmaps", "scales", "labels", "target_scales", "mask", "intrinsics", "target_mean_depth"),
    "albedo": ("albedos", "labels", "mask"),
    "matting": ("alphas", "foregrounds", "labels", "mask", "foreground_labels"),
}


@pytest.mark.parametrize("task", TASK_NAMES)
def test_task_loss_feeds_the_loss_its_inputs_in_order(task):
    names = EXPECTED_LOSS_ARGUMENTS[task]
    values = _tensors(*names)
    output_fields = (TASK_SPECS[task].output_field, *(f for f, _ in TRAINING_TASKS[task].loss_output_fields))
    outputs = types.SimpleNamespace(**{name: values[name] for name in output_fields})
    batch = {name: value for name, value in values.items() if name not in output_fields}
    batch["pixel_values"] = torch.zeros(1)  # never passed to the loss
    recorder = _Recorder()
    task_loss(task, recorder, outputs, batch)
    assert len(recorder.arguments) == len(names)
    for name, argument in zip(names, recorder.arguments):
        assert argument is values[name], (task, name)


def test_task_loss_controls():
    """Broken controls: an optional batch key may be missing (None), a required one may not; a pointmap model without
    the scale branch gets the clear error; an unknown task is refused."""
    values = _tensors(*EXPECTED_LOSS_ARGUMENTS["pointmap"])
    outputs = types.SimpleNamespace(pointmaps=values["pointmaps"], scales=values["scales"])
    batch = {k: values[k] for k in ("labels", "target_scales", "mask", "intrinsics")}
    recorder = _Recorder()
    task_loss("pointmap", recorder, outputs, batch)
    assert recorder.arguments[-1] is None
    with pytest.raises(KeyError, match="intrinsics"):
        task_loss("pointmap", recorder, outputs, {k: v for k, v in batch.items() if k != "intrinsics"})
    with pytest.raises(ValueError, match=r"needs the scale branch \(`scales`\); this model has none"):
        task_loss("pointmap", recorder, types.SimpleNamespace(pointmaps=values["pointmaps"], scales=None), batch)
    with pytest.raises(ValueError, match="Unknown task 'depth'"):
        task_loss("depth", recorder, outputs, batch)


def test_task_loss_numbers_equal_the_direct_call():
    """The official pointmap loss through `task_loss` equals the direct call on the same tensors (same process)."""
    from sapiens2_hf.training import default_loss

    torch.manual_seed(0)
    pointmaps, labels = torch.randn(2, 3, 16, 12), torch.randn(2, 3, 16, 12)
    labels[:, 2] = labels[:, 2].abs() + 1
    scales, target_scales = torch.rand(2, 1) + 0.5, torch.rand(2, 1) + 0.5
    mask = torch.ones(2, 1, 16, 12)
    intrinsics = torch.tensor([[20.0, 0, 6], [0, 20.0, 8], [0, 0, 1]]).expand(2, 3, 3)
    loss_fn = default_loss("pointmap")
    direct, direct_terms = loss_fn(pointmaps, scales, labels, target_scales, mask, intrinsics, None)
    batch = {"labels": labels, "target_scales": target_scales, "mask": mask, "intrinsics": intrinsics}
    outputs = types.SimpleNamespace(pointmaps=pointmaps, scales=scales)
    routed, routed_terms = task_loss("pointmap", loss_fn, outputs, batch)
    assert torch.equal(direct, routed) and direct_terms.keys() == routed_terms.keys()
    # Control: the comparison sees a change of the targets (mirrored labels).
    mirrored, _ = loss_fn(pointmaps, scales, labels.flip(-1), target_scales, mask, intrinsics, None)
    assert (mirrored - routed).abs() > 1e-3


# ---------------------------------------------------------------------------------------------------------------
# tables derived from the registries
# ---------------------------------------------------------------------------------------------------------------


def test_public_names_are_derived_from_the_registry():
    per_task = {name for name in sapiens2_hf._LAZY_NAMES if name not in sapiens2_hf._GENERIC_NAMES}
    expected = set()
    for spec in TASK_SPECS.values():
        expected |= {spec.model_class, *([spec.output_class] if spec.output_class.startswith("Sapiens2") else [])}
        if spec.auto_class == "AutoModel":
            expected.add("AutoModelFor" + spec.model_class.removeprefix("Sapiens2For"))
    assert set(per_task) == expected and "AutoModelForAlbedoEstimation" in per_task
    assert "SemanticSegmenterOutput" not in per_task  # transformers' class, not re-exported
    # The TYPE_CHECKING imports (for IDEs) are spelled out: they must be exactly the public names.
    tree = ast.parse((Path(sapiens2_hf.__file__)).read_text())
    block = next(node for node in tree.body
                 if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    imported = {alias.name for node in block.body for alias in node.names}
    assert imported == set(sapiens2_hf._LAZY_NAMES), (
        f"add to / remove from the TYPE_CHECKING imports of sapiens2_hf/__init__.py: "
        f"{sorted(set(sapiens2_hf._LAZY_NAMES) - imported)} / {sorted(imported - set(sapiens2_hf._LAZY_NAMES))}")


def test_the_torch_free_registry_is_the_registry_module():
    """What the package's public names and the CLI's tables read before torch is imported is the one registry module
    itself (the catalog, imported normally), not a copy: the same `TaskSpec` objects."""
    import sapiens2_hf.modeling.sapiens2_tasks as registry
    from sapiens2_hf.cli import predict
    from sapiens2_hf.predict import options

    assert predict.catalog is registry
    assert predict._TASK_SPECS is TASK_SPECS and options.TASK_SPECS is TASK_SPECS


def test_cli_tables_are_derived_from_the_registry():
    from sapiens2_hf.cli import main, predict

    parser = main.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert set(TASK_NAMES) <= set(commands)
    for name, spec in TASK_SPECS.items():
        options = {option for action in commands[name]._actions for option in action.option_strings}
        assert ("--foreground-model" in options) == (spec.foreground_fill is not None), name
        assert predict.task_help(name) == spec.title[0].lower() + spec.title[1:]
    for command in ("convert", "export"):  # every task converts and exports
        task_choices = next(a for a in commands[command]._actions if a.dest == "task").choices
        assert set(TASK_NAMES) <= set(task_choices), command


def test_video_and_picture_tables_are_derived_from_the_registry():
    """What video filtering smooths and which picture the CLI and the app show come from the registry's
    `result_maps` and the command line's facet (`overlay_suffix`); the app's tabs from `tab_title`."""
    from sapiens2_hf.predict.options import command_defaults
    from sapiens2_hf.predict.outputs import TASK_OUTPUTS, TaskOutputs, image_output_suffixes, overlay_suffix, tab_title
    from sapiens2_hf.video.smoothing import dense_task_maps

    assert list(TASK_OUTPUTS) == list(TASK_NAMES)  # every task's command-line files, registered once
    assert {overlay_suffix(name) for name in TASK_SPECS} <= set(image_output_suffixes())

    dense = {name: spec.result_maps for name, spec in TASK_SPECS.items() if spec.result_maps}
    assert dense_task_maps() == dense
    assert {task for task in TASK_SPECS if "temporal_filter" in command_defaults(task)} == set(dense)
    assert "pose" not in dense and dense["matting"] == ("alpha", "foreground")  # control: pose has no maps
    assert overlay_suffix("pointmap") == "_depth.png"
    assert overlay_suffix("seg") == "_seg.png" and tab_title("pose") == "Pose (308 keypoints)"
    # the defaults, for a task whose facet names neither: `_<task>.png` and the spec's title
    custom = dataclasses.replace(TASK_SPECS["normal"], name="depth", title="Depth")
    TASK_SPECS["depth"] = custom
    TASK_OUTPUTS["depth"] = dataclasses.replace(TASK_OUTPUTS["normal"], short_title=None, overlay_suffix=None)
    try:
        assert tab_title("depth") == "Depth" and overlay_suffix("depth") == "_depth.png"
    finally:
        del TASK_SPECS["depth"], TASK_OUTPUTS["depth"]
    # the Hub-shipped spec carries no command-line or app facts
    assert not {"short_title", "overlay_suffix"} & {f.name for f in dataclasses.fields(TASK_SPECS["pose"])}
    assert {"short_title", "overlay_suffix"} <= {f.name for f in dataclasses.fields(TaskOutputs)}


def test_video_filtering_follows_a_task_registered_after_import(monkeypatch):
    """A dense task added to the registry at run time (a 2-channel UV map) is filtered frame to frame with the untuned
    defaults, its maps read from its registry entry; a task without maps is refused, naming the dense ones."""
    from sapiens2_hf.video.smoothing import UNTUNED_DENSE_DEFAULTS, DenseResultFilter

    uv = dataclasses.replace(TASK_SPECS["normal"], name="uv", result_maps=("uv",), foreground_fill=None)
    monkeypatch.setitem(TASK_SPECS, "uv", uv)
    smoother = DenseResultFilter("uv")
    assert (smoother.min_cutoff, smoother.beta) == UNTUNED_DENSE_DEFAULTS[:2]
    image = np.zeros((32, 24, 3), np.uint8)  # DIS optical flow needs a side of 12 pixels or more
    first = np.full((32, 24, 2), 0.2, np.float32)
    smoother.filter({"uv": first}, image, 0.0)
    second = smoother.filter({"uv": first + 0.01, "other": 1}, image, 1 / 30)
    assert second["other"] == 1 and second["uv"].shape == (32, 24, 2)
    assert 0.2 <= float(second["uv"].mean()) < 0.21  # low-passed towards the previous frame, not passed through
    with pytest.raises(ValueError, match=r"dense maps is for \[.*'uv'.*\], not 'pose'"):
        DenseResultFilter("pose")


def test_data_tables_are_derived_from_the_registry():
    dense = [name for name in TASK_NAMES if not TASK_SPECS[name].top_down]
    for name in dense:  # a dataset's target column is found among the task's candidates
        column = DATA_TASKS[name].target_columns[-1]
        assert hf_datasets.resolve_columns(name, ["image", column, "mask", "K"]).label == column
    assert set(validation.file_fields()) == {DATA_TASKS[name].file_key for name in dense} | {"mask"}
    assert validation.file_fields()[-1] == "mask"
    for name in TASK_NAMES:
        assert task_features(name, 8, 6).keys() == {"sample_index", "image", *DATA_TASKS[name].synthetic_columns}


@pytest.mark.parametrize("task", [name for name in TASK_NAMES if not TASK_SPECS[name].top_down])
def test_each_dense_task_reads_its_own_synthetic_rows_through_every_adapter(task):
    """The data entry is consistent: the `datasets` adapter finds the task's target (and required roles) among the
    synthetic schema's columns, and gives the record the synthetic source gives (same keys, same arrays)."""
    spec = DATA_TASKS[task]
    from sapiens2_hf.data.synthetic import SyntheticHumans, sample_seed

    sample = SyntheticHumans(height=32, width=24).sample(sample_seed(0, 0))
    row = sample_to_row(sample, task, 0)
    columns = hf_datasets.resolve_columns(task, list(row))
    record = hf_datasets.dense_record(task, row, columns)
    reference = synthetic_record(task, sample_to_row(sample, "all", 0))
    assert set(reference) <= set(record), (task, set(reference) - set(record))
    for key, value in reference.items():
        assert np.array_equal(np.asarray(record[key]).reshape(np.shape(value)), value), (task, key)
    assert spec.file_key in validation.file_fields() and spec.file_suffixes


def test_a_seventh_dense_task_needs_only_registry_entries_below_the_model(monkeypatch, tmp_path):
    """`depth` (a 1-channel dense map), declared by one entry in each registry (its layer-0 entry borrows the albedo
    model, as if `Sapiens2ForDepthEstimation` existed): the data sources and the training loop need no other change."""
    from PIL import Image

    from sapiens2_hf.losses import AlbedoLoss
    from sapiens2_hf.metrics import AlbedoMetric

    layer0 = dataclasses.replace(TASK_SPECS["albedo"], name="depth", output_field="depths", num_labels=1)
    monkeypatch.setitem(TASK_SPECS, "depth", layer0)
    monkeypatch.setitem(DATA_TASKS, "depth", DataTaskSpec(
        synthetic_columns=("depth", "mask"), synthetic_record={"depth_map": "depth", "mask": "mask"},
        target_columns=("depth_map", "label"), array_key="depth_map", roles={"mask": False}, file_key="depth_map",
        file_suffixes=(".npy",)))
    monkeypatch.setitem(TRAINING_TASKS, "depth", TrainingTaskSpec(
        loss=AlbedoLoss, transform=TRAINING_TASKS["albedo"].transform, metrics={"depth": AlbedoMetric},
        loss_batch_keys=("labels", "mask")))
    # data: `datasets` columns, rows, on-disk folders, synthetic records
    columns = hf_datasets.resolve_columns("depth", ["image", "label", "mask"])
    assert (columns.label, columns.mask, columns.intrinsics) == ("label", "mask", None)
    depth = np.ones((4, 3), np.float32)
    record = hf_datasets.dense_record("depth", {"image": "x.png", "label": depth, "mask": depth > 0}, columns)
    assert set(record) == {"image", "depth_map", "mask"} and record["depth_map"] is not None
    (tmp_path / "img").mkdir(), (tmp_path / "tgt").mkdir()
    Image.new("RGB", (3, 4)).save(tmp_path / "img" / "a.png")
    np.save(tmp_path / "tgt" / "a.npy", depth)
    assert read_dense_folder(tmp_path / "img", tmp_path / "tgt", "depth") == [
        {"image": str(tmp_path / "img" / "a.png"), "depth_map": str(tmp_path / "tgt" / "a.npy"), "mask": None}]
    row = {"image": np.zeros((4, 3, 3), np.uint8), "depth": depth, "mask": depth > 0}
    assert set(synthetic_record("depth", row)) == {"image", "depth_map", "mask"}
    # training: loss routing, evaluation, LoRA heads
    outputs = types.SimpleNamespace(depths=torch.rand(2, 3, 8, 6))
    batch = {"labels": torch.rand(2, 3, 8, 6), "mask": torch.ones(2, 1, 8, 6)}
    recorder = _Recorder()
    task_loss("depth", recorder, outputs, batch)
    assert recorder.arguments == (outputs.depths, batch["labels"], batch["mask"])
    assert set(TaskEvaluator("depth").batch_statistics(outputs, batch)) == {"depth"}
    assert lora_config("depth").modules_to_save == ["decode_head"]
    # control: a task with no data entry is refused with the fix named
    monkeypatch.delitem(DATA_TASKS, "depth")
    with pytest.raises(ValueError, match="Task 'depth' has no data entry: pass `data=DataTaskSpec"):
        hf_datasets.resolve_columns("depth", ["image", "label"])


def test_registry_entries_are_checked():
    with pytest.raises(ValueError, match="prediction must be one of"):
        TrainingTaskSpec(loss=torch.nn.Identity, transform=object, metrics={}, loss_batch_keys=(), prediction="boxes")
