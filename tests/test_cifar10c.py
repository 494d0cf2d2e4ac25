"""CIFAR-10-C on disk: the generator writes the official layout from the real test set, the loader reads it back,
and the official archive's download path is verified against a local HTTP server (127.0.0.1 only)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from arbibench.data.cifar10 import DataFormatError, read_cifar10_arrays
from arbibench.data.cifar10c import (
    CIFAR10C_URL,
    CORRUPTIONS,
    MANIFEST,
    cifar10c_source,
    download_cifar10c,
    load_cifar10c,
    read_cell,
)
from arbibench.data.corruptions import corrupt
from arbibench.data.corruptions.generate import GENERATOR_VERSION, generate_cifar10c
from arbibench.data.download import DownloadError

N = 12


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A data folder with the real CIFAR-10 (linked) and a regenerated CIFAR-10-C of the first N test images."""
    root = tmp_path_factory.mktemp("c10c")
    (root / "cifar10").symlink_to(data_dir / "cifar10")
    generate_cifar10c(N, seed=0, data_dir=root)
    return root


def test_layout_and_manifest(root: Path) -> None:
    folder = root / "CIFAR-10-C"
    assert sorted(p.stem for p in folder.glob("*.npy")) == sorted([*CORRUPTIONS, "labels"])
    for name in CORRUPTIONS:
        arr = np.load(folder / f"{name}.npy")
        assert arr.dtype == np.uint8 and arr.shape == (5 * N, 32, 32, 3)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["source"] == "regenerated" and manifest["seed"] == 0 and manifest["n_examples"] == N
    for file, digest in manifest["sha256"].items():
        assert hashlib.sha256((folder / file).read_bytes()).hexdigest() == digest
    assert not [p for p in root.iterdir() if p.name.startswith(".")], "a temporary folder was left behind"


def test_loader_reads_generated_set(root: Path, data_dir: Path) -> None:
    x_test, y_test = read_cifar10_arrays("test", data_dir)
    x, y, idx = load_cifar10c(5, severity=3, data_dir=root, corruptions=("fog", "contrast"))
    assert x.shape == (10, 3, 32, 32) and x.dtype.is_floating_point and 0 <= x.min() and x.max() <= 1
    assert y.tolist() == y_test[:5].tolist() * 2 and idx.tolist() == list(range(5)) * 2
    clean = np.ascontiguousarray(x_test[:N].transpose(0, 2, 3, 1))
    expect = corrupt(clean, "contrast", 3, seed=0)[:5]
    assert np.array_equal((x[5:] * 255).round().byte().permute(0, 2, 3, 1).numpy(), expect)
    cell, labels = read_cell("fog", 5, root)
    assert cell.shape == (N, 32, 32, 3) and labels.tolist() == y_test[:N].tolist()
    assert cifar10c_source(root) == "regenerated"


def test_generator_is_deterministic_and_kept(root: Path, tmp_path: Path, data_dir: Path) -> None:
    first = json.loads((root / "CIFAR-10-C" / MANIFEST).read_text())
    folder, again = generate_cifar10c(N, seed=0, data_dir=root)  # same settings: kept as it is
    assert again == first
    _, other = generate_cifar10c(N, seed=0, data_dir=data_dir, out=tmp_path / "CIFAR-10-C", force=True)
    assert other["sha256"] == first["sha256"]
    _, seed1 = generate_cifar10c(N, seed=1, data_dir=data_dir, out=tmp_path / "CIFAR-10-C")
    assert seed1["sha256"]["gaussian_noise.npy"] != first["sha256"]["gaussian_noise.npy"]
    assert seed1["sha256"]["contrast.npy"] == first["sha256"]["contrast.npy"]  # no randomness in contrast


