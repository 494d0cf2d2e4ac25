"""arbibench: adversarial robustness benchmark for binarized neural networks (ARBiBench protocol).

The public API in RobustBench's words::

    from arbibench import benchmark, load_model
    result = benchmark(load_model("resnet20_bnn"), n_examples=1000, threat_model="Linf", eps=8/255)
    print(result.report.acc, result.report.rs)
"""

from arbibench.data import load_cifar10, load_imagenet
from arbibench.evaluation.benchmark import benchmark
from arbibench.evaluation.inputs import clean_accuracy
from arbibench.evaluation.model_import import import_checkpoint
from arbibench.evaluation.result import BenchmarkResult
from arbibench.models.zoo import load_model
from arbibench.version import __version__

__all__ = [
    "__version__",
    "BenchmarkResult",
    "benchmark",
    "clean_accuracy",
    "import_checkpoint",
    "load_cifar10",
    "load_imagenet",
    "load_model",
]
