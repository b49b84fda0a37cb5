"""Atomic writes (layer 1): a reader sees a file's old content or its whole new content, never a part of it.

Files (`atomic_write`, `atomic_write_bytes`, `atomic_write_text`, `atomic_write_json`) are written to a temporary
sibling `.<name>.<random>.tmp` and renamed over the target; on any error the temporary file is removed and the
target is left as it was. Folders: `staging_folder` beside the destination, published by `replace_into_folder`.
New files and folders are created with mode 0o666 / 0o777, so the kernel applies the umask (as for a plain `open()`
/ `mkdir()`) and the process umask is never changed.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any


_TEMPORARY_SUFFIX = ".tmp"


def _temporary_sibling(path: Path) -> tuple[int, Path]:
    """An exclusively created, empty temporary file next to `path`: `(file descriptor, its path)`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}{_TEMPORARY_SUFFIX}")
        try:
            return os.open(temporary, flags, 0o666), temporary
        except FileExistsError:  # a name drawn twice: draw again
            continue


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "wb",
                 encoding: str | None = None, durable: bool = True) -> Path:
    """Writes through `write(file_object)` into a temporary file next to `path`, then renames it over `path`.

    `path`'s folder is created; `mode` is `"wb"` or `"w"` (text, `encoding` default UTF-8). `durable` (default)
    flushes the file to disk (`fsync`) before the rename, so a crash right after leaves the new content; `False`
    keeps the atomicity for readers only, for many small files otherwise bound by disk flushes. Returns `path`.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write writes in mode 'wb' or 'w', got {mode!r}.")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = _temporary_sibling(path)
    try:
        text = {"encoding": encoding or "utf-8"} if mode == "w" else {}
        with os.fdopen(handle, mode, **text) as file:
            write(file)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes, durable: bool = True) -> Path:
    """Writes `data` to `path` atomically (see `atomic_write`)."""
    return atomic_write(path, lambda file: file.write(data), durable=durable)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8", durable: bool = True) -> Path:
    """Writes `text` to `path` atomically (see `atomic_write`)."""
    return atomic_write_bytes(path, text.encode(encoding), durable=durable)


def atomic_write_json(path: str | os.PathLike, data: Any, indent: int | None = None, allow_nan: bool = True,
                      trailing_newline: bool = False, durable: bool = True, **dumps_kwargs) -> Path:
    """Writes `json.dumps(data, ...)` to `path` atomically, UTF-8; the text is built first, so data that does not
    serialise (or NaN with `allow_nan=False`) raises without leaving anything behind."""
    text = json.dumps(data, indent=indent, allow_nan=allow_nan, **dumps_kwargs) + ("\n" if trailing_newline else "")
    return atomic_write_text(path, text, durable=durable)


def move_into(source: str | os.PathLike, destination: str | os.PathLike) -> None:
    """Puts the file `source` at `destination` atomically (a reader sees the old file or the new one).

    A plain rename when both are on one filesystem; otherwise `source` is first copied next to `destination` (the
    copy is not visible under the final name), then renamed over it, and `source` is removed.
    """
    source, destination = Path(source), Path(destination)
    try:
        os.replace(source, destination)
        return
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
    with source.open("rb") as reader:
        atomic_write(destination, lambda file: shutil.copyfileobj(reader, file))
    source.unlink()


@contextlib.contextmanager
def staging_folder(destination: str | os.PathLike) -> Iterator[Path]:
    """A new, empty folder `.<name>.staging-<random>` beside `destination` (a unique name: an interrupted write's
    leftovers never block a new one), removed on exit if `replace_into_folder` did not rename it into place."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    while True:
        staging = destination.with_name(f".{destination.name}.staging-{secrets.token_hex(4)}")
        try:
            staging.mkdir(mode=0o777)
            break
        except FileExistsError:
            continue
    try:
        yield staging
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def replace_into_folder(staging: str | os.PathLike, folder: str | os.PathLike,
                        stale: Iterable[str] = ()) -> list[Path]:
    """Publishes the files of `staging` at `folder`.

    - `folder` does not exist: `staging` is renamed to `folder` as a whole.
    - `folder` exists: every file under `staging` is moved to the same relative path in `folder` with one atomic
      rename each (subfolders created as needed), replacing the old copy. Nothing else in `folder` is touched,
      except the files directly in `folder` whose name matches one of the `stale` glob patterns and that this write
      did not produce: those are removed (e.g. the weight shards of an earlier, larger save).

    Returns:
        The paths written, relative to `folder`, sorted.
    """
    staging, folder = Path(staging), Path(folder)
    written = sorted(path.relative_to(staging) for path in staging.rglob("*") if path.is_file())
    if not folder.exists():
        os.replace(staging, folder)
        return written
    if not folder.is_dir():
        raise FileExistsError(f"{folder} exists and is not a folder.")
    for relative in written:
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        move_into(staging / relative, folder / relative)
    patterns = tuple(stale)
    if patterns:
        written_names = {str(relative) for relative in written}
        for path in folder.iterdir():
            if (path.is_file() and path.name not in written_names
                    and any(fnmatch.fnmatchcase(path.name, pattern) for pattern in patterns)):
                path.unlink()
    return written


__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "move_into",
    "replace_into_folder",
    "staging_folder",
]
