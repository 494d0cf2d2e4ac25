"""AutoAttack (Croce & Hein, ICML 2020): an ensemble of parameter-free attacks, worst case per sample.

The "standard" version runs APGD-CE (100 steps, no restarts), APGD-T (9 target classes, 100 steps), FAB-T
(9 target classes) and Square (5000 queries) in that order, each only on the samples that every earlier component
left correctly classified; a sample counts as robust only if all of them fail.

Components are picked by registry name (``ATTACKS``; AutoAttack's own names such as ``apgd-t`` are accepted), not
through if/elif strings, with each component's registry defaults (which are AutoAttack's). A component missing from
the registry (an attack not implemented in this installation) is skipped. Which components run is decided once, when
the ensemble is built, and is part of :meth:`AutoAttack.config_dict`, so the store's hash names exactly the attacks
that produced a result and a later installation with more components gets a new key instead of mixing results.
``components_run`` lists them and ``skipped_components`` the configured ones that were missing.

Each component draws its randomness from its own generator, seeded from one draw of the ensemble's generator and
the component's name, so adding or removing a component does not change the random draws of the others.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from arbibench.attacks.base import Attack, predict, require_choice
from arbibench.attacks.registry import ALIASES, ATTACKS, register
from arbibench.attacks.threat import ThreatModel

NAME = "autoattack"

# The components of each version, in the order they run (AutoAttack's ``version`` argument).
VERSIONS: dict[str, tuple[str, ...]] = {
    "standard": ("apgd_ce", "apgd_t", "fab_t", "square"),
}


@dataclass(frozen=True)
class AutoAttackConfig:
    version: str = "standard"
    components: tuple[str, ...] | None = None  # an explicit list of registry names replaces the version's list

    def __post_init__(self) -> None:
        require_choice("version", self.version, tuple(VERSIONS))
        if self.components is not None:
            comps = self.components
            if isinstance(comps, str) or not all(isinstance(c, str) and c for c in comps):
                raise ValueError(f"components must be a list of attack names, got {comps!r}")
            names = tuple(ALIASES.get(c.lower(), c.lower()) for c in comps)  # AutoAttack's names accepted
            if not names:
                raise ValueError("components must name at least one attack")
            if len(set(names)) != len(names):
                raise ValueError(f"components {list(names)} name an attack twice")
            if NAME in names:
                raise ValueError("autoattack cannot be one of its own components")
            object.__setattr__(self, "components", names)

    @property
    def configured(self) -> tuple[str, ...]:
        return self.components if self.components is not None else VERSIONS[self.version]


def component_generator(seed: int, name: str) -> torch.Generator:
    """The generator of component ``name`` given the ensemble's seed draw (crc32: stable across processes)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))


class AutoAttack(Attack):
    """AutoAttack's ensemble over the registered components of ``version`` (or an explicit ``components`` list)."""

    name = NAME
    needs_gradients = True
    Config = AutoAttackConfig
    config: AutoAttackConfig

    def __init__(self, config: AutoAttackConfig | None = None, **params: Any) -> None:
        if "components" in params and params["components"] is not None:
            params["components"] = tuple(params["components"])
        super().__init__(config, **params)
        self.attacks: list[Attack] = [ATTACKS[c]() for c in self.config.configured if c in ATTACKS]
        self.skipped_components: list[str] = [c for c in self.config.configured if c not in ATTACKS]
        if not self.attacks:
            raise ValueError(
                f"none of the components {list(self.config.configured)} of autoattack is a registered attack"
            )

    @property
    def gradient_only(self) -> bool:
        """False when a component (Square in the standard version) is gradient-free: the ensemble then cannot show
        whether gradients are masked, since its gradient-free part succeeds either way."""
        return all(a.gradient_only for a in self.attacks)

    @property
    def components_run(self) -> list[str]:
        """Names of the components this ensemble runs, in order (fixed when it was built)."""
        return [a.name for a in self.attacks]

    def config_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.config.version,
            "configured": list(self.config.configured),
            "components": [a.config_dict() for a in self.attacks],
            "skipped": list(self.skipped_components),
        }

    def __repr__(self) -> str:
        skipped = f", skipped={self.skipped_components!r}" if self.skipped_components else ""
        return f"AutoAttack(version={self.config.version!r}, components={self.components_run!r}{skipped})"

    def run(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        x_adv = x.clone()
        fooled = predict(model, x) != y
        for attack in self.attacks:
            idx = (~fooled).nonzero().squeeze(1)
            if idx.numel() == 0:
                break
            # __call__ verifies the component's result against the threat model before it is used.
            candidate = attack(model, x[idx], y[idx], threat, component_generator(seed, attack.name))
            x_adv[idx] = candidate  # newly fooled: its adversarial example; still robust: the latest try
            fooled[idx] = predict(model, candidate) != y[idx]
        return x_adv


register(AutoAttack)
