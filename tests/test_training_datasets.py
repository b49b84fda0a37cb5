"""Fine-tuning from `datasets` (`finetune.py --dataset_name`), the transformers-examples way: the per-task fixtures in
tests/fixtures/datasets (written by tests/fixtures/make_datasets_fixtures.py), rows and on-disk files giving identical
tensors, the row schemas, the sources (save_to_disk, imagefolder, synthetic), `--do_train` / `--do_eval` /
`--do_predict`, and `--push_to_hub` to a fake Hub whose repository the pipelines load."""

import concurrent.futures
import importlib.util
import json
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from huggingface_hub import HfApi, RepoUrl
from huggingface_hub.utils import filter_repo_objects
from PIL import Image
from safetensors.torch import load_file
from transformers import HfArgumentParser, TrainingArguments

import sapiens2_hf
from sapiens2_hf.data.datasets import Sapiens2TaskDataset
from sapiens2_hf.data.hf_datasets import (
    DenseRecords,
    PoseRecords,
    load_dataset_dict,
    pose_people,
    record_transform,
    resolve_columns,
    task_records,
)
from sapiens2_hf.modeling.sapiens2_tasks import TASK_SPECS
from sapiens2_hf.training.arguments import DataArguments, ModelArguments
from sapiens2_hf.training.finetune import Stages, build_records, build_task_datasets, run_finetune
from sapiens2_hf.training.tasks import TRAINING_TASKS, training_task


ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "datasets"
SCRIPT = ROOT / "training_scripts" / "finetune.py"
TASKS = ("pose", "seg", "normal", "pointmap", "albedo")
COMMON = ["--preset", "tiny", "--max_steps", "2", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size",
          "2", "--report_to", "none", "--use_cpu", "true", "--save_strategy", "no", "--disable_tqdm", "true",
          "--warmup_steps", "1", "--optim", "adamw_torch", "--dataloader_num_workers", "0"]
METRIC = {"pose": "oks_ap", "seg": "miou", "normal": "mean_angular_error_deg", "pointmap": "mean_l2_error",
          "albedo": "psnr"}
INPUT_SIZE = (64, 48)


pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("one_thread")]


