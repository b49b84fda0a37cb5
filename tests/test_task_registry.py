"""The task registries: layer 0 (`sapiens2_hf.modeling.sapiens2_tasks.TASK_SPECS`) and training
(`sapiens2_hf.training.tasks.TRAINING_TASKS`). Every per-task table is derived from them, and every fact an entry
states is true of the code it names: model classes and their output fields, head choices, Auto classes, processor
policies and post-processing methods, pipelines, metric scripts, and the arguments `task_loss` feeds the loss."""

import types

import pytest
import torch
import transformers

import sapiens2_hf
from sapiens2_hf.data.synthetic.writer import WRITER_TASKS
from sapiens2_hf.hub import model_card, sharing
from sapiens2_hf.metrics import EVALUATE_MODULES, evaluate_module_path
from sapiens2_hf.modeling import HEAD_PRESETS, TASK_MODEL_CLASSES, tiny_config
from sapiens2_hf.modeling import configuration_sapiens2_hf as configuration
from sapiens2_hf.modeling.sapiens2_tasks import BACKBONE_MODEL_CLASS, PRETRAIN_TASK, TASK_NAMES, TASK_SPECS, task_spec
from sapiens2_hf.pipelines import PIPELINE_CLASSES, PIPELINE_TASKS
from sapiens2_hf.processing import Sapiens2HFImageProcessor, image_processor_for_task
from sapiens2_hf.processing import image_processing_sapiens2_hf as image_processing
from sapiens2_hf.training import TRAINING_TASKS, task_loss
from sapiens2_hf.training.finetune import TRANSFORMS


pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_training_registry_has_exactly_the_layer0_tasks():
    assert tuple(TRAINING_TASKS) == TASK_NAMES
    assert tuple(TRANSFORMS) == TASK_NAMES
    assert tuple(EVALUATE_MODULES) == TASK_NAMES
    assert WRITER_TASKS == TASK_NAMES
    assert set(HEAD_PRESETS) == set(TASK_NAMES)
    with pytest.raises(ValueError, match="Unknown Sapiens2 task 'depth'"):
        task_spec("depth")


def test_config_tables_are_the_registry():
    assert configuration.TASKS == TASK_NAMES
    compatible = (None, *(name for name in TASK_NAMES if TASK_SPECS[name].in_transformers))
    assert configuration.TRANSFORMERS_COMPATIBLE_TASKS == compatible
    assert configuration.TASK_NUM_LABELS == {name: spec.num_labels for name, spec in TASK_SPECS.items()}
    assert configuration.ARCHITECTURE_TASKS == {spec.model_class: name for name, spec in TASK_SPECS.items()}
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
    assert sharing._AUTO_CLASS[task] == spec.auto_class
    assert model_card._PIPELINE_TASKS[task] == spec.pipeline_name
    assert (task in model_card._TRANSFORMERS_AUTO) == spec.in_transformers
    # processor: resize policy and post-processing method
    assert task in image_processing.TASKS and PRETRAIN_TASK in image_processing.TASKS
    assert image_processor_for_task(task).do_pad == (spec.resize == "letterbox")
    assert callable(getattr(Sapiens2HFImageProcessor, spec.post_process))
    # pipeline
    assert PIPELINE_TASKS[spec.pipeline_name] == task
    assert PIPELINE_CLASSES[spec.pipeline_name].task_name == task
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
