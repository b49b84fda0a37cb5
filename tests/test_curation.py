"""Curation of pretraining data (issue 33): every stage drops the known-bad image meant for it and keeps it when the
stage is off; near-duplicates collapse to one; a killed run resumes without recomputing finished chunks; the output
is read by pretraining as it is; folders, `save_to_disk` datasets and WebDataset shards come in; the command and its
report.

The person and embedding stages are given small functions here (true masks of the rendered humans, colour
embeddings), so each test pins the stage's own logic; `PersonSegmenter` and `BackboneEmbedder` run the real
Sapiens2 models (a tiny random one below), and `benchmarks/bench_curation.py` measures the stages with a fine-tuned
segmentation model.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sapiens2_hf.cli.main import main
from sapiens2_hf.curation import BackboneEmbedder, CurationConfig, PersonSegmenter, curate, kmeans
from sapiens2_hf.curation.synthetic_mix import spoil, write_mixed_set
from sapiens2_hf.data.synthetic import render_sample

pytestmark = pytest.mark.usefixtures("one_thread")


def _no_embeddings(images):
    return np.zeros((len(images), 0), np.float32)


def _mean_colour(images):
    """A 3-d unit embedding: the image's mean colour (two images of one scene are near each other)."""
    vectors = np.array([np.asarray(image, np.float32).reshape(-1, 3).mean(0) + 1 for image in images])
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _folder(tmp_path, name, files: dict[str, bytes]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file_name, data in files.items():
        (folder / file_name).write_bytes(data)
    return folder


@pytest.fixture(scope="module")
def humans():
    """Two rendered humans (256x192) with their true person masks."""
    return [render_sample(seed, height=320, width=256, num_people=1) for seed in (11, 12)]


def _run(folder, out, stages, **kwargs):
    config = CurationConfig(stages=stages, cascade=kwargs.pop("cascade", True), chunk_size=kwargs.pop("chunk_size", 4),
                            **kwargs.pop("thresholds", {}))
    kwargs.setdefault("embedding_model", _no_embeddings)
    result = curate([str(folder)], out, config=config, write_dataset=kwargs.pop("write_dataset", False), **kwargs)
    return {Path(r["source"]).name: r for r in result.records}, result


@pytest.mark.parametrize("kind, stage", [("corrupt", "decode"), ("tiny", "size"), ("blurred", "quality"),
                                         ("jpeg", "quality"), ("dark", "quality")])
def test_each_image_stage_drops_its_bad_image_and_keeps_it_when_off(humans, tmp_path, kind, stage):
    rng = np.random.default_rng(0)
    good, _ = spoil("good", humans[0], rng)
    bad, suffix = spoil(kind, humans[1], rng)
    folder = _folder(tmp_path, "in", {"good.png": good, f"bad{suffix}": bad})
    records, _ = _run(folder, tmp_path / "on", ("decode", "size", "quality"))
    assert records["good.png"]["verdict"] == "keep"
    assert records[f"bad{suffix}"]["dropped_by"] == stage
    if stage == "decode":  # not switchable: the control is the same image, whole
        whole, _ = spoil("good", humans[1], rng)
        folder = _folder(tmp_path, "whole", {"bad.png": whole})
        records, _ = _run(folder, tmp_path / "off", ("decode", "size", "quality"))
        assert records["bad.png"]["verdict"] == "keep"
        return
    records, _ = _run(folder, tmp_path / "off", tuple(s for s in ("decode", "size", "quality") if s != stage))
    assert records[f"bad{suffix}"]["verdict"] == "keep", records[f"bad{suffix}"]


def test_person_stage_drops_a_scene_without_people(humans, tmp_path):
    rng = np.random.default_rng(0)
    good, _ = spoil("good", humans[0], rng)
    empty, _ = spoil("no_person", humans[1], rng)
    masks = {hashlib.sha1(np.asarray(Image.open(io.BytesIO(good)).convert("RGB")).tobytes()).hexdigest():
             humans[0]["mask"]}

    def true_masks(images):  # the rendered person's mask; nobody in the painted-out scene
        return [masks.get(hashlib.sha1(np.ascontiguousarray(image).tobytes()).hexdigest(),
                          np.zeros(image.shape[:2], bool)) for image in images]

    folder = _folder(tmp_path, "in", {"person.png": good, "scene.png": empty})
    records, _ = _run(folder, tmp_path / "on", ("decode", "person"), person_model=true_masks)
    assert records["person.png"]["verdict"] == "keep"
    assert records["person.png"]["stages"]["person"]["person_fraction"] > 0.03
    assert records["scene.png"]["dropped_by"] == "person"
    records, _ = _run(folder, tmp_path / "off", ("decode",), person_model=true_masks)
    assert records["scene.png"]["verdict"] == "keep"
    with pytest.raises(ValueError, match="person_model="):
        _run(folder, tmp_path / "missing", ("decode", "person"))


def test_duplicates_collapse_to_the_best_copy(humans, tmp_path):
    rng = np.random.default_rng(0)
    files = {"a.png": spoil("good", humans[0], rng)[0], "b.png": spoil("good", humans[1], rng)[0],
             "a_copy1.jpg": spoil("duplicate", humans[0], rng)[0], "a_copy2.jpg": spoil("duplicate", humans[0], rng)[0]}
    folder = _folder(tmp_path, "in", files)
    records, _ = _run(folder, tmp_path / "on", ("decode", "duplicates"))
    kept = sorted(name for name, r in records.items() if r["verdict"] == "keep")
    assert kept == ["a.png", "b.png"], {n: r["stages"]["duplicates"] for n, r in records.items()}
    assert records["a_copy1.jpg"]["stages"]["duplicates"]["cluster_size"] == 3
    records, _ = _run(folder, tmp_path / "off", ("decode",))
    assert all(r["verdict"] == "keep" for r in records.values())


def _coloured(colour, size=(64, 48), seed=0):
    rng = np.random.default_rng(seed)
    image = np.clip(np.array(colour, np.float32) + rng.normal(0, 8, (*size, 3)), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def test_domain_stage_keeps_images_near_the_reference(tmp_path):
    folder = _folder(tmp_path, "in", {"red.png": _coloured((220, 30, 30)), "blue.png": _coloured((30, 30, 220))})
    reference = _folder(tmp_path, "ref", {f"r{k}.png": _coloured((200 + 10 * k, 40, 30), seed=k) for k in range(3)})
    records, _ = _run(folder, tmp_path / "on", ("decode", "domain"), embedding_model=_mean_colour,
                      reference=[str(reference)], thresholds={"min_reference_similarity": 0.95})
    assert records["red.png"]["verdict"] == "keep" and records["blue.png"]["dropped_by"] == "domain"
    assert records["red.png"]["stages"]["domain"]["reference_similarity"] > 0.99
    records, _ = _run(folder, tmp_path / "off", ("decode",), embedding_model=_mean_colour, reference=[str(reference)])
    assert records["blue.png"]["verdict"] == "keep"


def test_balance_caps_the_majority_cluster(tmp_path):
    files = {f"red{k}.png": _coloured((220, 30, 30), seed=k) for k in range(8)}
    files.update({f"blue{k}.png": _coloured((30, 30, 220), seed=k) for k in range(2)})
    folder = _folder(tmp_path, "in", files)
    records, _ = _run(folder, tmp_path / "on", ("decode", "balance"), embedding_model=_mean_colour,
                      thresholds={"clusters": 2, "cluster_cap": 3})
    kept = [name for name, r in records.items() if r["verdict"] == "keep"]
    assert sum(name.startswith("red") for name in kept) == 3 and sum(name.startswith("blue") for name in kept) == 2
    records, _ = _run(folder, tmp_path / "off", ("decode",), embedding_model=_mean_colour)
    assert all(r["verdict"] == "keep" for r in records.values())
    labels = kmeans(np.array([[0, 0], [0, 0.1], [5, 5], [5, 5.1]], np.float64), 2)
    assert labels[0] == labels[1] != labels[2] == labels[3]


_KILLED_RUN = """
import os, signal, sys
import numpy as np
from sapiens2_hf.curation import CurationConfig, curate
def stop(number):
    if number == 1:
        os.kill(os.getpid(), signal.SIGKILL)   # a kill -9 right after the second chunk is written
curate([sys.argv[1]], sys.argv[2], config=CurationConfig(stages=("decode", "size", "quality", "duplicates"),
       chunk_size=2), embedding_model=lambda images: np.zeros((len(images), 0), np.float32), on_chunk=stop)
"""


def test_a_killed_run_resumes_without_recomputing_finished_chunks(humans, tmp_path):
    rng = np.random.default_rng(0)
    files = {f"{k}.png": spoil(kind, humans[k % 2], rng)[0] for k, kind in
             enumerate(("good", "good", "blurred", "tiny", "good", "dark", "good"))}
    folder = _folder(tmp_path, "in", files)
    out = tmp_path / "out"
    killed = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(folder), str(out)], capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    state = out / ".sapiens2-hf" / "done" / "curate" / "chunks"  # the run layer's resume markers
    finished = sorted(p.name for p in state.glob("chunk_*.json"))
    assert finished == ["chunk_000000.json", "chunk_000001.json"]
    written = {name: (state / name).stat().st_mtime_ns for name in finished}
    assert not (out / "records.jsonl").exists()
    records, result = _run(folder, out, ("decode", "size", "quality", "duplicates"), chunk_size=2,
                           write_dataset=True)
    assert result.summary["chunks_computed_this_run"] == 2  # chunks 2 and 3 (7 images, 2 per chunk)
    assert {name: (state / name).stat().st_mtime_ns for name in finished} == written
    assert len(records) == 7 and len((out / "records.jsonl").read_text().splitlines()) == 7
    # the same verdicts as a run from scratch
    fresh, _ = _run(folder, tmp_path / "fresh", ("decode", "size", "quality", "duplicates"), chunk_size=2)
    assert {n: r["verdict"] for n, r in records.items()} == {n: r["verdict"] for n, r in fresh.items()}


def test_output_is_pretraining_data_and_inputs_can_be_datasets_and_shards(humans, tmp_path):
    import datasets

    from sapiens2_hf.pretraining.multicrop import PretrainingImageDataset

    rng = np.random.default_rng(0)
    good = [spoil("good", human, rng)[0] for human in humans]
    blurred = spoil("blurred", humans[0], rng)[0]
    stages = ("decode", "size", "quality")
    # a save_to_disk dataset of encoded images
    table = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in (*good, blurred)]},
                                       features=datasets.Features({"image": datasets.Image()}))
    table.save_to_disk(str(tmp_path / "table"))
    records, result = _run(tmp_path / "table", tmp_path / "from_table", stages, write_dataset=True)
    assert [r["verdict"] for r in records.values()] == ["keep", "keep", "drop"]
    curated = datasets.load_from_disk(str(result.dataset_path))
    assert len(curated) == 2 and curated.column_names == ["image", "source", "curation"]
    item = PretrainingImageDataset(curated)[0]  # what pretrain.py --dataset_name reads
    assert item["image"].shape == (3, 320, 256)
    assert json.loads(curated[0]["curation"])["quality"]["verdict"] == "keep"
    # WebDataset .tar shards
    shards = tmp_path / "shards"
    shards.mkdir()
    for number, images in enumerate(((good[0], blurred), (good[1],))):
        with tarfile.open(shards / f"shard-{number:05d}.tar", "w") as tar:
            for k, data in enumerate(images):
                info = tarfile.TarInfo(f"sample{number}{k}.png")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    records, result = _run(shards, tmp_path / "from_shards", stages, write_dataset=True)
    assert sorted(r["verdict"] for r in records.values()) == ["drop", "keep", "keep"]
    assert len(datasets.load_from_disk(str(result.dataset_path))) == 2


