"""The curation run: a pile of images in, pretraining data out (`sapiens2-hf curate`, `curate(...)`).

Stages, in order; each but `decode` can be switched off (`CurationConfig.stages`), and each records its score(s) and
verdict per image:

| stage | measures | drops an image when (defaults) |
|---|---|---|
| `decode` | opens and decodes it, converts to RGB | it cannot be decoded |
| `size` | height, width, aspect = height / width | the short side is under `min_short_side` (256), or the aspect is outside [`min_aspect`, `max_aspect`] ([0.5, 2.5]; the pretraining input is 1024x768, aspect 1.33) |
| `quality` | sharpness (Laplacian variance of a 256-px-short-side copy), exposure (mean luminance, clipped fraction), JPEG blockiness | sharpness < `min_sharpness`, luminance outside [`min_luminance`, `max_luminance`], clipped > `max_clipped`, or blockiness > `max_blockiness` |
| `person` | a Sapiens2 segmentation model's person pixels (label > 0): their fraction, the largest component's box height and area | person fraction < `min_person_fraction` or the largest component's height < `min_person_height` (a prominent person: no outside detector) |
| `duplicates` | 64-bit DCT perceptual hash (and, with `min_duplicate_cosine` set, the cosine of the backbone embeddings after centring on the set's mean) | it is a near-duplicate (Hamming <= `max_hash_distance` (10), or cosine >= `min_duplicate_cosine`) of a kept image of higher quality: one per connected group. Hashes go through a binary faiss index, embeddings are compared within k-means clusters (SemDeDup). The embedding test is off by default (and then needs no model): the tiny backbone measurable here does not separate copies from other people (copies 0.62-0.996, distinct pairs up to 0.991), and no real weights could be measured offline |
| `domain` | mean cosine of its `reference_k` nearest reference embeddings (`reference=`: images of your domain), by a faiss inner-product index | the similarity is under `min_reference_similarity` |
| `balance` | hierarchical k-means of the embeddings (faiss: `clusters` leaves, default sqrt(n / 2); their centroids clustered again into sqrt(leaves) parents), then balanced sampling (Vo et al. 2024) | its parent keeps at most `cluster_cap` images (default: the mean parent size), shared evenly among the parent's leaves, each leaf keeping its best images |

The indexes, their costs and the measured recall are in `global_stages.py`; `benchmarks/bench_curation_scale.py`
measures them to a million records.

Thresholds were chosen on the mixed set of `benchmarks/bench_curation.py` (synthetic humans, blurred, JPEG-crushed,
tiny, duplicated and person-free copies), whose table gives each stage's precision and recall.

Execution (README, "Curate pretraining data"): the per-image stages run in chunks of `chunk_size` images on the run
layer (`sapiens2_hf.runs`); each chunk's records and embeddings are written atomically under `<out>/.curation/`
(`store.py`) before its done-marker, so a killed run resumes at the first unfinished chunk. Under `accelerate launch`
each process computes the chunks it owns; the main process then streams the columns through the global stages (never
a Python object per image) and writes `records.jsonl`, the curated `datasets.Dataset`, the report and `summary.json`.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ..utils.atomic_io import atomic_write, atomic_write_json, atomic_write_text
from ..utils.extras import require
from . import global_stages as stages
from . import measures
from ..runs.decode import decode_image
from ..runs.inputs import check_out_not_in_inputs, image_files, is_dataset_folder, is_image_file
from ..runs.shard import Shard
from .measures import STAGES
from .report import write_report
from .store import STATE_FOLDER, ChunkStore


@dataclass
class CurationConfig:
    """Stages switched on and their thresholds (see the module docstring's table)."""

    stages: tuple[str, ...] = STAGES
    min_short_side: int = 256
    min_aspect: float = 0.5
    max_aspect: float = 2.5
    min_sharpness: float = 1.0
    min_luminance: float = 0.08
    max_luminance: float = 0.92
    max_clipped: float = 0.3
    max_blockiness: float = 1.35
    min_person_fraction: float = 0.03
    min_person_height: float = 0.3
    max_hash_distance: int = 10
    min_duplicate_cosine: float | None = None
    reference_k: int = 5
    min_reference_similarity: float = 0.5
    clusters: int | None = None
    cluster_cap: int | None = None
    chunk_size: int = 64
    seed: int = 0
    # every per-image stage measures every decodable image (not only those earlier stages kept): for evaluating the
    # stages one by one (benchmarks/bench_curation.py); the verdicts are the same
    cascade: bool = True

    def __post_init__(self):
        unknown = sorted(set(self.stages) - set(STAGES))
        if unknown:
            raise ValueError(f"unknown curation stage(s) {unknown}; stages: {', '.join(STAGES)}.")
        if "decode" not in self.stages:
            raise ValueError("the decode stage cannot be switched off: an image that does not decode has nothing to "
                             "measure.")
        _check_thresholds(self)

    def on(self, stage: str) -> bool:
        return stage in self.stages


# each threshold: its kind and the range it must lie in (None: unbounded); checked where a config is made
_RANGES = {
    "min_short_side": (int, 1, None), "min_aspect": (float, 0.0, None), "max_aspect": (float, 0.0, None),
    "min_sharpness": (float, 0.0, None), "min_luminance": (float, 0.0, 1.0), "max_luminance": (float, 0.0, 1.0),
    "max_clipped": (float, 0.0, 1.0), "max_blockiness": (float, 0.0, None), "min_person_fraction": (float, 0.0, 1.0),
    "min_person_height": (float, 0.0, 1.0), "max_hash_distance": (int, 0, 64),
    "min_duplicate_cosine": (float, -1.0, 1.0),
    "reference_k": (int, 1, None), "min_reference_similarity": (float, -1.0, 1.0), "clusters": (int, 1, None),
    "cluster_cap": (int, 1, None), "chunk_size": (int, 1, None), "seed": (int, 0, None)}


def _check_thresholds(config) -> None:
    """Every threshold finite, of its kind and in its range (one line naming it, its value and what is accepted)."""
    for name, (kind, low, high) in _RANGES.items():
        value = getattr(config, name)
        if value is None and name in ("min_duplicate_cosine", "clusters", "cluster_cap"):
            continue
        accepted = f"{'an integer' if kind is int else 'a number'}" + (
            f" in [{low:g}, {high:g}]" if high is not None else f" >= {low:g}")
        is_number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        if not is_number or (kind is int and float(value) != int(value)) or not math.isfinite(float(value)) \
                or value < low or (high is not None and value > high):
            raise ValueError(f"curation threshold {name}={value!r}: expected {accepted}.")
    if config.min_aspect > config.max_aspect or config.min_luminance > config.max_luminance:
        raise ValueError(f"curation thresholds: min_aspect ({config.min_aspect}) and min_luminance "
                         f"({config.min_luminance}) must not exceed max_aspect ({config.max_aspect}) and max_luminance "
                         f"({config.max_luminance}).")


# ------------------------------------------------------------------------------------------------------------- input


@dataclass
class ImageSource:
    """The input: `count` images (None: unknown until read, a stream) and `rows(start)`, which yields `(index,
    source name, loader)` from row `start` on; `loader()` returns the encoded bytes or a PIL image."""

    count: int | None
    rows: Callable[[int], Iterator[tuple[int, str, Callable[[], Any]]]]
    description: str


def open_inputs(inputs: list[str], image_column: str = "image", split: str = "train",
                rank: int = 0, world_size: int = 1) -> ImageSource:
    """Folders of image files (not recursive), `save_to_disk` folders, `datasets` Hub ids or folders, and WebDataset
    `.tar` shards (streamed through `datasets`' webdataset builder), concatenated in the order given."""
    sources = [_open_one(entry, image_column, split) for entry in inputs]
    counts = [source.count for source in sources]
    total = None if any(c is None for c in counts) else sum(counts)

    def rows(start: int):
        offset = 0
        for source in sources:
            if source.count is not None and offset + source.count <= start:
                offset += source.count
                continue
            for index, name, load in source.rows(max(0, start - offset)):
                yield offset + index, name, load
            if source.count is None:
                return  # a stream's length is known only once read: one stream must come last
            offset += source.count

    return ImageSource(total, rows, ", ".join(source.description for source in sources))


def _open_one(entry: str, image_column: str, split: str) -> ImageSource:
    path = Path(entry)
    if is_dataset_folder(path):
        datasets = require("datasets", feature="curation of datasets inputs")

        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            loaded = loaded[split]
        return _dataset_source(loaded, image_column, str(path))
    files = image_files(path) if path.is_dir() else []
    if files:

        def rows(start: int):
            for index in range(start, len(files)):
                yield index, str(files[index]), files[index].read_bytes

        return ImageSource(len(files), rows, f"{path} ({len(files)} image files)")
    if path.is_file() and is_image_file(path):
        return ImageSource(1, lambda start: iter([(0, str(path), path.read_bytes)][start:]), str(path))
    tars = sorted(path.glob("*.tar")) if path.is_dir() else [path] if path.suffix == ".tar" else []
    datasets = require("datasets", feature="curation")

    if tars:
        try:  # the builder reads the first shard's head already
            stream = datasets.load_dataset("webdataset", data_files={"train": [str(t) for t in tars]}, split="train",
                                           streaming=True)
        except (OSError, ValueError, EOFError, tarfile.TarError) as error:
            raise ValueError(f"{entry}: could not read the WebDataset shards ({type(error).__name__}: "
                             f"{' '.join(str(error).split())[:200]}); check or re-download them.") from error
        return _stream_source(stream, image_column, f"{entry} ({len(tars)} WebDataset shard(s))")
    if path.exists():
        raise ValueError(f"{entry}: no images, save_to_disk dataset or .tar shards found there.")
    return _dataset_source(datasets.load_dataset(entry, split=split), image_column, entry)


def _image_key(columns, image_column: str, where: str) -> str:
    if image_column in columns:
        return image_column
    for key in ("jpg", "jpeg", "png", "webp", "image"):
        if key in columns:
            return key
    raise ValueError(f"{where}: no image column {image_column!r} (columns: {', '.join(columns)}); pass image_column=.")


def _dataset_source(dataset, image_column: str, where: str) -> ImageSource:
    datasets = require("datasets", feature="curation")

    key = _image_key(dataset.column_names, image_column, where)
    if isinstance(dataset.features.get(key), datasets.Image):
        dataset = dataset.cast_column(key, datasets.Image(decode=False))  # bytes: decoded (and checked) per stage

    def rows(start: int):
        for index in range(start, len(dataset)):
            yield index, f"{where}[{index}]", (lambda i=index: dataset[i][key])

    return ImageSource(len(dataset), rows, f"{where} ({len(dataset)} rows)")


def _stream_source(stream, image_column: str, where: str) -> ImageSource:
    def rows(start: int):
        key, index, reading = None, 0, iter(stream)
        while True:
            try:
                row = next(reading)
            except StopIteration:
                return
            except (OSError, ValueError, EOFError, tarfile.TarError) as error:  # a corrupt or truncated shard
                raise ValueError(f"{where}: could not read the shards after row {index} ({type(error).__name__}: "
                                 f"{' '.join(str(error).split())[:200]}); check or re-download them.") from error
            key = key or _image_key(list(row), image_column, where)
            if index >= start:
                yield index, f"{where}#{row.get('__key__', index)}", (lambda value=row[key]: value)
            index += 1

    return ImageSource(None, rows, where)


# ------------------------------------------------------------------------------------------------------- per image


def _verdict(passed: bool) -> str:
    return "keep" if passed else "drop"


def measure_image(image: np.ndarray | None, error: str | None, config: CurationConfig) -> dict[str, Any]:
    """The `decode`, `size` and `quality` records of one image (the `person` stage runs per chunk, on a model)."""
    record: dict[str, Any] = {"stages": {}}
    if image is None:
        record["stages"]["decode"] = {"verdict": "drop", "error": error}
        return record
    record["stages"]["decode"] = {"verdict": "keep"}
    height, width = image.shape[:2]
    size = {"height": height, "width": width, "aspect": round(height / width, 4)}
    if config.on("size"):
        size["verdict"] = _verdict(min(height, width) >= config.min_short_side
                                   and config.min_aspect <= height / width <= config.max_aspect)
    record["stages"]["size"] = size
    grey = measures.working_copy(image)
    quality = {"sharpness": round(measures.sharpness(grey), 4), **{k: round(v, 4) for k, v in
               measures.exposure(grey).items()}, "blockiness": round(measures.blockiness(image), 4)}
    if config.on("quality"):
        quality["verdict"] = _verdict(
            quality["sharpness"] >= config.min_sharpness
            and config.min_luminance <= quality["luminance"] <= config.max_luminance
            and quality["clipped"] <= config.max_clipped and quality["blockiness"] <= config.max_blockiness)
    record["stages"]["quality"] = quality
    record["phash"] = f"{measures.perceptual_hash(image):016x}"
    return record


def _alive(record: dict, config: CurationConfig, before: str) -> bool:
    """Whether earlier stages (up to `before`) kept the image; without `cascade`, whether it was decoded."""
    stages = record["stages"]
    if stages["decode"]["verdict"] != "keep":
        return False
    if not config.cascade:
        return True
    for stage in STAGES[: STAGES.index(before)]:
        if stages.get(stage, {}).get("verdict") == "drop":
            return False
    return True


def quality_rank(record: dict) -> float:
    """Which of two near-duplicates (or of a cluster's images) to keep: the sharper, larger one."""
    quality, size = record["stages"].get("quality", {}), record["stages"].get("size", {})
    return float(quality.get("sharpness", 0.0)) * math.sqrt(size.get("height", 0) * size.get("width", 0) + 1)


# ------------------------------------------------------------------------------------------------------ models


class PersonSegmenter:
    """The `person` stage's model: a Sapiens2 segmentation pipeline; `__call__(images) -> masks` (label > 0)."""

    def __init__(self, model, device: str | None = None, batch_size: int = 4):
        from .. import pipeline

        is_pipeline = callable(model) and hasattr(model, "model") and not hasattr(model, "config")
        self.pipe = model if is_pipeline else pipeline(
            "sapiens2-segmentation", model=model, **({} if device is None else {"device": device}))
        self.batch_size = batch_size

    def __call__(self, images: list[np.ndarray]) -> list[np.ndarray]:
        results = self.pipe(list(images), batch_size=self.batch_size)
        return [np.asarray(result["segmentation"]) > 0 for result in results]


class BackboneEmbedder:
    """Image embeddings for the `duplicates`, `domain` and `balance` stages: the Sapiens2 backbone's pooled output
    (`Sapiens2Model(...).pooler_output`), L2-normalised, of the image letterboxed to the model's input size."""

    def __init__(self, model, device: str | None = None, batch_size: int = 8):
        import torch

        from ..modeling import Sapiens2Model
        from ..processing import image_processor_for_task

        if isinstance(model, torch.nn.Module):
            # a task model holds its backbone as `.model`; a backbone is used as it is
            model = model.model if isinstance(getattr(model, "model", None), Sapiens2Model) else model
        else:
            model = Sapiens2Model.from_pretrained(model)  # a pretrain or task checkpoint: its backbone
        self.model = model
        self.model.eval().to(device or "cpu")
        height, width = self.model.config.image_size_hw
        self.processor = image_processor_for_task("seg", size={"height": height, "width": width})
        self.batch_size = batch_size

    def __call__(self, images: list[np.ndarray]) -> np.ndarray:
        import torch

        out = []
        for start in range(0, len(images), self.batch_size):
            batch = self.processor(images[start:start + self.batch_size], return_tensors="pt")["pixel_values"]
            with torch.inference_mode():
                pooled = self.model(pixel_values=batch.to(self.model.device, self.model.dtype)).pooler_output
            out.append(torch.nn.functional.normalize(pooled.float(), dim=-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.model.config.hidden_size), np.float32)


# ---------------------------------------------------------------------------------------------------- the run


@dataclass
class CurationResult:
    """What a run produced: the `kept` indices (an int64 array), every image's `records` (read back from
    `records.jsonl` each time they are iterated: never all in memory), the output paths and the summary."""

    kept: np.ndarray
    records: "RecordsFile | list"
    dataset_path: Path | None
    report_path: Path | None
    summary: dict = field(default_factory=dict)


class RecordsFile:
    """The records of `records.jsonl`, one dict per image, streamed from the file on every iteration."""

    def __init__(self, path: Path, count: int):
        self.path, self.count = Path(path), count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        with open(self.path, encoding="utf-8") as file:
            for line in file:
                yield json.loads(line)


def _process_chunk(rows: list, config: CurationConfig, segmenter, embedder, timings: dict,
                   rank: int = 0) -> tuple[dict, np.ndarray]:
    """One chunk's per-image stages: its records as columns (`store.COLUMNS`) and its embeddings."""
    records, images = [], []
    for index, name, load in rows:
        begin = time.perf_counter()
        try:
            image, error = decode_image(load(), name=name), None
        except Exception as problem:  # noqa: BLE001 - any decoding failure is this image's verdict, named
            image, error = None, f"{type(problem).__name__}: {problem}"[:300]
        timings["decode"] += time.perf_counter() - begin
        begin = time.perf_counter()
        record = measure_image(image, error, config)
        timings["size+quality"] += time.perf_counter() - begin
        records.append({"index": index, "source": name, "computed_by": rank, **record})
        images.append(image)
    if config.on("person") and segmenter is not None:
        alive = [k for k, record in enumerate(records) if _alive(record, config, "person")]
        begin = time.perf_counter()
        masks = segmenter([images[k] for k in alive]) if alive else []
        timings["person"] += time.perf_counter() - begin
        for k, mask in zip(alive, masks):
            person = {key: round(value, 4) for key, value in measures.person_measures(mask).items()}
            person["verdict"] = _verdict(person["person_fraction"] >= config.min_person_fraction
                                         and person["largest_height"] >= config.min_person_height)
            records[k]["stages"]["person"] = person
    embeddings = np.full((len(records), 0), np.nan, np.float16)
    if embedder is not None:
        alive = [k for k, record in enumerate(records) if _alive(record, config, "duplicates")]
        begin = time.perf_counter()
        vectors = embedder([images[k] for k in alive]) if alive else np.zeros((0, 0), np.float32)
        timings["embedding"] += time.perf_counter() - begin
        width = vectors.shape[1] if len(alive) else 0
        embeddings = np.full((len(records), width), np.nan, np.float16)
        if len(alive):
            embeddings[alive] = vectors.astype(np.float16)
    columns = {
        "index": [r["index"] for r in records], "source": [r["source"] for r in records],
        "computed_by": [rank] * len(records),
        "decoded": [r["stages"]["decode"]["verdict"] == "keep" for r in records],
        "image_kept": [all(stage.get("verdict") != "drop" for stage in r["stages"].values()) for r in records],
        "phash": [int(r.get("phash", "0"), 16) for r in records], "rank": [quality_rank(r) for r in records],
        "stages": [r["stages"] for r in records]}
    return columns, embeddings


def _needs_embeddings(config: CurationConfig, reference) -> list[str]:
    """The stages switched on that read embeddings (hash-only duplicates read none)."""
    return [stage for stage, needs in (
        ("duplicates", config.min_duplicate_cosine is not None), ("domain", reference is not None),
        ("balance", True)) if needs and config.on(stage)]


def _embedder(config, reference, person_model, segmenter, embedding_model, device):
    """The embedding model, only when a stage switched on reads embeddings; None otherwise."""
    readers = _needs_embeddings(config, reference)
    if not readers:
        return None
    chosen = embedding_model
    if chosen is None:  # the person model's backbone (loaded already when its stage is on)
        chosen = segmenter.pipe.model if isinstance(segmenter, PersonSegmenter) else person_model
        chosen = None if callable(chosen) and not hasattr(chosen, "config") and not hasattr(chosen, "model") \
            else getattr(chosen, "model", chosen)
    if chosen is None:
        raise ValueError(f"the {', '.join(readers)} stage(s) need image embeddings: pass embedding_model= (a "
                         "Sapiens2 checkpoint; CLI --embedding-model) or a person model to borrow its backbone from, "
                         f"or switch them off (CLI --skip {' '.join(readers)}). Hash-only duplicates need no model.")
    is_function = callable(chosen) and not hasattr(chosen, "config")
    return chosen if is_function else BackboneEmbedder(chosen, device)


def _describe_model(model) -> str | None:
    if model is None:
        return None
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    return getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None) \
        or getattr(model, "__qualname__", type(model).__qualname__)


