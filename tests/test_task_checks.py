"""What `register_task` refuses before it registers anything, each with its control (the same class, fixed, registers):
a name that would shadow a pipeline (transformers' `image-segmentation`, our composed `sapiens2-pose-3d`), a task or
a `sapiens2-hf` command; a post-processing method the image processor lacks; a loss, output, metric or pipeline that
is not a class of its kind. A refused registration leaves every table as it was."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn
from transformers.utils import ModelOutput

import sapiens2_hf
from sapiens2_hf import TaskSpec
from sapiens2_hf.modeling.sapiens2_tasks import COMMAND_NAMES

pytestmark = pytest.mark.compat  # the checks read transformers' pipeline registry


@dataclass
class MapOutput(ModelOutput):
    loss: torch.Tensor | None = None
    maps: torch.Tensor | None = None


class MapLoss(nn.Module):
    def forward(self, maps, labels, mask=None):
        l1 = (maps - labels).abs().mean()
        return l1, {"l1_loss": l1}


class Metric:
    def statistics(self, predictions, targets, mask=None):
        return torch.zeros(len(predictions), 2)

    def accumulate(self, statistics):
        pass

    def compute(self):
        return {}


def _task(name, **attributes):
    """A task model class named after `name`, with `attributes` replacing its parts."""
    parts = {"task": name, "loss_class": MapLoss, "output_class": MapOutput, "spec": TaskSpec(num_labels=1)}
    return type(f"Sapiens2For{name.title().replace('_', '')}", (sapiens2_hf.Sapiens2TaskModel,), {**parts, **attributes})


def _refused(model_class, match, error=ValueError, **kwargs):
    before = sapiens2_hf.task_names()
    with pytest.raises(error, match=match):
        sapiens2_hf.register_task(model_class, **kwargs)
    assert sapiens2_hf.task_names() == before


def _registers(model_class, **kwargs):
    sapiens2_hf.register_task(model_class, **kwargs)
    try:
        assert model_class.task in sapiens2_hf.task_names()
    finally:
        sapiens2_hf.unregister_task(model_class.task)
    assert model_class.task not in sapiens2_hf.task_names()


def test_a_name_that_would_shadow_a_pipeline_is_refused():
    _refused(_task("pose_3d"), "'sapiens2-pose-3d' of task 'pose_3d' is already a pipeline")  # our composed one
    _refused(_task("seg_parts", spec=TaskSpec(num_labels=1, pipeline_name="image-segmentation")),
             "'image-segmentation' of task 'seg_parts' is already a pipeline")  # transformers' stock one
    _refused(_task("normal_copy", spec=TaskSpec(num_labels=1, pipeline_name="sapiens2-normal")),
             "'sapiens2-normal' is task 'normal'")  # an official task's
    _registers(_task("pose_3d_lift"))  # control: a pipeline name nobody answers to


def test_a_name_that_would_shadow_a_task_or_a_command_is_refused():
    _refused(_task("curate"), "would shadow the `sapiens2-hf curate` command")
    _refused(_task("seg"), "already registered")
    _registers(_task("curation_score"))  # control


def test_the_command_names_are_the_parsers():
    """`COMMAND_NAMES` (what registration refuses, read without the CLI) is every sub-command that is not a task."""
    from sapiens2_hf.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert set(commands) - set(sapiens2_hf.task_names()) == set(COMMAND_NAMES)


def test_the_post_processor_and_the_classes_are_checked_when_registering():
    _refused(_task("maps_a", spec=TaskSpec(num_labels=1, post_process="post_process_maps")),
             "'post_process_maps' is no method of the image processor")
    _refused(_task("maps_b", loss_class=lambda maps, labels: maps), "loss_class must be a torch.nn.Module", TypeError)
    _refused(_task("maps_c", output_class=dataclass(type("Plain", (), {"__annotations__": {"maps": object},
                                                                        "maps": None}))),
             "output_class must be a transformers ModelOutput", TypeError)
    _refused(_task("maps_d"), "it lacks accumulate, compute", TypeError, metric=type("Half", (), {
        "statistics": lambda self, p, t: None}))
    _refused(_task("maps_e"), "pipeline_class must be a transformers Pipeline", TypeError, pipeline_class=dict)
    # control: the same parts, of their kinds
    _registers(_task("maps_f", spec=TaskSpec(num_labels=1, post_process="post_process_dense_maps")), metric=Metric)


def test_a_subclass_written_to_the_earlier_recipe_builds_its_backbone_once(monkeypatch):
    """The earlier recipe had subclasses call `build_task_layers` in their own `__init__`; the base class now builds
    them, and a second call must not build (and allocate) the backbone again."""
    import sapiens2_hf
    from sapiens2_hf.modeling import modeling_sapiens2_hf as modeling

    built = []
    original = modeling.Sapiens2Model.__init__
    monkeypatch.setattr(modeling.Sapiens2Model, "__init__", lambda self, config: built.append(1) or original(self,
                                                                                                           config))

    class EarlierRecipe(sapiens2_hf.Sapiens2ForNormalEstimation):
        def __init__(self, config):
            super().__init__(config)
            self.build_task_layers(config)
            self.post_init()

    model = EarlierRecipe(sapiens2_hf.tiny_config("normal"))
    assert len(built) == 1
    model._task_layers_built = False  # control: the counter sees a build when one happens
    model.build_task_layers(model.config)
    assert len(built) == 2
