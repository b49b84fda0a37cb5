"""Field bugs of the training entry points, adapters and Hub folders, each pinned by a test that failed before the fix:
seeding before any model is built, bad samples found up front, `save_for_hub` never deleting what it did not write,
self-describing LoRA adapters (load, pipeline, merge), the fine-tuning input size and head defaults for non-official
backbones, and `--resume_from_checkpoint True`."""

import json
import logging
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import HfArgumentParser, TrainingArguments

import sapiens2_hf
from sapiens2_hf.data.datasets import Sapiens2TaskDataset
from sapiens2_hf.data.dense import NormalTransform
from sapiens2_hf.data.validation import BadSampleError, NoUsableSamplesError, SampleLoadError, validate_records
from sapiens2_hf.hub import save_for_hub
from sapiens2_hf.pretraining import PretrainingImageDataset
from sapiens2_hf.pretraining.toy_data import make_toy_images
from sapiens2_hf.training.arguments import DataArguments, ModelArguments
from sapiens2_hf.training.finetune import build_model, run_finetune
from sapiens2_hf.pretraining.run import main as pretrain_main
from sapiens2_hf.training.run_setup import resolve_resume_checkpoint
from toy_records import toy_normal_records, toy_pose_records


ROOT = Path(__file__).resolve().parents[1]
OFFICIAL_TINY_PRETRAIN = ROOT / "tests" / "fixtures" / "official" / "pretrain" / "sapiens2_tinya_pretrain.safetensors"
COMMON = ["--max_steps", "2", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
          "--report_to", "none", "--use_cpu", "true", "--save_strategy", "no", "--disable_tqdm", "true",
          "--warmup_steps", "1", "--optim", "adamw_torch", "--dataloader_num_workers", "0", "--logging_steps", "1"]
PRETRAIN_COMMON = ["--max_steps", "2", "--per_device_train_batch_size", "2", "--report_to", "none", "--disable_tqdm",
                   "true", "--use_cpu", "true", "--dataloader_pin_memory", "false", "--save_strategy", "no",
                   "--logging_steps", "1"]


pytestmark = pytest.mark.usefixtures("one_thread")


def finetune(argv):
    model_args, data_args, training_args = HfArgumentParser(
        (ModelArguments, DataArguments, TrainingArguments)).parse_args_into_dataclasses(args=argv)
    trainer, _ = run_finetune(model_args, data_args, training_args)
    return trainer


def losses(trainer):
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def write_images(folder, count, height=70, width=52, seed=3):
    folder.mkdir(parents=True, exist_ok=True)
    images, _ = make_toy_images(count, height, width, seed=seed)
    for index, image in enumerate(images):
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(folder / f"{index}.png")
    return sorted(folder.iterdir())


def truncate(path, keep=0.5):
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: int(len(data) * keep)])


# ------------------------------------------------------------------------------------------------ 1. --seed
def test_same_seed_gives_identical_finetune_losses(tmp_path):
    argv = ["--task", "pose", "--preset", "tiny", "--dataset", "synthetic", "--synthetic_train_samples", "4",
            "--synthetic_eval_samples", "0", "--synthetic_image_size", "64", "--max_steps", "3", *COMMON[2:]]
    runs = {}
    for name, seed, global_state in (("a", 7, 100), ("b", 7, 200), ("c", 8, 100)):
        torch.manual_seed(global_state)  # whatever the process did before must not matter
        runs[name] = losses(finetune([*argv, "--output_dir", str(tmp_path / name), "--seed", str(seed)]))
    assert len(runs["a"]) == 3 and all(math.isfinite(v) for v in runs["a"])
    assert runs["a"] == runs["b"]
    assert runs["a"][0] != runs["c"][0]  # control: another seed is another run from the first step


