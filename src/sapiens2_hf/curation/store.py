"""Curation's per-image records on disk, in columns: one Parquet file and one float16 `.npy` per chunk.

A chunk `k` of a run is two files under `<out>/.curation/`, each written atomically, and a done-marker of the run
layer (`runs.resume`), written last:

- `chunk_<k>.parquet`: one row per image, the `COLUMNS`: `image_kept` (every per-image stage kept it), `phash`
  (uint64), `rank` (`quality_rank`), `stages` (the per-image stages' scores and verdicts as JSON), ...;
- `chunk_<k>.npy`: the embeddings, float16 `(rows, d)`, NaN rows for images not embedded (`d` = 0 without a model);
- `<out>/.sapiens2-hf/done/curate/chunks/chunk_<k>.json`: the marker, with the run's fingerprint.

The global stages read the columns they need as small arrays (a few bytes per image) and the embeddings as one
float16 file (`embeddings.npy`, streamed together from the chunks' files), never as Python objects per image.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..runs.resume import ResumeMarkers
from ..utils.atomic_io import atomic_write
from ..utils.extras import require

STATE_FOLDER = ".curation"
COLUMNS = ("index", "source", "computed_by", "decoded", "image_kept", "phash", "rank", "stages")


def _arrow():
    require("datasets", feature="curation")  # pyarrow comes with datasets
    import pyarrow.parquet  # binds pyarrow too

    return pyarrow, pyarrow.parquet


class ChunkStore:
    """The chunks of one run in `out`: data files under `<out>/.curation/`, done-markers through the run layer's
    `ResumeMarkers` (kind `chunks` of the run `curate`); a chunk is done when its files exist and its marker holds
    this run's `fingerprint` (the inputs, the per-image settings and the embedding model)."""

    def __init__(self, out: str | Path, fingerprint: dict):
        self.folder = Path(out) / STATE_FOLDER
        self.folder.mkdir(parents=True, exist_ok=True)
        self.markers = ResumeMarkers(out, "chunks", run="curate")
        self.fingerprint = fingerprint

    def paths(self, chunk: int) -> tuple[Path, Path]:
        """(records, embeddings) of chunk `chunk`."""
        stem = self.folder / f"chunk_{chunk:06d}"
        return stem.with_suffix(".parquet"), stem.with_suffix(".npy")

    def done(self) -> list[int]:
        """The finished chunks, in order."""
        folder = self.markers.path("chunk").parent
        names = (path.stem for path in folder.glob("chunk_*.json")) if folder.is_dir() else ()
        return sorted(int(name.split("_")[1]) for name in names if self.markers.is_done(name, self.fingerprint))

    def write(self, chunk: int, columns: dict, embeddings: np.ndarray) -> None:
        """Writes chunk `chunk`'s records (`columns`: `COLUMNS` but `stages` as dicts) and embeddings, then its
        marker."""
        pyarrow, parquet = _arrow()
        records_path, embeddings_path = self.paths(chunk)
        table = pyarrow.table({
            "index": pyarrow.array(columns["index"], pyarrow.int64()),
            "source": pyarrow.array(columns["source"], pyarrow.string()),
            "computed_by": pyarrow.array(columns["computed_by"], pyarrow.int32()),
            "decoded": pyarrow.array(columns["decoded"], pyarrow.bool_()),
            "image_kept": pyarrow.array(columns["image_kept"], pyarrow.bool_()),
            "phash": pyarrow.array(np.asarray(columns["phash"], np.uint64), pyarrow.uint64()),
            "rank": pyarrow.array(columns["rank"], pyarrow.float64()),
            "stages": pyarrow.array([json.dumps(stages) for stages in columns["stages"]], pyarrow.string())})
        self.markers.clear(f"chunk_{chunk:06d}")
        atomic_write(records_path, lambda file: parquet.write_table(table, file))
        atomic_write(embeddings_path, lambda file: np.save(file, np.asarray(embeddings, np.float16)))
        self.markers.mark_done(f"chunk_{chunk:06d}", self.fingerprint, [records_path, embeddings_path])

    def columns(self, chunks: list[int], names: tuple[str, ...]):
        """Yields `(chunk, {name: array})` for each chunk, only the columns `names`."""
        _, parquet = _arrow()
        for chunk in chunks:
            table = parquet.read_table(self.paths(chunk)[0], columns=list(names))
            yield chunk, {name: table.column(name).to_numpy(zero_copy_only=False) for name in names}

    def embedding_shape(self, chunk: int) -> tuple[int, int]:
        return np.load(self.paths(chunk)[1], mmap_mode="r").shape  # the header only: the map is dropped at once

    def gather_embeddings(self, chunks: list[int], count: int, width: int) -> Path:
        """The chunks' embeddings as one `(count, width)` float16 `.npy` (streamed, chunk by chunk; a chunk without
        embeddings gives NaN rows); returns its path."""
        path = self.folder / "embeddings.npy"
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float16)), "fortran_order": False,
                  "shape": (count, width)}

        def write(file):
            np.lib.format.write_array_header_1_0(file, header)
            for chunk in chunks:
                block = np.load(self.paths(chunk)[1])
                if block.shape[1] != width:
                    block = np.full((len(block), width), np.nan, np.float16)
                file.write(np.ascontiguousarray(block, np.float16).tobytes())

        atomic_write(path, write, durable=False)  # scratch: rebuilt by every run's global stages
        return path


__all__ = ["COLUMNS", "ChunkStore", "STATE_FOLDER"]
