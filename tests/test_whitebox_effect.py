"""Every white-box attack breaks the shipped full-precision ResNet-20 on 200 real CIFAR-10 test images.

The protocol's sanity bar for a non-robust model: each iterative attack at Linf 8/255 (L2 0.5 for the L2-only
CW-L2) leaves below 5% accuracy, and FGSM at least halves it. Attacks already measured on these 200 images in their
own test files (APGD family, MI-FGSM, CW-Linf, FAB-T) are not repeated here; untargeted FAB runs on the first 50.
"""

import pytest
import torch

from arbibench.attacks import L2, Linf, get_attack
from arbibench.data import load_cifar10

N = 200


@pytest.fixture(scope="module")
def fp_and_data(trained_fp, data_dir):
    model = trained_fp
    x, y, _ = load_cifar10(N, data_dir=data_dir)
    with torch.no_grad():
        correct = model(x).argmax(1) == y
    return model, x, y, correct


def robust_accuracy(model, x, y, correct, attack, threat) -> float:
    """Accuracy on all of ``x`` after attacking the correctly classified images."""
    x_adv = attack(model, x[correct], y[correct], threat, torch.Generator().manual_seed(0))
    with torch.no_grad():
        still = model(x_adv).argmax(1) == y[correct]
    return int(still.sum()) / len(y)


@pytest.mark.parametrize(
    ("name", "params", "threat"),
    [
        ("pgd", {}, Linf(8 / 255)),
        ("deepfool", {}, Linf(8 / 255)),
        ("cw_l2", {}, L2(0.5)),
        ("autoattack", {}, Linf(8 / 255)),
    ],
)
def test_iterative_attack_breaks_fp_model(fp_and_data, name, params, threat):
    model, x, y, correct = fp_and_data
    clean = int(correct.sum()) / N
    assert clean > 0.85
    assert robust_accuracy(model, x, y, correct, get_attack(name, **params), threat) < 0.05


def test_untargeted_fab_breaks_fp_model(fp_and_data):
    # Untargeted FAB takes the gradient of every logit at each step (10x a targeted step), so it runs on the first
    # 25 images with 20 steps; FAB-T is checked on 100 images in test_fab.py.
    model, x, y, correct = fp_and_data
    x, y, correct = x[:25], y[:25], correct[:25]
    assert robust_accuracy(model, x, y, correct, get_attack("fab", steps=20), Linf(8 / 255)) < 0.05


def test_fgsm_at_least_halves_accuracy(fp_and_data):
    model, x, y, correct = fp_and_data
    clean = int(correct.sum()) / N
    assert robust_accuracy(model, x, y, correct, get_attack("fgsm"), Linf(8 / 255)) <= clean / 2
