# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""The Sapiens2 task registry: one entry per task, the single source of every per-task fact of layer 0 (models,
processors, pipelines, Hub files).

Everything else that varies by task (the config's task list and label counts, the architecture-name lookup, the
model class per task, the Auto class a saved repo registers under, the pipeline names, the processor's resize policy
and post-processing method, the model-card tags, the package's public names and the CLI's sub-commands) is derived
from `TASK_SPECS`. A task added from outside the package is one model class carrying a `TaskSpec` of the facts that
cannot be derived from it (`spec_of_class`); each other layer keeps its own facet keyed by the task name (data,
training, the command line and app), with defaults for a dense map (see docs/ARCHITECTURE.md).

Pure data (stdlib only), so that it can ship as remote code, and the startup catalog: the command line's parser
imports it normally and reads the facts it needs from it without importing torch (`sapiens2-hf --help`), as do the
model code and the package face (`DEFAULT_DETECTOR`, `KEYPOINT_FORMAT_NAMES`, `looks_local`). One copy: the model,
its processor and its pipelines live in this one folder, which ships to the Hub as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points


@dataclass(frozen=True)
class TaskSpec:
    """What layer 0 (models, processors, pipelines, Hub files) knows of one task.

    A task model class added from outside the package carries one as its `spec` class attribute, with only what
    cannot be derived: `spec_of_class` fills `name` (the class's `task`), `model_class` (its name), `output_class`
    and `output_field` (its `output_class` and that class's first field after `loss`), `pipeline_name`
    (`sapiens2-<name>`), `result_maps` (the name) and `description`; every other field defaults to a dense map
    (letterboxed, pixel-shuffle head, `post_process_dense_maps`, an Auto class of its own).

    Attributes:
        name (`str`): the short task name used everywhere (`config.task`, CLI sub-commands, training `--task`).
        title (`str`): a human-readable name (model cards, CLI help); default the name.
        model_class (`str`): the class name in `modeling_sapiens2_hf.py`; also the `architectures` entry of a config.
        output_field (`str`): the model-output field holding the task's prediction.
        output_class (`str`): the name of the model-output dataclass the model returns: ours in
            `modeling_sapiens2_hf.py` (every class of ours is named `Sapiens2*`, and the package exports it), or
            transformers' (seg's `SemanticSegmenterOutput`).
        num_labels (`int`): output channels of the predictor (keypoints, classes, or 3 for the dense maps).
        auto_class (`str`): the transformers Auto class a saved repo registers the model under; `"AutoModel"` when
            transformers has none for the task.
        in_transformers (`bool`): transformers' own Sapiens2 port has the task, so its checkpoints keep the
            `sapiens2` model type and vanilla transformers loads them.
        pipeline_name (`str`): the `pipeline(...)` task name of our pipeline.
        pipeline_tag (`str`): the Hub `pipeline_tag` of the model card: the Hub task category the output belongs to.
            `"image-segmentation"` and `"depth-estimation"` also name transformers' stock pipelines, which
            `import sapiens2_hf` makes run the task's model (seg: class masks; pointmap: metric depth); a normal map
            is no depth, so normals (like albedo) are `"image-to-image"`, served by their `sapiens2-*` pipeline.
        post_process (`str`): the image processor's post-processing method for the model output.
        resize (`str`): the processor's geometric policy: `"crop"` (top-down person crops), `"stretch"` (whole image
            resized to the input size) or `"letterbox"` (aspect kept, padded).
        head_upsampling (`str`): `"deconv"` (transposed 4x4 convolutions + 1x1 convs) or `"pixel_shuffle"` (3x3 convs
            + pixel shuffle + 3x3 refinement convs).
        head_norm (`str`): normalisation inside the head, `"instance_norm"` or `"rms_norm"`.
        description (`str`): what the output field holds (model cards).
        extra_output_fields (`tuple[str, ...]`): further model-output fields that the predictor's `num_labels`
            channels are split into beside `output_field` (matting: `foregrounds` takes 3 of the 4 channels,
            `alphas` the last); empty when `output_field` holds them all.
        foreground_fill (`float | None`): the value a per-pixel map of the task takes outside the person once masked
            by a foreground (`apply_foreground_mask`, the pipelines' `foreground_mask=` / `segmenter=`): a zero
            normal and black albedo are visibly "no surface", a NaN point or depth is "no measurement" (point-cloud
            writers and metrics skip it). `None`: the task's output is not masked (keypoints, class maps, mattes).
        result_maps (`tuple[str, ...]`): the keys of the pipeline result that hold per-pixel maps (what video
            filtering smooths frame to frame); empty for a task whose result is not a map (pose).
        metric_3d (`bool`): the result is metric 3D geometry in the camera's frame (pointmap): the pipeline takes the
            camera (`focal_length=`, `intrinsics=`), and the result can be written as a point cloud.
    """

    name: str = ""
    title: str = ""
    model_class: str = ""
    output_field: str = ""
    output_class: str = ""
    num_labels: int = 0
    auto_class: str = "AutoModel"
    in_transformers: bool = False
    pipeline_name: str = ""
    pipeline_tag: str = "image-to-image"
    post_process: str = "post_process_dense_maps"
    resize: str = "letterbox"
    head_upsampling: str = "pixel_shuffle"
    head_norm: str = "instance_norm"
    description: str = ""
    extra_output_fields: tuple[str, ...] = ()
    foreground_fill: float | None = None
    result_maps: tuple[str, ...] = ()
    metric_3d: bool = False

    @property
    def top_down(self) -> bool:
        """One sample per person (pose): the processor crops each person box (`resize == "crop"`), inference needs
        boxes (given or detected) and training reads one record per person."""
        return self.resize == "crop"

    @property
    def own_auto_class(self) -> str | None:
        """Our Auto class for a task transformers has none for (`auto_class` "AutoModel", e.g. albedo): the name
        pattern of transformers' (`Sapiens2ForAlbedoEstimation` -> `AutoModelForAlbedoEstimation`), defined in the
        package's `auto.py`; `None` for the tasks that register with transformers' own Auto class."""
        if self.auto_class != "AutoModel":
            return None
        return "AutoModelFor" + self.model_class.removeprefix("Sapiens2For")

    @property
    def class_map(self) -> bool:
        """The result is one class per pixel (seg): class names label it, and class weights may weight its loss."""
        return self.post_process == "post_process_semantic_segmentation"


