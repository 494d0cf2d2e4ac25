"""Binarization building blocks: named sign quantizers with surrogate gradients and binary layers."""

from arbibench.nn.layers import BinaryConv2d, BinaryLinear, count_binary_layers
from arbibench.nn.quantizers import (
    PARAMETRIC_SURROGATES,
    SURROGATES,
    ApproxSign,
    Quantizer,
    SignQuantizer,
    SteSign,
    binary_sign,
    canonical_surrogate,
    get_quantizer,
    get_surrogate,
    tanh_surrogate,
    use_surrogate,
)

__all__ = [
    "PARAMETRIC_SURROGATES",
    "canonical_surrogate",
    "get_surrogate",
    "tanh_surrogate",
    "SURROGATES",
    "ApproxSign",
    "BinaryConv2d",
    "BinaryLinear",
    "Quantizer",
    "SignQuantizer",
    "SteSign",
    "binary_sign",
    "count_binary_layers",
    "get_quantizer",
    "use_surrogate",
]
