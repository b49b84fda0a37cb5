"""The web app as a Hugging Face Space folder (`sapiens2-hf space OUT_DIR`; layer 3). Nothing is uploaded.

The folder holds `app.py` (serves `sapiens2_hf.app.launch` with the chosen models, on 0.0.0.0:7860 as Spaces expect),
`requirements.txt` (this package with its `app` extra) and `README.md`, whose YAML front matter is the Space's
configuration (`sdk: gradio`, `sdk_version`, `app_file: app.py`;
https://huggingface.co/docs/hub/spaces-config-reference).
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Mapping

from .inference import DEMO_MODEL, task_names

SPACE_FILES = ("app.py", "requirements.txt", "README.md")

_APP_PY = '''"""{title}: the sapiens2_hf web app as a Hugging Face Space (written by `sapiens2-hf space`)."""

import os

from sapiens2_hf.app import launch

# task -> the model its tab starts with ("demo": tiny random weights; else a Hub id)
MODELS = {models}

if __name__ == "__main__":
    # Spaces route to port 7860 of every interface; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT override it
    launch(MODELS, host=os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0"),
           port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
'''


def _front_matter(title: str, sdk_version: str | None) -> str:
    lines = ["---", f"title: {json.dumps(title)}", "emoji: 🧍", "colorFrom: blue", "colorTo: indigo", "sdk: gradio"]
    if sdk_version:
        lines.append(f"sdk_version: {sdk_version}")
    lines += ["app_file: app.py", "pinned: false", "tags:", "- sapiens2", "- human-centric-vision", "---"]
    return "\n".join(lines)


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _check_models(models: Mapping[str, str], tasks) -> None:
    for task, source in models.items():
        if task not in tasks:
            raise ValueError(f"unknown task {task!r}; one of {', '.join(tasks)}.")
        if source != DEMO_MODEL and (Path(source).exists() or source.endswith(".safetensors")):
            raise ValueError(f"{task}={source}: a Space cannot read files of this machine; upload the model to the "
                             "Hub and give its id (or `demo`).")


def _readme(title: str, models: Mapping[str, str]) -> str:
    """The Space's README.md: its front matter and the table of its models."""
    body = [
        _front_matter(title, _installed_version("gradio")),
        "",
        f"# {title}",
        "",
        "Sapiens2 (Meta, ICLR 2026) human-centric vision models: pose (308 keypoints), body-part segmentation, "
        "surface normals, pointmap / depth, albedo and matting, served by the `sapiens2_hf` web app. Upload an image "
        "or a video in a task's tab; the overlay and the raw outputs (JSON, .npy, .ply) can be downloaded.",
        "",
        "| task | model |",
        "|---|---|",
        *(f"| {task} | `{source}` |" for task, source in models.items()),
        "",
        "`demo` is a tiny model with random weights (real output formats, random values). Written by "
        "`sapiens2-hf space`; the model weights follow the Sapiens2 License.",
        "",
    ]
    return "\n".join(body)


def write_space(out_dir: str | Path, models: Mapping[str, str] | None = None, title: str = "Sapiens2",
                requirement: str | None = None, overwrite: bool = False) -> Path:
    """Writes the Space folder.

    Args:
        out_dir (`str` or `Path`): the folder (created).
        models (`dict[str, str]`, *optional*): task -> `demo` or a Hub id (a Space cannot read this machine's files,
            so local folders and files are refused). Tasks not named start with `demo`.
        title (`str`): the Space's title.
        requirement (`str`, *optional*): the pip line that installs this package on the Space (default:
            `sapiens2_hf[app]==<installed version>`; e.g. `sapiens2_hf[app] @ git+https://github.com/<you>/<repo>`).
        overwrite (`bool`): replace `SPACE_FILES` in an existing folder (other files there are kept).

    Returns:
        The folder.

    Raises:
        `ValueError`: an unknown task, a local path as a model, or existing Space files without `overwrite=True`.
    """
    tasks = task_names()
    models = {task: DEMO_MODEL for task in tasks} | dict(models or {})
    _check_models(models, tasks)
    out = Path(out_dir)
    existing = [name for name in SPACE_FILES if (out / name).exists()]
    if existing and not overwrite:
        raise ValueError(f"{out} already holds {', '.join(existing)}; pass overwrite=True to replace them.")
    version = _installed_version("sapiens2_hf")
    requirement = requirement or (f"sapiens2_hf[app]=={version}" if version else "sapiens2_hf[app]")
    out.mkdir(parents=True, exist_ok=True)
    ordered = {task: models[task] for task in tasks}
    (out / "app.py").write_text(_APP_PY.format(title=title, models=json.dumps(ordered, indent=4)))
    (out / "requirements.txt").write_text(f"{requirement}\n")
    (out / "README.md").write_text(_readme(title, ordered))
    return out
