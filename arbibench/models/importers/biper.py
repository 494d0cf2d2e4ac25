"""BiPer (Vargas et al., CVPR 2024; github.com/edmav4/BiPer): its CIFAR-10 ResNet-20 after stage 2.

Official keys per binary convolution: ``weight`` (latent), ``alpha`` (C, 1, 1), the learned output scale, ``beta``
(an initial scale the forward does not read) and a ``tau`` buffer. In eval mode the kernel is
``sign(sin(omega * w))``; it is computed here once, in float64, and stored as the weight. The frequency omega is not
in the file: BiPer's README trains with ``--freq 20`` while its options default (used by its evaluation command
unless ``--freq`` is passed) is 30, so the import takes it as a required option and records it in the card.
"""

from __future__ import annotations

import math

import torch

from arbibench.models.importers.source import Conversion, PublishedModel, Source, cifar_resnet_key, conv_prefix
from arbibench.models.resnet import IMAGENET_MEAN, IMAGENET_STD

BLOCKS_PER_STAGE = {"resnet20": 3}


def convert(state: dict[str, torch.Tensor], published: PublishedModel, options: dict[str, float]) -> Conversion:
    freq = options["freq"]
    if not (math.isfinite(freq) and freq > 0):
        raise ValueError(f"BiPer's frequency must be a finite number > 0, got {freq}")
    out = Conversion()
    for key, value in state.items():
        new = cifar_resnet_key(key, BLOCKS_PER_STAGE[published.arch])
        prefix = conv_prefix(new)
        leaf = new.rsplit(".", 1)[-1]
        if prefix is None:
            out.map(key, new, value)
        elif leaf == "weight":
            out.map(key, new, torch.sign(torch.sin(freq * value)), f"sign(sin({freq:g} w)), baked in float64")
        elif leaf == "alpha":
            out.map(key, f"{prefix}.kernel_quantizer.alpha", value.reshape(-1, 1, 1, 1), "output scale on the kernel")
        elif leaf == "beta":
            out.drop(key, "stage-2 initial scale; the forward does not read it")
        elif leaf == "tau":
            out.drop(key, "training schedule buffer; the forward does not read it")
        else:
            out.map(key, new, value)
    return out


BIPER = Source(
    name="biper",
    paper="Vargas et al., BiPer: Binary Neural Networks using a Periodic Function, CVPR 2024",
    repository="https://github.com/edmav4/BiPer",
    dataset="cifar10",
    mean=IMAGENET_MEAN,  # BiPer's CIFAR-10 loader normalises with the ImageNet statistics
    std=IMAGENET_STD,
    models={
        "resnet20": PublishedModel(
            "resnet20", "biper", "resnet20_1w1a", 86.98,
            "https://drive.google.com/file/d/1s5iMXNzY4jQmum-pjRX7AgFJ4Qcj9zQ5",
        ),
    },
    convert=convert,
    sign_convention="torch.sign (0 -> 0) on activations and on sin(omega w), as BiPer's BinaryQuantize",
    options=("freq",),
    option_help="BiPer's frequency omega is not in the file: pass --freq 20 (its README's training command) or "
    "--freq 30 (its options default, which its evaluation command uses unless --freq is given); --expect-acc "
    "tells which one reproduces the paper.",
)
