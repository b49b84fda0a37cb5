"""Access to the official-code fixtures copied into tests/fixtures/official (see its README.md for provenance)."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

FIXTURES = Path(__file__).parent / "fixtures" / "official"

# case -> (class name, {our output field: fixture tensor name})
MODEL_CASES = {
    "pretrain": ("Sapiens2Model", {"last_hidden_state": "last_hidden_state"}),
    "pose": ("Sapiens2ForPoseEstimation", {"heatmaps": "heatmaps"}),
    "seg": ("Sapiens2ForSemanticSegmentation", {"logits": "logits"}),
    "normal": ("Sapiens2ForNormalEstimation", {"normals": "normals"}),
    "pointmap": ("Sapiens2ForPointmapEstimation", {"pointmaps": "pointmaps", "scales": "scales"}),
    "albedo": ("Sapiens2ForAlbedoEstimation", {"albedos": "albedo"}),
}
ROPE_SUFFIX = {"bfloat16": "", "float32": "_rope_fp32"}


def case_dir(case: str) -> Path:
    path = FIXTURES / case
    if not path.is_dir():
        raise FileNotFoundError(f"Fixture case {case} is missing from {FIXTURES}; the suite must be self-contained.")
    return path


def load_case(case: str) -> tuple[dict, dict[str, torch.Tensor], Path]:
    """Returns (meta, reference tensors, weights file path) of a fixture case."""
    folder = case_dir(case)
    meta = json.loads((folder / "meta.json").read_text())
    return meta, load_file(folder / "case.safetensors"), folder / meta["weights_file"]


def compare(actual: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    diff = (actual.double() - reference.double()).abs()
    return {
        "max_abs": diff.max().item(),
        "mean_abs": diff.mean().item(),
        "rel_l2": (diff.norm() / reference.double().norm()).item(),
    }


def within(stats: dict[str, float], tolerance: dict[str, float]) -> bool:
    return all(stats[key] <= tolerance[key] for key in ("max_abs", "mean_abs", "rel_l2"))
