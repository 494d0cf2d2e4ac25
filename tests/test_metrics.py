"""Tests for arbibench.evaluation.metrics (ARBiBench ACC / ACC* / ACC_norm / RS / worst case)."""

from __future__ import annotations

import json
import math
import random
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arbibench.evaluation.metrics import (
    Z_95,
    AttackMetrics,
    RobustnessReport,
    acc_norm,
    compute_report,
    robustness_score,
    robustness_score_mean,
    wilson_interval,
)

EXACT = 1e-12

# --------------------------------------------------------------------------- hand-computed example

# 10 samples: 8 clean-correct (ACC = 0.8).
CLEAN = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 0], dtype=bool)
# "pgd" keeps samples 0, 1, 4, 5, 6 -> ACC* = 0.5, ACC_norm = 0.5 / 0.8 = 0.625
PGD = np.array([1, 1, 0, 0, 1, 1, 1, 0, 0, 0], dtype=bool)
# "fgsm" keeps samples 0..5 -> ACC* = 0.6, ACC_norm = 0.6 / 0.8 = 0.75
FGSM = np.array([1, 1, 1, 1, 1, 1, 0, 0, 0, 0], dtype=bool)
# Robust to both: samples 0, 1, 4, 5 -> worst case 0.4, worst-case ACC_norm 0.5


def test_hand_computed_example() -> None:
    report = compute_report(CLEAN, {"pgd": PGD, "fgsm": FGSM})
    assert report.n_examples == 10
    assert report.acc == pytest.approx(0.8, abs=EXACT)
    assert [a.attack for a in report.attacks] == ["pgd", "fgsm"]  # insertion order kept
    pgd, fgsm = report.attacks
    assert (pgd.robust, pgd.n) == (5, 10)
    assert pgd.acc_star == pytest.approx(0.5, abs=EXACT)
    assert pgd.acc_norm == pytest.approx(0.625, abs=EXACT)
    assert (fgsm.robust, fgsm.n) == (6, 10)
    assert fgsm.acc_star == pytest.approx(0.6, abs=EXACT)
    assert fgsm.acc_norm == pytest.approx(0.75, abs=EXACT)
    assert report.rs == pytest.approx(1.375, abs=EXACT)  # sum, paper's formula
    assert report.rs_mean == pytest.approx(0.6875, abs=EXACT)  # sum / 2
    assert report.n_attacks == 2
    assert report.worst_case_acc == pytest.approx(0.4, abs=EXACT)
    assert report.worst_case_acc_norm == pytest.approx(0.5, abs=EXACT)
    assert report.acc_interval == wilson_interval(8, 10)
    assert pgd.interval == wilson_interval(5, 10)
    assert fgsm.interval == wilson_interval(6, 10)
    assert report.worst_case_interval == wilson_interval(4, 10)


def test_attack_order_is_preserved_reversed() -> None:
    report = compute_report(CLEAN, {"fgsm": FGSM, "pgd": PGD})
    assert [a.attack for a in report.attacks] == ["fgsm", "pgd"]


def test_accepts_zero_one_integer_arrays() -> None:
    as_int = compute_report(CLEAN.astype(np.int64), {"pgd": PGD.astype(np.uint8)})
    as_bool = compute_report(CLEAN, {"pgd": PGD})
    assert as_int == as_bool


def test_zero_attacks() -> None:
    report = compute_report(CLEAN, {})
    assert report.attacks == ()
    assert report.rs == 0.0
    assert report.rs_mean == 0.0
    assert report.worst_case_acc == report.acc
    assert report.worst_case_acc_norm == pytest.approx(1.0)
    assert report.worst_case_interval == report.acc_interval


def test_all_clean_wrong_gives_zero_norms() -> None:
    zeros = np.zeros(5, dtype=bool)
    report = compute_report(zeros, {"pgd": zeros, "fgsm": zeros})
    assert report.acc == 0.0
    assert all(a.acc_norm == 0.0 for a in report.attacks)
    assert report.rs == 0.0 and report.rs_mean == 0.0
    assert report.worst_case_acc_norm == 0.0


# --------------------------------------------------------------------------- scalar helpers


def test_acc_norm_zero_when_acc_zero() -> None:
    assert acc_norm(0.0, 0.0) == 0.0


def test_acc_norm_values() -> None:
    assert acc_norm(0.4, 0.8) == pytest.approx(0.5)
    assert acc_norm(0.8, 0.8) == 1.0
    assert acc_norm(0.0, 0.5) == 0.0


