"""`sapiens2_hf.utils.atomic_io`: the one atomic-write helper (files and staged folders)."""

import errno
import json
import os
import stat

import pytest

from sapiens2_hf.utils import atomic_io
from sapiens2_hf.utils.atomic_io import (
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    replace_into_folder,
    staging_folder,
)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_are_written_whole_or_not_at_all(tmp_path):
    atomic_write_bytes(tmp_path / "a" / "b.bin", b"\x00\x01")
    atomic_write_text(tmp_path / "c.txt", "é\n")
    atomic_write_json(tmp_path / "d.json", {"x": [1, 2]}, indent=1, trailing_newline=True)
    atomic_write_bytes(tmp_path / "e.bin", b"fast", durable=False)
    assert (tmp_path / "a" / "b.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "c.txt").read_bytes() == "é\n".encode()
    text = (tmp_path / "d.json").read_text()
    assert text.endswith("\n") and json.loads(text) == {"x": [1, 2]}
    assert (tmp_path / "e.bin").read_bytes() == b"fast"

    def failing(file):
        file.write(b"partial")
        raise RuntimeError("disk full")

    (tmp_path / "keep.bin").write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(tmp_path / "keep.bin", failing)
    assert (tmp_path / "keep.bin").read_bytes() == b"old"
    with pytest.raises(ValueError, match="not JSON compliant"):  # refused before the file is touched
        atomic_write_json(tmp_path / "keep.bin", {"x": float("nan")}, allow_nan=False)
    assert (tmp_path / "keep.bin").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "c.txt", "d.json", "e.bin", "keep.bin"]
    # Control: a plain, non-atomic write of the same failing callback does leave the partial content.
    with pytest.raises(RuntimeError), open(tmp_path / "keep.bin", "wb") as file:
        failing(file)
    assert (tmp_path / "keep.bin").read_bytes() == b"partial"


def test_new_files_and_folders_follow_the_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        atomic_write_bytes(tmp_path / "f.bin", b"x")
        with staging_folder(tmp_path / "repo") as staging:
            staging_mode = _mode(staging)
    finally:
        os.umask(previous)
    assert _mode(tmp_path / "f.bin") == 0o640 and staging_mode == 0o750
    assert os.umask(previous) == previous  # the helper never changed the process umask


def test_staging_folder_is_unique_and_cleaned_up(tmp_path):
    with staging_folder(tmp_path / "repo") as first, staging_folder(tmp_path / "repo") as second:
        assert first != second and first.name.startswith(".repo.staging-") and first.parent == tmp_path
        (first / "x").write_text("x")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KeyError), staging_folder(tmp_path / "repo"):
        raise KeyError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_replace_into_a_new_folder_moves_the_staging_folder_whole(tmp_path):
    with staging_folder(tmp_path / "repo") as staging:
        (staging / "sub").mkdir()
        (staging / "sub" / "a.txt").write_text("a")
        (staging / "b.txt").write_text("b")
        written = replace_into_folder(staging, tmp_path / "repo")
    assert [str(p) for p in written] == ["b.txt", os.path.join("sub", "a.txt")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]
    assert (tmp_path / "repo" / "sub" / "a.txt").read_text() == "a"


def test_replace_into_an_existing_folder_touches_only_what_it_writes_and_the_stale_patterns(tmp_path):
    folder = tmp_path / "repo"
    (folder / ".git").mkdir(parents=True)
    (folder / ".git" / "HEAD").write_text("ref")
    for name, text in (("config.json", "old"), ("notes.md", "mine"), ("model-00001-of-00002.safetensors", "shard"),
                       ("model.safetensors.index.json", "index")):
        (folder / name).write_text(text)
    with staging_folder(folder) as staging:
        (staging / "config.json").write_text("new")
        (staging / "model.safetensors").write_text("weights")
        replace_into_folder(staging, folder, stale=("model-?????-of-?????.safetensors", "model.safetensors.index.json",
                                                    "model.safetensors"))
    assert sorted(p.name for p in folder.iterdir()) == [".git", "config.json", "model.safetensors", "notes.md"]
    assert (folder / "config.json").read_text() == "new" and (folder / "notes.md").read_text() == "mine"
    assert (folder / ".git" / "HEAD").read_text() == "ref"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


def test_a_move_across_filesystems_stays_atomic(tmp_path, monkeypatch):
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "a.txt").write_text("old")
    real_replace = os.replace
    calls = []

    def cross_device(source, destination):
        # The first rename (staging -> folder) crosses filesystems; the copy's rename beside the target does not.
        calls.append((str(source), str(destination)))
        if len(calls) == 1:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_replace(source, destination)

    monkeypatch.setattr(atomic_io.os, "replace", cross_device)
    with staging_folder(folder) as staging:
        (staging / "a.txt").write_text("new")
        replace_into_folder(staging, folder)
    assert (folder / "a.txt").read_text() == "new" and len(calls) == 2
    assert calls[1][1] == str(folder / "a.txt") and os.path.dirname(calls[1][0]) == str(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"] and os.listdir(folder) == ["a.txt"]
