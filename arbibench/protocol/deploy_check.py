"""Does robustness measured on the float simulation of a BNN hold for its deployed, bit-packed network?

Every robustness number arbibench reports is measured on the *simulation* (:mod:`arbibench.deploy.semantics`). The
network that ships runs integer XNOR-popcount convolutions with a folded epilogue, which rounds differently, and
adversarial examples sit on decision boundaries by construction, where a rounding difference decides. Three
measurements, on a protocol preset's own images:

(a) **clean agreement**: the share of images on which the simulation and the deployed network predict the same class
    (exact zero padding, and the +1-padded network of hardware without zero padding);
(b) **transfer to deployment**: for every attack of the preset, run against the simulation as the protocol runs it,
    the share of its successful adversarial examples that also fool the deployed network (Wilson 95% intervals);
(c) **direct attack**: Square, HopSkipJump and RayS run against the deployed network itself and against the
    simulation on the same images and seed: ACC* of each and the paired difference (deployed minus simulation) with
    a 95% bootstrap interval over images.

Every adversarial example is verified against the threat model by the attack before it counts (:meth:`Attack.output`);
only images both networks classify correctly are attacked, so (b) and (c) compare like with like.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from arbibench.attacks import BLACK_BOX, WHITE_BOX, get_attack, get_threat_model
from arbibench.attacks.threat import ThreatModel
from arbibench.data.datasets import load_dataset
from arbibench.deploy import deploy
from arbibench.evaluation.bootstrap import bootstrap_image_means, percentile_interval
from arbibench.evaluation.cards import checkpoint_sha256
from arbibench.evaluation.metrics import wilson_interval
from arbibench.evaluation.surrogates import attack_for_target
from arbibench.models.zoo import load_model
from arbibench.protocol.presets import AttackSpec, Protocol
from arbibench.protocol.run import protocol_subsets

DIRECT_ATTACKS = ("square", "hsja", "rays")


@dataclass(frozen=True)
class CleanAgreement:
    """Predictions of the simulation and of one deployed variant on the same clean images."""

    variant: str  # "deployed (zero padding)" or "deployed, pad=+1 (hardware without zero padding)"
    n_images: int
    agree: int
    interval: tuple[float, float]
    acc_simulation: float
    acc_deployed: float
    max_logit_difference: float

    @property
    def agreement(self) -> float:
        return self.agree / self.n_images


@dataclass(frozen=True)
class TransferToDeployment:
    """Of the adversarial examples that fool the simulation, how many also fool the deployed network."""

    attack: str
    family: str
    attacked: int  # images both networks classify correctly, handed to the attack
    fooled_simulation: int
    also_fool_deployed: int
    interval: tuple[float, float] | None  # Wilson 95% of the share; None when nothing fooled the simulation

    @property
    def share(self) -> float | None:
        return None if self.fooled_simulation == 0 else self.also_fool_deployed / self.fooled_simulation


@dataclass(frozen=True)
class DirectAttack:
    """One query attack run against each network on the same images: ACC* of each and the paired difference."""

    attack: str
    attacked: int
    acc_star_simulation: float
    acc_star_deployed: float
    difference: tuple[float, float, float]  # deployed - simulation, with its 95% interval


@dataclass
class DeployCheck:
    """The deploy check of one model under one preset; ``to_card`` is the deploy card's JSON."""

    model_name: str
    protocol: str
    checkpoint_sha256: str
    backend: str
    images: dict[str, str]
    clean: list[CleanAgreement] = field(default_factory=list)
    transfer: list[TransferToDeployment] = field(default_factory=list)
    direct: list[DirectAttack] = field(default_factory=list)

    def to_card(self) -> dict[str, Any]:
        def rows(items: Sequence[Any]) -> list[dict[str, Any]]:
            return [{**asdict(r), **({"share": r.share} if isinstance(r, TransferToDeployment) else {}),
                     **({"agreement": r.agreement} if isinstance(r, CleanAgreement) else {})} for r in items]

        return {
            "name": self.model_name,
            "kind": "deploy_check",
            "protocol": self.protocol,
            "checkpoint_sha256": self.checkpoint_sha256,
            "deployed_backend": self.backend,
            "semantics": "simulation: the float model arbibench trains and attacks; deployed: integer XNOR-popcount "
            "convolutions, exact zero padding, scale and BatchNorm folded into a per-channel epilogue "
            "(arbibench.deploy.semantics)",
            "images": self.images,
            "clean_agreement": rows(self.clean),
            "transfer_to_deployed": rows(self.transfer),
            "direct_attacks": rows(self.direct),
        }


