"""Certified robustness of binary networks: sound interval bounds through the exact sign semantics, a bounded
branch-and-bound over undecided signs, and the certified radius per image (the lower end of eps*)."""

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
