"""CIFAR-10 onto a lent GPU machine, in the chunks its calls can carry.

Each call to a lent machine sends the working tree, capped at 64 MiB with the tracked files counted (about 42 MB on
2026-12-07: the shipped checkpoints and the queue's branch copies). The six CIFAR-10 files (28 MB each) therefore
travel as one byte stream cut into chunks of the room the tree leaves, one chunk a call, into a folder outside the
checkout that stays while the machine is warm; the last chunk's call assembles the files and checks their sha256.

    here:   python benchmarks/gpu/stage_cifar10.py prepare 0     # chunk 0 into .gpu_data/; says how many there are
    there:  python3 benchmarks/gpu/stage_cifar10.py receive       # stores the carried chunk; exit 0 once all are in
    (one call per chunk with carry [".gpu_data"]; then benchmarks/gpu/train_zoo.sh in the same warm machine)

The plan (chunk size, the files' sizes and digests) is made by the first ``prepare`` and kept outside the checkout,
so every chunk of one staging cuts the same stream; ``prepare --new`` makes a new one (a grown tree needs smaller
chunks; the chunks already sent belong to the old plan and are sent again).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

TRAVEL_LIMIT = 64 * 2**20  # what one call sends at most (the device tool's README)
MARGIN = 2 * 2**20  # the queue may commit between calls: room for a few MB of new copies
FILES = ("train_0.npz", "train_1.npz", "train_2.npz", "train_3.npz", "train_4.npz", "test.npz")
CARRIED = Path(".gpu_data")  # in the checkout, ignored by git, named in the call's carry
PLAN_DIR = Path(os.environ.get("ARBIBENCH_GPU_STAGE", "/tmp/arbibench-gpu-stage"))  # here, outside the checkout
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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_plan(source: Path, repo: Path, limit: int = TRAVEL_LIMIT) -> dict[str, object]:
    """The staging plan: the files in stream order with size and sha256, and the chunk size the tree leaves room for."""
    missing = [name for name in FILES if not (source / name).is_file()]
    if missing:
        raise SystemExit(f"error: {source} lacks {', '.join(missing)}; pass --source the CIFAR-10 npz folder")
    room = limit - travelling_bytes(repo) - MARGIN - 4096  # 4 KiB: the plan that travels beside each chunk
    if room < 1 << 20:
        raise SystemExit(f"error: the working tree leaves {max(room, 0) / 1e6:.1f} MB of the {limit / 2**20:.0f} MiB a "
                         "call carries; remove untracked files or large outputs before staging")
    files = [{"name": n, "bytes": (source / n).stat().st_size, "sha256": _sha256(source / n)} for n in FILES]
    total = sum(int(f["bytes"]) for f in files)
    return {"files": files, "chunk_bytes": room, "chunks": -(-total // room)}


def prepare(index: int, source: Path, repo: Path, new: bool, limit: int = TRAVEL_LIMIT) -> dict[str, object]:
    """Put chunk ``index`` of the staging plan (made now if there is none, or with ``new``) and the plan into
    ``repo/.gpu_data``, alone; returns the plan."""
    plan_file = PLAN_DIR / "plan.json"
    if new or not plan_file.is_file():
        PLAN_DIR.mkdir(parents=True, exist_ok=True)
        plan_file.write_text(json.dumps(make_plan(source, repo, limit), indent=2) + "\n")
    plan = json.loads(plan_file.read_text())
    n, size = int(plan["chunks"]), int(plan["chunk_bytes"])
    if not 0 <= index < n:
        raise SystemExit(f"error: chunk {index} does not exist; the plan has chunks 0 to {n - 1}")
    exclude = repo / ".git" / "info" / "exclude"
    if exclude.parent.is_dir() and "/.gpu_data/" not in exclude.read_text(errors="replace").split():
        with open(exclude, "a") as f:
            f.write("/.gpu_data/\n")
    folder = repo / CARRIED
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    with open(folder / f"chunk_{index:03d}", "wb") as out:
        out.write(_read_stream(source, plan, index * size, size))
    sending = travelling_bytes(repo) + sum(p.stat().st_size for p in folder.iterdir())
    if sending > limit:
        raise SystemExit(f"error: the tree grew since the plan was made: this call would send {sending / 2**20:.1f} "
                         f"MiB of {limit / 2**20:.0f}; run prepare --new (and send every chunk of the new plan)")
    print(f"chunk {index} of 0-{n - 1} ({size / 1e6:.1f} MB each) in {folder}: a call with carry "
          f'[".gpu_data"] sends {sending / 2**20:.1f} MiB')
    return plan


def _read_stream(source: Path, plan: dict[str, object], start: int, length: int) -> bytes:
    """Bytes [start, start + length) of the files of ``plan`` laid end to end."""
    out, offset = bytearray(), 0
    for f in plan["files"]:  # type: ignore[attr-defined]
        size = int(f["bytes"])
        lo, hi = max(start, offset), min(start + length, offset + size)
        if lo < hi:
            with open(source / f["name"], "rb") as fh:
                fh.seek(lo - offset)
                out += fh.read(hi - lo)
        offset += size
    return bytes(out)


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
    target = data / "cifar10"
    target.mkdir(parents=True, exist_ok=True)
    stream, left = iter(names), memoryview(b"")
    for f in plan["files"]:
        with open(target / f["name"], "wb") as out:
            need = int(f["bytes"])
            while need:
                if not left:
                    left = memoryview((chunks / next(stream)).read_bytes())
                taken = min(need, len(left))
                out.write(left[:taken])
                left, need = left[taken:], need - taken
        if _sha256(target / f["name"]) != f["sha256"]:
            (target / f["name"]).unlink()
            raise SystemExit(f"error: {f['name']} does not match its sha256 after assembly; stage again with "
                             "prepare --new")
        print(f"have {f['name']} ({int(f['bytes']) / 1e6:.1f} MB, sha256 checked)")
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
