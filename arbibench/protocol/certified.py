"""The certified lower end of eps*: a verifier's radius per image beside the attacks' eps*, on the same images.

Every attack-based eps* is an upper bound: some attack found an example that close. A verifier proves the other end:
no input within its radius is misclassified (:func:`arbibench.verify.certify`). Joined on the eps* search's own images,
``certified_i <= eps*_i`` for every image, so the medians bracket the true median too: the card's eps* row becomes
``[certified, attacked]``. The verifier is slow (seconds to tens of seconds per image on a CPU), so the protocol runs
it only when asked (``protocol run --certify``), and each image's certificate is committed to the run's store as it
finishes: a rerun certifies only the images missing (the key: the model's hash and the verifier's settings).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from rich.console import Console
from torch import nn

from arbibench.evaluation.min_perturbation import MinimalPerturbation
from arbibench.evaluation.store import ResultStore, hash_json, hash_model
from arbibench.inference import Inference
from arbibench.verify.certify import RADIUS_MAX, RADIUS_MIN, ImageCertificate, certify

#: Part of every certificate key: raised when the verifier's verdicts change, so stored certificates of an earlier
#: verifier are not read as this one's.
REVISION = 1


# The verifier's settings of `protocol run --certify` (the defaults of attach_certificates): part of the store key.
STEPS, MAX_NODES, CORNERS = 5, 256, 50


def certificate_key(model: nn.Module, semantics: str, settings: dict[str, float | int]) -> str:
    """The store key of the certificates of ``model`` under ``semantics`` with the verifier's ``settings``."""
    return hash_json({"model_hash": hash_model(model), "semantics": semantics, "revision": REVISION, **settings})


def verifier_settings(radius_min: float = RADIUS_MIN, radius_max: float = RADIUS_MAX, steps: int = STEPS,
                      max_nodes: int = MAX_NODES, corners: int = CORNERS) -> dict[str, float | int]:
    """The settings a certificate's key holds (the protocol's, unless told otherwise)."""
    return {"radius_min": radius_min, "radius_max": radius_max, "steps": steps, "max_nodes": max_nodes,
            "corners": corners}


def stored_certificates(model: nn.Module, sample_index: np.ndarray, store: ResultStore, *,
                        semantics: Inference | str) -> dict[int, dict[str, Any]]:
    """The certificates ``store`` holds for these images of ``model`` at the protocol's verifier settings, by sample
    index: what a progress report counts while a ``--certify`` run is under way."""
    key = certificate_key(model, Inference.parse(semantics).value, verifier_settings())
    wanted = {int(i) for i in sample_index}
    return {i: r for i, r in store.certificates(key).items() if i in wanted}


def attach_certificates(found: MinimalPerturbation, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                        semantics: Inference | str, device: str | torch.device | None = None,
                        console: Console | None = None, store: ResultStore | None = None,
                        model_name: str = "model", radius_min: float = RADIUS_MIN,
                        radius_max: float = RADIUS_MAX, steps: int = STEPS, max_nodes: int = MAX_NODES,
                        corners: int = CORNERS) -> MinimalPerturbation:
    """``found`` with ``certified`` set: each image's certified Linf radius (0 where none was verified or the image is
    misclassified) under ``semantics`` (the network whose eps* was searched); the other keywords are the verifier's
    (:func:`arbibench.verify.certify`). With a ``store``, the certificates it holds for these images are read back
    and each new one is committed as it finishes."""
    if found.norm != "Linf":
        raise ValueError(f"the verifier certifies Linf radii; this eps* is {found.norm}")
    if len(found.eps_star) != len(y):
        raise ValueError(f"eps* holds {len(found.eps_star)} images, the verifier was given {len(y)}")
    mode = Inference.parse(semantics).value
    key = certificate_key(model, mode, verifier_settings(radius_min, radius_max, steps, max_nodes, corners))
    radii: dict[int, float] = {}
    if store is not None:
        radii = {i: float(r["certified"]) for i, r in store.certificates(key).items()}
    todo = np.array([int(i) not in radii for i in found.sample_index], dtype=bool)
    if console is not None and (~todo).any():
        console.print(f"{model_name}: {int((~todo).sum())} of {len(todo)} certificates read back from the store")

    def done(c: ImageCertificate) -> None:
        radii[c.index] = c.certified
        if store is not None:
            store.commit_certificate(key, model_name, c.index, c.to_dict())
        if console is not None:
            console.print(f"certified image {c.index}: {c.certified * 255:.2g}/255 ({c.seconds:.0f} s)")

    if todo.any():
        pick = torch.from_numpy(np.nonzero(todo)[0])
        certify(model, x[pick], y[pick], radius_min=radius_min, radius_max=radius_max, steps=steps,
                max_nodes=max_nodes, corners=corners, semantics=mode,
                indices=torch.as_tensor(found.sample_index)[pick], device=device, on_image=done)
    found.certified = np.array([radii[int(i)] for i in found.sample_index], dtype=float)
    return found
