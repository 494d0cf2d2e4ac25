"""Where a protocol run's time went, from its store alone: per model, attack and machine, the batches, images and
seconds committed (the machine each batch names in ``batch_machines``, "not recorded" for an older store's).

A run on a lent GPU (benchmarks/full_protocol_gpu.sh) comes back as a store; this is its measurement, written as
JSON beside the repo's others, with the run's own settings (workers, time limit) passed in since a store does not
hold them.

    .venv/bin/python benchmarks/store_batch_times.py STORE [--out docs/measurements/X.json] [--setting k=v ...]
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path
from typing import Any

from arbibench.files import atomic_write_json
from arbibench.machine import UNRECORDED


def batch_times(store: Path) -> list[dict[str, Any]]:
    """One row per (model, attack, machine): batches, images and seconds, and seconds per image; read only."""
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        has_machines = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'batch_machines'").fetchone() is not None
        machine = "m.machine" if has_machines else "NULL"
        join = "LEFT JOIN batch_machines m USING (eval_key, batch_index) " if has_machines else ""
        rows = conn.execute(
            f"SELECT e.model_name, e.attack, {machine}, COUNT(*), SUM(b.n_samples), SUM(b.seconds) "
            f"FROM batches b JOIN evaluations e USING (eval_key) {join}"
            "GROUP BY 1, 2, 3 ORDER BY 1, 6 DESC").fetchall()
    finally:
        conn.close()
    return [{"model": m, "attack": a, "machine": mach or UNRECORDED, "batches": n, "images": int(k),
             "seconds": round(float(s), 1), "s_per_image": round(float(s) / k, 4) if k else None}
            for m, a, mach, n, k, s in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path, help="a protocol run's SQLite store")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                        help="the run's settings, recorded in the JSON (repeatable), e.g. workers=14")
    args = parser.parse_args()
    if not args.store.is_file():
        parser.error(f"no store at {args.store}")
    settings = dict(s.split("=", 1) for s in args.setting if "=" in s)
    if len(settings) != len(args.setting):
        parser.error("--setting takes KEY=VALUE")
    rows = batch_times(args.store)
    for r in rows:
        print(f"{r['model']:24s} {r['attack']:12s} {r['batches']:4d} batches {r['images']:6d} images "
              f"{r['seconds']:9.1f} s  {r['machine']}")
    if args.out is not None:
        atomic_write_json({"store": args.store.name, "settings": settings, "rows": rows}, args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
