"""eps* per image: the order-statistic interval for the median, the descent search with random corners, censoring
at the floor, and its use of the store."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest

from arbibench.attacks import get_threat_model
from arbibench.data.cifar10 import load_cifar10
from arbibench.evaluation.min_perturbation import LevelGrid, LogGrid, median_interval, minimal_perturbation
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import ResultStore
from arbibench.models.zoo import load_model


def test_median_interval_is_the_binomial_order_statistics():
    # n = 100 at 95%: the 40th and 61st order statistics (tables for the sign test)
    assert median_interval(np.arange(100.0)) == (39.0, 60.0)
    # n = 10 at 95%: 2nd and 9th
    assert median_interval(np.arange(10.0)) == (1.0, 8.0)
    # shuffled input, inf entries (never fooled) are order statistics like any other
    values = np.array([np.inf] * 60 + list(range(40)), dtype=float)
    np.random.default_rng(0).shuffle(values)
    lo, hi = median_interval(values)
    assert lo == 39.0 and math.isinf(hi)
    assert median_interval(np.array([3.0])) == (3.0, 3.0)


def test_median_interval_covers_the_median_at_the_stated_rate():
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(400):
        lo, hi = median_interval(rng.exponential(size=31))
        covered += lo <= math.log(2) <= hi  # the exponential's median
    assert covered / 400 >= 0.93


def test_log_grid_descends_to_the_floor_by_at_most_halves_and_bisects_strictly_inside():
    grid = LogGrid(16 / 255, 1e-3 / 255, rounds=3)
    descent = [grid.radius(p) for p in range(grid.top, -1, -grid.unit)]
    assert descent[0] == 16 / 255 and descent[-1] == pytest.approx(1e-3 / 255, rel=1e-9)
    ratios = [a / b for a, b in zip(descent, descent[1:], strict=False)]
    assert all(1.0 < r <= 2.0 + 1e-12 for r in ratios)
    # the next descent radius lies strictly below the example found, or there is none (censored at the floor)
    assert grid.radius(grid.descent_below(0.9 * descent[3], grid.top)) < 0.9 * descent[3]
    assert grid.descent_below(descent[-1], grid.unit) is None
    for lo in range(0, grid.top - 1):
        for hi in np.geomspace(grid.radius(lo + 1) * 1.001, 16 / 255, 5):
            mid = grid.midpoint(lo, float(hi))
            assert mid is not None and grid.radius(lo) < grid.radius(mid) < hi
    assert grid.midpoint(5, grid.radius(6)) is None  # one position apart: resolved


def test_level_grid_descends_by_halving_whole_levels_and_bisects_until_adjacent():
    grid = LevelGrid(16 / 255)
    assert [round(grid.radius(p) * 255) for p in grid.descent_positions()] == [16, 8, 4, 2, 1]
    twelve = LevelGrid(12 / 255)
    assert [round(twelve.radius(p) * 255) for p in twelve.descent_positions()] == [12, 6, 3, 1]
    assert grid.floor == pytest.approx(1 / 255) and not grid.censors
    # an example 5 levels away: the next radius tried is 4 levels; below one level there is nothing
    assert round(grid.radius(grid.descent_below(5 / 255, grid.top)) * 255) == 4
    assert grid.descent_below(1 / 255, grid.top) is None
    # robust at 8 levels (position 7), fooled at 16: the middle is 12 levels, then 10 or 14 ...
    assert round(grid.radius(grid.midpoint(7, 16 / 255)) * 255) == 12
    assert grid.midpoint(7, 9 / 255) is None  # levels 8 and 9 are adjacent: resolved
    # every bracket closes within rounds_needed halvings
    for lo in range(grid.top):
        for hi_level in range(lo + 2, grid.levels + 1):
            a, b, rounds = lo, hi_level / 255, 0
            while (m := grid.midpoint(a, b)) is not None:
                a, rounds = m, rounds + 1  # the worst case: robust at every midpoint
            assert rounds <= grid.rounds_needed


def test_eps_star_on_the_uint8_grid_is_whole_levels_from_one(bnn, data_dir, tmp_path):
    # the shipped resnet20_bnn on real test images: on the grid every eps* is a whole number of grey levels, at
    # least one, and nothing is censored (no 8-bit image lies closer than one level)
    x, y, idx = load_cifar10(8, data_dir=data_dir)
    kwargs = dict(attacks=("fgsm",), eps_max=4 / 255, probe_draws=5, model_name="bnn", batch_size=8)
    with ResultStore(tmp_path / "g.db") as db:
        found = minimal_perturbation(bnn, x, y, idx, store=db, grid="uint8", **kwargs)
        floated = minimal_perturbation(bnn, x, y, idx, store=db, search_rounds=1, **kwargs)
    correct = found.eps_star[found.clean_correct]
    finite = correct[np.isfinite(correct)]
    assert len(finite) >= 3
    levels = finite * 255
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-3)
    assert (levels >= 1 - 1e-3).all() and (levels <= 4 + 1e-3).all()
    assert not found.censored.any() and found.eps_floor == pytest.approx(1 / 255)
    assert not found.is_censored(found.eps_floor)  # one grey level is exact on the grid, never "<= 1/255"
    from arbibench.leaderboard.eps_star import eps_star_text

    assert "\u2264" not in eps_star_text(found.to_dict())
    assert found.to_dict()["grid"] == "uint8" and "grid" not in floated.to_dict()
    # the float search goes below one level for a BNN; the grid cannot
    assert (floated.eps_star[floated.clean_correct] < 1 / 255).any()
    with ResultStore(tmp_path / "bad.db") as db, pytest.raises(ValueError, match="grey level"):
        minimal_perturbation(bnn, x, y, idx, eps_max=0.5 / 255, store=db, grid="uint8")


def _evaluations(path) -> int:
    with sqlite3.connect(path) as conn:
        if not conn.execute("SELECT name FROM sqlite_master WHERE name = 'batches'").fetchall():
            return 0
        return conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]


@pytest.fixture(scope="module")
def bnn():
    return load_model("resnet20_bnn", device="cpu")


def test_search_resolves_a_bnn_below_the_old_bisection_floor_and_resumes(bnn, data_dir, tmp_path):
    # the shipped resnet20_bnn on real test images: eps* far below eps_max / 2**6, the first step of the earlier
    # bisection, which every standard BNN card printed as its median
    x, y, idx = load_cifar10(12, data_dir=data_dir)
    eps_max = 16 / 255
    store_path = tmp_path / "eps.db"
    kwargs = dict(attacks=("fgsm",), eps_max=eps_max, model_name="bnn", batch_size=12, dataset="cifar10",
                  probe_draws=10, search_rounds=1)
    with ResultStore(store_path) as db:
        found = minimal_perturbation(bnn, x, y, idx, store=db, **kwargs)
        batches = _evaluations(store_path)
        again = minimal_perturbation(bnn, x, y, idx, store=db, **kwargs)
        assert _evaluations(store_path) == batches  # every radius read back from the store
        clean, per_attack, _, _ = evaluate(
            bnn, x, y, idx, attacks=["fgsm"], threat=get_threat_model("Linf", eps_max), dataset="cifar10",
            model_name="bnn", batch_size=12, store=db, progress=False, checks=False,
        )
    np.testing.assert_array_equal(again.eps_star, found.eps_star)
    assert (found.clean_correct == clean.clean_correct).all()
    assert (found.eps_star[~clean.clean_correct] == 0).all()
    correct = found.eps_star[found.clean_correct]
    assert (correct > 0).all() and (correct[np.isfinite(correct)] <= eps_max + 1e-6).all()
    assert (correct < eps_max / 2**6).sum() >= 2  # resolved below where the earlier search stopped
    # the random corners go first and fool some images on their own; the gradient attack finds others
    assert "corners" in set(found.found_by) and set(found.found_by) <= {"corners", "fgsm", ""}
    # eps* comes from verified examples, so it can only show less robustness than the single attack at eps_max
    assert found.robust_accuracy(eps_max) <= float(per_attack["fgsm"].adv_correct.mean())
    assert found.robust_accuracy(0.0) == pytest.approx(float(clean.clean_correct.mean()))
    summary = found.to_dict()
    assert summary["search"] == "descent" and summary["n_correct"] == int(clean.clean_correct.sum())
    lo, hi = summary["median_eps_star_correct_ci95"]
    assert lo <= summary["median_eps_star_correct"] <= (math.inf if hi is None else hi)
    assert summary["median_eps_star"] <= summary["median_eps_star_correct"]  # misclassified images count as 0
    # each eps* is bracketed: the attacks ran at `survived` and fooled nothing, the example found lies at most one
    # grid position above it (search_rounds=1: a factor sqrt(2); plus float32's rounding of a pixel in [0, 1], which
    # a distance measured on the stored images carries); nothing survived where the floor fooled the image
    assert found.survived is not None
    bracketed = found.clean_correct & ~found.censored & np.isfinite(found.eps_star)
    assert bracketed.sum() >= 4
    assert (found.survived[bracketed] < found.eps_star[bracketed]).all()
    assert (found.eps_star[bracketed] <= found.survived[bracketed] * 2**0.5 + 2e-7).all()
    assert (found.survived[~found.clean_correct | found.censored] == 0).all()
    np.testing.assert_allclose(found.survived[np.isinf(found.eps_star)], eps_max)
    np.testing.assert_array_equal(again.survived, found.survived)
    assert summary["per_sample"]["survived"] == found.survived.tolist()
    # the curve's two ends: equal where every correct image was attacked (eps_max) and at 0 (clean accuracy)
    curve = found.curve()
    assert all(low is not None and low <= high for _, high, low in curve)
    assert curve[0][1] == curve[0][2] == pytest.approx(float(clean.clean_correct.mean()))
    assert found.robust_accuracy_low(eps_max) == found.robust_accuracy(eps_max)
    assert any(low < high for _, high, low in curve)  # a BNN's brackets sit between the curve's points


def test_an_image_fooled_at_the_floor_is_censored_never_measured_there(bnn, data_dir, tmp_path):
    # a floor of 4/255: the corners and FGSM fool most correctly classified images of a standard BNN there
    x, y, idx = load_cifar10(12, data_dir=data_dir)
    with ResultStore(tmp_path / "c.db") as db:
        found = minimal_perturbation(bnn, x, y, idx, attacks=("fgsm",), eps_max=16 / 255, eps_floor=4 / 255,
                                     search_rounds=1, probe_draws=5, store=db, model_name="bnn", batch_size=12)
    assert found.eps_floor == pytest.approx(4 / 255)
    assert found.censored.any() and not found.censored[~found.clean_correct].any()
    # every censored image was fooled at or below the floor; every other correct one only above it
    assert (found.eps_star[found.censored] <= found.eps_floor + 1e-6).all()
    assert (found.eps_star[found.clean_correct & ~found.censored] > found.eps_floor).all()
    # a share of the correct images (misclassified ones are never censored), so a more accurate model keeps it
    assert found.censored[found.clean_correct].mean() > 0.5 and found.is_censored(found.median_correct)
    summary = found.to_dict()
    assert summary["censored"] == pytest.approx(found.censored.sum() / found.clean_correct.sum())
    assert summary["per_sample"]["censored"] == found.censored.tolist()


def test_bad_search_settings(trained_fp, data_dir, tmp_path):
    x, y, idx = load_cifar10(4, data_dir=data_dir)
    with ResultStore(tmp_path / "s.db") as db:
        for kwargs, words in (({"search_rounds": 0}, "search_rounds"), ({"attacks": ()}, "at least one attack"),
                              ({"eps_floor": 16 / 255}, "eps_floor"), ({"probe_draws": -1}, "probe_draws")):
            with pytest.raises(ValueError, match=words):
                minimal_perturbation(trained_fp, x, y, idx, store=db, **{"attacks": ("fgsm",), **kwargs})
        assert _evaluations(tmp_path / "s.db") == 0  # refused before any work


def test_eval_cli_writes_eps_star_to_json_and_card(data_dir, tmp_path):
    import json

    from typer.testing import CliRunner

    from arbibench.cli import app

    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        app,
        ["eval", "--model", "resnet20_fp", "--attacks", "fgsm", "-n", "16", "--batch-size", "8",
         "--eps-star", "fgsm", "--eps-star-rounds", "3", "--eps-star-draws", "5", "--store", str(tmp_path / "s.db"),
         "--json", str(out),
         "--model-info", str(tmp_path / "info"), "--data-dir", str(data_dir), "--no-checks"],
    )
    assert result.exit_code == 0, result.output
    assert "median eps*" in result.output
    summary = json.loads(out.read_text())["eps_star"]
    assert summary["attacks"] == ["fgsm"] and summary["eps_max"] == pytest.approx(16 / 255)
    assert len(summary["per_sample"]["eps_star"]) == 16
    card = json.loads((tmp_path / "info" / "cifar10" / "Linf" / "resnet20_fp.json").read_text())
    assert card["median_eps_star"] == summary["median_eps_star"]
    assert card["eps_star"]["search"] == "descent" and card["eps_star"]["eps_floor"] == pytest.approx(1e-3 / 255)
    assert card["eps_star"]["probe_draws"] == 5 == summary["probe_draws"]
    assert card["eps_star"]["median_correct"] == summary["median_eps_star_correct"]
    assert card["eps_star"]["median_correct_ci95"] == summary["median_eps_star_correct_ci95"]
    assert card["eps_star"]["curve"][0]["robust_acc"] == card["clean_acc"]  # eps 0: the clean accuracy
    # the curve's low end, point by point: what the search's attacks show where its radii lie at or above eps
    curve = card["eps_star"]["curve"]
    assert [p["robust_acc_low"] for p in curve] == [p["robust_acc_low"] for p in summary["curve"]] or all(
        p["robust_acc_low"] == pytest.approx(100 * q["robust_acc_low"], abs=0.01)
        for p, q in zip(curve, summary["curve"], strict=True))
    assert all(p["robust_acc_low"] <= p["robust_acc"] for p in curve) and curve[0]["robust_acc_low"] == \
        card["clean_acc"]