@pytest.mark.parametrize(("acc_star", "acc"), [(0.9, 0.8), (0.1, 0.0), (-0.1, 0.5), (0.5, 1.5), (math.nan, 0.5)])
def test_acc_norm_rejects_invalid(acc_star: float, acc: float) -> None:
    with pytest.raises(ValueError):
        acc_norm(acc_star, acc)


def test_robustness_score_sum_and_mean() -> None:
    assert robustness_score([0.5, 0.25, 1.0]) == pytest.approx(1.75)
    assert robustness_score_mean([0.5, 0.25, 1.0]) == pytest.approx(1.75 / 3)
    assert robustness_score([]) == 0.0
    assert robustness_score_mean([]) == 0.0
    with pytest.raises(ValueError):
        robustness_score([1.2])


# --------------------------------------------------------------------------- Wilson interval

# Published Wilson score intervals (no continuity correction), Newcombe (1998),
# "Two-sided confidence intervals for the single proportion", Stat. Med. 17:857-872, Table I,
# method 3; plus the common 8/10 textbook example.
PUBLISHED_95 = [
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0000, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (8, 10, 0.4902, 0.9433),
]


@pytest.mark.parametrize(("k", "n", "low", "high"), PUBLISHED_95)
def test_wilson_matches_published_values(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=5e-5)
    assert hi == pytest.approx(high, abs=5e-5)


def test_wilson_other_confidence_levels() -> None:
    # 99% is wider than 95%, which is wider than 90%, all around the same proportion.
    lo90, hi90 = wilson_interval(8, 10, confidence=0.90)
    lo95, hi95 = wilson_interval(8, 10)
    lo99, hi99 = wilson_interval(8, 10, confidence=0.99)
    assert lo99 < lo95 < lo90 < 0.8 < hi90 < hi95 < hi99
    # 95% uses the exact constant, which the inverse-normal path reproduces.
    assert Z_95 == 1.959963984540054
    assert NormalDist().inv_cdf(0.975) == pytest.approx(Z_95, abs=1e-12)
    lo_near, hi_near = wilson_interval(8, 10, confidence=0.95 + 1e-12)
    assert (lo_near, hi_near) == pytest.approx((lo95, hi95), abs=1e-9)


def test_wilson_extremes_are_exact() -> None:
    assert wilson_interval(0, 7)[0] == 0.0
    assert wilson_interval(7, 7)[1] == 1.0


@pytest.mark.parametrize(("k", "n", "conf"), [(0, 0, 0.95), (1, 0, 0.95), (-1, 5, 0.95), (6, 5, 0.95), (1, 5, 1.0)])
def test_wilson_rejects_invalid(k: int, n: int, conf: float) -> None:
    with pytest.raises(ValueError):
        wilson_interval(k, n, confidence=conf)