def test_same_seed_gives_identical_pretraining_losses(tmp_path):
    write_images(tmp_path / "images", 4)
    runs = {}
    for name, seed, global_state in (("a", 5, 100), ("b", 5, 200), ("c", 6, 100)):
        torch.manual_seed(global_state)
        trainer = pretrain_main(["--image_folder", str(tmp_path / "images"), "--output_dir", str(tmp_path / name),
                                 "--seed", str(seed), *PRETRAIN_COMMON])
        runs[name] = losses(trainer)
    assert len(runs["a"]) == 2 and runs["a"] == runs["b"]
    assert runs["a"][0] != runs["c"][0]


# ------------------------------------------------------------------------------------------- 2. bad samples
def _coco_with_bad_records(root):
    """Five persons on five images: good, zero-size box, NaN keypoints, missing image, truncated image."""
    images = root / "images"
    images.mkdir(parents=True)
    records = toy_pose_records(5, seed=4)
    annotations, image_list = [], []
    for index, record in enumerate(records):
        Image.fromarray(record["image"]).save(images / f"{index}.png")
        image_list.append({"id": index, "file_name": f"{index}.png"})
        keypoints = record["keypoints"].copy()
        bbox = record["bbox"].tolist()
        if index == 1:
            bbox[2] = bbox[3] = 0.0
        if index == 2:
            keypoints[:5, :2] = np.nan
        annotations.append({"id": index + 1, "image_id": index, "bbox": bbox, "area": 100.0,
                            "keypoints": keypoints.reshape(-1).tolist()})
    (images / "3.png").unlink()
    truncate(images / "4.png")
    (root / "train.json").write_text(json.dumps({"images": image_list, "annotations": annotations}))
    return ["--dataset", "coco", "--train_targets", str(root / "train.json"), "--train_images", str(images)]


def test_bad_pose_records_are_skipped_and_listed(tmp_path):
    data = _coco_with_bad_records(tmp_path / "data")
    trainer = finetune(["--task", "pose", "--preset", "tiny", "--output_dir", str(tmp_path / "out"), *data, *COMMON])
    assert trainer.state.global_step == 2 and len(trainer.train_dataset) == 1
    report = json.loads((tmp_path / "out" / "skipped_samples.json").read_text())
    assert report["num_skipped"] == 4
    reasons = {entry["index"]: entry["reason"] for entry in report["skipped"]}
    assert "zero-size bbox" in reasons[1]
    assert "non-finite keypoints" in reasons[2]
    assert reasons[3] == "missing file"
    assert "truncated" in reasons[4]
    assert {Path(e["file"]).name for e in report["skipped"]} == {"1.png", "2.png", "3.png", "4.png"}


def test_strict_stops_at_start_naming_the_first_bad_record(tmp_path):
    data = _coco_with_bad_records(tmp_path / "data")
    with pytest.raises(BadSampleError, match=r"record 1 \(.*1\.png\): zero-size bbox"):
        finetune(["--task", "pose", "--preset", "tiny", "--output_dir", str(tmp_path / "out"), "--strict", "true",
                  *data, *COMMON])


def test_bad_pretraining_images_are_skipped_and_listed(tmp_path):
    paths = write_images(tmp_path / "images", 5)
    truncate(paths[1])
    paths[2].write_bytes(b"")
    (tmp_path / "images" / "notes.png").write_text("not an image")
    trainer = pretrain_main(["--image_folder", str(tmp_path / "images"), "--output_dir", str(tmp_path / "out"),
                             *PRETRAIN_COMMON])
    assert trainer.state.global_step == 2 and len(trainer.train_dataset) == 3
    report = json.loads((tmp_path / "out" / "skipped_samples.json").read_text())
    reasons = {Path(entry["file"]).name: entry["reason"] for entry in report["skipped"]}
    assert set(reasons) == {"1.png", "2.png", "notes.png"}
    assert "truncated" in reasons["1.png"] and reasons["2.png"] == "empty file"
    assert "not a readable image" in reasons["notes.png"]
    with pytest.raises(BadSampleError, match=r"1\.png\): truncated"):
        pretrain_main(["--image_folder", str(tmp_path / "images"), "--output_dir", str(tmp_path / "strict"),
                       "--strict", "true", *PRETRAIN_COMMON])


