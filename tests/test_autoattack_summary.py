"""The per-image AutoAttack comparison's summary (benchmarks/autoattack_per_image.py --summary): the pieces summed per
(model, eps) and over all, and the sign test on the images only one library left robust."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("autoattack_per_image", ROOT / "benchmarks" / "autoattack_per_image.py")
assert SPEC is not None and SPEC.loader is not None
per_image = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(per_image)
PIECES = ROOT / "docs" / "measurements" / "autoattack_per_image"


def test_the_sign_test_is_the_exact_two_sided_binomial() -> None:
    assert per_image.sign_test(0, 0) == 1.0
    assert per_image.sign_test(4, 1) == pytest.approx(12 / 32)  # P(<= 1 of 5) = 6/32, both tails
    assert per_image.sign_test(1, 4) == per_image.sign_test(4, 1)
    assert per_image.sign_test(10, 0) == pytest.approx(2 / 1024)
    assert per_image.sign_test(3, 3) == 1.0


def test_the_summary_sums_the_stored_pieces(capsys: pytest.CaptureFixture[str]) -> None:
    pieces = [json.loads(p.read_text()) for p in sorted(PIECES.glob("*.json"))]
    assert pieces, "the measured pieces are committed beside BENCHMARKS.md"
    per_image._summary(PIECES)
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| all |")]
    assert len(rows) == 1
    ours = sum(sum(per_image._robust(p)[0]) for p in pieces)
    theirs = sum(sum(per_image._robust(p)[1]) for p in pieces)
    assert (int(rows[0][2]), int(rows[0][4]), int(rows[0][5])) == (len(pieces), ours, theirs)
    # a robust image is a correctly classified one that no component fooled, in either library
    for p in pieces:
        a, b = per_image._robust(p)
        assert sum(a) == p["arbibench"]["square_variants"]["configured"]["robust"]
        assert sum(b) == p["reference"]["robust"]
