"""Exclusive run folders ("Nothing silent", round two, item 5): every entry point that writes a folder holds it
(`sapiens2_hf.utils.run_lock`), and a record the CLI keeps in it is merged, never replaced. Each test failed before the
fix (two runs into one folder both went ahead, their files mixed; a second CLI run replaced summary.json) and has its
control.

- a run into a folder another process holds (finetune, pretrain, CLI --out, save_for_hub, export): both wrote;
  now refused in one line naming the holder (pid, command, since) and the fix;
- a lock left by a process that is gone: taken over, with a logged note;
- a lock of another host, or one being written: refused (its process cannot be checked);
- the other processes of a launch: neither take the lock nor are refused;
- two sequential CLI runs into one --out: the second's summary.json replaced the first's; now merged per input.
"""

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

import sapiens2_hf
from sapiens2_hf.runs.errors import is_expected_error
from sapiens2_hf.cli.main import main as cli_main
from sapiens2_hf.export import export_model
from sapiens2_hf.hub import save_for_hub
from sapiens2_hf.pretraining.run import main as pretrain_main
from sapiens2_hf.training.run_setup import hold_output_dir
from sapiens2_hf.utils.run_lock import LOCK_FILE, RunFolderLockedError, read_lock, run_folder_lock

from model_folders import save_tiny_model
from model_folders import write_images as _images


ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
RUN = ["--device", "cpu", "--quiet", "--threads", "1"]
TINY = ["--preset", "tiny", "--max_steps", "1", "--use_cpu", "true", "--report_to", "none", "--input_height", "64",
        "--input_width", "48", "--per_device_train_batch_size", "2", "--save_strategy", "no", "--disable_tqdm", "true",
        "--dataloader_num_workers", "0", "--optim", "adamw_torch", "--synthetic_train_samples", "2",
        "--synthetic_image_size", "64", "--synthetic_eval_samples", "0"]