#: The person detector a top-down task runs on inputs without given boxes (a transformers object-detection model).
DEFAULT_DETECTOR = "PekingU/rtdetr_r50vd"

#: The keypoint layouts a top-down result can also be written in (`sapiens2_hf.data.keypoint_formats`).
KEYPOINT_FORMAT_NAMES: tuple[str, ...] = ("coco17", "coco_wholebody133", "body25")


#: The `sapiens2-hf` sub-commands that are not tasks: a task of that name would shadow one (tests/test_task_checks.py
#: checks this list against the parser).
COMMAND_NAMES: tuple[str, ...] = ("convert", "demo", "merge", "export", "app", "space", "env", "tiny", "pose3d",
                                  "curate")

#: The entry-point group an installed package declares its tasks in (`sapiens2_hf.tasks.load_installed_tasks`).
ENTRY_POINT_GROUP = "sapiens2_hf.tasks"


def installed_task_names() -> tuple[str, ...]:
    """The task names installed packages declare (entry-point group `ENTRY_POINT_GROUP`), read without loading them
    (stdlib `importlib.metadata`): the command line imports the model code only when there are some."""
    return tuple(point.name for point in entry_points(group=ENTRY_POINT_GROUP))


#: Files a model argument may name; a Hub repo id does not end in one.
LOCAL_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".pt2", ".ckpt", ".onnx", ".json")


def looks_local(name: str) -> bool:
    """True for a model argument that cannot be a Hub repo id (`name` or `namespace/name`): it starts with '.', '/'
    or '~', holds a backslash, a colon or more than one '/', or ends in a file suffix of `LOCAL_FILE_SUFFIXES`. A
    missing such path is "no such file or folder", never a Hub lookup (which would answer about repo ids, or wait for
    the network). The command line applies it before it imports torch, the model loader before it asks the Hub."""
    return (name.startswith((".", "/", "~")) or "\\" in name or ":" in name or name.count("/") > 1
            or name.lower().endswith(LOCAL_FILE_SUFFIXES))