def test_wilson_narrows_as_n_grows() -> None:
    widths = []
    for n in (10, 100, 1000, 10000):
        lo, hi = wilson_interval(n * 3 // 10, n)
        widths.append(hi - lo)
    assert all(a > b for a, b in zip(widths, widths[1:], strict=False))


@given(n=st.integers(min_value=1, max_value=10_000), data=st.data())
@settings(deadline=None)
def test_wilson_contains_p_hat_and_stays_in_unit_interval(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n))
    lo, hi = wilson_interval(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


# --------------------------------------------------------------------------- validation


def test_contradiction_raises() -> None:
    adv = CLEAN.copy()
    adv[9] = True  # sample 9 is wrong on clean input
    with pytest.raises(ValueError, match=r"'pgd'.*first index 9"):
        compute_report(CLEAN, {"pgd": adv})


def test_mismatched_length_raises_with_names_and_lengths() -> None:
    with pytest.raises(ValueError, match=r"'fgsm'.*length 9.*length 10"):
        compute_report(CLEAN, {"pgd": PGD, "fgsm": FGSM[:9]})


@pytest.mark.parametrize(
    ("clean", "adv"),
    [
        (np.zeros(0, dtype=bool), {}),  # N = 0
        (CLEAN.reshape(2, 5), {}),  # not 1-D
        (CLEAN, {"pgd": PGD.reshape(2, 5)}),  # attack not 1-D
        (CLEAN.astype(int) * 2, {}),  # not bool-like
        (CLEAN, {"pgd": np.full(10, 0.5)}),  # not bool-like
        (np.array(["a"] * 10), {}),  # wrong dtype
    ],
)
def test_invalid_inputs_raise(clean: np.ndarray, adv: dict[str, np.ndarray]) -> None:
    with pytest.raises(ValueError):
        compute_report(clean, adv)


# --------------------------------------------------------------------------- properties


@st.composite
def clean_and_attacks(draw: st.DrawFn, min_attacks: int = 1, max_attacks: int = 4) -> tuple[np.ndarray, dict]:
    """Random clean flags plus attacks that only ever remove correct samples (adv => clean)."""
    n = draw(st.integers(min_value=1, max_value=60))
    clean = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    n_attacks = draw(st.integers(min_value=min_attacks, max_value=max_attacks))
    attacks = {}
    for i in range(n_attacks):
        keep = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
        attacks[f"attack{i}"] = clean & keep
    return clean, attacks


@given(clean_and_attacks())
@settings(deadline=None)
def test_metric_bounds(case: tuple[np.ndarray, dict]) -> None:
    clean, attacks = case
    r = compute_report(clean, attacks)
    k = len(attacks)
    assert 0.0 <= r.acc <= 1.0
    for a in r.attacks:
        assert 0.0 <= a.acc_star <= r.acc <= 1.0
        assert 0.0 <= a.acc_norm <= 1.0
        assert a.interval[0] <= a.acc_star <= a.interval[1]
    assert 0.0 <= r.rs <= k
    assert r.rs_mean == r.rs / k
    assert r.worst_case_acc <= min(a.acc_star for a in r.attacks)
    assert 0.0 <= r.worst_case_acc_norm <= min(a.acc_norm for a in r.attacks)
    assert r.acc_interval[0] <= r.acc <= r.acc_interval[1]
    assert r.worst_case_interval[0] <= r.worst_case_acc <= r.worst_case_interval[1]


@given(clean_and_attacks(max_attacks=1))
@settings(deadline=None)
def test_single_attack_worst_case_equals_acc_star(case: tuple[np.ndarray, dict]) -> None:
    r = compute_report(*case)
    (only,) = r.attacks
    assert r.worst_case_acc == only.acc_star
    assert r.worst_case_acc_norm == only.acc_norm
    assert r.worst_case_interval == only.interval


@given(clean_and_attacks(min_attacks=2))
@settings(deadline=None)
def test_adding_an_attack_never_raises_worst_case(case: tuple[np.ndarray, dict]) -> None:
    clean, attacks = case
    names = list(attacks)
    previous = compute_report(clean, {}).worst_case_acc
    for i in range(1, len(names) + 1):
        current = compute_report(clean, {name: attacks[name] for name in names[:i]}).worst_case_acc
        assert current <= previous
        previous = current


@given(clean_and_attacks(), st.randoms(use_true_random=False))
@settings(deadline=None)
def test_sample_permutation_invariance(case: tuple[np.ndarray, dict], rnd: random.Random) -> None:
    clean, attacks = case
    perm = np.array(rnd.sample(range(len(clean)), len(clean)), dtype=np.intp)
    original = compute_report(clean, attacks)
    permuted = compute_report(clean[perm], {name: adv[perm] for name, adv in attacks.items()})
    assert permuted == original


def _assert_plain_numbers(obj: object) -> None:
    """Every leaf is a JSON number (never a string-encoded number) or the attack name."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "attack":
                assert isinstance(value, str)
            else:
                _assert_plain_numbers(value)
    elif isinstance(obj, list):
        for value in obj:
            _assert_plain_numbers(value)
    else:
        assert isinstance(obj, int | float) and not isinstance(obj, bool), repr(obj)


@given(clean_and_attacks(min_attacks=0))
@settings(deadline=None)
def test_to_dict_json_round_trip(case: tuple[np.ndarray, dict]) -> None:
    r = compute_report(*case)
    d = r.to_dict()
    loaded = json.loads(json.dumps(d, allow_nan=False))
    assert loaded == d
    _assert_plain_numbers(loaded)
    assert loaded["rs"] == r.rs and loaded["rs_mean"] == r.rs_mean
    assert loaded["n_examples"] == r.n_examples and isinstance(loaded["n_examples"], int)
    assert loaded["acc_interval"] == list(r.acc_interval)
    assert loaded["worst_case_interval"] == list(r.worst_case_interval)
    assert [a["attack"] for a in loaded["attacks"]] == [a.attack for a in r.attacks]
    assert all(isinstance(a["robust"], int) and isinstance(a["n"], int) for a in loaded["attacks"])


def test_dataclasses_are_frozen() -> None:
    r = compute_report(CLEAN, {"pgd": PGD})
    assert isinstance(r, RobustnessReport) and isinstance(r.attacks[0], AttackMetrics)
    with pytest.raises(AttributeError):
        r.acc = 1.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        r.attacks[0].acc_star = 1.0  # type: ignore[misc]
