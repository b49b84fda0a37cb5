"""The 308-keypoint and 29-class tables have one source: modeling/sapiens2_label_data.py, generated from the spec JSON
files by scripts/generate_label_data.py. Every exported table (modeling, its processing copy and aliases, the training
tables in data/label_tables.py, the config label metadata) agrees with the spec files (tests/fixtures/spec, copies of
../shared/spec), and data's flip indices are those of the modeling flip pairs."""

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import sapiens2_hf.processing as processing
from sapiens2_hf.data import label_tables
from sapiens2_hf.modeling import sapiens2_label_data as label_data
from sapiens2_hf.modeling.configuration_sapiens2_hf import task_label_kwargs
from sapiens2_hf.modeling.sapiens2_processing_ops import flip_pairs_to_indices


ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "tests" / "fixtures" / "spec"
SHARED_SPEC = ROOT.parent / "shared" / "spec"
KEYPOINTS = json.loads((SPEC / "keypoints308.json").read_text())
SEG = json.loads((SPEC / "seg29.json").read_text())


def _generator():
    spec = importlib.util.spec_from_file_location("generate_label_data", ROOT / "scripts" / "generate_label_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_label_data_module_is_what_the_generator_writes_from_the_spec(tmp_path):
    generator = _generator()
    assert Path(label_data.__file__).read_text() == generator.render(SPEC), (
        "modeling/sapiens2_label_data.py is stale; run: python scripts/generate_label_data.py")
    # Broken control: one renamed keypoint in the spec changes the generated module.
    changed = dict(KEYPOINTS, names=["nose_tip", *KEYPOINTS["names"][1:]])
    shutil.copy(SPEC / "seg29.json", tmp_path / "seg29.json")
    (tmp_path / "keypoints308.json").write_text(json.dumps(changed))
    assert generator.render(tmp_path) != generator.render(SPEC)


@pytest.mark.skipif(not SHARED_SPEC.is_dir(), reason="no ../shared/spec in this checkout")
@pytest.mark.parametrize("name", ["keypoints308.json", "seg29.json"])
def test_the_fixture_spec_files_are_the_shared_ones(name):
    assert (SPEC / name).read_bytes() == (SHARED_SPEC / name).read_bytes()


def test_modeling_and_processing_tables_match_the_spec():
    assert label_data.POSE_KEYPOINT_NAMES == tuple(KEYPOINTS["names"])
    assert label_data.POSE_FLIP_PAIRS == tuple(tuple(pair) for pair in KEYPOINTS["flip_pairs"])
    assert label_data.NUM_POSE_KEYPOINTS == KEYPOINTS["num_keypoints"] == 308
    assert label_data.SEGMENTATION_CLASS_NAMES == tuple(SEG["names"])
    assert label_data.NUM_SEGMENTATION_CLASSES == SEG["num_classes"] == 29
    assert processing.Sapiens2HFImageProcessor.keypoint_names(308) == KEYPOINTS["names"]
    assert processing.Sapiens2HFImageProcessor().get_flip_indices(308) == KEYPOINTS["flip_indices"]


def test_config_label_metadata_matches_the_spec():
    pose, seg = task_label_kwargs("pose"), task_label_kwargs("seg")
    assert [pose["id2label"][i] for i in range(308)] == KEYPOINTS["names"]
    assert pose["flip_pairs"] == KEYPOINTS["flip_pairs"]
    assert [seg["id2label"][i] for i in range(29)] == SEG["names"]


def test_training_tables_match_the_spec():
    assert label_tables.KEYPOINT_FLIP_INDICES == tuple(KEYPOINTS["flip_indices"])
    assert label_tables.KEYPOINT_OKS_SIGMAS == tuple(KEYPOINTS["oks_sigmas"])
    assert label_tables.KEYPOINT_JOINT_WEIGHTS == tuple(KEYPOINTS["joint_weights"])
    assert label_tables.UPPER_BODY_KEYPOINT_IDS == tuple(KEYPOINTS["upper_body_ids"])
    assert label_tables.LOWER_BODY_KEYPOINT_IDS == tuple(KEYPOINTS["lower_body_ids"])
    assert label_tables.KEYPOINT_GROUPS == {name: tuple(ids) for name, ids in KEYPOINTS["groups"].items()}
    assert label_tables.COCO_WHOLEBODY_TO_308 == {int(k): v for k, v in KEYPOINTS["coco_wholebody_to_308"].items()}
    assert label_tables.MIN_VISIBLE_KEYPOINTS == KEYPOINTS["min_visible_keypoints"]
    assert label_tables.SEG_BACKGROUND_INDEX == SEG["background_index"]
    assert label_tables.SEG_IGNORE_INDEX == SEG["ignore_index"]
    assert label_tables.SEG_FLIP_SWAP_PAIRS == tuple(tuple(pair) for pair in SEG["horizontal_flip_swap_pairs"])
    assert label_tables.SEG_CE_CLASS_WEIGHTS == tuple(SEG["ce_class_weights"])


def test_data_flip_indices_are_the_modeling_flip_pairs():
    derived = flip_pairs_to_indices(label_data.POSE_FLIP_PAIRS, label_data.NUM_POSE_KEYPOINTS)
    assert label_tables.KEYPOINT_FLIP_INDICES == tuple(derived)
    flip = np.array(label_tables.KEYPOINT_FLIP_INDICES)
    np.testing.assert_array_equal(flip[flip], np.arange(308))  # an involution
    swapped = sorted(tuple(sorted((i, int(j)))) for i, j in enumerate(flip) if i != j)
    assert swapped[::2] == sorted(label_data.POSE_FLIP_PAIRS)  # swaps exactly the listed pairs, each once
    # Broken control: dropping one pair leaves its two keypoints unswapped, and the comparison catches it.
    broken = flip_pairs_to_indices(label_data.POSE_FLIP_PAIRS[1:], label_data.NUM_POSE_KEYPOINTS)
    assert tuple(broken) != label_tables.KEYPOINT_FLIP_INDICES
    assert broken[1] == 1 and label_tables.KEYPOINT_FLIP_INDICES[1] == 2  # the dropped pair (1, 2): the eyes
