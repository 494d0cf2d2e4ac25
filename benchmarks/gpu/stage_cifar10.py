"""CIFAR-10 onto a lent GPU machine, in the chunks its calls can carry.

Each call to a lent machine sends the working tree, capped at 64 MiB with the tracked files counted (about 40 MB on
2026-12-07: the shipped checkpoints and the queue's branch copies, growing by about 1 MB a finished protocol job).
The six CIFAR-10 files' arrays therefore travel as one xz stream (a delta filter over neighbouring pixels, then
LZMA2: about two thirds of the raw 184 MB, where the files' own deflate keeps 92%), cut into chunks of the room the
tree leaves, one chunk a call, into a folder outside the checkout that stays while the machine is warm; the last
chunk's call unpacks the stream, checks every array's sha256 and writes the npz files arbibench reads.

    here:   python benchmarks/gpu/stage_cifar10.py prepare 0     # chunk 0 into .gpu_data/; says how many there are
    there:  python3 benchmarks/gpu/stage_cifar10.py receive       # stores the carried chunk; exit 0 once all are in
    (one call per chunk with carry [".gpu_data"]; then benchmarks/gpu/train_zoo.sh in the same warm machine)

The plan (chunk size, the arrays' shapes and digests) and the compressed stream are made by the first ``prepare``
(a few minutes of one core) and kept outside the checkout, so every chunk of one staging cuts the same stream;
``prepare --new`` makes a new plan on the same stream, in a second (a grown tree needs smaller chunks; the chunks
already sent belong to the old plan and are sent again).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

TRAVEL_LIMIT = 64 * 2**20  # what one call sends at most (the device tool's README)
MARGIN = 2 * 2**20  # the queue may commit between calls: room for a few MB of new copies
FILES = ("train_0.npz", "train_1.npz", "train_2.npz", "train_3.npz", "train_4.npz", "test.npz")
CARRIED = Path(".gpu_data")  # in the checkout, ignored by git, named in the call's carry
PLAN_DIR = Path(os.environ.get("ARBIBENCH_GPU_STAGE", "/tmp/arbibench-gpu-stage"))  # here, outside the checkout
STREAM = "cifar10.xz"  # the compressed arrays, in PLAN_DIR
PRESET = 6  # LZMA2's: 0.67 of the raw pixels with the delta filter, against 0.73 at preset 0 (2,000 training images)
DATA = Path(os.environ.get("ARBIBENCH_GPU_DATA", Path.home() / "arbibench-data"))  # there, outside the checkout


def travelling_bytes(repo: Path) -> int:
    """What a call sends besides the carried chunk: tracked files and untracked files git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            capture_output=True, check=True).stdout.split(b"\0")
    total = 0
    for name in {n for n in listed if n}:
        path = repo / os.fsdecode(name)
        if path.is_file() and not path.is_symlink() and CARRIED not in path.relative_to(repo).parents:
            total += path.stat().st_size
    return total


