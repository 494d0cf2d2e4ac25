"""No tracked file names one machine's absolute folder: a default or a documented command must work in any clone."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# An absolute path into a home or workspace folder, not preceded by a URL host or another path part.
MACHINE_PATH = re.compile(
    r"(?<![\w.:/~-])("
    r"/work/|/root/|/home/[A-Za-z_][\w.-]*/|/Users/[A-Za-z_][\w.-]*/|/mnt/[A-Za-z]|/tmp/bash_jobs|[A-Z]:\\Users\\"
    r")"
)

# path -> why it may name such a folder. Add to this only with a reason a reader can check.
ALLOWED: dict[str, str] = {
    "tests/test_portable_paths.py": "the detector's own examples",
}


def machine_paths(text: str) -> list[str]:
    """The absolute home/machine paths found in ``text``, as ``line: match`` strings."""
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        hits += [f"{number}: {m.group(0)} in {line.strip()[:120]!r}" for m in MACHINE_PATH.finditer(line)]
    return hits


def test_detector_finds_machine_paths_and_passes_portable_ones() -> None:
    found = machine_paths(
        'p.add_argument("--data-dir", default="/work/shared/data/cifar10")\n'
        "    ARBIBENCH_DATA=/home/alice/data make test\n"
        "open('/Users/bob/x.npz')\ncd /root/arbibench\n"
    )
    assert len(found) == 4
    assert (
        machine_paths(
            "ARBIBENCH_DATA=../shared/data\n~/.cache/arbibench\nhttps://github.com/x/work/tree/main\n"
            "see arbibench/data/ and tests/data/store.db\n/tmp/arbibench-run\n"
        )
        == []
    )


def test_no_tracked_file_names_a_machine_path() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no tracked-file list to scan")
    names = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout.decode().split("\0")
    )
    offenders = {}
    for name in filter(None, names):
        if name in ALLOWED:
            continue
        path = REPO / name
        if not path.is_file():
            continue
        raw = path.read_bytes()
        if b"\0" in raw[:8192]:
            continue  # binary (a store, a checkpoint): no command or default to read
        if hits := machine_paths(raw.decode("utf-8", errors="replace")):
            offenders[name] = hits
    assert not offenders, (
        "tracked files name one machine's absolute folder; use $ARBIBENCH_DATA, ../shared/data or a path relative "
        f"to the repository (or list a real exception in ALLOWED): {offenders}"
    )