TASK_SPECS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="pose", title="308-keypoint top-down pose estimation", model_class="Sapiens2ForPoseEstimation",
            output_field="heatmaps", output_class="Sapiens2PoseEstimatorOutput",
            num_labels=308, auto_class="AutoModelForPoseEstimation", in_transformers=True,
            pipeline_name="sapiens2-pose", pipeline_tag="keypoint-detection",
            post_process="post_process_pose_estimation", resize="crop", head_upsampling="deconv",
            description="`heatmaps`: 308 heatmaps at 1/4 of the crop resolution",
        ),
        TaskSpec(
            name="seg", title="29-class body-part segmentation", model_class="Sapiens2ForSemanticSegmentation",
            output_field="logits", output_class="SemanticSegmenterOutput",
            num_labels=29, auto_class="AutoModelForSemanticSegmentation", in_transformers=True,
            pipeline_name="sapiens2-segmentation", pipeline_tag="image-segmentation",
            post_process="post_process_semantic_segmentation", resize="stretch", head_upsampling="deconv",
            description="`logits`: 29 class logits per pixel", result_maps=("segmentation",),
        ),
        TaskSpec(
            name="normal", title="Surface normal estimation", model_class="Sapiens2ForNormalEstimation",
            output_field="normals", output_class="Sapiens2NormalEstimatorOutput",
            num_labels=3, auto_class="AutoModelForNormalEstimation", in_transformers=True,
            pipeline_name="sapiens2-normal", post_process="post_process_normal_estimation",
            description="`normals`: camera-frame normal vectors per pixel (not unit length; post-processing normalises)",
            foreground_fill=0.0, result_maps=("normals",),
        ),
        TaskSpec(
            name="pointmap", title="Pointmap (per-pixel XYZ) estimation", model_class="Sapiens2ForPointmapEstimation",
            output_field="pointmaps", output_class="Sapiens2PointmapEstimatorOutput",
            num_labels=3, auto_class="AutoModelForPointmapEstimation", in_transformers=True,
            pipeline_name="sapiens2-pointmap", pipeline_tag="depth-estimation",
            post_process="post_process_pointmap_estimation",
            description="`pointmaps`: canonical-camera XYZ per pixel and `scales`: canonical / actual focal length",
            foreground_fill=float("nan"), result_maps=("pointmap",), metric_3d=True,
        ),
        TaskSpec(  # not in transformers: our own Auto class
            name="albedo", title="Albedo estimation", model_class="Sapiens2ForAlbedoEstimation",
            output_field="albedos", output_class="Sapiens2AlbedoEstimatorOutput",
            num_labels=3, pipeline_name="sapiens2-albedo", post_process="post_process_albedo_estimation",
            head_norm="rms_norm", description="`albedos`: RGB albedo per pixel (clamp to [0, 1])",
            foreground_fill=0.0, result_maps=("albedo",),
        ),
        # Matting: released after the other tasks (facebook/sapiens2-matting-1b, transformers' Sapiens2ForImageMatting).
        # Its head is the normal head with 4 sigmoid outputs; the official test pipeline stretches the whole image to
        # the input size (no letterbox). The Hub has no matting category; alpha and foreground are images, so
        # "image-to-image" ("image-segmentation" would hand the model to transformers' stock segmentation pipeline).
        TaskSpec(
            name="matting", title="Human image matting (alpha matte and foreground)",
            model_class="Sapiens2ForImageMatting", output_field="alphas", output_class="Sapiens2ImageMattingOutput",
            num_labels=4, auto_class="AutoModelForImageMatting", in_transformers=True, pipeline_name="sapiens2-matting",
            post_process="post_process_image_matting", resize="stretch",
            description="`alphas`: alpha matte in [0, 1] per pixel and `foregrounds`: pre-multiplied RGB foreground "
            "in [0, 1] (the head's 4 sigmoid channels)",
            extra_output_fields=("foregrounds",), result_maps=("alpha", "foreground"),
        ),
    )
}

class _TaskNames(Sequence):
    """The registered task names in registry order, read from `TASK_SPECS` at each use, so a task registered after
    import (`sapiens2_hf.register_task`) is in every list, choice and error message built from this. Compares equal
    to the tuple of the same names."""

    def __getitem__(self, index):
        return tuple(TASK_SPECS)[index]

    def __len__(self) -> int:
        return len(TASK_SPECS)

    def __contains__(self, name) -> bool:
        return name in TASK_SPECS

    def __iter__(self):
        return iter(tuple(TASK_SPECS))

    def __eq__(self, other) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, _TaskNames)) else other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other):
        return tuple(self) + tuple(other)

    def __radd__(self, other):
        return tuple(other) + tuple(self)

    def __repr__(self) -> str:
        return repr(tuple(self))


#: Task names in registry order (a live view of `TASK_SPECS`).
TASK_NAMES: Sequence[str] = _TaskNames()

#: The tasks of the official release, which a registration can neither replace nor remove.
OFFICIAL_TASK_NAMES: tuple[str, ...] = tuple(TASK_SPECS)

#: The backbone (no task head): class name and model-card facts.
BACKBONE_MODEL_CLASS = "Sapiens2Model"
BACKBONE_TITLE = "Pretrained backbone (image features)"
BACKBONE_PIPELINE_TAG = "image-feature-extraction"
BACKBONE_DESCRIPTION = "`last_hidden_state` (CLS, 8 registers, patch tokens) and `pooler_output` (CLS)"

#: Processor-only task: preprocessing for pretraining and feature extraction (the whole image, stretched).
PRETRAIN_TASK = "pretrain"


