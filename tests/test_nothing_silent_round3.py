"""Nothing silent, round three (issue 41): one loader boundary, values checked where they enter, keypoint formats from
the model's own keypoint set. Each case has its control: the valid input still works.

- A config.json with an invalid field (`num_hidden_layers: "two"`, a negative size, an unknown `task`) is one
  `InvalidConfigError` (a `ValueError`) naming the file, the field and the value, whoever reads it: our classes,
  transformers' Auto classes, `sapiens2_hf.pipeline` and `transformers.pipeline`.
- A folder of a custom task loaded where that task is not registered names the task, its entry-point group and
  `register_task`.
- `pipeline("sapiens2-pose")` without a model names `model=` and examples (was `KeyError: 'default'`).
- A corrupt, empty or lying model.safetensors stays the one-line `CorruptCheckpointError` on every entry point.
- Resuming a pose fine-tuning run from a seg checkpoint is refused at start, naming both tasks.
- A processor config with a 2-value mean or std, a zero, negative or non-finite std or a non-finite mean is refused
  naming the field.
- `keypoint_format="coco17"` on a model fine-tuned to COCO-17 converts from the model's own keypoints; a format the
  model's keypoints cannot make is refused naming the missing keypoints.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from transformers.utils import ModelOutput

import sapiens2_hf
from sapiens2_hf.data.keypoint_formats import people_in_format
from sapiens2_hf.modeling.configuration_sapiens2_hf import InvalidConfigError
from sapiens2_hf.modeling.loading_sapiens2_hf import CorruptCheckpointError
from sapiens2_hf.processing import Sapiens2HFImageProcessor

sys.path.insert(0, str(Path(__file__).parent))
from finetune_runs import POSE, finetune  # noqa: E402
from model_folders import save_tiny_model  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass
class Sapiens2ShadeEstimatorOutput(ModelOutput):
    """`shades`: `(batch_size, 1, height, width)`."""

    loss: torch.Tensor | None = None
    shades: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class ShadeLoss(torch.nn.Module):
    def forward(self, shades, labels):
        l1 = (shades - labels).abs().mean()
        return l1, {"l1_loss": l1}


class Sapiens2ForShadeEstimation(sapiens2_hf.Sapiens2TaskModel):
    """A registered task of this module's own (the custom-task recipe of tests/test_custom_task.py, shortened)."""

    task = "shade"
    loss_class = ShadeLoss
    output_class = Sapiens2ShadeEstimatorOutput
    spec = sapiens2_hf.TaskSpec(title="Shading", num_labels=1, description="`shades`: shading per pixel")

    def forward(self, pixel_values, labels=None, **kwargs):
        return self.decode(pixel_values, labels=labels, **kwargs)


@pytest.fixture(scope="module")
def pose_folder(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("round3"), "pose")


def _edited_copy(folder: Path, target: Path, **fields) -> Path:
    shutil.copytree(folder, target)
    config = json.loads((target / "config.json").read_text())
    config.update(fields)
    (target / "config.json").write_text(json.dumps(config))
    return target


ENTRY_POINTS = {
    "our class": lambda path: sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(path),
    "AutoConfig": lambda path: transformers.AutoConfig.from_pretrained(path),
    "AutoModel": lambda path: transformers.AutoModel.from_pretrained(path),
    "sapiens2_hf.pipeline": lambda path: sapiens2_hf.pipeline("sapiens2-pose", model=str(path)),
    "transformers.pipeline": lambda path: transformers.pipeline("sapiens2-pose", model=str(path)),
}


# ---------------------------------------------------------------------------------- item 1: one loader boundary
@pytest.mark.parametrize("field, value, says", [
    ("num_hidden_layers", "two", "expected int"),
    ("hidden_size", -32, "must be an int >= 1"),
    ("task", "nonsense", "not a registered task"),
])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_an_invalid_config_field_is_one_error_naming_file_field_and_value(pose_folder, tmp_path, entry, field,
                                                                           value, says):
    folder = _edited_copy(pose_folder, tmp_path / "bad", **{field: value})
    with pytest.raises(InvalidConfigError) as error:
        ENTRY_POINTS[entry](folder)
    message = str(error.value)
    assert isinstance(error.value, ValueError) and "\n" not in message
    assert str(folder / "config.json") in message and field in message and str(value) in message
    assert says in message and ("Fix that field" in message or "register_task" in message)


