"""Curation's per-image records on disk, in columns: one Parquet file and one float16 `.npy` per chunk.

A chunk `k` of a run is three files under `<out>/.curation/`, each written atomically:

- `chunk_<k>.parquet`: one row per image: `index`, `source`, `computed_by`, `decoded`, `image_kept` (every per-image
  stage kept it), `phash` (uint64), `rank` (`quality_rank`) and `stages` (the per-image stages' scores and verdicts
  as JSON);
- `chunk_<k>.npy`: the images' embeddings, float16 `(rows, d)`, NaN rows for images not embedded (`d` = 0 without
  an embedding model);
- `chunk_<k>.json`: the marker, written last: its presence says the chunk is done.

The global stages read the columns they need as small arrays (a few bytes per image) and the embeddings as one
float16 file (`embeddings.npy`, streamed together from the chunks' files), never as Python objects per image.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..utils.atomic_io import atomic_write, atomic_write_json
from ..utils.extras import require

COLUMNS = ("index", "source", "computed_by", "decoded", "image_kept", "phash", "rank", "stages")


def _arrow():
    require("datasets", feature="curation")  # pyarrow comes with datasets
    import pyarrow
    import pyarrow.parquet

    return pyarrow, pyarrow.parquet


def chunk_paths(state: Path, chunk: int) -> tuple[Path, Path, Path]:
    """(marker, records, embeddings) of chunk `chunk`."""
    stem = state / f"chunk_{chunk:06d}"
    return stem.with_suffix(".json"), stem.with_suffix(".parquet"), stem.with_suffix(".npy")


def done_chunks(state: Path) -> list[int]:
    return sorted(int(path.stem.split("_")[1]) for path in state.glob("chunk_*.json"))


def write_chunk(state: Path, chunk: int, columns: dict, embeddings: np.ndarray, computed_by: int) -> None:
    """Writes chunk `chunk`'s records (`columns`: `COLUMNS` but `stages` as dicts) and embeddings, marker last."""
    pyarrow, parquet = _arrow()
    marker, records_path, embeddings_path = chunk_paths(state, chunk)
    table = pyarrow.table({
        "index": pyarrow.array(columns["index"], pyarrow.int64()),
        "source": pyarrow.array(columns["source"], pyarrow.string()),
        "computed_by": pyarrow.array(columns["computed_by"], pyarrow.int32()),
        "decoded": pyarrow.array(columns["decoded"], pyarrow.bool_()),
        "image_kept": pyarrow.array(columns["image_kept"], pyarrow.bool_()),
        "phash": pyarrow.array(np.asarray(columns["phash"], np.uint64), pyarrow.uint64()),
        "rank": pyarrow.array(columns["rank"], pyarrow.float64()),
        "stages": pyarrow.array([json.dumps(stages) for stages in columns["stages"]], pyarrow.string())})
    atomic_write(records_path, lambda file: parquet.write_table(table, file))
    atomic_write(embeddings_path, lambda file: np.save(file, np.asarray(embeddings, np.float16)))
    atomic_write_json(marker, {"rows": len(columns["index"]), "first": int(columns["index"][0]) if
                               len(columns["index"]) else None, "computed_by": computed_by,
                               "embedding_width": int(embeddings.shape[1])})


def read_columns(state: Path, chunks: list[int], names: tuple[str, ...]):
    """Yields `(chunk, {name: array})` for each chunk, only the columns `names`."""
    _, parquet = _arrow()
    for chunk in chunks:
        table = parquet.read_table(chunk_paths(state, chunk)[1], columns=list(names))
        yield chunk, {name: table.column(name).to_numpy(zero_copy_only=False) for name in names}


def embedding_width(state: Path, chunks: list[int]) -> int:
    return max((json.loads(chunk_paths(state, chunk)[0].read_text())["embedding_width"] for chunk in chunks),
               default=0)


def gather_embeddings(state: Path, chunks: list[int], count: int, width: int) -> Path:
    """The chunks' embeddings as one `(count, width)` float16 `.npy` (streamed, chunk by chunk; a chunk without
    embeddings gives NaN rows); returns its path."""
    path = state / "embeddings.npy"
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float16)), "fortran_order": False,
              "shape": (count, width)}

    def write(file):
        np.lib.format.write_array_header_1_0(file, header)
        for chunk in chunks:
            block = np.load(chunk_paths(state, chunk)[2])
            if block.shape[1] != width:
                block = np.full((len(block), width), np.nan, np.float16)
            file.write(np.ascontiguousarray(block, np.float16).tobytes())

    atomic_write(path, write, durable=False)  # scratch: rebuilt by every run's global stages
    return path


__all__ = ["COLUMNS", "chunk_paths", "done_chunks", "embedding_width", "gather_embeddings", "read_columns",
           "write_chunk"]
