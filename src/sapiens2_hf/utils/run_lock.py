"""Exclusive run folders (layer 1): one run at a time writes a folder.

Every entry point that writes a folder (predict `--out`, the training scripts' `--output_dir`, `save_for_hub`,
`export_model`, `convert_official_checkpoint`) holds `run_folder_lock(folder)` while it writes: `LOCK_FILE` in the
folder (`_*` files are never pushed to the Hub), locked with `filelock` (released by the system when the process
dies) and holding JSON `pid`, `host`, `started`, `command` and a random `token`; removed on exit, exception included.

A second run into a held folder gets `RunFolderLockedError`, naming the holder and the fix. A lock file already there
when the lock is taken is read: one whose process is gone (same host, no such pid) is stale and taken over with a
warning; one from another host never is (the message says to delete it once that run is over). Under several
processes only the main one takes the lock (`enabled=False` elsewhere); nested holds by the holding process are
counted, not refused.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shlex
import socket
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from filelock import FileLock, Timeout


logger = logging.getLogger(__name__)

LOCK_FILE = "_sapiens2_run.lock"
# A lock file is written right after it is locked; one still empty (or cut short) after this long was left by a
# process that died in between, and counts as stale.
_UNFINISHED_LOCK_S = 30.0
_COMMAND_SHOWN = 200

# The folders this process holds: `[hold count, (filelock, lock record)]`; the lock is taken by the first hold and
# released by the last. Process state by nature (a lock belongs to a process); guarded for threads (the web app).
_held: dict[Path, list] = {}
_held_guard = threading.Lock()


class RunFolderLockedError(OSError):
    """Another run holds the folder (`LOCK_FILE`); the message names it and the fix."""


def current_command() -> str:
    """This process's command line, as the lock records it (`finetune.py --task pose ...`)."""
    argv = list(sys.argv) or ["python"]
    return shlex.join([Path(argv[0]).name or "python", *argv[1:]])


def _lock_record(command: str | None) -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": datetime.now().isoformat(timespec="seconds"),
            "command": command or current_command(), "token": secrets.token_hex(8)}


def read_lock(folder: str | os.PathLike) -> dict | None:
    """The record of `folder`'s lock file; `None` when there is none, `{}` when it is empty or unreadable."""
    try:
        text = (Path(folder) / LOCK_FILE).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError):
        return {}
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except OSError:  # it exists under another user, or no way to check here: assume it runs
        return True
    return True


def _is_stale(record: dict, path: Path) -> bool:
    """Whether the lock `record` (read from `path`) was left by a run that is over."""
    if not record:  # empty or cut short: a process died between creating and writing it, or is writing it now
        try:
            return time.time() - path.stat().st_mtime > _UNFINISHED_LOCK_S
        except OSError:
            return False
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    return pid != os.getpid() and not _process_exists(pid)


def describe_holder(record: dict) -> str:
    """`pid 123 on host, \\`finetune.py ...\\`, since 2025-01-01T12:00:00` (what the refusal shows of a lock)."""
    if not record:
        return "a run whose lock file is empty or unreadable"
    command = str(record.get("command", "?"))
    if len(command) > _COMMAND_SHOWN:
        command = command[:_COMMAND_SHOWN] + "..."
    return (f"pid {record.get('pid', '?')} on {record.get('host', '?')}, `{command}`, "
            f"since {record.get('started', '?')}")


def _refusal(folder: Path, record: dict) -> RunFolderLockedError:
    path = folder / LOCK_FILE
    return RunFolderLockedError(
        f"{folder} is in use by another run ({describe_holder(record)}); wait for it to end or write to another "
        f"folder (if that run is over, for example its machine restarted, delete {path}).",
    )


def check_run_folder_free(folder: str | os.PathLike) -> None:
    """Raises `RunFolderLockedError` when another run holds `folder` (a stale lock does not count): a cheap early
    check for an entry point that takes the lock only later."""
    folder = Path(folder)
    with _held_guard:
        if folder.resolve() in _held:
            return
    record = read_lock(folder)
    if record is not None and not _is_stale(record, folder / LOCK_FILE):
        raise _refusal(folder, record)


