"""Attack losses: hand-computed DLR values, the logit temperature, invariances, and the errors that name the problem."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from arbibench.attacks.losses import (
    LOSSES,
    cross_entropy,
    dlr,
    get_loss,
    margin,
    targeted_dlr,
    with_temperature,
)

LOGITS = torch.tensor([[3.0, 1.0, 2.0, 0.0], [3.0, 1.0, 2.0, 0.0], [0.5, 4.0, -1.0, 1.5]])


def test_registry_names() -> None:
    assert set(LOSSES) == {"ce", "margin", "dlr"}
    assert get_loss("dlr") is dlr and get_loss("ce") is cross_entropy  # T = 1: the loss itself, no wrapper


def test_dlr_hand_computed() -> None:
    y = torch.tensor([0, 3, 1])
    # sorted logits: (3, 2, 1, 0), (3, 2, 1, 0), (4, 1.5, 0.5, -1); denominators z_pi1 - z_pi3 = 2, 2, 3.5
    # y=0: -(3 - 2) / 2; y=3: -(0 - 3) / 2; y=1: -(4 - 1.5) / 3.5
    expected = torch.tensor([-0.5, 1.5, -2.5 / 3.5])
    torch.testing.assert_close(dlr(LOGITS, y), expected)
    assert dlr(LOGITS, y).shape == (3,)


def test_targeted_dlr_hand_computed() -> None:
    y = torch.tensor([0, 1, 1])
    t = torch.tensor([3, 0, 3])
    # denominators z_pi1 - (z_pi3 + z_pi4) / 2: 3 - (1 + 0) / 2 = 2.5, same, 4 - (0.5 - 1) / 2 = 4.25
    # y=0,t=3: -(3 - 0) / 2.5; y=1,t=0: -(1 - 3) / 2.5; y=1,t=3: -(4 - 1.5) / 4.25
    expected = torch.tensor([-1.2, 0.8, -2.5 / 4.25])
    torch.testing.assert_close(targeted_dlr(LOGITS, y, t), expected)


def test_dlr_positive_exactly_when_misclassified() -> None:
    logits = torch.randn(64, 10, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(1))
    fooled = logits.argmax(dim=1) != y
    assert torch.equal(dlr(logits, y) > 0, fooled)
    assert torch.equal(margin(logits, y) > 0, fooled)


def test_dlr_ties_stay_finite() -> None:
    logits = torch.zeros(2, 5)  # every logit equal: the 1e-12 keeps the denominator off zero
    y = torch.tensor([0, 4])
    assert torch.equal(dlr(logits, y), torch.zeros(2))
    assert torch.equal(targeted_dlr(logits, y, torch.tensor([1, 2])), torch.zeros(2))


@pytest.mark.parametrize(
    "fn,shape,match",
    [
        (lambda z: dlr(z, torch.zeros(2, dtype=torch.int64)), (2, 2), "K >= 3"),
        (
            lambda z: targeted_dlr(z, torch.zeros(2, dtype=torch.int64), torch.ones(2, dtype=torch.int64)),
            (2, 3),
            "K >= 4",
        ),
    ],
)
def test_dlr_needs_enough_classes(
    fn: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, int], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        fn(torch.zeros(shape))


# -- temperature -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [0.5, 2.0, 10.0])
def test_temperature_divides_the_logits(temperature: float) -> None:
    y = torch.tensor([0, 3, 1])
    ce = get_loss("ce", temperature)(LOGITS, y)
    torch.testing.assert_close(ce, F.cross_entropy(LOGITS / temperature, y, reduction="none"))
    # the margin is linear in the logits; DLR does not see a positive factor at all
    torch.testing.assert_close(get_loss("margin", temperature)(LOGITS, y), margin(LOGITS, y) / temperature)
    torch.testing.assert_close(get_loss("dlr", temperature)(LOGITS, y), dlr(LOGITS, y))
    t = torch.tensor([3, 0, 3])
    torch.testing.assert_close(with_temperature(targeted_dlr, temperature)(LOGITS, y, t), targeted_dlr(LOGITS, y, t))


def test_high_temperature_unsaturates_cross_entropy() -> None:
    logits = torch.tensor([[60.0, 0.0, -5.0]], requires_grad=True)  # a confident BNN: CE gradient underflows
    y = torch.tensor([0])
    (g1,) = torch.autograd.grad(get_loss("ce")(logits, y).sum(), logits)
    (g10,) = torch.autograd.grad(get_loss("ce", 10.0)(logits, y).sum(), logits)
    assert float(g1.abs().max()) < 1e-20 < 1e-5 < float(g10.abs().max())


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, True, "2"])
def test_bad_temperature_named(bad: object) -> None:
    with pytest.raises(ValueError, match="loss_temperature must be a finite number > 0"):
        get_loss("ce", bad)  # type: ignore[arg-type]


def test_unknown_loss_lists_known() -> None:
    with pytest.raises(ValueError, match="unknown loss 'cw'; known: ce, margin, dlr"):
        get_loss("cw")


# -- invariances ---------------------------------------------------------------------------------------------------
finite = st.floats(min_value=-50, max_value=50, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(finite, min_size=10, max_size=10),
    label=st.integers(0, 9),
    target=st.integers(0, 9),
    scale=st.floats(min_value=1e-2, max_value=1e2),
    shift=finite,
)
def test_dlr_invariant_to_shift_and_positive_scale(
    values: list[float], label: int, target: int, scale: float, shift: float
) -> None:
    z = torch.tensor([values], dtype=torch.float64)
    top = z.sort(dim=1, descending=True).values[0]
    assume(float(top[0] - top[2]) > 1e-3)  # away from ties, where the 1e-12 in the denominator matters
    y, t = torch.tensor([label]), torch.tensor([target])
    moved = scale * z + shift
    torch.testing.assert_close(dlr(moved, y), dlr(z, y), rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(targeted_dlr(moved, y, t), targeted_dlr(z, y, t), rtol=1e-6, atol=1e-8)
