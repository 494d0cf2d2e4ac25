"""Gradient-masking checks: masked models are flagged, a smooth model is not, result comparisons by hand."""

import pytest
import torch
from torch import nn

from arbibench.attacks import L2, Linf
from arbibench.data import load_cifar10
from arbibench.evaluation import inputs
from arbibench.evaluation.checks import (
    ALL_FLAG_MEANINGS,
    FLAG_MEANINGS,
    gradient_free_beats_gradient,
    large_eps_sanity,
    large_threat,
    run_checks,
    single_step_beats_iterative,
    zero_gradient_fraction,
)
from arbibench.models.resnet import resnet20


@pytest.fixture(scope="module")
def images(data_dir):
    x, _, _ = load_cifar10(8, data_dir=data_dir)
    return x


@pytest.fixture(scope="module")
def fp(images):
    torch.manual_seed(0)
    model = resnet20("fp").eval()
    with torch.no_grad():
        return model, model(images).argmax(1)  # its own predictions: every sample correct, a gradient attack breaks


class ThresholdModel(nn.Module):
    """Logits of a linear layer on torch.sign(x - 0.5): piecewise constant, input gradient exactly zero."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(3 * 32 * 32, 10)

    def forward(self, x):
        return self.fc(torch.sign(x - 0.5).flatten(1))


class ConstantModel(nn.Module):
    """The same logits for every image; ``in_graph`` keeps the input in the autograd graph (a zero gradient)."""

    def __init__(self, in_graph=True):
        super().__init__()
        self.logits = nn.Parameter(torch.arange(10.0))
        self.in_graph = in_graph

    def forward(self, x):
        out = self.logits.expand(len(x), -1)
        return out + 0.0 * x.flatten(1).sum(1, keepdim=True) if self.in_graph else out


def test_flag_meanings_extend_the_input_flags():
    assert not set(FLAG_MEANINGS) & set(inputs.FLAG_MEANINGS)
    assert set(ALL_FLAG_MEANINGS) == set(FLAG_MEANINGS) | set(inputs.FLAG_MEANINGS)


def test_zero_gradient_flags_a_thresholded_model_and_not_a_smooth_one(images, fp):
    model = ThresholdModel().eval()
    with torch.no_grad():
        y = model(images).argmax(1)
    flag = zero_gradient_fraction(model, images, y)
    assert flag is not None and flag.name == "zero_gradient" and "8 of 8" in flag.detail
    assert flag.meaning == FLAG_MEANINGS["zero_gradient"] and flag.detail in flag.message
    assert zero_gradient_fraction(ConstantModel(in_graph=False).eval(), images, torch.full((8,), 9)) is not None
    assert zero_gradient_fraction(fp[0], images, fp[1]) is None


def test_single_step_against_iterative_by_hand():
    assert single_step_beats_iterative({"fgsm": 0.5, "pgd": 0.4}) is None
    flag = single_step_beats_iterative({"fgsm": 0.30, "pgd": 0.40})
    assert flag is not None and flag.name == "single_step_stronger" and "30.00%" in flag.detail
    assert single_step_beats_iterative({"fgsm": 0.30, "pgd": 0.40}, tolerance=0.2) is None
    assert single_step_beats_iterative({"fgsm": 0.30}) is None  # no iterative result to compare with
    mixed = {"fgsm": 0.5, "pgd": 0.05, "fgsm@identity": 0.1, "pgd@identity": 0.2, "fgsm_adaptive": 0.1}
    flag = single_step_beats_iterative(mixed)
    assert flag is not None and "fgsm@identity" in flag.detail and "fgsm_adaptive" not in flag.detail
    custom = single_step_beats_iterative({"fgsm": 0.1, "mifgsm": 0.2}, pairs=[("fgsm", "mifgsm")])
    assert custom is not None and "mifgsm" in custom.detail
    assert single_step_beats_iterative({"fgsm": 0.1, "pgdx": 0.2}) is None  # "pgdx" is not a variant of "pgd"


def test_gradient_free_against_gradient_attacks_by_hand():
    acc = {"fgsm": 0.5, "pgd": 0.40, "apgd": 0.35, "square": 0.30}
    flag = gradient_free_beats_gradient(acc, {"square"})
    assert flag is not None and flag.name == "gradient_free_stronger" and "apgd" in flag.detail
    assert gradient_free_beats_gradient({**acc, "square": 0.36}, {"square"}) is None
    assert gradient_free_beats_gradient(acc, {"square"}, gradient_names=["fgsm", "pgd"]) is not None
    assert gradient_free_beats_gradient(acc, {"square"}, tolerance=0.1) is None
    assert gradient_free_beats_gradient(acc, set()) is None
    assert gradient_free_beats_gradient({"square": 0.1}, {"square"}) is None


def test_an_ensemble_with_a_gradient_free_part_is_not_a_gradient_attack():
    from arbibench.attacks import get_attack

    assert get_attack("pgd").gradient_only and get_attack("fab_t").gradient_only
    assert not get_attack("square").gradient_only and not get_attack("transfer").gradient_only
    assert not get_attack("autoattack").gradient_only  # standard AutoAttack ends with Square
    assert get_attack("autoattack", components=("apgd_ce", "apgd_t")).gradient_only
    # resnet20_bireal_at's card (quick protocol): PGD 31%, APGD-CE 23%, AutoAttack 4.2%, Square 7%. AutoAttack's
    # Square part beats the model either way, so only against the gradient attacks does Square reveal the masking
    acc = {"pgd": 0.31, "apgd_ce": 0.23, "autoattack": 0.042, "square": 0.07}
    assert gradient_free_beats_gradient(acc, {"square"}) is None
    only = [n for n in acc if get_attack(n).gradient_only]
    flag = gradient_free_beats_gradient(acc, {"square"}, only)
    assert flag is not None and "apgd_ce" in flag.detail


def test_large_eps_flags_a_constant_model_and_not_a_smooth_one(images, fp):
    y_const = torch.full((8,), 9)  # the constant model's argmax: all correct, and nothing can change it
    for model in (ConstantModel(), ConstantModel(in_graph=False)):
        flag = large_eps_sanity(model.eval(), images, y_const)
        assert flag is not None and flag.name == "large_eps_robust" and "8 of 8" in flag.detail
    assert large_eps_sanity(fp[0], images, fp[1]) is None
    assert large_threat(L2(0.5), images) == L2(0.5 * (3 * 32 * 32) ** 0.5)
    assert large_threat(None, images) == large_threat(Linf(8 / 255), images) == Linf(0.5)


def test_run_checks_collects_flags(images, fp):
    flags = run_checks(ConstantModel().eval(), images, torch.full((8,), 9), Linf(8 / 255), {})
    assert set(flags) == {"zero_gradient", "large_eps_robust"}
    assert all(FLAG_MEANINGS[k] in v for k, v in flags.items())
    acc = {"fgsm": 0.2, "pgd": 0.3, "square": 0.1}
    flags = run_checks(fp[0], images, fp[1], Linf(8 / 255), acc, gradient_free={"square"})
    assert set(flags) == {"single_step_stronger", "gradient_free_stronger"}
    assert run_checks(fp[0], images, fp[1], Linf(8 / 255), {"fgsm": 0.4, "pgd": 0.3}) == {}