@torch.no_grad()
def _logits(model: nn.Module, x: torch.Tensor, batch_size: int) -> torch.Tensor:
    return torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


def clean_agreement(
    simulation: nn.Module, deployed: nn.Module, x: torch.Tensor, y: torch.Tensor, variant: str, batch_size: int = 500
) -> CleanAgreement:
    """(a): how often the deployed network predicts what the simulation predicts on clean images."""
    ls, ld = _logits(simulation, x, batch_size), _logits(deployed, x, batch_size)
    ps, pd = ls.argmax(1), ld.argmax(1)
    agree = int((ps == pd).sum())
    return CleanAgreement(
        variant, len(y), agree, wilson_interval(agree, len(y)), float((ps == y).float().mean()),
        float((pd == y).float().mean()), float((ls - ld).abs().max()),
    )


def _attack_batches(
    attack_name: str, kwargs: dict[str, Any], target: nn.Module, model_name: str, x: torch.Tensor, y: torch.Tensor,
    threat: ThreatModel, seed: int, batch_size: int,
) -> torch.Tensor:
    """The verified adversarial images of one attack against ``target``, batch by batch with a seeded generator."""
    attack = attack_for_target(get_attack(attack_name, **kwargs), model_name)
    gen = torch.Generator().manual_seed(seed)
    out = [attack.output(target, x[i : i + batch_size], y[i : i + batch_size], threat, gen).x_adv
           for i in range(0, len(y), batch_size)]
    return torch.cat(out) if out else x.clone()


def transfer_to_deployed(
    simulation: nn.Module, deployed: nn.Module, model_name: str, attack: str, family: str, kwargs: dict[str, Any],
    x: torch.Tensor, y: torch.Tensor, threat: ThreatModel, seed: int = 0, batch_size: int = 200,
) -> TransferToDeployment:
    """(b) for one attack: ``x, y`` are images both networks classify correctly."""
    x_adv = _attack_batches(attack, kwargs, simulation, model_name, x, y, threat, seed, batch_size)
    fooled = _logits(simulation, x_adv, batch_size).argmax(1) != y
    also = fooled & (_logits(deployed, x_adv, batch_size).argmax(1) != y)
    n_fooled, n_also = int(fooled.sum()), int(also.sum())
    return TransferToDeployment(attack, family, len(y), n_fooled, n_also,
                                wilson_interval(n_also, n_fooled) if n_fooled else None)


def direct_attack(
    simulation: nn.Module, deployed: nn.Module, model_name: str, attack: str, kwargs: dict[str, Any],
    x: torch.Tensor, y: torch.Tensor, threat: ThreatModel, seed: int = 0, batch_size: int = 200,
) -> DirectAttack:
    """(c) for one query attack: ACC* against each network on the same images and seed, and the paired difference."""
    robust = {}
    for label, target in (("simulation", simulation), ("deployed", deployed)):
        x_adv = _attack_batches(attack, kwargs, target, model_name, x, y, threat, seed, batch_size)
        robust[label] = (_logits(target, x_adv, batch_size).argmax(1) == y).numpy().astype(np.float64)
    diff = robust["deployed"] - robust["simulation"]
    samples = bootstrap_image_means(diff[None, :], lambda means: means[:, 0], seed=seed)
    est = percentile_interval(samples, float(diff.mean()))
    return DirectAttack(attack, len(y), float(robust["simulation"].mean()), float(robust["deployed"].mean()),
                        (est.value, est.low, est.high))