def _script_main():
    spec = importlib.util.spec_from_file_location("finetune_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _parse(argv):
    return HfArgumentParser((ModelArguments, DataArguments, TrainingArguments)).parse_args_into_dataclasses(args=argv)


def _fixture(task):
    return datasets.load_from_disk(str(FIXTURES / task))


# ------------------------------------------------------------------------------------------------------ fixtures
def test_fixtures_are_small_saved_datasets_with_three_splits():
    total = sum(path.stat().st_size for path in FIXTURES.rglob("*") if path.is_file())
    assert total < 2_000_000
    for task in TASKS:
        loaded = load_dataset_dict(str(FIXTURES / task))  # detected as a save_to_disk folder
        assert sorted(loaded) == ["test", "train", "validation"]
        assert [len(loaded[split]) for split in ("train", "validation", "test")] == [4, 2, 2]
    pose = _fixture("pose")["train"]
    assert max(len(boxes) for boxes in pose["bboxes"]) == 2  # multi-person rows
    assert {len(points) for row in pose["keypoints"] for points in row} == {308 * 3}  # COCO flat lists


# ------------------------------------------------------------------ the same sample through both sources
def _write_bytes(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(value["bytes"])


def _on_disk(task, split, root):
    """The rows of a fixture split as the documented on-disk files (PNGs copied byte for byte from the rows), and the
    DataArguments that read them with the on-disk readers."""
    rows = _fixture(task)[split]
    raw = rows.cast_column("image", datasets.Image(decode=False))
    for column, feature in rows.features.items():
        if isinstance(feature, datasets.Image):
            raw = raw.cast_column(column, datasets.Image(decode=False))
    images, targets, masks = root / "images", root / "targets", root / "masks"
    for folder in (images, targets, masks):
        folder.mkdir(parents=True)
    if task == "pose":
        annotations, image_list = [], []
        for index, row in enumerate(raw):
            _write_bytes(images / f"{index}.png", row["image"])
            image_list.append({"id": index, "file_name": f"{index}.png"})
            for box, points, area in zip(row["bboxes"], row["keypoints"], row["area"]):
                annotations.append({"id": len(annotations), "image_id": index, "bbox": box, "keypoints": points,
                                    "area": area})
        (targets / "ann.json").write_text(json.dumps({"images": image_list, "annotations": annotations}))
        return DataArguments(dataset="coco", train_targets=str(targets / "ann.json"), train_images=str(images))
    arrays = rows.with_format("numpy")
    for index, row in enumerate(raw):
        _write_bytes(images / f"{index}.png", row["image"])
        if task == "seg":
            _write_bytes(targets / f"{index}.png", row["label"])
            continue
        _write_bytes(masks / f"{index}.png", row["mask"])
        if task == "normal":
            np.save(targets / f"{index}.npy", arrays[index]["normal"])
        elif task == "albedo":
            _write_bytes(targets / f"{index}.png", row["albedo"])
        else:
            np.savez(targets / f"{index}.npz", depth=arrays[index]["depth"], K=arrays[index]["intrinsics"])
    return DataArguments(dataset="folder", train_images=str(images), train_targets=str(targets),
                         train_masks=None if task == "seg" else str(masks))


def _samples(records, task, train, seed, count):
    dataset = Sapiens2TaskDataset(records, training_task(task).transform(INPUT_SIZE, train=train), seed=seed)
    return [dataset[index] for index in range(count)]


def _assert_same(first, second):
    for a, b in zip(first, second):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key


@pytest.mark.parametrize("task", TASKS)
def test_a_row_and_its_files_on_disk_give_identical_tensors(task, tmp_path):
    """Augmented training samples and evaluation samples, bit for bit (same process); the deliberately broken control
    (every file paired with the next row) must differ."""
    data_args = _on_disk(task, "train", tmp_path)
    disk = build_records(data_args, task, "train", seed=0)
    source = _fixture(task)["train"]
    rows, skipped = task_records(source, task, resolve_columns(task, source.column_names))
    assert not skipped and len(rows) == len(disk) >= 4
    count = len(rows)
    for train in (True, False):
        _assert_same(_samples(disk, task, train, 5, count), _samples(rows, task, train, 5, count))
    shifted = [rows[(index + 1) % count] for index in range(count)]  # each file paired with its neighbour's row
    with pytest.raises(AssertionError):
        _assert_same(_samples(disk, task, False, 5, count), _samples(shifted, task, False, 5, count))


@pytest.mark.parametrize("task", ["seg", "normal", "pointmap", "albedo"])
def test_with_transform_gives_the_records_training_reads(task):
    """`record_transform` under `Dataset.with_transform` (Python rows) and the numpy-format records of training
    feed the transform the same data."""
    source = _fixture(task)["validation"]
    columns = resolve_columns(task, source.column_names)
    lazy = source.with_transform(record_transform(task, columns))
    numpy_records = DenseRecords(source, task, columns)
    via_transform = [lazy[index] for index in range(len(source))]
    _assert_same(_samples(via_transform, task, True, 2, len(source)), _samples(numpy_records, task, True, 2,
                                                                                len(source)))


# --------------------------------------------------------------------------------------------------- row schemas
def _columns(**kwargs):
    return resolve_columns("pose", ["image", "bboxes", "keypoints", *kwargs.pop("extra", [])], **kwargs)


def test_pose_rows_accept_coco_lists_nested_arrays_and_corner_boxes():
    rng = np.random.default_rng(0)
    keypoints = np.concatenate([rng.uniform(0, 40, (2, 308, 2)), np.full((2, 308, 1), 2.0)], axis=2).astype(np.float32)
    boxes = np.array([[1, 2, 30, 40], [5, 6, 20, 10]], np.float32)
    flat = pose_people({"bboxes": boxes.tolist(), "keypoints": keypoints.reshape(2, -1).tolist()}, _columns())
    nested = pose_people({"bboxes": boxes, "keypoints": keypoints}, _columns())
    corners = np.concatenate([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], axis=1)
    xyxy = pose_people({"bboxes": corners, "keypoints": keypoints}, _columns(bbox_format="xyxy"))
    two = pose_people({"bboxes": boxes, "keypoints": keypoints[..., :2], "keypoint_visibility": np.full((2, 308), 2)},
                      _columns(extra=["keypoint_visibility"]))
    for people in (nested, xyxy, two):
        for a, b in zip(flat, people):
            np.testing.assert_allclose(a["bbox"], b["bbox"], atol=1e-5)
            np.testing.assert_array_equal(a["keypoints"], b["keypoints"])
    assert [p["area"] for p in flat] == [1200.0, 200.0] and len(flat) == 2
    single = pose_people({"bboxes": boxes[0], "keypoints": keypoints[0]}, _columns())
    assert len(single) == 1 and single[0]["keypoints"].shape == (308, 3)
    wholebody = pose_people({"bboxes": boxes[:1], "keypoints": np.ones((1, 133, 3), np.float32)}, _columns())
    assert wholebody[0]["keypoints"].shape == (308, 3) and 0 < (wholebody[0]["keypoints"][:, 2] > 0).sum() < 133
    with pytest.raises(ValueError, match="expected K x 3"):
        pose_people({"bboxes": boxes[:1], "keypoints": np.ones((1, 17, 3))}, _columns())


def test_missing_or_wrong_columns_name_the_flag():
    with pytest.raises(ValueError, match="--label_column_name"):
        resolve_columns("normal", ["image", "depth"])
    with pytest.raises(ValueError, match="--intrinsics_column_name"):
        resolve_columns("pointmap", ["image", "depth"])
    with pytest.raises(ValueError, match="--image_column_name 'photo' is not a column"):
        resolve_columns("seg", ["image", "label"], image="photo")
    assert resolve_columns("seg", ["pixel_values", "annotation"]).label == "annotation"  # transformers' names
    synthetic = ["sample_index", "image", "boxes", "keypoints", "keypoint_visibility", "num_people"]
    assert resolve_columns("pose", synthetic).bbox_format == "xyxy"


# -------------------------------------------------------------------------------------------------------- sources
def test_train_val_split_and_max_samples(tmp_path):
    only_train = datasets.DatasetDict({"train": _fixture("seg")["train"]})
    only_train.save_to_disk(str(tmp_path / "seg"))
    both = Stages(train=True, eval=True, predict=False)
    base = ["--task", "seg", "--dataset_name", str(tmp_path / "seg"), "--output_dir", str(tmp_path / "out")]
    _, data_args, _ = _parse([*base, "--train_val_split", "0.5"])
    split, _ = build_task_datasets(data_args, "seg", INPUT_SIZE, 0, both)
    assert len(split["train"]) == 2 and len(split["eval"]) == 2
    _, data_args, _ = _parse([*base, "--train_val_split", "0.5", "--max_train_samples", "1", "--max_eval_samples", "1"])
    limited, _ = build_task_datasets(data_args, "seg", INPUT_SIZE, 0, both)
    assert len(limited["train"]) == 1 and len(limited["eval"]) == 1
    _, data_args, _ = _parse([*base, "--train_val_split", "0"])
    with pytest.raises(ValueError, match="--do_eval needs an evaluation split.*--train_val_split"):
        build_task_datasets(data_args, "seg", INPUT_SIZE, 0, both)


def _write_imagefolder(root):
    """The seg fixture as an imagefolder: `<split>/<i>.png` with `metadata.jsonl` naming `labels/<i>.png`."""
    fixture = _fixture("seg")
    for split in ("train", "validation"):
        folder = root / split
        (folder / "labels").mkdir(parents=True)
        lines = []
        for index, row in enumerate(fixture[split]):
            row["image"].save(folder / f"{index}.png")
            row["label"].save(folder / "labels" / f"{index}.png")
            lines.append(json.dumps({"file_name": f"{index}.png", "label_file_name": f"labels/{index}.png"}))
        (folder / "metadata.jsonl").write_text("\n".join(lines))


@pytest.mark.parametrize("how", ["imagefolder", "dirs", "folder"])
def test_imagefolder_sources_read_the_same_rows(how, tmp_path):
    _write_imagefolder(tmp_path / "data")
    dirs = ["--train_dir", str(tmp_path / "data" / "train"), "--validation_dir", str(tmp_path / "data" / "validation")]
    source = {"imagefolder": ["--dataset_name", "imagefolder", *dirs], "dirs": dirs,  # no name: imagefolder
              "folder": ["--dataset_name", str(tmp_path / "data")]}[how]
    _, data_args, _ = _parse(["--task", "seg", "--output_dir", str(tmp_path / "out"), "--cache_dir",
                              str(tmp_path / "cache"), *source])
    built, _ = build_task_datasets(data_args, "seg", INPUT_SIZE, 0, Stages(train=True, eval=True, predict=False))
    fixture = _fixture("seg")
    expected = task_records(fixture["validation"], "seg", resolve_columns("seg", fixture["validation"].column_names))[0]
    got = built["eval"].source
    assert len(got) == len(expected) == 2
    for index in range(2):
        np.testing.assert_array_equal(np.asarray(got[index]["image"]), np.asarray(expected[index]["image"]))
        np.testing.assert_array_equal(got[index]["label"], expected[index]["label"])


_SYNTHETIC_KEYS = {"pose": ("bbox", "keypoints"), "normal": ("normal", "mask"), "matting": ("alpha", "foreground")}


@pytest.mark.parametrize("task", [task for task in _SYNTHETIC_KEYS if task in TRAINING_TASKS])
def test_synthetic_humans_go_through_the_datasets_path(task, tmp_path):
    """`--dataset synthetic` renders with `make_dataset` (its typed schema and seed rule) and reads the rows with the
    same adapters; the records hold the renders `SyntheticRecords` (the earlier path) gives."""
    from sapiens2_hf.data.synthetic_source import SyntheticRecords

    _, data_args, _ = _parse(["--task", task, "--output_dir", str(tmp_path / "out"), "--cache_dir",
                              str(tmp_path / "cache"), "--synthetic_train_samples", "3",
                              "--synthetic_image_size", "64"])
    built, skipped = build_task_datasets(data_args, task, INPUT_SIZE, 7, Stages(train=True, eval=False, predict=False))
    records = built["train"].source
    assert skipped is None and isinstance(records, PoseRecords if task == "pose" else DenseRecords)
    reference = SyntheticRecords(task, 3, seed=7, height=64, width=48)
    for index in range(len(records)):
        ours, theirs = records[index], reference[index]
        np.testing.assert_array_equal(np.asarray(ours["image"]), theirs["image"])
        for key in _SYNTHETIC_KEYS[task]:
            np.testing.assert_allclose(np.asarray(ours[key], np.float64), np.asarray(theirs[key], np.float64),
                                       atol=1e-4 if key == "bbox" else 0)


# ------------------------------------------------------------------------------------------------- the script
@pytest.mark.parametrize("task", TASKS)
def test_finetune_trains_evaluates_and_predicts_from_the_fixture(task, tmp_path):
    out = tmp_path / "out"
    _script_main()(["--task", task, "--dataset_name", str(FIXTURES / task), "--do_train", "--do_eval", "--do_predict",
                    "--output_dir", str(out), *COMMON])
    assert np.isfinite(json.loads((out / "eval_results.json").read_text())[f"eval_{METRIC[task]}"])
    assert np.isfinite(json.loads((out / "predict_results.json").read_text())[f"predict_{METRIC[task]}"])
    for name in ("model.safetensors", "config.json", "preprocessor_config.json", "README.md"):
        assert (out / name).is_file()
    assert not (out / "model").exists()  # the repository is output_dir itself, with no copy beside it
    test_split = _fixture(task)["test"]
    if task == "pose":
        predictions = json.loads((out / "predictions" / "keypoints.json").read_text())
        assert len(predictions) == sum(len(boxes) for boxes in test_split["bboxes"])
        assert len(predictions[0]["keypoints"]) == 308 * 3
    else:
        suffix = ".png" if task == "seg" else ".npz"
        assert sorted(p.name for p in (out / "predictions").iterdir()) == [f"{i:06d}{suffix}" for i in range(2)]
        if task == "seg":
            assert np.asarray(Image.open(out / "predictions" / "000000.png")).shape == (64, 48)
        else:
            field = TASK_SPECS[task].output_field
            assert np.load(out / "predictions" / "000000.npz")[field].shape == (64, 48, 3)


def _tiny_seg_model(folder):
    torch.manual_seed(0)
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg"))
    model.save_pretrained(folder)
    return load_file(str(folder / "model.safetensors"))


def test_do_train_false_evaluates_without_training(tmp_path):
    initial = _tiny_seg_model(tmp_path / "start")
    common = [arg for arg in COMMON if arg not in ("--preset", "tiny")]
    model_args, data_args, training_args = _parse([
        "--task", "seg", "--model_name_or_path", str(tmp_path / "start"), "--dataset_name", str(FIXTURES / "seg"),
        "--do_train", "False", "--do_eval", "--output_dir", str(tmp_path / "eval"), *common])
    trainer, metrics = run_finetune(model_args, data_args, training_args)
    assert trainer.state.global_step == 0 and "eval_miou" in metrics
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(value, initial[name]), name
    assert (tmp_path / "eval" / "eval_results.json").is_file()
    assert not (tmp_path / "eval" / "train_results.json").exists()
    assert not (tmp_path / "eval" / "model.safetensors").exists()  # nothing trained, nothing pushed: nothing saved
    # Control: the same run with --do_train moves the weights.
    model_args, data_args, training_args = _parse([
        "--task", "seg", "--model_name_or_path", str(tmp_path / "start"), "--dataset_name", str(FIXTURES / "seg"),
        "--do_train", "--output_dir", str(tmp_path / "train"), *common])
    trainer, _ = run_finetune(model_args, data_args, training_args)
    assert trainer.state.global_step == 2
    assert any(not torch.equal(value, initial[name]) for name, value in trainer.model.state_dict().items())


def test_the_script_honours_explicit_stage_flags(tmp_path):
    main = _script_main()
    base = ["--task", "seg", "--dataset_name", str(FIXTURES / "seg"), "--output_dir", str(tmp_path), *COMMON]
    with pytest.raises(ValueError, match="Nothing to do"):
        main([*base, "--do_train", "False"])
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"task": "seg", "dataset_name": str(FIXTURES / "seg"), "output_dir": str(tmp_path),
                                "do_train": False}))
    with pytest.raises(ValueError, match="Nothing to do"):
        main([str(args)])
    with pytest.raises(ValueError, match="--do_predict needs a test split.*--test_split_name"):
        main([*base, "--do_predict", "--test_split_name", "holdout"])


