"""The deployed BNN: bit-packed XNOR/AND-popcount inference of any binary arbibench model.

``deploy(model)`` turns an eval-mode BNN (the *simulation*) into its *deployed* form, whose binary convolutions run
on packed bits through a C kernel (compiled on first use), numba, or the pure-torch *emulator*; the three semantics
are defined in :mod:`arbibench.deploy.semantics`. ``deployed(model)`` caches the deployed form per model.
"""

from __future__ import annotations

from arbibench.deploy.build import KernelUnavailableError
from arbibench.deploy.cache import deployed
from arbibench.deploy.conv_kernels import CONV_KERNELS, ConvKernel, get_conv_kernel
from arbibench.deploy.convert import DeployedConv2d, DeployedModel, DeployError, deploy
from arbibench.deploy.semantics import (
    DEPLOYED,
    EMULATOR,
    SEMANTICS,
    SIGN_CONVENTIONS,
    SIMULATION,
    BinaryConvSpec,
)

__all__ = [
    "CONV_KERNELS",
    "DEPLOYED",
    "EMULATOR",
    "SEMANTICS",
    "SIGN_CONVENTIONS",
    "SIMULATION",
    "ConvKernel",
    "BinaryConvSpec",
    "DeployError",
    "DeployedConv2d",
    "DeployedModel",
    "KernelUnavailableError",
    "deploy",
    "deployed",
    "get_conv_kernel",
]
