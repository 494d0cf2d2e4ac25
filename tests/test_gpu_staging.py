"""CIFAR-10 reaches a lent GPU machine in chunks sized to the room the working tree leaves in a call: the arrays travel
compressed, every chunk fits, and the files unpacked there hold the source arrays bit for bit
(benchmarks/gpu/stage_cifar10.py)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import numpy as np
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


def _arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path, allow_pickle=False) as d:
        return d["x"], d["y"]


def test_every_chunk_fits_a_call_and_the_arrays_arrive_whole(repo, tmp_path, data_dir, monkeypatch):
    source = Path(data_dir) / "cifar10"
    monkeypatch.setattr(stage, "PLAN_DIR", tmp_path / "plan")
    monkeypatch.setattr(stage, "FILES", ("train_4.npz", "test.npz"))  # two of the six files, at LZMA2's fastest
    monkeypatch.setattr(stage, "PRESET", 0)
    room = 20_000_000
    limit = 3_000_000 + stage.MARGIN + 4096 + room  # a call carries 20 MB of data beside the tree
    there = tmp_path / "gpu-data"
    (repo / ".git" / "info" / "exclude").unlink(missing_ok=True)  # a checkout without one: prepare writes it
    plan = stage.prepare(0, source, repo, new=True, limit=limit)
    raw = 2 * (10_000 * 3072 + 10_000 * 8)
    assert plan["stream_bytes"] < 0.8 * raw  # the delta filter and LZMA2 beat the files' deflate (0.92)
    assert plan["chunk_bytes"] == room and plan["chunks"] == -(-plan["stream_bytes"] // room) >= 2
    assert ".gpu_data" not in subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                                             text=True, check=True).stdout  # ignored: only the carry sends it
    for index in range(plan["chunks"]):
        if index:
            stage.prepare(index, source, repo, new=False, limit=limit)
        sent = stage.travelling_bytes(repo) + sum(p.stat().st_size for p in (repo / ".gpu_data").iterdir())
        assert sent <= limit
        assert stage.receive(repo, there) is (index == plan["chunks"] - 1)
    for name in stage.FILES:
        x, y = _arrays(there / "cifar10" / name)
        x0, y0 = _arrays(source / name)
        assert x.dtype == x0.dtype and y.dtype == y0.dtype and np.array_equal(x, x0) and np.array_equal(y, y0)
    assert not list((there / "cifar10").glob("*.part"))
    with pytest.raises(SystemExit, match=f"chunk {plan['chunks']} does not exist"):
        stage.prepare(plan["chunks"], source, repo, new=False, limit=limit)
    # a chunk damaged on the way is refused before anything is unpacked, and its chunks are dropped
    chunk = there / "chunks" / "chunk_000"
    chunk.write_bytes(b"\0" + chunk.read_bytes()[1:])
    with pytest.raises(SystemExit, match="do not match the plan's stream"):
        stage.receive(repo, there)
    assert not (there / "chunks").exists()
    # a new plan for a grown tree cuts the same stream smaller, at once: nothing is compressed again
    monkeypatch.setattr(stage, "pack", lambda *a: pytest.fail("compressed again"))
    smaller = stage.prepare(0, source, repo, new=True, limit=limit - room // 2)
    assert smaller["stream_sha256"] == plan["stream_sha256"] and smaller["chunks"] > plan["chunks"]


def test_a_tree_with_no_room_is_refused_by_name(repo, tmp_path, data_dir, monkeypatch):
    monkeypatch.setattr(stage, "PLAN_DIR", tmp_path / "plan")
    with pytest.raises(SystemExit, match="leaves 0.0 MB"):
        stage.prepare(0, Path(data_dir) / "cifar10", repo, new=True, limit=3_500_000)


def test_the_epoch_benchmark_can_time_synthetic_images_while_the_data_travels(tmp_path):
    spec = importlib.util.spec_from_file_location("train_epoch_device", ROOT / "benchmarks" / "train_epoch_device.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from arbibench.data.cifar10 import read_cifar10_arrays

    folder = bench.synthetic_cifar10(tmp_path / "data")
    for split, n in (("train", 50_000), ("test", 10_000)):
        x, y = read_cifar10_arrays(split, folder)  # the reader the training loop uses takes them as CIFAR-10
        assert x.shape == (n, 3, 32, 32) and x.dtype == np.uint8 and y.shape == (n,)
        assert 0 <= y.min() and y.max() <= 9 and x.std() > 60  # random: about 74 for uniform bytes
    again = bench.synthetic_cifar10(tmp_path / "again")
    assert np.array_equal(read_cifar10_arrays("test", again)[0], read_cifar10_arrays("test", folder)[0])
