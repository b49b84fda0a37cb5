"""Fine-tuning on your own labels (issue 30): keypoint sets other than the official 308 (a COCO-17 file trains a
17-keypoint model with no extra flag; presets; layout files; sets without flip pairs), and what the trained model's
config carries into the pipeline, the command line (JSON and overlay) and the metrics."""

from __future__ import annotations

import importlib.util
import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import sapiens2_hf
from sapiens2_hf.data.keypoint_sets import (
    KEYPOINT_SET_PRESETS,
    KeypointSet,
    derive_flip_pairs,
    keypoint_set,
)

pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[1] / "training_scripts" / "finetune.py"
COMMON = ["--preset", "tiny", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
          "--report_to", "none", "--use_cpu", "true", "--save_strategy", "no", "--disable_tqdm", "true",
          "--optim", "adamw_torch", "--dataloader_num_workers", "0", "--input_height", "64", "--input_width", "48"]


def _finetune_main():
    spec = importlib.util.spec_from_file_location("finetune_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.fixture(scope="module")
def synthetic_coco(tmp_path_factory):
    """Six synthetic humans written as a 308-keypoint COCO file (the writer's layout)."""
    from sapiens2_hf.data.synthetic import write_dataset

    return write_dataset(tmp_path_factory.mktemp("humans"), 6, height=96, width=72, seed=3, tasks=("pose",))


def _relabelled(folder: Path, kset: KeypointSet, out: Path, category_skeleton: bool = True) -> Path:
    """The synthetic COCO file with each person's keypoints in `kset` (what a user's COCO-17 file looks like)."""
    data = json.loads((folder / "person_keypoints.json").read_text())
    for annotation in data["annotations"]:
        points = kset.from_308(np.asarray(annotation["keypoints"], np.float32).reshape(-1, 3))
        annotation["keypoints"] = points.reshape(-1).round(2).tolist()
        annotation["num_keypoints"] = int((points[:, 2] > 0).sum())
    data["categories"] = [{"id": 1, "name": "person", "keypoints": list(kset.names),
                           "skeleton": [[a + 1, b + 1] for a, b in kset.skeleton] if category_skeleton else []}]
    out.write_text(json.dumps(data))
    return out


# ------------------------------------------------------------------------------------------------------- the sets


def _mirrored(name: str) -> str:
    """`name` with its left side word made right (this test's own reading of the names)."""
    return re.sub(r"(^|_)(left|l)(?=_|$)", lambda m: m.group(1) + ("right" if m.group(2) == "left" else "r"), name)


def test_flip_pairs_are_derived_from_left_and_right_names():
    names = ["nose", "left_eye", "right_eye", "l_ear", "r_ear", "LShoulder", "RShoulder", "hip_left", "hip_right",
             "lateral_malleolus", "rateral_malleolus", "Left Wrist", "Right Wrist"]
    assert derive_flip_pairs(names) == ((1, 2), (3, 4), (5, 6), (7, 8), (11, 12))  # "lateral" is no side word
    assert derive_flip_pairs(["tip", "base"]) == ()


def test_presets_are_consistent():
    for name, kset in KEYPOINT_SET_PRESETS.items():
        assert len(kset.sigmas) == len(kset) and len(kset.sources) == len(kset), name
        if name == "sapiens308":  # the official pairs: not all by name (contour samples are numbered per side)
            continue
        for a, b in kset.flip_pairs:  # a pair's names are mirror images (face68's iBUG names carry no side)
            if not kset.names[a].startswith("face-"):
                assert _mirrored(kset.names[a]) == kset.names[b] or _mirrored(kset.names[b]) == kset.names[a], \
                    (name, kset.names[a], kset.names[b])
    assert len(KEYPOINT_SET_PRESETS["coco17"]) == 17 and len(KEYPOINT_SET_PRESETS["wholebody133"]) == 133
    # COCO's published OKS sigmas for its 17 points (the 308 table repeats them)
    assert KEYPOINT_SET_PRESETS["coco17"].sigmas == (0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072,
                                                      0.062, 0.062, 0.107, 0.107, 0.087, 0.087, 0.089, 0.089)
    assert KEYPOINT_SET_PRESETS["hand21"].flip_pairs == ()  # one hand: not mirrored
    assert len(KEYPOINT_SET_PRESETS["face68"].flip_pairs) == 29


def test_layout_files_and_their_errors(tmp_path):
    path = tmp_path / "fish.json"
    path.write_text(json.dumps({"keypoints": ["head", "left_fin", "right_fin", "tail"], "skeleton": [[1, 2], [1, 3],
                                                                                                  [1, 4]]}))
    fish = keypoint_set(path)
    assert fish.names == ("head", "left_fin", "right_fin", "tail") and fish.flip_pairs == ((1, 2),)
    assert fish.skeleton == ((0, 1), (0, 2), (0, 3)) and fish.sigmas is None  # no 308 counterpart: no sigma
    path.write_text(json.dumps({"keypoints": ["a", "a"]}))
    with pytest.raises(ValueError, match="repeats the name"):
        keypoint_set(path)
    path.write_text(json.dumps({"keypoints": ["a", "b"], "skeleton": [[1, 3]]}))
    with pytest.raises(ValueError, match=r"skeleton entry \[0, 2\] is not two keypoint indices"):
        keypoint_set(path)
    with pytest.raises(ValueError, match="neither a preset"):
        keypoint_set("coco18")


def test_from_308_copies_and_averages():
    keypoints = np.zeros((308, 3), np.float32)
    names = sapiens2_hf.modeling.sapiens2_label_data.POSE_KEYPOINT_NAMES
    keypoints[names.index("left_hip")] = (10, 20, 2)
    keypoints[names.index("right_hip")] = (30, 40, 1)
    mpii = KEYPOINT_SET_PRESETS["mpii16"].from_308(keypoints)
    assert mpii[3].tolist() == [10, 20, 2] and mpii[2].tolist() == [30, 40, 1]  # left / right hip
    assert mpii[6].tolist() == [20, 30, 1]  # pelvis: the midpoint, as sure as the less sure hip
    assert mpii[9].tolist() == [0, 0, 0]  # head_top: no 308 counterpart


# ------------------------------------------------------------------------------------------------- fine-tuning


def test_a_coco17_file_trains_a_17_keypoint_model_everywhere(synthetic_coco, tmp_path, capsys):
    """No flag: the file's person category (17 names, COCO's skeleton) becomes the model's keypoint set, and the
    saved config, the pipeline, the command line's JSON and overlay all carry it."""
    coco17 = KEYPOINT_SET_PRESETS["coco17"]
    annotations = _relabelled(synthetic_coco, coco17, tmp_path / "coco17.json")
    out = tmp_path / "run"
    _finetune_main()(["--task", "pose", "--dataset", "coco", "--train_targets", str(annotations), "--train_images",
                      str(synthetic_coco / "images"), "--eval_targets", str(annotations), "--eval_images",
                      str(synthetic_coco / "images"), "--do_train", "--do_eval", "--max_steps", "2",
                      "--output_dir", str(out), *COMMON])
    config = json.loads((out / "config.json").read_text())
    assert [config["id2label"][str(i)] for i in range(17)] == list(coco17.names)
    assert config["skeleton"] == [list(link) for link in coco17.skeleton]
    assert config["flip_pairs"] == [list(pair) for pair in coco17.flip_pairs]
    assert config["oks_sigmas"] == list(coco17.sigmas)
    results = json.loads((out / "eval_results.json").read_text())
    assert 0.0 <= results["eval_oks_ap"] <= 1.0 and "eval_pck_0_1" in results  # OKS with the 17 sigmas
    # the pipeline
    from PIL import Image

    image = np.asarray(Image.open(next((synthetic_coco / "images").iterdir())).convert("RGB"))
    (person,) = sapiens2_hf.pipeline("sapiens2-pose", model=str(out))(image, boxes=[[5.0, 5.0, 60.0, 90.0]])
    assert np.asarray(person["keypoints"]).shape == (17, 2) and list(person["labels"]) == list(coco17.names)
    # the command line: JSON categories and the overlay
    from sapiens2_hf.cli.main import main

    Image.fromarray(image).save(tmp_path / "photo.png")
    (tmp_path / "boxes.json").write_text(json.dumps({"photo.png": [[5.0, 5.0, 60.0, 90.0]]}))
    assert main(["pose", str(tmp_path / "photo.png"), "--model", str(out), "--out", str(tmp_path / "cli"),
                 "--boxes", str(tmp_path / "boxes.json"), "--quiet", "--threads", "1", "--device", "cpu"]) == 0, \
        capsys.readouterr().err
    written = json.loads((tmp_path / "cli" / "photo.json").read_text())
    assert written["categories"][0]["keypoints"] == list(coco17.names)
    assert written["categories"][0]["skeleton"] == [[a + 1, b + 1] for a, b in coco17.skeleton]
    assert len(written["annotations"][0]["keypoints"]) == 17 * 3
    assert Image.open(tmp_path / "cli" / "photo_pose.png").size == (image.shape[1], image.shape[0])


def test_a_set_without_flip_pairs_trains_without_flips(synthetic_coco, tmp_path, caplog):
    """hand21 (one hand, no side): the run says it trains without the flip augmentation, and the transform it builds
    never flips (control: the same records with the official set's transform do flip)."""
    from sapiens2_hf.data.pose import PoseTransform
    from sapiens2_hf.training.label_sets import pose_transform

    hand = KEYPOINT_SET_PRESETS["hand21"]
    with caplog.at_level(logging.WARNING):
        transform = pose_transform(PoseTransform, hand)((64, 48), train=True)
    assert "without the flip augmentation" in caplog.text
    assert transform.p["flip"] == 0.0
    assert PoseTransform((64, 48), train=True).p["flip"] == 0.5  # control
    annotations = _relabelled(synthetic_coco, hand, tmp_path / "hand.json")
    out = tmp_path / "hand_run"
    _finetune_main()(["--task", "pose", "--dataset", "coco", "--train_targets", str(annotations), "--train_images",
                      str(synthetic_coco / "images"), "--do_train", "--max_steps", "1", "--output_dir", str(out),
                      *COMMON])
    config = json.loads((out / "config.json").read_text())
    assert len(config["id2label"]) == 21 and config["flip_pairs"] == []


def test_a_model_with_other_keypoints_is_refused_naming_the_fix(synthetic_coco, tmp_path):
    torch.manual_seed(0)
    model = sapiens2_hf.Sapiens2ForPoseEstimation(sapiens2_hf.tiny_config("pose"))
    model.save_pretrained(tmp_path / "m308")
    annotations = _relabelled(synthetic_coco, KEYPOINT_SET_PRESETS["coco17"], tmp_path / "coco17.json")
    common = [arg for arg in COMMON if arg not in ("--preset", "tiny")]
    with pytest.raises(ValueError, match="has 308 keypoints but the data has 17.*--init_head_from"):
        _finetune_main()(["--task", "pose", "--model_name_or_path", str(tmp_path / "m308"), "--dataset", "coco",
                          "--train_targets", str(annotations), "--train_images", str(synthetic_coco / "images"),
                          "--do_train", "--max_steps", "1", "--output_dir", str(tmp_path / "run"), *common])


# ------------------------------------------------------------------------------------------------ your own classes

# The 29 official body parts merged into 6 classes (what a user's parsing dataset often has)
SIX_CLASSES = ["background", "hair", "face", "skin", "clothes", "shoes"]


def _merge_29_to_6(label: np.ndarray) -> np.ndarray:
    from sapiens2_hf.modeling.sapiens2_label_data import SEGMENTATION_CLASS_NAMES

    group = {"Background": 0, "Hair": 1, "Face_Neck": 2, "Apparel": 4, "Eyeglass": 2}
    table = np.zeros(256, np.uint8)
    for index, name in enumerate(SEGMENTATION_CLASS_NAMES):
        if name in group:
            table[index] = group[name]
        elif "Foot" in name:
            table[index] = 5
        elif "Clothing" in name:
            table[index] = 4
        else:  # hands, arms, legs, torso, lips, teeth, tongue: skin
            table[index] = 3
    table[255] = 255
    return table[label]


def test_a_six_class_dataset_trains_a_six_class_model(tmp_path):
    import datasets

    fixture = datasets.load_from_disk(str(Path(__file__).parent / "fixtures" / "datasets" / "seg"))
    merged = fixture.map(lambda row: {"label": _merge_29_to_6(np.asarray(row["label"], np.uint8))})
    merged.save_to_disk(str(tmp_path / "six"))
    (tmp_path / "labels.json").write_text(json.dumps({str(i): name for i, name in enumerate(SIX_CLASSES)}))
    out = tmp_path / "run"
    _finetune_main()(["--task", "seg", "--dataset_name", str(tmp_path / "six"), "--labels_file",
                      str(tmp_path / "labels.json"), "--do_train", "--do_eval", "--max_steps", "2",
                      "--output_dir", str(out), *COMMON])
    config = json.loads((out / "config.json").read_text())
    assert [config["id2label"][str(i)] for i in range(6)] == SIX_CLASSES
    results = json.loads((out / "eval_results.json").read_text())
    assert {f"eval_iou_{name}" for name in SIX_CLASSES} <= set(results)  # per-class IoU
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(out)
    assert model.config.num_labels == 6 and model.decode_head.predictor.out_channels == 6
    # the command line draws the model's classes with colours of their own, and names them in the legend
    from PIL import Image

    from sapiens2_hf.cli.main import main

    Image.fromarray(np.asarray(fixture["test"][0]["image"])).save(tmp_path / "photo.png")
    assert main(["seg", str(tmp_path / "photo.png"), "--model", str(out), "--out", str(tmp_path / "cli"), "--quiet",
                 "--threads", "1", "--device", "cpu"]) == 0
    assert np.load(tmp_path / "cli" / "photo_seg.npy").max() < 6
    # --class_names says the same; a count that does not match the data's ids is caught by the metric
    with pytest.raises(ValueError, match="at least two, unique"):
        _finetune_main()(["--task", "seg", "--dataset_name", str(tmp_path / "six"), "--class_names", "a,a",
                          "--do_train", "--max_steps", "1", "--output_dir", str(tmp_path / "bad"), *COMMON])


def test_reduce_labels_and_the_flip_of_left_right_classes():
    from sapiens2_hf.data.dense import SegTransform
    from sapiens2_hf.data.keypoint_sets import derive_flip_pairs

    image = np.zeros((8, 6, 3), np.uint8)
    label = np.array([[0, 1, 2, 3, 255, 0]] * 8, np.uint8)
    sample = SegTransform((8, 6), train=False, reduce_labels=True)({"image": image, "label": label})
    assert sample["labels"][0].tolist() == [255, 0, 1, 2, 255, 255]  # 0 -> ignored, the others - 1
    control = SegTransform((8, 6), train=False)({"image": image, "label": label})
    assert control["labels"][0].tolist() == label[0].tolist()
    assert derive_flip_pairs(["background", "Left_Arm", "Right_Arm", "torso"]) == ((1, 2),)


# -------------------------------------------------------------------------------------------------- warm start


def _source_and_new(task, new_labels, tmp_path):
    """A random source model of the official labels, saved, and a new model on the same backbone (the source's) with
    `new_labels`."""
    torch.manual_seed(0)
    model_class = sapiens2_hf.model_class_for_task(task)
    source = model_class(sapiens2_hf.tiny_config(task)).eval()
    source.save_pretrained(tmp_path / "source")
    torch.manual_seed(1)
    new = model_class.from_backbone(source.model, config=sapiens2_hf.tiny_config(task, **new_labels)).eval()
    return source, new


def test_warm_start_copies_the_keypoints_the_tables_map(tmp_path):
    """COCO-17 from the official 308 head: every point is a 308 keypoint, so at step 0 the new model's 17 heatmaps
    are the source's channels of those keypoints, exactly. Controls: a wrong map, and no warm start, differ."""
    from sapiens2_hf.modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES
    from sapiens2_hf.training.warm_start import warm_start_head

    coco17 = KEYPOINT_SET_PRESETS["coco17"]
    source, new = _source_and_new("pose", coco17.config_kwargs(), tmp_path)
    x = torch.randn(2, 3, 64, 48, generator=torch.Generator().manual_seed(2))
    channels = [POSE_KEYPOINT_NAMES.index(name) for name in coco17.names]
    with torch.no_grad():
        before = new(x).heatmaps
        report = warm_start_head(new, tmp_path / "source", "keypoints")
        expected, got = source(x).heatmaps[:, channels], new(x).heatmaps
    assert len(report.copied) == 17 and not report.fresh
    assert (got - expected).abs().max().item() == 0.0  # exact: same backbone, same head weights
    assert (before - expected).abs().max().item() > 1e-3  # control: the fresh head is another function
    shuffled = channels[1:] + channels[:1]  # control: a wrong correspondence gives other heatmaps
    assert (got - source(x).heatmaps[:, shuffled]).abs().max().item() > 1e-3


def test_warm_start_of_midpoints_and_class_unions(tmp_path):
    """MPII's pelvis is the midpoint of the hips (mean of their channels) and head_top has no 308 point (fresh); a
    6-class head copies the classes with an official name and makes unions (--label_map) the members' mean."""
    from sapiens2_hf.modeling.sapiens2_label_data import POSE_KEYPOINT_NAMES, SEGMENTATION_CLASS_NAMES
    from sapiens2_hf.training.warm_start import warm_start_head

    mpii = KEYPOINT_SET_PRESETS["mpii16"]
    source, new = _source_and_new("pose", mpii.config_kwargs(), tmp_path / "pose")
    report = warm_start_head(new, source, "keypoints")
    assert report.fresh == ["head_top"] and set(report.merged) == {"pelvis", "thorax"}
    weight = source.decode_head.predictor.weight
    hips = [POSE_KEYPOINT_NAMES.index("left_hip"), POSE_KEYPOINT_NAMES.index("right_hip")]
    assert torch.equal(new.decode_head.predictor.weight[6], weight[hips].mean(dim=0))

    classes = ["Background", "Hair", "skin", "Face_Neck"]
    label_map = {"skin": ["Left_Hand", "Right_Hand", "Torso"]}
    source, new = _source_and_new("seg", {"id2label": dict(enumerate(classes))}, tmp_path / "seg")
    report = warm_start_head(new, source, "classes", label_map)
    assert report.copied == ["Background", "Hair", "Face_Neck"] and report.merged == ["skin"]
    members = [SEGMENTATION_CLASS_NAMES.index(name) for name in label_map["skin"]]
    x = torch.randn(1, 3, 64, 48, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        source_logits, logits = source(x).logits, new(x).logits
    assert (logits[:, 1] - source_logits[:, SEGMENTATION_CLASS_NAMES.index("Hair")]).abs().max().item() == 0.0
    union = source_logits[:, members].mean(dim=1)
    assert (logits[:, 2] - union).abs().max().item() < 1e-5
    with pytest.raises(ValueError, match="which the source model does not have"):
        warm_start_head(new, source, "classes", {"skin": ["Tail"]})


def test_finetune_with_init_head_from(synthetic_coco, tmp_path, caplog):
    """The flag end to end: a COCO-17 run on the source's backbone warm-starts its head (the log says how), with LoRA
    too; --label_map without --init_head_from is refused."""
    torch.manual_seed(0)
    sapiens2_hf.Sapiens2ForPoseEstimation(sapiens2_hf.tiny_config("pose")).save_pretrained(tmp_path / "source")
    annotations = _relabelled(synthetic_coco, KEYPOINT_SET_PRESETS["coco17"], tmp_path / "coco17.json")
    common = [arg for arg in COMMON if arg not in ("--preset", "tiny")]
    for extra in ([], ["--use_lora"]):
        with caplog.at_level(logging.WARNING):
            _finetune_main()(["--task", "pose", "--backbone_name_or_path", str(tmp_path / "source"),
                              "--head_preset", "tiny", "--init_head_from", str(tmp_path / "source"), "--dataset",
                              "coco", "--train_targets", str(annotations), "--train_images",
                              str(synthetic_coco / "images"), "--do_train", "--max_steps", "1", "--output_dir",
                              str(tmp_path / f"run{len(extra)}"), *extra, *common])
        assert "17 channel(s) copied" in caplog.text
        caplog.clear()
    with pytest.raises(ValueError, match="pass --init_head_from too"):
        _finetune_main()(["--task", "pose", "--preset", "tiny", "--label_map", "{}", "--dataset", "coco",
                          "--train_targets", str(annotations), "--train_images", str(synthetic_coco / "images"),
                          "--do_train", "--max_steps", "1", "--output_dir", str(tmp_path / "bad"), *common])


def test_synthetic_humans_written_in_your_labels(tmp_path):
    """`write_dataset(keypoint_set=, class_map=)` (the README's data): COCO-17 keypoints with their skeleton, seg ids
    of your classes (255 where a pixel is in none) and labels.json; a control: the same seed without them gives the
    official layouts, and maps that are not official classes or overlap are refused."""
    from sapiens2_hf.data.synthetic import read_written_sample, write_dataset

    classes = {"background": ["Background"], "hair": ["Hair"], "clothes": ["Upper_Clothing", "Lower_Clothing"]}
    mine = write_dataset(tmp_path / "mine", 2, height=96, width=72, seed=5, tasks=("pose", "seg"),
                         keypoint_set="coco17", class_map=classes)
    official = write_dataset(tmp_path / "official", 2, height=96, width=72, seed=5, tasks=("pose", "seg"))
    category = json.loads((mine / "person_keypoints.json").read_text())["categories"][0]
    assert category["keypoints"] == list(KEYPOINT_SET_PRESETS["coco17"].names)
    skeleton = [list(link) for link in KEYPOINT_SET_PRESETS["coco17"].skeleton]
    assert [[a - 1, b - 1] for a, b in category["skeleton"]] == skeleton
    assert json.loads((mine / "labels.json").read_text()) == {"0": "background", "1": "hair", "2": "clothes"}
    a, b = read_written_sample(mine, 0), read_written_sample(official, 0)
    assert a["keypoints"].shape[1] == 17 and b["keypoints"].shape[1] == 308
    points = np.concatenate([b["keypoints"], b["keypoint_visibility"][..., None]], axis=-1)
    coco17 = KEYPOINT_SET_PRESETS["coco17"].from_308(points)
    assert np.abs(a["keypoints"] - coco17[..., :2]).max() < 1e-2
    names = sapiens2_hf.modeling.sapiens2_label_data.SEGMENTATION_CLASS_NAMES
    assert (a["segmentation"][b["segmentation"] == names.index("Hair")] == 1).all()
    assert (a["segmentation"][b["segmentation"] == names.index("Lower_Clothing")] == 2).all()
    assert (a["segmentation"][b["segmentation"] == names.index("Face_Neck")] == 255).all()
    with pytest.raises(ValueError, match="not official classes"):
        write_dataset(tmp_path / "bad", 1, class_map={"a": ["Hat"], "b": ["Hair"]})
    with pytest.raises(ValueError, match="in both"):
        write_dataset(tmp_path / "bad", 1, class_map={"a": ["Hair"], "b": ["Hair"]})