def test_a_valid_config_still_loads_through_every_entry_point(pose_folder):
    """Control of the test above: the unedited folder loads everywhere."""
    for entry, load in ENTRY_POINTS.items():
        assert load(pose_folder) is not None, entry


def test_a_folder_of_an_unregistered_custom_task_names_the_task_and_how_to_register_it(tmp_path):
    sapiens2_hf.register_task(Sapiens2ForShadeEstimation)
    try:
        torch.manual_seed(0)
        Sapiens2ForShadeEstimation(sapiens2_hf.Sapiens2Config.from_preset("tiny", task="shade")).save_pretrained(
            tmp_path / "shade")
        # control: registered, it loads
        assert Sapiens2ForShadeEstimation.from_pretrained(tmp_path / "shade").config.task == "shade"
    finally:
        sapiens2_hf.unregister_task("shade")
    for load in (lambda: transformers.AutoConfig.from_pretrained(tmp_path / "shade"),
                 lambda: sapiens2_hf.Sapiens2Model.from_pretrained(tmp_path / "shade")):
        with pytest.raises(InvalidConfigError) as error:
            load()
        message = str(error.value)
        assert "'shade'" in message and "Sapiens2ForShadeEstimation" in message and "\n" not in message
        assert "sapiens2_hf.tasks" in message and "register_task" in message and "config.json" in message


@pytest.mark.parametrize("factory", [transformers.pipeline, sapiens2_hf.pipeline])
def test_a_pipeline_without_a_model_names_model_and_examples(factory, pose_folder):
    with pytest.raises(ValueError, match=r"needs model=.*facebook/sapiens2-pose-1b.*sapiens2-hf tiny"):
        factory("sapiens2-pose")
    # control: with a model it builds
    assert factory("sapiens2-pose", model=str(pose_folder)).model.config.task == "pose"


