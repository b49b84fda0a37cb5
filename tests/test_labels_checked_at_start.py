"""Labels are checked against the data before training starts: a keypoint count that does not match the set the run
trains, or an empty class list, is refused up front naming both counts (not an index error mid-training)."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sapiens2_hf.data.keypoint_sets import KEYPOINT_SET_PRESETS
from sapiens2_hf.training.label_sets import requested_class_names, requested_keypoint_set

COCO17 = KEYPOINT_SET_PRESETS["coco17"]


def _coco_file(path: Path, keypoints_per_person: int, category_names=COCO17.names) -> Path:
    rng = np.random.default_rng(0)
    annotations = []
    for index in range(3):
        points = np.concatenate([rng.uniform(0, 60, (keypoints_per_person, 2)),
                                 np.full((keypoints_per_person, 1), 2.0)], axis=1)
        annotations.append({"id": index + 1, "image_id": 1, "bbox": [0, 0, 60, 90], "category_id": 1,
                            "keypoints": points.reshape(-1).round(2).tolist()})
    data = {"images": [{"id": 1, "file_name": "a.png", "height": 96, "width": 72}], "annotations": annotations,
            "categories": [{"id": 1, "name": "person", "keypoints": list(category_names), "skeleton": []}]}
    path.write_text(json.dumps(data))
    return path


def _coco_args(targets: Path, keypoint_set: str = "auto", eval_targets=None) -> SimpleNamespace:
    return SimpleNamespace(keypoint_set=keypoint_set, dataset="coco", dataset_name=None, train_targets=str(targets),
                           eval_targets=None if eval_targets is None else str(eval_targets), test_targets=None)


def test_fewer_keypoints_than_the_category_names_are_refused_naming_both(tmp_path):
    bad = _coco_file(tmp_path / "bad.json", 10)
    with pytest.raises(ValueError, match=r"bad\.json: annotation id 1 has 10 keypoints, but its person category "
                                         r"names 17"):
        requested_keypoint_set(_coco_args(bad))
    # control: the same file with 17 keypoints per person trains the category's set
    good = _coco_file(tmp_path / "good.json", 17)
    assert requested_keypoint_set(_coco_args(good)).names == COCO17.names


def test_a_later_annotation_or_split_with_another_count_is_refused(tmp_path):
    good = _coco_file(tmp_path / "train.json", 17)
    data = json.loads(good.read_text())
    data["annotations"][2]["keypoints"] = data["annotations"][2]["keypoints"][:-3]
    (tmp_path / "eval.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"eval\.json: annotation id 3 has 16 keypoints, but the set of train\.json "
                                         "names 17"):
        requested_keypoint_set(_coco_args(good, eval_targets=tmp_path / "eval.json"))
    assert requested_keypoint_set(_coco_args(good, eval_targets=good)).names == COCO17.names  # control


def test_a_named_set_that_the_data_does_not_have_is_refused(tmp_path):
    coco = _coco_file(tmp_path / "coco17.json", 17)
    with pytest.raises(ValueError, match=r"has 17 keypoints, but --keypoint_set mpii16 names 16"):
        requested_keypoint_set(_coco_args(coco, "mpii16"))
    assert requested_keypoint_set(_coco_args(coco, "coco17")).names == COCO17.names  # control


def test_a_named_set_is_checked_against_dataset_rows():
    from datasets import Dataset

    rows = Dataset.from_dict({"keypoints": [[[[1.0, 2.0, 2.0]] * 17]]})
    columns = SimpleNamespace(keypoints="keypoints", keypoint_visibility=None)
    args = SimpleNamespace(keypoint_set="mpii16", dataset="hf", dataset_name="x")
    with pytest.raises(ValueError, match="17 keypoints per person but --keypoint_set mpii16 names 16"):
        requested_keypoint_set(args, rows, columns)
    args.keypoint_set = "coco17"
    assert requested_keypoint_set(args, rows, columns).names == COCO17.names  # control


def test_an_official_layout_keeps_training_the_308_set(tmp_path):
    """Control for the count check: 308-keypoint files are mapped by the readers, whatever their category says."""
    official = _coco_file(tmp_path / "official.json", 308, category_names=[f"k{i}" for i in range(308)])
    assert len(requested_keypoint_set(_coco_args(official))) == 308
    assert len(requested_keypoint_set(_coco_args(official, "sapiens308"))) == 308


@pytest.mark.parametrize("value", ["", "  ", "background", "a,a", "a,,b"])
def test_empty_or_degenerate_class_names_are_refused(value):
    args = SimpleNamespace(class_names=value, labels_file=None)
    with pytest.raises(ValueError, match=r"--class_names .* must be at least two, unique and non-empty"):
        requested_class_names(args)


def test_valid_class_names_and_no_class_names_still_work():
    assert requested_class_names(SimpleNamespace(class_names="bg, person", labels_file=None)) == ["bg", "person"]
    assert requested_class_names(SimpleNamespace(class_names=None, labels_file=None)) is None


def test_finetune_refuses_before_training(tmp_path):
    """Through the training script: the refusal comes before a model is built or a step is taken."""
    import importlib.util

    script = Path(__file__).resolve().parents[1] / "training_scripts" / "finetune.py"
    spec = importlib.util.spec_from_file_location("finetune_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    coco = _coco_file(tmp_path / "coco17.json", 17)
    (tmp_path / "images").mkdir()
    with pytest.raises(ValueError, match="--keypoint_set mpii16 names 16"):
        module.main(["--task", "pose", "--dataset", "coco", "--train_targets", str(coco), "--train_images",
                     str(tmp_path / "images"), "--keypoint_set", "mpii16", "--do_train", "--max_steps", "1",
                     "--preset", "tiny", "--output_dir", str(tmp_path / "run"), "--report_to", "none",
                     "--use_cpu", "true"])
    assert not (tmp_path / "run" / "model.safetensors").exists()
