"""BNN gradient estimators on real CIFAR-10 images: exact forward, surrogate backward, temperature, worst case."""

import math

import pytest
import torch
from torch import nn

from arbibench.attacks import PGD, Linf
from arbibench.attacks.base import Attack, NoConfig, loss_gradient
from arbibench.attacks.estimators import (
    DEFAULT_ESTIMATORS,
    AdaptiveAttack,
    EstimatedAttack,
    GradientEstimator,
    adaptive_attack_class,
    apply_estimator,
)
from arbibench.attacks.losses import cross_entropy
from arbibench.data import load_cifar10
from arbibench.evaluation.store import hash_json
from arbibench.models.resnet import resnet20
from arbibench.nn.quantizers import SignQuantizer, canonical_surrogate, use_surrogate

SURROGATE_SPECS = ["ste", "identity", "approx_sign", "tanh", "tanh:5"]


@pytest.fixture(scope="module")
def images(data_dir):
    x, _, _ = load_cifar10(16, data_dir=data_dir)
    return x


@pytest.fixture(scope="module")
def bnn(images):
    torch.manual_seed(1)
    model = resnet20("bnn").eval()
    with torch.no_grad():
        labels = model(images).argmax(1)  # a random-init model: its own predictions make every sample attackable
    return model, labels


def surrogates_of(model):
    return {m.surrogate for m in model.modules() if isinstance(m, SignQuantizer)}


def grad_of(q, x):
    x = x.clone().requires_grad_(True)
    q(x).sum().backward()
    return x.grad


def test_tanh_surrogate_gradient_matches_formula_and_forward_is_exact():
    x = torch.tensor([-2.0, -0.5, 0.0, 0.1, 0.3, 1.5])
    for spec, beta in (("tanh", 1.0), ("tanh:3", 3.0), ("tanh:0.5", 0.5)):
        q = SignQuantizer(spec)
        expected = [beta * (1 - math.tanh(beta * v) ** 2) for v in x.tolist()]
        assert torch.allclose(grad_of(q, x), torch.tensor(expected), atol=1e-6)
        assert q(x.clone().requires_grad_(True)).tolist() == [-1, -1, 1, 1, 1, 1]  # sign(0) = +1, exactly


def test_surrogate_specs_are_canonical_and_bad_ones_refused():
    assert canonical_surrogate("tanh:5.0") == "tanh:5"
    assert canonical_surrogate("tanh:1") == "tanh"
    assert canonical_surrogate("ste") == "ste"
    for bad in ("tanh:0", "tanh:-2", "tanh:x", "tanh:inf", "relu:2", "identity:2", "magic"):
        with pytest.raises(ValueError, match="surrogate"):
            SignQuantizer(bad)
    est = GradientEstimator("tanh:5.0", 16)
    assert est == GradientEstimator("tanh:5", 16.0) and est.tag == "tanh:5,T=16"
    assert GradientEstimator.parse(est.tag) == est and GradientEstimator.parse("native") == GradientEstimator()
    for bad_t in (0, -1.0, math.inf, True):
        with pytest.raises(ValueError, match="logit_temperature"):
            GradientEstimator("ste", bad_t)
    with pytest.raises(ValueError, match="surrogate"):
        GradientEstimator("nope")


def test_forward_is_exact_under_every_estimator(images, bnn):
    model, _ = bnn
    x = images[:4]
    with torch.no_grad():
        plain = model(x)
    for spec in SURROGATE_SPECS:
        with use_surrogate(model, spec):
            assert torch.equal(model(x.clone().requires_grad_(True)), plain), spec
        with apply_estimator(model, GradientEstimator(spec, 16.0)) as scaled:
            out = scaled(x.clone().requires_grad_(True))
            assert torch.equal(out, plain / 16.0)  # a power of two: exact, the order of the logits is kept
            assert torch.equal(out.argmax(1), plain.argmax(1))
    with apply_estimator(model, None) as same:
        assert same is model


def test_input_gradients_depend_on_the_surrogate_and_identity_is_never_zero(images, bnn):
    model, labels = bnn
    x, y = images[:4], labels[:4]
    grads = {}
    for spec in SURROGATE_SPECS:
        with apply_estimator(model, spec) as m:
            grads[spec], _ = loss_gradient(m, x, y, cross_entropy)
    assert (grads["identity"].flatten(1).abs().amax(1) > 0).all()
    # The BinaryNet preset puts a hardtanh before every activation sign: its inputs lie in [-1, 1], where the
    # clipped STE and the identity have the same derivative. Every other pair differs.
    assert torch.equal(grads["ste"], grads["identity"])
    for i, a in enumerate(SURROGATE_SPECS):
        for b in SURROGATE_SPECS[i + 1 :]:
            if {a, b} != {"ste", "identity"}:
                assert not torch.allclose(grads[a], grads[b], rtol=1e-3), (a, b)
    assert surrogates_of(model) == {"ste"}


