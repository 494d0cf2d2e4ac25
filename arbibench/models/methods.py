"""BNN method presets: a method is a handful of choices, not a subclass tree.

A preset names the quantizers of the binary convolutions, the activation between them, and the paper it follows.
The first convolution and the last linear layer always stay full precision (as in every BNN paper compared by
ARBiBench), so a preset only governs the inner convolutions of a backbone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    input_quantizer: str | None
    kernel_quantizer: str | None
    activation: str  # "relu" or "hardtanh"
    paper: str
    bits_weights: int = 1
    bits_activations: int = 1

    @property
    def is_binary(self) -> bool:
        return self.kernel_quantizer is not None


METHODS: dict[str, Method] = {
    # Full precision twin: same backbone, ordinary convolutions, ReLU.
    "fp": Method("fp", None, None, "relu", "He et al., Deep Residual Learning, CVPR 2016", 32, 32),
    # BinaryNet: sign on weights and activations, clipped straight-through estimator, no weight scaling;
    # hardtanh between layers keeps activations in the STE's non-zero-gradient range.
    "bnn": Method("bnn", "ste_sign", "ste_sign", "hardtanh", "Hubara et al., Binarized Neural Networks, NeurIPS 2016"),
}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(sorted(METHODS))}")
    return METHODS[name]
