"""ReActNet (Liu et al., ECCV 2020; github.com/liuzechun/ReActNet): the released ReAct-ResNet-18 (ImageNet).

The official model is a Bi-Real-18: four stages of four single-convolution blocks ``layerS.B``, each
``move0`` (bias before the sign) -> sign -> ``binary_conv`` (mean|W_c| sign(W)) -> ``bn1`` -> + shortcut ->
``move1`` -> ``prelu`` -> ``move2``; block 0 of stages 2-4 has ``downsample`` (2x2 average pool, 1x1 conv, batch
norm). The stem (``conv1``, ``bn1``, max pool) has no activation. arbibench's ResNet-18 groups the blocks in pairs:
``layerS.B`` is ``layers.{2(S-1) + B // 2}``, convolution ``B % 2 + 1``. RSign's threshold is ``-move0.bias`` and
RPReLU's shifts are ``-move1.bias`` and ``move2.bias`` (negation is exact, so the sums are bit-identical).

Files saved before the repository's October 2020 update hold each binary convolution as ``binary_conv.weights``, a
flat ``(out * in * k * k, 1)`` parameter that the old ``HardBinaryConv`` viewed as ``(out, in, k, k)`` in row-major
order; both layouts are read, the flat one reshaped the same way (out from the block's ``bn1``, in from ``move0``).
"""

from __future__ import annotations

import math
import re

import torch

from arbibench.models.importers.source import Conversion, PublishedModel, Source
from arbibench.models.resnet import IMAGENET_MEAN, IMAGENET_STD

_BLOCK = re.compile(r"^layer(\d)\.(\d+)\.(.+)$")
BLOCKS_PER_STAGE = 4  # single-convolution blocks per stage in the official model


def _target(stage: int, block: int, rest: str) -> tuple[str, str] | None:
    """arbibench key and the sign to apply for one official block key, or None for an unknown one."""
    unit, j = f"layers.{2 * (stage - 1) + block // 2}", block % 2 + 1
    table = {
        "move0.bias": (f"{unit}.conv{j}.input_quantizer.threshold", "-"),
        "binary_conv.weight": (f"{unit}.conv{j}.weight", "+"),
        "binary_conv.weights": (f"{unit}.conv{j}.weight", "+"),  # the pre-2020-10 flat layout
        "move1.bias": (f"{unit}.act{j}.shift_in", "-"),
        "prelu.weight": (f"{unit}.act{j}.prelu.weight", "+"),
        "move2.bias": (f"{unit}.act{j}.shift_out", "+"),
    }
    if rest in table:
        return table[rest]
    if rest.startswith("bn1."):
        return f"{unit}.bn{j}.{rest.removeprefix('bn1.')}", "+"
    if rest.startswith("downsample.") and j == 1:
        return f"{unit}.shortcut.{rest.removeprefix('downsample.')}", "+"
    return None


def _unflatten(state: dict[str, torch.Tensor], key: str, block: str, flat: torch.Tensor) -> torch.Tensor:
    """The old layout's ``(out * in * k * k, 1)`` weights as ``(out, in, k, k)``, as ``weights.view(shape)`` did."""
    need = [block + "bn1.weight", block + "move0.bias"]
    if any(k not in state for k in need):
        raise ValueError(
            f"{key} is a flat (pre-2020-10) ReActNet weight, but the file lacks {' or '.join(need)} "
            "that give its (out, in) channels: it is not a complete ReAct-ResNet-18 state dict"
        )
    out_ch, in_ch = state[need[0]].numel(), state[need[1]].numel()
    k = math.isqrt(flat.numel() // (out_ch * in_ch)) if flat.numel() >= out_ch * in_ch else 0
    if flat.dim() != 2 or flat.shape[1] != 1 or k == 0 or out_ch * in_ch * k * k != flat.numel():
        raise ValueError(
            f"{key} has shape {tuple(flat.shape)}; a flat ReActNet weight of a {in_ch} -> {out_ch} "
            f"convolution is (out * in * k * k, 1) = ({out_ch} * {in_ch} * k * k, 1)"
        )
    return flat.reshape(out_ch, in_ch, k, k)


def convert(state: dict[str, torch.Tensor], published: PublishedModel, options: dict[str, float]) -> Conversion:
    out = Conversion()
    for key, value in state.items():
        m = _BLOCK.match(key)
        target = _target(int(m.group(1)), int(m.group(2)), m.group(3)) if m else None
        if m is None:
            out.map(key, key, value)  # conv1, bn1, fc: the same names
        elif target is None:
            out.map(key, key, value)  # left under its own name, reported as unexpected
        elif m.group(3) == "binary_conv.weights":
            block = key.removesuffix("binary_conv.weights")
            out.map(
                key, target[0], _unflatten(state, key, block, value), "flat (N, 1) layout reshaped to (out, in, k, k)"
            )
        else:
            name, sign = target
            out.map(key, name, -value if sign == "-" else value, "negated" if sign == "-" else "")
    return out


REACTNET = Source(
    name="reactnet",
    paper="Liu et al., ReActNet: Towards Precise Binary Neural Network with Generalized Activation Functions, "
    "ECCV 2020",
    repository="https://github.com/liuzechun/ReActNet",
    dataset="imagenet",
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    models={
        "resnet18_imagenet": PublishedModel(
            "resnet18_imagenet",
            "reactnet_official",
            "birealnet18 (ReAct-ResNet-18, step 2)",
            65.9,
            "https://github.com/liuzechun/ReActNet#models (Model-ReAct-ResNet)",
        ),
    },
    convert=convert,
    sign_convention="torch.sign (0 -> 0) on activations and weights, as ReActNet's BinaryActivation / HardBinaryConv",
)
