"""Run checkpoints: atomic safetensors for tensors (no pickle), the optimiser's state, and the verified starting point.

Every epoch ends with an atomic checkpoint, so a killed run restarts from its last finished epoch and produces the
same weights as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from arbibench.faults import fault_point
from arbibench.models.architectures import ARCHITECTURES
from arbibench.models.methods import METHODS
from arbibench.models.zoo import CHECKPOINT_DIR, ZOO, ChecksumError, sha256_file, verified_checkpoint


def atomic_save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    tmp = path.with_name(path.name + ".tmp")
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    fault_point("checkpoint.write")  # crash tests kill here (arbibench.faults)
    os.replace(tmp, path)


def optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    sd = opt.state_dict()
    tensors = {f"{i}.{k}": v for i, st in sd["state"].items() for k, v in st.items() if torch.is_tensor(v)}
    return tensors, {"param_groups": sd["param_groups"]}


def load_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, v in tensors.items():
        i, k = key.split(".", 1)
        state.setdefault(int(i), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def init_checkpoint(spec: str) -> Path:
    """A zoo model name resolves to its sha256-verified shipped checkpoint; anything else is a file path.

    A model exported into the zoo folder but not yet registered (the queue of ``make zoo`` trains the adversarially
    trained BNNs from ``resnet20_fp_at`` right after exporting it) is verified against its card's sha256; so is a
    zoo model re-exported by the queue and not yet re-pinned, when its card names the pinned version as the one it
    replaced (the queue continues ``resnet20_reactnet`` right after re-estimating its statistics).
    """
    exported, card = CHECKPOINT_DIR / f"{spec}.safetensors", CHECKPOINT_DIR / f"{spec}.json"
    if spec in ZOO:
        try:
            return verified_checkpoint(ZOO[spec])
        except ChecksumError:
            replaced = json.loads(card.read_text()).get("previous_versions", []) if card.is_file() else []
            if ZOO[spec].sha256 not in {v.get("sha256") for v in replaced}:
                raise
    if exported.is_file() and card.is_file():
        expected = json.loads(card.read_text()).get("sha256")
        if sha256_file(exported) != expected:
            raise ChecksumError(f"{exported} does not match the sha256 in {card}; export it again")
        return exported
    if not Path(spec).is_file():
        unshipped = _zoo_name_parts(spec)
        if unshipped is not None:  # a model of a known backbone and method that no one has exported here yet
            arch, method = unshipped
            recipe = "at" if method.endswith("_at") else "paper"
            raise FileNotFoundError(
                f"{spec!r} is not in the zoo yet: train and export it first (arbibench train --arch {arch} --method "
                f"{method.removesuffix('_at')} --recipe {recipe} --export), or pass a checkpoint file")
        raise FileNotFoundError(f"{spec!r} is neither a zoo model name nor an existing checkpoint file")
    return Path(spec)


def _zoo_name_parts(name: str) -> tuple[str, str] | None:
    """(backbone, method) of a name of the zoo's form ``<arch>_<method>[_at]``, the longest backbone first
    (``resnet18_imagenet_bnn``); None for anything else."""
    for arch in sorted(ARCHITECTURES, key=len, reverse=True):
        method = name.removeprefix(f"{arch}_")
        if method != name and method.removesuffix("_at") in METHODS:
            return arch, method
    return None


def load_matching(model: nn.Module, tensors: dict[str, torch.Tensor]) -> int:
    own = model.state_dict()
    matched = {k: v for k, v in tensors.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(matched, strict=False)
    return len(matched)
