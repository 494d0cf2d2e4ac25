"""The statistics of the AutoAttack component study (benchmarks/autoattack_component_seeds.py): what its summary
says about two random starts must be right, since it decides whether arbibench's APGD-CE needs a fix."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("autoattack_component_seeds",
                                              ROOT / "benchmarks" / "autoattack_component_seeds.py")
assert SPEC is not None and SPEC.loader is not None
study = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(study)


@pytest.mark.parametrize(("chi2", "df", "p"), [(82.53, 63, 0.05), (53.38, 38, 0.05), (23.21, 10, 0.01),
                                               (62.33, 63, 0.5)])
def test_the_chi2_tail_matches_the_tables(chi2: float, df: int, p: float) -> None:
    """Upper quantiles from the chi-squared tables: 95% at 63 and 38 degrees, 99% at 10, the median at 63."""
    assert study.chi2_upper_p(chi2, df) == pytest.approx(p, abs=0.003)


def test_the_per_image_test_sees_one_image_that_one_start_never_breaks() -> None:
    """Two starts, one of which breaks image 0 always and image 1 never and the other the reverse (the same rates
    elsewhere, so about the same totals), are told apart per image; runs drawn from the same rates are not."""
    rng = random.Random(0)
    swapped_a = [[True, False] + [rng.random() < 0.5 for _ in range(20)] for _ in range(40)]
    swapped_b = [[False, True] + [rng.random() < 0.5 for _ in range(20)] for _ in range(40)]
    chi2, df, p = study.per_image_homogeneity(swapped_a, swapped_b)
    assert df == 22 and chi2 > 150 and p < 1e-6
    same_a = [[rng.random() < 0.5 for _ in range(22)] for _ in range(40)]
    same_b = [[rng.random() < 0.5 for _ in range(22)] for _ in range(40)]
    _, df_same, p_same = study.per_image_homogeneity(same_a, same_b)
    assert df_same == 22 and p_same > 0.01


def test_an_image_every_run_breaks_or_none_breaks_has_no_degree() -> None:
    a = [[True, False, True], [True, False, False]]
    b = [[True, False, False], [True, False, True]]
    chi2, df, _ = study.per_image_homogeneity(a, b)
    assert df == 1 and chi2 == 0.0


def test_welch_gives_the_difference_and_its_t() -> None:
    diff, t = study.welch([70, 72, 71, 73], [72, 74, 73, 75])
    # means 71.5 and 73.5, variances 5/3 each: se = sqrt(2 * (5/3) / 4)
    assert diff == 2.0 and t == pytest.approx(2.0 / (2 * 5 / 3 / 4) ** 0.5)
