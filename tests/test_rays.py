"""RayS: breaks the shipped FP ResNet-20 at Linf 8/255 from labels alone, within its per-sample query budget.

Budgets are small (CI time): the numbers asserted are those measured at these budgets, with a margin, not the
paper's (which runs to 10k queries).
"""

import math

import pytest
import torch
from conftest import OneHot

from arbibench.attacks import Linf, RayS, get_attack
from arbibench.attacks.query import QueryAccessError, QueryModel
from arbibench.data import load_cifar10

N = 60  # images of the effect test
QUERIES = 300


@pytest.fixture(scope="module")
def data(trained_fp, data_dir):
    x, y, _ = load_cifar10(N, data_dir=data_dir)
    with torch.no_grad():
        correct = trained_fp(x).argmax(1) == y
    return x, y, correct


@pytest.fixture(scope="module")
def run(trained_fp, data):
    """RayS at Linf 8/255, 300 queries, on the correctly classified images among the first N."""
    x, y, correct = data
    attack = get_attack("rays", max_queries=QUERIES)
    threat = Linf(8 / 255)
    x0, y0 = x[correct], y[correct]
    out = attack.output(trained_fp, x0, y0, threat, torch.Generator().manual_seed(0))
    return out, threat, x0, y0, out.x_adv


def test_rays_lowers_accuracy(trained_fp, data, run):
    x, y, correct = data
    out, threat, x0, y0, x_adv = run
    clean = int(correct.sum()) / N
    with torch.no_grad():
        still = trained_fp(x_adv).argmax(1) == y0
    robust = int(still.sum()) / N
    # measured: clean 0.90, ACC* 0.55 (60 images, 300 queries); median queries at success 120
    assert clean > 0.85
    assert robust < 0.65
    assert robust <= clean - 0.25
    assert bool((out.queries <= QUERIES).all())
    assert float(out.queries[~still].float().median()) < 200


def test_rays_min_distance_and_result_agree(trained_fp, run):
    out, threat, x0, y0, x_adv = run
    md = out.min_distance
    assert md.shape == (x0.shape[0],) and bool(torch.isfinite(md).all())
    within = md <= threat.eps + 1e-6
    with torch.no_grad():
        fooled = trained_fp(x_adv).argmax(1) != y0
    assert torch.equal(fooled, within)
    dist = threat.distance(x_adv.double(), x0.double())
    assert torch.allclose(dist[within], md[within], rtol=0, atol=1e-9)
    assert torch.equal(x_adv[~within], x0[~within])


def test_rays_distance_beyond_eps_is_real(trained_fp, data):
    """RayS is deterministic: rerun with eps set to a reported distance, it stops at an adversarial point there."""
    x, y, correct = data
    i = int(correct.nonzero()[0])
    x1, y1 = x[i : i + 1], y[i : i + 1]
    first = get_attack("rays", max_queries=100)
    first_out = first.output(trained_fp, x1, y1, Linf(1e-4), torch.Generator().manual_seed(0))
    d = float(first_out.min_distance[0])
    assert 1e-4 < d < math.inf
    again = get_attack("rays", max_queries=100)
    x_adv = again(trained_fp, x1, y1, Linf(d), torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert int(trained_fp(x_adv).argmax(1)) != int(y1)
    assert float(Linf(d).distance(x_adv.double(), x1.double())) == pytest.approx(d, abs=1e-6)


def test_rays_uses_labels_only(trained_fp, data):
    assert RayS.access == "labels" and not RayS.needs_gradients
    x, y, correct = data
    x0, y0 = x[correct][:3], y[correct][:3]
    oracle = QueryModel(trained_fp, x0, y0, Linf(8 / 255), access="labels", max_queries=10)
    with pytest.raises(QueryAccessError):
        oracle.scores(x0, torch.arange(3))
    results = []
    for model in (trained_fp, OneHot(trained_fp).eval()):
        attack = get_attack("rays", max_queries=60)
        out = attack.output(model, x0, y0, Linf(8 / 255), torch.Generator().manual_seed(0))
        results.append((out.x_adv, out.min_distance, out.queries))
    for a, b in zip(results[0], results[1], strict=True):
        assert torch.equal(a, b)


def test_rays_config_is_validated():
    cfg = RayS().config
    assert (cfg.max_queries, cfg.tol) == (1000, 1e-3)
    for bad in ({"max_queries": 0}, {"tol": 0.0}, {"tol": -1.0}):
        with pytest.raises(ValueError):
            get_attack("rays", **bad)