def _all_bad_coco(root: Path) -> list[str]:
    images = root / "images"
    images.mkdir(parents=True)
    records = toy_pose_records(3, seed=5)
    image_list, annotations = [], []
    for index, record in enumerate(records):
        (images / f"{index}.png").write_bytes(b"")  # every image empty: nothing is left to train on
        image_list.append({"id": index, "file_name": f"{index}.png"})
        annotations.append({"id": index + 1, "image_id": index, "bbox": record["bbox"].tolist(), "area": 100.0,
                            "keypoints": record["keypoints"].reshape(-1).tolist()})
    (root / "train.json").write_text(json.dumps({"images": image_list, "annotations": annotations}))
    return ["--dataset", "coco", "--train_targets", str(root / "train.json"), "--train_images", str(images)]


def test_an_all_bad_dataset_stops_in_one_line_and_still_lists_what_to_fix(tmp_path):
    data = _all_bad_coco(tmp_path / "data")
    with pytest.raises(NoUsableSamplesError) as error:
        finetune(["--task", "pose", "--preset", "tiny", "--output_dir", str(tmp_path / "out"), *data, *COMMON])
    message = str(error.value)
    assert "\n" not in message and "3 bad sample(s)" in message and "skipped_samples.json" in message
    report = json.loads((tmp_path / "out" / "skipped_samples.json").read_text())
    assert report["num_skipped"] == 3 and {entry["reason"] for entry in report["skipped"]} == {"empty file"}


def test_an_all_bad_pretraining_folder_still_lists_what_to_fix(tmp_path):
    paths = write_images(tmp_path / "images", 2)
    for path in paths:
        path.write_bytes(b"")
    with pytest.raises(NoUsableSamplesError, match="2 bad sample.*skipped_samples.json"):
        pretrain_main(["--image_folder", str(tmp_path / "images"), "--output_dir", str(tmp_path / "out"),
                       *PRETRAIN_COMMON])
    assert json.loads((tmp_path / "out" / "skipped_samples.json").read_text())["num_skipped"] == 2


def test_images_corrupt_only_at_read_time_name_their_file(tmp_path):
    # A PNG with intact header and end marker but a damaged pixel stream passes the cheap up-front check.
    path = write_images(tmp_path / "images", 1)[0]
    data = bytearray(path.read_bytes())
    start = data.index(b"IDAT") + 8
    data[start : start + 40] = bytes(40)
    path.write_bytes(bytes(data))
    dataset = PretrainingImageDataset([str(path)])
    assert len(dataset) == 1
    with pytest.raises(SampleLoadError, match=re.escape(str(path))):
        dataset[0]
    # Task datasets: a failure inside a transform names the record's image.
    record = dict(toy_normal_records(1, seed=0)[0])
    image_file = tmp_path / "person.png"
    Image.fromarray(record["image"]).save(image_file)
    record.update(image=str(image_file), normal=record["normal"][..., 0])  # a target without channels
    with pytest.raises(SampleLoadError, match="person.png"):
        Sapiens2TaskDataset([record], NormalTransform((32, 32), train=False))[0]


def test_validate_records_keeps_good_records_in_order(tmp_path):
    records = [dict(r) for r in toy_pose_records(3, seed=1)]
    records[1]["bbox"] = np.array([1.0, 1.0, 0.0, 5.0], np.float32)
    kept, skipped = validate_records(records, "pose")
    assert [r["instance_id"] for r in kept] == [records[0]["instance_id"], records[2]["instance_id"]]
    assert [(s.index, s.file) for s in skipped] == [(1, None)]


# ------------------------------------------------------------------------------------------- 3. save_for_hub
def _tiny_seg(seed=0):
    torch.manual_seed(seed)
    return sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg")).eval()