HOLDER_COMMAND = "finetune.py --task pose --output_dir runs/pose"
# A process that holds a folder until its stdin closes (then it releases the lock as any run does at its end).
HOLD = """import sys
from sapiens2_hf.utils.run_lock import run_folder_lock
with run_folder_lock(sys.argv[1], command=sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""

pytestmark = pytest.mark.usefixtures("one_thread")


@contextlib.contextmanager
def held_by_another_process(folder: Path, command: str = HOLDER_COMMAND):
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), command], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        line = process.stdout.readline().strip()
        assert line == "held", process.stderr.read()[-3000:]
        yield process
    finally:
        process.stdin.close()
        process.wait(timeout=60)


def finetune(argv):
    import importlib.util

    spec = importlib.util.spec_from_file_location("finetune_script", ROOT / "training_scripts" / "finetune.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def files(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@pytest.fixture(scope="module")
def seg_model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("models"), "seg")


def assert_names_the_holder(message: str, holder: subprocess.Popen, folder: Path) -> None:
    assert "\n" not in message, message
    assert f"{folder} is in use by another run (pid {holder.pid} on {socket.gethostname()}, " in message, message
    assert f"`{HOLDER_COMMAND}`, since 20" in message, message  # the holder's command and start time
    assert f"delete {folder / LOCK_FILE}" in message and "another folder" in message, message


# ------------------------------------------------------------------------------------------ refusing a held folder
def test_every_entry_point_refuses_a_folder_another_process_holds(tmp_path, seg_model, capsys):
    folder = tmp_path / "shared"
    photos = _images(tmp_path / "photos", "a.png")
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg"))
    with held_by_another_process(folder) as holder:
        before = files(folder)
        lock = read_lock(folder)
        assert before == [LOCK_FILE] and (lock["pid"], lock["command"]) == (holder.pid, HOLDER_COMMAND)
        calls = {
            "finetune.py": lambda: finetune(["--task", "pose", "--output_dir", str(folder), *TINY]),
            "pretrain.py": lambda: pretrain_main(["--image_folder", str(photos), "--output_dir", str(folder),
                                                  "--max_steps", "1", "--use_cpu", "true", "--report_to", "none"]),
            "save_for_hub": lambda: save_for_hub(model, folder, overwrite=True),
            "export_model": lambda: export_model(model, folder, format="onnx", overwrite=True),
        }
        for name, call in calls.items():
            with pytest.raises(RunFolderLockedError) as error:
                call()
            assert is_expected_error(error.value), name
            assert_names_the_holder(str(error.value), holder, folder)
        capsys.readouterr()
        assert cli_main(["seg", str(photos), "--model", str(seg_model), "--out", str(folder), *RUN]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("sapiens2-hf seg: error: "), err
        assert_names_the_holder(err[0], holder, folder)
        assert files(folder) == before and read_lock(folder) == lock  # nothing written, the holder's lock kept
    assert files(folder) == []  # the holder released its lock at its end
    # control: once the holder is done, the same runs go ahead
    assert cli_main(["seg", str(photos), "--model", str(seg_model), "--out", str(folder), *RUN]) == 0
    save_for_hub(model, tmp_path / "repo")
    assert (folder / "a_seg.png").is_file() and (tmp_path / "repo" / "config.json").is_file()
    assert not (folder / LOCK_FILE).exists() and not (tmp_path / "repo" / LOCK_FILE).exists()


def test_two_cli_processes_into_one_out_the_second_is_refused(tmp_path, seg_model):
    """Real processes: one holds --out (as a running command does), a second `sapiens2-hf` process is refused."""
    folder = tmp_path / "out"
    photos = _images(tmp_path / "photos", "a.png")
    command = [sys.executable, "-m", "sapiens2_hf.cli.main", "seg", str(photos), "--model", str(seg_model), "--out",
               str(folder), *RUN]
    with held_by_another_process(folder) as holder:
        second = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stderr[-3000:]
        assert "Traceback" not in second.stderr
        assert_names_the_holder(second.stderr.strip().splitlines()[-1], holder, folder)
        assert files(folder) == [LOCK_FILE]
    again = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (folder / "a_seg.png").is_file() and not (folder / LOCK_FILE).exists()


def test_the_lock_is_released_when_a_run_fails(tmp_path):
    folder = tmp_path / "run"
    with pytest.raises(OSError, match="missing.json"):  # fails after taking the lock: the data file is missing
        finetune(["--task", "pose", "--dataset", "coco", "--train_targets", str(tmp_path / "missing.json"),
                  "--output_dir", str(folder), *TINY])
    assert folder.is_dir() and not (folder / LOCK_FILE).exists()
    with pytest.raises(ZeroDivisionError):
        with run_folder_lock(tmp_path / "manual"):
            (tmp_path / "manual" / "partial.txt").write_text("x")
            1 / 0
    assert files(tmp_path / "manual") == ["partial.txt"]  # the run's own file stays, its lock is gone
    with pytest.raises(ZeroDivisionError):
        with run_folder_lock(tmp_path / "new" / "folder"):
            1 / 0
    assert not (tmp_path / "new" / "folder").exists()  # a run that wrote nothing leaves no folder of its own
    with run_folder_lock(folder):  # control: free again
        assert read_lock(folder)["pid"] == os.getpid()


# --------------------------------------------------------------------------------------------------- stale locks
def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _write_lock(folder: Path, **record) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    path.write_text(json.dumps({"host": socket.gethostname(), "started": "2020-01-01T00:00:00",
                                "command": "finetune.py --task seg (killed)", "token": "0", **record}))
    return path


def test_a_stale_lock_is_taken_over_with_a_note(tmp_path, seg_model, caplog):
    folder = tmp_path / "out"
    dead = _dead_pid()
    _write_lock(folder, pid=dead)
    photos = _images(tmp_path / "photos", "a.png")
    with caplog.at_level(logging.WARNING, logger="sapiens2_hf.utils.run_lock"):
        assert cli_main(["seg", str(photos), "--model", str(seg_model), "--out", str(folder), *RUN]) == 0
    notes = [record.getMessage() for record in caplog.records if "Took over the lock" in record.getMessage()]
    assert len(notes) == 1 and f"pid {dead} on {socket.gethostname()}" in notes[0], notes
    assert "finetune.py --task seg (killed)" in notes[0]
    assert (folder / "a_seg.png").is_file() and not (folder / LOCK_FILE).exists()
    # an empty lock file (its writer died between creating and filling it) is stale once it is old
    old = _write_lock(tmp_path / "empty", pid=dead)
    old.write_text("")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    with run_folder_lock(tmp_path / "empty"):
        assert read_lock(tmp_path / "empty")["pid"] == os.getpid()


def test_locks_whose_process_cannot_be_checked_are_not_taken_over(tmp_path):
    """Control for the takeover: a lock of another host (its pid means nothing here), one still being written and
    one of a live process are refused."""
    cases = {"other host": dict(pid=_dead_pid(), host="another-machine"), "being written": None,
             "live": dict(pid=os.getppid())}
    messages = {}
    for name, record in cases.items():
        folder = tmp_path / name.replace(" ", "_")
        path = _write_lock(folder, **(record or {"pid": 1}))
        if record is None:
            path.write_text("")  # fresh: its writer may be filling it right now
        with pytest.raises(RunFolderLockedError) as error:
            with run_folder_lock(folder):
                pass
        messages[name] = str(error.value)
        assert f"delete {path}" in messages[name] and path.exists(), name
    assert "on another-machine" in messages["other host"] and "empty or unreadable" in messages["being written"]


# ----------------------------------------------------------------------------------------- processes of a launch
def test_only_the_main_process_of_a_launch_takes_the_lock(tmp_path):
    folder = tmp_path / "run"
    with held_by_another_process(folder) as holder:
        # another rank of a launch whose main process holds the folder: not refused, the lock untouched
        with hold_output_dir(SimpleNamespace(output_dir=str(folder), process_index=1)):
            assert read_lock(folder)["pid"] == holder.pid
        with pytest.raises(RunFolderLockedError):  # the main process of a second launch is refused
            with hold_output_dir(SimpleNamespace(output_dir=str(folder), process_index=0)):
                pass
    # a run holding its folder may call what holds it again (save_for_hub into its own --output_dir)
    with hold_output_dir(SimpleNamespace(output_dir=str(folder), process_index=0)):
        with run_folder_lock(folder):
            pass
        assert read_lock(folder)["pid"] == os.getpid()
    assert not (folder / LOCK_FILE).exists()


# ---------------------------------------------------------------------------------------- summary.json is merged
def test_a_second_cli_run_into_one_out_merges_summary_json(tmp_path, seg_model, capsys):
    out = tmp_path / "out"
    first = _images(tmp_path / "first", "a.png", "a.jpg")
    broken = tmp_path / "broken" / "bad.png"
    broken.parent.mkdir()
    broken.write_bytes(b"not an image")
    second = _images(tmp_path / "second", "b.png", seed=1)

    assert cli_main(["seg", str(first), str(broken), "--model", str(seg_model), "--out", str(out), *RUN]) == 1
    one = json.loads((out / "summary.json").read_text())
    assert [entry["input"] for entry in one["skipped"]] == [str(broken)] and one["processed"] == 2
    assert one["output_names"] == {str(first / "a.png"): "a.png", str(first / "a.jpg"): "a.jpg"}

    assert cli_main(["seg", str(second), "--model", str(seg_model), "--out", str(out), *RUN]) == 0  # 0: its own
    two = json.loads((out / "summary.json").read_text())
    assert [entry["input"] for entry in two["skipped"]] == [str(broken)]  # the first run's record is kept
    assert two["output_names"] == one["output_names"] and two["processed"] == 1 and two["runs"] == 2
    assert {"a.png_seg.png", "a.jpg_seg.png", "b_seg.png"} <= {path.name for path in out.iterdir()}

    # control: an input the new run takes again replaces its old entry (here: the broken file, now repaired)
    Image.fromarray(np.zeros((40, 30, 3), np.uint8)).save(broken, format="PNG")
    assert cli_main(["seg", str(broken), "--model", str(seg_model), "--out", str(out), *RUN]) == 0
    three = json.loads((out / "summary.json").read_text())
    assert three["skipped"] == [] and three["runs"] == 3 and three["output_names"] == one["output_names"]
    capsys.readouterr()
