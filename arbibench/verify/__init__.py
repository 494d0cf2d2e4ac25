"""Certified robustness of binary networks: sound interval bounds through the exact sign semantics, a bounded
branch-and-bound over undecided signs, and the certified radius per image (the lower end of eps*).

The names load on first use (PEP 562), so that ``arbibench verify --help`` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbibench.lazy import lazy_exports

if TYPE_CHECKING:
    from arbibench.verify.branch import Search, branch_and_bound
    from arbibench.verify.certify import (
        FALSIFIED,
        UNKNOWN,
        VERIFIED,
        CertificationResult,
        ImageCertificate,
        Verdict,
        certify,
        verdict,
    )
    from arbibench.verify.network import SEMANTICS, NetworkBounds, UnsupportedLayerError

# public name -> the module that defines it
_LAZY: dict[str, str] = {
    "Search": "arbibench.verify.branch",
    "branch_and_bound": "arbibench.verify.branch",
    "FALSIFIED": "arbibench.verify.certify",
    "UNKNOWN": "arbibench.verify.certify",
    "VERIFIED": "arbibench.verify.certify",
    "CertificationResult": "arbibench.verify.certify",
    "ImageCertificate": "arbibench.verify.certify",
    "Verdict": "arbibench.verify.certify",
    "certify": "arbibench.verify.certify",
    "verdict": "arbibench.verify.certify",
    "SEMANTICS": "arbibench.verify.network",
    "NetworkBounds": "arbibench.verify.network",
    "UnsupportedLayerError": "arbibench.verify.network",
}

__all__ = [
    "FALSIFIED",
    "SEMANTICS",
    "UNKNOWN",
    "VERIFIED",
    "CertificationResult",
    "ImageCertificate",
    "NetworkBounds",
    "Search",
    "UnsupportedLayerError",
    "Verdict",
    "branch_and_bound",
    "certify",
    "verdict",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
