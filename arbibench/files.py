"""Atomic file writes and file digests: the one place arbibench writes a file that a crash must not leave half done.

Every result a later run reads back (model cards, example images, checkpoints and their cards, run summaries,
leaderboard tables) goes through :func:`atomic_write`: the bytes go to a temporary file in the same folder (so the
rename cannot cross file systems), are flushed to disk with ``fsync``, then ``os.replace`` puts the whole file in
place of the old one. A reader sees the old file or the new one, never half of either; a failed write (disk full,
folder not writable) removes the temporary and raises one ``OSError`` that names the file and the fix.

Stdlib only, so every layer (the torch-free card schema and leaderboard included) may use it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

from arbibench.faults import fault_point

__all__ = [
    "TMP_SUFFIX", "atomic_write", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "check_writable",
    "pid_alive", "sha256_file",
]

#: Every temporary this module creates is ``.<name>.<pid>.tmp`` beside its target, so a test can tell none was left.
TMP_SUFFIX = ".tmp"
_CHUNK = 1 << 20


def _tmp_path(path: Path) -> Path:
    # the pid keeps two processes writing the same file from sharing (and truncating) one temporary
    return path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a writer's temporary, a queue runner, a site build may outlive it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _remove_stale_temporaries(path: Path) -> None:
    """Temporaries of ``path`` left by killed writers (their pid is gone): a rerun leaves the folder clean."""
    for tmp in path.parent.glob(f".{path.name}.*{TMP_SUFFIX}"):
        pid = tmp.name[len(path.name) + 2 : -len(TMP_SUFFIX)]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable; a platform without directory file descriptors skips it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _advice(code: int | None, path: Path) -> str:
    """The fix for a failed write of ``path``: a full disk and a folder in the file's place want different ones."""
    if code == errno.EISDIR:
        return f"it is a folder: name a file in it (e.g. {path / 'out.json'}), then rerun"
    if code == errno.ENOENT:
        return f"{path.parent} cannot be created there: pick another path, then rerun"
    if code == errno.ENOTDIR:
        return "part of its folder path is a file, not a folder: pick another path, then rerun"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "free disk space, then rerun"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"make {path.parent} writable or pick another path, then rerun"
    return f"free disk space or make {path.parent} writable, then rerun"


def check_writable(path: str | os.PathLike[str], *, folder: bool = False) -> Path:
    """``path`` (a file, or with ``folder=True`` a folder to write into), checked before a command's work instead of
    after it: one ``OSError`` naming what is in the way, creating nothing (the write creates missing folders).

    Refused: a folder where a file goes (or a file where a folder goes), a parent path through a file, and a nearest
    existing folder this process cannot write in.
    """
    path = Path(path)
    if path.is_dir() and not folder:
        raise IsADirectoryError(errno.EISDIR, f"{path} is a folder, not a file: name a file in it, e.g. "
                                f"{path / 'out.json'}")
    if path.exists() and not path.is_dir() and folder:
        raise NotADirectoryError(errno.ENOTDIR, f"{path} is a file, not a folder: pick another path")
    existing = path if folder and path.is_dir() else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # the write creates the missing folders below it
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"cannot write {path}: {existing} is a file, not a folder; pick "
                                 "another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"cannot write {path}: {existing} is not writable; make it writable or "
                              "pick another path")
    return path


def atomic_write(write: Callable[[IO[bytes]], object], path: str | os.PathLike[str], *,
                 fault: str | None = None) -> Path:
    """``write(file)`` into a temporary beside ``path``, fsync it, then rename it over ``path``; returns ``path``.

    ``write`` gets a binary file object (``np.savez_compressed``, ``PIL.Image.save`` and ``file.write`` all take
    one). ``fault`` names the :mod:`arbibench.faults` point between the finished temporary and the rename, where the
    crash tests kill the process. A temporary left by a killed writer of the same file is removed once this write
    is in place.
    """
    path = Path(path)
    if path.is_dir() or not path.name:  # "." or a folder: one error that says so, not a temporary's odd name
        raise IsADirectoryError(errno.EISDIR, f"cannot write {path}: {_advice(errno.EISDIR, path)}")
    tmp = _tmp_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if fault is not None:
            fault_point(fault)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        message = f"cannot write {path}: {e.strerror or e}; {_advice(e.errno, path)}"
        raise OSError(*((e.errno, message) if e.errno is not None else (message,))) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)
    _remove_stale_temporaries(path)
    return path


def atomic_write_bytes(data: bytes, path: str | os.PathLike[str], *, fault: str | None = None) -> Path:
    """``data`` into ``path`` through :func:`atomic_write`."""
    return atomic_write(lambda f: f.write(data), path, fault=fault)


def atomic_write_text(text: str, path: str | os.PathLike[str], *, fault: str | None = None) -> Path:
    """``text`` (UTF-8) into ``path`` through :func:`atomic_write`."""
    return atomic_write_bytes(text.encode("utf-8"), path, fault=fault)


def atomic_write_json(obj: object, path: str | os.PathLike[str], *, fault: str | None = None) -> Path:
    """``obj`` as indented JSON (and a final newline) into ``path`` through :func:`atomic_write`.

    NaN and infinity are refused (``ValueError``) rather than written as the non-JSON tokens ``NaN``/``Infinity``.
    """
    return atomic_write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n", path, fault=fault)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB chunks (checkpoints are pinned and compared by it)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()
