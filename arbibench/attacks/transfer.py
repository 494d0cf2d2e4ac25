"""Transfer attack: adversarial examples crafted white-box on a surrogate model, then shown to the target once.

The target's gradients are never used (``needs_gradients = False``): any white-box attack of the registry (default
``pgd``; ``mifgsm`` and ``apgd_ce`` are the usual transfer choices, ``"pgd@identity"`` attacks a BNN surrogate
through a gradient estimator) runs on a surrogate from the model zoo, and the target answers one label query per
sample to tell whether the example transfers. This measures what an attacker without access to the deployed BNN
achieves from a model they can train themselves.

The surrogate is a model the caller hands in: ``config.surrogate`` names it (a zoo name, or ``"fp_twin"``: the
full-precision model of the target's backbone and dataset, ``resnet20_bnn`` -> ``resnet20_fp``) and the evaluation
layer resolves that name against the zoo and binds the loaded model (:func:`Transfer.with_surrogate`, done by
:func:`arbibench.evaluation.surrogates.attack_for_target`), so the stored spec names the concrete model and this
module never imports the model zoo. Against the FP twin itself the attack is a plain white-box attack on the target
(allowed, and what its accuracy then means).

The registry's attacks stop a sample at its first misclassified iterate, and a point barely across the surrogate's
boundary rarely transfers (measured: PGD on resnet20_fp -> resnet20_bnn at 8/255 took 100 images from 72% only to
68% with early exit). By default (``early_exit=False``) the surrogate is therefore wrapped so that its no-grad
answers, which these attacks use only to stop early, keep the true label on top: the attack runs all its
iterations, on the surrogate's own gradients. ``early_exit=True`` keeps the attacks' house behaviour.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from arbibench.attacks.base import TRANSFER, Attack, require_bool
from arbibench.attacks.query import BlackBoxAttack, QueryModel
from arbibench.attacks.registry import get_attack, register
from arbibench.attacks.threat import ThreatModel

FP_TWIN = "fp_twin"


def _white_box(name: str) -> Attack:
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
        logits: torch.Tensor = self.surrogate(x)
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
    surrogate: str = FP_TWIN  # a zoo model name, or "fp_twin": the target's full-precision twin (the caller resolves)
    attack: str = "pgd"  # white-box attack run on the surrogate, by registry name, with its default config
    max_queries: int = 1  # one label query per sample tells whether the example transfers
    early_exit: bool = False  # let the white-box attack stop at its first surrogate misclassification (see above)

    def __post_init__(self) -> None:
        if not isinstance(self.surrogate, str) or not self.surrogate:
            raise ValueError(f"surrogate must be {FP_TWIN!r} or a zoo model name, got {self.surrogate!r}")
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

    def __init__(
        self, config: TransferConfig | None = None, *, surrogate_model: nn.Module | None = None, **params: Any
    ) -> None:
        super().__init__(config, **params)
        self._surrogate = surrogate_model
        self._on_device: dict[str, nn.Module] = {}  # device -> the surrogate there

    def with_surrogate(self, name: str, model: nn.Module) -> Transfer:
        """This attack crafting on ``model``, the surrogate the caller resolved for ``config.surrogate`` (``name``:
        its zoo name, which replaces ``"fp_twin"`` in the config, so the store's spec names the model used)."""
        return Transfer(replace(self.config, surrogate=name), surrogate_model=model)

    def surrogate_model(self, device: torch.device) -> nn.Module:
        """The bound surrogate on ``device`` (moved once per device, the caller's copy left where it is)."""
        if self._surrogate is None:
            raise ValueError(
                f"the transfer attack has no surrogate model for {self.config.surrogate!r}: the caller resolves it "
                "(arbibench.evaluation.surrogates.attack_for_target(attack, target_name) loads it from the zoo; "
                "benchmark(), evaluate() and the protocol do this), or pass Transfer(surrogate_model=model)"
            )
        key = str(device)
        if key not in self._on_device:
            here = next(self._surrogate.parameters(), torch.empty(0)).device
            self._on_device[key] = self._surrogate if here == torch.device(device) else (
                copy.deepcopy(self._surrogate).to(device).eval())
        return self._on_device[key]

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


register(Transfer)
