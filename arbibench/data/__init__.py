"""Datasets as [0, 1] NCHW float tensors with the dataset indices of every sample.

The names load on first use (PEP 562 ``__getattr__``): the commands' ``--help`` and the torch-free layers pass through
this package without paying for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbibench.lazy import lazy_exports

if TYPE_CHECKING:
    from arbibench.data.cifar10 import (
        CIFAR10_CLASSES,
        DataFormatError,
        default_data_dir,
        load_cifar10,
        read_cifar10_arrays,
    )
    from arbibench.data.datasets import DATASETS, load_dataset
    from arbibench.data.download import DownloadError, download_and_extract
    from arbibench.data.imagenet import PREPROCESSINGS, load_imagenet
    from arbibench.data.subsets import select_indices

# public name -> the module that defines it
_LAZY: dict[str, str] = {
    "CIFAR10_CLASSES": "arbibench.data.cifar10",
    "DataFormatError": "arbibench.data.cifar10",
    "default_data_dir": "arbibench.data.cifar10",
    "load_cifar10": "arbibench.data.cifar10",
    "read_cifar10_arrays": "arbibench.data.cifar10",
    "DATASETS": "arbibench.data.datasets",
    "load_dataset": "arbibench.data.datasets",
    "DownloadError": "arbibench.data.download",
    "download_and_extract": "arbibench.data.download",
    "PREPROCESSINGS": "arbibench.data.imagenet",
    "load_imagenet": "arbibench.data.imagenet",
    "select_indices": "arbibench.data.subsets",
}

__all__ = [
    "CIFAR10_CLASSES",
    "DATASETS",
    "DataFormatError",
    "DownloadError",
    "PREPROCESSINGS",
    "default_data_dir",
    "download_and_extract",
    "load_cifar10",
    "load_dataset",
    "load_imagenet",
    "read_cifar10_arrays",
    "select_indices",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