def test_logit_temperature_scales_the_cross_entropy_gradient_as_computed_by_hand():
    # logits = x (identity weights), x = [1, 0], y = 0: d CE(x / T) / dx = (softmax(x / T) - e_0) / T
    lin = nn.Linear(2, 2, bias=False).eval()
    with torch.no_grad():
        lin.weight.copy_(torch.eye(2))
    x, y = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    expected = {1.0: 0.26894142, 2.0: 0.18877033}  # 1 - sigmoid(1); (1 - sigmoid(0.5)) / 2
    for t, g in expected.items():
        with apply_estimator(lin, GradientEstimator(None, t)) as m:
            grad, logits = loss_gradient(m, x, y, cross_entropy)
        assert torch.allclose(grad, torch.tensor([[-g, g]]), atol=1e-6)
        assert torch.allclose(logits, x / t)


def test_surrogate_is_restored_after_an_exception(bnn):
    model, _ = bnn
    with pytest.raises(RuntimeError, match="boom"):
        with apply_estimator(model, GradientEstimator("tanh:5", 4.0)):
            assert surrogates_of(model) == {"tanh:5"}
            raise RuntimeError("boom")
    assert surrogates_of(model) == {"ste"}


def test_estimated_attack_is_named_hashed_verified_and_deterministic(images, bnn):
    model, labels = bnn
    x, y, threat = images[:8], labels[:8], Linf(0.5 / 255)
    attack = EstimatedAttack(PGD(steps=2), "tanh:5.0")
    assert attack.name == "pgd@tanh:5" and attack.needs_gradients
    cfg = attack.config_dict()
    assert cfg["attack"] == PGD(steps=2).config_dict() and cfg["estimator"] == {
        "surrogate": "tanh:5",
        "logit_temperature": 1.0,
    }
    assert hash_json(cfg) != hash_json(EstimatedAttack(PGD(steps=2), "tanh:5,T=16").config_dict())
    runs = [attack(model, x, y, threat, torch.Generator().manual_seed(3)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    threat.verify(runs[0], x)
    assert surrogates_of(model) == {"ste"}


def test_adaptive_attack_is_never_weaker_than_any_single_estimator(images, bnn):
    model, y = bnn
    x, threat = images, Linf(0.05 / 255)
    pgd = PGD(steps=2)

    def fooled(x_adv):
        with torch.no_grad():
            return model(x_adv).argmax(1) != y

    adaptive = AdaptiveAttack(pgd)
    assert adaptive.name == "pgd_adaptive" and adaptive.estimators == DEFAULT_ESTIMATORS
    runs = [adaptive(model, x, y, threat, torch.Generator().manual_seed(0)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    threat.verify(runs[0], x)
    worst = fooled(runs[0])
    singles = []
    for est in DEFAULT_ESTIMATORS:
        single = fooled(EstimatedAttack(pgd, est)(model, x, y, threat, torch.Generator().manual_seed(0)))
        assert not (single & ~worst).any(), est.tag  # every sample one estimator fools, the adaptive attack fools
        singles.append(int(single.sum()))
    assert int(worst.sum()) >= max(singles)
    assert surrogates_of(model) == {"ste"}


class Counter(Attack):
    """Leaves images unchanged and records the logits' scale and surrogates it was run under."""

    name = "counter"
    Config = NoConfig
    calls: list = []

    def run(self, model, x, y, threat, generator):
        Counter.calls.append(surrogates_of(model))
        return x.clone()


def test_adaptive_attack_runs_each_distinct_effect_once(images, bnn):
    model, y = bnn
    threat, g = Linf(1 / 255), torch.Generator().manual_seed(0)
    Counter.calls = []
    AdaptiveAttack(Counter(), [None, "ste", "identity", "ste,T=2"])(model, images[:4], y[:4], threat, g)
    assert Counter.calls == [{"ste"}, {"identity"}, {"ste"}]  # "ste" is the model's own surrogate: run once
    fp = resnet20("fp").eval()
    with torch.no_grad():
        y_fp = fp(images[:4]).argmax(1)
    Counter.calls = []
    AdaptiveAttack(Counter())(fp, images[:4], y_fp, threat, g)
    assert len(Counter.calls) == 2  # no quantizers: only the two temperatures differ


def test_adaptive_attack_class_for_the_registry():
    cls = adaptive_attack_class(PGD)
    attack = cls(steps=3, estimators=["identity", "tanh:5,T=16"])
    assert cls.name == attack.name == "pgd_adaptive" and attack.attack.config.steps == 3
    assert [e.tag for e in attack.estimators] == ["identity", "tanh:5,T=16"]
    assert cls().estimators == DEFAULT_ESTIMATORS
    with pytest.raises(ValueError, match="unknown parameter"):
        cls(stepz=3)
    with pytest.raises(ValueError, match="at least one"):
        cls(estimators=[])
