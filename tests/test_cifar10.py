"""CIFAR-10 loading on the real dataset, in each on-disk format, checked against the published known values."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from arbibench.data import DataFormatError, load_cifar10, read_cifar10_arrays

FIRST_TEST_LABELS = [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]
FIRST_TRAIN_LABELS = [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]


@pytest.fixture(scope="module")
def cifar_dir(data_dir: Path) -> Path:
    path = data_dir / "cifar10"
    assert (path / "test.npz").is_file(), f"{path}/test.npz is missing from the real data folder"
    return path


@pytest.fixture(scope="module")
def test_set(cifar_dir: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return load_cifar10(data_dir=cifar_dir)


@pytest.fixture(scope="module")
def test_arrays(cifar_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    return read_cifar10_arrays("test", cifar_dir)


def _write_bin(folder: Path, name: str, x: np.ndarray, y: np.ndarray) -> Path:
    """The official binary layout: per record one label byte, then the 3072 CHW pixel bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    records = np.concatenate([y.astype(np.uint8)[:, None], x.reshape(len(x), -1)], axis=1)
    path = folder / name
    records.tofile(path)
    return path


def test_test_split_shapes_dtypes_range(test_set):
    x, y, idx = test_set
    assert x.shape == (10_000, 3, 32, 32) and x.dtype == torch.float32
    assert y.shape == (10_000,) and y.dtype == torch.int64
    assert idx.dtype == torch.int64 and torch.equal(idx, torch.arange(10_000))
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0


def test_test_split_known_values(test_set):
    x, y, _ = test_set
    assert y[:10].tolist() == FIRST_TEST_LABELS
    assert torch.equal((x[0, :, 0, 0] * 255).round().to(torch.uint8), torch.tensor([158, 112, 49], dtype=torch.uint8))
    assert torch.bincount(y, minlength=10).tolist() == [1000] * 10
    mean = x.mean(dim=(0, 2, 3))
    assert torch.allclose(mean, torch.tensor([0.4942, 0.4851, 0.4504]), atol=1e-3), mean


def test_train_split_known_values(cifar_dir):
    x, y, idx = load_cifar10(10, "train", cifar_dir)
    assert x.shape == (10, 3, 32, 32)
    assert y.tolist() == FIRST_TRAIN_LABELS
    pixels = (x * 255).round().to(torch.int64)
    assert pixels[0, :, 0, 0].tolist() == [59, 62, 63]
    assert pixels[0, 0, 0, :5].tolist() == [59, 43, 50, 68, 98]
    assert idx.tolist() == list(range(10))


def test_parent_folder_is_found_too(data_dir, test_set):
    """``data_dir`` may be the folder holding ``cifar10/`` (the layout of ``$ARBIBENCH_DATA``)."""
    x, y, _ = load_cifar10(20, data_dir=data_dir)
    assert torch.equal(x, test_set[0][:20]) and torch.equal(y, test_set[1][:20])


def test_first_n_is_a_prefix(cifar_dir, test_set):
    x, y, idx = load_cifar10(100, data_dir=cifar_dir)
    assert torch.equal(idx, torch.arange(100))
    assert torch.equal(x, test_set[0][:100]) and torch.equal(y, test_set[1][:100])


def test_seeded_subset_is_deterministic_sorted_unique(cifar_dir, test_set):
    x, y, idx = load_cifar10(500, data_dir=cifar_dir, seed=0)
    x2, y2, idx2 = load_cifar10(500, data_dir=cifar_dir, seed=0)
    _, _, idx_other = load_cifar10(500, data_dir=cifar_dir, seed=1)
    assert torch.equal(idx, idx2) and torch.equal(x, x2) and torch.equal(y, y2)
    assert len(idx) == 500 and len(torch.unique(idx)) == 500
    assert torch.all(idx[1:] > idx[:-1])
    assert not torch.equal(idx, torch.arange(500)) and not torch.equal(idx, idx_other)
    assert torch.equal(x, test_set[0][idx]) and torch.equal(y, test_set[1][idx])


@pytest.mark.parametrize(
    ("n", "message"),
    [(10_001, "only 10000 samples"), (0, "must be positive"), (-5, "must be positive")],
)
def test_bad_n_examples(cifar_dir, n, message):
    with pytest.raises(ValueError, match=message):
        load_cifar10(n, data_dir=cifar_dir)


def test_unknown_split(cifar_dir):
    with pytest.raises(ValueError, match="unknown CIFAR-10 split"):
        load_cifar10(10, "val", cifar_dir)


def test_official_binary_format_matches_npz(tmp_path, test_arrays, test_set):
    x, y = test_arrays
    _write_bin(tmp_path / "cifar-10-batches-bin", "test_batch.bin", x, y)
    xb, yb, idx = load_cifar10(data_dir=tmp_path)
    assert torch.equal(xb, test_set[0]) and torch.equal(yb, test_set[1]) and torch.equal(idx, test_set[2])


def test_truncated_binary_is_refused(tmp_path, test_arrays):
    x, y = test_arrays
    path = _write_bin(tmp_path / "cifar-10-batches-bin", "test_batch.bin", x, y)
    data = path.read_bytes()
    path.write_bytes(data[:-1000])
    with pytest.raises(DataFormatError, match="truncated or corrupt"):
        load_cifar10(10, data_dir=tmp_path)
    path.write_bytes(data[: 3073 * 9_999])  # whole records, one image short of a split
    with pytest.raises(DataFormatError, match="9999 images, expected 10000"):
        load_cifar10(10, data_dir=tmp_path)


def _write_pickle_batch(tmp_path: Path, x: np.ndarray, y: np.ndarray) -> Path:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    path = folder / "test_batch"
    with open(path, "wb") as f:
        pickle.dump({b"batch_label": b"testing batch 1 of 1", b"labels": y.tolist(), b"data": x.reshape(len(x), -1)}, f)
    return path


def test_pickle_batches_need_opt_in(tmp_path, test_arrays, test_set):
    _write_pickle_batch(tmp_path, *test_arrays)
    with pytest.raises(DataFormatError, match="allow_pickle=True"):
        load_cifar10(10, data_dir=tmp_path)
    xp, yp, _ = load_cifar10(data_dir=tmp_path, allow_pickle=True)
    assert torch.equal(xp, test_set[0]) and torch.equal(yp, test_set[1])


def test_corrupt_pickle_is_a_format_error(tmp_path, test_arrays):
    path = _write_pickle_batch(tmp_path, *test_arrays)
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(DataFormatError, match="test_batch"):
        load_cifar10(10, data_dir=tmp_path, allow_pickle=True)


def test_truncated_npz_names_the_file(tmp_path, cifar_dir):
    bad = tmp_path / "test.npz"
    bad.write_bytes((cifar_dir / "test.npz").read_bytes()[:1_000_000])
    with pytest.raises(DataFormatError, match=r"test\.npz") as err:
        load_cifar10(10, data_dir=tmp_path)
    assert str(bad) in str(err.value)


def test_npz_with_wrong_arrays_is_refused(tmp_path):
    np.savez(tmp_path / "test.npz", x=np.zeros((10, 3, 32, 32), np.uint8), y=np.zeros(10, np.int64))
    with pytest.raises(DataFormatError, match=r"expected x uint8 \[N,32,32,3\]"):
        load_cifar10(10, data_dir=tmp_path)


def test_missing_data_without_download(tmp_path):
    with pytest.raises(FileNotFoundError, match="ARBIBENCH_DATA"):
        read_cifar10_arrays("test", tmp_path, download=False)
