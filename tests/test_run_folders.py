"""One run-folder rule for fine-tuning and pretraining, and `save_for_hub` never deleting weights it did not write
(issue 20, items 1, 2, 5, 6). Each test failed before the fix; each has its control.

- A reused `--output_dir` that holds another run's checkpoints or final model is refused with one line naming
  `--overwrite_output_dir` and `--resume_from_checkpoint`; `--overwrite_output_dir` clears the previous run's
  artefacts (not the user's files); resuming the same run works, resuming another run's folder is refused.
- A LoRA run never leaves a previous full run's weights beside its adapter (they would be served instead of it).
- `--resume_from_checkpoint True` takes the newest complete checkpoint, naming the incomplete ones it skips.
- `save_for_hub(..., overwrite=True)` refuses, and leaves untouched, weight files that this save does not replace.
"""

import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import sapiens2_hf
from sapiens2_hf.pretraining.run import main as pretrain_main
from sapiens2_hf.pretraining.toy_data import make_toy_images

from finetune_runs import POSE, finetune


PRETRAIN = ["--max_steps", "2", "--per_device_train_batch_size", "2", "--report_to", "none", "--disable_tqdm", "true",
            "--use_cpu", "true", "--dataloader_pin_memory", "false", "--save_strategy", "no", "--logging_steps", "1"]

pytestmark = pytest.mark.usefixtures("one_thread")


