"""The training entry points at their boundaries ("Nothing silent", round two): each case failed before the fix and
has a control showing the valid input still works.

- a COCO file without `annotations` / `images`, an annotation without `bbox`, `keypoints` or `image_id`: was a
  KeyError deep in the reader; now one line naming the file, the key and what the file needs;
- `--output_dir` that is an existing file: was a FileExistsError from a `mkdir` deep inside; now one line at start;
- a missing `--backbone_name_or_path` / `--init_backbone` path: was a traceback (exit 1); now one line, exit 2;
- `--train_val_split 1.5` (or -0.1), zero sample counts or sizes, a dropout of 1: were accepted; now refused at parse
  time in one line.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from transformers import HfArgumentParser

from sapiens2_hf.runs.errors import is_expected_error
from sapiens2_hf.data.pose import read_coco_keypoints
from sapiens2_hf.data.synthetic import write_dataset
from sapiens2_hf.pretraining.run import PretrainingArguments
from sapiens2_hf.pretraining.run import main as pretrain_main
from sapiens2_hf.pretraining.toy_data import make_toy_images
from sapiens2_hf.training.arguments import DataArguments, ModelArguments


ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "training_scripts"
TINY = ["--preset", "tiny", "--max_steps", "1", "--use_cpu", "true", "--report_to", "none", "--input_height", "64",
        "--input_width", "48", "--per_device_train_batch_size", "2", "--save_strategy", "no", "--disable_tqdm", "true",
        "--dataloader_num_workers", "0", "--optim", "adamw_torch", "--do_train", "true"]
PRETRAIN = ["--max_steps", "1", "--per_device_train_batch_size", "2", "--report_to", "none", "--disable_tqdm", "true",
            "--use_cpu", "true", "--dataloader_pin_memory", "false", "--save_strategy", "no"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

pytestmark = pytest.mark.usefixtures("one_thread")


def finetune(argv):
    """`training_scripts/finetune.py`'s `main` with `argv` (the command line users type)."""
    spec = importlib.util.spec_from_file_location("finetune_script", SCRIPTS / "finetune.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """A valid COCO keypoint file (4 images of synthetic humans) and its image folder."""
    root = write_dataset(tmp_path_factory.mktemp("coco") / "data", 4, height=96, width=72, tasks=("pose",))
    return root / "person_keypoints.json", root / "images"


def _broken(coco, tmp_path, change) -> Path:
    data = json.loads(coco[0].read_text())
    change(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    return path


def _drop(key, index=None):
    def change(data):
        if index is None:
            del data[key]
        else:
            del data["annotations"][index][key]
    return change


# ------------------------------------------------------------------------------------------- 1. COCO keypoint files
BROKEN_FILES = {
    "no annotations": (_drop("annotations"), "'annotations'"),
    "no images": (_drop("images"), "'images'"),
    "an annotation without bbox": (_drop("bbox", 1), "annotation 1 (id "),
    "an annotation without keypoints": (_drop("keypoints", 0), "annotation 0 (id "),
    "an annotation without image_id": (_drop("image_id", 2), "annotation 2 (id "),
}


@pytest.mark.parametrize("case", sorted(BROKEN_FILES))
def test_a_coco_file_missing_a_key_is_one_line_naming_the_file_and_the_key(case, coco, tmp_path):
    change, where = BROKEN_FILES[case]
    path = _broken(coco, tmp_path, change)
    missing = case.split()[-1]
    # the library reader and the fine-tuning script (which reads the file's keypoint set first) say the same
    for call in (lambda: read_coco_keypoints(path, coco[1]),
                 lambda: finetune(["--task", "pose", "--dataset", "coco", "--train_targets", str(path),
                                   "--train_images", str(coco[1]), "--output_dir", str(tmp_path / "run"), *TINY])):
        with pytest.raises(ValueError) as error:
            call()
        message = one_line(error)
        assert str(path) in message and f"'{missing}'" in message and where in message, message
        assert "a COCO keypoint file needs" in message and "bbox" in message and "keypoints" in message, message
        assert is_expected_error(error.value)
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_a_valid_coco_file_still_reads_and_trains(coco, tmp_path):
    """Control: the file the broken ones were made from."""
    records = read_coco_keypoints(*coco)
    assert len(records) >= 4 and all(record["bbox"].shape == (4,) for record in records)
    finetune(["--task", "pose", "--dataset", "coco", "--train_targets", str(coco[0]), "--train_images", str(coco[1]),
              "--output_dir", str(tmp_path / "run"), *TINY])
    assert (tmp_path / "run" / "model.safetensors").is_file()


# ------------------------------------------------------------------------------------------ 2. --output_dir a file
def test_an_output_dir_that_is_a_file_is_refused_at_start_in_one_line(tmp_path, monkeypatch):
    import sapiens2_hf.training.finetune as finetune_module

    path = tmp_path / "notes.txt"
    path.write_text("the user's notes")
    built = []
    monkeypatch.setattr(finetune_module, "build_model", lambda *args, **kwargs: built.append(1) / 0)
    for extra in ([], ["--do_train", "false", "--do_eval", "true", "--synthetic_eval_samples", "2"]):
        with pytest.raises(FileExistsError) as error:
            finetune(["--task", "pose", "--synthetic_train_samples", "2", "--output_dir", str(path), *TINY, *extra])
        message = one_line(error)
        assert message.startswith(f"--output_dir {path} is a file"), message
    with pytest.raises(FileExistsError) as error:
        pretrain_main(["--image_folder", str(tmp_path), "--output_dir", str(path), *PRETRAIN])
    assert one_line(error).startswith(f"--output_dir {path} is a file")
    assert built == [] and path.read_text() == "the user's notes"  # refused before any model was built


def test_an_output_dir_that_is_a_new_or_empty_folder_still_works(tmp_path):
    """Control: a new folder (created) and an existing empty one."""
    for folder in (tmp_path / "new" / "run", tmp_path / "empty"):
        folder.mkdir(exist_ok=True) if folder.name == "empty" else None
        finetune(["--task", "pose", "--synthetic_train_samples", "2", "--synthetic_image_size", "64",
                  "--output_dir", str(folder), *TINY])
        assert (folder / "model.safetensors").is_file()


# ----------------------------------------------------------------------------- 3. the scripts' expected errors
def _script(name, *argv, cwd):
    return subprocess.run([sys.executable, str(SCRIPTS / name), *argv], env=ENV, capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def _assert_one_line_exit_2(result, prefix):
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(prefix), last
    return last


def test_a_missing_backbone_path_ends_the_finetuning_script_in_one_line_with_exit_code_2(tmp_path):
    missing = tmp_path / "runs" / "pretrain" / "backbone"
    result = _script("finetune.py", "--task", "pose", "--backbone_name_or_path", str(missing),
                     "--output_dir", str(tmp_path / "run"), "--max_steps", "1", "--use_cpu", "true", "--report_to",
                     "none", cwd=tmp_path)
    last = _assert_one_line_exit_2(result, "finetune.py: error: ")
    assert str(missing) in last, last


def test_a_missing_init_backbone_ends_the_pretraining_script_in_one_line_with_exit_code_2(tmp_path):
    images, _ = make_toy_images(2, 40, 30, seed=0)
    (tmp_path / "images").mkdir()
    for index, image in enumerate(images):
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(tmp_path / "images" / f"{index}.png")
    missing = tmp_path / "sapiens2_0.4b_pretrain.safetensors"
    result = _script("pretrain.py", "--image_folder", str(tmp_path / "images"), "--init_backbone", str(missing),
                     "--output_dir", str(tmp_path / "run"), *PRETRAIN, cwd=tmp_path)
    last = _assert_one_line_exit_2(result, "pretrain.py: error: ")
    assert str(missing) in last, last


def test_the_other_model_sources_fail_with_expected_one_line_errors(tmp_path):
    """--init_head_from and --model_name_or_path that exist neither locally nor (offline) in the Hub cache: errors the
    scripts print in one line (runs/errors.py), naming the source."""
    for flags in (["--model_name_or_path", str(tmp_path / "pose_model")],
                  ["--init_head_from", "nobody/no-such-model", "--preset", "tiny"],
                  ["--backbone_name_or_path", "nobody/no-such-backbone"]):
        argv = ["--task", "pose", *flags, "--output_dir", str(tmp_path / "run"), "--synthetic_train_samples", "2",
                *[arg for arg in TINY if arg != "tiny" and arg != "--preset"]]
        with pytest.raises(Exception) as error:
            finetune(argv)
        assert is_expected_error(error.value), repr(error.value)
        assert flags[1] in one_line(error)


def test_the_scripts_still_exit_0_on_a_valid_run(tmp_path):
    """Control for the exit codes: a valid tiny run through the script."""
    result = _script("finetune.py", "--task", "pose", "--synthetic_train_samples", "2", "--synthetic_image_size", "64",
                     "--synthetic_eval_samples", "0", "--output_dir", str(tmp_path / "run"), *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "model.safetensors").is_file()


# ------------------------------------------------------------------------------ 4. numeric arguments at parse time
def _parse(argv):
    return HfArgumentParser((ModelArguments, DataArguments)).parse_args_into_dataclasses(args=["--task", "pose",
                                                                                               *argv])


BAD_VALUES = [
    ("--train_val_split", "1.5"), ("--train_val_split", "1"), ("--train_val_split", "-0.1"),
    ("--max_train_samples", "0"), ("--max_eval_samples", "-3"), ("--max_predict_samples", "0"),
    ("--synthetic_train_samples", "-1"), ("--synthetic_image_size", "0"), ("--input_height", "0"),
    ("--input_width", "-48"), ("--lora_rank", "0"), ("--lora_alpha", "0"), ("--lora_dropout", "1"),
    ("--lora_dropout", "-0.5"), ("--layer_decay_rate", "0"), ("--layer_decay_rate", "1.5"),
    ("--freeze_backbone_layers", "-1"),
]


@pytest.mark.parametrize("flag,value", BAD_VALUES)
def test_an_out_of_range_number_is_refused_at_parse_time_in_one_line(flag, value):
    with pytest.raises(ValueError) as error:
        _parse([flag, value])
    message = one_line(error)
    assert message.startswith(f"{flag} {value} ") or message.startswith(f"{flag} {float(value)} "), message


def test_in_range_numbers_are_accepted():
    """Control: the documented values (0 turns the split off, 0 synthetic evaluation samples means none)."""
    model_args, data_args = _parse([
        "--train_val_split", "0.5", "--max_train_samples", "1", "--synthetic_eval_samples", "0", "--input_height",
        "64", "--input_width", "48", "--lora_rank", "1", "--lora_dropout", "0.1", "--layer_decay_rate", "1",
        "--freeze_backbone_layers", "0"])
    assert (data_args.train_val_split, data_args.max_train_samples, data_args.synthetic_eval_samples) == (0.5, 1, 0)
    assert (model_args.lora_rank, model_args.lora_dropout, model_args.layer_decay_rate) == (1, 0.1, 1.0)
    assert _parse(["--train_val_split", "0"])[1].train_val_split == 0.0
    assert DataArguments(train_val_split=None).train_val_split is None
    assert PretrainingArguments(image_folder="x").image_folder == "x"


def test_the_script_refuses_a_bad_fraction_before_anything_runs(tmp_path):
    result = _script("finetune.py", "--task", "pose", "--preset", "tiny", "--train_val_split", "1.5",
                     "--output_dir", str(tmp_path / "run"), cwd=tmp_path)
    last = _assert_one_line_exit_2(result, "finetune.py: error: --train_val_split 1.5 ")
    assert "(0, 1)" in last and not (tmp_path / "run").exists()
