"""The AutoAttack ensemble: components by registry name, skipped when missing, worst case per sample."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from torch import nn

from arbibench.attacks import ATTACKS, Attack, AutoAttack, Linf, get_attack
from arbibench.attacks.autoattack import VERSIONS, component_generator
from arbibench.attacks.base import predict
from arbibench.attacks.threat import ThreatModel


@dataclass(frozen=True)
class _RecorderConfig:
    pass


class _Recorder(Attack):
    """Returns its input unchanged and remembers the batch sizes it was handed."""

    name = "recorder"
    Config = _RecorderConfig
    seen: ClassVar[list[int]] = []

    def run(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, threat: ThreatModel, generator: torch.Generator
    ) -> torch.Tensor:
        type(self).seen.append(x.shape[0])
        return x.clone()


def test_registered_and_standard_components_in_order() -> None:
    attack = get_attack("autoattack")
    assert isinstance(attack, AutoAttack)
    standard = VERSIONS["standard"]
    assert standard == ("apgd_ce", "apgd_t", "fab_t", "square")
    assert attack.components_run == [c for c in standard if c in ATTACKS]
    assert attack.skipped_components == [c for c in standard if c not in ATTACKS]
    cfg = attack.config_dict()
    assert cfg["configured"] == list(standard)
    assert [c["name"] for c in cfg["components"]] == attack.components_run
    assert cfg == get_attack("autoattack").config_dict()  # stable: the store hashes it


def test_explicit_components_and_validation() -> None:
    attack = get_attack("autoattack", components=["apgd_ce", "no_such_attack"])
    assert attack.components_run == ["apgd_ce"]
    assert attack.skipped_components == ["no_such_attack"]
    assert attack.config_dict()["skipped"] == ["no_such_attack"]
    with pytest.raises(ValueError, match="none of the components"):
        get_attack("autoattack", components=["no_such_attack"])
    with pytest.raises(ValueError, match="twice"):
        get_attack("autoattack", components=["fgsm", "FGSM"])
    with pytest.raises(ValueError, match="own components"):
        get_attack("autoattack", components=["autoattack"])
    with pytest.raises(ValueError, match="version"):
        get_attack("autoattack", version="plus")


def test_later_components_only_see_still_robust_samples(
    model: nn.Module, images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(ATTACKS, "recorder", _Recorder)
    monkeypatch.setattr(_Recorder, "seen", [])
    y = predict(model, images)  # every sample starts correctly classified
    threat = Linf(1 / 255)
    attack = get_attack("autoattack", components=["fgsm", "recorder"])
    assert attack.components_run == ["fgsm", "recorder"]
    x_adv = attack(model, images, y, threat, torch.Generator().manual_seed(0))
    threat.verify(x_adv, images)
    fgsm_fooled = predict(model, get_attack("fgsm")(model, images, y, threat, torch.Generator())) != y
    expected = int((~fgsm_fooled).sum())
    assert _Recorder.seen == ([expected] if expected else [])
    assert torch.equal(predict(model, x_adv) != y, fgsm_fooled)


def test_no_weaker_than_its_first_component(model: nn.Module, images: torch.Tensor) -> None:
    y = predict(model, images)
    threat = Linf(1 / 255)
    ensemble = get_attack("autoattack", components=["pgd", "apgd_ce"])
    a = ensemble(model, images, y, threat, torch.Generator().manual_seed(3))
    seed = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(3)))
    alone = get_attack("pgd")(model, images, y, threat, component_generator(seed, "pgd"))
    assert bool(((predict(model, alone) != y) <= (predict(model, a) != y)).all())
