"""Input enumeration (layer 1, stdlib only): which files a run reads, what it names their outputs, and the rule that
`--out` is never among the inputs.

- `IMAGE_SUFFIXES`, `VIDEO_SUFFIXES`: the one list of the files the house reads as images and videos (training data
  folders, pretraining folders, predict, pose3d and curation alike).
- `collect_files(inputs, skip)`: image and video files of files and folders (not recursive), each once;
  `skip(entry, reason)` hears of URLs, missing and non-regular inputs and folders without images.
- `is_dataset_folder(path)`: a `datasets.save_to_disk` folder (read by `datasets.load_from_disk`).
- `check_out_not_in_inputs(out, inputs, files, option)`: refuses an output folder equal to an input folder or the
  folder of an input file (a subfolder is fine: folders are read without recursion).
- `output_names(units, reserved)`: one output name per input, injective over a run.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Iterable, Sequence

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})
VIDEO_SUFFIXES = frozenset({".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v"})


def is_image_file(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def image_files(folder: str | os.PathLike, recursive: bool = False) -> list[Path]:
    """The image files of `folder` (sorted; with `recursive`, of its subfolders too)."""
    found = Path(folder).rglob("*") if recursive else Path(folder).iterdir()
    return sorted(path for path in found if path.is_file() and is_image_file(path))


def is_dataset_folder(path: str | os.PathLike) -> bool:
    """A folder written by `datasets`' `save_to_disk` (a Dataset or a DatasetDict)."""
    path = Path(path)
    return path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file())


def collect_files(inputs: Iterable[str], skip: Callable[[str, str], None]) -> tuple[list[Path], list[Path]]:
    """The image and video files of the inputs, each once (a file given twice, or in a folder and by name, is read
    once). URLs, missing inputs and inputs that are not regular files (a FIFO, socket or device: reading one blocks
    until another process writes to it) go to `skip(entry, reason)`; so does a folder with no image or video file;
    other files inside a folder (notes, json, ...) are ignored, a file given by name is read whatever its suffix."""
    images, videos, seen = [], [], set()
    for entry in inputs:
        if entry.startswith(("http://", "https://")):
            skip(entry, "a URL: the command reads local files only (download it first)")
            continue
        path = Path(entry)
        candidates = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        if path.is_dir() and not any(p.suffix.lower() in IMAGE_SUFFIXES | VIDEO_SUFFIXES for p in candidates):
            skip(entry, _empty_folder_reason(path))
            continue
        for candidate in candidates:
            suffix = candidate.suffix.lower()
            if not candidate.exists():
                skip(str(candidate), "no such file or folder")
            elif not candidate.is_file():
                skip(str(candidate), "not a regular file (a FIFO, socket or device): not read")
            elif candidate.resolve() in seen:
                continue
            elif suffix in VIDEO_SUFFIXES or suffix in IMAGE_SUFFIXES or not path.is_dir():
                seen.add(candidate.resolve())
                (videos if suffix in VIDEO_SUFFIXES else images).append(candidate)
    return images, videos


def _empty_folder_reason(folder: Path) -> str:
    """Why an input folder gives no input: none of its files is an image or video; folders are not read
    recursively, so its subfolders (named, up to 3) are the likely inputs."""
    subfolders = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not subfolders:
        return "a folder without image or video files"
    shown = ", ".join(subfolders[:3]) + (", ..." if len(subfolders) > 3 else "")
    return (f"no images in {folder}; it has subfolders ({shown}), which are not read: pass them as inputs "
            f"(e.g. {folder / subfolders[0]})")


def check_out_not_in_inputs(out: str | os.PathLike, inputs: Iterable[str], files: Iterable[Path],
                            option: str = "--out") -> None:
    """Refuses an output folder that is an input folder or the folder of an input file: outputs written among the
    inputs would be read back as inputs by the next run, and their names can be those of the user's own files,
    which would be replaced. A subfolder of an input folder is fine: folders are not read recursively."""
    out = Path(out)
    if not out.is_dir():
        return
    holders = [(Path(entry), "an input folder") for entry in inputs if Path(entry).is_dir()]
    holders += [(Path(path).parent, f"the folder of the input {path}") for path in files]
    for holder, what in holders:
        if holder.is_dir() and os.path.samefile(out, holder):
            raise ValueError(f"{option} {out} is {what}: the outputs would mix with the inputs (a rerun reads them "
                             "back as inputs, and they could replace files of yours); use another folder, e.g. "
                             f"{option} {holder / 'sapiens2-hf-out'} (folders are not read recursively).")


def _output_name(path: Path, level: int) -> str:
    if level == 0:
        return path.stem
    if level == 1:
        return path.name
    return f"{path.name}-{hashlib.sha256(os.fsencode(path.resolve())).hexdigest()[:10]}"


def output_names(units: Sequence[tuple[Path, Sequence[str]]], reserved: Iterable[str] = ()) -> list[str]:
    """The output name of every input `(path, the suffixes of the entries it writes)`: injective over a run.

    An input is named by the first of these under which no entry it writes clashes with another input's: its stem
    (`a.png` -> `a`), its file name (`a.png` while `a.jpg` is an input too), its file name and a hash of its
    resolved path (`a.png-1c9e05d2f3`, for an `a.png` in two folders). Entries are compared without letter case
    (case-insensitive file systems); `reserved` entries (a run's records) clash with every input. All inputs of a
    clash move on together, so a name does not depend on the order of the inputs; compute names before sharding."""
    reserved = {entry.casefold() for entry in reserved}
    levels = [0] * len(units)
    while True:
        names = [_output_name(Path(path), level) for (path, _), level in zip(units, levels)]
        owners: dict[str, set[int]] = {}
        for k, (name, (_, suffixes)) in enumerate(zip(names, units)):
            for suffix in suffixes:
                owners.setdefault((name + suffix).casefold(), set()).add(k)
        clashing = {k for entry, ks in owners.items() if len(ks) > 1 or entry in reserved for k in ks}
        moving = [k for k in clashing if levels[k] < 2]  # hashed names end in hex digits: they never clash
        if not moving:
            return names
        for k in moving:
            levels[k] += 1


__all__ = ["IMAGE_SUFFIXES", "VIDEO_SUFFIXES", "check_out_not_in_inputs", "collect_files", "image_files",
           "is_dataset_folder", "is_image_file", "output_names"]
