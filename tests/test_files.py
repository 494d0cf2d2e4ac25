"""arbibench.files: a write is whole or absent, the old file survives a failed write, digests match hashlib."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
from pathlib import Path

import pytest

from arbibench.files import (
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_writable,
    sha256_file,
)


def test_writes_create_folders_and_leave_no_temporary(tmp_path: Path) -> None:
    a = atomic_write_text("héllo\n", tmp_path / "a" / "b.txt")
    b = atomic_write_json({"x": [1, 2.5]}, tmp_path / "c.json")
    c = atomic_write_bytes(b"\x00\x01", tmp_path / "d.bin")
    assert a.read_text(encoding="utf-8") == "héllo\n"
    assert json.loads(b.read_text()) == {"x": [1, 2.5]} and b.read_text().endswith("\n")
    assert c.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["b.txt", "c.json", "d.bin"]


def test_a_writer_that_fails_halfway_keeps_the_old_file(tmp_path: Path) -> None:
    path = atomic_write_text("old\n", tmp_path / "f.txt")

    def half(f: object) -> None:
        f.write(b"ne")  # type: ignore[attr-defined]
        raise RuntimeError("writer crashed")

    with pytest.raises(RuntimeError, match="writer crashed"):
        atomic_write(half, path)
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_disk_full_is_one_error_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = atomic_write_text("old\n", tmp_path / "f.txt")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=f"cannot write {path}: No space left on device; free disk space") as info:
        atomic_write_text("new\n", path)
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["f.txt"]


def test_a_folder_in_the_files_place_is_named_not_a_full_disk(tmp_path: Path) -> None:
    """``--json /tmp`` used to be told to free disk space or make / writable."""
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(OSError, match=f"cannot write {folder}: .*it is a folder: name a file in it") as info:
        atomic_write_text("x\n", folder)
    assert "free disk space" not in str(info.value) and info.value.errno == errno.EISDIR
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and not any(folder.iterdir())


def test_check_writable_refuses_what_the_write_would_fail_on_and_creates_nothing(tmp_path: Path) -> None:
    a_file = tmp_path / "f.txt"
    a_file.write_text("")
    with pytest.raises(IsADirectoryError, match="is a folder, not a file"):
        check_writable(tmp_path)
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        check_writable(a_file, folder=True)
    with pytest.raises(NotADirectoryError, match=f"{a_file} is a file, not a folder"):
        check_writable(a_file / "sub" / "r.json")
    assert check_writable(tmp_path / "new" / "deeper" / "r.json") == tmp_path / "new" / "deeper" / "r.json"
    assert check_writable(a_file) == a_file and check_writable(tmp_path / "cards", folder=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_json_refuses_nan_instead_of_writing_invalid_json(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        atomic_write_json({"acc": math.nan}, tmp_path / "f.json")
    assert not list(tmp_path.iterdir())


def test_sha256_file_matches_hashlib_across_chunks(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # > 2 MiB: several 1 MiB chunks
    path = atomic_write_bytes(data, tmp_path / "w.bin")
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    from arbibench.models.zoo import sha256_file as zoo_sha256_file  # the zoo's name for it still works

    assert zoo_sha256_file(path) == sha256_file(path)


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path: Path) -> None:
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".f.txt.{int(gone.stdout)}.tmp"  # a writer with that pid was killed before its rename
    stale.write_text("ne")
    other = tmp_path / ".g.txt.1.tmp"  # another file's temporary (pid 1 is alive): not ours to remove
    other.write_text("x")
    atomic_write_text("new\n", tmp_path / "f.txt")
    assert sorted(os.listdir(tmp_path)) == [".g.txt.1.tmp", "f.txt"]


def test_the_current_folder_as_a_file_is_named_as_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``result.save_json(".")`` used to fail on the temporary's name ("has an empty name")."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(IsADirectoryError, match=r"cannot write \.: it is a folder: name a file in it \(e\.g\. out"):
        atomic_write_json({"acc": 0.5}, ".")
    assert not list(tmp_path.iterdir())