def curate(inputs: list[str] | ImageSource, out: str | os.PathLike, *, config: CurationConfig | None = None,
           person_model=None, embedding_model=None, reference: list[str] | None = None, image_column: str = "image",
           device: str | None = None, write_dataset: bool = True, max_chunks: int | None = None,
           on_chunk: Callable[[int], None] | None = None, progress: bool = False) -> CurationResult:
    """Curates `inputs` into `out` (see the module docstring).

    Args:
        inputs: folders, `save_to_disk` folders, `datasets` ids, `.tar` shards (`open_inputs`), or an `ImageSource`.
        person_model: the `person` stage's segmentation model (folder, Hub id, official file, pipeline or a callable
            `images -> masks`); required while the stage is on.
        embedding_model: a Sapiens2 checkpoint (its backbone) or a callable `images -> (n, d)` unit vectors, for the
            stages that read embeddings (`balance`, `domain`, `duplicates` with `min_duplicate_cosine`); default: the
            person model's backbone. Not loaded when no such stage is on.
        reference (`list[str]`, *optional*): images of the wanted domain (folders or datasets as `inputs`); turns
            the `domain` stage on.
        max_chunks, on_chunk: stop after computing this many chunks (the rest on a later call); called with each
            chunk's number once its files are written.
    """
    config = config or CurationConfig()
    out = Path(out)
    shard = Shard(device="cpu" if device == "cpu" else "auto", feature="curation across processes")
    if not isinstance(inputs, ImageSource):
        check_out_not_in_inputs(out, list(inputs), [Path(entry) for entry in inputs if Path(entry).is_file()])
    source = inputs if isinstance(inputs, ImageSource) else open_inputs(list(inputs), image_column)
    if not (config.on("domain") and reference):
        reference = None
    segmenter = _segmenter(config, person_model, device)
    embedder = _embedder(config, reference, person_model, segmenter, embedding_model, device)
    timings = {"decode": 0.0, "size+quality": 0.0, "person": 0.0, "embedding": 0.0}
    fingerprint = _run_fingerprint(source.description, config,
                                   _describe_model(embedding_model if embedding_model is not None else person_model)
                                   if embedder is not None else None)
    chunks = ChunkStore(out, fingerprint)
    _check_same_run(chunks.folder, fingerprint, shard.is_main)
    computed, stopped = _compute_chunks(source, chunks, shard, config, segmenter, embedder, timings, max_chunks,
                                        on_chunk)
    if stopped:
        return CurationResult(np.zeros(0, np.int64), [], None, None, {"stopped_after_chunks": computed})
    shard.wait()
    if not shard.is_main:
        return CurationResult(np.zeros(0, np.int64), [], None, None, {"rank": shard.index})
    reference_vectors = _embed_reference(reference, embedder, image_column) if reference else None
    return _finish(source, chunks, out, config, reference_vectors, timings, computed, write_dataset, progress)


def _finish(source: ImageSource, chunks: ChunkStore, out: Path, config: CurationConfig, reference_vectors,
            timings: dict, computed: int, write_dataset: bool, progress: bool) -> CurationResult:
    """The main process's end of a run: the global stages, then records, dataset, report and summary."""
    begin = time.perf_counter()
    verdicts = _global_stages(chunks, config, reference_vectors, timings)
    records_path = out / "records.jsonl"
    summary, sample = _write_records(chunks, records_path, verdicts, config)
    summary.update(input=source.description, config=dataclasses.asdict(config),
                   seconds={key: round(value, 3) for key, value in timings.items()},
                   images_per_second={key: round(summary["images"] / value, 1) for key, value in timings.items()
                                      if value > 0},
                   global_seconds=round(time.perf_counter() - begin, 3), chunks_computed_this_run=computed)
    kept = verdicts.index[np.flatnonzero(verdicts.kept)]
    dataset_path = None
    if write_dataset and summary["kept"]:
        dataset_path = _write_dataset(source, verdicts, records_path, out / "dataset")
    elif write_dataset:  # nothing kept: no dataset (an empty one is nothing pretraining can read), and no stale one
        _remove_our_dataset(out / "dataset")
        summary["dataset"] = "none: no image was kept"
    report_path = write_report(out, sample, summary, source)
    atomic_write_json(out / "summary.json", summary, indent=2)
    if progress:
        print(f"curated {summary['images']} image(s): kept {summary['kept']}; {out}")
    return CurationResult(kept, RecordsFile(records_path, summary["images"]), dataset_path, report_path, summary)


def _segmenter(config: CurationConfig, person_model, device):
    """The `person` stage's model when it is on: a function `images -> masks` as it is, else a `PersonSegmenter`."""
    if not config.on("person"):
        return None
    if person_model is None:
        raise ValueError("the person stage needs a segmentation model: pass person_model= (CLI --person-model), or "
                         "switch the stage off (stages without 'person'; CLI --skip person).")
    is_function = callable(person_model) and not hasattr(person_model, "config") and not hasattr(person_model, "model")
    return person_model if is_function else PersonSegmenter(person_model, device)


def _compute_chunks(source: ImageSource, chunks: ChunkStore, shard: Shard, config: CurationConfig, segmenter,
                    embedder, timings: dict, max_chunks: int | None, on_chunk) -> tuple[int, bool]:
    """Computes and writes this process's unfinished chunks; returns `(chunks computed, stopped by max_chunks)`."""
    computed, rows = 0, []

    def flush(chunk_rows):
        nonlocal computed
        number = chunk_rows[0][0] // config.chunk_size
        columns, embeddings = _process_chunk(chunk_rows, config, segmenter, embedder, timings, shard.index)
        chunks.write(number, columns, embeddings)
        computed += 1
        if on_chunk is not None:
            on_chunk(number)

    for index, name, load in _rows_from(source, set(chunks.done()), config.chunk_size, shard):
        if rows and rows[0][0] // config.chunk_size != index // config.chunk_size:
            flush(rows)
            rows = []
            if max_chunks is not None and computed >= max_chunks:
                return computed, True
        rows.append((index, name, load))
    if rows:
        flush(rows)
    return computed, False


def _run_fingerprint(description: str, config: CurationConfig, embedding: str | None) -> dict:
    """What a chunk's records depend on: the inputs, the per-image settings and the embedding model."""
    settings = {key: value for key, value in dataclasses.asdict(config).items()
                if key not in ("clusters", "cluster_cap", "reference_k", "min_reference_similarity",
                               "min_duplicate_cosine", "max_hash_distance")}  # global stages: recomputed each run
    return json.loads(json.dumps({"inputs": description, "settings": settings, "embedding_model": embedding}))


def _check_same_run(state: Path, fingerprint: dict, is_main: bool) -> None:
    """Finished chunks are reused only by a run of the same inputs, per-image settings and embedding model
    (`run.json` records them): another run's chunks would give its verdicts (or its embeddings) to these images."""
    recorded = state / "run.json"
    if recorded.is_file():
        if json.loads(recorded.read_text()) != fingerprint:
            raise ValueError(f"{state.parent} holds the finished chunks of another curation run (other inputs, "
                             f"settings or embedding model: {recorded}); use another --out, or delete {state} to "
                             "start again.")
    elif is_main:
        atomic_write_json(recorded, fingerprint)


def _rows_from(source: ImageSource, done: set[int], chunk_size: int, shard: Shard):
    """The rows of the chunks this process computes: not done yet, and the shard's (round robin)."""
    first = 0
    while first in done:
        first += 1
    for index, name, load in source.rows(first * chunk_size):
        number = index // chunk_size
        if number in done or not shard.owns(number):
            continue
        yield index, name, load


def _embed_reference(reference: list[str], embedder, image_column: str) -> np.ndarray:
    source = open_inputs(reference, image_column)
    images = []
    for _, name, load in source.rows(0):
        try:
            images.append(decode_image(load(), name=name))
        except Exception:  # noqa: BLE001 - a broken reference image is left out
            continue
    if not images:
        raise ValueError(f"reference {reference}: no decodable images.")
    return np.asarray(embedder(images), np.float32)


# ------------------------------------------------------------------------------------------------ global stages

_UNMEASURED, _DROP, _KEEP = -1, 0, 1


@dataclass
class GlobalVerdicts:
    """The global stages' results, one entry per image in index order (small arrays, no Python object per image):
    `verdict[stage]` is -1 (not measured), 0 (drop) or 1 (keep); `scores[stage]` the figures each record shows."""

    index: np.ndarray
    verdict: dict[str, np.ndarray]
    scores: dict[str, dict[str, np.ndarray]]
    kept: np.ndarray


@dataclass
class _Columns:
    """The columns the global stages read, one entry per image in index order, and the embeddings file."""

    index: np.ndarray
    decoded: np.ndarray
    image_kept: np.ndarray
    phash: np.ndarray
    rank: np.ndarray
    embedded: np.ndarray
    embeddings: "stages.Embeddings | None"


