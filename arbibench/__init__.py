"""arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol).

The public API in RobustBench's words::

    from arbibench import benchmark, load_model
    result = benchmark(load_model("resnet20_bnn"), n_examples=1000, threat_model="Linf", eps=8/255)
    print(result.report.acc, result.report.rs)

The names are loaded on first use (PEP 562 ``__getattr__``): ``import arbibench.cards`` (the torch-free card schema),
the leaderboard and ``arbibench --help`` run this file too, and must not pay seconds for ``import torch``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from arbibench.version import __version__

if TYPE_CHECKING:
    from arbibench.data import load_cifar10, load_imagenet
    from arbibench.evaluation.benchmark import benchmark
    from arbibench.evaluation.inputs import clean_accuracy
    from arbibench.evaluation.model_import import import_checkpoint
    from arbibench.evaluation.result import BenchmarkResult
    from arbibench.inference import Inference
    from arbibench.models.zoo import load_model
    from arbibench.verify.certify import CertificationResult, certify

# public name -> the module that defines it
_LAZY: dict[str, str] = {
    "BenchmarkResult": "arbibench.evaluation.result",
    "CertificationResult": "arbibench.verify.certify",
    "Inference": "arbibench.inference",
    "benchmark": "arbibench.evaluation.benchmark",
    "certify": "arbibench.verify.certify",
    "clean_accuracy": "arbibench.evaluation.inputs",
    "import_checkpoint": "arbibench.evaluation.model_import",
    "load_cifar10": "arbibench.data",
    "load_imagenet": "arbibench.data",
    "load_model": "arbibench.models.zoo",
}

__all__ = [
    "__version__",
    "BenchmarkResult",
    "CertificationResult",
    "Inference",
    "benchmark",
    "certify",
    "clean_accuracy",
    "import_checkpoint",
    "load_cifar10",
    "load_imagenet",
    "load_model",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'arbibench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
