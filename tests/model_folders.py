"""Saved tiny model folders for tests that run the CLI or load from disk. A helper module, not a test module (tests
import it; subprocess workers import it after putting tests/ on `sys.path`)."""

import torch

import sapiens2_hf
from sapiens2_hf.processing import Sapiens2HFImageProcessor


def save_tiny_model(parent, task, seed=0):
    """`parent/model_<task>`: a seeded tiny random model of `task` and its processor at 64x48; returns the folder."""
    torch.manual_seed(seed)
    folder = parent / f"model_{task}"
    sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task)).save_pretrained(folder)
    Sapiens2HFImageProcessor(task=task, size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder
