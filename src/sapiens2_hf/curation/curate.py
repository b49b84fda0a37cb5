"""The curation run: a pile of images in, pretraining data out (`sapiens2-hf curate`, `curate(...)`).

Stages, in order; each but `decode` can be switched off (`CurationConfig.stages`), and each records its score(s) and
verdict per image:

| stage | measures | drops an image when (defaults) |
|---|---|---|
| `decode` | opens and decodes it, converts to RGB | it cannot be decoded |
| `size` | height, width, aspect = height / width | the short side is under `min_short_side` (256), or the aspect is outside [`min_aspect`, `max_aspect`] ([0.5, 2.5]; the pretraining input is 1024x768, aspect 1.33) |
| `quality` | sharpness (Laplacian variance of a 256-px-short-side copy), exposure (mean luminance, clipped fraction), JPEG blockiness | sharpness < `min_sharpness`, luminance outside [`min_luminance`, `max_luminance`], clipped > `max_clipped`, or blockiness > `max_blockiness` |
| `person` | a Sapiens2 segmentation model's person pixels (label > 0): their fraction, the largest component's box height and area | person fraction < `min_person_fraction` or the largest component's height < `min_person_height` (a prominent person: no outside detector) |
| `duplicates` | 64-bit DCT perceptual hash (and, with `min_duplicate_cosine` set, the cosine of the backbone embeddings after centring on the set's mean) | it is a near-duplicate (Hamming <= `max_hash_distance` (10), or cosine >= `min_duplicate_cosine`) of a kept image of higher quality: one per cluster. The embedding test is off by default: the tiny backbone measurable here does not separate copies from other people (copies 0.62-0.996, distinct pairs up to 0.991), and no real weights could be measured offline |
| `domain` | mean cosine of its `reference_k` nearest reference embeddings (`reference=`: images of your domain) | the similarity is under `min_reference_similarity` |
| `balance` | k-means of the embeddings (`clusters`, default sqrt(n / 2)) | its cluster already holds `cluster_cap` better images (default: twice the mean cluster size) |

Thresholds were chosen on the mixed set of `benchmarks/bench_curation.py` (synthetic humans, blurred, JPEG-crushed,
tiny, duplicated and person-free copies), whose table gives each stage's precision and recall.

Execution: the per-image stages (`decode` to `person`, plus the hash and the embedding) run over the input in chunks
of `chunk_size` images; each chunk's records and embeddings are written atomically under `<out>/.curation/` before the
next starts, so a killed run resumes at the first missing chunk and never recomputes a finished one, and memory is
bounded by a chunk (plus the embeddings, `n x hidden_size` float16, for the global stages). The duplicate stage
compares all pairs, in blocks (quadratic time: for millions of images, curate shards separately, then their kept
images together). Under `accelerate launch`
chunk `k` is computed by process `k % world_size`; the main process then runs the global stages (`duplicates`,
`domain`, `balance`) and writes the curated `datasets.Dataset` (`save_to_disk`, readable by `pretrain.py
--dataset_name`), `records.jsonl` (every image: source, per-stage scores and verdicts, the final verdict), the report
(`report.html`, `report.png`) and `summary.json`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ..utils.atomic_io import atomic_write_bytes, atomic_write_json, atomic_write_text
from ..utils.extras import require
from . import measures
from .measures import STAGES, decode_image
from .report import write_report

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
STATE_FOLDER = ".curation"


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
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}.")

    def on(self, stage: str) -> bool:
        return stage in self.stages


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
    if path.is_dir() and (path / "dataset_info.json").is_file() or path.is_dir() and (path / "dataset_dict.json").is_file():
        datasets = require("datasets", feature="curation of datasets inputs")

        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            loaded = loaded[split]
        return _dataset_source(loaded, image_column, str(path))
    if path.is_dir() and any(p.suffix.lower() in IMAGE_SUFFIXES for p in path.iterdir()):
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)

        def rows(start: int):
            for index in range(start, len(files)):
                yield index, str(files[index]), files[index].read_bytes

        return ImageSource(len(files), rows, f"{path} ({len(files)} image files)")
    if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
        return ImageSource(1, lambda start: iter([(0, str(path), path.read_bytes)][start:]), str(path))
    tars = sorted(path.glob("*.tar")) if path.is_dir() else [path] if path.suffix == ".tar" else []
    datasets = require("datasets", feature="curation")

    if tars:
        stream = datasets.load_dataset("webdataset", data_files={"train": [str(t) for t in tars]}, split="train",
                                       streaming=True)
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
        key = None
        for index, row in enumerate(stream):
            key = key or _image_key(list(row), image_column, where)
            if index >= start:
                yield index, f"{where}#{row.get('__key__', index)}", (lambda value=row[key]: value)

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
    """What a run produced: `kept` indices, every image's `records`, the output paths and per-stage timings."""

    kept: list[int]
    records: list[dict]
    dataset_path: Path | None
    report_path: Path | None
    summary: dict = field(default_factory=dict)


def _chunk_paths(state: Path, chunk: int) -> tuple[Path, Path]:
    return state / f"chunk_{chunk:06d}.json", state / f"chunk_{chunk:06d}.npy"


def _process_chunk(rows: list, config: CurationConfig, segmenter, embedder, timings: dict,
                   rank: int = 0) -> tuple[list, np.ndarray]:
    records, images = [], []
    for index, name, load in rows:
        begin = time.perf_counter()
        try:
            image, error = decode_image(load()), None
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
    return records, embeddings


def curate(inputs: list[str] | ImageSource, out: str | os.PathLike, *, config: CurationConfig | None = None,
           person_model=None, embedding_model=None, reference: list[str] | None = None, image_column: str = "image",
           device: str | None = None, write_dataset: bool = True, max_chunks: int | None = None,
           on_chunk: Callable[[int], None] | None = None, progress: bool = False) -> CurationResult:
    """Curates `inputs` into `out` (see the module docstring).

    Args:
        inputs: folders, `save_to_disk` folders, `datasets` ids, `.tar` shards (`open_inputs`), or an `ImageSource`.
        config (`CurationConfig`, *optional*): stages and thresholds (default: all on, the defaults).
        person_model: the `person` stage's segmentation model (folder, Hub id, official file, pipeline or a callable
            `images -> masks`); required while the stage is on.
        embedding_model: a Sapiens2 checkpoint (its backbone) or a callable `images -> (n, d)` unit vectors, for
            `duplicates` (with the hash), `domain` and `balance`; default: the person model's backbone.
        reference (`list[str]`, *optional*): images of the wanted domain (folders or datasets as `inputs`); turns
            the `domain` stage on.
        max_chunks (`int`, *optional*): stop after computing this many chunks (the rest on a later call).
        on_chunk: called with each chunk's number once its files are written.
    """
    config = config or CurationConfig()
    out = Path(out)
    state = out / STATE_FOLDER
    state.mkdir(parents=True, exist_ok=True)
    rank, world_size, wait = _distributed()
    source = inputs if isinstance(inputs, ImageSource) else open_inputs(list(inputs), image_column)
    if config.on("person") and person_model is None:
        raise ValueError("the person stage needs a segmentation model: pass person_model= (CLI --person-model), or "
                         "switch the stage off (stages without 'person'; CLI --skip person).")
    segmenter = None
    if config.on("person"):
        # a function `images -> masks` is used as it is; a model, pipeline or name becomes a PersonSegmenter
        is_function = callable(person_model) and not hasattr(person_model, "config") \
            and not hasattr(person_model, "model")
        segmenter = person_model if is_function else PersonSegmenter(person_model, device)
    global_stages = [s for s in ("duplicates", "domain", "balance") if config.on(s)]
    embedder = None
    if global_stages:
        chosen = embedding_model
        if chosen is None:  # the person model's backbone (loaded already when its stage is on)
            chosen = segmenter.pipe.model if isinstance(segmenter, PersonSegmenter) else person_model
            chosen = None if callable(chosen) and not hasattr(chosen, "config") and not hasattr(chosen, "model") \
                else getattr(chosen, "model", chosen)
        if chosen is None:
            raise ValueError("the duplicates, domain and balance stages need image embeddings: pass embedding_model= "
                             "(a Sapiens2 checkpoint; CLI --embedding-model) or a person model to borrow its "
                             "backbone from.")
        is_function = callable(chosen) and not hasattr(chosen, "config")
        embedder = chosen if is_function else BackboneEmbedder(chosen, device)
    timings = {"decode": 0.0, "size+quality": 0.0, "person": 0.0, "embedding": 0.0}
    computed, rows = 0, []
    _check_same_run(state, source.description, config)
    done_chunks = {int(p.stem.split("_")[1]) for p in state.glob("chunk_*.json")}

    def flush(chunk_rows, number):
        nonlocal computed
        records, embeddings = _process_chunk(chunk_rows, config, segmenter, embedder, timings, rank)
        records_path, embeddings_path = _chunk_paths(state, number)
        buffer = __import__("io").BytesIO()
        np.save(buffer, embeddings)
        atomic_write_bytes(embeddings_path, buffer.getvalue())
        atomic_write_json(records_path, records)  # last: its presence marks the chunk done
        computed += 1
        if on_chunk is not None:
            on_chunk(number)

    stopped = False
    for index, name, load in _rows_from(source, done_chunks, config.chunk_size, rank, world_size):
        number = index // config.chunk_size
        if rows and rows[0][0] // config.chunk_size != number:
            flush(rows, rows[0][0] // config.chunk_size)
            rows = []
            if max_chunks is not None and computed >= max_chunks:
                stopped = True
                break
        rows.append((index, name, load))
    if rows and not stopped:
        flush(rows, rows[0][0] // config.chunk_size)
    if stopped:
        return CurationResult([], [], None, None, {"stopped_after_chunks": computed})
    wait()
    if rank != 0:
        return CurationResult([], [], None, None, {"rank": rank})
    records, embeddings = _load_chunks(state)
    reference_vectors = None
    if reference and config.on("domain") and embedder is not None:
        reference_vectors = _embed_reference(reference, embedder, image_column)
    begin = time.perf_counter()
    global_timings = _global_stages(records, embeddings, config, reference_vectors)
    kept = [record["index"] for record in records if record["verdict"] == "keep"]
    summary = _summary(records, config, {**timings, **global_timings}, source.description, time.perf_counter() - begin)
    summary["chunks_computed_this_run"] = computed
    _write_records(out / "records.jsonl", records)
    dataset_path = None
    if write_dataset:
        dataset_path = _write_dataset(source, kept, records, out / "dataset")
    report_path = write_report(out, records, summary, source)
    atomic_write_json(out / "summary.json", summary, indent=2)
    if progress:
        print(f"curated {summary['images']} image(s): kept {summary['kept']}; {out}")
    return CurationResult(kept, records, dataset_path, report_path, summary)


def _check_same_run(state: Path, description: str, config: CurationConfig) -> None:
    """Finished chunks are reused only by a run of the same inputs and per-image settings (`run.json` records
    them): another run's chunks would give its verdicts to these images."""
    settings = {key: value for key, value in dataclasses.asdict(config).items()
                if key not in ("clusters", "cluster_cap", "reference_k", "min_reference_similarity",
                               "min_duplicate_cosine", "max_hash_distance")}  # global stages: recomputed each run
    wanted = {"inputs": description, "settings": json.loads(json.dumps(settings))}
    recorded = state / "run.json"
    if recorded.is_file():
        previous = json.loads(recorded.read_text())
        if previous != wanted:
            raise ValueError(f"{state.parent} holds the finished chunks of another curation run (other inputs or "
                             f"settings: {recorded}); use another --out, or delete {state} to start again.")
    elif int(os.environ.get("RANK", "0")) == 0:
        atomic_write_json(recorded, wanted)


def _distributed() -> tuple[int, int, Callable[[], None]]:
    """(rank, world size, barrier) of an `accelerate launch`, or of one process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1, lambda: None
    import datetime

    import torch

    PartialState = require("accelerate", feature="curation across processes").PartialState
    # `cpu=` on a machine without GPUs (accelerate would otherwise see one process); a long timeout: the processes
    # meet only once their chunks are done, which may take hours and differ in length
    state = PartialState(cpu=not torch.cuda.is_available(), timeout=datetime.timedelta(days=7))
    return state.process_index, state.num_processes, state.wait_for_everyone


def _rows_from(source: ImageSource, done: set[int], chunk_size: int, rank: int, world_size: int):
    """The rows of the chunks this process computes: not done yet, and `chunk % world_size == rank`."""
    first = 0
    while first in done:
        first += 1
    for index, name, load in source.rows(first * chunk_size):
        number = index // chunk_size
        if number in done or number % world_size != rank:
            continue
        yield index, name, load


def _load_chunks(state: Path) -> tuple[list[dict], np.ndarray]:
    records, blocks = [], []
    for records_path in sorted(state.glob("chunk_*.json")):
        chunk_records = json.loads(records_path.read_text())
        vectors = np.load(records_path.with_suffix(".npy"))
        records += chunk_records
        blocks.append(vectors if vectors.shape[1] else np.full((len(chunk_records), 0), np.nan, np.float16))
    width = max((b.shape[1] for b in blocks), default=0)
    blocks = [b if b.shape[1] == width else np.full((len(b), width), np.nan, np.float16) for b in blocks]
    return records, (np.concatenate(blocks).astype(np.float32) if blocks else np.zeros((0, 0), np.float32))


def _embed_reference(reference: list[str], embedder, image_column: str) -> np.ndarray:
    source = open_inputs(reference, image_column)
    images = []
    for _, _, load in source.rows(0):
        try:
            images.append(decode_image(load()))
        except Exception:  # noqa: BLE001 - a broken reference image is left out
            continue
    if not images:
        raise ValueError(f"reference {reference}: no decodable images.")
    return np.asarray(embedder(images), np.float32)


class _UnionFind:
    def __init__(self, count: int):
        self.parent = list(range(count))

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


def _global_stages(records: list[dict], embeddings: np.ndarray, config: CurationConfig,
                   reference: np.ndarray | None) -> dict[str, float]:
    timings = {}
    alive = [k for k, record in enumerate(records) if _alive(record, config, "duplicates")]
    if config.on("duplicates"):
        begin = time.perf_counter()
        _duplicates(records, embeddings, alive, config)
        timings["duplicates"] = time.perf_counter() - begin
    if config.on("domain") and reference is not None:
        begin = time.perf_counter()
        alive = [k for k, record in enumerate(records) if _alive(record, config, "domain")]
        for start in range(0, len(alive), 1024):
            block = alive[start:start + 1024]
            similarity = np.nan_to_num(embeddings[block]) @ reference.T
            k = min(config.reference_k, reference.shape[0])
            top = -np.sort(-similarity, axis=1)[:, :k].mean(axis=1)
            for row, score in zip(block, top):
                records[row]["stages"]["domain"] = {"reference_similarity": round(float(score), 4),
                                                    "verdict": _verdict(score >= config.min_reference_similarity)}
        timings["domain"] = time.perf_counter() - begin
    if config.on("balance"):
        begin = time.perf_counter()
        _balance(records, embeddings, config)
        timings["balance"] = time.perf_counter() - begin
    for record in records:
        stages = record["stages"]
        record["verdict"] = "drop" if any(stage.get("verdict") == "drop" for stage in stages.values()) else "keep"
        record["dropped_by"] = next((name for name in STAGES if stages.get(name, {}).get("verdict") == "drop"), None)
    return timings


def _duplicates(records, embeddings, alive: list[int], config: CurationConfig) -> None:
    """Clusters near-duplicates among `alive` (hash distance or embedding cosine) and keeps each cluster's best."""
    union = _UnionFind(len(alive))
    hashes = np.array([int(records[k]["phash"], 16) for k in alive], dtype=np.uint64)
    for start in range(0, len(alive), 256):  # all pairs, in blocks: Hamming distances by bit counts of the XORs
        block = hashes[start:start + 256, None] ^ hashes[None, :]
        distance = np.unpackbits(block.view(np.uint8), axis=-1).reshape(*block.shape, 64).sum(-1)
        for a, b in zip(*np.nonzero(distance <= config.max_hash_distance)):
            if start + a < b:
                union.union(start + int(a), int(b))
    if config.min_duplicate_cosine is not None and embeddings.shape[1] and len(alive) > 1:
        # centred on the set's mean: what all images share (a backbone's pooled outputs have a large common part,
        # a random backbone's almost only that) does not make two images near-duplicates
        vectors = np.nan_to_num(embeddings[alive])
        vectors = vectors - vectors.mean(axis=0, keepdims=True)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        for start in range(0, len(alive), 1024):
            similarity = vectors[start:start + 1024] @ vectors.T
            for a, b in zip(*np.nonzero(similarity >= config.min_duplicate_cosine)):
                if start + a < b:
                    union.union(start + int(a), int(b))
    clusters: dict[int, list[int]] = {}
    for position in range(len(alive)):
        clusters.setdefault(union.find(position), []).append(position)
    for members in clusters.values():
        best = max(members, key=lambda m: (quality_rank(records[alive[m]]), -m))
        for member in members:
            record = records[alive[member]]
            record["stages"]["duplicates"] = {
                "cluster": int(records[alive[min(members)]]["index"]), "cluster_size": len(members),
                "verdict": _verdict(member == best)}
            if member != best:
                record["stages"]["duplicates"]["duplicate_of"] = int(records[alive[best]]["index"])


def kmeans(vectors: np.ndarray, clusters: int, seed: int = 0, iterations: int = 30) -> np.ndarray:
    """Seeded k-means (k-means++ start, Lloyd's iterations) on rows of `vectors`; returns each row's cluster."""
    rng = np.random.default_rng(seed)
    count = len(vectors)
    clusters = max(1, min(clusters, count))
    centres = [vectors[rng.integers(count)]]
    for _ in range(1, clusters):
        distance = np.min(((vectors[:, None] - np.asarray(centres)[None]) ** 2).sum(-1), axis=1)
        total = distance.sum()
        centres.append(vectors[rng.choice(count, p=distance / total) if total > 0 else rng.integers(count)])
    centres = np.asarray(centres)
    labels = np.zeros(count, dtype=np.int64)
    for _ in range(iterations):
        labels = np.argmin(((vectors[:, None] - centres[None]) ** 2).sum(-1), axis=1)
        moved = np.array([vectors[labels == c].mean(0) if (labels == c).any() else centres[c]
                          for c in range(clusters)])
        if np.allclose(moved, centres):
            break
        centres = moved
    return labels


def _balance(records, embeddings, config: CurationConfig) -> None:
    alive = [k for k, record in enumerate(records) if _alive(record, config, "balance")
             and all(stage.get("verdict") != "drop" for stage in record["stages"].values())]
    if not alive or not embeddings.shape[1]:
        return
    clusters = config.clusters or max(1, round(math.sqrt(len(alive) / 2)))
    labels = kmeans(np.nan_to_num(embeddings[alive]), clusters, seed=config.seed)
    cap = config.cluster_cap or max(1, math.ceil(2 * len(alive) / max(1, len(set(labels.tolist())))))
    for cluster in set(labels.tolist()):
        members = [alive[k] for k in np.nonzero(labels == cluster)[0]]
        members.sort(key=lambda k: -quality_rank(records[k]))
        for rank, member in enumerate(members):
            records[member]["stages"]["balance"] = {"cluster": int(cluster), "cluster_size": len(members),
                                                    "cap": cap, "verdict": _verdict(rank < cap)}


def _summary(records, config, timings, description, global_seconds) -> dict:
    per_stage = {}
    for stage in STAGES:
        seen = [r["stages"][stage]["verdict"] for r in records if "verdict" in r["stages"].get(stage, {})]
        per_stage[stage] = {"on": config.on(stage), "measured": len(seen), "kept": seen.count("keep"),
                            "dropped": seen.count("drop")}
    images = len(records)
    return {"input": description, "images": images, "kept": sum(r["verdict"] == "keep" for r in records),
            "stages": per_stage, "config": dataclasses.asdict(config),
            "seconds": {key: round(value, 3) for key, value in timings.items()},
            "images_per_second": {key: round(images / value, 1) for key, value in timings.items() if value > 0},
            "global_seconds": round(global_seconds, 3)}


def _write_records(path: Path, records: list[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(record) + "\n" for record in records))


def _write_dataset(source: ImageSource, kept: list[int], records: list[dict], folder: Path) -> Path:
    """The kept images as a `datasets.Dataset` (`image` and `source` columns, the scores as JSON in `curation`),
    written with `save_to_disk` into `folder` (replaced atomically: written beside it, then renamed)."""
    import shutil

    datasets = require("datasets", feature="curation")
    ours = folder.parent / STATE_FOLDER / "dataset_written"
    if folder.exists() and not ours.is_file():
        raise ValueError(f"{folder} exists and was not written by a curation run: it is left as it is; move it or "
                         "pass another --out.")

    wanted = set(kept)
    by_index = {record["index"]: record for record in records}

    def rows():
        for index, name, load in source.rows(0):
            if index in wanted:
                value = load()
                if isinstance(value, dict):
                    value = value.get("bytes") or Path(value["path"]).read_bytes()
                elif not isinstance(value, (bytes, bytearray)):
                    import io

                    buffer = io.BytesIO()
                    value.convert("RGB").save(buffer, format="PNG")
                    value = buffer.getvalue()
                yield {"image": {"bytes": bytes(value), "path": None}, "source": name,
                       "curation": json.dumps(by_index[index]["stages"])}

    import tempfile

    features = datasets.Features({"image": datasets.Image(), "source": datasets.Value("string"),
                                  "curation": datasets.Value("string")})
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    # a cache of its own: `from_generator` keys its cache by the generator's code, which is the same for every run
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".curation-cache-") as cache:
        dataset = datasets.Dataset.from_generator(rows, features=features, cache_dir=cache) if wanted else \
            datasets.Dataset.from_dict({"image": [], "source": [], "curation": []}, features=features)
        dataset.save_to_disk(str(partial))
        del dataset
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(partial, folder)
    atomic_write_text(ours, "written by sapiens2_hf.curation\n")
    return folder


__all__ = ["BackboneEmbedder", "CurationConfig", "CurationResult", "ImageSource", "PersonSegmenter", "STAGES",
           "curate", "decode_image", "kmeans", "measure_image", "open_inputs", "quality_rank"]
