"""Binarization building blocks: named sign quantizers with surrogate gradients, weight binarizers with the scaling
of each BNN family, ReActNet's RPReLU, and binary layers."""

from arbibench.nn.activations import ACTIVATIONS, RPReLU, build_activation
from arbibench.nn.layers import BinaryConv2d, BinaryLinear, count_binary_layers
from arbibench.nn.quantizers import (
    PARAMETRIC_SURROGATES,
    QUANTIZERS,
    SURROGATES,
    ApproxSign,
    EDESign,
    Quantizer,
    RSign,
    ScheduledSign,
    SignQuantizer,
    SteSign,
    binary_sign,
    canonical_surrogate,
    ede_surrogate,
    get_quantizer,
    get_surrogate,
    set_training_progress,
    straight_through,
    tanh_surrogate,
    use_surrogate,
)
from arbibench.nn.scalings import ChannelScaledSign, LayerScaledSign, LearnedScaleSign, LibraPBSign

__all__ = [
    "ACTIVATIONS",
    "PARAMETRIC_SURROGATES",
    "QUANTIZERS",
    "SURROGATES",
    "ApproxSign",
    "BinaryConv2d",
    "BinaryLinear",
    "ChannelScaledSign",
    "EDESign",
    "LayerScaledSign",
    "LearnedScaleSign",
    "LibraPBSign",
    "Quantizer",
    "RPReLU",
    "RSign",
    "ScheduledSign",
    "SignQuantizer",
    "SteSign",
    "binary_sign",
    "build_activation",
    "canonical_surrogate",
    "count_binary_layers",
    "ede_surrogate",
    "get_quantizer",
    "get_surrogate",
    "set_training_progress",
    "straight_through",
    "tanh_surrogate",
    "use_surrogate",
]
