"""The certified lower end of eps*: a verifier's radius per image beside the attacks' eps*, on the same images.

Every attack-based eps* is an upper bound: some attack found an example that close. A verifier proves the other end:
no input within its radius is misclassified (:func:`arbibench.verify.certify`). Joined on the eps* search's own images,
``certified_i <= eps*_i`` for every image, so the medians bracket the true median too: the card's eps* row becomes
``[certified, attacked]``. The verifier is slow (tens of seconds per image on a CPU) and stores nothing, so the
protocol runs it only when asked (``protocol run --certify``).
"""

from __future__ import annotations

import numpy as np
import torch
from rich.console import Console
from torch import nn

from arbibench.evaluation.min_perturbation import MinimalPerturbation
from arbibench.inference import Inference
from arbibench.verify.certify import RADIUS_MAX, RADIUS_MIN, ImageCertificate, certify


def attach_certificates(found: MinimalPerturbation, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                        semantics: Inference | str, device: str | torch.device | None = None,
                        console: Console | None = None, radius_min: float = RADIUS_MIN,
                        radius_max: float = RADIUS_MAX, steps: int = 5, max_nodes: int = 256,
                        corners: int = 50) -> MinimalPerturbation:
    """``found`` with ``certified`` set: each image's certified Linf radius (0 where none was verified or the image is
    misclassified) under ``semantics`` (the network whose eps* was searched); the other keywords are the verifier's
    (:func:`arbibench.verify.certify`)."""
    if found.norm != "Linf":
        raise ValueError(f"the verifier certifies Linf radii; this eps* is {found.norm}")
    if len(found.eps_star) != len(y):
        raise ValueError(f"eps* holds {len(found.eps_star)} images, the verifier was given {len(y)}")

    def note(c: ImageCertificate) -> None:
        if console is not None:
            console.print(f"certified image {c.index}: {c.certified * 255:.2g}/255 ({c.seconds:.0f} s)")

    result = certify(model, x, y, radius_min=radius_min, radius_max=radius_max, steps=steps, max_nodes=max_nodes,
                     corners=corners, semantics=Inference.parse(semantics).value,
                     indices=torch.as_tensor(found.sample_index), device=device, on_image=note)
    found.certified = np.array([c.certified for c in result.images], dtype=float)
    return found
