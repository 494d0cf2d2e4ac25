"""eps* per image: the order-statistic interval for the median, the dyadic search, and its use of the store."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest

from arbibench.attacks import get_threat_model
from arbibench.data.cifar10 import load_cifar10
from arbibench.evaluation.min_perturbation import _dyadic_midpoint, median_interval, minimal_perturbation
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import ResultStore


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


def test_dyadic_midpoints_stay_strictly_inside_the_interval():
    eps_max, rounds = 16 / 255, 6
    unit = eps_max / 2**rounds
    for lo_steps in range(0, 60):
        lo = lo_steps * unit
        for hi in np.linspace(lo + unit * 1.01, eps_max, 7):
            mid = _dyadic_midpoint(lo, hi, eps_max, rounds)
            assert lo < mid < hi
            assert abs(mid / unit - round(mid / unit)) < 1e-9


def _evaluations(path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]


def test_search_on_real_images_bounds_the_robust_accuracy_and_resumes(trained_fp, data_dir, tmp_path):
    x, y, idx = load_cifar10(24, data_dir=data_dir)
    eps_max = 4 / 255
    store_path = tmp_path / "eps.db"
    with ResultStore(store_path) as db:
        kwargs = dict(attacks=("fgsm",), eps_max=eps_max, store=db, model_name="fp", batch_size=12, dataset="cifar10")
        coarse = minimal_perturbation(trained_fp, x, y, idx, search_rounds=1, **kwargs)
        fine = minimal_perturbation(trained_fp, x, y, idx, search_rounds=4, **kwargs)
        clean, per_attack, _, _ = evaluate(
            trained_fp, x, y, idx, attacks=["fgsm"], threat=get_threat_model("Linf", eps_max), dataset="cifar10",
            model_name="fp", batch_size=12, store=db, progress=False, checks=False,
        )
        batches = _evaluations(store_path)
        again = minimal_perturbation(trained_fp, x, y, idx, search_rounds=4, **kwargs)
        assert _evaluations(store_path) == batches  # everything read back from the store
    np.testing.assert_array_equal(again.eps_star, fine.eps_star)
    # misclassified clean: eps* = 0; more search rounds only tighten the bounds
    assert (fine.eps_star[~clean.clean_correct] == 0).all()
    assert (fine.eps_star <= coarse.eps_star).all() and (fine.eps_star < coarse.eps_star).any()
    finite = np.isfinite(fine.eps_star)
    assert finite.any() and (fine.eps_star[finite] <= eps_max + 1e-6).all()
    # eps* comes from verified examples, so it can only show less robustness than the single attack at eps_max
    acc_star = float(per_attack["fgsm"].adv_correct.mean())
    assert fine.robust_accuracy(eps_max) <= acc_star
    assert fine.robust_accuracy(0.0) == pytest.approx(float(clean.clean_correct.mean()))
    accs = [a for _, a in fine.curve()]
    assert all(a >= b for a, b in zip(accs, accs[1:], strict=False))
    summary = fine.to_dict()
    assert summary["n_examples"] == 24 and len(summary["per_sample"]["eps_star"]) == 24
    lo, hi = summary["median_eps_star_ci95"]
    assert lo is None or lo <= summary["median_eps_star"]


def test_bad_search_settings(trained_fp, data_dir, tmp_path):
    x, y, idx = load_cifar10(4, data_dir=data_dir)
    with ResultStore(tmp_path / "s.db") as db:
        with pytest.raises(ValueError, match="search_rounds"):
            minimal_perturbation(trained_fp, x, y, idx, attacks=("fgsm",), search_rounds=0, store=db)
        with pytest.raises(ValueError, match="at least one attack"):
            minimal_perturbation(trained_fp, x, y, idx, attacks=(), store=db)


def test_eval_cli_writes_eps_star_to_json_and_card(data_dir, tmp_path):
    import json

    from typer.testing import CliRunner

    from arbibench.cli import app

    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        app,
        ["eval", "--model", "resnet20_fp", "--attacks", "fgsm", "-n", "16", "--batch-size", "8",
         "--eps-star", "fgsm", "--eps-star-rounds", "3", "--store", str(tmp_path / "s.db"), "--json", str(out),
         "--model-info", str(tmp_path / "info"), "--data-dir", str(data_dir), "--no-checks"],
    )
    assert result.exit_code == 0, result.output
    assert "median eps*" in result.output
    summary = json.loads(out.read_text())["eps_star"]
    assert summary["attacks"] == ["fgsm"] and summary["eps_max"] == pytest.approx(16 / 255)
    assert len(summary["per_sample"]["eps_star"]) == 16
    card = json.loads((tmp_path / "info" / "cifar10" / "Linf" / "resnet20_fp.json").read_text())
    assert card["median_eps_star"] == summary["median_eps_star"]
    assert card["eps_star"]["curve"][0]["robust_acc"] == card["clean_acc"]  # eps 0: the clean accuracy