def _acquire(folder: Path, command: str | None) -> tuple[FileLock, dict]:
    """Takes `folder`'s lock (filelock), then checks the record of a lock file that was already there (a killed
    run's, or another host's): a live holder's is refused, a stale one taken over. Then writes this run's record."""
    path = folder / LOCK_FILE
    existed = path.exists()
    lock = FileLock(str(path), timeout=0, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise _refusal(folder, read_lock(folder) or {}) from None
    try:
        held = read_lock(folder) if existed else None
        if held is not None:
            if not _is_stale(held, path):
                raise _refusal(folder, held)
            logger.warning("Took over the lock of %s left by a run that is no longer running (%s).", folder,
                           describe_holder(held))
        record = _lock_record(command)
        path.write_text(json.dumps(record, indent=1), encoding="utf-8")
    except BaseException:
        lock.release()
        raise
    return lock, record


def _release(folder: Path, lock: FileLock, record: dict) -> None:
    """Removes the lock file when it is still this hold's (one taken over by force is left alone); releases."""
    try:
        if read_lock(folder) == record:
            with contextlib.suppress(FileNotFoundError):
                (folder / LOCK_FILE).unlink()
        else:
            logger.warning("The lock of %s was replaced while this run held it; leaving the new one.", folder)
    finally:
        lock.release()


@contextlib.contextmanager
def run_folder_lock(folder: str | os.PathLike, command: str | None = None, enabled: bool = True) -> Iterator[Path]:
    """Holds `folder` (created if missing) for this run; see the module docstring.

    Args:
        command (`str`, *optional*): what the lock records as the holder's command (default: this process's).
        enabled (`bool`, defaults to `True`): `False` on a launch's processes other than the main one, which write
            nothing of their own: they neither take the lock nor are refused by it.

    Raises `RunFolderLockedError` (another run holds `folder`) or `FileExistsError` (not a folder). A folder this hold
    created and that is still empty at release is removed: a refused or failed run leaves nothing behind.
    """
    folder = Path(folder)
    if not enabled:
        yield folder
        return
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"{folder} exists and is not a folder; pass a folder path.")
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    with _held_guard:
        hold = _held.get(key)
        if hold is not None:
            hold[0] += 1
    if hold is None:
        try:
            taken = _acquire(folder, command)
        except BaseException:
            _remove_if_empty(folder, created)
            raise
        with _held_guard:
            hold = _held[key] = [1, taken]
    try:
        yield folder
    finally:
        with _held_guard:
            hold[0] -= 1
            last = hold[0] == 0
            if last:
                del _held[key]
        if last:
            _release(folder, *hold[1])
            _remove_if_empty(folder, created)


def _remove_if_empty(folder: Path, created: bool) -> None:
    """A run that wrote nothing leaves no folder behind."""
    if created:
        with contextlib.suppress(OSError):
            folder.rmdir()


def folder_entries(folder: str | os.PathLike) -> list[Path]:
    """The entries of `folder` other than its lock file (what an "is it empty" check looks at)."""
    return [path for path in Path(folder).iterdir() if path.name != LOCK_FILE]


def refuse_filled_folder(folder: str | os.PathLike, overwrite: bool, note: str = "") -> None:
    """Raises `FileExistsError` when `folder` is not a folder, or holds entries (`folder_entries`) and `overwrite` is
    off; `note` ends the message (what an overwrite replaces)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"{folder} exists and is not a folder; pass a folder path.")
    if folder.is_dir() and folder_entries(folder) and not overwrite:
        raise FileExistsError(f"{folder} exists and is not empty; choose another folder or pass overwrite=True{note}.")


__all__ = [
    "LOCK_FILE",
    "RunFolderLockedError",
    "check_run_folder_free",
    "current_command",
    "describe_holder",
    "folder_entries",
    "read_lock",
    "refuse_filled_folder",
    "run_folder_lock",
]