@pytest.mark.parametrize("damage", ["truncated", "empty", "lying"])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_corrupt_weights_stay_the_one_line_corrupt_checkpoint_error(pose_folder, tmp_path, entry, damage):
    folder = tmp_path / "corrupt"
    shutil.copytree(pose_folder, folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        weights.write_bytes(b"")
    else:  # a header that claims more bytes than the file has
        length = int.from_bytes(data[:8], "little")
        weights.write_bytes((length + 10**6).to_bytes(8, "little") + data[8:])
    if entry == "AutoConfig":
        pytest.skip("reads no weights")
    with pytest.raises(CorruptCheckpointError) as error:
        ENTRY_POINTS[entry](folder)
    assert "model.safetensors" in str(error.value) and "\n" not in str(error.value)


def test_resuming_a_pose_run_from_a_seg_checkpoint_is_refused_naming_both_tasks(tmp_path):
    from sapiens2_hf.training.finetune import check_resume_task

    seg, pose = save_tiny_model(tmp_path, "seg"), save_tiny_model(tmp_path, "pose")
    with pytest.raises(ValueError, match=r"checkpoint of task 'seg'.*trains task 'pose'") as error:
        check_resume_task(str(seg), "pose")
    assert "\n" not in str(error.value)
    check_resume_task(str(pose), "pose")  # control: the same task resumes
    check_resume_task(None, "pose")  # and a fresh run has nothing to check


def test_the_fine_tuning_script_refuses_the_other_tasks_checkpoint_before_training(tmp_path):
    seg_run = tmp_path / "seg_run"
    finetune(["--task", "seg", *POSE[2:], "--output_dir", str(seg_run), "--max_steps", "1", "--save_strategy",
              "steps", "--save_steps", "1"])
    with pytest.raises(ValueError, match=r"task 'seg'.*task 'pose'"):
        finetune([*POSE, "--output_dir", str(tmp_path / "pose_run"), "--max_steps", "2",
                  "--resume_from_checkpoint", str(seg_run / "checkpoint-1")])
    assert not (tmp_path / "pose_run" / "checkpoint-1").exists()


# --------------------------------------------------------------------- item 2: values checked where they enter
BAD_NORMALISATION = [
    ("image_mean", [0.5, 0.5], "2 values"),
    ("image_std", [0.2, 0.2], "2 values"),
    ("image_std", [0.0, 0.0, 0.0], "positive and finite"),
    ("image_std", 0, "positive and finite"),
    ("image_std", [-0.2, 0.2, 0.2], "positive and finite"),
    ("image_std", [math.nan] * 3, "positive and finite"),
    ("image_std", [math.inf] * 3, "positive and finite"),
    ("image_mean", [math.inf, 0.4, 0.4], "finite"),
    ("image_mean", [math.nan] * 3, "finite"),
]


@pytest.mark.parametrize("field, value, says", BAD_NORMALISATION)
def test_a_processor_normalisation_value_is_refused_where_it_enters(tmp_path, field, value, says):
    Sapiens2HFImageProcessor(task="pose").save_pretrained(tmp_path / "p")
    config = json.loads((tmp_path / "p" / "preprocessor_config.json").read_text())
    config[field] = value
    (tmp_path / "p" / "preprocessor_config.json").write_text(json.dumps(config))
    for make in (lambda: Sapiens2HFImageProcessor(task="pose", **{field: value}),
                 lambda: Sapiens2HFImageProcessor.from_pretrained(tmp_path / "p"),
                 lambda: transformers.AutoImageProcessor.from_pretrained(tmp_path / "p")):
        with pytest.raises(ValueError, match=field) as error:
            make()
        assert says in str(error.value) and "\n" not in str(error.value)


def test_valid_normalisation_values_still_work(tmp_path):
    for value in ([0.5, 0.5, 0.5], 0.5, (0.229, 0.224, 0.225)):
        processor = Sapiens2HFImageProcessor(task="pose", image_std=value, image_mean=value)
        processor.save_pretrained(tmp_path / "ok")
        assert transformers.AutoImageProcessor.from_pretrained(tmp_path / "ok").image_std is not None


# ------------------------------------------------------------- item 4: keypoint formats from the model's own set
@pytest.fixture(scope="module")
def coco17_folder(tmp_path_factory):
    """A tiny pose model fine-tuned to COCO-17 (its config's id2label holds COCO-17's names) and its processor."""
    from sapiens2_hf.data.keypoint_sets import KEYPOINT_SET_PRESETS

    folder = tmp_path_factory.mktemp("coco17") / "model"
    torch.manual_seed(0)
    config = sapiens2_hf.tiny_config("pose", **KEYPOINT_SET_PRESETS["coco17"].config_kwargs())
    sapiens2_hf.Sapiens2ForPoseEstimation(config).save_pretrained(folder)
    Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def _photo():
    return np.random.default_rng(0).integers(0, 256, (40, 30, 3), dtype=np.uint8)


def test_a_coco17_model_converts_to_coco17_and_to_its_own_names(coco17_folder):
    from sapiens2_hf.data.keypoint_formats import KEYPOINT_FORMATS

    pipe = sapiens2_hf.pipeline("sapiens2-pose", model=str(coco17_folder))
    own = pipe(_photo(), boxes=[[0, 0, 30, 40]])[0]
    converted = people_in_format(pipe(_photo(), boxes=[[0, 0, 30, 40]]), "coco17")[0]
    assert converted["labels"] == list(KEYPOINT_FORMATS["coco17"]) == own["labels"]
    np.testing.assert_array_equal(np.asarray(converted["keypoints"]), np.asarray(own["keypoints"]))  # identity
    picked = people_in_format(pipe(_photo(), boxes=[[0, 0, 30, 40]]), ["left_wrist", "nose"])[0]
    np.testing.assert_array_equal(np.asarray(picked["keypoints"]),
                                  np.asarray(own["keypoints"])[[own["labels"].index("left_wrist"), 0]])


@pytest.mark.parametrize("target, lacking", [("body25", "left_big_toe"), ("coco_wholebody133", "98 missing"),
                                             (["left_wrist", "neck"], "neck")])
def test_a_format_the_models_keypoints_cannot_make_is_refused_naming_them(coco17_folder, target, lacking):
    pipe = sapiens2_hf.pipeline("sapiens2-pose", model=str(coco17_folder))
    with pytest.raises(ValueError, match=lacking) as error:
        people_in_format(pipe(_photo(), boxes=[[0, 0, 30, 40]]), target)
    assert "\n" not in str(error.value)


def test_the_processor_converts_from_the_keypoint_names_it_is_given():
    from sapiens2_hf.data.keypoint_sets import KEYPOINT_SET_PRESETS
    from sapiens2_hf.data.keypoint_formats import convert_keypoints, post_process_in_format

    names = list(KEYPOINT_SET_PRESETS["coco17"].names)
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48})
    heatmaps = torch.rand(1, 17, 16, 12)
    crops = {"bbox_center": torch.tensor([[15.0, 20.0]]), "bbox_scale": torch.tensor([[30.0, 40.0]]),
             "boxes_xyxy": torch.tensor([[0.0, 0.0, 30.0, 40.0]])}
    outputs = type("Outputs", (), {"heatmaps": heatmaps})()
    own = processor.post_process_pose_estimation(outputs, crops=crops)[0][0]
    coco = post_process_in_format(processor, outputs, "coco17", crops=crops, keypoint_names=names)[0][0]
    assert torch.equal(coco["keypoints"], own["keypoints"])
    with pytest.raises(ValueError, match="right_big_toe"):
        post_process_in_format(processor, outputs, "body25", crops=crops, keypoint_names=names)
    # control: the 308-keypoint conversion is unchanged, and the array API takes source_names too
    points = np.random.default_rng(1).random((2, 17, 2))
    converted, _ = convert_keypoints(points, None, "coco17", source_names=names)
    np.testing.assert_array_equal(converted, points)


