"""ReCU (Xu et al., ICCV 2021; github.com/z-hXu/ReCU): its CIFAR-10 ResNet-20 (``resnet20_1w1a``).

Official keys per binary convolution: ``weight`` (latent), ``alpha`` (C, 1, 1), the learned output scale, and the
buffer ``tau`` of the clamp schedule. In eval mode the convolution computes ``alpha * conv(sign(a), sign(w_std))``
with ``w_std`` the weights standardised per output channel and clamped to ``[-Q(tau), Q(tau)]``, ``Q > 0`` for
``0.5 < tau <= 1``: the clamp keeps every sign, so ``tau`` is checked and dropped.
"""

from __future__ import annotations

import torch

from arbibench.models.importers.source import Conversion, PublishedModel, Source, cifar_resnet_key
from arbibench.models.resnet import IMAGENET_MEAN, IMAGENET_STD

BLOCKS_PER_STAGE = {"resnet20": 3}


def convert(state: dict[str, torch.Tensor], published: PublishedModel, options: dict[str, float]) -> Conversion:
    out = Conversion()
    for key, value in state.items():
        new = cifar_resnet_key(key, BLOCKS_PER_STAGE[published.arch])
        if new.endswith(".tau") and ".conv" in new:
            tau = value.flatten()
            if tau.numel() != 1 or not 0.5 < float(tau) <= 1.0:
                raise ValueError(f"{key} = {tau.tolist()}: ReCU's tau lies in (0.5, 1]; this is not a ReCU file")
            out.drop(key, f"clamp threshold tau = {float(tau):.6g}; the clamp keeps every weight's sign")
        elif new.endswith(".alpha") and ".conv" in new:
            out.map(key, new.removesuffix("alpha") + "kernel_quantizer.alpha", value.reshape(-1, 1, 1, 1),
                    "output scale applied to the kernel")
        else:
            out.map(key, new, value)
    return out


RECU = Source(
    name="recu",
    paper="Xu et al., ReCU: Reviving the Dead Weights in Binary Neural Networks, ICCV 2021",
    repository="https://github.com/z-hXu/ReCU",
    dataset="cifar10",
    mean=IMAGENET_MEAN,  # ReCU's CIFAR-10 loader normalises with the ImageNet statistics
    std=IMAGENET_STD,
    models={
        "resnet20": PublishedModel(
            "resnet20", "recu", "resnet20_1w1a", 87.5,
            "https://drive.google.com/drive/folders/1ikmlm2H5ZjsZYiUvb3qFh4QxSvN6C3ZJ",
        ),
    },
    convert=convert,
    sign_convention="torch.sign (0 -> 0) on activations and centred weights, as ReCU's BinaryQuantize computes it",
)
