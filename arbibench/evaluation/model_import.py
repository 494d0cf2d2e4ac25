"""``import_checkpoint``: a paper's own checkpoint into a user model folder, checked, with a card that says how.

The file is read with the restricted unpickler (only with ``trust_pickle=True``), converted by its source's importer
(:mod:`arbibench.models.importers`), and its clean accuracy on the first test images is measured and compared with the
paper's figure when the user gives one. Only when every check passes are ``<name>.safetensors`` and ``<name>.json``
written, each atomically (:mod:`arbibench.files`) and both or neither, so a failed import leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as save_tensors

from arbibench.data.datasets import count_test_images, load_dataset
from arbibench.evaluation.inputs import clean_accuracy
from arbibench.files import atomic_write_bytes, atomic_write_text, sha256_file
from arbibench.models.importers import build_converted_model, get_source, read_torch_checkpoint
from arbibench.models.methods import get_method
from arbibench.models.zoo import ZOO, user_model_dir

ACCURACY_TOLERANCE = 2.0  # percentage points between the measured and the paper's clean accuracy
DEFAULT_CHECK_IMAGES = 1000  # test images of the clean-accuracy check, or all the data folder holds when fewer
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _check_name(name: str, folder: Path, overwrite: bool) -> None:
    if not _NAME.fullmatch(name) or name.endswith((".json", ".safetensors")):
        raise ValueError(f"model name {name!r}: use letters, digits, '_', '-' and '.', starting with a letter or digit")
    if name in ZOO:
        raise ValueError(f"model name {name!r} is a zoo model's name; choose another --name (e.g. {name}_official)")
    existing = [p.name for p in (folder / f"{name}.safetensors", folder / f"{name}.json") if p.exists()]
    if existing and not overwrite:
        # weights without a card: what an older import left when its card could not be written
        lone = " (weights without a card, as a failed import left them)" if existing == [f"{name}.safetensors"] else ""
        raise ValueError(
            f"{folder} already holds {', '.join(existing)}{lone}; choose another --name or pass --overwrite"
        )


def _check_numbers(expect_acc: float | None, options: dict[str, float]) -> None:
    """Refuse before any work a figure the accuracy check cannot use: NaN passes every comparison, and 150 or -5
    would fail only after the conversion."""
    if expect_acc is not None and not (math.isfinite(expect_acc) and 0 <= expect_acc <= 100):
        raise ValueError(
            f"--expect-acc (expect_acc=) is the paper's top-1 accuracy in percent, a number from 0 to 100 such as "
            f"87.5; got {expect_acc:g}"
        )
    for option, value in options.items():
        if not math.isfinite(value):
            raise ValueError(f"--{option} must be a finite number, got {value:g}")


def _write_atomic(folder: Path, name: str, model: torch.nn.Module, card: dict[str, Any]) -> Path:
    """Write ``<name>.safetensors`` and ``<name>.json``, each atomically, and both or neither: weights without a card
    are a name that a re-import refuses as taken and that eval does not know. The card is rendered (so checked as
    JSON) before anything is written, and the weights go again if the card cannot be written."""
    weights, card_path = folder / f"{name}.safetensors", folder / f"{name}.json"
    data = save_tensors({k: v.contiguous() for k, v in model.state_dict().items()})
    card["checkpoint"], card["sha256"] = weights.name, hashlib.sha256(data).hexdigest()
    try:
        text = json.dumps(card, indent=2, allow_nan=False) + "\n"
    except ValueError as e:
        raise ValueError(f"the card of {name!r} cannot be written as JSON ({e}); nothing was written") from e
    atomic_write_bytes(data, weights)
    try:
        return atomic_write_text(text, card_path)
    except BaseException:
        for written in (weights, card_path):  # with --overwrite, an older card would name the weights just replaced
            if written.is_file():
                written.unlink()
        raise


def import_checkpoint(
    source: str,
    checkpoint: str | os.PathLike[str],
    arch: str,
    name: str,
    model_dir: str | os.PathLike[str] | None = None,
    *,
    trust_pickle: bool = False,
    options: dict[str, float] | None = None,
    expect_acc: float | None = None,
    n_examples: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> Path:
    """Import a paper's checkpoint as ``name`` into ``model_dir``; returns the card's path.

    ``source`` is one of :data:`arbibench.models.importers.SOURCES` and ``arch`` one of its published models.
    ``trust_pickle=True`` is required: the official files are pickles (read with ``weights_only=True``).
    ``options`` holds the method's hyper-parameters the file does not store (BiPer: ``{"freq": 20}``).
    The clean accuracy on the first ``n_examples`` test images goes into the card (default: the first
    :data:`DEFAULT_CHECK_IMAGES`, or all the data folder holds when fewer, as a 100-image ImageNet sample); with
    ``expect_acc`` (the paper's top-1, in %) a gap over 2 points is an error.
    Nothing is written unless every check passes.
    """
    src = get_source(source)
    published = src.model(arch)
    folder = Path(model_dir or user_model_dir())
    _check_name(name, folder, overwrite)
    options = dict(options or {})
    missing = [o for o in src.options if o not in options]
    unknown = [o for o in options if o not in src.options]
    if missing:
        raise ValueError(f"source {source!r} needs {', '.join('--' + o for o in missing)}: {src.option_help}")
    if unknown:
        raise ValueError(f"source {source!r} takes no option {', '.join(unknown)}")
    if n_examples is not None and n_examples < 1:
        raise ValueError(f"n_examples must be >= 1 (the clean-accuracy check), got {n_examples}")
    _check_numbers(expect_acc, options)
    path = Path(checkpoint)
    state = read_torch_checkpoint(path, trust_pickle=trust_pickle, source=src.name)
    model, conversion = build_converted_model(src, published, state, options)
    if n_examples is None:
        n_examples = min(DEFAULT_CHECK_IMAGES, count_test_images(src.dataset, data_dir))
    x, y, _ = load_dataset(src.dataset, n_examples, data_dir, None)
    acc = clean_accuracy(model, x, y)
    if expect_acc is not None and abs(100 * acc - expect_acc) > ACCURACY_TOLERANCE:
        raise ValueError(
            f"{path.name} imported as {source} {arch} classifies {100 * acc:.2f}% of the first {len(y)} test images "
            f"correctly, {abs(100 * acc - expect_acc):.2f} points from the expected {expect_acc:g}%: the conversion "
            f"or the file is wrong (another architecture or training stage, a different --arch"
            f"{', another ' + ', '.join('--' + o for o in src.options) if src.options else ''}, or a damaged file). "
            "Nothing was written."
        )
    method = get_method(published.method)
    card = {
        "name": name,
        "source": src.name,
        "paper": src.paper,
        "repository": src.repository,
        "official_model": published.official_name,
        "paper_acc": published.paper_acc,
        "source_file": path.name,
        "source_sha256": sha256_file(path),
        "dataset": src.dataset,
        "architecture": published.arch,
        "method": published.method,
        "method_paper": method.paper,
        "bits_weights": method.bits_weights,
        "bits_activations": method.bits_activations,
        "params": sum(p.numel() for p in model.parameters()),
        "normalization": {"mean": list(src.mean), "std": list(src.std)},
        "options": options,
        "sign_convention": src.sign_convention,
        "keys": conversion.keys,
        "clean_acc": acc,
        "clean_acc_n_examples": len(y),
        "expected_acc": expect_acc,
        "imported_with": f"arbibench, torch {torch.__version__}",
    }
    return _write_atomic(folder, name, model, card)
