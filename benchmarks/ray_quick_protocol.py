"""Issue 12's "done when" check at full size: the quick ``cifar10`` protocol through a Ray cluster gives the local run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ray_quick_protocol.py    # data: $ARBIBENCH_DATA, as for arbibench

Runs, as CLI subprocesses into fresh stores and model card folders in a temporary folder, first

    arbibench protocol run cifar10 --quick --models resnet20_fp,resnet20_bnn --store local.db --model-info local

then the same command with ``--backend ray --address <head> --workers 1 --worker-threads 1`` against a private Ray
head on 127.0.0.1 only (:mod:`ray_head`, started after the local run so that it does not share the CPU with it), both
with ``OMP_NUM_THREADS=1``. It times both and compares every row of the stores' tables (without the wall-clock
columns ``created`` and ``seconds``), the written model cards (without their ``seconds`` fields) and adversarial
example files, and the printed tables and lines (without progress bars, the card folder and the "finished in" line);
it also checks that no process of the cluster listened on anything but 127.0.0.1. Exits 1 on any difference, keeping
the folder. The console notes on how batches were computed (a fused path refused, fused-path answers the
reference model contradicted) are listed, not compared: they come from the process that computed the batches, and
``protocol run`` prints them only for batches computed in its own per-model pass, never for the Ray workers' (nor
for batches an earlier run left in the store).

``--variant demo`` runs the few-minute ``--demo`` protocol instead, to try the script out.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from ray_head import LOOPBACK, listening_addresses, loopback_head, process_tree

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("evaluations", "batches", "outcomes", "flags")
WALL_CLOCK = {"created", "seconds"}  # store columns and card fields that time the run, not its results


def store_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every results table, sorted, without the wall-clock columns."""
    with sqlite3.connect(path) as c:
        out = {}
        for table in TABLES:
            cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})") if r[1] not in WALL_CLOCK]
            out[table] = sorted(c.execute(f"SELECT {', '.join(cols)} FROM {table}"))
        return out


def _untimed(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _untimed(v) for k, v in obj.items() if k not in WALL_CLOCK}
    if isinstance(obj, list):
        return [_untimed(v) for v in obj]
    return obj


