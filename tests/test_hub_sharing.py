"""Saving, (fake) pushing and remote-code loading of every model class, offline."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

import sapiens2_hf
from sapiens2_hf.hub import push_to_hub
from sapiens2_hf.processing import image_processor_for_task

pytestmark = pytest.mark.compat

TASKS = [None, "pose", "seg", "normal", "pointmap", "albedo"]
FIELDS = {None: "last_hidden_state", "pose": "heatmaps", "seg": "logits", "normal": "normals", "pointmap": "pointmaps", "albedo": "albedos"}
# transformers' own classes, named explicitly: our repos have our model type, which vanilla Auto classes resolve only
# through the shipped remote code.
VANILLA_CLASSES = {None: "Sapiens2Model", "pose": "Sapiens2ForPoseEstimation", "seg": "Sapiens2ForSemanticSegmentation",
                   "normal": "Sapiens2ForNormalEstimation", "pointmap": "Sapiens2ForPointmapEstimation"}


class FakeHfApi:
    """Records the calls a push makes and stores the uploaded folder locally (there is no reachable Hub here)."""

    def __init__(self, root: Path):
        self.root, self.calls = root, []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))
        return f"https://hub.invalid/{repo_id}"

    def upload_folder(self, repo_id, folder_path, commit_message, **kwargs):
        self.calls.append(("upload_folder", repo_id, commit_message, sorted(os.listdir(folder_path))))
        destination = self.root / repo_id
        shutil.copytree(folder_path, destination, dirs_exist_ok=True)
        return {"commit_url": f"https://hub.invalid/{repo_id}/commit/0"}


BLOCK_SAPIENS2_HF = textwrap.dedent(
    """
    import sys
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name == "sapiens2_hf" or name.startswith("sapiens2_hf."):
                raise ImportError("sapiens2_hf is not available in this process")
    sys.meta_path.insert(0, _Block())
    """
)


def _run_isolated(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    return subprocess.run([sys.executable, "-c", BLOCK_SAPIENS2_HF + textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)


def test_push_writes_a_complete_repo_and_it_loads_everywhere(tmp_path):
    api = FakeHfApi(tmp_path / "hub")
    pixel_values = torch.randn(1, 3, 64, 48, generator=torch.Generator().manual_seed(0))
    expected = {}
    for task in TASKS:
        torch.manual_seed(0)
        model = sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task)).eval()
        repo_id = f"me/sapiens2-tiny-{task or 'backbone'}"
        processor = image_processor_for_task(task, size={"height": 64, "width": 48}) if task else None
        push_to_hub(model, repo_id, api=api, image_processor=processor)
        with torch.no_grad():
            expected[task] = getattr(model(pixel_values), FIELDS[task])
        folder = api.root / repo_id
        card = ModelCard.load(folder / "README.md")
        assert card.data.license == "other" and "sapiens2" in card.data.tags
        config = json.loads((folder / "config.json").read_text())
        assert config["auto_map"]["AutoModel"].startswith("modeling_sapiens2_hf.")
        assert (folder / "modeling_sapiens2_hf.py").is_file() and (folder / "configuration_sapiens2_hf.py").is_file()
        assert (folder / "loss_sapiens2.py").is_file()  # the task losses the models compute from `labels`
    create_calls = [c for c in api.calls if c[0] == "create_repo"]
    uploads = [c for c in api.calls if c[0] == "upload_folder"]
    assert [c[1] for c in create_calls] == [f"me/sapiens2-tiny-{t or 'backbone'}" for t in TASKS]
    assert all("model.safetensors" in c[3] and "README.md" in c[3] and "config.json" in c[3] for c in uploads)
    assert uploads[1][2] == "Upload Sapiens2 pose model with sapiens2_hf"
    torch.save({t: v for t, v in expected.items()}, tmp_path / "expected.pt")
    torch.save(pixel_values, tmp_path / "pixel_values.pt")

    # 1. A fresh process with sapiens2_hf installed loads each repo with our classes, exactly. It runs while the
    # blocked process below runs (each is one core's work for ~7 s, mostly imports).
    fresh = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import torch, sapiens2_hf
        expected = torch.load({str(tmp_path / 'expected.pt')!r}); x = torch.load({str(tmp_path / 'pixel_values.pt')!r})
        fields = {FIELDS!r}
        for task in {TASKS!r}:
            model = sapiens2_hf.model_class_for_task(task).from_pretrained({str(api.root)!r} + f"/me/sapiens2-tiny-{{task or 'backbone'}}")
            with torch.no_grad():
                assert torch.equal(getattr(model(x), fields[task]), expected[task]), task
        print("ok")
    """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    # 2. and 3. Without sapiens2_hf (one blocked process for the three checks: each process costs ~7 s of imports).
    # Vanilla transformers runs first, so that nothing the remote code registers can be what it loads.
    try:
        isolated = _run_isolated(f"""
            import numpy as np
            import torch, transformers
            from transformers import AutoModel, pipeline
            expected = torch.load({str(tmp_path / 'expected.pt')!r}); x = torch.load({str(tmp_path / 'pixel_values.pt')!r})
            fields = {FIELDS!r}

            # 3. Vanilla transformers' classes load the tasks they support with no remote code (float32 RoPE there).
            for task, name in {VANILLA_CLASSES!r}.items():
                model = getattr(transformers, name).from_pretrained({str(api.root)!r} + f"/me/sapiens2-tiny-{{task or 'backbone'}}")
                assert type(model).__module__.startswith("transformers.models.sapiens2"), type(model)
                with torch.no_grad():
                    drift = (getattr(model.eval()(x), fields[task]) - expected[task]).abs().max().item()
                assert drift < 0.1, (task, drift)
            print("vanilla ok")

            # 2. Remote code (trust_remote_code=True) gives our exact classes ...
            for task in {TASKS!r}:
                model = AutoModel.from_pretrained({str(api.root)!r} + f"/me/sapiens2-tiny-{{task or 'backbone'}}", trust_remote_code=True)
                assert type(model).__module__.startswith("transformers_modules"), type(model)
                with torch.no_grad():
                    assert torch.equal(getattr(model(x), fields[task]), expected[task]), task
            print("remote ok")

            # ... and the pipelines ship too: `pipeline(task, trust_remote_code=True)` runs model, processor and
            # pipeline from the repository's own files.
            image = np.random.default_rng(0).integers(0, 255, (80, 60, 3), dtype=np.uint8)
            for task, key in (("pose", None), ("seg", "segmentation"), ("albedo", "albedo")):
                runner = pipeline(model={str(api.root)!r} + f"/me/sapiens2-tiny-{{task}}", trust_remote_code=True)
                assert type(runner).__module__.startswith("transformers_modules"), type(runner)
                result = runner(image, boxes=[[5.0, 5.0, 50.0, 70.0]]) if task == "pose" else runner(image)
                shape = np.asarray(result[0]["keypoints"]).shape if task == "pose" else result[key].shape[:2]
                assert shape == ((308, 2) if task == "pose" else (80, 60)), (task, shape)
            print("remote pipelines ok")
        """, tmp_path)
    finally:  # the fresh process is waited for also when the blocked one fails
        fresh_out, fresh_err = fresh.communicate(timeout=300)
    assert isolated.returncode == 0, isolated.stdout + isolated.stderr
    done = [line for line in isolated.stdout.splitlines() if line.endswith(" ok")]
    assert done == ["vanilla ok", "remote ok", "remote pipelines ok"], isolated.stdout
    assert fresh.returncode == 0 and "ok" in fresh_out, fresh_err

    # With sapiens2_hf installed, the registered pipeline runs on the same repository without any remote code.
    from transformers import pipeline

    local = pipeline("sapiens2-pose", model=str(api.root / "me" / "sapiens2-tiny-pose"))
    assert type(local).__module__ == "sapiens2_hf.modeling.pipeline_sapiens2_hf"
    assert type(local.model) is sapiens2_hf.Sapiens2ForPoseEstimation


