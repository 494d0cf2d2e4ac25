"""The contract every registered attack keeps, checked once over the registry instead of once per attack file.

For every attack in :data:`arbibench.attacks.ATTACKS` and every norm it declares, on the first real CIFAR-10 test
images against the shipped ``resnet20_bnn`` (the benchmark's subject) and ``resnet20_fp``, with tiny budgets:

- the result is verified: same shape and dtype, detached, inside the threat model (``ThreatModel.verify``);
- the output is typed: query counts per image from black-box attacks only, the smallest perturbation found per
  image exactly from the attacks that declare ``reports_min_distance``;
- it is determined by the generator alone: a second run with the same seed, under another global torch seed and
  under ``torch.no_grad()``, gives the same images (and, for black-box attacks, the same query counts);
- the model is left as it was: every submodule's train/eval mode, every parameter and buffer, no ``.grad``;
- the budget holds: for black-box attacks no image is queried more than ``max_queries`` times, counted at the
  oracle, and the reported counts agree;
- early exit: an image misclassified on arrival comes back misclassified; a white-box attack returns it as it
  was, a black-box attack stops querying it at the query that found it misclassified within eps.

A new attack registered without an entry in :data:`TINY` fails :func:`test_every_attack_has_a_tiny_budget`, so it
cannot join the registry without being held to the contract. Per-attack files keep only what is specific to each.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from arbibench.attacks import ATTACKS, L2, Attack, Linf, ThreatModel, get_attack
from arbibench.attacks.base import predict
from arbibench.attacks.query import BlackBoxAttack, QueryModel
from arbibench.attacks.transfer import Transfer
from arbibench.data.cifar10 import load_cifar10
from arbibench.models.zoo import load_model

N_IMAGES = 4  # the first test images; the first half get a wrong label (misclassified on arrival)
THREATS: dict[str, ThreatModel] = {"Linf": Linf(8 / 255), "L2": L2(0.5)}

# Tiny budgets: each attack's own parameters, just enough to exercise its loop (restarts, targets, search steps).
TINY: dict[str, dict[str, Any]] = {
    "fgsm": {},
    "pgd": {"steps": 2, "restarts": 2},
    "mifgsm": {"steps": 2},
    "cw_linf": {"steps": 2},
    "apgd_ce": {"steps": 3, "restarts": 2},
    "apgd_dlr": {"steps": 3},
    "apgd_t": {"steps": 2, "n_target_classes": 2},
    "cw_l2": {"steps": 4, "binary_search_steps": 2},
    "deepfool": {"steps": 3},
    "fab": {"steps": 3, "restarts": 2},
    "fab_t": {"steps": 2, "n_target_classes": 2},
    "square": {"max_queries": 20},
    "simba": {"max_queries": 20},
    "nes": {"max_queries": 20, "samples": 4},
    "hsja": {"max_queries": 20, "init_evals": 4, "init_tries": 5},
    "rays": {"max_queries": 20},
    "corners": {"draws": 5},
    "transfer": {"attack": "pgd"},
    "autoattack": {"components": ("fgsm", "pgd")},
}
# FGSM is one gradient step for the whole batch: there is no iterate to stop, and every image is perturbed.
NO_EARLY_EXIT = {"fgsm"}
ADAPTIVE_ESTIMATORS = ("ste", "identity")  # two estimators: the loop over estimators runs, at a tenth of the cost


def tiny_params(name: str) -> dict[str, Any]:
    """The tiny-budget parameters of registry attack ``name`` (``<inner>_adaptive``: the inner attack's)."""
    if name.endswith("_adaptive"):
        return {**TINY[name.removesuffix("_adaptive")], "estimators": ADAPTIVE_ESTIMATORS}
    return TINY[name]


ZOO = ("resnet20_bnn", "resnet20_fp")
# Gradient estimators act on sign quantizers: on the FP model every estimator is the same, so the adaptive attacks
# meet the contract on the BNN only.
CASES = [
    (name, norm, target)
    for name in sorted(ATTACKS)
    for norm in ATTACKS[name].norms
    for target in ZOO
    if not (target == "resnet20_fp" and name.endswith("_adaptive"))
]


@pytest.fixture(scope="module")
def zoo() -> dict[str, nn.Module]:
    return {name: load_model(name) for name in ZOO}


@pytest.fixture(scope="module")
def batch(data_dir: Path) -> torch.Tensor:
    x, _, _ = load_cifar10(N_IMAGES, data_dir=data_dir)
    return x


def test_every_attack_has_a_tiny_budget() -> None:
    missing = [n for n in ATTACKS if n.removesuffix("_adaptive") not in TINY]
    assert not missing, f"add tiny-budget parameters for {missing} to TINY: every attack must meet the contract"
    assert {name for name, _, _ in CASES} == set(ATTACKS)


@pytest.mark.parametrize("name", [n for n in sorted(ATTACKS) if set(ATTACKS[n].norms) != set(THREATS)])
def test_undeclared_norms_are_refused(name: str, zoo: dict[str, nn.Module], batch: torch.Tensor) -> None:
    model = zoo["resnet20_fp"]
    y = predict(model, batch)
    for norm in sorted(set(THREATS) - set(ATTACKS[name].norms)):
        with pytest.raises(ValueError, match=f"supports the .* threat model, not {norm}"):
            _build(name, "resnet20_fp", zoo)(model, batch, y, THREATS[norm], torch.Generator().manual_seed(0))


def _build(name: str, target: str, zoo: dict[str, nn.Module]) -> Attack:
    attack = get_attack(name, **tiny_params(name))
    if isinstance(attack, Transfer):  # the surrogate is the caller's to resolve: the other zoo model
        other = next(m for m in ZOO if m != target)
        attack = attack.with_surrogate(other, zoo[other])
    return attack


class _OracleRows:
    """Counts, per original image, the inputs every :class:`QueryModel` charged: the budget seen from outside."""

    def __init__(self) -> None:
        self.per_image: torch.Tensor | None = None

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        charge = QueryModel._query

        def counted(
            oracle: QueryModel, x: torch.Tensor, idx: torch.Tensor
        ) -> Generator[torch.Tensor, torch.Tensor, torch.Tensor]:
            ids = torch.as_tensor(idx, dtype=torch.int64).cpu()
            if self.per_image is None or len(self.per_image) != len(oracle):
                self.per_image = torch.zeros(len(oracle), dtype=torch.int64)
            self.per_image += torch.bincount(ids, minlength=len(oracle))
            return (yield from charge(oracle, x, idx))

        monkeypatch.setattr(QueryModel, "_query", counted)


def _snapshot(model: nn.Module) -> tuple[list[bool], dict[str, torch.Tensor]]:
    return [m.training for m in model.modules()], {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name,norm,target", CASES)
def test_attack_contract(
    name: str,
    norm: str,
    target: str,
    zoo: dict[str, nn.Module],
    batch: torch.Tensor,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, threat, x = zoo[target], THREATS[norm], batch
    y = predict(model, x)
    half = N_IMAGES // 2
    y[:half] = (y[:half] + 1) % 10  # misclassified on arrival; the others start correctly classified
    attack = _build(name, target, zoo)
    rows = _OracleRows()
    rows.install(monkeypatch)
    modes, state = _snapshot(model)

    torch.manual_seed(1)
    out = attack.output(model, x, y, threat, torch.Generator().manual_seed(0))
    x_adv, counts = out.x_adv, out.queries
    seen = None if rows.per_image is None else rows.per_image.clone()

    # verified: the right kind of tensor, inside the threat model
    assert x_adv.shape == x.shape and x_adv.dtype == x.dtype and not x_adv.requires_grad
    threat.verify(x_adv, x)
    assert (counts is not None) == isinstance(attack, BlackBoxAttack)
    assert (out.min_distance is not None) == attack.reports_min_distance
    if out.min_distance is not None:
        assert out.min_distance.shape == (N_IMAGES,) and out.min_distance.dtype == torch.float64
        # misclassified on arrival: an adversarial point within eps is known for them
        assert bool((out.min_distance[:half] <= threat.eps + 1e-6).all()), out.min_distance.tolist()
    # the model as it was: modes, weights and batch-norm statistics, no gradients left behind
    assert [m.training for m in model.modules()] == modes
    after = model.state_dict()
    assert all(torch.equal(state[k], after[k]) for k in state)
    assert all(p.grad is None for p in model.parameters())
    # early exit: an image misclassified on arrival stays so, and no work is spent on it once that is known
    if name not in NO_EARLY_EXIT:
        assert bool((predict(model, x_adv[:half]) != y[:half]).all())
    if isinstance(attack, BlackBoxAttack):
        budget = attack.config.max_queries
        assert counts is not None and seen is not None
        assert bool((seen <= budget).all()), f"oracle charged {seen.tolist()} queries, budget {budget}"
        assert bool((counts <= seen).all()) and bool((counts >= 1).all())
        assert torch.equal(seen[:half], counts[:half]), f"queried {seen.tolist()}, fooled at {counts.tolist()}"
    elif name not in NO_EARLY_EXIT:
        assert torch.equal(x_adv[:half], x[:half]), "an image misclassified on arrival was changed"

    # determinism: the generator is the only source of randomness; no_grad around the call changes nothing
    rows.per_image = None
    torch.manual_seed(2)
    with torch.no_grad():
        again = attack.output(model, x, y, threat, torch.Generator().manual_seed(0))
    assert torch.equal(again.x_adv, x_adv), "same seed, different result"
    if counts is not None:
        assert again.queries is not None and torch.equal(again.queries, counts)
