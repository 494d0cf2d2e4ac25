"""Square Attack on the shipped resnet20_fp and real CIFAR-10 test images, and against torchattacks' Square.

Measured when written (seed 0, first 100 test images, 91 classified correctly): ACC* at Linf 8/255 is 14% with 300
queries (torchattacks 3.5.1's Square, same queries and eps: 15%) and 1% with 1000 queries. The tests use one 300-query
run (CPU time: the whole file must stay short); the thresholds add margins to the measured numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from arbibench.attacks import ATTACKS, L2, Linf, Square, get_attack, query
from arbibench.attacks.autoattack import VERSIONS
from arbibench.attacks.square import P_SCHEDULE, meta_pattern, p_at
from arbibench.data.cifar10 import load_cifar10

N_IMAGES = 100
EPS = 8 / 255
QUERIES = 300


class BatchRecorder(nn.Module):
    """Records the inputs' batch sizes (and the first input batch) of every forward pass."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.sizes: list[int] = []
        self.first: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first is None:
            self.first = x.clone()
        self.sizes.append(x.shape[0])
        return self.inner(x)


@pytest.fixture(scope="module")
def data(data_dir: Path, trained_fp: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first 100 test images (contiguous, for torchattacks), labels, and which ones resnet20_fp gets right."""
    x, y, _ = load_cifar10(N_IMAGES, data_dir=data_dir)
    x = x.contiguous()
    with torch.no_grad():
        correct = trained_fp(x).argmax(1) == y
    return x, y, correct


def acc_star(model: nn.Module, x_adv: torch.Tensor, y: torch.Tensor, correct: torch.Tensor) -> float:
    """ACC* in percent of all images: correct clean and on the adversarial image (``x_adv`` of the correct ones)."""
    with torch.no_grad():
        robust = model(x_adv).argmax(1) == y[correct]
    return 100.0 * int(robust.sum()) / len(y)


@pytest.fixture(scope="module")
def linf_run(data, trained_fp: nn.Module):  # type: ignore[no-untyped-def]
    x, y, correct = data
    net = BatchRecorder(trained_fp).eval()
    attack = get_attack("square", max_queries=QUERIES)
    chunk = query.QUERY_CHUNK
    query.QUERY_CHUNK = N_IMAGES  # the recorder sees the attack's own query batches, not the oracle's chunks
    try:
        out = attack.output(net, x[correct], y[correct], Linf(EPS), torch.Generator().manual_seed(0))
    finally:
        query.QUERY_CHUNK = chunk
    return out, out.x_adv, net.sizes


def test_square_linf_breaks_trained_fp(data, trained_fp: nn.Module, linf_run) -> None:  # type: ignore[no-untyped-def]
    x, y, correct = data
    _, x_adv, _ = linf_run
    clean = 100.0 * float(correct.double().mean())
    robust = acc_star(trained_fp, x_adv, y, correct)
    assert clean >= 85.0
    assert robust <= 22.0, robust  # measured 14%


def test_square_queries_counts_and_early_exit(data, trained_fp: nn.Module, linf_run) -> None:  # type: ignore[no-untyped-def]
    x, y, correct = data
    out, x_adv, sizes = linf_run
    counts, dist = out.queries, out.min_distance
    with torch.no_grad():
        fooled = (trained_fp(x_adv).argmax(1) != y[correct]).cpu()
    assert bool((counts <= QUERIES).all()) and bool((counts >= 1).all())
    assert torch.equal(torch.isfinite(dist), fooled)
    assert bool((dist[fooled] <= EPS + 1e-6).all())
    assert torch.equal(x_adv[~fooled], x[correct][~fooled])  # not fooled: the original comes back
    assert float(counts[fooled].double().median()) < 100  # query-efficient on an undefended model
    # Early exit: each iteration queries only the still-robust samples, so batches never grow and end small.
    assert sizes[0] == int(correct.sum())
    assert all(b <= a for a, b in zip(sizes, sizes[1:], strict=False))
    assert sizes[-1] <= int((~fooled).sum()) + 3
    assert sum(sizes) == int(counts[~fooled].sum()) + int(counts[fooled].sum())


def test_square_matches_torchattacks(data, trained_fp: nn.Module, linf_run) -> None:  # type: ignore[no-untyped-def]
    from test_torchattacks_crosscheck import load_torchattacks

    (square,) = load_torchattacks("attacks.square")
    x, y, correct = data
    theirs = square.Square(trained_fp, norm="Linf", eps=EPS, n_queries=QUERIES, p_init=0.8, seed=0)(x, y)
    with torch.no_grad():
        acc_theirs = 100.0 * float(((trained_fp(theirs).argmax(1) == y) & correct).double().mean())
    acc_ours = acc_star(trained_fp, linf_run[1], y, correct)
    assert abs(acc_ours - acc_theirs) <= 2.0, (acc_ours, acc_theirs)  # measured 14% vs 15%


def test_p_schedule_matches_the_reference() -> None:
    from test_torchattacks_crosscheck import load_torchattacks

    (square,) = load_torchattacks("attacks.square")
    for n_queries in (100, 1000, 5000):
        ref = square.Square(nn.Identity(), n_queries=n_queries, p_init=0.8)
        assert [p_at(i, 0.8, n_queries) for i in range(n_queries)] == [ref.p_selection(i) for i in range(n_queries)]
    assert P_SCHEDULE[0] == 10 and p_at(10, 0.8, 10000) == 0.8 and p_at(11, 0.8, 10000) == 0.4
    assert p_at(9999, 0.8, 10000) == pytest.approx(0.8 / 512)


def test_meta_pattern_matches_the_reference() -> None:
    from test_torchattacks_crosscheck import load_torchattacks

    (square,) = load_torchattacks("attacks.square")
    ref = square.Square(nn.Identity(), norm="L2")
    ref.device = torch.device("cpu")
    for s in (3, 5, 6, 9):
        ours = meta_pattern(s)
        assert float(torch.linalg.vector_norm(ours)) == pytest.approx(1.0, abs=1e-6)
        theirs = ref.eta(s)
        assert torch.allclose(ours, theirs, atol=1e-6) or torch.allclose(ours, theirs.t(), atol=1e-6)


def test_linf_start_is_vertical_stripes_and_drawn_from_the_generator(data, trained_fp: nn.Module) -> None:  # type: ignore[no-untyped-def]
    x, y, correct = data
    xs, ys = x[correct][:8], y[correct][:8]
    net = BatchRecorder(trained_fp).eval()
    attack = Square(max_queries=60)
    a = attack(net, xs, ys, Linf(EPS), torch.Generator().manual_seed(5))
    delta = net.first - xs
    clipped = (net.first <= 0.0) | (net.first >= 1.0)
    assert bool(((delta.abs() - EPS).abs() < 1e-6)[~clipped].all())
    column_sign = torch.sign(delta).sum(dim=2).abs()  # +-eps per column: all rows of a column share the sign
    assert bool((column_sign[~clipped.any(dim=2)] == xs.shape[2]).all())
    c = attack(trained_fp, xs, ys, Linf(EPS), torch.Generator().manual_seed(6))
    assert not torch.equal(a, c)


def test_square_l2_lowers_accuracy(data, trained_fp: nn.Module) -> None:  # type: ignore[no-untyped-def]
    x, y, correct = data
    xs, ys = x[correct][:30], y[correct][:30]
    threat = L2(1.0)
    attack = get_attack("square", max_queries=200)
    out = attack.output(trained_fp, xs, ys, threat, torch.Generator().manual_seed(0))
    x_adv = out.x_adv
    threat.verify(x_adv, xs)
    with torch.no_grad():
        still = int((trained_fp(x_adv).argmax(1) == ys).sum())
    assert still <= 17, still  # measured 12 of 30 (seeds 1, 2: 9, 13)
    assert bool((out.queries <= 200).all())


def test_config_validation_and_autoattack_membership() -> None:
    assert Square().config.max_queries == 5000 and Square().config.p_init == 0.8
    for bad in ({"p_init": 0.0}, {"p_init": 1.5}, {"max_queries": 0}, {"rescale_schedule": 1}):
        with pytest.raises(ValueError):
            get_attack("square", **bad)
    assert ATTACKS["square"] is Square and "square" in VERSIONS["standard"]
    assert get_attack("autoattack").components_run[-1] == "square"