def task_spec(task: str) -> TaskSpec:
    """The registry entry of `task`, or a ValueError naming the known tasks."""
    if task not in TASK_SPECS:
        raise ValueError(f"Unknown Sapiens2 task {task!r}; choose one of {TASK_NAMES}.")
    return TASK_SPECS[task]


def task_of_architecture(architecture: str) -> str | None:
    """The task whose model class is named `architecture`, or None (the backbone or a foreign class)."""
    for spec in TASK_SPECS.values():
        if spec.model_class == architecture:
            return spec.name
    return None


def spec_of_class(model_class: type) -> TaskSpec:
    """The layer-0 spec a task model class carries: an official class's registry entry, or the class's `spec`
    (a `TaskSpec` of what cannot be derived; every field defaults to a dense map) completed from the class itself:
    `name` from its `task`, `model_class` from its name, `output_class` and `output_field` from its `output_class`
    (the first field after `loss`), `pipeline_name` `sapiens2-<name>` (`_` as `-`), `title` the name, `result_maps`
    the name for a dense map, `description` the output field. A spec can state any of these itself."""
    name = getattr(model_class, "task", None)
    official = TASK_SPECS.get(name) if isinstance(name, str) else None
    if official is not None and official.model_class == model_class.__name__:
        return official
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{model_class.__name__}.task must name the task (an identifier), got {name!r}; set "
                         'task = "<name>" on the class.')
    spec = getattr(model_class, "spec", None) or TaskSpec()
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"{model_class.__name__}.spec must be a TaskSpec, got {type(spec).__name__}.")
    output_class = getattr(model_class, "output_class", None)
    field = spec.output_field
    if not field:
        fields = [f.name for f in dataclasses.fields(output_class) if f.name != "loss"] if (
            dataclasses.is_dataclass(output_class)) else []
        if not fields:
            raise ValueError(f"{model_class.__name__}.output_class must be the ModelOutput dataclass its forward "
                             f"returns (its first field after `loss` holds the prediction), got {output_class!r}.")
        field = fields[0]
    dense = spec.post_process == "post_process_dense_maps"
    return dataclasses.replace(
        spec, name=spec.name or name, title=spec.title or name, model_class=spec.model_class or model_class.__name__,
        output_field=field, output_class=spec.output_class or getattr(output_class, "__name__", ""),
        pipeline_name=spec.pipeline_name or f"sapiens2-{name.replace('_', '-')}",
        result_maps=spec.result_maps or ((name,) if dense else ()),
        description=spec.description or f"`{field}`: {spec.title or name}")


_CHOICES = {"resize": ("crop", "stretch", "letterbox"), "head_upsampling": ("deconv", "pixel_shuffle"),
            "head_norm": ("instance_norm", "rms_norm")}


def add_task_spec(spec: TaskSpec) -> None:
    """Adds `spec` to `TASK_SPECS` after checking it: a new name and pipeline name, known policies, a positive label
    count. The public entry point is `sapiens2_hf.register_task`, which also registers the task's model and the
    tables of the other layers."""
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"register a TaskSpec, got {type(spec).__name__}.")
    if spec.name in TASK_SPECS:
        raise ValueError(f"Task {spec.name!r} is already registered; pick another name.")
    if not spec.name.isidentifier() or spec.name == PRETRAIN_TASK:
        raise ValueError(f"A task name must be an identifier other than {PRETRAIN_TASK!r}, got {spec.name!r}.")
    if spec.name in COMMAND_NAMES:
        raise ValueError(f"A task named {spec.name!r} would shadow the `sapiens2-hf {spec.name}` command; pick another "
                         "name.")
    taken = {other.pipeline_name: other.name for other in TASK_SPECS.values()}
    if spec.pipeline_name in taken:
        raise ValueError(f"The pipeline name {spec.pipeline_name!r} is task {taken[spec.pipeline_name]!r}'s; pick "
                         "another.")
    if spec.model_class in {other.model_class for other in TASK_SPECS.values()} | {BACKBONE_MODEL_CLASS}:
        raise ValueError(f"The model class name {spec.model_class!r} is taken; pick another.")
    for name, choices in _CHOICES.items():
        if getattr(spec, name) not in choices:
            raise ValueError(f"TaskSpec.{name} must be one of {choices}, got {getattr(spec, name)!r}.")
    if not isinstance(spec.num_labels, int) or spec.num_labels < 1:
        raise ValueError(f"TaskSpec.num_labels must be a positive int, got {spec.num_labels!r}.")
    TASK_SPECS[spec.name] = spec


def remove_task_spec(name: str) -> TaskSpec:
    """Removes a task added by `add_task_spec`; the official tasks stay."""
    if name in OFFICIAL_TASK_NAMES:
        raise ValueError(f"{name!r} is an official task; only tasks registered from outside the package are removed.")
    return TASK_SPECS.pop(task_spec(name).name)
