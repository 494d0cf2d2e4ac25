"""What an importer is: the published files it reads, and one conversion from their state dict to an arbibench model.

A conversion maps every key of the official state dict to an arbibench key, bakes what the method derives from
several tensors into one (in float64), or drops a tensor the eval-mode forward does not read, and says which it did
for each key; the card of an imported model lists them all. The result must be exactly the arbibench model's state
dict: a missing, unexpected or mis-shaped key is an error that lists the keys, never a partial load.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from arbibench.models.architectures import build_model

MAX_LISTED = 8


@dataclass(frozen=True)
class PublishedModel:
    """One architecture a source publishes: the arbibench backbone and preset that compute its forward pass."""

    arch: str  # arbibench backbone
    method: str  # arbibench preset
    official_name: str  # the model's name in the paper's code
    paper_acc: float  # top-1 accuracy (%) the paper / repository reports for the published file
    download: str  # where users download the file


@dataclass
class Conversion:
    """The converted tensors (arbibench names, float64) and, per official key, what became of it."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # official key -> "-> arbibench key", "baked ...", "dropped ..."
    origin: dict[str, str] = field(default_factory=dict)  # arbibench key -> official key(s), for error messages

    def map(self, official: str, target: str, value: torch.Tensor, note: str = "") -> None:
        if target in self.tensors:
            raise ValueError(f"official keys {self.origin[target]} and {official} both map to {target}")
        self.tensors[target] = value
        self.origin[target] = official
        self.keys[official] = f"-> {target}" + (f" ({note})" if note else "")

    def drop(self, official: str, reason: str) -> None:
        self.keys[official] = f"dropped: {reason}"


Converter = Callable[[dict[str, torch.Tensor], PublishedModel, dict[str, float]], Conversion]


@dataclass(frozen=True)
class Source:
    """A paper's official code base: what it publishes, how its files are normalised, and its conversion."""

    name: str
    paper: str
    repository: str
    dataset: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    models: dict[str, PublishedModel]  # by the --arch name users pass
    convert: Converter
    sign_convention: str  # which sign the import computes, and why
    options: tuple[str, ...] = ()  # hyper-parameters the file does not hold; each must be passed at import
    option_help: str = ""

    def model(self, arch: str) -> PublishedModel:
        if arch not in self.models:
            raise ValueError(
                f"source {self.name!r} has no architecture {arch!r}; it publishes: {', '.join(self.models)}"
            )
        return self.models[arch]


def _listed(keys: list[str]) -> str:
    shown = ", ".join(keys[:MAX_LISTED])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > MAX_LISTED else "")


def build_converted_model(
    source: Source, published: PublishedModel, state: dict[str, torch.Tensor], options: dict[str, float]
) -> tuple[nn.Module, Conversion]:
    """The arbibench model holding an official state dict, in eval mode, and the per-key record of the conversion.

    Raises ValueError naming the file's missing, unexpected and mis-shaped keys (official names where they have
    one): a file of another method or architecture is refused here, before anything is written.
    """
    model = build_model(published.arch, published.method)
    conversion = source.convert({k: v.detach().to(torch.float64) for k, v in state.items()}, published, options)
    conversion.tensors["normalize.mean"] = torch.tensor(source.mean, dtype=torch.float64).view(1, -1, 1, 1)
    conversion.tensors["normalize.std"] = torch.tensor(source.std, dtype=torch.float64).view(1, -1, 1, 1)
    expected = model.state_dict()
    for key in expected:  # PyTorch < 0.4.1 saved no BatchNorm step counter; eval mode never reads it
        if key.endswith("num_batches_tracked") and key not in conversion.tensors:
            conversion.tensors[key] = torch.zeros((), dtype=torch.float64)
            conversion.origin[key] = "(not in the file: set to 0, unused in eval mode)"
    missing = [k for k in expected if k not in conversion.tensors]
    unexpected = [conversion.origin.get(k, k) for k in conversion.tensors if k not in expected]
    mismatched = [
        f"{conversion.origin.get(k, k)} (file {tuple(conversion.tensors[k].shape)}, {published.official_name} "
        f"{tuple(v.shape)})"
        for k, v in expected.items()
        if k in conversion.tensors and conversion.tensors[k].shape != v.shape
    ]
    problems = [
        f"{label}: {_listed(keys)}"
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape mismatch", mismatched))
        if keys
    ]
    if problems:
        raise ValueError(
            f"this file is not a {source.name} {published.official_name} state dict (is it another method or "
            f"architecture? pass the matching --from / --arch): " + "; ".join(problems)
        )
    model.load_state_dict({k: conversion.tensors[k].to(v.dtype) for k, v in expected.items()})
    return model.eval(), conversion


# -- key renaming shared by the CIFAR ResNets of Idelbayev's layout (RBNN, SiMaN, ReCU, BiPer, IR-Net) -------------

_BLOCK = re.compile(r"^layer(\d+)\.(\d+)\.(.+)$")


def cifar_resnet_key(key: str, blocks_per_stage: int) -> str:
    """arbibench's name for a key of the ``layer1..3`` / ``bn2`` (BatchNorm1d) / ``linear`` CIFAR ResNet code."""
    if m := _BLOCK.match(key):
        stage, block, rest = int(m.group(1)), int(m.group(2)), m.group(3)
        return f"layers.{(stage - 1) * blocks_per_stage + block}.{rest}"
    if key.startswith("bn2."):
        return "classifier_bn." + key.removeprefix("bn2.")
    if key.startswith("linear."):
        return "fc." + key.removeprefix("linear.")
    return key


def conv_prefix(key: str) -> str | None:
    """``layers.4.conv2`` for ``layers.4.conv2.<anything>``, else None."""
    m = re.match(r"^(layers\.\d+\.conv\d)\.[^.]+$", key)
    return m.group(1) if m else None
