"""Curation's hostile cases (issue 41): every value checked where it enters, nothing of the user's overwritten,
paths and shards answered in one line, a run that keeps nothing writes no unreadable dataset, a resumed run with
another embedding model refused, and image files of any shape decoded by the run layer's one decoder.

Each case has its control: the valid input still works.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from sapiens2_hf.cli.main import main
from sapiens2_hf.curation import CurationConfig, curate

pytestmark = pytest.mark.usefixtures("one_thread")


def _png(width: int, height: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _pile(tmp_path, files: dict[str, bytes], name: str = "pile"):
    folder = tmp_path / name
    folder.mkdir()
    for file_name, data in files.items():
        (folder / file_name).write_bytes(data)
    return folder


_HASH_ONLY = ["--skip", "person", "domain", "balance", "--threads", "1"]


@pytest.mark.parametrize("pair, named", [("min_sharpness=nan", "min_sharpness=nan"),
                                         ("max_hash_distance=-1", "max_hash_distance=-1"),
                                         ("min_luminance=2", "min_luminance=2.0"),
                                         ("stages=decode", "expected NAME=VALUE")])
def test_thresholds_are_checked_before_any_work(tmp_path, capsys, pair, named):
    pile = _pile(tmp_path, {"a.png": _png(64, 64)})
    out = tmp_path / "out"
    assert main(["curate", str(pile), "--out", str(out), "--threshold", pair, *_HASH_ONLY]) == 2
    assert named in capsys.readouterr().err
    assert not out.exists()  # nothing computed, nothing half-written
    with pytest.raises(ValueError, match=r"min_person_fraction=inf"):
        CurationConfig(min_person_fraction=float("inf"))
    # control: a valid value runs
    assert main(["curate", str(pile), "--out", str(out), "--threshold", "min_short_side=32", *_HASH_ONLY]) == 0


def test_out_among_the_inputs_is_refused_and_the_users_files_stay(tmp_path, capsys):
    pile = _pile(tmp_path, {"report.png": _png(64, 64), "summary.json": b'{"mine": true}'})
    before = {p.name: p.read_bytes() for p in pile.iterdir()}
    assert main(["curate", str(pile), "--out", str(pile), *_HASH_ONLY]) == 2
    assert "--out" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in pile.iterdir()} == before
    # control: a subfolder of the input folder is fine (folders are not read recursively)
    assert main(["curate", str(pile), "--out", str(pile / "curated"), "--threshold", "min_short_side=32",
                 *_HASH_ONLY]) == 0
    assert {p.name: p.read_bytes() for p in pile.iterdir() if p.is_file()} == before


def test_a_missing_local_input_is_named_not_looked_up(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["curate", "./missing", "--out", "out", *_HASH_ONLY]) == 2
    assert "./missing: no such file or folder" in capsys.readouterr().err


def test_a_corrupt_shard_is_one_line(tmp_path, capsys):
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "shard-00000.tar").write_bytes(b"this is not a tar archive" * 40)
    assert main(["curate", str(shards), "--out", str(tmp_path / "out"), *_HASH_ONLY]) == 2
    error = capsys.readouterr().err.strip()
    assert "shard" in error and "Traceback" not in error and len(error.splitlines()) == 1, error


def test_a_run_that_keeps_nothing_writes_no_dataset(tmp_path, capsys):
    pile = _pile(tmp_path, {"a.png": _png(40, 40), "b.png": _png(40, 40, seed=1)})
    out = tmp_path / "out"
    assert main(["curate", str(pile), "--out", str(out), *_HASH_ONLY]) == 0  # both under 256 px: dropped by size
    assert "no dataset written" in capsys.readouterr().out
    assert not (out / "dataset").exists()
    assert json.loads((out / "summary.json").read_text())["kept"] == 0
    # control: with a threshold that keeps them, the dataset is written and readable
    import datasets

    assert main(["curate", str(pile), "--out", str(tmp_path / "kept"), "--threshold", "min_short_side=32",
                 *_HASH_ONLY]) == 0
    assert len(datasets.load_from_disk(str(tmp_path / "kept" / "dataset"))) == 2


def _colour(images):
    vectors = np.array([np.asarray(image, np.float32).reshape(-1, 3).mean(0) + 1 for image in images])
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _brightness(images):
    return _colour(images)[:, ::-1].copy()


def test_a_resumed_run_with_another_embedding_model_is_refused(tmp_path):
    pile = _pile(tmp_path, {f"{k}.png": _png(64, 64, seed=k) for k in range(4)})
    config = CurationConfig(stages=("decode", "balance"), chunk_size=2, clusters=1)
    curate([str(pile)], tmp_path / "out", config=config, embedding_model=_colour, write_dataset=False, max_chunks=1)
    with pytest.raises(ValueError, match="embedding model"):
        curate([str(pile)], tmp_path / "out", config=config, embedding_model=_brightness, write_dataset=False)
    # control: the same model resumes
    result = curate([str(pile)], tmp_path / "out", config=config, embedding_model=_colour, write_dataset=False)
    assert result.summary["images"] == 4 and result.summary["chunks_computed_this_run"] == 1


def test_image_files_of_any_shape_decode_or_are_dropped_with_the_limit(tmp_path):
    pile = _pile(tmp_path, {"one.png": _png(1, 1), "thin.png": _png(300, 3), "strip.png": _png(20000, 2)})
    config = CurationConfig(stages=("decode", "size", "quality", "duplicates"), chunk_size=8)
    result = curate([str(pile)], tmp_path / "out", config=config, write_dataset=False)
    records = {record["source"].rsplit("/", 1)[-1]: record for record in result.records}
    assert records["one.png"]["stages"]["decode"]["verdict"] == "keep"  # a file's pixels are never ambiguous
    assert records["thin.png"]["stages"]["size"]["height"] == 3
    assert records["one.png"]["dropped_by"] == "size"  # control: the size stage still judges them
    strip = records["strip.png"]["stages"]["decode"]
    assert strip["verdict"] == "drop" and "aspect ratio" in strip["error"], strip
