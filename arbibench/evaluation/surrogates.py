"""Attacks made ready for one target model: the transfer attack's surrogate resolved from the zoo and bound.

The attacks layer never imports the model zoo; the evaluation layer, which knows the target's name, resolves
``"fp_twin"`` to the target's full-precision twin (or checks an explicit zoo name), loads that model once per name
(checksum-verified, on the CPU) and hands it to the attack. The resolved name goes into the attack's config, so the
store's spec names the surrogate actually used.
"""

from __future__ import annotations

from functools import lru_cache

from torch import nn

from arbibench.attacks import Attack, Transfer, get_attack
from arbibench.attacks.transfer import FP_TWIN
from arbibench.models.zoo import ZOO, fp_twin_name, load_model


def _known_models() -> str:
    return ", ".join(sorted(ZOO))


def resolve_surrogate(surrogate: str, target: str) -> str:
    """The zoo name of ``surrogate`` for the target model ``target`` (``"fp_twin"`` -> the target's FP twin)."""
    if surrogate != FP_TWIN:
        if surrogate not in ZOO:
            raise ValueError(
                f"unknown surrogate {surrogate!r}: use {FP_TWIN!r} or a zoo model; known models: {_known_models()}"
            )
        return surrogate
    entry = ZOO.get(target)
    if entry is None:
        raise ValueError(
            f"cannot resolve the transfer surrogate {FP_TWIN!r} for unknown target model {target!r}: name a "
            f"surrogate explicitly (surrogate=...) or use a zoo model; known models: {_known_models()}"
        )
    twin = fp_twin_name(entry)
    if twin is None:
        raise ValueError(
            f"the zoo has no full-precision {entry.arch} on {entry.dataset} to act as the FP twin of {target!r}; "
            f"name a surrogate explicitly; known models: {_known_models()}"
        )
    return twin


@lru_cache(maxsize=4)
def _surrogate(name: str) -> nn.Module:
    """A zoo surrogate on the CPU, loaded once per process (attacks never change a model they are given)."""
    return load_model(name, dataset=ZOO[name].dataset, device="cpu")


def attack_for_target(attack: str | Attack, target: str) -> Attack:
    """``attack`` (a registry name or an attack) ready to run against the model called ``target``."""
    obj = get_attack(attack) if isinstance(attack, str) else attack
    if isinstance(obj, Transfer):
        name = resolve_surrogate(obj.config.surrogate, target)
        return obj.with_surrogate(name, _surrogate(name))
    return obj