def test_save_for_hub_replaces_only_its_own_files(tmp_path):
    from sapiens2_hf.hub import save_for_hub

    model = sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg"))
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "old.txt").write_text("previous version")
    with pytest.raises(FileExistsError, match="not empty"):
        save_for_hub(model, tmp_path / "repo")
    save_for_hub(model, tmp_path / "repo", overwrite=True)
    # Files save_for_hub did not write are never deleted (see tests/test_field_training.py for .git and stale shards).
    assert (tmp_path / "repo" / "old.txt").read_text() == "previous version"
    assert (tmp_path / "repo" / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]  # no staging or backup folders left behind


@pytest.mark.parametrize("task", TASKS)
def test_card_snippets_run_against_a_tiny_model(task, tmp_path):
    """Every Python snippet of the rendered card runs, with the repo id pointing at a local tiny-model repository."""
    import re

    from sapiens2_hf.hub import save_for_hub

    repo_id = f"me/sapiens2-tiny-{task or 'backbone'}"
    model = sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task)).eval()
    processor = image_processor_for_task(task, size={"height": 64, "width": 48}) if task else None
    folder = save_for_hub(model, tmp_path / "repo", image_processor=processor, card_kwargs={"repo_id": repo_id})
    card = ModelCard.load(folder / "README.md")
    snippets = re.findall(r"```python\n(.*?)```", card.text, flags=re.DOTALL)
    assert len(snippets) == (1 if task == "albedo" else 2)  # ours, plus plain transformers where it has the class
    for snippet in snippets:
        namespace = {}
        exec(snippet.replace(repr(repo_id), repr(str(folder))), namespace)
        assert namespace["model"].config.hidden_size == 32
        if "predictor" in namespace:
            assert namespace["predictor"].model.config.task == task