def test_folder_of_an_older_generator_is_made_again(tmp_path: Path, data_dir: Path) -> None:
    """A folder written before a corruption changed (frost's textures) holds other images: it is not kept."""
    out = tmp_path / "CIFAR-10-C"
    folder, manifest = generate_cifar10c(N, seed=0, data_dir=data_dir, out=out, corruptions=("frost",))
    assert manifest["generator_version"] == GENERATOR_VERSION
    fresh = np.load(folder / "frost.npy")
    stale = {k: v for k, v in manifest.items() if k != "generator_version"}  # as the generator wrote it before
    (folder / MANIFEST).write_text(json.dumps(stale))
    np.save(folder / "frost.npy", np.zeros_like(fresh))
    _, again = generate_cifar10c(N, seed=0, data_dir=data_dir, out=out, corruptions=("frost",))
    assert again["generator_version"] == GENERATOR_VERSION
    assert np.array_equal(np.load(folder / "frost.npy"), fresh)


def test_official_folder_is_never_replaced(tmp_path: Path, data_dir: Path) -> None:
    official = tmp_path / "CIFAR-10-C"
    official.mkdir()
    (official / "labels.npy").write_bytes(b"official")
    with pytest.raises(FileExistsError, match="never replaced"):
        generate_cifar10c(N, data_dir=data_dir, out=official)
    assert (official / "labels.npy").read_bytes() == b"official"


def test_clear_errors(root: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="arbibench corruptions generate"):
        load_cifar10c(5, data_dir=tmp_path)
    with pytest.raises(ValueError, match=f"from 1 to {N}"):
        load_cifar10c(N + 1, data_dir=root)
    with pytest.raises(ValueError, match="unknown CIFAR-10-C corruption 'speckle_noise'"):
        load_cifar10c(5, data_dir=root, corruptions=["speckle_noise"])
    with pytest.raises(ValueError, match="severity must be one of 1..5"):
        load_cifar10c(5, severity=0, data_dir=root)
    bad = tmp_path / "bad" / "CIFAR-10-C"
    bad.mkdir(parents=True)
    np.save(bad / "labels.npy", np.zeros(5 * N, np.uint8))
    np.save(bad / "fog.npy", np.zeros((5 * N, 32, 32), np.uint8))  # no channel axis
    with pytest.raises(DataFormatError, match=r"fog.npy holds uint8 \(60, 32, 32\)"):
        load_cifar10c(5, data_dir=tmp_path / "bad", corruptions=["fog"])
    np.save(bad / "labels.npy", np.zeros(7, np.uint8))
    with pytest.raises(DataFormatError, match=r"expected \[5 \* B\]"):
        load_cifar10c(5, data_dir=tmp_path / "bad", corruptions=["fog"])


class _Serve(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence per-request logging
        pass


@pytest.fixture()
def archive_server(root: Path) -> Iterator[tuple[str, str]]:
    """A tar of the regenerated folder without its manifest (as the official archive would be), served on
    127.0.0.1; yields (url, md5)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in sorted((root / "CIFAR-10-C").glob("*.npy")):
            tar.add(p, arcname=f"CIFAR-10-C/{p.name}")
    _Serve.body = buf.getvalue()
    server = http.server.HTTPServer(("127.0.0.1", 0), _Serve)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/CIFAR-10-C.tar", hashlib.md5(_Serve.body).hexdigest()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_download_verified(archive_server: tuple[str, str], tmp_path: Path) -> None:
    url, md5 = archive_server
    assert CIFAR10C_URL.startswith("https://zenodo.org/records/2535967/files/CIFAR-10-C.tar")
    with pytest.raises(DownloadError, match="md5"):
        download_cifar10c(tmp_path, url=url, md5="0" * 32)
    assert not (tmp_path / "CIFAR-10-C").exists()
    folder = download_cifar10c(tmp_path, url=url, md5=md5)
    assert folder == tmp_path / "CIFAR-10-C" and cifar10c_source(tmp_path) == "official"
    x, y, _ = load_cifar10c(4, severity=2, data_dir=tmp_path, corruptions=["snow"])
    assert x.shape == (4, 3, 32, 32)


def test_download_refuses_to_replace_a_regenerated_set(archive_server: tuple[str, str], root: Path) -> None:
    url, md5 = archive_server
    with pytest.raises(FileExistsError, match="regenerated"):
        download_cifar10c(root, url=url, md5=md5)
