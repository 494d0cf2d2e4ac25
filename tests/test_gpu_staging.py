"""CIFAR-10 reaches a lent GPU machine in chunks sized to the room the working tree leaves in a call: every chunk fits,
and the files assembled there are the source files byte for byte (benchmarks/gpu/stage_cifar10.py)."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("stage_cifar10", ROOT / "benchmarks" / "gpu" / "stage_cifar10.py")
assert SPEC is not None and SPEC.loader is not None
stage = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(stage)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A checkout whose tracked files weigh 3 MB."""
    r = tmp_path / "checkout"
    r.mkdir()
    subprocess.run(["git", "init", "-q", str(r)], check=True)
    (r / "weights.bin").write_bytes(b"\1" * 3_000_000)
    subprocess.run(["git", "-C", str(r), "add", "weights.bin"], check=True)
    return r


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_chunk_fits_a_call_and_the_files_arrive_whole(repo, tmp_path, data_dir, monkeypatch):
    source = Path(data_dir) / "cifar10"
    monkeypatch.setattr(stage, "PLAN_DIR", tmp_path / "plan")
    limit = 3_000_000 + stage.MARGIN + 60_000_000  # a call carries 60 MB of data beside the tree: 3 chunks
    there = tmp_path / "gpu-data"
    plan = stage.prepare(0, source, repo, new=True, limit=limit)
    assert plan["chunks"] == 3 and plan["chunk_bytes"] < 60_000_000
    assert ".gpu_data" not in subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                                             text=True, check=True).stdout  # ignored: only the carry sends it
    for index in range(plan["chunks"]):
        if index:
            stage.prepare(index, source, repo, new=False, limit=limit)
        sent = stage.travelling_bytes(repo) + sum(p.stat().st_size for p in (repo / ".gpu_data").iterdir())
        assert sent <= limit
        assert stage.receive(repo, there) is (index == plan["chunks"] - 1)
    for name in stage.FILES:
        assert _digest(there / "cifar10" / name) == _digest(source / name)
    with pytest.raises(SystemExit, match="chunk 3 does not exist"):
        stage.prepare(3, source, repo, new=False, limit=limit)


def test_a_tree_with_no_room_is_refused_by_name(repo, tmp_path, data_dir, monkeypatch):
    monkeypatch.setattr(stage, "PLAN_DIR", tmp_path / "plan")
    with pytest.raises(SystemExit, match="leaves 0.0 MB"):
        stage.prepare(0, Path(data_dir) / "cifar10", repo, new=True, limit=3_500_000)
