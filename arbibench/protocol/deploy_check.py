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
from typing import Any

import numpy as np
import torch
from torch import nn

from arbibench.attacks import BLACK_BOX, WHITE_BOX, get_attack, get_threat_model
from arbibench.attacks.threat import ThreatModel
from arbibench.cards import (
    ONES_PADDING,
    PROTOCOL_IMAGES,
    TEST_SET_IMAGES,
    ZERO_PADDING,
    CleanAgreement,
    DeployCheckCard,
    DirectAttack,
    Interval,
    TransferToDeployment,
)
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


SEMANTICS = ("simulation: the float model arbibench trains and attacks; deployed: integer XNOR-popcount convolutions, "
             "exact zero padding, scale and BatchNorm folded into a per-channel epilogue (arbibench.deploy.semantics)")


@torch.no_grad()
def _logits(model: nn.Module, x: torch.Tensor, batch_size: int) -> torch.Tensor:
    return torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


def clean_agreement(
    simulation: nn.Module, deployed: nn.Module, x: torch.Tensor, y: torch.Tensor, variant: str, batch_size: int = 500,
    *, padding: str = ZERO_PADDING, images: str = PROTOCOL_IMAGES,
) -> CleanAgreement:
    """(a): how often the deployed network (padded with ``padding``) predicts what the simulation predicts on the
    clean ``images`` (a key of the card's ``images``)."""
    ls, ld = _logits(simulation, x, batch_size), _logits(deployed, x, batch_size)
    ps, pd = ls.argmax(1), ld.argmax(1)
    agree = int((ps == pd).sum())
    return CleanAgreement(
        variant=variant, n_images=len(y), agree=agree, interval=wilson_interval(agree, len(y)),
        acc_simulation=float((ps == y).float().mean()), acc_deployed=float((pd == y).float().mean()),
        max_logit_difference=float((ls - ld).abs().max()), padding=padding, images=images,
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
    return TransferToDeployment(attack=attack, family=family, attacked=len(y), fooled_simulation=n_fooled,
                                also_fool_deployed=n_also,
                                interval=wilson_interval(n_also, n_fooled) if n_fooled else None)


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
    return DirectAttack(attack=attack, attacked=len(y), acc_star_simulation=float(robust["simulation"].mean()),
                        acc_star_deployed=float(robust["deployed"].mean()),
                        difference=Interval(value=est.value, low=est.low, high=est.high))


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
) -> DeployCheckCard:
    """Measure (a), (b) and (c) for a zoo BNN on ``protocol``'s images (white-box images for (a), black-box images
    for (b) and (c)); ``clean_images`` also measures (a) on the first N test images (10,000: the whole test set).
    Returns the deploy card."""
    chosen = check_attacks(protocol, attacks)  # before any model is loaded or deployed
    simulation = load_model(model_name, dataset=protocol.dataset)
    deployed_net = deploy(simulation, backend=backend)
    padded = deploy(simulation, backend=backend, pad=1)
    threat = get_threat_model(protocol.threat_model, protocol.eps)
    subsets = protocol_subsets(protocol, data_dir)
    xw, yw, _ = subsets[WHITE_BOX]
    xb, yb, _ = subsets[BLACK_BOX]
    images = {PROTOCOL_IMAGES: protocol.subset_text(WHITE_BOX), "attacks": protocol.subset_text(BLACK_BOX)}
    log(f"{model_name}: clean agreement on {len(yw)} images")
    clean = [clean_agreement(simulation, deployed_net, xw, yw, "deployed (zero padding)"),
             clean_agreement(simulation, padded, xw, yw, "deployed, pad=+1 (hardware without zero padding)",
                             padding=ONES_PADDING)]
    if clean_images:
        xt, yt, _ = load_dataset(protocol.dataset, clean_images, data_dir, None)
        images[TEST_SET_IMAGES] = f"the first {len(yt)} test images"
        clean.append(clean_agreement(simulation, deployed_net, xt, yt, f"deployed (zero padding), {len(yt)} images",
                                     images=TEST_SET_IMAGES))
    both = (_logits(simulation, xb, 500).argmax(1) == yb) & (_logits(deployed_net, xb, 500).argmax(1) == yb)
    xa, ya = xb[both], yb[both]
    transfer = []
    for spec in chosen:
        log(f"{model_name}: {spec.name} against the simulation, {len(ya)} images")
        transfer.append(transfer_to_deployed(simulation, deployed_net, model_name, spec.name, spec.family,
                                             spec.kwargs, xa, ya, threat, protocol.seed, protocol.batch_size))
    direct = []
    for spec in protocol.black_box:
        if spec.name in DIRECT_ATTACKS and (attacks is None or spec.name in attacks):
            log(f"{model_name}: {spec.name} against the deployed network, {len(ya)} images")
            direct.append(direct_attack(simulation, deployed_net, model_name, spec.name, spec.kwargs, xa, ya,
                                        threat, protocol.seed, protocol.batch_size))
    return DeployCheckCard(
        name=model_name, protocol=protocol.label, checkpoint_sha256=checkpoint_sha256(model_name, protocol.dataset),
        deployed_backend=deployed_net.backend, semantics=SEMANTICS, images=images, clean_agreement=tuple(clean),
        transfer_to_deployed=tuple(transfer), direct_attacks=tuple(direct),
    )
