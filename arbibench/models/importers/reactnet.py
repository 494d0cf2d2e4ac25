"""ReActNet (Liu et al., ECCV 2020; github.com/liuzechun/ReActNet): the released ReAct-ResNet-18 (ImageNet).

The official model is a Bi-Real-18: four stages of four single-convolution blocks ``layerS.B``, each
``move0`` (bias before the sign) -> sign -> ``binary_conv`` (mean|W_c| sign(W)) -> ``bn1`` -> + shortcut ->
``move1`` -> ``prelu`` -> ``move2``; block 0 of stages 2-4 has ``downsample`` (2x2 average pool, 1x1 conv, batch
norm). The stem (``conv1``, ``bn1``, max pool) has no activation. arbibench's ResNet-18 groups the blocks in pairs:
``layerS.B`` is ``layers.{2(S-1) + B // 2}``, convolution ``B % 2 + 1``. RSign's threshold is ``-move0.bias`` and
RPReLU's shifts are ``-move1.bias`` and ``move2.bias`` (negation is exact, so the sums are bit-identical).
"""

from __future__ import annotations

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


def convert(state: dict[str, torch.Tensor], published: PublishedModel, options: dict[str, float]) -> Conversion:
    out = Conversion()
    for key, value in state.items():
        m = _BLOCK.match(key)
        target = _target(int(m.group(1)), int(m.group(2)), m.group(3)) if m else None
        if m is None:
            out.map(key, key, value)  # conv1, bn1, fc: the same names
        elif target is None:
            out.map(key, key, value)  # left under its own name, reported as unexpected
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
            "resnet18_imagenet", "reactnet_official", "birealnet18 (ReAct-ResNet-18, step 2)", 65.9,
            "https://github.com/liuzechun/ReActNet#models (Model-ReAct-ResNet)",
        ),
    },
    convert=convert,
    sign_convention="torch.sign (0 -> 0) on activations and weights, as ReActNet's BinaryActivation / HardBinaryConv",
)
