"""Turning the official Sapiens2 zoo (local files) into complete Hugging Face repository folders."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from .convert_official import convert_official_checkpoint
from ..modeling.loading_sapiens2_hf import official_checkpoint_kind
from ..modeling.official_format_sapiens2_hf import OFFICIAL_FILENAME_PATTERN

logger = logging.getLogger(__name__)

# Headline results reported for Sapiens2 (the paper's summary figures). Their provenance is a secondary summary of the
# paper, not verified against the paper text, and only the 5B attribution of pose and seg is stated there; they are
# written into the 5B cards with that caveat and nowhere else.
REPORTED_RESULTS = {
    ("pose", "5b"): ({"oks_ap": 82.3}, "Sapiens2 internal pose benchmark (308 keypoints)"),
    ("seg", "5b"): ({"miou": 82.5}, "Sapiens2 internal body-part benchmark (29 classes)"),
}
RESULTS_CAVEAT = (
    "The evaluation numbers are those reported for Sapiens2 (paper summary; benchmark definitions and per-size "
    "results are not public). They were not re-measured by sapiens2_hf."
)


@dataclass
class PublishedRepo:
    source: Path
    repo_id: str
    folder: Path
    kind: str


def official_repo_id(filename: str) -> str | None:
    """`sapiens2_1b_pose.safetensors` -> `facebook/sapiens2-pose-1b` (the official naming), else None."""
    match = OFFICIAL_FILENAME_PATTERN.match(filename)
    if match is None:
        return None
    variant = match["variant"].replace("_", "-")
    return f"facebook/sapiens2-{match['task']}-{variant}"


def find_official_files(checkpoint_root: str | Path) -> list[Path]:
    """Official files under a checkpoint root laid out as the official code expects (`<root>/<task>/*.safetensors`),
    or directly in it."""
    root = Path(checkpoint_root)
    files = [p for p in sorted(root.rglob("*.safetensors")) if OFFICIAL_FILENAME_PATTERN.match(p.name)]
    if not files:
        raise FileNotFoundError(f"No sapiens2_<size>_<task>.safetensors files under {root}.")
    return files


def publish_official_zoo(
    checkpoint_root: str | Path,
    out_dir: str | Path,
    overwrite: bool = False,
    image_sizes: dict[str, tuple[int, int]] | None = None,
) -> list[PublishedRepo]:
    """Converts every official file under `checkpoint_root` into `out_dir/<repo name>/`, each verified by reloading
    and comparing outputs exactly (see `convert_official_checkpoint`). `image_sizes` maps a file name to its input
    size when that is not the native one (the official files all use 1024x768, the 4K one 4096x3072)."""
    published = []
    image_sizes = image_sizes or {}
    for source in find_official_files(checkpoint_root):
        repo_id = official_repo_id(source.name)
        kind = official_checkpoint_kind(source)
        variant = OFFICIAL_FILENAME_PATTERN.match(source.name)["variant"].replace("_", "-")
        results, dataset = REPORTED_RESULTS.get((kind, variant), (None, None))
        card_kwargs = {
            "repo_id": repo_id,
            "base_model": None if kind == "pretrain" else f"facebook/sapiens2-pretrain-{variant}",
            "source": f"the official checkpoint `{source.name}` (facebookresearch/sapiens2), converted with sapiens2_hf",
            "eval_results": results,
            "eval_dataset": dataset,
            "limitations": RESULTS_CAVEAT if results else "",
        }
        folder = Path(out_dir) / repo_id.split("/")[-1]
        logger.info("converting %s -> %s", source, folder)
        convert_official_checkpoint(
            source, folder, task="auto", overwrite=overwrite, card_kwargs=card_kwargs, image_size=image_sizes.get(source.name)
        )
        published.append(PublishedRepo(source=source, repo_id=repo_id, folder=folder, kind=kind))
    return published
