"""Reading an official checkpoint: a pickle, so only with the user's explicit consent and only tensors.

The papers' code saves ``torch.save`` pickles (``model_best.pth.tar``, ``checkpoint.pth.tar``, IR-Net's ``model.th``),
often from a GPU and wrapped in ``nn.DataParallel``. They are read with ``torch.load(weights_only=True,
map_location="cpu")``: PyTorch's restricted unpickler, which rebuilds tensors and plain containers and refuses any
other class, so a file cannot run code; CUDA storages land on the CPU. Nothing is read unless the caller passes
``trust_pickle=True`` (``--trust-pickle`` on the command line).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import TypeGuard

import torch

# where the papers' training scripts put the state dict inside the saved object, tried in this order
STATE_DICT_KEYS = ("state_dict", "model", "net", "model_state_dict")
DATA_PARALLEL_PREFIX = "module."


class PickleRefusedError(ValueError):
    """A pickle checkpoint was offered without the explicit consent to read it."""


def _is_state_dict(obj: object) -> TypeGuard[Mapping[str, torch.Tensor]]:
    return isinstance(obj, Mapping) and bool(obj) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()
    )


def extract_state_dict(obj: object, path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The state dict inside a loaded checkpoint: the object itself, or nested under ``state_dict`` / ``model``.

    A ``module.`` prefix (``nn.DataParallel``) is stripped from every key that has it.
    """
    found = obj if _is_state_dict(obj) else None
    if found is None and isinstance(obj, Mapping):
        found = next((obj[k] for k in STATE_DICT_KEYS if k in obj and _is_state_dict(obj[k])), None)
    if found is None:
        what = f"a dict with keys {sorted(map(str, obj))[:8]}" if isinstance(obj, Mapping) else type(obj).__name__
        raise ValueError(
            f"{path} holds {what}, not a state dict (a dict of tensors, itself or under one of "
            f"{', '.join(STATE_DICT_KEYS)}). Pass the file the paper's code saves (model_best.pth.tar, model.th)."
        )
    state = {k.removeprefix(DATA_PARALLEL_PREFIX): v for k, v in found.items()}
    if len(state) != len(found):
        raise ValueError(f"{path}: keys with and without the 'module.' prefix collide; the state dict is not one model")
    return state


def read_torch_checkpoint(
    path: str | os.PathLike[str], *, trust_pickle: bool = False, source: str | None = None
) -> dict[str, torch.Tensor]:
    """The state dict of a ``torch.save`` file, read with the restricted unpickler, on the CPU.

    Raises :class:`PickleRefusedError` without ``trust_pickle``, FileNotFoundError for a missing file, and ValueError
    for a file that is truncated, not a ``torch.save`` file, holds objects other than tensors and containers, or
    holds no state dict. ``source`` (e.g. ``"recu"``) names whose checkpoint the file was meant to be.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    if not trust_pickle:
        raise PickleRefusedError(
            f"{path} is a pickle (torch.save) file; arbibench reads one only when you pass --trust-pickle "
            "(Python: trust_pickle=True). It is then loaded with torch.load(weights_only=True, map_location='cpu'): "
            "PyTorch's restricted unpickler, which builds tensors and plain containers only and refuses any other "
            "object, so the file cannot run code."
        )
    # torch's own text is several lines of advice for its users (weights_only=False, "please file an issue") that
    # does not apply here; one line says what is wrong with the file
    unreadable = (
        f"{path} is not a readable {source + ' ' if source else ''}checkpoint: it is truncated or not a torch.save "
        "file"
    )
    try:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        refused = "Unsupported global" in str(e) or "not an allowed global" in str(e)
        if refused:
            raise ValueError(
                f"{path} holds objects other than tensors and containers, which the restricted unpickler refuses "
                f"({_first_line(e, 'GLOBAL')}). Re-save only the state dict from the paper's code: "
                "torch.save(checkpoint['state_dict'], 'weights.pth')."
            ) from e
        raise ValueError(unreadable) from e
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, IndexError) as e:
        raise ValueError(f"{unreadable} ({_first_line(e)})") from e
    return extract_state_dict(obj, path)


def _first_line(error: Exception, containing: str = "") -> str:
    """The sentence of torch's message that says what it met: the first line's (or the first line containing
    ``containing``) first sentence, without the advice that follows it."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    line = next((line for line in lines if containing and containing in line), lines[0])
    return line.split(". ")[0].rstrip(".")[:200]
