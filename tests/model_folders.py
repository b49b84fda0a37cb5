"""Tiny models and images for tests: saved folders for tests that run the CLI or load from disk, and the seeded in-memory pose
pipeline. A helper module, not a test module (tests import it; subprocess workers import it after putting tests/ on
`sys.path`)."""

from pathlib import Path

import numpy as np
import torch
from PIL import Image

import sapiens2_hf
from sapiens2_hf.processing import Sapiens2HFImageProcessor


def save_tiny_model(parent, task, seed=0):
    """`parent/model_<task>`: a seeded tiny random model of `task` and its processor at 64x48; returns the folder."""
    torch.manual_seed(seed)
    folder = parent / f"model_{task}"
    sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task)).save_pretrained(folder)
    Sapiens2HFImageProcessor(task=task, size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def write_images(folder: Path, *names: str, seed: int = 0) -> Path:
    """Seeded random 40x30 RGB images `folder/<name>` (the format follows each name's suffix); returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name in names:
        Image.fromarray(rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(folder / name)
    return folder


def tiny_pose_pipeline(**kwargs):
    """`pipeline("sapiens2-pose")` on a seeded (0) tiny random pose model with float32 RoPE, on the CPU."""
    from transformers import pipeline

    torch.manual_seed(0)
    model = sapiens2_hf.Sapiens2ForPoseEstimation(sapiens2_hf.tiny_config("pose", rope_dtype="float32")).eval()
    return pipeline("sapiens2-pose", model=model, device="cpu", **kwargs)
