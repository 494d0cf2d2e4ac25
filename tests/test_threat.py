"""Threat geometry: projections stay in the ball and the box, random starts too, and verify rejects every violation."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from arbibench.attacks import L2, Linf, ThreatModel, ThreatModelViolation, get_threat_model, parse_eps

fast = settings(max_examples=60, deadline=None)  # per test, so other modules' hypothesis settings stay untouched

TOL = 1e-6

shapes = st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 5), st.integers(1, 5))  # small NCHW batches


@st.composite
def pair(draw: st.DrawFn, spread: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Originals in [0, 1] and arbitrary candidate points around them (also far outside the box)."""
    shape = draw(shapes)
    x = draw(hnp.arrays(np.float32, shape, elements=st.floats(0.0, 1.0, width=32)))
    z = draw(hnp.arrays(np.float32, shape, elements=st.floats(-spread, 1.0 + spread, width=32)))
    return torch.from_numpy(x), torch.from_numpy(z)


@st.composite
def threat_models(draw: st.DrawFn) -> ThreatModel:
    if draw(st.booleans()):
        return Linf(draw(st.floats(1e-4, 1.0)))
    return L2(draw(st.floats(1e-4, 5.0)))


# -- project -------------------------------------------------------------------------------------------------------
@fast
@given(pair(), threat_models())
def test_project_lands_in_ball_and_box(xz: tuple[torch.Tensor, torch.Tensor], threat: ThreatModel) -> None:
    x, z = xz
    p = threat.project(z, x)
    assert p.shape == x.shape and p.dtype == x.dtype
    assert bool(torch.isfinite(p).all())
    assert float(p.min()) >= 0.0 and float(p.max()) <= 1.0
    assert bool((threat.distance(p.double(), x.double()) <= threat.eps + TOL).all())
    threat.verify(p, x)  # what project produces is always accepted


@fast
@given(pair(), threat_models())
def test_project_is_idempotent(xz: tuple[torch.Tensor, torch.Tensor], threat: ThreatModel) -> None:
    x, z = xz
    once = threat.project(z, x)
    twice = threat.project(once, x)
    torch.testing.assert_close(twice, once, atol=1e-6, rtol=0)


@fast
@given(pair(), threat_models())
def test_project_keeps_points_already_inside(xz: tuple[torch.Tensor, torch.Tensor], threat: ThreatModel) -> None:
    x, _ = xz
    torch.testing.assert_close(threat.project(x, x), x, atol=0, rtol=0)


def test_l2_project_scales_onto_the_sphere() -> None:
    x = torch.full((1, 1, 2, 2), 0.5)
    z = x.clone()
    z[0, 0, 0, 0] += 0.4  # distance 0.4 > eps 0.1, no clipping involved
    p = L2(0.1).project(z, x)
    assert L2(0.1).distance(p, x).item() == pytest.approx(0.1, rel=1e-4)
    assert torch.equal(p.flatten()[1:], x.flatten()[1:])  # only the moved pixel moves back


# -- random_start --------------------------------------------------------------------------------------------------
@fast
@given(pair(), threat_models(), st.integers(0, 2**31 - 1))
def test_random_start_within_ball(xz: tuple[torch.Tensor, torch.Tensor], threat: ThreatModel, seed: int) -> None:
    x, _ = xz
    x0 = threat.random_start(x, torch.Generator().manual_seed(seed))
    assert x0.shape == x.shape and x0.dtype == x.dtype and x0.device == x.device
    threat.verify(x0, x)
    again = threat.random_start(x, torch.Generator().manual_seed(seed))
    assert torch.equal(x0, again)  # deterministic given the generator


