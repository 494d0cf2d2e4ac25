"""A result store's rows without their timings: what two runs of the same evaluation must agree on."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def store_rows(path: Path) -> dict[str, list[tuple]]:
    """Every stored row but the timings (seconds, creation time) and the machines that computed them."""
    with sqlite3.connect(path) as c:
        return {
            "evaluations": sorted(c.execute("SELECT eval_key, model_hash, model_name, attack, spec FROM evaluations")),
            "batches": sorted(c.execute("SELECT eval_key, batch_index, n_samples FROM batches")),
            "outcomes": sorted(c.execute("SELECT * FROM outcomes")),
            "flags": sorted(c.execute("SELECT * FROM flags")),
        }