def test_save_for_hub_never_deletes_what_it_did_not_write(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (repo / "notes.txt").write_text("mine")
    (repo / "model-00001-of-00002.safetensors").write_bytes(b"a shard save_for_hub did not write")
    model = _tiny_seg()
    with pytest.raises(FileExistsError, match="not empty.*overwrite=True"):
        save_for_hub(model, repo)
    assert sorted(p.name for p in repo.iterdir()) == [".git", ".gitattributes", "model-00001-of-00002.safetensors",
                                                     "notes.txt"]
    # A weight file this save would not replace is never deleted: the save is refused, naming it (issue 20, item 5).
    with pytest.raises(FileExistsError, match=r"model-00001-of-00002\.safetensors"):
        save_for_hub(model, repo, overwrite=True)
    assert (repo / "model-00001-of-00002.safetensors").read_bytes() == b"a shard save_for_hub did not write"
    (repo / "model-00001-of-00002.safetensors").unlink()  # the user moves it away
    save_for_hub(model, repo, overwrite=True)
    assert (repo / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (repo / "notes.txt").read_text() == "mine" and (repo / ".gitattributes").is_file()
    assert (repo / "model.safetensors").is_file() and (repo / "modeling_sapiens2_hf.py").is_file()
    pixel_values = torch.randn(1, 3, 64, 48, generator=torch.Generator().manual_seed(0))
    reloaded = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(repo).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(pixel_values).logits, model(pixel_values).logits, atol=0, rtol=0)
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]  # no staging folder left behind


def test_leftover_backup_and_staging_folders_do_not_block_saves(tmp_path):
    for leftover in (".repo.old", ".repo.staging-interrupted"):
        (tmp_path / leftover).mkdir()
        (tmp_path / leftover / "model.safetensors").write_bytes(b"left by an interrupted save")
    first, second = _tiny_seg(0), _tiny_seg(1)
    save_for_hub(first, tmp_path / "repo")
    save_for_hub(second, tmp_path / "repo", overwrite=True)
    reloaded = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path / "repo").state_dict()
    for name, value in second.state_dict().items():
        assert torch.equal(reloaded[name], value), name
    assert sorted(p.name for p in tmp_path.iterdir()) == [".repo.old", ".repo.staging-interrupted", "repo"]