def test_real_models_segment_and_embed(tmp_path):
    from sapiens2_hf.hub.tiny_models import save_tiny_model

    seg = save_tiny_model("seg", tmp_path / "seg")
    image = render_sample(3, height=128, width=96, num_people=1)["image"]
    (mask,) = PersonSegmenter(seg, device="cpu")([image])
    assert mask.shape == image.shape[:2] and mask.dtype == bool
    vectors = BackboneEmbedder(seg, device="cpu")([image, image[:, ::-1]])
    assert vectors.shape[0] == 2 and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)


def test_command_writes_dataset_records_and_report(humans, tmp_path, capsys):
    rng = np.random.default_rng(0)
    folder = _folder(tmp_path, "in", {"good.png": spoil("good", humans[0], rng)[0],
                                      "tiny.png": spoil("tiny", humans[1], rng)[0],
                                      "broken.png": spoil("corrupt", humans[1], rng)[0]})
    out = tmp_path / "out"
    code = main(["curate", str(folder), "--out", str(out), "--skip", "person", "duplicates", "balance",
                 "--threshold", "min_short_side=128", "--threads", "1"])
    assert code == 0, capsys.readouterr().err
    assert "3 image(s), kept 1" in capsys.readouterr().out
    for name in ("report.html", "report.png", "records.jsonl", "summary.json", "dataset/dataset_info.json"):
        assert (out / name).is_file(), name
    picture = Image.open(out / "report.png")
    assert picture.width == 1200 and picture.height > 400
    assert "dropped by size" in (out / "report.html").read_text()
    assert main(["curate", str(folder), "--out", str(tmp_path / "x"), "--threshold", "min_sharpnes=1"]) == 2
    assert "min_sharpness" in capsys.readouterr().err