@pytest.mark.parametrize("threat", [Linf(8 / 255), L2(0.5)], ids=["Linf", "L2"])
def test_random_start_moves_and_spreads(threat: ThreatModel) -> None:
    x = torch.full((64, 3, 8, 8), 0.5)
    x0 = threat.random_start(x, torch.Generator().manual_seed(0))
    d = threat.distance(x0, x)
    assert bool((d > 0).all())
    if isinstance(threat, Linf):
        # uniform in [-eps, eps]: mean ~0, max close to eps
        delta = x0 - x
        assert abs(float(delta.mean())) < 0.05 * threat.eps
        assert float(delta.abs().max()) > 0.95 * threat.eps
    else:
        # uniform in a 192-dim ball: the radius concentrates just below eps
        assert float(d.min()) > 0.9 * threat.eps


def test_random_start_rejects_a_non_generator() -> None:
    with pytest.raises(TypeError, match="torch.Generator"):
        Linf(0.1).random_start(torch.zeros(1, 1, 2, 2), 0)  # type: ignore[arg-type]


# -- step_direction ------------------------------------------------------------------------------------------------
grads = st.tuples(st.integers(1, 4), st.integers(1, 20)).flatmap(
    lambda s: hnp.arrays(np.float32, s, elements=st.floats(width=32, allow_nan=False, allow_infinity=False))
)


@fast
@given(grads)
def test_l2_step_direction_has_unit_norm(g: np.ndarray) -> None:
    grad = torch.from_numpy(g)
    d = L2(1.0).step_direction(grad)
    assert bool(torch.isfinite(d).all())
    norms = torch.linalg.vector_norm(d, dim=1)
    nonzero = (grad != 0).any(dim=1)
    torch.testing.assert_close(norms[nonzero], torch.ones_like(norms[nonzero]), atol=1e-5, rtol=0)
    assert bool((d[~nonzero] == 0).all())
    assert bool((torch.sign(d) * torch.sign(grad) >= 0).all())  # same orientation, entry by entry


def test_l2_step_direction_safe_for_zero_and_tiny_gradients() -> None:
    grad = torch.zeros(3, 1, 2, 2)
    grad[1, 0, 0, 0] = 1e-40  # subnormal: squaring it underflows to 0
    grad[2] = 3.0
    d = L2(1.0).step_direction(grad)
    assert bool(torch.isfinite(d).all())
    assert torch.equal(d[0], torch.zeros_like(d[0]))
    assert d[1].flatten()[0].item() == pytest.approx(1.0)
    assert torch.linalg.vector_norm(d[2]).item() == pytest.approx(1.0)


