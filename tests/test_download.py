"""The CIFAR-10 download fallback against a local HTTP server serving archives built from the real test set."""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import arbibench.data.cifar10 as cifar10_module
from arbibench.data import DownloadError, default_data_dir, load_cifar10, read_cifar10_arrays


def _tar_gz(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``routes[path] = (body, mode)``.

    mode is "ok", "short" (a full Content-Length but half the body) or "chunked-cut" (a chunk cut in half).
    """

    routes: dict[str, tuple[bytes, str]] = {}
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        self.hits.append(self.path)
        if self.path not in self.routes:
            self.send_error(404)
            return
        body, mode = self.routes[self.path]
        self.send_response(200)
        if mode == "chunked-cut":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n" % len(body) + body[: len(body) // 2])
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body if mode == "ok" else body[: len(body) // 2])

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence per-request logging
        pass


@pytest.fixture(scope="module")
def test_arrays(data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    return read_cifar10_arrays("test", data_dir / "cifar10", download=False)


@pytest.fixture(scope="module")
def good_archive(test_arrays) -> bytes:
    """The real test split in the official binary release's layout (label byte + CHW bytes per record)."""
    x, y = test_arrays
    records = np.concatenate([y.astype(np.uint8)[:, None], x.reshape(len(x), -1)], axis=1)
    meta = "\n".join(cifar10_module.CIFAR10_CLASSES).encode() + b"\n"
    return _tar_gz(
        {"cifar-10-batches-bin/test_batch.bin": records.tobytes(), "cifar-10-batches-bin/batches.meta.txt": meta}
    )


@pytest.fixture(scope="module")
def server(good_archive) -> Iterator[str]:
    small = {"cifar-10-batches-bin/batches.meta.txt": b"airplane\n"}
    _Handler.routes = {
        "/good.tar.gz": (good_archive, "ok"),
        "/short.tar.gz": (good_archive, "short"),
        "/cut.tar.gz": (good_archive[: len(good_archive) // 2], "ok"),
        "/chunked-cut.tar.gz": (good_archive, "chunked-cut"),
        "/evil.tar.gz": (_tar_gz({**small, "../evil": b"pwned"}), "ok"),
        "/symlink.tar.gz": (_tar_gz(small, symlinks={"cifar-10-batches-bin/link": "/etc/passwd"}), "ok"),
        "/other.tar.gz": (_tar_gz({"something-else/readme.txt": b"hi"}), "ok"),
    }
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def _serve(monkeypatch: pytest.MonkeyPatch, server: str, route: str) -> None:
    """Point the CIFAR-10 download at ``route`` and expect that route's real md5."""
    body = _Handler.routes[route][0]
    monkeypatch.setattr(cifar10_module, "CIFAR10_URL", server + route)
    monkeypatch.setattr(cifar10_module, "CIFAR10_MD5", hashlib.md5(body).hexdigest())


def test_good_archive_is_downloaded_once_and_matches_npz(tmp_path, monkeypatch, server, data_dir):
    _serve(monkeypatch, server, "/good.tar.gz")
    root = tmp_path / "data"
    hits_before = len(_Handler.hits)
    x, y, idx = load_cifar10(data_dir=root)
    x_ref, y_ref, idx_ref = load_cifar10(data_dir=data_dir / "cifar10")
    assert torch.equal(x, x_ref) and torch.equal(y, y_ref) and torch.equal(idx, idx_ref)
    assert sorted(p.name for p in root.iterdir()) == ["cifar-10-batches-bin"]  # no temp folder left
    x2, _, _ = load_cifar10(5, data_dir=root)
    assert torch.equal(x2, x_ref[:5])
    assert len(_Handler.hits) == hits_before + 1  # the second load used the extracted files


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ("/short.tar.gz", "stopped after"),
        ("/chunked-cut.tar.gz", "cannot download"),
        ("/evil.tar.gz", "'../evil'.*refusing"),
        ("/symlink.tar.gz", "link.*refusing"),
        ("/other.tar.gz", "no cifar-10-batches-bin/ folder"),
    ],
)
def test_bad_archives_leave_nothing_behind(tmp_path, monkeypatch, server, route, message):
    _serve(monkeypatch, server, route)
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match=message):
        load_cifar10(10, data_dir=root)
    assert list(root.iterdir()) == []
    assert not list(tmp_path.rglob("evil"))


def test_cut_file_fails_the_checksum(tmp_path, monkeypatch, server, good_archive):
    monkeypatch.setattr(cifar10_module, "CIFAR10_URL", server + "/cut.tar.gz")
    monkeypatch.setattr(cifar10_module, "CIFAR10_MD5", hashlib.md5(good_archive).hexdigest())
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match="md5"):
        load_cifar10(10, data_dir=root)
    assert list(root.iterdir()) == []


def test_wrong_checksum_is_refused(tmp_path, monkeypatch, server):
    _serve(monkeypatch, server, "/good.tar.gz")
    monkeypatch.setattr(cifar10_module, "CIFAR10_MD5", "0" * 32)
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match=r"md5 [0-9a-f]{32}, expected 0{32}"):
        load_cifar10(10, data_dir=root)
    assert list(root.iterdir()) == []


def test_http_errors_and_unreachable_servers(tmp_path, monkeypatch, server):
    with pytest.raises(DownloadError, match="cannot download"):  # the closed port set up in conftest.py
        load_cifar10(10, data_dir=tmp_path / "a")
    monkeypatch.setattr(cifar10_module, "CIFAR10_URL", server + "/missing.tar.gz")
    with pytest.raises(DownloadError, match="404"):
        load_cifar10(10, data_dir=tmp_path / "b")
    assert list((tmp_path / "b").iterdir()) == []


def test_env_var_is_honoured(tmp_path, monkeypatch, data_dir):
    monkeypatch.setenv("ARBIBENCH_DATA", str(data_dir))
    assert default_data_dir() == data_dir
    x, y, _ = load_cifar10(5)
    x_ref, y_ref, _ = load_cifar10(5, data_dir=data_dir / "cifar10")
    assert torch.equal(x, x_ref) and torch.equal(y, y_ref)

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("ARBIBENCH_DATA", str(empty))
    with pytest.raises(FileNotFoundError, match=str(empty)):
        read_cifar10_arrays("test", download=False)


def test_data_dir_argument_wins_over_env(tmp_path, monkeypatch, data_dir):
    monkeypatch.setenv("ARBIBENCH_DATA", str(tmp_path))
    assert default_data_dir(data_dir) == data_dir
    x, y, _ = load_cifar10(5, data_dir=data_dir)  # would try the (unreachable) download if the env var won
    assert y.tolist() == [3, 8, 8, 0, 6]
    assert list(tmp_path.iterdir()) == []


def test_default_folder_without_env(monkeypatch):
    monkeypatch.delenv("ARBIBENCH_DATA", raising=False)
    assert default_data_dir() == Path.home() / ".cache" / "arbibench"
