"""Friction of a user's first hour (issue 21), each pinned where it was fixed: pretraining crops that follow the
config, the `tiny` preset, `pipeline(..., image_size=)`, LoRA adapters loading without transformers' load report,
COCO image paths of `write_dataset` output, CLI input folders with only subfolders, a multi-process launch that
starts one process, and a reused fine-tuning `--output_dir`."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import sapiens2_hf
from sapiens2_hf import Sapiens2Config, tiny_config
from sapiens2_hf.pretraining import (
    MultiCropAugmentation,
    MultiCropCollator,
    Sapiens2ForPreTraining,
    Sapiens2PreTrainingConfig,
    tiny_pretraining_config,
)


pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "training_scripts"


def _script_env() -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
           and not key.startswith("ACCELERATE_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT / "src"))
    return env


# ------------------------------------------------------------------------------- 2. pretraining crops follow config


def test_crops_from_the_config_are_the_tiny_and_real_scale_sizes():
    tiny = MultiCropAugmentation.from_config(tiny_pretraining_config())
    assert (tiny.global_crop_size, tiny.local_crop_size) == ((64, 48), (32, 32))
    assert tiny == MultiCropAugmentation.tiny(num_local_crops=8)  # the tiny preset, with the default local count
    real = MultiCropAugmentation.from_config(Sapiens2PreTrainingConfig.from_preset("0.4b"))
    assert real == MultiCropAugmentation()  # 1024 x 768 global, 448 x 336 local: the documented real scale
    assert MultiCropAugmentation.from_config(tiny_config(), num_local_crops=0).num_local_crops == 0


def test_collator_without_augmentation_crops_at_the_config_size_and_a_mismatch_is_one_line():
    config = tiny_pretraining_config()
    collator = MultiCropCollator.from_config(config)  # before: a TypeError, the augmentation was required
    image = torch.randint(0, 256, (3, 90, 70), dtype=torch.uint8)
    batch = collator([{"image": image, "seed": 0}])
    assert tuple(batch["pixel_values"].shape) == (1, 2, 3, 64, 48)
    assert tuple(batch["local_pixel_values"].shape) == (1, 8, 3, 32, 32)
    with pytest.raises(ValueError, match=r"global crop size 1024x768 differs from the model config's image_size "
                                         r"64x48: build the crops with MultiCropAugmentation\.from_config"):
        MultiCropCollator.from_config(config, MultiCropAugmentation())
    MultiCropCollator.from_config(config, MultiCropAugmentation.tiny())  # the matching crops are accepted


def test_pretraining_trainer_builds_the_collator_from_the_config_and_refuses_a_mismatch(tmp_path):
    from transformers import TrainingArguments

    from sapiens2_hf.pretraining.trainer import Sapiens2PreTrainingTrainer

    model = Sapiens2ForPreTraining(tiny_pretraining_config())
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], seed=3)
    trainer = Sapiens2PreTrainingTrainer(model=model, args=args)
    assert isinstance(trainer.data_collator, MultiCropCollator)
    assert trainer.data_collator.augmentation == MultiCropAugmentation.from_config(model.config)
    wrong = MultiCropCollator(MultiCropAugmentation(), patch_size=16, mask_ratio=0.5)  # real scale, tiny model
    with pytest.raises(ValueError, match=r"1024x768 differs from the model config's image_size 64x48"):
        Sapiens2PreTrainingTrainer(model=model, args=args, data_collator=wrong)


def test_pretrain_script_crops_follow_the_config():
    from sapiens2_hf.pretraining.run import PretrainingArguments, build_augmentation, build_config

    args = PretrainingArguments(image_folder="unused")
    assert build_augmentation(args, build_config(args)) == MultiCropAugmentation.tiny()
    # a crop size given on the command line becomes the size the config records
    args = PretrainingArguments(image_folder="unused", augmentation_overrides='{"global_crop_size": [32, 32]}')
    config = build_config(args)
    assert config.backbone_config.image_size_hw == (32, 32)
    assert build_augmentation(args, config).global_crop_size == (32, 32)
    MultiCropCollator.from_config(config, build_augmentation(args, config))


# ----------------------------------------------------------------------------------- 3. tiny preset, image_size=


def test_tiny_is_a_preset_and_errors_list_it():
    for task in (None, "pose", "seg", "pointmap"):
        assert Sapiens2Config.from_preset("tiny", task=task).to_dict() == tiny_config(task).to_dict()
    assert Sapiens2Config.from_preset("tiny", num_hidden_layers=3).num_hidden_layers == 3
    with pytest.raises(ValueError, match=r"Unknown Sapiens2 variant '2b'; choose one of \['tiny', '0\.1b'"):
        Sapiens2Config.from_preset("2b")
    with pytest.raises(ValueError, match="Unknown task 'depth'"):
        Sapiens2Config.from_preset("tiny", task="depth")
    assert Sapiens2PreTrainingConfig.from_preset("tiny").to_dict() == tiny_pretraining_config().to_dict()


def test_pipeline_takes_image_size_as_its_loader_errors_suggest(load_case, tmp_path):
    _, _, weights = load_case("pointmap")
    pipe = sapiens2_hf.pipeline("sapiens2-pointmap", model=str(weights), image_size=[160, 144], device="cpu")
    assert pipe.model.config.image_size == [160, 144] and pipe.image_processor.input_size == (160, 144)
    same = sapiens2_hf.pipeline("sapiens2-pointmap", model=str(weights), model_kwargs={"image_size": [160, 144]},
                                device="cpu")
    image = np.random.default_rng(0).integers(0, 255, (50, 40, 3), dtype=np.uint8)
    np.testing.assert_array_equal(pipe(image)["pointmap"], same(image)["pointmap"])
    # a saved folder: its preprocessor_config.json keeps the size it was saved with, the override moves both
    pipe.model.save_pretrained(tmp_path)
    pipe.image_processor.save_pretrained(tmp_path)
    resized = sapiens2_hf.pipeline("sapiens2-pointmap", model=str(tmp_path), image_size=[256, 192], device="cpu")
    assert resized.model.config.image_size == [256, 192] and resized.image_processor.input_size == (256, 192)
    with pytest.raises(ValueError, match="not both"):
        sapiens2_hf.pipeline("sapiens2-pointmap", model=str(weights), image_size=[160, 144],
                             model_kwargs={"image_size": [160, 144]})
    with pytest.raises(ValueError, match=r"from_pretrained\(\.\.\., image_size="):
        sapiens2_hf.pipeline("sapiens2-pointmap", model=pipe.model, image_size=[160, 144])


# -------------------------------------------------------------------------------- 4. LoRA adapters, no load report


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _load_report_printed(capfd, caplog, load) -> bool:
    """Whether `load()` printed transformers' "LOAD REPORT" table on stdout, stderr (file descriptors, so child
    processes count) or through logging (the library logger does not propagate, so it gets its own handler)."""
    handler = _Collect()
    library_logger = logging.getLogger("transformers")
    library_logger.addHandler(handler)
    capfd.readouterr()
    caplog.clear()
    try:
        with caplog.at_level(logging.DEBUG):
            load()
    finally:
        library_logger.removeHandler(handler)
    captured = capfd.readouterr()
    return "LOAD REPORT" in "\n".join([captured.out, captured.err, caplog.text, *handler.lines])


@pytest.fixture(scope="module")
def seg_adapter(tmp_path_factory):
    from sapiens2_hf.training.lora import apply_lora, save_lora_adapter

    folder = tmp_path_factory.mktemp("lora")
    torch.manual_seed(0)
    sapiens2_hf.Sapiens2ForSemanticSegmentation(tiny_config("seg")).eval().save_pretrained(folder / "base")
    base = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(folder / "base")
    save_lora_adapter(apply_lora(base, "seg", rank=4), folder / "adapter")
    (folder / "images").mkdir()
    Image.fromarray(np.zeros((40, 30, 3), np.uint8)).save(folder / "images" / "a.png")
    return folder


def test_lora_adapters_load_without_a_load_report_in_all_three_paths(seg_adapter, capfd, caplog):
    adapter = seg_adapter / "adapter"
    assert not _load_report_printed(capfd, caplog, lambda: sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(
        adapter))
    assert not _load_report_printed(capfd, caplog, lambda: sapiens2_hf.pipeline(
        "sapiens2-segmentation", model=str(adapter), device="cpu"))
    command = [sys.executable, "-m", "sapiens2_hf.cli.main", "seg", "--model", str(adapter),
               str(seg_adapter / "images"), "--out", str(seg_adapter / "out"), "--threads", "1"]
    result = {}
    assert not _load_report_printed(capfd, caplog, lambda: result.update(
        code=subprocess.run(command, env=_script_env(), timeout=300).returncode))
    assert result["code"] == 0 and (seg_adapter / "out" / "a_seg.png").is_file()


def test_control_a_really_unexpected_tensor_prints_the_load_report(seg_adapter, tmp_path, capfd, caplog):
    from safetensors.torch import load_file, save_file

    (tmp_path / "config.json").write_text((seg_adapter / "base" / "config.json").read_text())
    state = load_file(seg_adapter / "base" / "model.safetensors")
    save_file({**state, "extra.weight": torch.zeros(2)}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    assert _load_report_printed(capfd, caplog, lambda: sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(
        tmp_path, strict=False))


# ------------------------------------------------------------------ 5. COCO file_name paths of write_dataset output


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from sapiens2_hf.data.synthetic import write_dataset

    root = tmp_path_factory.mktemp("synth")
    write_dataset(root, num_samples=2, height=64, width=48, seed=0, tasks=("pose",), num_people=1)
    return root


def test_coco_images_resolve_with_both_image_folder_conventions(written):
    from sapiens2_hf.data.pose import read_coco_keypoints
    from sapiens2_hf.training.arguments import DataArguments
    from sapiens2_hf.training.finetune import build_records

    annotation = written / "person_keypoints.json"
    assert json.loads(annotation.read_text())["images"][0]["file_name"].startswith("images/")
    expected = sorted(str(path) for path in (written / "images").iterdir())
    for image_dir in (written, written / "images", None):  # COCO's rule, the README's --train_images images/, none
        records = read_coco_keypoints(annotation, image_dir)
        assert sorted({r["image"] for r in records}) == expected, image_dir
    # the README example through the fine-tuning data path
    data_args = DataArguments(dataset="coco", train_targets=str(annotation), train_images=str(written / "images"))
    assert sorted({r["image"] for r in build_records(data_args, "pose", "train", seed=0)}) == expected


def test_finetune_with_no_image_found_stops_with_one_line_naming_the_paths_and_the_flag(written, tmp_path):
    # the annotations away from their images (else their folder is searched too, and the images found)
    annotation = tmp_path / "ann.json"
    annotation.write_text((written / "person_keypoints.json").read_text())
    elsewhere = tmp_path / "photos"
    elsewhere.mkdir()
    command = [sys.executable, str(SCRIPTS / "finetune.py"), "--task", "pose", "--preset", "tiny", "--dataset", "coco",
               "--train_targets", str(annotation), "--train_images", str(elsewhere),
               "--output_dir", str(tmp_path / "run"), "--max_steps", "1", "--report_to", "none", "--use_cpu"]
    result = subprocess.run(command, env=_script_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("finetune.py: error: No image of ") and "--train_images" in last, last
    assert f"is not at {elsewhere / 'images'}" in last and f"or {tmp_path / 'images'}" in last  # the paths tried


# -------------------------------------------------------------------------------- 8. quietly less than asked


def test_cli_folder_whose_images_sit_in_a_subfolder_is_reported_not_processed_quietly(tmp_path, capsys):
    from sapiens2_hf.cli.main import main

    torch.manual_seed(0)
    model = tmp_path / "model"
    sapiens2_hf.Sapiens2ForSemanticSegmentation(tiny_config("seg")).eval().save_pretrained(model)
    (tmp_path / "photos" / "day1").mkdir(parents=True)
    Image.fromarray(np.zeros((40, 30, 3), np.uint8)).save(tmp_path / "photos" / "day1" / "a.png")
    code = main(["seg", "--model", str(model), str(tmp_path / "photos"), "--out", str(tmp_path / "out"),
                 "--threads", "1"])
    err = capsys.readouterr().err
    assert code != 0
    assert f"no images in {tmp_path / 'photos'}; it has subfolders (day1)" in err
    assert str(tmp_path / "photos" / "day1") in err
    # the subfolder itself, as the message says, is processed
    assert main(["seg", "--model", str(model), str(tmp_path / "photos" / "day1"), "--out", str(tmp_path / "out"),
                 "--threads", "1"]) == 0
    assert (tmp_path / "out" / "a_seg.png").is_file()


def test_a_multi_process_launch_that_starts_one_process_is_refused():
    from sapiens2_hf.training.run_setup import check_process_count

    # the environment accelerate's one-process launcher sets (no process is started here: any port value will do)
    simple_launcher = {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_USE_CPU": "False", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": "unused"}
    with pytest.raises(ValueError, match=r"started 1 process although --num_processes asks for more.*--multi_gpu"):
        check_process_count(simple_launcher)
    check_process_count({**simple_launcher, "WORLD_SIZE": "2"})  # accelerate's multi-GPU launcher, torchrun
    check_process_count({"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_USE_CPU": "False"})  # --num_processes 1
    check_process_count({})  # plain python


def test_accelerate_launch_num_processes_2_without_multi_gpu_stops_both_scripts(tmp_path, free_port):
    pytest.importorskip("accelerate")
    (tmp_path / "images").mkdir()
    Image.fromarray(np.zeros((40, 30, 3), np.uint8)).save(tmp_path / "images" / "a.png")
    # complete commands: before the check, each trained alone in the one process started
    arguments = {"finetune.py": ["--task", "pose", "--preset", "tiny", "--synthetic_train_samples", "2",
                                 "--synthetic_eval_samples", "0"],
                 "pretrain.py": ["--image_folder", str(tmp_path / "images")]}
    for script, own in arguments.items():
        command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1",
                   "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port),
                   str(SCRIPTS / script), *own, "--output_dir", str(tmp_path / script), "--max_steps", "1",
                   "--report_to", "none"]
        env = {**_script_env(), "CUDA_VISIBLE_DEVICES": ""}
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert result.returncode != 0, result.stderr[-2000:]
        assert f"{script}: error: accelerate launch started 1 process" in result.stderr, result.stderr[-2000:]
        assert not (tmp_path / script).exists()  # stopped before anything was written


def test_rerunning_finetune_into_a_used_output_dir_is_refused_in_one_line(tmp_path):
    output_dir = tmp_path / "run"
    (output_dir / "checkpoint-5").mkdir(parents=True)
    (output_dir / "checkpoint-5" / "model.safetensors").write_bytes(b"")
    (output_dir / "trainer_state.json").write_text("{}")
    command = [sys.executable, str(SCRIPTS / "finetune.py"), "--task", "pose", "--preset", "tiny",
               "--output_dir", str(output_dir), "--max_steps", "1", "--report_to", "none", "--use_cpu"]
    result = subprocess.run(command, env=_script_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"finetune.py: error: --output_dir {output_dir} holds another run (checkpoint-5")
    assert "--overwrite_output_dir" in last
    assert (output_dir / "checkpoint-5" / "model.safetensors").is_file()  # nothing of the old run was touched
