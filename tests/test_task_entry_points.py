"""A task from an installed package: a toy package declares a 2-channel map task in the entry-point group
`sapiens2_hf.tasks` (its `.dist-info/entry_points.txt`, in a temporary folder put on the path), and `sapiens2-hf`, the
web app and `training_scripts/finetune.py` run it with no `main` of the user's. Control: the same runs without the
dist-info folder do not know the task.

Each run is a fresh interpreter (`PYTHONPATH`), as an installed package is seen: the registration lives there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.compat  # the plugin's registration reaches into transformers' registries

ROOT = Path(__file__).resolve().parents[1]
TASK = "plugin_uv"
PLUGIN = textwrap.dedent('''
    """A task of an installed package: four objects, its name typed once."""
    from dataclasses import dataclass

    import torch
    from torch import nn
    from transformers.utils import ModelOutput

    import sapiens2_hf


    @dataclass
    class PluginUVOutput(ModelOutput):
        loss: torch.Tensor | None = None
        uvs: torch.Tensor | None = None
        hidden_states: tuple | None = None
        attentions: tuple | None = None


    class PluginUVLoss(nn.Module):
        def forward(self, uvs, labels, mask=None):
            if uvs.shape[-2:] != labels.shape[-2:]:
                uvs = nn.functional.interpolate(uvs, size=labels.shape[-2:], mode="bilinear", align_corners=False)
            l1 = (uvs - labels).abs().mean()
            return l1, {"l1_loss": l1}


    class Sapiens2ForPluginUV(sapiens2_hf.Sapiens2TaskModel):
        task = "plugin_uv"
        loss_class = PluginUVLoss
        output_class = PluginUVOutput
        spec = sapiens2_hf.TaskSpec(num_labels=2)

        def __init__(self, config):
            super().__init__(config)
            self.build_task_layers(config)
            self.post_init()

        def forward(self, pixel_values, labels=None, mask=None, **kwargs):
            return self.decode(pixel_values, labels=labels, loss_targets=(mask,), **kwargs)
''')


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """A folder holding the toy package and its `.dist-info` (what `pip install` leaves in site-packages)."""
    folder = tmp_path_factory.mktemp("site")
    (folder / "plugin_uv_task.py").write_text(PLUGIN)
    info = folder / "plugin_uv_task-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-uv-task\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[sapiens2_hf.tasks]\n{TASK} = plugin_uv_task:Sapiens2ForPluginUV\n")
    return folder


def _run(args, *paths, cwd=None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([*map(str, paths), str(ROOT / "src")])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=900, cwd=cwd)


def _command(*argv):
    """`sapiens2-hf ARGV` as its console script runs it."""
    return ["-c", "import sys, sapiens2_hf_cli; sys.exit(sapiens2_hf_cli.main())", *map(str, argv)]


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("photo") / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(path)
    return path


def test_the_command_line_runs_an_installed_task(plugin, photo, tmp_path):
    model = tmp_path / "model"
    made = _run(_command("tiny", TASK, "--out", model), plugin)
    assert made.returncode == 0, made.stderr[-2000:]
    ran = _run(_command(TASK, photo, "--model", model, "--out", tmp_path / "out", "--device", "cpu", "--quiet",
                        "--threads", "1"), plugin)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert np.load(tmp_path / "out" / f"photo_{TASK}.npy").shape == (48, 64, 2)
    assert (tmp_path / "out" / f"photo_{TASK}.png").is_file()
    # control: without the dist-info the command does not know the task
    unknown = _run(_command(TASK, photo, "--model", model, "--out", tmp_path / "out2"))
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr and TASK in unknown.stderr


APP = f"""
import sys
from sapiens2_hf.app.inference import AppRunner, task_names
print("TASKS", " ".join(task_names()))
if "{TASK}" in task_names():
    result = AppRunner(sys.argv[1], device="cpu").run_image("{TASK}", sys.argv[2])
    print("SUMMARY", result.summary, "FILES", " ".join(sorted(p.name for p in result.files)))
    try:
        import gradio
    except ImportError:
        pass
    else:
        from sapiens2_hf.app import build_app
        app = build_app(device="cpu", work_dir=sys.argv[1])
        print("ENDPOINTS", " ".join(sorted(str(d.api_name) for d in app.fns.values() if d.api_name)))
"""


def test_the_app_serves_an_installed_task(plugin, photo, tmp_path):
    ran = _run(["-c", APP, str(tmp_path / "app"), str(photo)], plugin)
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in ran.stdout.splitlines() if " " in line}
    assert TASK in lines["TASKS"].split() and lines["SUMMARY"].startswith(f"{TASK}: 64x48 image")
    assert f"photo_{TASK}.npy" in lines["SUMMARY"]
    if "ENDPOINTS" in lines:  # the page has the task's tab, with its image and video endpoints
        assert {f"{TASK}_image", f"{TASK}_video"} <= set(lines["ENDPOINTS"].split())
    # control: without the dist-info the app has the official tasks only
    control = _run(["-c", APP, str(tmp_path / "app2"), str(photo)])
    assert control.returncode == 0, control.stderr[-2000:]
    assert TASK not in control.stdout and "SUMMARY" not in control.stdout


def test_finetune_script_trains_an_installed_task(plugin, tmp_path):
    pytest.importorskip("accelerate")
    import datasets

    rng = np.random.default_rng(0)
    rows = {"image": [rng.integers(0, 255, (64, 48, 3), dtype=np.uint8) for _ in range(4)],
            TASK: [rng.random((64, 48, 2), dtype=np.float32) for _ in range(4)]}
    datasets.Dataset.from_dict(rows).save_to_disk(tmp_path / "data")
    argv = [str(ROOT / "training_scripts" / "finetune.py"), "--task", TASK, "--preset", "tiny", "--dataset_name",
            str(tmp_path / "data"), "--do_train", "--output_dir", str(tmp_path / "run"), "--max_steps", "2",
            "--per_device_train_batch_size", "2", "--report_to", "none", "--use_cpu", "--save_strategy", "no",
            "--augment", "False", "--disable_tqdm", "true"]
    ran = _run(argv, plugin)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert (tmp_path / "run" / "config.json").is_file() and (tmp_path / "run" / "model.safetensors").is_file()
    assert f'"task": "{TASK}"' in (tmp_path / "run" / "config.json").read_text()
    # control: without the dist-info the task is not one of --task's choices
    control = _run([str(tmp_path / "run2") if arg == str(tmp_path / "run") else arg for arg in argv])
    assert control.returncode == 2 and TASK in control.stderr, control.stderr[-2000:]
