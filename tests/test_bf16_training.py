"""The summary of the bf16 A/B (benchmarks/bf16_training.py): it decided that the zoo trains in float32, so its
paired difference must be the one the stored runs give."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("bf16_training", ROOT / "benchmarks" / "bf16_training.py")
assert SPEC is not None and SPEC.loader is not None
ab = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ab)


def _run(seed: int, **last: float) -> dict[str, object]:
    return {"seed": seed, "epochs": 2, "arms": {a: {"val_acc": [0.5, v]} for a, v in last.items()}}


def test_the_paired_difference_is_the_mean_over_its_standard_error() -> None:
    runs = [_run(0, fp32=0.80, bf16=0.79), _run(1, fp32=0.70, bf16=0.70), _run(2, fp32=0.60, bf16=0.58),
            _run(3, bf16=0.10)]  # no float32 arm: left out
    paired = ab.paired_difference(runs, "bf16")
    assert paired["n"] == 3 and paired["lower"] == 2
    assert paired["mean"] == pytest.approx(-1.0)
    assert paired["t"] == pytest.approx(-1.0 / (1.0 / math.sqrt(3)))  # differences -1, 0, -2: SD 1
    assert ab.paired_difference(runs[:1], "bf16") is None  # one seed has no spread
    assert ab.paired_difference(runs, "bf16_then_fp32") is None


def test_the_stored_measurement_gives_the_documented_figures() -> None:
    stored = json.loads((ROOT / "docs" / "measurements" / "bf16_training_xnor.json").read_text())
    bf16 = ab.paired_difference(stored["training"], "bf16")
    mixed = ab.paired_difference(stored["training"], "bf16_then_fp32")
    assert (bf16["n"], bf16["lower"], round(bf16["mean"], 2), round(bf16["t"], 1)) == (3, 3, -0.75, -7.5)
    assert (mixed["n"], mixed["lower"], round(mixed["mean"], 2)) == (3, 2, -0.39)
    text = (ROOT / "docs" / "benchmarks" / "training.md").read_text()
    assert "76.69 (-0.75)" in text and "77.05 (-0.39)" in text and "paired t -7.5" in text
