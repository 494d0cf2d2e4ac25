"""Transfer attack: adversarial examples crafted white-box on a surrogate model, then shown to the target once.

The target's gradients are never used (``needs_gradients = False``): any white-box attack of the registry (default
``pgd``; ``mifgsm`` and ``apgd_ce`` are the usual transfer choices, ``"pgd@identity"`` attacks a BNN surrogate
through a gradient estimator) runs on a surrogate from the model zoo, and the target answers one label query per
sample to tell whether the example transfers. This measures what an attacker without access to the deployed BNN
achieves from a model they can train themselves.

The default surrogate ``"fp_twin"`` is the full-precision model of the target's backbone and dataset
(``resnet20_bnn`` -> ``resnet20_fp``), resolved in :meth:`Transfer.for_target` so that the stored spec names the
concrete model; any zoo name is accepted too (e.g. BNN -> BNN transfer). Against the FP twin itself the attack is
a plain white-box attack on the target (allowed, and what its accuracy then means). The surrogate is loaded from
the zoo on first use, verified like any zoo model, on the device of the images, and kept for the next batches.

The registry's attacks stop a sample at its first misclassified iterate, and a point barely across the surrogate's
boundary rarely transfers (measured: PGD on resnet20_fp -> resnet20_bnn at 8/255 took 100 images from 72% only to
68% with early exit). By default (``early_exit=False``) the surrogate is therefore wrapped so that its no-grad
answers, which these attacks use only to stop early, keep the true label on top: the attack runs all its
iterations, on the surrogate's own gradients. ``early_exit=True`` keeps the attacks' house behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from arbibench.attacks.base import TRANSFER, Attack, require_bool
from arbibench.attacks.query import BlackBoxAttack, QueryModel
from arbibench.attacks.threat import ThreatModel

FP_TWIN = "fp_twin"


def _zoo() -> dict[str, Any]:
    # imported on use: the attacks layer does not import models at import time (no cycle, light import)
    from arbibench.models.zoo import ZOO

    return ZOO


def _known_models() -> str:
    return ", ".join(sorted(_zoo()))


def fp_twin(model_name: str) -> str:
    """Zoo name of the full-precision model with the same backbone and dataset as ``model_name``."""
    zoo = _zoo()
    entry = zoo.get(model_name)
    if entry is None:
        raise ValueError(
            f"cannot resolve the transfer surrogate {FP_TWIN!r} for unknown target model {model_name!r}: name a "
            f"surrogate explicitly (surrogate=...) or use a zoo model; known models: {_known_models()}"
        )
    from arbibench.models.zoo import fp_twin_name

    twin = fp_twin_name(entry)
    if twin is None:
        raise ValueError(
            f"the zoo has no full-precision {entry.arch} on {entry.dataset} to act as the FP twin of {model_name!r}; "
            f"name a surrogate explicitly; known models: {_known_models()}"
        )
    return twin


def _white_box(name: str) -> Attack:
    from arbibench.attacks import get_attack  # the registry imports this module

    attack = get_attack(name)
    if not attack.needs_gradients:
        raise ValueError(
            f"the transfer attack crafts its examples with a white-box attack on the surrogate; {name!r} needs no "
            "gradients (a black-box or transfer attack), pick e.g. 'pgd', 'mifgsm' or 'apgd_ce'"
        )
    return attack


class _NoEarlyExit(nn.Module):
    """The surrogate, except that its no-grad answers keep each input's true label on top.

    Gradient passes (grad mode) get the surrogate's logits untouched. Without grad the logit of the true label of
    the input's original is raised just above the largest one, so an attack never sees its iterate misclassified and
    runs every iteration; the other logits (their order included, which APGD-T's targets use) are kept. An input's
    original is the nearest one in L2, accepted only within the threat model's eps (iterates never leave it).
    """

    def __init__(self, surrogate: nn.Module, x: torch.Tensor, y: torch.Tensor, threat: ThreatModel) -> None:
        super().__init__()
        self.surrogate = surrogate
        self.x0, self.y0, self.threat = x.detach().reshape(x.shape[0], -1), y, threat

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.surrogate(x)
        if torch.is_grad_enabled():
            return logits
        flat = x.reshape(x.shape[0], -1)
        owner = torch.cdist(flat, self.x0).argmin(dim=1)
        mine = self.threat.distance(flat.double(), self.x0[owner].double()) <= self.threat.eps + 1e-6
        rows = mine.nonzero().flatten()
        logits = logits.clone()
        logits[rows, self.y0[owner[rows]]] = logits[rows].amax(dim=1) + 1.0
        return logits


@dataclass(frozen=True)
class TransferConfig:
    surrogate: str = FP_TWIN  # a zoo model name, or "fp_twin": the target's full-precision twin
    attack: str = "pgd"  # white-box attack run on the surrogate, by registry name, with its default config
    max_queries: int = 1  # one label query per sample tells whether the example transfers
    early_exit: bool = False  # let the white-box attack stop at its first surrogate misclassification (see above)

    def __post_init__(self) -> None:
        if not isinstance(self.surrogate, str) or (self.surrogate != FP_TWIN and self.surrogate not in _zoo()):
            raise ValueError(
                f"unknown surrogate {self.surrogate!r}: use {FP_TWIN!r} or a zoo model; known models: {_known_models()}"
            )
        if not isinstance(self.attack, str):
            raise ValueError(f"attack must be an attack name such as 'pgd', got {self.attack!r}")
        _white_box(self.attack)
        require_bool("early_exit", self.early_exit)
        if isinstance(self.max_queries, bool) or self.max_queries != 1:
            raise ValueError(f"max_queries must be 1 (a transfer attack asks the target once), got {self.max_queries}")


class Transfer(BlackBoxAttack):
    """White-box attack on a zoo surrogate, one label query on the target per sample."""

    name = "transfer"
    family = TRANSFER
    access = "labels"
    Config = TransferConfig
    config: TransferConfig

    def __init__(self, config: TransferConfig | None = None, **params: Any) -> None:
        super().__init__(config, **params)
        self._surrogates: dict[str, nn.Module] = {}  # device -> loaded surrogate

    def for_target(self, model_name: str) -> Transfer:
        """This attack with ``"fp_twin"`` replaced by the concrete zoo name, so the store's spec names it."""
        if self.config.surrogate != FP_TWIN:
            return self
        return Transfer(replace(self.config, surrogate=fp_twin(model_name)))

    def surrogate_model(self, device: torch.device) -> nn.Module:
        """The surrogate on ``device``, loaded from the zoo (checksum-verified) once per device."""
        name = self.config.surrogate
        if name == FP_TWIN:
            raise ValueError(
                f"transfer surrogate {FP_TWIN!r} is resolved per target: call attack.for_target(model_name) first "
                "(the runner does), or name a zoo surrogate"
            )
        key = str(device)
        if key not in self._surrogates:
            from arbibench.models.zoo import load_model

            entry = _zoo()[name]
            self._surrogates[key] = load_model(name, dataset=entry.dataset, device=device)
        return self._surrogates[key]

    def attack(
        self,
        oracle: QueryModel,
        x: torch.Tensor,
        y: torch.Tensor,
        threat: ThreatModel,
        generator: torch.Generator,
    ) -> torch.Tensor:
        surrogate = self.surrogate_model(x.device)
        if not self.config.early_exit:
            surrogate = _NoEarlyExit(surrogate, x, y, threat).eval()
        x_adv = _white_box(self.config.attack)(surrogate, x, y, threat, generator)  # verified within the threat
        fooled = oracle.is_adversarial(x_adv, torch.arange(x.shape[0]))
        return torch.where(fooled.to(x.device).view(-1, *([1] * (x.dim() - 1))), x_adv, x)
