"""RBNN (Lin et al., NeurIPS 2020; github.com/lmbxmu/RBNN): CIFAR-10 ``resnet20_1w1a`` and ``resnet20_bireal_1w1a``.

Official keys per binary convolution: ``weight`` (latent), the rotation matrices ``R1`` (a x a) and ``R2`` (b x b)
with a * b = C_in * k * k, the per-channel angle ``rotate`` and the output scale ``alpha`` (C, 1, 1). In eval mode
RBNN binarizes ``w3 = w2 + |sin(rotate)| * (R1^T X R2 - w2)``, ``w2`` the weights standardised per output channel
and ``X`` their (C, a, b) view, and scales the convolution's output by ``alpha``. ``w3`` is computed here once, in
float64, and stored as the weight; ``R1``, ``R2`` and ``rotate`` are consumed by it. Activations: sign of each
sample's input minus its mean (RBNN also divides by the std, which keeps the sign).
"""

from __future__ import annotations

import torch

from arbibench.models.importers.source import Conversion, PublishedModel, Source, cifar_resnet_key, conv_prefix
from arbibench.models.resnet import IMAGENET_MEAN, IMAGENET_STD

BLOCKS_PER_STAGE = {"resnet20": 3, "resnet20_bireal": 3}
ROTATION_PARTS = ("R1", "R2", "rotate")


def rotated_weight(w: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotate: torch.Tensor) -> torch.Tensor:
    """RBNN's eval-mode pre-sign weight ``w2 + |sin(theta)| (R1^T X R2 - w2)``, in ``w``'s dtype (float64 here)."""
    c = w.shape[0]
    a, b = r1.shape[0], r2.shape[0]
    if a * b != w[0].numel() or r1.shape != (a, a) or r2.shape != (b, b):
        shapes = f"{tuple(r1.shape)}, {tuple(r2.shape)}"
        raise ValueError(f"rotation shapes {shapes} do not fit a weight of {tuple(w.shape)}")
    dims = tuple(range(1, w.dim()))
    centred = w - w.mean(dim=dims, keepdim=True)
    standardised = centred / centred.std(dim=dims, keepdim=True)
    rotated = (r1.t() @ standardised.reshape(c, a, b) @ r2).reshape(w.shape)
    return standardised + torch.sin(rotate).abs().reshape(c, 1, 1, 1) * (rotated - standardised)


def convert(state: dict[str, torch.Tensor], published: PublishedModel, options: dict[str, float]) -> Conversion:
    out = Conversion()
    parts: dict[str, dict[str, tuple[str, torch.Tensor]]] = {}
    for key, value in state.items():
        new = cifar_resnet_key(key, BLOCKS_PER_STAGE[published.arch])
        prefix = conv_prefix(new)
        leaf = new.rsplit(".", 1)[-1]
        if prefix is not None and leaf in (*ROTATION_PARTS, "weight"):
            parts.setdefault(prefix, {})[leaf] = (key, value)
        elif prefix is not None and leaf == "alpha":
            out.map(key, f"{prefix}.kernel_quantizer.alpha", value.reshape(-1, 1, 1, 1), "output scale on the kernel")
        else:
            out.map(key, new, value)
    for prefix, found in parts.items():
        absent = [p for p in (*ROTATION_PARTS, "weight") if p not in found]
        if absent:  # a binary convolution without its rotation: not an RBNN file
            have = found[next(iter(found))][0]
            raise ValueError(
                f"{have.rsplit('.', 1)[0]} has no {', '.join(absent)}: this is not an RBNN state dict (is it another "
                "method's? pass the matching --from)"
            )
        w_key, w = found["weight"]
        baked = rotated_weight(w, found["R1"][1], found["R2"][1], found["rotate"][1])
        out.map(w_key, f"{prefix}.weight", baked, "rotated and standardised weight, baked in float64")
        for part in ROTATION_PARTS:
            out.drop(found[part][0], f"baked into {prefix}.weight")
    return out


RBNN = Source(
    name="rbnn",
    paper="Lin et al., Rotated Binary Neural Network, NeurIPS 2020",
    repository="https://github.com/lmbxmu/RBNN",
    dataset="cifar10",
    mean=IMAGENET_MEAN,  # RBNN's CIFAR-10 loader normalises with the ImageNet statistics
    std=IMAGENET_STD,
    models={
        "resnet20": PublishedModel(
            "resnet20", "rbnn", "resnet20_1w1a", 86.5,
            "https://drive.google.com/drive/folders/1aykx5Kar2Y-8mYf13LqvThdTuSlkgtmQ",
        ),
        "resnet20_bireal": PublishedModel(
            "resnet20", "rbnn_bireal", "resnet20_bireal_1w1a", 87.8,
            "https://drive.google.com/drive/folders/1kwZAe0Ock4CptEuAjxs4ENrrv9jrXULm",
        ),
    },
    convert=convert,
    sign_convention="torch.sign (0 -> 0) on centred activations and rotated weights, as RBNN's BinaryQuantize",
)
