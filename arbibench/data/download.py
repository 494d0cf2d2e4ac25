"""Verified, atomic download of a dataset archive.

The archive is streamed to a temporary file beside its destination, its checksum checked, then extracted into a
temporary folder that is renamed into place only when everything succeeded. An interrupted or corrupt download
therefore leaves nothing that a later run could mistake for a dataset.
"""

from __future__ import annotations

import hashlib
import http.client
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn


class DownloadError(RuntimeError):
    """The archive could not be fetched, or is not the archive it should be."""


def _fetch(url: str, dest: Path, timeout: float) -> None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(dest, "wb") as out:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                transient=True,
            ) as progress:
                task = progress.add_task(f"downloading {url.rsplit('/', 1)[-1]}", total=total)
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                    progress.advance(task, len(chunk))
            if total is not None and out.tell() != total:
                raise DownloadError(f"download of {url} stopped after {out.tell()} of {total} bytes; rerun to retry.")
    except (OSError, http.client.HTTPException) as e:  # URLError, HTTPError, timeouts, resets, cut chunked bodies
        raise DownloadError(f"cannot download {url}: {e}. Check the network or place the data by hand.") from e


def _checksum(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for m in members:
        p = Path(m.name)
        if p.is_absolute() or ".." in p.parts or not (m.isfile() or m.isdir()):
            raise DownloadError(f"archive member {m.name!r} is not a plain file inside the archive; refusing it.")
    return members


def download_and_extract(
    url: str,
    root: str | Path,
    *,
    expect: str,
    md5: str | None = None,
    sha256: str | None = None,
    timeout: float = 60.0,
) -> Path:
    """Download the tar archive at ``url``, verify it, and extract it so that ``root/expect`` appears atomically."""
    if md5 is None and sha256 is None:
        raise ValueError("download_and_extract needs an md5 or sha256 to verify the archive against")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    target = root / expect
    with tempfile.TemporaryDirectory(dir=root, prefix=".arbibench-download-") as tmp:
        archive = Path(tmp) / "archive"
        _fetch(url, archive, timeout)
        for algorithm, want in (("md5", md5), ("sha256", sha256)):
            if want is not None and (got := _checksum(archive, algorithm)) != want.lower():
                raise DownloadError(
                    f"{url} has {algorithm} {got}, expected {want}: the download is corrupt or the file changed. "
                    "Nothing was kept; rerun to retry."
                )
        extracted = Path(tmp) / "extracted"
        try:
            with tarfile.open(archive) as tar:
                members = _safe_members(tar)
                if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12: also let tarfile refuse odd members
                    tar.extractall(extracted, members=members, filter="data")
                else:
                    tar.extractall(extracted, members=members)
        except (tarfile.TarError, EOFError, OSError) as e:
            raise DownloadError(f"cannot extract {url}: {e}. Nothing was kept; rerun to retry.") from e
        if not (extracted / expect).is_dir():
            raise DownloadError(f"archive from {url} has no {expect}/ folder; it is not the expected dataset.")
        if target.exists():
            shutil.rmtree(target)
        (extracted / expect).rename(target)
    return target
