"""SiMaN (Lin et al., TPAMI 2022; github.com/lmbxmu/SiMaN): its CIFAR-10 ResNet-20 (``resnet20_1w1a``).

Official keys per binary convolution: ``weight`` (latent), ``alpha`` (C, 1, 1), the stored binary codes ``B``
(C, 1, C_in * k * k, in {0, 1}) and the clipping buffer ``percent``. In eval mode SiMaN's kernel is ``2B - 1`` (its
latent-weight terms cancel exactly), so ``2B - 1`` becomes the weight and the latent weight and ``percent`` are
dropped. Each block's ``nonlinear1`` / ``nonlinear2`` PReLU is its activation; ReLU follows the stem.
"""

from __future__ import annotations

import torch

from arbibench.models.importers.source import Conversion, PublishedModel, Source, cifar_resnet_key, conv_prefix
from arbibench.models.resnet import IMAGENET_MEAN, IMAGENET_STD

BLOCKS_PER_STAGE = {"resnet20": 3}


def convert(state: dict[str, torch.Tensor], published: PublishedModel, options: dict[str, float]) -> Conversion:
    out = Conversion()
    shapes = {k: v.shape for k, v in state.items()}
    for key, value in state.items():
        new = cifar_resnet_key(key, BLOCKS_PER_STAGE[published.arch]).replace(".nonlinear", ".act")
        prefix = conv_prefix(new)
        leaf = new.rsplit(".", 1)[-1]
        if prefix is None:
            out.map(key, new, value)
        elif leaf == "B":
            weight_shape = shapes.get(key.removesuffix("B") + "weight")
            if weight_shape is None or value.numel() != torch.Size(weight_shape).numel():
                raise ValueError(f"{key} of shape {tuple(value.shape)} does not fit its convolution's weight")
            if not bool(((value == 0) | (value == 1)).all()):
                raise ValueError(f"{key} holds values other than 0 and 1: it is not SiMaN's binary code")
            out.map(key, f"{prefix}.weight", (2 * value - 1).reshape(weight_shape), "binary kernel 2B - 1")
        elif leaf == "weight":
            out.drop(key, f"latent weight; the eval-mode kernel is 2B - 1 ({prefix}.B)")
        elif leaf == "percent":
            out.drop(key, "clipping percentile of the latent weights; the eval-mode kernel does not read it")
        elif leaf == "alpha":
            out.map(key, f"{prefix}.kernel_quantizer.alpha", value.reshape(-1, 1, 1, 1), "output scale on the kernel")
        else:
            out.map(key, new, value)
    return out


SIMAN = Source(
    name="siman",
    paper="Lin et al., SiMaN: Sign-to-Magnitude Network Binarization, IEEE TPAMI 2022",
    repository="https://github.com/lmbxmu/SiMaN",
    dataset="cifar10",
    mean=IMAGENET_MEAN,  # SiMaN's CIFAR-10 loader normalises with the ImageNet statistics
    std=IMAGENET_STD,
    models={
        "resnet20": PublishedModel(
            "resnet20", "siman", "resnet20_1w1a", 87.4,
            "https://drive.google.com/drive/folders/1-1HXFFsw0bGplsA-pkYetl-ETFpvLGiL",
        ),
    },
    convert=convert,
    sign_convention="torch.sign (0 -> 0) on centred activations, as SiMaN's BinaryQuantize; weights are 2B - 1",
)
