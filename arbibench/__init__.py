"""arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol)."""

__version__ = "0.1.0"