def _sha256(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def _filters(preset: int) -> list[dict[str, int]]:
    """Each byte minus the one three before it (the same channel of the pixel to the left, in NHWC), then LZMA2."""
    return [{"id": lzma.FILTER_DELTA, "dist": 3}, {"id": lzma.FILTER_LZMA2, "preset": preset}]


def pack(source: Path, stream: Path) -> list[dict[str, object]]:
    """Write the arrays of :data:`FILES` (each file's ``x`` then ``y``) as one xz stream to ``stream`` (atomically);
    returns per file what the receiver needs to cut them apart and check them."""
    compressor = lzma.LZMACompressor(format=lzma.FORMAT_XZ, filters=_filters(PRESET))
    entries: list[dict[str, object]] = []
    part = stream.with_name(stream.name + ".part")
    with open(part, "wb") as out:
        for name in FILES:
            with np.load(source / name, allow_pickle=False) as d:
                x, y = np.ascontiguousarray(d["x"]), np.ascontiguousarray(d["y"])
            entries.append({"name": name, "x_shape": list(x.shape), "x_dtype": x.dtype.str, "x_sha256": _sha256(x.data),
                            "y_shape": list(y.shape), "y_dtype": y.dtype.str, "y_sha256": _sha256(y.data)})
            out.write(compressor.compress(x.data))
            out.write(compressor.compress(y.data))
        out.write(compressor.flush())
    part.replace(stream)
    return entries


def make_plan(source: Path, repo: Path, limit: int = TRAVEL_LIMIT) -> dict[str, object]:
    """The staging plan: the files' arrays with shape and sha256, the compressed stream (written to
    ``PLAN_DIR``) and the chunk size the tree leaves room for."""
    missing = [name for name in FILES if not (source / name).is_file()]
    if missing:
        raise SystemExit(f"error: {source} lacks {', '.join(missing)}; pass --source the CIFAR-10 npz folder")
    room = limit - travelling_bytes(repo) - MARGIN - 4096  # 4 KiB: the plan that travels beside each chunk
    if room < 1 << 20:
        raise SystemExit(f"error: the working tree leaves {max(room, 0) / 1e6:.1f} MB of the {limit / 2**20:.0f} MiB a "
                         "call carries; remove untracked files or large outputs before staging")
    stream = compressed(source)
    size = stream["stream_bytes"]
    assert isinstance(size, int)
    return {**stream, "chunk_bytes": room, "chunks": -(-size // room)}


def compressed(source: Path) -> dict[str, object]:
    """The compressed stream of ``source``'s files in ``PLAN_DIR`` and what the receiver needs of it: packed now, or
    the one packed before from the same files at the same preset (``prepare --new`` after the tree grew must not
    keep a warm machine waiting minutes for the same bytes)."""
    PLAN_DIR.mkdir(parents=True, exist_ok=True)
    stream, record = PLAN_DIR / STREAM, PLAN_DIR / "stream.json"
    origin = {"preset": PRESET, "files": {n: [(source / n).stat().st_size, (source / n).stat().st_mtime_ns]
                                          for n in FILES}}
    if record.is_file() and stream.is_file():
        kept = json.loads(record.read_text())
        if kept["origin"] == origin and kept["stream_bytes"] == stream.stat().st_size:
            return {k: kept[k] for k in ("files", "stream_bytes", "stream_sha256")}
    files = pack(source, stream)
    with open(stream, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    described = {"files": files, "stream_bytes": stream.stat().st_size, "stream_sha256": digest}
    record.write_text(json.dumps({"origin": origin, **described}, indent=2) + "\n")
    return described


def prepare(index: int, source: Path, repo: Path, new: bool, limit: int = TRAVEL_LIMIT) -> dict[str, object]:
    """Put chunk ``index`` of the staging plan (made now if there is none, or with ``new``) and the plan into
    ``repo/.gpu_data``, alone; returns the plan."""
    plan_file = PLAN_DIR / "plan.json"
    if new or not plan_file.is_file() or not (PLAN_DIR / STREAM).is_file():
        PLAN_DIR.mkdir(parents=True, exist_ok=True)
        plan_file.write_text(json.dumps(make_plan(source, repo, limit), indent=2) + "\n")
    plan = json.loads(plan_file.read_text())
    n, size = int(plan["chunks"]), int(plan["chunk_bytes"])
    if not 0 <= index < n:
        raise SystemExit(f"error: chunk {index} does not exist; the plan has chunks 0 to {n - 1}")
    exclude = repo / ".git" / "info" / "exclude"
    listed = exclude.read_text(errors="replace").split() if exclude.is_file() else []
    if exclude.parent.is_dir() and "/.gpu_data/" not in listed:
        with open(exclude, "a") as f:
            f.write("/.gpu_data/\n")
    folder = repo / CARRIED
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    with open(PLAN_DIR / STREAM, "rb") as stream, open(folder / f"chunk_{index:03d}", "wb") as out:
        stream.seek(index * size)
        out.write(stream.read(size))
    sending = travelling_bytes(repo) + sum(p.stat().st_size for p in folder.iterdir())
    if sending > limit:
        raise SystemExit(f"error: the tree grew since the plan was made: this call would send {sending / 2**20:.1f} "
                         f"MiB of {limit / 2**20:.0f}; run prepare --new (and send every chunk of the new plan)")
    print(f"chunk {index} of 0-{n - 1} ({size / 1e6:.1f} MB each) in {folder}: a call with carry "
          f'[".gpu_data"] sends {sending / 2**20:.1f} MiB')
    return plan


def receive(repo: Path, data: Path = DATA) -> bool:
    """Store the carried chunk under ``data/chunks``; once every chunk of the plan is there, write the files into
    ``data/cifar10`` and check each one's sha256. True when the data set is complete."""
    plan_file = repo / CARRIED / "plan.json"
    if not plan_file.is_file():
        raise SystemExit(f"error: no {plan_file}: run `prepare N` here and name .gpu_data in the call's carry")
    plan = json.loads(plan_file.read_text())
    chunks = data / "chunks"
    if (chunks / "plan.json").is_file() and json.loads((chunks / "plan.json").read_text()) != plan:
        shutil.rmtree(chunks)  # chunks of another plan: their cuts do not match this one
    chunks.mkdir(parents=True, exist_ok=True)
    (chunks / "plan.json").write_text(json.dumps(plan))
    for chunk in (repo / CARRIED).glob("chunk_*"):
        shutil.copyfile(chunk, chunks / chunk.name)
    names = [f"chunk_{i:03d}" for i in range(int(plan["chunks"]))]
    missing = [n for n in names if not (chunks / n).is_file()]
    if missing:
        print(f"have {len(names) - len(missing)} of {len(names)} chunks; missing {', '.join(missing)}")
        return False
    stream = b"".join((chunks / n).read_bytes() for n in names)
    if len(stream) != int(plan["stream_bytes"]) or _sha256(stream) != plan["stream_sha256"]:
        shutil.rmtree(chunks)
        raise SystemExit("error: the assembled chunks do not match the plan's stream; stage again with prepare --new")
    raw, offset = memoryview(lzma.decompress(stream, format=lzma.FORMAT_XZ)), 0
    target = data / "cifar10"
    target.mkdir(parents=True, exist_ok=True)
    for f in plan["files"]:
        arrays = {}
        for key in ("x", "y"):
            dtype, shape = np.dtype(f[f"{key}_dtype"]), tuple(f[f"{key}_shape"])
            size = dtype.itemsize * int(np.prod(shape))
            part = raw[offset : offset + size]
            offset += size
            if _sha256(part) != f[f"{key}_sha256"]:
                raise SystemExit(f"error: {f['name']}'s {key} does not match its sha256 after unpacking; stage again "
                                 "with prepare --new")
            arrays[key] = np.frombuffer(part, dtype=dtype).reshape(shape)
        written = target / f"{f['name']}.part"
        with open(written, "wb") as out:  # np.savez names a path without .npz otherwise
            np.savez(out, **arrays)
        written.replace(target / f["name"])
        print(f"have {f['name']} (x {tuple(arrays['x'].shape)}, sha256 of x and y checked)")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="here: put one chunk into .gpu_data/ for the next call")
    p.add_argument("index", type=int, help="which chunk (0 first; the plan says how many)")
    p.add_argument("--source", type=Path, default=Path("../shared/data/cifar10"), help="the CIFAR-10 npz folder")
    p.add_argument("--new", action="store_true", help="make a new plan (after the tree grew)")
    sub.add_parser("receive", help="there: store the carried chunk; exit 0 once the data set is complete")
    args = parser.parse_args()
    repo = Path.cwd()
    if args.command == "prepare":
        prepare(args.index, args.source, repo, args.new)
    else:
        sys.exit(0 if receive(repo) else 1)


if __name__ == "__main__":
    main()