def _read_columns(store: ChunkStore, chunks: list[int], embeddings_needed: bool) -> _Columns:
    parts = {name: [] for name in ("index", "decoded", "image_kept", "phash", "rank")}
    for _, columns in store.columns(chunks, tuple(parts)):
        for name, values in columns.items():
            parts[name].append(values)
    index, decoded, image_kept, phash, rank = (np.concatenate(parts[name]) if parts[name] else np.zeros(0) for name
                                               in ("index", "decoded", "image_kept", "phash", "rank"))
    count = len(index)
    shapes = [store.embedding_shape(chunk) for chunk in chunks]
    width = max((shape[1] for shape in shapes), default=0)
    embedded, embeddings = np.zeros(count, bool), None
    if width and embeddings_needed:
        embeddings = stages.Embeddings(store.gather_embeddings(chunks, count, width))
        offset = 0  # rows with an embedding (the chunks' rows follow each other in index order)
        for chunk, (rows, chunk_width) in zip(chunks, shapes):
            if chunk_width == width:
                vectors = np.load(store.paths(chunk)[1], mmap_mode="r")
                embedded[offset:offset + rows] = ~np.isnan(vectors[:, 0])
                del vectors
            offset += rows
    return _Columns(index.astype(np.int64), decoded.astype(bool), image_kept.astype(bool), phash.astype(np.uint64),
                    rank.astype(np.float64), embedded, embeddings)


def _global_stages(store: ChunkStore, config: CurationConfig, reference: np.ndarray | None,
                   timings: dict) -> GlobalVerdicts:
    """The duplicates, domain and balance stages over the chunks' columns (`global_stages` has the indexes)."""
    data = _read_columns(store, store.done(), bool(_needs_embeddings(config, reference)))
    count = len(data.index)
    verdict = {stage: np.full(count, _UNMEASURED, np.int8) for stage in ("duplicates", "domain", "balance")}
    scores: dict[str, dict] = {}

    def undropped() -> np.ndarray:
        return data.decoded & data.image_kept & np.all([v != _DROP for v in verdict.values()], axis=0)

    # what a stage measures: decoded, and (cascade) kept by every stage so far; balance only what none dropped
    runs = [("duplicates", config.on("duplicates"), _duplicate_stage),
            ("domain", reference is not None and data.embeddings is not None, _domain_stage),
            ("balance", config.on("balance") and data.embeddings is not None, _balance_stage)]
    for stage, on, run in runs:
        if not on:
            continue
        begin = time.perf_counter()
        alive = undropped() if config.cascade or stage == "balance" else data.decoded.copy()
        if stage != "duplicates":
            alive &= data.embedded
        rows = np.flatnonzero(alive)
        if len(rows):
            verdict[stage][rows], scores[stage] = run(data, rows, config, reference)
        timings[stage] = time.perf_counter() - begin
    return GlobalVerdicts(data.index, verdict, scores, undropped())


def _duplicate_stage(data: _Columns, rows: np.ndarray, config: CurationConfig, reference) -> tuple:
    """Hash pairs through the binary index, and (with `min_duplicate_cosine`) SemDeDup's pairs; one per component."""
    pairs = stages.hash_pairs(data.phash[rows], config.max_hash_distance, config.seed)
    if config.min_duplicate_cosine is not None and data.embeddings is not None:
        with_vectors = np.flatnonzero(data.embedded[rows])
        if len(with_vectors) > 1:
            vector_rows = rows[with_vectors]
            hierarchy = stages.hierarchical_kmeans(data.embeddings, vector_rows, _leaves(config, len(vector_rows)),
                                                   config.seed)
            mean = stages.streaming_mean(data.embeddings, vector_rows)
            near = stages.embedding_pairs(data.embeddings, vector_rows, hierarchy.leaf, config.min_duplicate_cosine,
                                          mean, hierarchy.second)
            pairs = np.concatenate([pairs, with_vectors[near]])
    found = stages.near_duplicates(len(rows), pairs, data.rank[rows])
    count = len(data.index)
    scores = {"cluster": _full(count, data.index[rows[found.component]], rows),
              "cluster_size": _full(count, found.size, rows),
              "duplicate_of": _full(count, data.index[rows[found.best]], rows)}
    return np.where(found.best == np.arange(len(rows)), _KEEP, _DROP), scores


def _domain_stage(data: _Columns, rows: np.ndarray, config: CurationConfig, reference) -> tuple:
    similarity = stages.reference_similarity(data.embeddings, rows, reference, config.reference_k)
    scores = {"reference_similarity": _full(len(data.index), similarity, rows, np.float32)}
    return np.where(similarity >= config.min_reference_similarity, _KEEP, _DROP), scores


def _balance_stage(data: _Columns, rows: np.ndarray, config: CurationConfig, reference) -> tuple:
    hierarchy = stages.hierarchical_kmeans(data.embeddings, rows, _leaves(config, len(rows)), config.seed)
    result = stages.balanced_sample(hierarchy, data.rank[rows], config.cluster_cap)
    count = len(data.index)
    scores = {"cluster": _full(count, result.leaf, rows),
              "parent": _full(count, hierarchy.parent_of_leaf[result.leaf], rows),
              "cluster_size": _full(count, result.leaf_size, rows), "share": _full(count, result.share, rows),
              "cap": result.cap}
    return np.where(result.keep, _KEEP, _DROP), scores


def _leaves(config: CurationConfig, count: int) -> int:
    return config.clusters or max(1, round(math.sqrt(count / 2)))


def _full(count: int, values, rows: np.ndarray, dtype=np.int64) -> np.ndarray:
    out = np.full(count, -1, dtype)
    out[rows] = values
    return out