# ---------------------------------------------------------------------------------------------- push_to_hub
class FakeHub:
    """`HfApi.create_repo` / `upload_folder` writing into a local folder (`root/<repo_id>`), with the upload's
    ignore patterns applied as the Hub client does."""

    def __init__(self, root):
        self.root, self.commits = Path(root), []

    def create_repo(self, api, repo_id, **kwargs):
        repo_id = repo_id if "/" in repo_id else f"fake-user/{repo_id}"
        (self.root / repo_id).mkdir(parents=True, exist_ok=True)
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, api, *, repo_id, folder_path, path_in_repo=None, commit_message=None,
                      ignore_patterns=None, run_as_future=False, **kwargs):
        folder = Path(folder_path)
        files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
        kept = list(filter_repo_objects(files, ignore_patterns=ignore_patterns))
        target = self.root / repo_id / (path_in_repo or "")
        for name in kept:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(folder / name, target / name)
        self.commits.append((commit_message, sorted(kept)))
        if run_as_future:
            future = concurrent.futures.Future()
            future.set_result(None)
            return future
        return None


def test_push_to_hub_gives_a_repo_the_pipelines_load(tmp_path, monkeypatch):
    hub = FakeHub(tmp_path / "hub")
    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kw: hub.create_repo(self, repo_id, **kw))
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, **kw: hub.upload_folder(self, **kw))
    out = tmp_path / "out"
    argv = ["--task", "seg", "--dataset_name", str(FIXTURES / "seg"), "--do_train", "--do_eval", "--output_dir",
            str(out), "--push_to_hub", "--hub_model_id", "me/sapiens2-seg-tiny", *COMMON]
    argv[argv.index("--save_strategy") + 1] = "steps"
    _script_main()([*argv, "--save_steps", "1"])
    repo = tmp_path / "hub" / "me" / "sapiens2-seg-tiny"
    *during, final = hub.commits
    assert [message for message, _ in during] == ["Training in progress, step 1", "Training in progress, step 2"]
    assert final[0] == "End of training"
    assert {"model.safetensors", "config.json", "preprocessor_config.json", "README.md"} <= set(final[1])
    assert not any(name.startswith(("checkpoint-", "model/")) for name in final[1])  # run files only, no copies
    assert "me/sapiens2-seg-tiny" in (repo / "README.md").read_text()
    image = Image.fromarray(np.asarray(_fixture("seg")["test"][0]["image"]))
    ours = sapiens2_hf.pipeline("sapiens2-segmentation", model=str(repo))(image)["segmentation"]
    from transformers import pipeline

    theirs = pipeline("sapiens2-segmentation", model=str(repo))(image)["segmentation"]
    local = sapiens2_hf.pipeline("sapiens2-segmentation", model=str(out))(image)["segmentation"]
    assert np.asarray(ours).shape == (64, 48)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(local))
