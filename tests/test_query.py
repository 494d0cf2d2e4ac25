"""The query oracle: budgets that cannot be exceeded, access levels that hide what they must, no gradients, and
exact "queries at success"; and, as a property, every score-based attack staying within its budget."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from arbibench.attacks import L2, Linf, get_attack
from arbibench.attacks.query import BlackBoxAttack, QueryAccessError, QueryBudgetExceeded, QueryModel
from arbibench.attacks.threat import ThreatModel


class PixelModel(nn.Module):
    """Class 1 if the first pixel exceeds 0.5, else class 0: whether an input fools it is easy to control."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(x.shape[0])
        v = x[:, 0, 0, 0]
        return torch.stack([0.5 - v, v - 0.5], dim=1)


class CountingModel(nn.Module):
    """A fixed random linear classifier on 3x8x8 images that counts the rows of every forward pass (a one-image
    query runs as two copies of the image, see arbibench.attacks.query: the copy is not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = x.shape[0] == 2 and x.stride(0) == 0  # the oracle's expanded one-image forward
        self.rows += 1 if padded else x.shape[0]
        return self.net(x)


def _pixel_batch(values: list[float]) -> torch.Tensor:
    x = torch.full((len(values), 1, 2, 2), 0.4)
    x[:, 0, 0, 0] = torch.tensor(values)
    return x


def test_scores_labels_and_accounting() -> None:
    model = PixelModel()
    x0 = _pixel_batch([0.4, 0.4, 0.4])
    y = torch.zeros(3, dtype=torch.int64)
    oracle = QueryModel(model, x0, y, Linf(0.2), max_queries=5)
    scores = oracle.scores(_pixel_batch([0.45, 0.55, 0.3]), torch.tensor([0, 0, 2]))
    assert scores.shape == (3, 2)
    assert oracle.queries.tolist() == [2, 0, 1]
    assert oracle.success_queries.tolist() == [2, -1, -1]  # the second query of sample 0 fooled it within eps
    assert oracle.labels(_pixel_batch([0.9]), torch.tensor([1])).tolist() == [1]
    assert oracle.success_queries.tolist() == [2, -1, -1]  # fooled, but 0.5 away: outside the ball, not a success
    assert oracle.is_adversarial(_pixel_batch([0.55]), torch.tensor([1])).tolist() == [True]
    assert oracle.success_queries.tolist() == [2, 2, -1]
    assert oracle.remaining().tolist() == [3, 3, 4]
    assert oracle.remaining(torch.tensor([2, 0])).tolist() == [4, 3]


def test_first_success_is_the_earliest_query_of_a_call() -> None:
    oracle = QueryModel(
        PixelModel(), _pixel_batch([0.4, 0.4]), torch.zeros(2, dtype=torch.int64), L2(0.5), max_queries=9
    )
    # Inputs of sample 1 at positions 1, 2, 3 of the call (its 1st, 2nd, 3rd queries); the 2nd and 3rd fool it.
    oracle.scores(_pixel_batch([0.45, 0.3, 0.6, 0.1, 0.7]), torch.tensor([0, 1, 1, 0, 1]))
    assert oracle.success_queries.tolist() == [-1, 2]
    assert oracle.queries.tolist() == [2, 3]


def test_a_query_outside_the_box_is_no_success() -> None:
    y = torch.zeros(1, dtype=torch.int64)
    oracle = QueryModel(PixelModel(), _pixel_batch([0.95]), y, Linf(0.2), max_queries=3)
    oracle.scores(_pixel_batch([1.05]), torch.tensor([0]))  # fooled and 0.1 from the original, but not an image
    assert oracle.success_queries.tolist() == [-1]
    oracle.scores(_pixel_batch([1.0]), torch.tensor([0]))
    assert oracle.success_queries.tolist() == [2]


def test_labels_only_access_hides_scores() -> None:
    model = PixelModel()
    oracle = QueryModel(
        model, _pixel_batch([0.4]), torch.zeros(1, dtype=torch.int64), Linf(0.2), access="labels", max_queries=3
    )
    with pytest.raises(QueryAccessError, match="labels only"):
        oracle.scores(_pixel_batch([0.4]), torch.tensor([0]))
    assert model.calls == [] and oracle.queries.tolist() == [0]  # refused before the model ran, nothing charged
    labels = oracle.labels(_pixel_batch([0.7]), torch.tensor([0]))
    assert labels.dtype == torch.int64 and labels.shape == (1,)


def test_the_oracle_gives_no_gradients() -> None:
    net = CountingModel()
    x0 = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    oracle = QueryModel(net, x0, torch.zeros(2, dtype=torch.int64), Linf(0.1), max_queries=4)
    with pytest.raises(QueryAccessError, match="no gradients"):
        oracle.scores(x0.clone().requires_grad_(True), torch.arange(2))
    with torch.enable_grad():
        scores = oracle.scores(x0, torch.arange(2))
    assert not scores.requires_grad and scores.grad_fn is None
    assert all(p.grad is None for p in net.parameters())


def test_bad_arguments() -> None:
    x0, y = _pixel_batch([0.4]), torch.zeros(1, dtype=torch.int64)
    with pytest.raises(ValueError, match="access"):
        QueryModel(PixelModel(), x0, y, Linf(0.2), access="gradients", max_queries=3)
    with pytest.raises(ValueError, match="max_queries"):
        QueryModel(PixelModel(), x0, y, Linf(0.2), max_queries=0)
    with pytest.raises(ValueError, match="one original per input"):
        QueryModel(PixelModel(), x0, y, Linf(0.2), max_queries=3).scores(_pixel_batch([0.4, 0.4]), torch.tensor([0]))


@settings(max_examples=40, deadline=None)
@given(
    budget=st.integers(1, 6),
    calls=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=6), min_size=1, max_size=8),
)
def test_budget_is_never_exceeded(budget: int, calls: list[list[int]]) -> None:
    """Property: a call is answered iff no sample would pass its budget; a refused call charges nothing."""
    model = PixelModel()
    oracle = QueryModel(
        model, _pixel_batch([0.4] * 3), torch.zeros(3, dtype=torch.int64), Linf(0.2), max_queries=budget
    )
    expected = [0, 0, 0]
    for idx in calls:
        after = [expected[i] + idx.count(i) for i in range(3)]
        n_calls = len(model.calls)
        if max(after) > budget:
            with pytest.raises(QueryBudgetExceeded):
                oracle.scores(_pixel_batch([0.4] * len(idx)), torch.tensor(idx))
            assert len(model.calls) == n_calls  # the model never ran
        else:
            oracle.scores(_pixel_batch([0.4] * len(idx)), torch.tensor(idx))
            expected = after
        assert oracle.queries.tolist() == expected
        assert bool((oracle.queries <= budget).all())


@dataclass(frozen=True)
class _GreedyConfig:
    max_queries: int = 3


class _Greedy(BlackBoxAttack):
    """Asks for one query more than its budget: the oracle must stop it."""

    name = "greedy_test_attack"
    Config = _GreedyConfig

    def attack(
        self, oracle: QueryModel, x: torch.Tensor, y: torch.Tensor, threat: ThreatModel, generator: torch.Generator
    ) -> torch.Tensor:
        for _ in range(self.config.max_queries + 1):
            oracle.scores(x, torch.arange(x.shape[0]))
        return x


def test_an_attack_cannot_overspend() -> None:
    x = _pixel_batch([0.4, 0.4])
    with pytest.raises(QueryBudgetExceeded, match="budget of 3"):
        _Greedy()(PixelModel().eval(), x, torch.zeros(2, dtype=torch.int64), Linf(0.2), torch.Generator())


@pytest.mark.parametrize("name", ["square", "simba", "nes"])
@settings(max_examples=12, deadline=None)
@given(budget=st.integers(1, 40), seed=st.integers(0, 2**31), l2=st.booleans())
def test_score_attacks_stay_within_budget(name: str, budget: int, seed: int, l2: bool) -> None:
    """Property: whatever the budget, no sample is queried more than ``max_queries`` times, and the reported
    per-sample counts agree."""
    net = CountingModel()
    torch.manual_seed(0)
    net.net[1].reset_parameters()
    net.eval()
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(seed % 1000))
    with torch.no_grad():
        y = net(x).argmax(1)
    net.rows = 0
    threat = L2(0.5) if l2 else Linf(8 / 255)
    params: dict[str, object] = {"max_queries": budget}
    if name == "nes":
        params["samples"] = 4
    attack = get_attack(name, **params)
    out = attack.output(net, x, y, threat, torch.Generator().manual_seed(seed))
    threat.verify(out.x_adv, x)
    assert out.queries is not None and out.min_distance is not None
    assert bool((out.queries <= budget).all()) and bool((out.queries >= 1).all())
    assert net.rows <= 4 * budget
    fooled = torch.isfinite(out.min_distance)
    assert bool((out.min_distance[fooled] <= threat.eps + 1e-6).all())


def test_queries_reach_the_model_in_chunks_of_the_device_size(data_dir) -> None:  # type: ignore[no-untyped-def]
    from arbibench.attacks import query
    from arbibench.data import load_cifar10
    from arbibench.models.zoo import load_model

    assert query.query_chunk(torch.device("cpu")) == query.QUERY_CHUNK
    assert query.query_chunk(torch.device("cuda")) == query.QUERY_CHUNK_ACCELERATOR > query.QUERY_CHUNK
    model = load_model("resnet20_fp").eval()
    sizes: list[int] = []
    model.register_forward_pre_hook(lambda _m, args: sizes.append(args[0].shape[0]))
    x, _, _ = load_cifar10(2 * query.QUERY_CHUNK + 1, data_dir=data_dir)
    logits = query.forward_queries(model, x)
    assert sizes == [query.QUERY_CHUNK, query.QUERY_CHUNK, 2]  # the last, lone image runs as two copies
    c = query.QUERY_CHUNK
    with torch.no_grad():
        # the same chunks give the same bits; the whole batch at once differs by round-off at most (a CPU's
        # convolution kernels may block a batch of 129 otherwise than one of 64)
        same_chunks = [model(x[:c]), model(x[c : 2 * c]), model(x[2 * c :].repeat(2, 1, 1, 1))[:1]]
        assert torch.equal(logits, torch.cat(same_chunks))
        assert torch.allclose(logits, model(x), atol=1e-4)