@fast
@given(grads)
def test_linf_step_direction_is_sign(g: np.ndarray) -> None:
    d = Linf(0.1).step_direction(torch.from_numpy(g))
    assert set(d.unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert torch.equal(d, torch.sign(torch.from_numpy(g)))


# -- distance ------------------------------------------------------------------------------------------------------
def test_distance_per_sample() -> None:
    x = torch.zeros(2, 1, 2, 2)
    z = x.clone()
    z[0, 0, 0, 0], z[0, 0, 1, 1] = 0.3, -0.4
    assert Linf(0.5).distance(z, x).tolist() == pytest.approx([0.4, 0.0])
    assert L2(0.5).distance(z, x).tolist() == pytest.approx([0.5, 0.0])


# -- verify --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threat", [Linf(8 / 255), L2(0.5)], ids=["Linf", "L2"])
def test_verify_rejects_a_sample_moved_past_eps(threat: ThreatModel) -> None:
    x = torch.full((3, 3, 4, 4), 0.5)
    z = x.clone()
    z[1, 0, 0, 0] += threat.eps + 1e-3
    with pytest.raises(ThreatModelViolation, match=r"1 of 3 samples") as info:
        threat.verify(z, x)
    assert f"{threat.eps + 1e-3:.6g}" in str(info.value)  # names the worst distance
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("threat", [Linf(8 / 255), L2(0.5)], ids=["Linf", "L2"])
def test_verify_tolerance_is_tight(threat: ThreatModel) -> None:
    x = torch.full((1, 1, 1, 4), 0.5, dtype=torch.float64)
    z = x.clone()
    z[0, 0, 0, 0] += threat.eps + 0.5e-6
    threat.verify(z, x)  # within tol
    z[0, 0, 0, 0] += 1e-6
    with pytest.raises(ThreatModelViolation):
        threat.verify(z, x)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_verify_rejects_non_finite(bad: float) -> None:
    x = torch.full((2, 1, 2, 2), 0.5)
    z = x.clone()
    z[0, 0, 1, 1] = bad
    with pytest.raises(ThreatModelViolation, match="1 non-finite"):
        Linf(0.1).verify(z, x)


@pytest.mark.parametrize("value", [1.001, -0.001])
def test_verify_rejects_pixels_outside_the_box(value: float) -> None:
    x = torch.full((2, 1, 2, 2), 1.0 if value > 1 else 0.0)
    z = x.clone()
    z[1, 0, 0, 0] = value  # within eps of the original, but not an image
    with pytest.raises(ThreatModelViolation, match=r"1 outside \[0, 1\]"):
        L2(0.5).verify(z, x)


def test_verify_rejects_shape_mismatch_and_accepts_empty() -> None:
    with pytest.raises(ThreatModelViolation, match="shape"):
        Linf(0.1).verify(torch.zeros(2, 1, 2, 2), torch.zeros(3, 1, 2, 2))
    Linf(0.1).verify(torch.zeros(0, 1, 2, 2), torch.zeros(0, 1, 2, 2))


# -- construction, names, parsing ----------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", [0.0, -0.1, math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("cls", [Linf, L2])
def test_bad_eps_rejected(cls: type[ThreatModel], eps: float) -> None:
    with pytest.raises(ValueError, match="finite and > 0"):
        cls(eps)


def test_linf_eps_above_pixel_range_rejected_but_l2_allows_it() -> None:
    with pytest.raises(ValueError, match="exceeds 1"):
        Linf(8.0)
    assert L2(3.0).eps == 3.0  # ImageNet-scale L2 budgets exceed 1
    assert Linf(1.0).eps == 1.0


@pytest.mark.parametrize("eps", ["8/255", None, True])
def test_non_numeric_eps_rejected(eps: object) -> None:
    with pytest.raises(ValueError, match="must be a number"):
        Linf(eps)  # type: ignore[arg-type]


def test_threat_models_are_frozen_values() -> None:
    t = Linf(8 / 255)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.eps = 0.1  # type: ignore[misc]
    assert t == Linf(8 / 255) and hash(t) == hash(Linf(8 / 255))
    assert Linf(1).eps == 1.0 and isinstance(Linf(1).eps, float)
    assert (Linf.norm, L2.norm) == ("Linf", "L2")
    with pytest.raises(TypeError):
        ThreatModel(0.1)  # type: ignore[abstract]


@pytest.mark.parametrize("name,cls", [("Linf", Linf), ("linf", Linf), ("LINF", Linf), ("L2", L2), ("l2", L2)])
def test_get_threat_model(name: str, cls: type[ThreatModel]) -> None:
    t = get_threat_model(name, 0.25)
    assert type(t) is cls and t.eps == 0.25


def test_get_threat_model_unknown_lists_known() -> None:
    with pytest.raises(ValueError, match=r"unknown threat model 'L1'.*Linf, L2"):
        get_threat_model("L1", 0.1)


@pytest.mark.parametrize(
    "text,value", [("8/255", 8 / 255), ("0.031", 0.031), ("0.5", 0.5), (" 4 / 255 ", 4 / 255), ("1e-2", 0.01)]
)
def test_parse_eps(text: str, value: float) -> None:
    assert parse_eps(text) == pytest.approx(value, rel=0, abs=0)


@pytest.mark.parametrize(
    "text,match",
    [
        ("abc", "cannot read eps"),
        ("", "cannot read eps"),
        ("8/", "cannot read eps"),
        ("8/255/2", "cannot read eps"),
        ("8/0", "divides by zero"),
        ("0", "> 0"),
        ("0/255", "> 0"),
        ("-0.1", "> 0"),
        ("-8/255", "> 0"),
        ("nan", "finite"),
        ("inf", "finite"),
    ],
)
def test_parse_eps_rejects(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_eps(text)