def _global_record(verdicts: GlobalVerdicts, position: int, stage: str) -> dict | None:
    verdict = int(verdicts.verdict[stage][position])
    if verdict == _UNMEASURED:
        return None
    record = {}
    for key, values in verdicts.scores.get(stage, {}).items():
        value = values if np.isscalar(values) else values[position]
        record[key] = round(float(value), 4) if isinstance(value, np.floating) else int(value)
    if stage == "duplicates" and verdict == _KEEP:
        record.pop("duplicate_of", None)
    record["verdict"] = "keep" if verdict == _KEEP else "drop"
    return record


def _write_records(store: ChunkStore, path: Path, verdicts: GlobalVerdicts, config: CurationConfig,
                   report_rows: int = 2000) -> tuple[dict, list[dict]]:
    """Streams every chunk's records with the global verdicts into `records.jsonl` (atomically); returns the summary's
    counts and the records the report shows (every `n / report_rows`-th, and each stage's first dropped ones)."""
    counts = {stage: {"on": config.on(stage), "measured": 0, "kept": 0, "dropped": 0} for stage in STAGES}
    count = len(verdicts.index)
    step = max(1, math.ceil(count / report_rows))
    sample: list[dict] = []
    examples = {stage: 0 for stage in STAGES}

    def write(file):
        position = 0
        for _, columns in store.columns(store.done(), ("index", "source", "computed_by", "stages")):
            for index, source, computed_by, text in zip(columns["index"], columns["source"],
                                                        columns["computed_by"], columns["stages"]):
                record_stages = json.loads(text)
                for stage in ("duplicates", "domain", "balance"):
                    found = _global_record(verdicts, position, stage)
                    if found is not None:
                        record_stages[stage] = found
                dropped_by = next((name for name in STAGES if record_stages.get(name, {}).get("verdict") == "drop"),
                                  None)
                record = {"index": int(index), "source": source, "computed_by": int(computed_by),
                          "stages": record_stages, "verdict": "drop" if dropped_by else "keep",
                          "dropped_by": dropped_by}
                for stage, measured in record_stages.items():
                    if "verdict" in measured:
                        counts[stage]["measured"] += 1
                        counts[stage]["kept" if measured["verdict"] == "keep" else "dropped"] += 1
                file.write(json.dumps(record) + "\n")
                if position % step == 0 or (dropped_by and examples[dropped_by] < 4):
                    sample.append(record)
                    if dropped_by:
                        examples[dropped_by] += 1
                position += 1

    atomic_write(path, write, mode="w")
    summary = {"images": count, "kept": int(verdicts.kept.sum()), "stages": counts}
    return summary, sample


def _remove_our_dataset(folder: Path) -> None:
    ours = folder.parent / STATE_FOLDER / "dataset_written"
    if folder.exists() and ours.is_file():
        shutil.rmtree(folder)
        ours.unlink()


def _write_dataset(source: ImageSource, verdicts: GlobalVerdicts, records_path: Path, folder: Path) -> Path:
    """The kept images as a `datasets.Dataset` (`image`, `source`, the scores as JSON in `curation`), saved into
    `folder` atomically (written beside it, then renamed), streamed from the source and `records.jsonl` in step."""

    datasets = require("datasets", feature="curation")
    ours = folder.parent / STATE_FOLDER / "dataset_written"
    if folder.exists() and not ours.is_file():
        raise ValueError(f"{folder} exists and was not written by a curation run: it is left as it is; move it or "
                         "pass another --out.")

    def rows():
        with open(records_path, encoding="utf-8") as lines:
            for index, name, load in source.rows(0):
                record = json.loads(next(lines))
                if record["index"] != index:
                    raise RuntimeError(f"records.jsonl is out of step with the input at row {index}")
                if record["verdict"] != "keep":
                    continue
                value = load()
                if isinstance(value, dict):
                    value = value.get("bytes") or Path(value["path"]).read_bytes()
                elif not isinstance(value, (bytes, bytearray)):
                    buffer = io.BytesIO()
                    value.convert("RGB").save(buffer, format="PNG")
                    value = buffer.getvalue()
                yield {"image": {"bytes": bytes(value), "path": None}, "source": name,
                       "curation": json.dumps(record["stages"])}

    features = datasets.Features({"image": datasets.Image(), "source": datasets.Value("string"),
                                  "curation": datasets.Value("string")})
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    # a cache of its own: `from_generator` keys its cache by the generator's code, which is the same for every run;
    # `from_generator` writes Arrow shards as the generator yields: the kept images are never all in memory
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".curation-cache-") as cache:
        dataset = datasets.Dataset.from_generator(rows, features=features, cache_dir=cache)
        dataset.save_to_disk(str(partial))
        del dataset
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(partial, folder)
    atomic_write_text(ours, "written by sapiens2_hf.curation\n")
    return folder


__all__ = ["BackboneEmbedder", "CurationConfig", "CurationResult", "ImageSource", "PersonSegmenter", "RecordsFile",
           "STAGES", "curate", "decode_image", "measure_image", "open_inputs", "quality_rank"]
