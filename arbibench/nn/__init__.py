"""Binarization building blocks: named sign quantizers with surrogate gradients and binary layers."""

from arbibench.nn.layers import BinaryConv2d, BinaryLinear, count_binary_layers
from arbibench.nn.quantizers import (
    SURROGATES,
    ApproxSign,
    Quantizer,
    SignQuantizer,
    SteSign,
    binary_sign,
    get_quantizer,
    use_surrogate,
)

__all__ = [
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