def test_mixed_set_labels(tmp_path):
    labels = write_mixed_set(tmp_path / "mix", {"good": 2, "duplicate": 1, "corrupt": 1}, height=96, width=72)
    assert [l["kind"] for l in labels] == ["good", "good", "duplicate", "corrupt"]
    assert labels[2]["duplicate_of"] == "good_0000.png"
    assert os.path.getsize(tmp_path / "mix" / "corrupt_0000.png") > 0


@pytest.mark.slow
def test_two_processes_under_accelerate_launch_share_the_chunks(humans, tmp_path, free_port):
    """`accelerate launch` of two CPU processes: each computes every other chunk, the main one writes the outputs;
    the verdicts are those of one process."""
    launcher = Path(sys.executable).parent / "accelerate"
    if not launcher.is_file():
        pytest.skip("accelerate's launcher is not installed next to this interpreter")
    rng = np.random.default_rng(0)
    kinds = ("good", "tiny", "good", "blurred", "good", "dark", "good", "good")
    folder = _folder(tmp_path, "in", {f"{k}_{kind}.png": spoil(kind, humans[k % 2], rng)[0]
                                      for k, kind in enumerate(kinds)})
    arguments = ["curate", str(folder), "--skip", "person", "duplicates", "balance", "--chunk-size", "2",
                 "--threads", "1"]
    assert main([*arguments, "--out", str(tmp_path / "one")]) == 0
    command = [str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1",
               "--main_process_port", str(free_port), "-m", "sapiens2_hf.cli.main", *arguments,
               "--out", str(tmp_path / "two")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    one, two = ([json.loads(line) for line in (tmp_path / name / "records.jsonl").read_text().splitlines()]
                for name in ("one", "two"))
    assert [r["verdict"] for r in one] == [r["verdict"] for r in two] and len(two) == 8
    assert {r["computed_by"] for r in two} == {0, 1}
    assert {r["computed_by"] for r in two[:2]} == {0} and {r["computed_by"] for r in two[2:4]} == {1}


def test_a_users_folder_and_another_runs_chunks_are_not_taken_over(humans, tmp_path):
    rng = np.random.default_rng(0)
    folder = _folder(tmp_path, "in", {"a.png": spoil("good", humans[0], rng)[0]})
    out = tmp_path / "out"
    (out / "dataset").mkdir(parents=True)
    (out / "dataset" / "mine.txt").write_text("the user's own file")
    with pytest.raises(ValueError, match="not written by a curation run"):
        _run(folder, out, ("decode", "size"), write_dataset=True)
    assert (out / "dataset" / "mine.txt").read_text() == "the user's own file"
    # control: a folder of our own is replaced by a rerun, twice
    _run(folder, tmp_path / "ours", ("decode", "size"), write_dataset=True)
    _run(folder, tmp_path / "ours", ("decode", "size"), write_dataset=True)
    # another run's finished chunks (other settings) are refused, not reused
    with pytest.raises(ValueError, match="another curation run"):
        _run(folder, tmp_path / "ours", ("decode", "size"), thresholds={"min_short_side": 512})
