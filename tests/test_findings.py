"""BNN vs FP twin findings: paired bootstrap of the mean-ACC_norm difference and the verdict it supports."""

from __future__ import annotations

import numpy as np
import pytest

from arbibench.evaluation.bootstrap import Estimate
from arbibench.evaluation.findings import (
    LESS_ROBUST,
    MORE_ROBUST,
    NOT_DISTINGUISHABLE,
    PairedOutcomes,
    compare_to_twin,
    twin_findings,
    verdict,
    verdict_counts,
)


def _outcomes(rng: np.random.Generator, n: int, clean_p: float, robust_p: dict[str, float]) -> PairedOutcomes:
    clean = rng.random(n) < clean_p
    return PairedOutcomes(clean, {a: clean & (rng.random(n) < p) for a, p in robust_p.items()})


def test_verdict_follows_the_interval():
    assert verdict(Estimate(0.1, 0.02, 0.2)) == MORE_ROBUST
    assert verdict(Estimate(-0.1, -0.2, -0.01)) == LESS_ROBUST
    assert verdict(Estimate(0.05, -0.01, 0.1)) == NOT_DISTINGUISHABLE
    assert verdict(Estimate(0.0, 0.0, 0.0)) == NOT_DISTINGUISHABLE


def test_clear_differences_get_clear_verdicts_and_the_point_value_is_the_paper_metric():
    rng = np.random.default_rng(0)
    strong = _outcomes(rng, 500, 0.8, {"pgd": 0.6, "square": 0.7})
    weak = _outcomes(rng, 500, 0.9, {"pgd": 0.05, "square": 0.1})
    row = compare_to_twin("bnn", "fp", "white-box", strong, weak, n_boot=500)
    expected_bnn = np.mean([strong.adversarial[a].mean() / strong.clean.mean() for a in ("pgd", "square")])
    expected_fp = np.mean([weak.adversarial[a].mean() / weak.clean.mean() for a in ("pgd", "square")])
    assert row.bnn.value == pytest.approx(expected_bnn) and row.fp.value == pytest.approx(expected_fp)
    assert row.difference.value == pytest.approx(expected_bnn - expected_fp)
    assert row.difference.low <= row.difference.value <= row.difference.high
    assert row.verdict == MORE_ROBUST and row.difference.low > 0
    assert compare_to_twin("bnn", "fp", "white-box", weak, strong, n_boot=500).verdict == LESS_ROBUST


def test_same_or_broken_models_are_not_distinguishable():
    rng = np.random.default_rng(1)
    a = _outcomes(rng, 300, 0.8, {"pgd": 0.3})
    same = compare_to_twin("bnn", "fp", "black-box", a, a, n_boot=300)
    assert same.difference.to_list() == [0.0, 0.0, 0.0] and same.verdict == NOT_DISTINGUISHABLE
    broken = PairedOutcomes(a.clean, {"pgd": np.zeros(300, bool)})
    zero = compare_to_twin("bnn", "fp", "black-box", broken, broken, n_boot=300)
    assert zero.bnn.value == zero.fp.value == 0.0 and zero.verdict == NOT_DISTINGUISHABLE


def test_verdict_matches_the_interval_on_random_cases():
    rng = np.random.default_rng(2)
    for _ in range(20):
        p, q = rng.random(2)
        row = compare_to_twin("b", "f", "sweep pgd", _outcomes(rng, 200, 0.8, {"e1": p, "e2": p / 2}),
                              _outcomes(rng, 200, 0.8, {"e1": q, "e2": q / 2}), n_boot=200, seed=3)
        assert row.verdict == verdict(row.difference)
        assert row.difference.low <= row.difference.value + 1e-12 <= row.difference.high + 2e-12


def test_pairing_uses_the_same_images_and_only_shared_columns():
    rng = np.random.default_rng(4)
    a = _outcomes(rng, 100, 0.8, {"pgd": 0.5, "fab": 0.5})
    b = _outcomes(rng, 100, 0.8, {"pgd": 0.5})
    assert compare_to_twin("b", "f", "white-box", a, b, n_boot=100).columns == ("pgd",)
    with pytest.raises(ValueError, match="same 100 images"):
        compare_to_twin("b", "f", "white-box", a, _outcomes(rng, 99, 0.8, {"pgd": 0.5}))
    with pytest.raises(ValueError, match="share no attack"):
        compare_to_twin("b", "f", "white-box", a, _outcomes(rng, 100, 0.8, {"square": 0.5}))


def test_twin_findings_pairs_each_bnn_with_its_twin_in_every_shared_setting():
    rng = np.random.default_rng(5)
    out = {
        "fp": {"white-box": _outcomes(rng, 200, 0.9, {"pgd": 0.0}), "black-box": _outcomes(rng, 50, 0.9, {"sq": 0.2})},
        "bnn": {"white-box": _outcomes(rng, 200, 0.7, {"pgd": 0.4})},
        "orphan": {"white-box": _outcomes(rng, 200, 0.7, {"pgd": 0.4})},
    }
    rows = twin_findings(out, {"bnn": "fp", "fp": "fp", "orphan": "missing"}, n_boot=200)
    assert [(r.model, r.twin, r.setting) for r in rows] == [("bnn", "fp", "white-box")]
    assert rows[0].verdict == MORE_ROBUST
    assert verdict_counts(rows) == {MORE_ROBUST: 1, LESS_ROBUST: 0, NOT_DISTINGUISHABLE: 0}