def check_attacks(protocol: Protocol, attacks: Sequence[str] | None) -> list[AttackSpec]:
    """The attacks of ``protocol`` named in ``attacks`` (None: all of them); a ValueError names any it lacks, so a
    misspelt name is refused before the clean pass, not after it."""
    if attacks is not None and not attacks:
        raise ValueError(f"no attack named; pass attacks of {protocol.label}: "
                         f"{', '.join(s.name for s in protocol.attacks)}")
    chosen = [s for s in protocol.attacks if attacks is None or s.name in attacks]
    if attacks is not None and len(chosen) != len(set(attacks)):
        known = ", ".join(s.name for s in protocol.attacks)
        raise ValueError(f"attacks {sorted(set(attacks) - {s.name for s in chosen})} are not in {protocol.label}; "
                         f"its attacks: {known}")
    return chosen


def run_deploy_check(
    model_name: str,
    protocol: Protocol,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    attacks: Sequence[str] | None = None,
    clean_images: int | None = None,
    backend: str = "auto",
    log: Callable[[str], object] = print,
) -> DeployCheck:
    """Measure (a), (b) and (c) for a zoo BNN on ``protocol``'s images (white-box images for (a), black-box images
    for (b) and (c)); ``clean_images`` also measures (a) on the first N test images (10,000: the whole test set)."""
    chosen = check_attacks(protocol, attacks)  # before any model is loaded or deployed
    simulation = load_model(model_name, dataset=protocol.dataset)
    deployed_net = deploy(simulation, backend=backend)
    padded = deploy(simulation, backend=backend, pad=1)
    threat = get_threat_model(protocol.threat_model, protocol.eps)
    subsets = protocol_subsets(protocol, data_dir)
    xw, yw, _ = subsets[WHITE_BOX]
    xb, yb, _ = subsets[BLACK_BOX]
    check = DeployCheck(
        model_name, protocol.label, checkpoint_sha256(model_name, protocol.dataset), deployed_net.backend,
        images={"clean": protocol.subset_text(WHITE_BOX), "attacks": protocol.subset_text(BLACK_BOX)},
    )
    log(f"{model_name}: clean agreement on {len(yw)} images")
    check.clean.append(clean_agreement(simulation, deployed_net, xw, yw, "deployed (zero padding)"))
    check.clean.append(clean_agreement(simulation, padded, xw, yw, "deployed, pad=+1 (hardware without zero padding)"))
    if clean_images:
        xt, yt, _ = load_dataset(protocol.dataset, clean_images, data_dir, None)
        check.images["clean_full"] = f"the first {len(yt)} test images"
        variant = f"deployed (zero padding), {len(yt)} images"
        check.clean.append(clean_agreement(simulation, deployed_net, xt, yt, variant))
    both = (_logits(simulation, xb, 500).argmax(1) == yb) & (_logits(deployed_net, xb, 500).argmax(1) == yb)
    xa, ya = xb[both], yb[both]
    for spec in chosen:
        log(f"{model_name}: {spec.name} against the simulation, {len(ya)} images")
        check.transfer.append(transfer_to_deployed(simulation, deployed_net, model_name, spec.name, spec.family,
                                                   spec.kwargs, xa, ya, threat, protocol.seed, protocol.batch_size))
    for spec in protocol.black_box:
        if spec.name in DIRECT_ATTACKS and (attacks is None or spec.name in attacks):
            log(f"{model_name}: {spec.name} against the deployed network, {len(ya)} images")
            check.direct.append(direct_attack(simulation, deployed_net, model_name, spec.name, spec.kwargs, xa, ya,
                                              threat, protocol.seed, protocol.batch_size))
    return check
