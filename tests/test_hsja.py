"""HopSkipJump: breaks the shipped FP ResNet-20 from labels alone, within its per-sample query budget.

Budgets are small (CI time): the numbers asserted are those measured at these budgets, with a margin, not the
paper's (which runs to 25k queries).
"""

import math

import pytest
import torch
from conftest import OneHot

from arbibench.attacks import L2, HopSkipJump, Linf, get_attack
from arbibench.attacks.query import QueryAccessError, QueryModel
from arbibench.data import load_cifar10
from arbibench.evaluation.runner import evaluate
from arbibench.evaluation.store import ResultStore

N = 60  # images of the effect test
QUERIES = 300


@pytest.fixture(scope="module")
def data(trained_fp, data_dir):
    x, y, _ = load_cifar10(N, data_dir=data_dir)
    with torch.no_grad():
        correct = trained_fp(x).argmax(1) == y
    return x, y, correct


@pytest.fixture(scope="module")
def linf_run(trained_fp, data):
    """HSJA-Linf at 8/255, 300 queries, on the correctly classified images among the first N."""
    x, y, correct = data
    attack = get_attack("hsja", max_queries=QUERIES)
    threat = Linf(8 / 255)
    x0, y0 = x[correct], y[correct]
    out = attack.output(trained_fp, x0, y0, threat, torch.Generator().manual_seed(0))
    return out, threat, x0, y0, out.x_adv


def test_hsja_linf_lowers_accuracy(trained_fp, data, linf_run):
    x, y, correct = data
    out, threat, x0, y0, x_adv = linf_run
    clean = int(correct.sum()) / N
    with torch.no_grad():
        still = trained_fp(x_adv).argmax(1) == y0
    robust = int(still.sum()) / N
    # measured: clean 0.90, ACC* 0.667 (60 images, 300 queries); median queries at success 138. HSJA-Linf needs
    # thousands of queries to reach 8/255 on most images (its median distance here: 0.039 at 300, 0.020 at 1000)
    assert clean > 0.85
    assert robust < 0.76
    assert robust <= clean - 0.15
    fooled = ~still
    assert bool((out.queries <= QUERIES).all())
    assert float(out.queries[fooled].float().median()) < 200


def test_hsja_min_distance_and_result_agree(trained_fp, linf_run):
    out, threat, x0, y0, x_adv = linf_run
    md = out.min_distance
    assert md.shape == (x0.shape[0],) and md.dtype == torch.float64
    assert bool(torch.isfinite(md).all())  # uniform noise finds a start for every image here
    within = md <= threat.eps + 1e-6
    with torch.no_grad():
        fooled = trained_fp(x_adv).argmax(1) != y0
    assert torch.equal(fooled, within)  # the returned point is the recorded one, re-checked by the model
    dist = threat.distance(x_adv.double(), x0.double())
    assert torch.allclose(dist[within], md[within], rtol=0, atol=1e-9)
    assert torch.equal(x_adv[~within], x0[~within])  # nothing found within eps: the original comes back


def test_hsja_distance_beyond_eps_is_real(trained_fp, data):
    """A distance reported beyond eps belongs to a real adversarial example: the same run (deterministic) with eps
    set to that distance stops at that very point."""
    x, y, correct = data
    i = int(correct.nonzero()[0])
    x1, y1 = x[i : i + 1], y[i : i + 1]
    first = get_attack("hsja", max_queries=120)
    first_out = first.output(trained_fp, x1, y1, L2(1e-3), torch.Generator().manual_seed(3))
    d = float(first_out.min_distance[0])
    assert 1e-3 < d < math.inf
    again = get_attack("hsja", max_queries=120)
    again_out = again.output(trained_fp, x1, y1, L2(d), torch.Generator().manual_seed(3))
    x_adv = again_out.x_adv
    with torch.no_grad():
        assert int(trained_fp(x_adv).argmax(1)) != int(y1)
    assert float(L2(d).distance(x_adv.double(), x1.double())) == pytest.approx(d, abs=1e-6)
    assert int(again_out.queries[0]) <= int(first_out.queries[0])


def test_hsja_uses_labels_only(trained_fp, data):
    """Access is labels: the oracle hides scores, and scores that carry only the label give the identical result."""
    assert HopSkipJump.access == "labels" and not HopSkipJump.needs_gradients
    x, y, correct = data
    x0, y0 = x[correct][:3], y[correct][:3]
    oracle = QueryModel(trained_fp, x0, y0, L2(0.5), access="labels", max_queries=10)
    with pytest.raises(QueryAccessError):
        oracle.scores(x0, torch.arange(3))
    results = []
    for model in (trained_fp, OneHot(trained_fp).eval()):
        attack = get_attack("hsja", max_queries=80)
        out = attack.output(model, x0, y0, L2(0.5), torch.Generator().manual_seed(1))
        results.append((out.x_adv, out.min_distance, out.queries))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])
    assert torch.equal(results[0][2], results[1][2])


def test_hsja_config_is_validated():
    cfg = HopSkipJump().config
    assert (cfg.max_queries, cfg.init_evals, cfg.max_evals, cfg.gamma) == (1000, 100, 10_000, 1.0)
    for bad in ({"max_queries": 0}, {"init_evals": 0}, {"gamma": -1.0}, {"init_evals": 50, "max_evals": 10}):
        with pytest.raises(ValueError):
            get_attack("hsja", **bad)
    assert get_attack("hsja").config_dict()["name"] == "hsja"


def test_hsja_through_the_runner(trained_fp, data, tmp_path):
    """The store gets the smallest adversarial distance found (beyond eps for robust samples) and the queries."""
    x, y, correct = data
    with ResultStore(tmp_path / "r.db") as store:
        clean, per_attack, _, _ = evaluate(
            trained_fp,
            x[:4],
            y[:4],
            attacks=[get_attack("hsja", max_queries=40)],
            threat=Linf(1 / 255),
            model_name="resnet20_fp",
            store=store,
            progress=False,
            checks=False,
        )
    out = per_attack["hsja"]
    attacked = clean.clean_correct
    assert bool((out.queries[attacked] >= 1).all()) and bool((out.queries[attacked] <= 40).all())
    robust = attacked & out.adv_correct
    assert robust.any()  # 40 queries cannot reach 1/255 on every image
    assert bool((out.perturbation[robust] > 1 / 255).all())  # a distance found beyond eps, not 0