# ---------------------------------------------------------------------------------------------- 4. LoRA
@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A LoRA pose run from a saved tiny backbone (fresh head trained in full through modules_to_save)."""
    root = tmp_path_factory.mktemp("lora")
    torch.manual_seed(0)
    backbone = sapiens2_hf.Sapiens2Model(sapiens2_hf.tiny_config(layerscale_value=1.0))
    backbone.save_pretrained(root / "backbone")
    trainer = finetune(["--task", "pose", "--backbone_name_or_path", str(root / "backbone"), "--head_preset", "tiny",
                        "--use_lora", "--lora_rank", "4", "--learning_rate", "5e-2", "--dataset", "synthetic",
                        "--synthetic_train_samples", "4", "--synthetic_eval_samples", "0", "--synthetic_image_size",
                        "64", "--output_dir", str(root / "run"), *COMMON])
    peft_model = trainer.model.eval()
    pixel_values = torch.randn(2, 3, 64, 48, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = peft_model(pixel_values=pixel_values).heatmaps
    return root, peft_model, pixel_values, expected


def test_lora_adapter_is_self_describing(lora_run):
    root, *_ = lora_run
    adapter = root / "run"
    adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == str((root / "backbone").resolve())
    config = json.loads((adapter / "config.json").read_text())
    assert config["task"] == "pose" and config["image_size"] == [64, 48] and config["head_config"]
    processor = json.loads((adapter / "preprocessor_config.json").read_text())
    assert processor["size"] == {"height": 64, "width": 48}
    card = (adapter / "README.md").read_text()
    assert "More Information Needed" not in card  # peft's placeholder card is replaced
    assert "LoRA adapter" in card and str((root / "backbone").resolve()) in card and "sapiens2-hf merge" in card


def test_from_pretrained_and_pipeline_load_base_plus_adapter(lora_run):
    root, peft_model, pixel_values, expected = lora_run
    adapter = root / "run"
    model = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(adapter)
    assert type(model) is sapiens2_hf.Sapiens2ForPoseEstimation and not model.training
    with torch.no_grad():
        torch.testing.assert_close(model(pixel_values).heatmaps, expected, atol=1e-5, rtol=1e-5)
        # Control: the base backbone with the head as trained but without the LoRA weights differs.
        base = sapiens2_hf.Sapiens2ForPoseEstimation.from_backbone(root / "backbone", config=model.config).eval()
        base.decode_head.load_state_dict(model.decode_head.state_dict())
        assert (base(pixel_values).heatmaps - expected).abs().max() > 1e-4
    with pytest.raises(ValueError, match="`pose` adapter, not a `seg` one"):
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(adapter)

    from transformers import pipeline

    runner = pipeline("sapiens2-pose", model=str(adapter))
    assert type(runner.model) is sapiens2_hf.Sapiens2ForPoseEstimation
    with torch.no_grad():
        torch.testing.assert_close(runner.model(pixel_values).heatmaps, expected, atol=1e-5, rtol=1e-5)
    image = np.random.default_rng(0).integers(0, 255, (80, 60, 3), dtype=np.uint8)
    result = runner(image, boxes=[[5.0, 5.0, 40.0, 60.0]])
    assert np.asarray(result[0]["keypoints"]).shape == (308, 2)


def test_merge_writes_a_plain_model_with_the_trained_heads(lora_run, tmp_path):
    from sapiens2_hf.cli.main import main as cli_main
    from sapiens2_hf.training import merge_lora

    root, peft_model, pixel_values, expected = lora_run
    adapter = root / "run"
    merged_dir = merge_lora(adapter, tmp_path / "merged")
    assert (merged_dir / "model.safetensors").is_file() and not (merged_dir / "adapter_config.json").exists()
    merged = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(merged_dir).eval()
    with torch.no_grad():
        torch.testing.assert_close(merged(pixel_values).heatmaps, expected, atol=1e-5, rtol=1e-5)
    trained_head = peft_model.base_model.model.decode_head.modules_to_save["default"].state_dict()
    for name, value in merged.decode_head.state_dict().items():
        assert torch.equal(value, trained_head[name]), name
    assert json.loads((merged_dir / "preprocessor_config.json").read_text())["size"] == {"height": 64, "width": 48}
    assert cli_main(["merge", str(adapter), "--out", str(tmp_path / "cli")]) == 0
    assert cli_main(["merge", str(adapter), "--out", str(tmp_path / "cli")]) == 2  # non-empty: refused
    assert cli_main(["merge", str(adapter), "--out", str(tmp_path / "cli"), "--overwrite"]) == 0
    again = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(tmp_path / "cli").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(pixel_values).heatmaps, expected, atol=1e-5, rtol=1e-5)


def test_lora_on_a_random_preset_records_its_saved_base(tmp_path):
    trainer = finetune(["--task", "seg", "--preset", "tiny", "--use_lora", "--lora_rank", "4", "--dataset",
                        "synthetic", "--synthetic_train_samples", "2", "--synthetic_eval_samples", "0",
                        "--synthetic_image_size", "64", "--output_dir", str(tmp_path / "run"), *COMMON])
    adapter = tmp_path / "run"
    base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str((tmp_path / "run" / "base_model").resolve())
    pixel_values = torch.randn(1, 3, 64, 48, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = trainer.model.eval()(pixel_values=pixel_values).logits
        loaded = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(adapter)
        torch.testing.assert_close(loaded(pixel_values).logits, expected, atol=1e-5, rtol=1e-5)


def test_adapter_without_a_base_says_what_is_missing(lora_run, tmp_path):
    import shutil

    root, *_ = lora_run
    adapter = tmp_path / "adapter"
    shutil.copytree(root / "run", adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = None
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="base_model_name_or_path"):
        sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(adapter)


# ------------------------------------------------------------------------ 5. input size and head defaults
def test_readme_flow_pretrain_then_finetune_from_the_backbone(tmp_path, caplog):
    write_images(tmp_path / "images", 4)
    pretrain_main(["--image_folder", str(tmp_path / "images"), "--output_dir", str(tmp_path / "runs" / "pretrain"),
                   *PRETRAIN_COMMON])
    backbone = tmp_path / "runs" / "pretrain" / "backbone"
    with caplog.at_level(logging.WARNING, logger="sapiens2_hf.training.finetune"):
        trainer = finetune(["--task", "pose", "--backbone_name_or_path", str(backbone), "--dataset", "synthetic",
                            "--synthetic_train_samples", "4", "--synthetic_eval_samples", "0", "--synthetic_image_size",
                            "64", "--output_dir", str(tmp_path / "runs" / "pose"), *COMMON])
    assert trainer.state.global_step == 2
    tuned = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(tmp_path / "runs" / "pose")
    assert tuned.config.image_size == [64, 48]  # the backbone's own size
    assert tuned.config.head_config.to_dict()["upsample_out_channels"] == [16, 16]  # the tiny head
    assert trainer.train_dataset.transform.input_size == (64, 48)
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert "'tiny' head layout" in messages and "--head_preset" in messages and "--input_height" in messages


def test_non_official_backbone_without_a_size_trains_small(caplog):
    args = ModelArguments(task="seg", backbone_name_or_path=str(OFFICIAL_TINY_PRETRAIN))
    with caplog.at_level(logging.WARNING, logger="sapiens2_hf.training.finetune"):
        model, input_size = build_model(args)
    assert input_size == (256, 192) and model.config.image_size == [256, 192]
    assert "256x192" in caplog.text and "--input_height H --input_width W" in caplog.text
    model, input_size = build_model(args, input_height=128, input_width=96)
    assert input_size == (128, 96) and model.config.image_size == [128, 96]
    with pytest.raises(ValueError, match="--head_preset 'huge' is not a seg head layout"):
        build_model(ModelArguments(task="seg", backbone_name_or_path=str(OFFICIAL_TINY_PRETRAIN), head_preset="huge"))


# ------------------------------------------------------------------------------ 6. --resume_from_checkpoint
def test_resume_from_checkpoint_true_means_the_latest_checkpoint(tmp_path):
    argv = ["--task", "pose", "--preset", "tiny", "--dataset", "synthetic", "--synthetic_train_samples", "4",
            "--synthetic_eval_samples", "0", "--synthetic_image_size", "64", "--output_dir", str(tmp_path),
            *COMMON[2:]]
    argv = [a for a in argv if a not in ("--save_strategy", "no")]
    first = finetune([*argv, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1"])
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    resumed = finetune([*argv, "--max_steps", "3", "--save_strategy", "no", "--resume_from_checkpoint", "True"])
    assert resumed.state.global_step == 3
    assert losses(resumed)[:2] == losses(first)  # steps 1-2 come from checkpoint-2's state


def test_resolve_resume_checkpoint(tmp_path):
    assert resolve_resume_checkpoint(None, str(tmp_path)) is None
    assert resolve_resume_checkpoint("False", str(tmp_path)) is None
    with pytest.raises(ValueError, match="runs/x/checkpoint-5 is not a folder"):  # refused before anything is built
        resolve_resume_checkpoint("runs/x/checkpoint-5", str(tmp_path))
    with pytest.raises(ValueError, match="has none"):
        resolve_resume_checkpoint("True", str(tmp_path))
    for step in (2, 10):  # complete checkpoints (incomplete ones: tests/test_run_folders.py)
        (tmp_path / f"checkpoint-{step}").mkdir()
        save_file({"weight": torch.zeros(4)}, tmp_path / f"checkpoint-{step}" / "model.safetensors")
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    assert resolve_resume_checkpoint(str(tmp_path / "checkpoint-2"), str(tmp_path)) == str(tmp_path / "checkpoint-2")
    assert resolve_resume_checkpoint("true", str(tmp_path)) == str(tmp_path / "checkpoint-10")
    assert resolve_resume_checkpoint(True, str(tmp_path)) == str(tmp_path / "checkpoint-10")