def test_the_cli_writes_a_coco17_models_keypoints_in_coco17(coco17_folder, tmp_path, capsys):
    from PIL import Image

    from sapiens2_hf.cli.main import main

    image = tmp_path / "a.png"
    Image.fromarray(_photo()).save(image)
    common = [str(image), "--model", str(coco17_folder), "--device", "cpu", "--quiet", "--whole-image"]
    assert main(["pose", *common, "--out", str(tmp_path / "own")]) == 0, capsys.readouterr().err
    assert main(["pose", *common, "--out", str(tmp_path / "fmt"), "--keypoint-format", "coco17"]) == 0, \
        capsys.readouterr().err
    own, fmt = (json.loads((tmp_path / name / "a.json").read_text()) for name in ("own", "fmt"))
    assert fmt["annotations"][0]["keypoints"] == own["annotations"][0]["keypoints"]
    assert len(fmt["categories"][0]["keypoints"]) == 17
    assert main(["pose", *common, "--out", str(tmp_path / "b25"), "--keypoint-format", "body25"]) != 0
    assert "left_big_toe" in capsys.readouterr().err
    # refused once the model is loaded, before any input is read: no input was processed or skipped
    summary = json.loads((tmp_path / "b25" / "summary.json").read_text())
    assert summary["processed"] == 0 and summary["skipped"] == [] and not list((tmp_path / "b25").glob("a*"))


# ------------------------------------------------------------------------- the fresh pass: new surfaces, new cases
def test_init_head_from_a_model_of_another_task_names_both_tasks(tmp_path):
    pose = save_tiny_model(tmp_path, "pose")
    with pytest.raises(ValueError, match=r"--init_head_from .* task 'pose', but this run trains a 'seg' head") as error:
        finetune(["--task", "seg", *POSE[2:], "--output_dir", str(tmp_path / "seg_run"), "--max_steps", "1",
                  "--save_strategy", "no", "--init_head_from", str(pose)])
    assert "\n" not in str(error.value)
    # control: a seg head starts from a seg model's head
    seg = save_tiny_model(tmp_path, "seg")
    finetune(["--task", "seg", *POSE[2:], "--output_dir", str(tmp_path / "seg_ok"), "--max_steps", "1",
              "--save_strategy", "no", "--init_head_from", str(seg)])