def losses(folder):
    state = json.loads((Path(folder) / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


def snapshot(folder):
    """Every file under `folder` (relative path -> content hash)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def one_line(error):
    return "\n" not in str(error.value)


def names_both_flags(error):
    return "--overwrite_output_dir" in str(error.value) and "--resume_from_checkpoint" in str(error.value)


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    """A finished full pose run: checkpoint-1..3 and the final model in its --output_dir."""
    folder = tmp_path_factory.mktemp("run_a") / "out"
    finetune([*POSE, "--output_dir", str(folder), "--max_steps", "3", "--save_strategy", "steps", "--save_steps", "1",
              "--seed", "7"])
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    return folder


def copy_of(run_a, tmp_path):
    folder = tmp_path / "out"
    shutil.copytree(run_a, folder)
    return folder


# ------------------------------------------------------------------------ item 2: a reused --output_dir is refused
def test_a_reused_output_dir_is_refused_and_overwrite_clears_only_the_previous_run(run_a, tmp_path):
    folder = copy_of(run_a, tmp_path)
    (folder / "notes.txt").write_text("mine")
    before = snapshot(folder)
    run_b = [*POSE, "--output_dir", str(folder), "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1",
             "--seed", "8"]
    with pytest.raises(ValueError, match="holds another run") as error:
        finetune(run_b)
    assert one_line(error) and names_both_flags(error) and "checkpoint-" in str(error.value)
    assert snapshot(folder) == before  # nothing of run A touched

    # Control: --overwrite_output_dir clears run A's checkpoints, weights and state, and keeps the user's file.
    finetune([*run_b, "--overwrite_output_dir", "true"])
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]  # no A's -3
    assert (folder / "notes.txt").read_text() == "mine"
    b_losses = losses(folder)
    assert len(b_losses) == 2 and b_losses[0] != losses(run_a)[0]

    # Resuming the same run is fine: it continues run B's checkpoint-2, not anything of run A.
    finetune([*run_b[:-2], "--seed", "8", "--max_steps", "3", "--resume_from_checkpoint", "True"])
    assert losses(folder)[:2] == b_losses and len(losses(folder)) == 3


def test_resuming_into_the_folder_of_another_run_is_refused(run_a, tmp_path):
    folder = copy_of(run_a, tmp_path)
    before = snapshot(folder)
    with pytest.raises(ValueError, match="task") as error:
        finetune(["--task", "seg", *POSE[2:], "--output_dir", str(folder), "--max_steps", "4",
                  "--resume_from_checkpoint", "True"])
    assert one_line(error) and "--overwrite_output_dir" in str(error.value)
    assert snapshot(folder) == before


def test_pretraining_follows_the_same_rule(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    from PIL import Image

    for index, image in enumerate(make_toy_images(4, 70, 52, seed=3)[0]):
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(images / f"{index}.png")
    folder = tmp_path / "out"
    first = pretrain_main(["--image_folder", str(images), "--output_dir", str(folder), "--seed", "1", *PRETRAIN])
    (folder / "notes.txt").write_text("mine")
    before = snapshot(folder)
    with pytest.raises(ValueError, match="holds another run") as error:
        pretrain_main(["--image_folder", str(images), "--output_dir", str(folder), "--seed", "2", *PRETRAIN])
    assert one_line(error) and names_both_flags(error) and snapshot(folder) == before
    # Control: with --overwrite_output_dir the second run replaces the first one's model and exported backbone.
    second = pretrain_main(["--image_folder", str(images), "--output_dir", str(folder), "--seed", "2",
                            "--overwrite_output_dir", "true", *PRETRAIN])
    assert (folder / "notes.txt").read_text() == "mine"
    saved = load_file(folder / "backbone" / "model.safetensors")
    name = "embeddings.cls_token"
    assert torch.equal(saved[name], second.model.model.state_dict()[name])
    assert not torch.equal(saved[name], first.model.model.state_dict()[name])


# -------------------------------------------------- item 1: a LoRA run never serves the previous full run's model
def test_a_lora_run_never_leaves_a_full_runs_weights_beside_its_adapter(run_a, tmp_path):
    from sapiens2_hf.adapters import find_adapter_folder

    folder = copy_of(run_a, tmp_path)
    previous = load_file(folder / "model.safetensors")
    before = snapshot(folder)
    lora = [*POSE, "--output_dir", str(folder), "--max_steps", "1", "--save_strategy", "no", "--use_lora", "true"]
    with pytest.raises(ValueError, match="holds another run") as error:
        finetune(lora)
    assert one_line(error) and names_both_flags(error) and snapshot(folder) == before

    # Control: with --overwrite_output_dir the folder is the LoRA run's adapter, and it is what loads.
    finetune([*lora, "--overwrite_output_dir", "true"])
    assert not (folder / "model.safetensors").exists() and (folder / "adapter_config.json").is_file()
    assert not list(folder.glob("checkpoint-*"))
    assert Path(find_adapter_folder(str(folder), {})) == folder
    served = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(folder).state_dict()
    assert any(not torch.equal(served[name], value) for name, value in previous.items() if name in served)


def test_a_lora_resume_of_a_full_run_folder_without_a_marker_is_refused(run_a, tmp_path):
    folder = copy_of(run_a, tmp_path)
    for marker in folder.glob("_*.json"):  # as a folder written before run markers existed
        marker.unlink()
    with pytest.raises(ValueError, match="LoRA|adapter") as error:
        finetune([*POSE, "--output_dir", str(folder), "--max_steps", "4", "--use_lora", "true",
                  "--resume_from_checkpoint", "True"])
    assert one_line(error)


# ---------------------------------------------------------- item 6: resume takes the newest complete checkpoint
def _checkpoint(folder, step, damage=None):
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    save_file({"weight": torch.arange(64, dtype=torch.float32)}, path / "model.safetensors")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    if damage == "no trainer_state.json":
        (path / "trainer_state.json").unlink()
    elif damage == "truncated weights":
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "truncated trainer_state.json":
        (path / "trainer_state.json").write_text('{"global_step": ')
    elif damage == "no weights":
        (path / "model.safetensors").unlink()
    return path


@pytest.mark.parametrize("damage", ["no trainer_state.json", "truncated weights", "truncated trainer_state.json",
                                    "no weights"])
def test_resume_true_takes_the_newest_complete_checkpoint(tmp_path, damage, caplog):
    from sapiens2_hf.training.run_setup import resolve_resume_checkpoint

    complete = _checkpoint(tmp_path, 2)
    broken = _checkpoint(tmp_path, 4, damage)
    with caplog.at_level(logging.WARNING):
        assert resolve_resume_checkpoint("True", str(tmp_path)) == str(complete)
    assert "checkpoint-4" in caplog.text
    # Naming the incomplete checkpoint itself is one line saying what is missing.
    with pytest.raises(ValueError, match="not a complete checkpoint") as error:
        resolve_resume_checkpoint(str(broken), str(tmp_path))
    assert one_line(error)
    # Control: once complete, the newest one is taken.
    shutil.rmtree(broken)
    _checkpoint(tmp_path, 4)
    assert resolve_resume_checkpoint("True", str(tmp_path)) == str(tmp_path / "checkpoint-4")


def test_resume_after_a_kill_during_a_checkpoint_save(run_a, tmp_path):
    folder = copy_of(run_a, tmp_path)
    # A kill while checkpoint-3 was written: transformers writes the weights first and trainer_state.json last.
    (folder / "checkpoint-3" / "trainer_state.json").unlink()
    weights = folder / "checkpoint-3" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    finetune([*POSE, "--output_dir", str(folder), "--max_steps", "3", "--save_strategy", "no", "--seed", "7",
              "--resume_from_checkpoint", "True"])
    assert losses(folder)[:2] == losses(run_a)[:2] and len(losses(folder)) == 3  # steps 1-2 from checkpoint-2


# ---------------------------------------------------- item 5: save_for_hub never deletes weights it did not write
def _tiny_seg(seed=0):
    torch.manual_seed(seed)
    return sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg")).eval()


@pytest.mark.parametrize("name", ["pytorch_model.bin", "pytorch_model.bin.index.json",
                                  "model-00001-of-00002.safetensors", "model.safetensors.index.json",
                                  "adapter_config.json"])
def test_save_for_hub_overwrite_refuses_weight_files_it_would_not_replace(tmp_path, name):
    from sapiens2_hf.hub import save_for_hub

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / name).write_bytes(b"the user's own file")
    (repo / "notes.txt").write_text("mine")
    before = snapshot(repo)
    with pytest.raises(FileExistsError, match=name.replace(".", r"\.")) as error:
        save_for_hub(_tiny_seg(), repo, overwrite=True)
    assert one_line(error)
    assert snapshot(repo) == before and [p.name for p in tmp_path.iterdir()] == ["repo"]
    # Control: once the user moved it away, the save goes through and keeps their other files.
    (repo / name).unlink()
    save_for_hub(_tiny_seg(), repo, overwrite=True)
    assert (repo / "model.safetensors").is_file() and (repo / "notes.txt").read_text() == "mine"
    # and an earlier save_for_hub into the folder is replaced file by file.
    second = _tiny_seg(1)
    save_for_hub(second, repo, overwrite=True)
    reloaded = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(repo).state_dict()
    assert all(torch.equal(reloaded[k], v) for k, v in second.state_dict().items())


def test_a_folder_with_full_weights_and_an_adapter_says_which_it_loads(tmp_path, caplog):
    from sapiens2_hf.adapters import find_adapter_folder

    (tmp_path / "adapter_config.json").write_text("{}")
    with caplog.at_level("WARNING"):
        assert Path(find_adapter_folder(str(tmp_path), {})) == tmp_path  # the control: an adapter alone, no warning
    assert "LoRA adapter" not in caplog.text
    (tmp_path / "model.safetensors").write_bytes(b"")
    with caplog.at_level("WARNING"):
        assert find_adapter_folder(str(tmp_path), {}) is None
    assert "loading the full weights" in caplog.text and "model.safetensors" in caplog.text
