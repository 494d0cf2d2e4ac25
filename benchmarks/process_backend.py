"""The processes backend against the local runner: the same evaluation, wall-clock seconds, the same rows or not.

Runs one evaluation (default: APGD-CE on the first ``--n`` CIFAR-10 test images of ``resnet20_fp_at``, store batches
of 200) twice into fresh stores: locally at ``--threads`` torch threads, then on ``--workers`` worker processes that
split those threads between them. Each run is timed from the command's start (the workers' start-up included) and
the stored rows compared. Pause the queue first: a benchmark beside a training measures the training.

    .venv/bin/python benchmarks/process_backend.py --json docs/measurements/process_backend_cpu.json
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from arbibench.files import atomic_write_json
from arbibench.machine import cpu_model


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as c:
        return sorted(c.execute("SELECT * FROM outcomes"))


def _run(store: Path, args: argparse.Namespace, *extra: str) -> float:
    cmd = [sys.executable, "-m", "arbibench.cli", "eval", "-m", args.model, "--attacks", args.attack, "-n",
           str(args.n), "--batch-size", "200", "--no-checks", "--store", str(store), *extra]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet20_fp_at")
    ap.add_argument("--attack", default="apgd_ce")
    ap.add_argument("--n", type=int, default=800, help="test images (4 store batches of 200 by default)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads of the local run")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    per_worker = max(1, args.threads // args.workers)
    with tempfile.TemporaryDirectory() as tmp:
        local = _run(Path(tmp) / "local.db", args)
        processes = _run(Path(tmp) / "processes.db", args, "--backend", "processes", "--workers", str(args.workers),
                         "--worker-threads", str(per_worker))  # fmt: skip
        same = _rows(Path(tmp) / "local.db") == _rows(Path(tmp) / "processes.db")
    result = {
        "cpu": cpu_model(), "cores": os.cpu_count(), "model": args.model, "attack": args.attack, "images": args.n,
        "local": {"threads": args.threads, "seconds": round(local, 1)},
        "processes": {"workers": args.workers, "threads_each": per_worker, "seconds": round(processes, 1)},
        "speedup": round(local / processes, 2), "same_rows": same,
    }  # fmt: skip
    print(result)
    if args.json:
        atomic_write_json(result, args.json)


if __name__ == "__main__":
    main()