def card_differences(a: Path, b: Path) -> tuple[int, list[str]]:
    """(files compared, differences) between two model card folders: JSON without timings, npz array by array."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    diffs = [f"only in one folder: {p}" for p in sorted(set(files_a) ^ set(files_b))]
    for rel in sorted(set(files_a) & set(files_b)):
        if rel.suffix == ".json":
            ja, jb = (_untimed(json.loads((root / rel).read_text())) for root in (a, b))
            if ja != jb:
                keys = sorted(k for k in set(ja) | set(jb) if ja.get(k) != jb.get(k))
                diffs.append(f"{rel}: fields {keys}")
        elif rel.suffix == ".npz":
            with np.load(a / rel) as na, np.load(b / rel) as nb:
                if set(na.files) != set(nb.files):
                    diffs.append(f"{rel}: arrays {sorted(set(na.files) ^ set(nb.files))}")
                diffs += [f"{rel}: array {k}" for k in sorted(set(na.files) & set(nb.files))
                          if not np.array_equal(na[k], nb[k])]  # fmt: skip
        elif (a / rel).read_bytes() != (b / rel).read_bytes():
            diffs.append(f"{rel}: bytes")
    return len(files_a), diffs


def printed(text: str, cards: Path) -> tuple[list[str], list[str]]:
    """A run's printed output as (tables and other lines, notes), without its progress bars, its model card folder
    and its wall time."""
    lines = [line.rstrip().replace(str(cards), "<cards>") for line in text.splitlines()]
    lines = [line for line in lines if "\u2501" not in line and not re.search(r"finished in \d+ s$", line)]
    notes = [line for line in lines if line.startswith("note:")]
    return [line for line in lines if not line.startswith("note:")], notes


def run(name: str, cmd: list[str], env: dict[str, str], folder: Path) -> tuple[float, str]:
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (folder / f"{name}.out").write_text(proc.stdout)
    (folder / f"{name}.err").write_text(proc.stderr)
    if proc.returncode != 0:
        print(f"{name} exited {proc.returncode} after {wall:.0f} s; stderr ends:\n{proc.stderr[-4000:]}")
        print(f"kept {folder}")
        sys.exit(1)
    print(f"[{time.strftime('%H:%M:%S')}] {name}: done in {wall:.0f} s", flush=True)
    return wall, proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet20_fp,resnet20_bnn")
    ap.add_argument("--variant", choices=("quick", "demo"), default="quick")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder also when all is equal")
    args = ap.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="arbi-quick-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}  # one width: the tables wrap the same way
    base = [str(ROOT / ".venv" / "bin" / "arbibench"), "protocol", "run", "cifar10", f"--{args.variant}",
            "--models", args.models]  # fmt: skip
    load0 = os.getloadavg()[0]
    print(f"{platform.machine()}, {os.cpu_count()} cores, torch {importlib.metadata.version('torch')}, "
          f"ray {importlib.metadata.version('ray')}, "
          f"load average {load0:.1f}; folder {folder}")  # fmt: skip

    local_s, local_out = run("local", [*base, "--store", str(folder / "local.db"), "--model-info",
                                       str(folder / "local")], env, folder)  # fmt: skip
    t0 = time.perf_counter()
    with loopback_head() as head:
        head_s = time.perf_counter() - t0
        ray_cmd = [*base, "--store", str(folder / "ray.db"), "--model-info", str(folder / "ray"), "--backend", "ray",
                   "--address", head.address, "--workers", "1", "--worker-threads", "1"]  # fmt: skip
        ray_s, ray_out = run("ray", ray_cmd, {**env, **head.env}, folder)
        listening = listening_addresses(process_tree(head.pid)) if shutil.which("ss") else None
    load1 = os.getloadavg()[0]

    checks: list[tuple[str, int, list[str]]] = []
    local_rows, ray_rows = store_rows(folder / "local.db"), store_rows(folder / "ray.db")
    for table in TABLES:
        a, b = local_rows[table], ray_rows[table]
        checks.append((f"store: {table}", len(a), [] if a == b else [f"{len(set(a) ^ set(b))} rows differ"]))
    n_files, diffs = card_differences(folder / "local", folder / "ray")
    checks.append(("model cards and examples (files)", n_files, diffs))
    (pa, notes_a), (pb, notes_b) = printed(local_out, folder / "local"), printed(ray_out, folder / "ray")
    checks.append(("printed tables and lines", len(pa), [] if pa == pb else ["printed output (local.out, ray.out)"]))
    if listening is None:
        checks.append(("cluster ports on 127.0.0.1 only (unchecked: no `ss`)", 0, []))
    else:
        off = [addr for addr in listening if not addr.startswith(LOOPBACK)]
        checks.append(("cluster ports on 127.0.0.1 only", len(listening), [f"listens on {a}" for a in off]))

    print(f"\nload average {load0:.1f} at the start, {load1:.1f} at the end\n")
    print("| run | wall s |\n| --- | ---: |")
    print(f"| local | {local_s:.0f} |")
    print(f"| ray, 1 worker x 1 thread (head start {head_s:.0f} s, not included) | {ray_s:.0f} |\n")
    print("| compared | rows / files / lines | equal |\n| --- | ---: | --- |")
    for what, n, d in checks:
        print(f"| {what} | {n:,} | {'yes' if not d else 'NO'} |")
    # The console notes (fused path refused, fused-path answers contradicted) are said, not compared: they
    # describe how the batches were computed in this process, and a run whose batches were computed elsewhere
    # (the Ray workers, or an earlier run of the same store) prints none.
    n_equal = len(set(notes_a) & set(notes_b))
    print(f"| console notes (not compared) | {len(notes_a)} local, {len(notes_b)} ray | {n_equal} in both |")
    for who, notes in (("local", set(notes_a) - set(notes_b)), ("ray", set(notes_b) - set(notes_a))):
        for note in sorted(notes):
            print(f"printed by the {who} run only: {note}")
    differences = [f"{what}: {x}" for what, _, d in checks for x in d]
    for line in differences:
        print(f"DIFFERENCE {line}")
    if differences or args.keep:
        print(f"kept {folder}")
    else:
        shutil.rmtree(folder)
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