def test_a_registered_tasks_pipeline_without_a_model_offers_no_official_checkpoint():
    sapiens2_hf.register_task(Sapiens2ForShadeEstimation)
    try:
        with pytest.raises(ValueError, match=r"needs model=: a folder or Hub repo id of a 'shade' model") as error:
            sapiens2_hf.pipeline("sapiens2-shade")
        assert "facebook/" not in str(error.value) and "sapiens2-hf tiny" not in str(error.value)
        model = Sapiens2ForShadeEstimation(sapiens2_hf.Sapiens2Config.from_preset("tiny", task="shade"))
        assert sapiens2_hf.pipeline("sapiens2-shade", model=model).model is model  # control
    finally:
        sapiens2_hf.unregister_task("shade")


# ------------------------------------------------------------------------- command-line values where they enter


@pytest.mark.parametrize("argv", [
    ["tiny", "pose", "--out", ""], ["seg", "a.png", "--model", "m", "--out", "  "],
    ["pose3d", "a.png", "--model", "m", "--pointmap-model", "p", "--out", ""], ["convert", "f", "--out", ""],
    ["merge", "a", "--out", ""], ["export", "m", "--out", ""], ["curate", "a", "--out", ""], ["demo", "--out", ""],
])
def test_an_empty_out_is_refused_by_every_command(argv, capsys):
    """An empty `--out` used to mean the current folder (`tiny --out ""` said ". exists and is not empty")."""
    from sapiens2_hf.cli.main import main

    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2 and "argument --out: is empty" in capsys.readouterr().err


@pytest.mark.parametrize("value, says", [("99999999999999999999", "is outside 0 ... 4294967295"),
                                         ("-1", "is outside 0"), ("1.5", "is not an integer")])
def test_a_seed_out_of_range_names_the_option(value, says, capsys):
    from sapiens2_hf.cli.main import main

    with pytest.raises(SystemExit) as exit:
        main(["tiny", "pose", "--out", "x", "--seed", value])
    assert exit.value.code == 2 and f"argument --seed: {value if value != '1.5' else repr(value)} {says}" in \
        capsys.readouterr().err


def test_valid_out_and_seed_still_write_a_model(tmp_path, capsys):
    from sapiens2_hf.cli.main import main

    assert main(["tiny", "pose", "--out", str(tmp_path / "m"), "--seed", str(2**32 - 1)]) == 0
    assert (tmp_path / "m" / "config.json").is_file()


def test_a_pointmap_model_of_another_task_is_named_by_its_option(pose_folder, tmp_path, capsys):
    """`--pointmap-model` pointing at a seg (here: pose) model names the option, as `--foreground-model` does."""
    from sapiens2_hf.cli.main import main

    from PIL import Image

    Image.fromarray(np.zeros((32, 24, 3), np.uint8)).save(tmp_path / "a.png")
    code = main(["pose3d", str(tmp_path / "a.png"), "--model", str(pose_folder), "--pointmap-model",
                 str(pose_folder), "--out", str(tmp_path / "out"), "--whole-image", "--threads", "1"])
    err = capsys.readouterr().err
    assert code != 0 and f"--pointmap-model {pose_folder}:" in err and "pose" in err, err


def test_synthetic_data_with_a_named_keypoint_set_is_refused_naming_both_counts():
    from types import SimpleNamespace

    from sapiens2_hf.training.label_sets import requested_keypoint_set

    args = SimpleNamespace(keypoint_set="coco17", dataset="synthetic", dataset_name=None)
    with pytest.raises(ValueError, match="--dataset synthetic generates the official 308 keypoints, but "
                                         "--keypoint_set coco17 names 17"):
        requested_keypoint_set(args)
    args.keypoint_set = "sapiens308"  # control: the official set is what synthetic data has
    assert len(requested_keypoint_set(args)) == 308
