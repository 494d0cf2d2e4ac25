"""IR-Net (Qin et al., CVPR 2020; github.com/htqin/IR-Net): its CIFAR-10 ResNet-20 1W/1A (``resnet20_1w1a``).

IR-Net publishes no weights; its ``trainer.py`` writes ``model.th`` (``{"state_dict": ..., "best_prec1": ...}``,
``nn.DataParallel`` keys). The binary convolutions hold only their latent ``weight``: Libra-PB (standardise each
output channel, sign, scale by the power of two nearest the mean magnitude) is computed from it at every forward.
"""

from __future__ import annotations

import torch

from arbibench.models.importers.source import Conversion, PublishedModel, Source, cifar_resnet_key
from arbibench.models.resnet import IMAGENET_MEAN, IMAGENET_STD

BLOCKS_PER_STAGE = {"resnet20": 3}


def convert(state: dict[str, torch.Tensor], published: PublishedModel, options: dict[str, float]) -> Conversion:
    out = Conversion()
    for key, value in state.items():
        out.map(key, cifar_resnet_key(key, BLOCKS_PER_STAGE[published.arch]), value)
    return out


IRNET = Source(
    name="irnet",
    paper="Qin et al., Forward and Backward Information Retention for Accurate Binary Neural Networks, CVPR 2020",
    repository="https://github.com/htqin/IR-Net",
    dataset="cifar10",
    mean=IMAGENET_MEAN,  # IR-Net's CIFAR-10 trainer normalises with the ImageNet statistics
    std=IMAGENET_STD,
    models={
        "resnet20": PublishedModel(
            "resnet20", "irnet_official", "resnet20_1w1a", 86.5,
            "no released weights: train with CIFAR-10/ResNet20/1w1a/trainer.py of github.com/htqin/IR-Net (model.th)",
        ),
    },
    convert=convert,
    sign_convention="torch.sign (0 -> 0) on activations and standardised weights, as IR-Net's BinaryQuantize",
)
